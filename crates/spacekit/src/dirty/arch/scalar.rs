//! Portable kernels of the dirty scanner: the fallback every test also runs,
//! and the head and tail loops of the vector kernels.

use super::kernel::{Job, Kernel, Words};

/// The portable kernels.
pub(crate) struct Scalar;

impl Kernel for Scalar {
    #[inline(always)]
    fn marks<W: Words>(src: W, i: usize, n: usize, carry: u64) -> (u64, u64) {
        marks_from(src, i, i, i + n, 0, carry)
    }

    #[inline(always)]
    fn expand(pos: u64, e: u64, buf: &mut [u64], k: usize, dense: bool) -> usize {
        if dense {
            expand::<8>(pos, e, buf, k)
        } else {
            expand::<4>(pos, e, buf, k)
        }
    }

    #[inline(always)]
    fn count_edges<W: Words>(src: W, from: usize, end: usize) -> usize {
        count_edges(src, from, end)
    }
}

/// Stage 2 with `U` unconditional writes: dense batches write eight
/// positions, sparse ones four, so the "more edges than that" branch stays
/// rare in both. A mask with fewer edges writes position `pos + 64`, garbage
/// past the live count that later words overwrite.
#[inline(always)]
pub(crate) fn expand<const U: usize>(pos: u64, mut e: u64, buf: &mut [u64], k: usize) -> usize {
    let n = e.count_ones() as usize;
    let s = &mut buf[k..k + 64];
    for slot in &mut s[..U] {
        *slot = pos + u64::from(e.trailing_zeros());
        e &= e.wrapping_sub(1);
    }
    if n > U {
        let mut j = U;
        while e != 0 {
            s[j] = pos + u64::from(e.trailing_zeros());
            e &= e - 1;
            j += 1;
        }
    }
    k + n
}

/// Runs `job` with the portable kernels.
#[inline(always)]
pub(crate) fn run<J: Job>(job: J) -> J::Output {
    job.run::<Scalar>()
}

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
    let mut carry = if from == 0 {
        0
    } else {
        src.word(from - 1) >> 63
    };
    let mut n = 0usize;
    for j in from..end {
        let w = src.word(j);
        n += (w ^ ((w << 1) | carry)).count_ones() as usize;
        carry = w >> 63;
    }
    n
}
