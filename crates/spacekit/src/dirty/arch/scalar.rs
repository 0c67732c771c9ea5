//! Portable pieces of the dirty scanner: the head and tail loops of the
//! generic kernels, one word at a time.

use super::words::Words;

/// 1 if word `w` (with `carry` the bit below it) has an edge, else 0.
#[inline(always)]
pub(crate) fn mark_word(w: u64, carry: u64) -> u64 {
    u64::from(w ^ ((w << 1) | carry) != 0)
}

/// Stage 1 over words `[j, end)` of a batch starting at word `i`, or-ing
/// marks into `m` (bit `t` for word `i + t`); `carry` is the bit below word
/// `j`. Returns the marks and the carry out.
#[inline(always)]
pub(crate) fn marks_from<W: Words>(
    src: W,
    i: usize,
    mut j: usize,
    end: usize,
    mut m: u64,
    mut carry: u64,
) -> (u64, u64) {
    while j < end {
        let w = src.word(j);
        m |= mark_word(w, carry) << (j - i);
        carry = w >> 63;
        j += 1;
    }
    (m, carry)
}

/// Number of edges in words `[from, end)`: one popcount per word, no
/// branches, so the parallel scan's sizing pass costs little more than
/// reading the block.
#[inline(always)]
pub(crate) fn count_edges<W: Words>(src: W, from: usize, end: usize) -> usize {
    let mut carry = src.carry_in(from);
    let mut n = 0usize;
    for j in from..end {
        let w = src.word(j);
        n += (w ^ ((w << 1) | carry)).count_ones() as usize;
        carry = w >> 63;
    }
    n
}
