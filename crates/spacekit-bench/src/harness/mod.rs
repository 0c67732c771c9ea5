//! The framework every benchmark uses: timing ([`Timer`], [`Op`]),
//! verification ([`verify`], [`verify_lists`]), the [`Comparison`] that
//! chains them, output ([`Row`], [`Report`], [`Table`], [`Bars`]) and the
//! memory-bandwidth limit ([`membw`]).

mod compare;
pub mod membw;
mod output;
mod timer;
mod verify;

pub use compare::{Comparison, Medians};
pub use output::{
    check_writable, fmt_ns, fmt_ratio, progress, write_whole, Bar, Bars, Report, Row, Table,
};
pub use timer::{batch, median, Op, Sampled, Timer};
pub use verify::{inject_mismatch, verify, verify_lists};
