//! Word-skipping primitives, one instantiation per [`Level`].
//!
//! Long scans in the bitmap engine spend their time skipping words that cannot
//! hold an answer: all-zero words when looking for a set bit, all-one words when
//! looking for a clear bit, and words without a zero byte/half/quarter when
//! looking for a long clear run. Those loops live here, in two
//! instantiations:
//!
//! * [`scalar`] — portable Rust, one word (or a haszero bit trick) at a time;
//! * `x86_64::avx2` — four 256-bit loads per step (128 bytes); eight,
//!   folded into one lane-wise minimum, for the zero-lane search;
//! * `x86_64::avx512` — four 512-bit loads per step (256 bytes), compares
//!   into mask registers, `vpopcntq` counts.
//!
//! Every search carries the [`Level`] its bitmap was built with (detected
//! once by [`crate::arch`]) by value, and each entry point below matches it
//! once per call, never per word; tests run every level of
//! [`Level::available`] through the same assertions.

pub(crate) mod scalar;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

use crate::arch::{Isa, Level};
pub(crate) use scalar::Chunk;

/// Index of the first word at or after `from` that differs from `pat`
/// (`pat` = 0: first non-zero word; `pat` = !0: first word with a clear bit).
// Out of line on purpose: callers look a few words ahead inline first, so
// only long skips get here, and keeping both loops out of the callers
// keeps the hot searches small enough to inline.
#[inline(never)]
pub(crate) fn first_diff(level: Level, words: &[u64], from: usize, pat: u64) -> Option<usize> {
    match level.isa() {
        Isa::Scalar => scalar::first_diff(words, from, pat),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` comes from a `Level` of kind `Avx2`, which
        // `crate::arch` only builds once the CPU reported AVX2 (and POPCNT
        // and BMI1).
        Isa::Avx2 => unsafe { x86_64::avx2::first_diff(words, from, pat) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512` comes from a `Level` of kind `Avx512`, which
        // proves AVX-512 F, BW, VL and VPOPCNTDQ besides what AVX2 needs.
        Isa::Avx512 => unsafe { x86_64::avx512::first_diff(words, from, pat) },
    }
}

