//! AVX2 word-skipping loops: 128 bytes (four 256-bit loads) per step.
//!
//! Every function here is `unsafe` only because it is compiled with
//! `#[target_feature(enable = "avx2")]`; callers hold a `Level` of kind
//! `Avx2` or above, which proves the CPU has AVX2 (and POPCNT). Memory
//! accesses stay inside the slices they are given.

use super::super::scalar::{self, Chunk};
use core::arch::x86_64::*;

/// Words handled per unrolled step.
const STEP: usize = 16;

/// Words to handle one by one from index `i` before `words[i..]` starts on a
/// 32-byte boundary, so no vector load straddles two cache lines (a heap
/// buffer is only 16-byte aligned, and split loads cost up to 1.7x here).
#[inline(always)]
fn head_to_align(words: &[u64], i: usize) -> usize {
    let addr = words.as_ptr().wrapping_add(i) as usize;
    (32 - addr % 32) % 32 / 8
}

/// Bit `k` set iff 64-bit lane `k` of `v` is non-zero.
///
/// # Safety
/// AVX2 must be available: call only from `#[target_feature(enable = "avx2")]`
/// functions, into which this is inlined.
#[inline(always)]
unsafe fn nonzero_lanes(v: __m256i) -> u32 {
    // SAFETY: only called from `#[target_feature(enable = "avx2")]` functions.
    unsafe {
        let z = _mm256_cmpeq_epi64(v, _mm256_setzero_si256());
        (!_mm256_movemask_pd(_mm256_castsi256_pd(z)) as u32) & 0xF
    }
}

/// Loads four vectors (16 words) starting at `words[i]`, each XORed with `pat`.
///
/// # Safety
/// AVX2 must be available and `i + 16 <= words.len()`.
#[inline(always)]
unsafe fn load4_xor(words: &[u64], i: usize, pat: __m256i) -> [__m256i; 4] {
    debug_assert!(i + STEP <= words.len());
    // SAFETY: the caller guarantees 16 words from `i` are in bounds; unaligned
    // loads have no alignment requirement.
    unsafe {
        let p = words.as_ptr().add(i).cast::<__m256i>();
        [
            _mm256_xor_si256(_mm256_loadu_si256(p), pat),
            _mm256_xor_si256(_mm256_loadu_si256(p.add(1)), pat),
            _mm256_xor_si256(_mm256_loadu_si256(p.add(2)), pat),
            _mm256_xor_si256(_mm256_loadu_si256(p.add(3)), pat),
        ]
    }
}

/// Bit `k` set iff word `k` of the 16-word block differs from the pattern.
///
/// # Safety
/// As [`nonzero_lanes`].
#[inline(always)]
unsafe fn block_mask(v: [__m256i; 4]) -> u32 {
    // SAFETY: only called from `#[target_feature(enable = "avx2")]` functions.
    unsafe {
        nonzero_lanes(v[0])
            | nonzero_lanes(v[1]) << 4
            | nonzero_lanes(v[2]) << 8
            | nonzero_lanes(v[3]) << 12
    }
}

/// Whether any lane of the four vectors is non-zero.
///
/// # Safety
/// As [`nonzero_lanes`].
#[inline(always)]
unsafe fn any_nonzero(v: [__m256i; 4]) -> bool {
    // SAFETY: only called from `#[target_feature(enable = "avx2")]` functions.
    unsafe {
        let o = _mm256_or_si256(_mm256_or_si256(v[0], v[1]), _mm256_or_si256(v[2], v[3]));
        _mm256_testz_si256(o, o) == 0
    }
}

/// First index `>= from` with `words[i] != pat`.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn first_diff(words: &[u64], from: usize, pat: u64) -> Option<usize> {
    let n = words.len();
    let mut i = from;
    let head = n.min(from.saturating_add(head_to_align(words, from)));
    while i < head {
        if words[i] != pat {
            return Some(i);
        }
        i += 1;
    }
    let vpat = _mm256_set1_epi64x(pat as i64);
    while i + STEP <= n {
        // SAFETY: `i + STEP <= n` was just checked; AVX2 is enabled here.
        let v = unsafe { load4_xor(words, i, vpat) };
        // SAFETY: AVX2 is enabled for this function.
        if unsafe { any_nonzero(v) } {
            // SAFETY: AVX2 is enabled for this function.
            let m = unsafe { block_mask(v) };
            return Some(i + m.trailing_zeros() as usize);
        }
        i += STEP;
    }
    scalar::first_diff(words, i, pat)
}

