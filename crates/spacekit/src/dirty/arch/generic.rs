//! The dirty scanner's word-parallel pieces, written once over
//! [`Vector`]: stage 1 of a batch ([`marks`]), stage 2 for one word
//! ([`expand`]) and the parallel scan's sizing pass ([`count_edges`]). Each
//! level runs them instantiated with its vector type by `crate::arch::run`.

use super::scalar;
use super::words::Words;
use crate::arch::Vector;

/// Words `i..i + LANES` of `src` (the OR of its parts) as one vector.
///
/// # Safety
/// `i + V::LANES <= src.len()`.
#[inline(always)]
unsafe fn load<V: Vector, W: Words>(src: &W, i: usize) -> V {
    let (a, b) = src.parts();
    // SAFETY: the caller guarantees `i + LANES <= len`; `Words` (an
    // `unsafe trait`) guarantees both parts hold `len` words.
    unsafe {
        let v = V::load(a, i);
        match b {
            None => v,
            Some(b) => v.or(V::load(b, i)),
        }
    }
}

/// Stage 1 over words `[i, i + n)` (`n <= 64`), `carry` the bit below word
/// `i`: bit `t` of the result is set when word `i + t` has edges. Also
/// returns the carry out (bit 63 of the last word). [`marks_edges`] with
/// the edge masks left in a scratch array nobody reads (dead stores once
/// inlined).
#[inline(always)]
pub(crate) fn marks<V: Vector, W: Words>(src: W, i: usize, n: usize, carry: u64) -> (u64, u64) {
    marks_edges::<V, W>(src, i, n, carry, &mut [0; 64])
}

/// Stage 1 over words `[i, i + n)` (`n <= 64`), `carry` the bit below
/// word `i`: bit `t` of the result is set when word `i + t` has edges, and
/// that word's edge mask is kept in `e[t]` (so the table builder's stage 2
/// reads it instead of the bitmap). Also returns the carry out (bit 63 of
/// the last word).
///
/// The vector loop reads the word below each lane, so it starts at word 1
/// at the earliest; it runs while a whole vector fits, the rest goes word by
/// word.
#[inline(always)]
pub(crate) fn marks_edges<V: Vector, W: Words>(
    src: W,
    i: usize,
    n: usize,
    carry: u64,
    e: &mut [u64; 64],
) -> (u64, u64) {
    let end = i + n;
    let (mut j, mut m, mut carry) = (i, 0, carry);
    if n > V::LANES {
        if j == 0 {
            let w = src.word(0);
            e[0] = w ^ ((w << 1) | carry);
            m = u64::from(e[0] != 0);
            j = 1;
        }
        let mut prev = V::splat(src.word(j - 1));
        while j + V::LANES <= end {
            // SAFETY: `j + LANES <= end <= src.len()`.
            let v: V = unsafe { load(&src, j) };
            let x = v.edges(&mut prev);
            // SAFETY: `j - i + LANES <= n <= 64`.
            unsafe { x.store(e, j - i) };
            m |= x.ne_mask(V::splat(0)) << (j - i);
            j += V::LANES;
        }
        carry = src.word(j - 1) >> 63;
    }
    while j < end {
        let w = src.word(j);
        let x = w ^ ((w << 1) | carry);
        e[j - i] = x;
        m |= u64::from(x != 0) << (j - i);
        carry = w >> 63;
        j += 1;
    }
    (m, carry)
}

/// Bit `t` set for each nonzero word `i + t` of `src` over words
/// `[i, i + n)` (`n <= 64`): a vector compared with zero per step, the
/// tail word by word. The table builder's test of a batch it expects to be
/// sparse, cheaper than the edge masks of every word. [`nonzero_and_top_words`]
/// without the top bits (unused, so the compiler drops them).
#[inline(always)]
pub(crate) fn nonzero_words<V: Vector, W: Words>(src: W, i: usize, n: usize) -> u64 {
    nonzero_and_top_words::<V, W>(src, i, n).0
}

