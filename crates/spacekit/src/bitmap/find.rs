//! Single-bit searches, counts and range predicates over `&[u64]` words.
//!
//! All functions take the bit length `nbits` (the caller guarantees
//! `words.len() * 64 >= nbits`) and ignore whatever sits in the words past it.
//! Ranges are half-open `[start, end)` with `start <= end <= nbits`, already
//! validated by the caller.

use super::arch::Backend;
use super::word::{first_word_mask, last_word_mask, select_in_word, words_for};

/// `!0` when searching for clear bits (words are inverted), 0 for set bits.
#[inline(always)]
const fn inv(clear: bool) -> u64 {
    if clear {
        !0
    } else {
        0
    }
}

/// First position in `[from, end)` whose bit equals `!clear`... i.e. the first set
/// bit (`clear == false`) or the first clear bit (`clear == true`).
#[inline]
pub(crate) fn next_in(
    words: &[u64],
    from: usize,
    end: usize,
    clear: bool,
    be: Backend,
) -> Option<usize> {
    if from >= end {
        return None;
    }
    let x = inv(clear);
    let nw = words_for(end);
    let mut wi = from / 64;
    let mut w = (words[wi] ^ x) & first_word_mask(from);
    if w == 0 {
        // Skip every word that is all-zero (or all-one when looking for a clear
        // bit) at SIMD speed.
        wi = be.first_diff(&words[..nw], wi + 1, x)?;
        w = words[wi] ^ x;
    }
    let pos = wi * 64 + w.trailing_zeros() as usize;
    (pos < end).then_some(pos)
}

/// Last position in `[start, end)` holding a set (`clear == false`) or clear
/// bit. This is seed 000's find_last_bit_range when `start > 0`.
#[inline]
pub(crate) fn prev_in(
    words: &[u64],
    start: usize,
    end: usize,
    clear: bool,
    be: Backend,
) -> Option<usize> {
    if start >= end {
        return None;
    }
    let x = inv(clear);
    let mut wi = (end - 1) / 64;
    let mut w = (words[wi] ^ x) & last_word_mask(end);
    if w == 0 {
        wi = be.last_diff(words, wi, x)?;
        w = words[wi] ^ x;
    }
    let pos = wi * 64 + 63 - w.leading_zeros() as usize;
    (pos >= start).then_some(pos)
}

/// Number of set bits in `[start, end)`.
pub(crate) fn count_ones_in(words: &[u64], start: usize, end: usize) -> usize {
    if start >= end {
        return 0;
    }
    let (fw, lw) = (start / 64, (end - 1) / 64);
    if fw == lw {
        return (words[fw] & first_word_mask(start) & last_word_mask(end)).count_ones() as usize;
    }
    let mut n = (words[fw] & first_word_mask(start)).count_ones() as usize;
    n += words[fw + 1..lw]
        .iter()
        .map(|w| w.count_ones() as usize)
        .sum::<usize>();
    n + (words[lw] & last_word_mask(end)).count_ones() as usize
}

/// Position of the `n`-th (from 0) set bit below `nbits` (find_nth_bit).
pub(crate) fn nth_set(words: &[u64], nbits: usize, mut n: usize) -> Option<usize> {
    let nw = words_for(nbits);
    for (wi, &raw) in words[..nw].iter().enumerate() {
        let w = if wi + 1 == nw {
            raw & last_word_mask(nbits)
        } else {
            raw
        };
        let c = w.count_ones() as usize;
        if n < c {
            return Some(wi * 64 + select_in_word(w, n as u32) as usize);
        }
        n -= c;
    }
    None
}

/// Applies `op` to every bit of `[start, end)`: first partial word, whole words,
/// last partial word (bitmap_set / bitmap_clear).
#[inline]
pub(crate) fn update_range(words: &mut [u64], start: usize, end: usize, op: RangeOp) {
    if start >= end {
        return;
    }
    let (fw, lw) = (start / 64, (end - 1) / 64);
    let apply = |w: &mut u64, m: u64| match op {
        RangeOp::Set => *w |= m,
        RangeOp::Clear => *w &= !m,
        RangeOp::Flip => *w ^= m,
    };
    if fw == lw {
        apply(&mut words[fw], first_word_mask(start) & last_word_mask(end));
        return;
    }
    apply(&mut words[fw], first_word_mask(start));
    let mid = &mut words[fw + 1..lw];
    match op {
        RangeOp::Set => mid.fill(!0),
        RangeOp::Clear => mid.fill(0),
        RangeOp::Flip => mid.iter_mut().for_each(|w| *w = !*w),
    }
    apply(&mut words[lw], last_word_mask(end));
}

/// What [`update_range`] does to each bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RangeOp {
    Set,
    Clear,
    Flip,
}
