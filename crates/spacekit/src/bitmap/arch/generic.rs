//! The word-skipping loops, written once over [`Vector`]: each level runs
//! these, instantiated with its vector type by `crate::arch::run`.
//!
//! Memory accesses stay inside the slices they are given: full loads only
//! where a whole vector is in bounds, partial loads (which read only the
//! words they name) for the tails; prefetches, which never fault, may name
//! lines past them.

use super::scalar::{self, Chunk};
use crate::arch::Vector;

/// Words to handle one by one from index `i` before `words[i..]` starts on
/// an `align`-byte boundary, so no vector load straddles two cache lines (a
/// heap buffer is only 16-byte aligned, and split loads cost up to 1.7x).
#[inline(always)]
fn head_to_align(words: &[u64], i: usize, align: usize) -> usize {
    let addr = words.as_ptr().wrapping_add(i) as usize;
    (align - addr % align) % align / 8
}

/// Bytes per vector of `V`.
#[inline(always)]
const fn bytes<V: Vector>() -> usize {
    8 * V::LANES
}

/// The four vectors (four `LANES`-word steps) from word `i`.
///
/// # Safety
/// `i + 4 * V::LANES <= words.len()`.
#[inline(always)]
unsafe fn load4<V: Vector>(words: &[u64], i: usize) -> [V; 4] {
    let l = V::LANES;
    // SAFETY: the caller guarantees `4 * LANES` words from `i`.
    unsafe {
        [
            V::load(words, i),
            V::load(words, i + l),
            V::load(words, i + 2 * l),
            V::load(words, i + 3 * l),
        ]
    }
}

/// Bit `k` set iff word `k` of the four vectors differs from `pat`.
#[inline(always)]
fn diff_mask<V: Vector>(v: [V; 4], pat: V) -> u64 {
    let l = V::LANES;
    v[0].ne_mask(pat)
        | v[1].ne_mask(pat) << l
        | v[2].ne_mask(pat) << (2 * l)
        | v[3].ne_mask(pat) << (3 * l)
}

/// Every set bit of `w` (bit `k` is position `base + k`), lowest first,
/// through `f`: two bits per loop test, so a word of many bits pays half
/// the branches.
#[inline(always)]
pub(crate) fn bits_of<B>(
    mut acc: B,
    mut w: u64,
    base: usize,
    f: &mut impl FnMut(B, usize) -> B,
) -> B {
    let n = w.count_ones();
    for _ in 0..n / 2 {
        let t = w.trailing_zeros() as usize;
        w &= w - 1;
        acc = f(acc, base + t);
        let t = w.trailing_zeros() as usize;
        w &= w - 1;
        acc = f(acc, base + t);
    }
    if n & 1 != 0 {
        acc = f(acc, base + w.trailing_zeros() as usize);
    }
    acc
}

/// Every bit of `words[from..end]` that differs from `x` (`x` = 0: the set
/// bits, `!0`: the clear bits), in order, through `f`. Four vectors at a
/// time give a mask of the words holding such a bit, so a word without one
/// costs no branch of its own (a mostly full map skips its full words at
/// vector speed) and a block of words that all hold some pays one
/// predictable loop.
#[inline(always)]
pub(crate) fn fold_bits<V: Vector, B>(
    words: &[u64],
    from: usize,
    end: usize,
    x: u64,
    init: B,
    mut f: impl FnMut(B, usize) -> B,
) -> B {
    let words = &words[..end];
    let step = 4 * V::LANES;
    let pat = V::splat(x);
    let mut acc = init;
    let mut i = from;
    while i + step <= end {
        // SAFETY: `i + 4 * LANES <= end = words.len()`.
        let mut m = diff_mask(unsafe { load4::<V>(words, i) }, pat);
        while m != 0 {
            let k = i + m.trailing_zeros() as usize;
            m &= m - 1;
            acc = bits_of(acc, words[k] ^ x, k * 64, &mut f);
        }
        i += step;
    }
    while i < end {
        acc = bits_of(acc, words[i] ^ x, i * 64, &mut f);
        i += 1;
    }
    acc
}