/// Last index `< end` with `words[i] != pat`.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn last_diff(words: &[u64], end: usize, pat: u64) -> Option<usize> {
    let mut e = end.min(words.len());
    // Walk down to a 32-byte boundary first.
    while e > 0 && !(words.as_ptr().wrapping_add(e) as usize).is_multiple_of(32) {
        e -= 1;
        if words[e] != pat {
            return Some(e);
        }
    }
    let vpat = _mm256_set1_epi64x(pat as i64);
    while e >= STEP {
        let i = e - STEP;
        // SAFETY: `i + STEP == e <= words.len()`; AVX2 is enabled here.
        let v = unsafe { load4_xor(words, i, vpat) };
        // SAFETY: AVX2 is enabled for this function.
        if unsafe { any_nonzero(v) } {
            // SAFETY: AVX2 is enabled for this function.
            let m = unsafe { block_mask(v) };
            return Some(i + 31 - m.leading_zeros() as usize);
        }
        e = i;
    }
    scalar::last_diff(words, e, pat)
}

/// All-ones in every `chunk`-bit lane of `v` that is zero.
///
/// # Safety
/// As [`nonzero_lanes`].
#[inline(always)]
unsafe fn zero_lanes(v: __m256i, chunk: Chunk) -> __m256i {
    // SAFETY: only called from `#[target_feature(enable = "avx2")]` functions.
    unsafe {
        let z = _mm256_setzero_si256();
        match chunk {
            Chunk::B8 => _mm256_cmpeq_epi8(v, z),
            Chunk::B16 => _mm256_cmpeq_epi16(v, z),
            Chunk::B32 => _mm256_cmpeq_epi32(v, z),
            Chunk::B64 => _mm256_cmpeq_epi64(v, z),
        }
    }
}

/// Bit position of the first all-zero `chunk` lane in `words[from..]`.
///
/// The four lane compares of a 128-byte step are ORed and tested once; the
/// byte masks that locate the lane are only built on a hit.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn first_zero_chunk(words: &[u64], from: usize, chunk: Chunk) -> Option<usize> {
    let n = words.len();
    let head = n.min(from.saturating_add(head_to_align(words, from)));
    if let Some(bit) = scalar::first_zero_chunk(&words[..head], from, chunk) {
        return Some(bit);
    }
    let mut i = head.max(from);
    while i + STEP <= n {
        // SAFETY: `i + STEP <= n`; unaligned loads; AVX2 is enabled here.
        let e = unsafe {
            let p = words.as_ptr().add(i).cast::<__m256i>();
            [
                zero_lanes(_mm256_loadu_si256(p), chunk),
                zero_lanes(_mm256_loadu_si256(p.add(1)), chunk),
                zero_lanes(_mm256_loadu_si256(p.add(2)), chunk),
                zero_lanes(_mm256_loadu_si256(p.add(3)), chunk),
            ]
        };
        let any = _mm256_or_si256(_mm256_or_si256(e[0], e[1]), _mm256_or_si256(e[2], e[3]));
        if _mm256_testz_si256(any, any) == 0 {
            let m = |v| _mm256_movemask_epi8(v) as u32 as u64;
            let lo = m(e[0]) | m(e[1]) << 32;
            let byte = if lo != 0 {
                lo.trailing_zeros() as usize
            } else {
                64 + (m(e[2]) | m(e[3]) << 32).trailing_zeros() as usize
            };
            return Some(i * 64 + byte * 8);
        }
        i += STEP;
    }
    scalar::first_zero_chunk(words, i, chunk)
}

/// Number of set bits in `words`, compiled with POPCNT and AVX2 (the
/// compiler vectorises the sum).
///
/// # Safety
/// The CPU must support AVX2 and POPCNT.
#[target_feature(enable = "avx2,popcnt")]
pub(crate) unsafe fn count_ones(words: &[u64]) -> usize {
    scalar::count_ones(words)
}

/// [`scalar::nth_word`] compiled with POPCNT and AVX2.
///
/// # Safety
/// The CPU must support AVX2 and POPCNT.
#[target_feature(enable = "avx2,popcnt")]
pub(crate) unsafe fn nth_word(words: &[u64], n: usize) -> Result<(usize, u32), usize> {
    scalar::nth_word(words, n)
}
