//! Portable pieces of the dirty scanner: the head and tail loops of the
//! generic kernels, one word at a time.

use super::words::Words;

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
