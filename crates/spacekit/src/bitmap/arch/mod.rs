//! Word-skipping primitives, one instantiation per [`Level`].
//!
//! Long scans in the bitmap engine spend their time skipping words that cannot
//! hold an answer: all-zero words when looking for a set bit, all-one words when
//! looking for a clear bit, and words without a zero byte/half/quarter when
//! looking for a long clear run. Those loops live here, in two
//! instantiations:
//!
//! * [`scalar`] — portable Rust, one word (or a haszero bit trick) at a time;
//! * `x86_64::avx2` — four 256-bit loads per step (128 bytes).
//!
//! Every search carries the [`Level`] its bitmap was built with (detected
//! once by [`crate::arch`]) by value, and each entry point below matches it
//! once per call, never per word; tests run every level of
//! [`Level::available`] through the same assertions.

pub(crate) mod scalar;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

use crate::arch::{Level, LevelKind};
pub(crate) use scalar::Chunk;

/// Which instantiation a level runs.
#[derive(Clone, Copy)]
enum Path {
    Scalar,
    /// Only built from a level of kind `Avx2` or above, which proves AVX2,
    /// POPCNT and BMI1.
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

/// The loops `level` runs. Every level is named: a new one must be mapped
/// here before it compiles.
#[inline(always)]
fn path(level: Level) -> Path {
    match level.kind() {
        LevelKind::Scalar => Path::Scalar,
        // No AVX-512 loops yet; an AVX-512 level includes everything the
        // AVX2 loops use.
        #[cfg(target_arch = "x86_64")]
        LevelKind::Avx2 | LevelKind::Avx512 => Path::Avx2,
        // Never built off x86_64.
        #[cfg(not(target_arch = "x86_64"))]
        LevelKind::Avx2 | LevelKind::Avx512 => Path::Scalar,
    }
}

/// Index of the first word at or after `from` that differs from `pat`
/// (`pat` = 0: first non-zero word; `pat` = !0: first word with a clear bit).
// Out of line on purpose: callers look a few words ahead inline first, so
// only long skips get here, and keeping both loops out of the callers
// keeps the hot searches small enough to inline.
#[inline(never)]
pub(crate) fn first_diff(level: Level, words: &[u64], from: usize, pat: u64) -> Option<usize> {
    match path(level) {
        Path::Scalar => scalar::first_diff(words, from, pat),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Path::Avx2` comes from a `Level` of kind `Avx2` or above,
        // which `crate::arch` only builds once the CPU reported AVX2 (and
        // POPCNT and BMI1).
        Path::Avx2 => unsafe { x86_64::avx2::first_diff(words, from, pat) },
    }
}

/// Index of the last word strictly before `end` that differs from `pat`.
// Out of line on purpose, as `first_diff`.
#[inline(never)]
pub(crate) fn last_diff(level: Level, words: &[u64], end: usize, pat: u64) -> Option<usize> {
    match path(level) {
        Path::Scalar => scalar::last_diff(words, end, pat),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `first_diff`, the path proves AVX2 is present.
        Path::Avx2 => unsafe { x86_64::avx2::last_diff(words, end, pat) },
    }
}

/// Bit position of the first all-zero, `chunk`-aligned lane of `chunk` bits in
/// `words[from..]`.
// Out of line on purpose, as `first_diff`.
#[inline(never)]
pub(crate) fn first_zero_chunk(
    level: Level,
    words: &[u64],
    from: usize,
    chunk: Chunk,
) -> Option<usize> {
    match path(level) {
        Path::Scalar => scalar::first_zero_chunk(words, from, chunk),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `first_diff`, the path proves AVX2 is present.
        Path::Avx2 => unsafe { x86_64::avx2::first_zero_chunk(words, from, chunk) },
    }
}

/// Number of set bits in `words`.
#[inline(never)]
pub(crate) fn count_ones(level: Level, words: &[u64]) -> usize {
    match path(level) {
        Path::Scalar => scalar::count_ones(words),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Path::Avx2` proves AVX2 and POPCNT (see `first_diff`).
        Path::Avx2 => unsafe { x86_64::avx2::count_ones(words) },
    }
}

/// The word holding the `n`-th set bit and its rank there, or
/// `Err(n - total)`.
#[inline(never)]
pub(crate) fn nth_word(level: Level, words: &[u64], n: usize) -> Result<(usize, u32), usize> {
    match path(level) {
        Path::Scalar => scalar::nth_word(words, n),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `count_ones`.
        Path::Avx2 => unsafe { x86_64::avx2::nth_word(words, n) },
    }
}
