//! The dirty scanner's per-level kernels, and the dispatch between them.
//!
//! The scanner (`../scan.rs`) is generic: it asks a [`Kernel`] for its three
//! word-parallel pieces, stage 1 of a batch ([`Kernel::marks`]), stage 2
//! for one word ([`Kernel::expand`]) and the parallel scan's sizing pass
//! ([`Kernel::count_edges`]), and is handed to
//! [`run`] as a [`Job`]. `run` matches the [`Level`] once per call and runs
//! the whole job compiled for it:
//!
//! * [`scalar`] — portable Rust, one word at a time;
//! * `x86_64::avx2` — four words per step, the job compiled with AVX2,
//!   POPCNT and BMI1 (`tzcnt`/`blsr` in the expand loop);
//! * `x86_64::avx512` — eight words per step with mask registers,
//!   `vpopcntq` edge counts, and each word's edge positions emitted by one
//!   `vpcompressb` instead of a bit loop.
//!
//! Words come through the [`Words`] trait: one bitmap, or the OR of two.

mod kernel;
mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86_64;

use crate::arch::{Isa, Level};
pub(crate) use kernel::{Job, Kernel, Words};

/// Runs `job` compiled for `level`: one match per call, none per word.
#[inline]
pub(crate) fn run<J: Job>(level: Level, job: J) -> J::Output {
    match level.isa() {
        Isa::Scalar => scalar::run(job),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` comes from a `Level` of kind `Avx2`, which
        // `crate::arch` only builds once the CPU reported AVX2, POPCNT and
        // BMI1.
        Isa::Avx2 => unsafe { x86_64::avx2::run(job) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512` comes from a `Level` of kind `Avx512`, which
        // proves AVX-512 F, BW, VL, VPOPCNTDQ and VBMI2 besides everything
        // the AVX2 level has.
        Isa::Avx512 => unsafe { x86_64::avx512::run(job) },
    }
}
