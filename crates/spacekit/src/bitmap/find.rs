//! Single-bit searches, counts and range predicates over `&[u64]` words.
//!
//! All functions take the bit length `nbits` (the caller guarantees
//! `words.len() * 64 >= nbits`) and ignore whatever sits in the words past it.
//! Ranges are half-open `[start, end)` with `start <= end <= nbits`, already
//! validated by the caller.

use super::arch;
use super::word::{first_word_mask, last_word_mask, select_in_word, words_for};
use crate::arch::Level;

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
pub(crate) fn skip_fwd(words: &[u64], from: usize, nw: usize, x: u64, be: Level) -> Option<usize> {
    let words = &words[..nw];
    let stop = nw.min(from.saturating_add(LOOKAHEAD));
    let near = words.get(from..stop)?;
    // Four words per branch: sparse maps have gaps of a few words.
    let mut quads = near.chunks_exact(4);
    for (q, c) in (&mut quads).enumerate() {
        if (c[0] ^ x) | (c[1] ^ x) | (c[2] ^ x) | (c[3] ^ x) != 0 {
            let k = c.iter().position(|&w| w != x).unwrap_or(0);
            return Some(from + 4 * q + k);
        }
    }
    let rest = quads.remainder();
    if let Some(k) = rest.iter().position(|&w| w != x) {
        return Some(stop - rest.len() + k);
    }
    if stop >= nw {
        return None;
    }
    arch::first_diff(be, words, stop, x)
}

/// Last index in `[lo, end)` whose word differs from `x`.
#[inline(always)]
fn skip_back(words: &[u64], lo: usize, end: usize, x: u64, be: Level) -> Option<usize> {
    if lo >= end {
        return None;
    }
    let near = lo.max(end.saturating_sub(LOOKAHEAD));
    let seg = &words[near..end];
    // Four words per branch, nearest first.
    let mut i = seg.len();
    while i >= 4 {
        let c = &seg[i - 4..i];
        if (c[0] ^ x) | (c[1] ^ x) | (c[2] ^ x) | (c[3] ^ x) != 0 {
            let k = c.iter().rposition(|&w| w != x).unwrap_or(0);
            return Some(near + i - 4 + k);
        }
        i -= 4;
    }
    if let Some(k) = seg[..i].iter().rposition(|&w| w != x) {
        return Some(near + k);
    }
    if near == lo {
        return None;
    }
    arch::last_diff(be, &words[lo..near], near - lo, x).map(|k| lo + k)
}

/// First position in `[from, end)` holding a set bit (`CLEAR == false`) or a
/// clear bit (`CLEAR == true`).
#[inline(always)]
pub(crate) fn next_in<const CLEAR: bool>(
    words: &[u64],
    from: usize,
    end: usize,
    be: Level,
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
    be: Level,
) -> Option<usize> {
    if start >= end {
        return None;
    }
    let x = inv(CLEAR);
    let mut wi = (end - 1) / 64;
    let mut w = (words[wi] ^ x) & last_word_mask(end);
    if w == 0 {
        // Only words from the one holding `start` can hold the answer.
        wi = skip_back(words, start / 64, wi, x, be)?;
        w = words[wi] ^ x;
    }
    let pos = wi * 64 + 63 - w.leading_zeros() as usize;
    (pos >= start).then_some(pos)
}

/// Number of set bits in `[start, end)`.
pub(crate) fn count_ones_in(words: &[u64], start: usize, end: usize, be: Level) -> usize {
    if start >= end {
        return 0;
    }
    let (fw, lw) = (start / 64, (end - 1) / 64);
    if fw == lw {
        return (words[fw] & first_word_mask(start) & last_word_mask(end)).count_ones() as usize;
    }
    let first = (words[fw] & first_word_mask(start)).count_ones() as usize;
    let last = (words[lw] & last_word_mask(end)).count_ones() as usize;
    let mid = &words[fw + 1..lw];
    let mid = if mid.len() <= 4 {
        mid.iter().map(|w| w.count_ones() as usize).sum()
    } else {
        arch::count_ones(be, mid)
    };
    first + mid + last
}

/// Position of the `n`-th (from 0) set bit below `nbits` (find_nth_bit).
pub(crate) fn nth_set(words: &[u64], nbits: usize, n: usize, be: Level) -> Option<usize> {
    let nw = words_for(nbits);
    if nw == 0 {
        return None;
    }
    // Whole words first (popcount blocks), then the masked last word.
    let n = match arch::nth_word(be, &words[..nw - 1], n) {
        Ok((wi, rank)) => return Some(wi * 64 + select_in_word(words[wi], rank) as usize),
        Err(rest) => rest,
    };
    let last = words[nw - 1] & last_word_mask(nbits);
    ((last.count_ones() as usize) > n)
        .then(|| (nw - 1) * 64 + select_in_word(last, n as u32) as usize)
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
