//! Argument parsers shared by every subcommand: numbers and sizes. Each
//! has clap's `value_parser` shape (`fn(&str) -> Result<T, String>`) and
//! its message names the text.

mod num;

pub(crate) use num::{parse_nonzero_size, parse_size, parse_u64};
