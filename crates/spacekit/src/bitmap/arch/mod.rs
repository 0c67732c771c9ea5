//! Word-skipping primitives, written once and run at every [`Level`].
//!
//! Long scans in the bitmap engine spend their time skipping words that cannot
//! hold an answer: all-zero words when looking for a set bit, all-one words when
//! looking for a clear bit, and words without a zero byte/half/quarter when
//! looking for a long clear run. Those loops live in [`generic`], written once
//! over the per-ISA [`crate::arch::Vector`] trait (one word, four words in a
//! 256-bit AVX2 register or eight in a 512-bit AVX-512 one), and
//! [`scalar`] holds the portable word-at-a-time pieces they use for heads
//! and tails.
//!
//! Every search carries the [`Level`] its bitmap was built with (detected
//! once by [`crate::arch`]) by value, and each entry point below hands its
//! loop to [`crate::arch::run`], which matches it once per call, never per
//! word, and runs the loop compiled for the level; tests run every level of
//! [`Level::available`] through the same assertions.

pub(crate) mod generic;
pub(crate) mod scalar;

use crate::arch::{Job, Level, Vector};
use core::marker::PhantomData;
pub(crate) use scalar::Chunk;

/// Defines, for each loop of [`generic`], an entry point taking a [`Level`]
/// that runs the loop compiled for it through [`crate::arch::run`].
///
/// The entry points are out of line on purpose: callers look a few words
/// ahead inline first, so only long skips get here, and keeping the loops
/// out of the callers keeps the hot searches small enough to inline.
macro_rules! entry_points {
    ($($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) -> $out:ty;)*) => {$(
        $(#[$doc])*
        #[inline(never)]
        pub(crate) fn $name<'a>(level: Level, $($arg: $ty),*) -> $out {
            /// The loop's arguments, as a job for `crate::arch::run`.
            struct Args<'a> {
                $($arg: $ty,)*
                _words: PhantomData<&'a [u64]>,
            }
            impl Job for Args<'_> {
                type Output = $out;
                #[inline(always)]
                fn run<V: Vector>(self) -> $out {
                    generic::$name::<V>($(self.$arg),*)
                }
            }
            crate::arch::run(level, Args { $($arg,)* _words: PhantomData })
        }
    )*};
}

entry_points! {
    /// Index of the first word at or after `from` that differs from `pat`
    /// (`pat` = 0: first non-zero word; `pat` = !0: first word with a clear
    /// bit).
    fn first_diff(words: &'a [u64], from: usize, pat: u64) -> Option<usize>;
    /// Index of the last word strictly before `end` that differs from `pat`.
    fn last_diff(words: &'a [u64], end: usize, pat: u64) -> Option<usize>;
    /// Bit position of the first all-zero, `chunk`-aligned lane of `chunk`
    /// bits in `words[from..]`.
    fn first_zero_chunk(words: &'a [u64], from: usize, chunk: Chunk) -> Option<usize>;
    /// Number of set bits in `words`.
    fn count_ones(words: &'a [u64]) -> usize;
    /// The word holding the `n`-th set bit and its rank there, or
    /// `Err(n - total)`.
    fn nth_word(words: &'a [u64], n: usize) -> Result<(usize, u32), usize>;
}

/// Every bit of `words[from..end]` that differs from `x`, in order,
/// through `f` ([`generic::fold_bits`] at `level`): the body of the bit
/// iterators' `fold`.
#[inline(always)]
pub(crate) fn fold_bits<B, F: FnMut(B, usize) -> B>(
    level: Level,
    words: &[u64],
    from: usize,
    end: usize,
    x: u64,
    init: B,
    f: F,
) -> B {
    /// The fold's arguments, as a job for `crate::arch::run`.
    struct Fold<'a, B, F> {
        words: &'a [u64],
        from: usize,
        end: usize,
        x: u64,
        init: B,
        f: F,
    }
    impl<B, F: FnMut(B, usize) -> B> Job for Fold<'_, B, F> {
        type Output = B;
        #[inline(always)]
        fn run<V: Vector>(self) -> B {
            generic::fold_bits::<V, B>(self.words, self.from, self.end, self.x, self.init, self.f)
        }
    }
    crate::arch::run(
        level,
        Fold {
            words,
            from,
            end,
            x,
            init,
            f,
        },
    )
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

    /// The zero-chunk oracle, lane by lane: independent of the word tricks
    /// of `scalar::first_zero_chunk`, which the scalar level runs.
    fn naive_zero_chunk(words: &[u64], from: usize, chunk: Chunk) -> Option<usize> {
        let c = chunk as usize;
        let mask = if c == 64 { !0 } else { (1u64 << c) - 1 };
        (from..words.len())
            .flat_map(|i| (0..64 / c).map(move |l| (i, l)))
            .find(|&(i, l)| (words[i] >> (l * c)) & mask == 0)
            .map(|(i, l)| i * 64 + l * c)
    }

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
        crate::arch::note_skipped_levels();
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
                    naive_zero_chunk(&lanes, from, chunk),
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
        crate::arch::note_skipped_levels();
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
            let want = naive_zero_chunk(words, from, chunk);
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

    /// The fold over bits of either polarity, at every level, against a
    /// bit-by-bit oracle: long stretches of full and empty words with odd
    /// words inside, random words, every start and end near vector steps.
    #[test]
    fn fold_bits_agrees_with_a_bit_by_bit_walk() {
        let mut rng = Rng(0xA512_F01D);
        for case in 0..300 {
            let n = rng.below(200) as usize;
            let words = match case % 4 {
                0 => stretch(&mut rng, n, !0, n / 8),
                1 => stretch(&mut rng, n, 0, n / 8),
                2 => (0..n).map(|_| rng.next()).collect(),
                _ => stretch(&mut rng, n, !0, n / 2),
            };
            let from = rng.below(n as u64 + 1) as usize;
            let end = from + rng.below((n - from) as u64 + 1) as usize;
            for x in [0u64, !0] {
                let want: Vec<usize> = (from * 64..end * 64)
                    .filter(|&b| (words[b / 64] ^ x) >> (b % 64) & 1 == 1)
                    .collect();
                for level in Level::available() {
                    let got = fold_bits(level, &words, from, end, x, Vec::new(), |mut v, b| {
                        v.push(b);
                        v
                    });
                    assert_eq!(got, want, "case {case} x {x:#x} {from}..{end} at {level}");
                }
            }
        }
    }
}
