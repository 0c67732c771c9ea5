//! Single-word helpers shared by the searches: masks, run detection, alignment.

/// Bits at and above `bit % 64` (the kernel's BITMAP_FIRST_WORD_MASK).
#[inline(always)]
pub(crate) const fn first_word_mask(bit: usize) -> u64 {
    !0u64 << (bit % 64)
}

/// Bits below `end % 64`, or all bits when `end` is a multiple of 64 (the
/// kernel's BITMAP_LAST_WORD_MASK).
#[inline(always)]
pub(crate) const fn last_word_mask(end: usize) -> u64 {
    !0u64 >> ((64 - end % 64) % 64)
}

/// Number of words that hold `nbits` bits.
#[inline(always)]
pub(crate) const fn words_for(nbits: usize) -> usize {
    nbits.div_ceil(64)
}

/// Bit `b` of the result is set iff bits `b .. b + n` of `x` are all set and lie
/// inside the word (`1 <= n <= 64`). Doubling: after the loop, bit b says
/// "k ones start here"; one more shift by `n - k <= k` extends that to n.
#[inline(always)]
pub(crate) fn runs_of_ones(x: u64, n: usize) -> u64 {
    debug_assert!((1..=64).contains(&n));
    let mut y = x;
    let mut k = 1;
    while 2 * k <= n {
        y &= y >> k;
        k *= 2;
    }
    if k < n {
        y &= y >> (n - k);
    }
    y
}

/// Alignment rule of the kernel's bitmap_find_next_zero_area_off: a position p
/// is acceptable iff `(p + offset) & mask == 0`, `mask + 1` a power of two.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Align {
    mask: usize,
    offset: usize,
}

impl Align {
    #[inline(always)]
    pub(crate) fn new(mask: usize, offset: usize) -> Align {
        Align { mask, offset }
    }

    /// Smallest acceptable position `>= p`, or `None` if it would overflow.
    #[inline(always)]
    pub(crate) fn up(&self, p: usize) -> Option<usize> {
        let delta = p.wrapping_add(self.offset).wrapping_neg() & self.mask;
        p.checked_add(delta)
    }

    /// The per-word masks of acceptable positions, for scans that test every
    /// position of a word at once.
    pub(crate) fn patterns(&self) -> AlignPattern {
        let repeating = if self.mask == 0 {
            !0
        } else if self.mask < 64 {
            // One bit every `mask + 1` positions, by doubling (at most 6 steps),
            // shifted to the first acceptable position. The pattern is the
            // same in every word because `mask + 1` divides 64.
            let stride = self.mask + 1;
            let mut p = 1u64;
            let mut width = stride;
            while width < 64 {
                p |= p << width;
                width *= 2;
            }
            p << (self.offset.wrapping_neg() & self.mask)
        } else {
            0
        };
        AlignPattern {
            align: *self,
            repeating,
        }
    }
}

/// Acceptable positions inside each word, see [`Align::patterns`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct AlignPattern {
    align: Align,
    /// For `mask < 64`: the pattern shared by every word.
    repeating: u64,
}

impl AlignPattern {
    /// Acceptable positions within the word starting at bit `base` (a
    /// multiple of 64), as a bit mask.
    #[inline(always)]
    pub(crate) fn at(&self, base: usize) -> u64 {
        if self.align.mask < 64 {
            self.repeating
        } else {
            let b = base.wrapping_add(self.align.offset).wrapping_neg() & self.align.mask;
            if b < 64 {
                1 << b
            } else {
                0
            }
        }
    }
}

/// Position (0-based) of the `n`-th set bit of `w`; `n < w.count_ones()`.
#[inline]
pub(crate) fn select_in_word(mut w: u64, mut n: u32) -> u32 {
    // Narrow by halves with popcount, then finish bit by bit: at most
    // 3 popcounts and 8 steps.
    let mut base = 0;
    for half in [32u32, 16, 8] {
        let low = w & ((1u64 << half) - 1);
        let c = low.count_ones();
        if n >= c {
            n -= c;
            w >>= half;
            base += half;
        } else {
            w = low;
        }
    }
    loop {
        if w & 1 == 1 {
            if n == 0 {
                return base;
            }
            n -= 1;
        }
        w >>= 1;
        base += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks() {
        assert_eq!(first_word_mask(0), !0);
        assert_eq!(first_word_mask(3), !0b111);
        assert_eq!(first_word_mask(64), !0);
        assert_eq!(last_word_mask(64), !0);
        assert_eq!(last_word_mask(1), 1);
        assert_eq!(last_word_mask(63), !0 >> 1);
    }

    #[test]
    fn runs_match_naive() {
        let xs = [
            0u64,
            !0,
            0xF0F0,
            0x00FF_FF00_0000_FFFF,
            0x8000_0000_0000_0001,
            0x7FFF_FFFF_FFFF_FFFE,
        ];
        for &x in &xs {
            for n in 1..=64 {
                let mut want = 0u64;
                for b in 0..=(64 - n) {
                    if (b..b + n).all(|i| x >> i & 1 == 1) {
                        want |= 1 << b;
                    }
                }
                assert_eq!(runs_of_ones(x, n), want, "x={x:#x} n={n}");
            }
        }
    }

    #[test]
    fn select_matches_naive() {
        for &w in &[
            1u64,
            !0,
            0x8000_0000_0000_0000,
            0xDEAD_BEEF_0000_F00D,
            0x5555,
        ] {
            let ones: Vec<u32> = (0..64).filter(|&i| w >> i & 1 == 1).collect();
            for (n, &pos) in ones.iter().enumerate() {
                assert_eq!(select_in_word(w, n as u32), pos);
            }
        }
    }

    #[test]
    fn align_rules() {
        let a = Align::new(7, 3);
        assert_eq!(a.up(0), Some(5));
        assert_eq!(a.up(6), Some(13));
        assert_eq!(a.patterns().at(0), 0x2020_2020_2020_2020);
        assert_eq!(Align::new(0, 9).patterns().at(64), !0);
        assert_eq!(Align::new(63, 1).patterns().at(128), 1 << 63);
        let big = Align::new(127, 0);
        assert_eq!(big.patterns().at(0), 1);
        assert_eq!(big.patterns().at(64), 0);
        assert_eq!(Align::new(127, 64).patterns().at(64), 1);
        assert_eq!(Align::new(usize::MAX >> 1, 0).up(5), Some(1 << 63));
        assert_eq!(Align::new(usize::MAX >> 1, 0).up((1 << 63) + 5), None);
    }
}
