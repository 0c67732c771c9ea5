//! The portable [`Vector`]: one 64-bit word, plain Rust. The scalar level
//! runs the same generic algorithms as the vector levels, a word at a time.

use super::vector::Vector;

/// One word as a one-lane vector.
#[derive(Clone, Copy)]
pub(crate) struct Word(u64);

// SAFETY: `Word` uses no instruction beyond the target's baseline, and its
// loads read only the words their contracts name.
unsafe impl Vector for Word {
    const LANES: usize = 1;
    // One word per step of the zero-lane search: each word is tested with
    // the haszero identity, no minimum is folded.
    const FOLD: usize = 1;

    #[inline(always)]
    fn splat(x: u64) -> Self {
        Word(x)
    }

    #[inline(always)]
    unsafe fn load(words: &[u64], i: usize) -> Self {
        debug_assert!(i < words.len());
        // SAFETY: the caller guarantees `i + 1 <= words.len()`.
        Word(unsafe { *words.get_unchecked(i) })
    }

    #[inline(always)]
    unsafe fn store(self, words: &mut [u64], i: usize) {
        debug_assert!(i < words.len());
        // SAFETY: the caller guarantees `i + 1 <= words.len()`.
        unsafe { *words.get_unchecked_mut(i) = self.0 }
    }

    #[inline(always)]
    unsafe fn load_part(words: &[u64], i: usize, k: usize) -> Self {
        debug_assert!(k <= 1 && i + k <= words.len());
        if k == 0 {
            Word(0)
        } else {
            // SAFETY: `k == 1` and the caller guarantees `i + k <= len`.
            unsafe { Self::load(words, i) }
        }
    }

    #[inline(always)]
    fn or(self, b: Self) -> Self {
        Word(self.0 | b.0)
    }

    #[inline(always)]
    fn ne_mask(self, pat: Self) -> u64 {
        u64::from(self.0 != pat.0)
    }

    #[inline(always)]
    fn top_mask(self) -> u64 {
        self.0 >> 63
    }

    #[inline(always)]
    fn any_ne4(v: [Self; 4], pat: Self) -> bool {
        ((v[0].0 ^ pat.0) | (v[1].0 ^ pat.0) | (v[2].0 ^ pat.0) | (v[3].0 ^ pat.0)) != 0
    }

    #[inline(always)]
    fn add_popcnt(acc: Self, v: Self) -> Self {
        Word(acc.0 + u64::from(v.0.count_ones()))
    }

    #[inline(always)]
    fn add(self, b: Self) -> Self {
        Word(self.0.wrapping_add(b.0))
    }

    #[inline(always)]
    fn sum(self) -> u64 {
        self.0
    }

    #[inline(always)]
    fn min_lanes<const C: usize>(a: Self, b: Self) -> Self {
        if C == 64 {
            return Word(a.0.min(b.0));
        }
        // Lane by lane: with `FOLD = 1` the zero-lane search never folds,
        // so this is never on a hot path.
        let mut out = 0;
        let mask = (1u64 << C) - 1;
        let mut sh = 0;
        while sh < 64 {
            out |= ((a.0 >> sh) & mask).min((b.0 >> sh) & mask) << sh;
            sh += C;
        }
        Word(out)
    }

    #[inline(always)]
    fn has_zero_lane<const C: usize>(self) -> bool {
        self.first_zero_lane::<C>().is_some()
    }

    #[inline(always)]
    fn first_zero_lane<const C: usize>(self) -> Option<usize> {
        // The classic "has a zero lane" identity `(w - 0x..01) & !w & 0x..80`:
        // a lane's high bit ends up set only if the lane is zero or sits
        // above a zero lane (through the borrow), so the lowest flagged lane
        // is the first zero one.
        let w = self.0;
        let (lo, hi) = match C {
            8 => (0x0101_0101_0101_0101u64, 0x8080_8080_8080_8080u64),
            16 => (0x0001_0001_0001_0001, 0x8000_8000_8000_8000),
            32 => (0x0000_0001_0000_0001, 0x8000_0000_8000_0000),
            _ => return (w == 0).then_some(0),
        };
        let t = w.wrapping_sub(lo) & !w & hi;
        (t != 0).then(|| (t.trailing_zeros() as usize) & !(C - 1))
    }

    #[inline(always)]
    fn edges(self, prev: &mut Self) -> Self {
        let e = self.0 ^ ((self.0 << 1) | (prev.0 >> 63));
        *prev = self;
        Word(e)
    }
}
