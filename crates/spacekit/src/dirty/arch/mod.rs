//! The dirty scanner's per-level kernels, and the dispatch between them.
//!
//! The scanner (`../scan.rs`) is generic: it asks a [`Kernel`] for its two
//! word-parallel pieces, stage 1 of a batch ([`Kernel::marks`]) and the
//! parallel scan's sizing pass ([`Kernel::count_edges`]), and is handed to
//! [`run`] as a [`Job`]. `run` matches the [`Level`] once per call and runs
//! the whole job compiled for it:
//!
//! * [`scalar`] — portable Rust, one word at a time;
//! * `x86_64::avx2` — four words per step, the job compiled with AVX2,
//!   POPCNT and BMI1 (`tzcnt`/`blsr` in the expand loop).
//!
//! Words come through the [`Words`] trait: one bitmap, or the OR of two.

mod kernel;
mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86_64;

use crate::arch::{Level, LevelKind};
pub(crate) use kernel::{Job, Kernel, Words};

/// Which kernels a level runs.
#[derive(Clone, Copy)]
enum Path {
    Scalar,
    /// Only built from a level of kind `Avx2` or above, which proves AVX2,
    /// POPCNT and BMI1.
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

/// The kernels `level` runs. Every level is named: a new one must be mapped
/// here before it compiles.
#[inline(always)]
fn path(level: Level) -> Path {
    match level.kind() {
        LevelKind::Scalar => Path::Scalar,
        // No AVX-512 kernels yet; an AVX-512 level includes everything the
        // AVX2 kernels use.
        #[cfg(target_arch = "x86_64")]
        LevelKind::Avx2 | LevelKind::Avx512 => Path::Avx2,
        // Never built off x86_64.
        #[cfg(not(target_arch = "x86_64"))]
        LevelKind::Avx2 | LevelKind::Avx512 => Path::Scalar,
    }
}

/// Runs `job` compiled for `level`: one match per call, none per word.
#[inline]
pub(crate) fn run<J: Job>(level: Level, job: J) -> J::Output {
    match path(level) {
        Path::Scalar => scalar::run(job),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Path::Avx2` comes from a `Level` of kind `Avx2` or above,
        // which `crate::arch` only builds once the CPU reported AVX2, POPCNT
        // and BMI1.
        Path::Avx2 => unsafe { x86_64::avx2::run(job) },
    }
}