/// First index `>= from` with `words[i] != pat`: aligned head word by word,
/// then four vectors per step (one combined test), then the tail a vector
/// at a time through partial loads.
#[inline(always)]
pub(crate) fn first_diff<V: Vector>(words: &[u64], from: usize, pat: u64) -> Option<usize> {
    let n = words.len();
    let step = 4 * V::LANES;
    let mut i = from;
    let head = n.min(from.saturating_add(head_to_align(words, from, bytes::<V>())));
    while i < head {
        if words[i] != pat {
            return Some(i);
        }
        i += 1;
    }
    let vpat = V::splat(pat);
    while i + step <= n {
        // SAFETY: `i + step <= n` was just checked.
        let v = unsafe { load4::<V>(words, i) };
        if V::any_ne4(v, vpat) {
            return Some(i + diff_mask(v, vpat).trailing_zeros() as usize);
        }
        i += step;
    }
    while i < n {
        let k = (n - i).min(V::LANES);
        // SAFETY: `i + k <= n`, `k <= LANES`.
        let v = unsafe { V::load_part(words, i, k) };
        let live = u64::MAX >> (64 - k);
        let m = v.ne_mask(vpat) & live;
        if m != 0 {
            return Some(i + m.trailing_zeros() as usize);
        }
        i += k;
    }
    None
}

/// Last index `< end` with `words[i] != pat`: word by word down to a vector
/// boundary, four vectors per step, the rest word by word.
#[inline(always)]
pub(crate) fn last_diff<V: Vector>(words: &[u64], end: usize, pat: u64) -> Option<usize> {
    let step = 4 * V::LANES;
    let mut e = end.min(words.len());
    while e > 0 && !(words.as_ptr().wrapping_add(e) as usize).is_multiple_of(bytes::<V>()) {
        e -= 1;
        if words[e] != pat {
            return Some(e);
        }
    }
    let vpat = V::splat(pat);
    while e >= step {
        let i = e - step;
        // SAFETY: `i + step == e <= words.len()`.
        let v = unsafe { load4::<V>(words, i) };
        if V::any_ne4(v, vpat) {
            let m = diff_mask(v, vpat);
            return Some(i + 63 - m.leading_zeros() as usize);
        }
        e = i;
    }
    scalar::last_diff(words, e, pat)
}

/// How far ahead of the zero-lane search's loads it prefetches, in words
/// (1 KiB, sixteen cache lines), where the ISA prefetches. A search that
/// must read a bitmap bigger than L1 (the 40 KiB one of the
/// `bitmap_find_next_zero_area` benchmark) is bound by how fast lines come
/// in from L2; asking for them early keeps more misses in flight (about 8%
/// faster with AVX2).
const PREFETCH: usize = 128;

/// [`first_zero_chunk`] for lanes of `C` bits: the loop is instantiated per
/// lane width, so no step branches on it.
///
/// Each step folds its `FOLD` vectors into their lane-wise minimum (a lane
/// of the minimum is zero iff that lane is zero in some vector) and tests it
/// once. Only a hit looks at the vectors one by one. With `FOLD == 1`
/// there is nothing to fold: the search is the vector-at-a-time loop alone,
/// one `first_zero_lane` per vector, not a test followed by a second one to
/// place the hit.
#[inline(always)]
fn zero_chunk_scan<V: Vector, const C: usize>(
    words: &[u64],
    from: usize,
    chunk: Chunk,
) -> Option<usize> {
    let n = words.len();
    let l = V::LANES;
    let fold = V::FOLD;
    let zstep = fold * l;
    debug_assert!(fold.is_power_of_two() && fold <= 8);
    // Start on a 64-byte boundary: each step is then whole lines.
    let head = n.min(from.saturating_add(head_to_align(words, from, 64)));
    if let Some(bit) = scalar::first_zero_chunk(&words[..head], from, chunk) {
        return Some(bit);
    }
    let mut i = head.max(from);
    let vec_at = |i: usize| {
        debug_assert!(i + l <= n);
        // SAFETY: every caller below checks that the `LANES` words from `i`
        // are in bounds.
        unsafe { V::load(words, i) }
    };
    while fold > 1 && i + zstep <= n {
        // A prefetch never faults, so it may point past the slice; the
        // address is only computed (wrapping), never dereferenced by us.
        let ahead = words.as_ptr().wrapping_add(i + PREFETCH);
        for line in 0..zstep / 8 {
            V::prefetch(ahead.wrapping_add(8 * line));
        }
        // Pairwise tree of minima (`fold` is a constant per ISA, so this
        // unrolls completely).
        let mut v = [V::splat(0); 8];
        for (k, x) in v.iter_mut().enumerate().take(fold) {
            *x = vec_at(i + k * l);
        }
        let mut w = fold;
        while w > 1 {
            w /= 2;
            for k in 0..w {
                v[k] = V::min_lanes::<C>(v[2 * k], v[2 * k + 1]);
            }
        }
        if v[0].has_zero_lane::<C>() {
            for k in 0..fold {
                if let Some(off) = vec_at(i + k * l).first_zero_lane::<C>() {
                    return Some((i + k * l) * 64 + off);
                }
            }
            // A false hit of a prefilter (AVX2's 64-bit minimum): no word
            // of the step is zero.
        }
        i += zstep;
    }
    while i + l <= n {
        if let Some(off) = vec_at(i).first_zero_lane::<C>() {
            return Some(i * 64 + off);
        }
        i += l;
    }
    scalar::first_zero_chunk(words, i, chunk)
}