/// [`nonzero_words`] and, in the same pass, bit `t` set for each word
/// `i + t` whose top bit is set (a run goes on into the next word, or ends
/// at its first page): the table builder's sparse batches mark the word
/// after each such word up front, so their emission loop does not wait on
/// each word's load to learn the next word to visit.
#[inline(always)]
pub(crate) fn nonzero_and_top_words<V: Vector, W: Words>(src: W, i: usize, n: usize) -> (u64, u64) {
    debug_assert!(n <= 64);
    let zero = V::splat(0);
    if n == 64 {
        // SAFETY: `i + j + LANES <= i + 64 = i + n <= src.len()`.
        return V::batch_masks(|j| unsafe { load(&src, i + j) }, zero);
    }
    let (mut m, mut top, mut j) = (0u64, 0u64, 0);
    while j + V::LANES <= n {
        // SAFETY: `i + j + LANES <= i + n <= src.len()`.
        let v: V = unsafe { load(&src, i + j) };
        m |= v.ne_mask(zero) << j;
        top |= v.top_mask() << j;
        j += V::LANES;
    }
    while j < n {
        let w = src.word(i + j);
        m |= u64::from(w != 0) << j;
        top |= (w >> 63) << j;
        j += 1;
    }
    (m, top)
}

/// Stage 2 for one word: writes the positions of the set bits of edge mask
/// `e` (possibly 0), each plus `pos` (the word's first bit), to `buf[k..]`
/// in ascending order and returns `k` plus their number. `buf[k..k + 64]`
/// must exist; slots past the returned index may be overwritten with
/// garbage. `dense`: most words of the batch have edges (so more edges per
/// word are likely).
#[inline(always)]
pub(crate) fn expand<V: Vector>(pos: u64, e: u64, buf: &mut [u64], k: usize, dense: bool) -> usize {
    V::expand(pos, e, &mut buf[k..k + 64], dense);
    k + e.count_ones() as usize
}

/// Number of edges in words `[from, end)` (no terminal edge): the edge
/// masks of a vector per step, their bits counted lane by lane.
#[cfg_attr(not(feature = "rayon"), allow(dead_code))]
#[inline(always)]
pub(crate) fn count_edges<V: Vector, W: Words>(src: W, from: usize, end: usize) -> usize {
    // Short blocks stay word by word; the first block's first word (no word
    // below it) is counted on its own.
    if end <= from + V::LANES {
        return scalar::count_edges(src, from, end);
    }
    let head = usize::from(from == 0);
    let mut j = from + head;
    let mut acc = V::splat(0);
    let mut prev = V::splat(src.word(j - 1));
    while j + V::LANES <= end {
        // SAFETY: `j + LANES <= end <= src.len()`.
        let v: V = unsafe { load(&src, j) };
        acc = V::add_popcnt(acc, v.edges(&mut prev));
        j += V::LANES;
    }
    scalar::count_edges(src, from, from + head)
        + acc.sum() as usize
        + scalar::count_edges(src, j, end)
}

/// Stage 2 of the table builder for one word, on the table seen as a flat
/// array of edge positions (`gpa`, `length`, `gpa`, … of consecutive
/// ranges): edges alternate start, end over the whole bitmap, so writing
/// every edge of `e` (the word's edge mask, possibly 0) in order at slot
/// `*k..` puts each run's start in a range's `gpa` and its end in the same
/// range's `length`, as raw bit positions, whichever words they come from.
/// `pos` is the word's first bit. The first `U` positions are written
/// unconditionally (past the count they are garbage that later words
/// overwrite), so only words with more than `U` edges loop, over the edges
/// past the first `U`.
///
/// # Safety
/// `out` must be valid for writes of slots `..*k + max(U, 64)`.
#[inline(always)]
pub(crate) unsafe fn emit_edges<const U: usize>(pos: u64, e: u64, out: *mut u64, k: &mut usize) {
    let n = e.count_ones() as usize;
    // SAFETY: slots `*k..*k + max(U, n)` are within the caller's room.
    unsafe {
        let p = out.add(*k);
        let mut m = e;
        for u in 0..U {
            p.add(u).write(pos + u64::from(m.trailing_zeros()));
            m &= m.wrapping_sub(1);
        }
        if n > U {
            let mut u = U;
            while m != 0 {
                p.add(u).write(pos + u64::from(m.trailing_zeros()));
                m &= m - 1;
                u += 1;
            }
        }
    }
    *k += n;
}
