//! The zero-page test of spacekit's zero-page extension: whether a page the
//! sender just copied out is all zero bytes, at memory bandwidth.
//!
//! One generic loop over the library's [`Vector`] trait (`crate::arch`),
//! run compiled for a [`Level`] through [`crate::arch::run`]: four vectors
//! are loaded per step (1, 4 or 8 words each for scalar, AVX2 and AVX-512)
//! and tested together, and the first non-zero step ends the test, so a
//! non-zero page usually costs one cache line. The bytes before the first
//! and after the last 8-byte-aligned word are tested one by one.

use crate::arch::{Job, Level, Vector};

/// Bytes in a page of the zero-page extension: the unit the sender tests
/// and the receiver fills (4 KiB, whatever the guest's page size).
pub(crate) const ZERO_PAGE_BYTES: usize = 4096;

/// Pages per zero mask in a [`Command::SparseMemory`](super::Command::SparseMemory)
/// request's contents: one `u64` mask, one bit per page.
pub(crate) const PAGES_PER_GROUP: usize = 64;

/// Whether every byte of `bytes` is zero, tested at `level`.
#[inline]
pub(crate) fn is_zero(level: Level, bytes: &[u8]) -> bool {
    // SAFETY: every bit pattern is a valid `u64`, so viewing the aligned
    // middle of a byte slice as words is sound; `align_to` returns a middle
    // that is aligned and in bounds, and bytes it cannot place there in the
    // head and tail.
    let (head, words, tail) = unsafe { bytes.align_to::<u64>() };
    head.iter().all(|&b| b == 0)
        && tail.iter().all(|&b| b == 0)
        && crate::arch::run(level, AllZero { words })
}

/// [`is_zero`]'s word loop as a job for [`crate::arch::run`].
struct AllZero<'a> {
    words: &'a [u64],
}

impl Job for AllZero<'_> {
    type Output = bool;

    #[inline(always)]
    fn run<V: Vector>(self) -> bool {
        let w = self.words;
        let zero = V::splat(0);
        let step = 4 * V::LANES;
        let mut i = 0;
        while i + step <= w.len() {
            // SAFETY: `i + 4 * LANES <= w.len()`, so each load's
            // `i + k * LANES + LANES <= w.len()`.
            let v = unsafe {
                [
                    V::load(w, i),
                    V::load(w, i + V::LANES),
                    V::load(w, i + 2 * V::LANES),
                    V::load(w, i + 3 * V::LANES),
                ]
            };
            if V::any_ne4(v, zero) {
                return false;
            }
            i += step;
        }
        while i < w.len() {
            let k = (w.len() - i).min(V::LANES);
            // SAFETY: `k <= LANES` and `i + k <= w.len()`.
            let v = unsafe { V::load_part(w, i, k) };
            if v.ne_mask(zero) != 0 {
                return false;
            }
            i += k;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    /// Every level, every length up to two steps of the widest level and
    /// every offset into an 8-byte word, with one non-zero byte at each
    /// position (and none).
    #[test]
    fn finds_every_non_zero_byte_at_every_level() {
        let mut buf = vec![0u8; 8 + 300];
        for level in Level::available() {
            for start in 0..8 {
                for len in 0..300 {
                    let s = &mut buf[start..start + len];
                    assert!(is_zero(level, s), "{level:?} {start} {len}");
                    for p in 0..len {
                        for v in [1u8, 0x80, 0xff] {
                            s[p] = v;
                            assert!(!is_zero(level, s), "{level:?} {start} {len} {p} {v}");
                            s[p] = 0;
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn whole_pages() {
        let mut page = vec![0u8; ZERO_PAGE_BYTES];
        for level in Level::available() {
            assert!(is_zero(level, &page));
            for p in [0, 1, 7, 8, 255, 256, 2048, ZERO_PAGE_BYTES - 1] {
                page[p] = 3;
                assert!(!is_zero(level, &page), "{level:?} {p}");
                page[p] = 0;
            }
        }
    }
}
