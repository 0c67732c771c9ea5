//! The dirty scanner's word-parallel pieces, written once over
//! [`Vector`]: stage 1 of a batch ([`marks`]), stage 2 for one word
//! ([`expand`]) and the parallel scan's sizing pass ([`count_edges`]). Each
//! level runs them instantiated with its vector type by `crate::arch::run`.

use super::super::memory_range::MemoryRange;
use super::scalar::{self, mark_word};
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
/// returns the carry out (bit 63 of the last word).
///
/// The vector loop reads the word below each lane, so it starts at word 1
/// at the earliest; it runs while a whole vector fits, the rest goes word by
/// word.
#[inline(always)]
pub(crate) fn marks<V: Vector, W: Words>(src: W, i: usize, n: usize, carry: u64) -> (u64, u64) {
    let end = i + n;
    let (mut j, mut m, mut carry) = (i, 0, carry);
    if n > V::LANES {
        if j == 0 {
            m = mark_word(src.word(0), carry);
            j = 1;
        }
        // The carried state of `Vector::edges`: the word below `j`.
        let mut prev = V::splat(src.word(j - 1));
        while j + V::LANES <= end {
            // SAFETY: `j + LANES <= end <= src.len()`.
            let v: V = unsafe { load(&src, j) };
            let e = v.edges(&mut prev);
            m |= e.ne_mask(V::splat(0)) << (j - i);
            j += V::LANES;
        }
        carry = src.word(j - 1) >> 63;
    }
    scalar::marks_from(src, i, j, end, m, carry)
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

/// Stage 2 of the table builder for one word: writes the raw positions of
/// the word's run starts to the `gpa` fields of ranges `*ns..` and of its run
/// ends to the `length` fields of ranges `*ne..` of `out` (a run's start and
/// end land in the same range, whichever words they come from), and advances
/// both counts. `w` is the word, `e` its edge mask (`w ^ (w << 1 | below)`),
/// `pos` its first bit. The first `U` positions of each kind are written
/// unconditionally (past the count they are garbage that later words
/// overwrite), so only words with more than `U` starts or ends loop.
///
/// # Safety
/// `out` must be valid for writes of ranges `..*ns + 32 + U` and
/// `..*ne + 32 + U` (a word has at most 32 starts and 32 ends).
#[inline(always)]
pub(crate) unsafe fn emit_word<const U: usize>(
    pos: u64,
    w: u64,
    e: u64,
    out: *mut MemoryRange,
    ns: &mut usize,
    ne: &mut usize,
) {
    let starts = e & w;
    let ends = e & !w;
    // Starts and ends alternate, so their counts differ by at most one:
    // `e` with at most `2U` edges has at most `U` of each, and one branch
    // (taken rarely) decides for both.
    // SAFETY: `*ns + max(U, starts.count_ones())` and the same for the ends
    // are within the room the caller guarantees.
    unsafe {
        let (ps, pe) = (
            core::ptr::addr_of_mut!((*out.add(*ns)).gpa),
            core::ptr::addr_of_mut!((*out.add(*ne)).length),
        );
        if e.count_ones() as usize <= 2 * U {
            write_fixed::<U>(pos, starts, ps);
            write_fixed::<U>(pos, ends, pe);
        } else {
            write_all(pos, starts, ps);
            write_all(pos, ends, pe);
        }
    }
    *ns += starts.count_ones() as usize;
    *ne += ends.count_ones() as usize;
}

/// Writes `pos` plus the position of each of the first `U` set bits of
/// `m` (garbage past its last) to `p`, `p + 2`, … (one field of
/// consecutive ranges).
///
/// # Safety
/// `p` must be valid for writes at the first `U` strided slots.
#[inline(always)]
unsafe fn write_fixed<const U: usize>(pos: u64, mut m: u64, p: *mut u64) {
    for u in 0..U {
        // SAFETY: `u < U`, within the caller's room.
        unsafe { p.add(2 * u).write(pos + u64::from(m.trailing_zeros())) };
        m &= m.wrapping_sub(1);
    }
}

/// Writes `pos` plus the position of each set bit of `m` to `p`, `p + 2`, ….
///
/// # Safety
/// `p` must be valid for writes at the first `m.count_ones()` strided slots.
#[inline(always)]
unsafe fn write_all(pos: u64, mut m: u64, p: *mut u64) {
    let mut u = 0;
    while m != 0 {
        // SAFETY: `u < m.count_ones()` of the original mask.
        unsafe { p.add(2 * u).write(pos + u64::from(m.trailing_zeros())) };
        m &= m - 1;
        u += 1;
    }
}

/// Bit `j` set for each nonzero word `j` of `words` (at most 64 words):
/// a vector's lanes compared with zero per step, the tail word by word.
/// The one-pass harvest's test of the plain (KVM) side of a batch.
#[inline(always)]
pub(crate) fn nonzero_mask<V: Vector>(words: &[u64]) -> u64 {
    let n = words.len();
    debug_assert!(n <= 64);
    let (mut m, mut j) = (0u64, 0);
    let zero = V::splat(0);
    while j + V::LANES <= n {
        // SAFETY: `j + LANES <= n`.
        m |= unsafe { V::load(words, j) }.ne_mask(zero) << j;
        j += V::LANES;
    }
    for (k, &w) in words[j..].iter().enumerate() {
        m |= u64::from(w != 0) << (j + k);
    }
    m
}
