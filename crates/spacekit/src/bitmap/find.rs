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
pub(crate) const fn inv(clear: bool) -> u64 {
    if clear {
        !0
    } else {
        0
    }
}

/// How many words the skip loops check inline before calling the SIMD loop:
/// short gaps are the common case in dense and moderately sparse bitmaps, and
/// a plain loop answers them faster than a call into vector code.
const LOOKAHEAD: usize = 32;

/// First index in `[from, nw)` whose word differs from `x`.
#[inline(always)]
pub(crate) fn skip_fwd(
    words: &[u64],
    from: usize,
    nw: usize,
    x: u64,
    be: Backend,
) -> Option<usize> {
    let words = &words[..nw];
    let stop = nw.min(from.saturating_add(LOOKAHEAD));
    let mut i = from;
    while i < stop {
        if words[i] != x {
            return Some(i);
        }
        i += 1;
    }
    if i >= nw {
        return None;
    }
    be.first_diff(words, i, x)
}

/// Last index below `end` whose word differs from `x`.
#[inline(always)]
fn skip_back(words: &[u64], end: usize, x: u64, be: Backend) -> Option<usize> {
    let stop = end.saturating_sub(LOOKAHEAD);
    let mut i = end;
    while i > stop {
        i -= 1;
        if words[i] != x {
            return Some(i);
        }
    }
    be.last_diff(words, i, x)
}

/// First position in `[from, end)` holding a set bit (`CLEAR == false`) or a
/// clear bit (`CLEAR == true`).
#[inline(always)]
pub(crate) fn next_in<const CLEAR: bool>(
    words: &[u64],
    from: usize,
    end: usize,
    be: Backend,
) -> Option<usize> {
    if from >= end {
        return None;
    }
    let x = inv(CLEAR);
    let mut wi = from / 64;
    let mut w = (words[wi] ^ x) & first_word_mask(from);
    if w == 0 {
        // Skip every word that is all-zero (or all-one when looking for a clear
        // bit): a few inline, then at SIMD speed.
        wi = skip_fwd(words, wi + 1, words_for(end), x, be)?;
        w = words[wi] ^ x;
    }
    let pos = wi * 64 + w.trailing_zeros() as usize;
    (pos < end).then_some(pos)
}

/// Last position in `[start, end)` holding a set (`clear == false`) or clear
/// bit. This is seed 000's find_last_bit_range when `start > 0`.
#[inline(always)]
pub(crate) fn prev_in<const CLEAR: bool>(
    words: &[u64],
    start: usize,
    end: usize,
    be: Backend,
) -> Option<usize> {
    if start >= end {
        return None;
    }
    let x = inv(CLEAR);
    let mut wi = (end - 1) / 64;
    let mut w = (words[wi] ^ x) & last_word_mask(end);
    if w == 0 {
        wi = skip_back(words, wi, x, be)?;
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