/// Bit position of the first all-zero `chunk` lane in `words[from..]`.
///
/// A one-lane vector (the scalar level) has no step to fold and no line to
/// align to: it runs the portable word loop (the one the vector levels use
/// for their heads and tails) from `from` to the end. Its 64-bit form is a
/// plain search for a zero word, whose compare and branch fuse; the
/// vector-at-a-time loop of [`zero_chunk_scan`] instantiated for one word
/// keeps a separate bound check and measured up to 1.4x slower.
#[inline(always)]
pub(crate) fn first_zero_chunk<V: Vector>(
    words: &[u64],
    from: usize,
    chunk: Chunk,
) -> Option<usize> {
    if V::LANES == 1 {
        return scalar::first_zero_chunk(words, from, chunk);
    }
    // One instantiation per lane width, chosen once per call.
    match chunk {
        Chunk::B8 => zero_chunk_scan::<V, 8>(words, from, chunk),
        Chunk::B16 => zero_chunk_scan::<V, 16>(words, from, chunk),
        Chunk::B32 => zero_chunk_scan::<V, 32>(words, from, chunk),
        Chunk::B64 => zero_chunk_scan::<V, 64>(words, from, chunk),
    }
}

/// Number of set bits in `words`: four accumulators of per-lane counts,
/// added lane-wise and summed once; the tail a vector, then a word, at a
/// time. A one-lane vector (the scalar level) and slices shorter than a step
/// count word by word, which the compiler turns into its own unrolled loop
/// (vectorised on baseline x86_64, `popcnt` with the level's features).
#[inline(always)]
pub(crate) fn count_ones<V: Vector>(words: &[u64]) -> usize {
    let n = words.len();
    let step = 4 * V::LANES;
    if V::LANES == 1 || n < step {
        return scalar::count_ones(words);
    }
    let mut i = 0;
    let mut acc = [V::splat(0); 4];
    // The bound of the whole steps, computed once: the loop then keeps one
    // index (`i + step <= n` each step costs it a second one, and the loop
    // is front-end bound).
    let full = n - n % step;
    while i < full {
        // SAFETY: `i < full`, a multiple of `step` no greater than `n`, so
        // `i + step <= n`.
        let v = unsafe { load4::<V>(words, i) };
        for (a, x) in acc.iter_mut().zip(v) {
            *a = V::add_popcnt(*a, x);
        }
        i += step;
    }
    while i + V::LANES <= n {
        // SAFETY: `i + LANES <= n`.
        let v = unsafe { V::load(words, i) };
        acc[0] = V::add_popcnt(acc[0], v);
        i += V::LANES;
    }
    let total = acc[0].add(acc[1]).add(acc[2].add(acc[3])).sum() as usize;
    total + scalar::count_ones(&words[i..])
}

/// The word holding the `n`-th set bit (from 0) and the bit's rank inside
/// it, or `Err(n - total)` when `words` holds `total <= n` set bits: steps
/// of four vectors counted at once, the step that holds the bit narrowed by
/// the portable loop. A one-lane vector (the scalar level) runs the portable
/// loop throughout: its blocks of eight words, counted by one auto-vectorised
/// sum, beat four one-word steps.
#[inline(always)]
pub(crate) fn nth_word<V: Vector>(words: &[u64], mut n: usize) -> Result<(usize, u32), usize> {
    if V::LANES == 1 {
        return scalar::nth_word(words, n);
    }
    let len = words.len();
    let step = 4 * V::LANES;
    let mut i = 0;
    while i + step <= len {
        // SAFETY: `i + step <= len`.
        let v = unsafe { load4::<V>(words, i) };
        let zero = V::splat(0);
        let c = V::add_popcnt(
            V::add_popcnt(V::add_popcnt(V::add_popcnt(zero, v[0]), v[1]), v[2]),
            v[3],
        );
        let k = c.sum() as usize;
        if n < k {
            break;
        }
        n -= k;
        i += step;
    }
    match scalar::nth_word(&words[i..], n) {
        Ok((w, r)) => Ok((i + w, r)),
        Err(rest) => Err(rest),
    }
}