/// Index of the last word strictly before `end` that differs from `pat`.
// Out of line on purpose, as `first_diff`.
#[inline(never)]
pub(crate) fn last_diff(level: Level, words: &[u64], end: usize, pat: u64) -> Option<usize> {
    match level.isa() {
        Isa::Scalar => scalar::last_diff(words, end, pat),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `first_diff`, the path proves AVX2 is present.
        Isa::Avx2 => unsafe { x86_64::avx2::last_diff(words, end, pat) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512` comes from a `Level` of kind `Avx512`, which
        // proves AVX-512 F, BW, VL and VPOPCNTDQ besides what AVX2 needs.
        Isa::Avx512 => unsafe { x86_64::avx512::last_diff(words, end, pat) },
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
    match level.isa() {
        Isa::Scalar => scalar::first_zero_chunk(words, from, chunk),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `first_diff`, the path proves AVX2 is present.
        Isa::Avx2 => unsafe { x86_64::avx2::first_zero_chunk(words, from, chunk) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512` comes from a `Level` of kind `Avx512`, which
        // proves AVX-512 F, BW, VL and VPOPCNTDQ besides what AVX2 needs.
        Isa::Avx512 => unsafe { x86_64::avx512::first_zero_chunk(words, from, chunk) },
    }
}

/// Number of set bits in `words`.
#[inline(never)]
pub(crate) fn count_ones(level: Level, words: &[u64]) -> usize {
    match level.isa() {
        Isa::Scalar => scalar::count_ones(words),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` proves AVX2 and POPCNT (see `first_diff`).
        Isa::Avx2 => unsafe { x86_64::avx2::count_ones(words) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512` comes from a `Level` of kind `Avx512`, which
        // proves AVX-512 F, BW, VL and VPOPCNTDQ besides what AVX2 needs.
        Isa::Avx512 => unsafe { x86_64::avx512::count_ones(words) },
    }
}

/// The word holding the `n`-th set bit and its rank there, or
/// `Err(n - total)`.
#[inline(never)]
pub(crate) fn nth_word(level: Level, words: &[u64], n: usize) -> Result<(usize, u32), usize> {
    match level.isa() {
        Isa::Scalar => scalar::nth_word(words, n),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `count_ones`.
        Isa::Avx2 => unsafe { x86_64::avx2::nth_word(words, n) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512` comes from a `Level` of kind `Avx512`, which
        // proves AVX-512 F, BW, VL and VPOPCNTDQ besides what AVX2 needs.
        Isa::Avx512 => unsafe { x86_64::avx512::nth_word(words, n) },
    }
}

#[cfg(test)]
mod tests {
    //! Every level's primitives against the scalar ones, directly: the
    //! bitmap searches look a few words ahead inline before calling these,
    //! so only long stretches reach the vector loops, and this drives them
    //! with long stretches of the searched-over pattern, every alignment of
    //! the slice and answers in every lane of a step.
    use super::*;
    use crate::test_rng::Rng;
    use alloc::vec::Vec;

    /// `n` words equal to `pat` but for a few words at random positions
    /// (each a random word, or `pat` with one bit flipped).
    fn stretch(rng: &mut Rng, n: usize, pat: u64, odd: usize) -> Vec<u64> {
        let mut w = alloc::vec![pat; n];
        for _ in 0..odd {
            if n == 0 {
                break;
            }
            let i = rng.below(n as u64) as usize;
            w[i] = if rng.below(2) == 0 {
                rng.next()
            } else {
                pat ^ (1 << rng.below(64))
            };
        }
        w
    }

    #[test]
    fn every_level_agrees_with_scalar() {
        let mut rng = Rng(0xA512_0001);
        let chunks = [Chunk::B8, Chunk::B16, Chunk::B32, Chunk::B64];
        for case in 0..3000 {
            let n = rng.below(if case % 10 == 0 { 2000 } else { 300 }) as usize;
            let pat = [0, !0, 0x0101_0101_0101_0101][case % 3];
            let odd = rng.below(4) as usize;
            let backing = stretch(&mut rng, n + 8, pat, odd);
            // Every alignment of the slice against 64-byte lines.
            let skew = rng.below(8) as usize;
            let words = &backing[skew..skew + n];
            let from = rng.below(n as u64 + 2) as usize;
            let end = rng.below(n as u64 + 2) as usize;
            let chunk = chunks[case % 4];
            // Zero chunks: words that are all ones but for a few zero lanes.
            let lanes: Vec<u64> = words
                .iter()
                .map(|&w| {
                    if rng.below(50) == 0 {
                        w & !(0xFF << (8 * rng.below(8)))
                    } else {
                        !0
                    }
                })
                .collect();
            let total = scalar::count_ones(words);
            let nth = rng.below(total as u64 + 3) as usize;
            for level in Level::available() {
                let at = |what: &str| {
                    alloc::format!("{what} at {level}, case {case}, n {n}, skew {skew}")
                };
                assert_eq!(
                    first_diff(level, words, from, pat),
                    scalar::first_diff(words, from, pat),
                    "{}",
                    at("first_diff")
                );
                assert_eq!(
                    last_diff(level, words, end, pat),
                    scalar::last_diff(words, end, pat),
                    "{}",
                    at("last_diff")
                );
                assert_eq!(
                    first_zero_chunk(level, &lanes, from, chunk),
                    scalar::first_zero_chunk(&lanes, from, chunk),
                    "{}",
                    at("first_zero_chunk")
                );
                assert_eq!(count_ones(level, words), total, "{}", at("count_ones"));
                assert_eq!(
                    nth_word(level, words, nth),
                    scalar::nth_word(words, nth),
                    "{}",
                    at("nth_word")
                );
            }
        }
    }

    /// A word with no zero `chunk` lane (every byte non-zero), but with a
    /// zero 32-bit half now and then: such words pass the AVX2 64-bit
    /// prefilter (a lane-wise 32-bit minimum) without being zero.
    fn busy_word(rng: &mut Rng, chunk: Chunk) -> u64 {
        let w = rng.next() | 0x0101_0101_0101_0101;
        if chunk == Chunk::B64 && rng.below(4) == 0 {
            w & if rng.below(2) == 0 {
                0xFFFF_FFFF_0000_0000
            } else {
                0x0000_0000_FFFF_FFFF
            }
        } else {
            w
        }
    }

    #[test]
    fn zero_chunk_search_agrees_on_long_stretches() {
        // Long stretches (many 256-byte steps) with zero lanes planted in
        // every vector position of a step, every lane width, every skew of
        // the slice against cache lines and every start.
        let mut rng = Rng(0xA512_0002);
        let chunks = [Chunk::B8, Chunk::B16, Chunk::B32, Chunk::B64];
        for case in 0..2000 {
            let chunk = chunks[case % 4];
            let n = rng.below(if case % 8 == 0 { 3000 } else { 400 }) as usize;
            let mut backing: Vec<u64> = (0..n + 8).map(|_| busy_word(&mut rng, chunk)).collect();
            for _ in 0..rng.below(3) {
                let i = rng.below(n as u64 + 8) as usize;
                let lane = rng.below(64 / chunk as u64) as u32;
                let bits = chunk as u32;
                let mask = if bits == 64 {
                    !0
                } else {
                    ((1u64 << bits) - 1) << (lane * bits)
                };
                backing[i] &= !mask;
            }
            let skew = rng.below(8) as usize;
            let words = &backing[skew..skew + n];
            let from = rng.below(n as u64 + 2) as usize;
            let want = scalar::first_zero_chunk(words, from, chunk);
            for level in Level::available() {
                assert_eq!(
                    first_zero_chunk(level, words, from, chunk),
                    want,
                    "first_zero_chunk at {level}, case {case}, chunk {chunk:?}, n {n}, \
                     skew {skew}, from {from}"
                );
            }
        }
    }
}
