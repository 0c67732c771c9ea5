//! AVX-512 word-skipping loops: 256 bytes (four 512-bit loads) per step,
//! compares straight into mask registers, `vpopcntq` counts and masked loads
//! for the tails.
//!
//! Every function here is `unsafe` only because it is compiled with the
//! AVX-512 target features; callers hold a `Level` of kind `Avx512`, which
//! proves the CPU has AVX-512 F, BW, VL and VPOPCNTDQ (and AVX2, POPCNT and
//! BMI1). Memory accesses stay inside the slices they are given: full loads
//! only where eight words are in bounds, masked loads (which do not touch
//! masked-off lanes) elsewhere.

use super::super::scalar::{self, Chunk};
use core::arch::x86_64::*;

/// Words per 512-bit vector.
const LANES: usize = 8;

/// Words handled per unrolled step (four vectors).
const STEP: usize = 4 * LANES;

/// Words to handle one by one from index `i` before `words[i..]` starts on a
/// 64-byte boundary, so no load straddles two cache lines.
#[inline(always)]
fn head_to_align(words: &[u64], i: usize) -> usize {
    let addr = words.as_ptr().wrapping_add(i) as usize;
    (64 - addr % 64) % 64 / 8
}

/// Words `i..i + 8` as one vector.
///
/// # Safety
/// AVX-512 F must be available and `i + 8 <= words.len()`.
#[inline(always)]
unsafe fn load(words: &[u64], i: usize) -> __m512i {
    debug_assert!(i + LANES <= words.len());
    // SAFETY: the caller guarantees eight words from `i` are in bounds; the
    // load is unaligned.
    unsafe { _mm512_loadu_si512(words.as_ptr().add(i).cast()) }
}

/// Words `i..i + k` (`k < 8`) in the low lanes, zeros above.
///
/// # Safety
/// AVX-512 F must be available and `i + k <= words.len()`, `k <= 8`.
#[inline(always)]
unsafe fn load_part(words: &[u64], i: usize, k: usize) -> __m512i {
    debug_assert!(k <= LANES && i + k <= words.len());
    let m = ((1u32 << k) - 1) as __mmask8;
    // SAFETY: a masked load reads only the `k` lanes its mask selects, all
    // in bounds (the pointer itself is `words.as_ptr() + i <= end`); masked
    // lanes do not fault.
    unsafe { _mm512_maskz_loadu_epi64(m, words.as_ptr().add(i).cast()) }
}

/// The four vectors of the step at `i`.
///
/// # Safety
/// As [`load`], with `i + 32 <= words.len()`.
#[inline(always)]
unsafe fn load4(words: &[u64], i: usize) -> [__m512i; 4] {
    // SAFETY: the caller guarantees 32 words from `i` are in bounds.
    unsafe {
        [
            load(words, i),
            load(words, i + LANES),
            load(words, i + 2 * LANES),
            load(words, i + 3 * LANES),
        ]
    }
}

/// Bit `k` set iff word `k` of the 32-word step differs from `pat`.
#[target_feature(enable = "avx512f")]
#[inline]
fn diff_mask(v: [__m512i; 4], pat: __m512i) -> u32 {
    let m = |x| u32::from(_mm512_cmpneq_epi64_mask(x, pat));
    m(v[0]) | m(v[1]) << 8 | m(v[2]) << 16 | m(v[3]) << 24
}

/// Whether any word of the step differs from `pat`: two ternary-logic ops
/// (`(a ^ c) | (b ^ c)`, truth table 0x7E), an OR and one test.
#[target_feature(enable = "avx512f")]
#[inline]
fn any_diff(v: [__m512i; 4], pat: __m512i) -> bool {
    let d01 = _mm512_ternarylogic_epi64::<0x7E>(v[0], v[1], pat);
    let d23 = _mm512_ternarylogic_epi64::<0x7E>(v[2], v[3], pat);
    let o = _mm512_or_si512(d01, d23);
    _mm512_test_epi64_mask(o, o) != 0
}

/// First index `>= from` with `words[i] != pat`.
///
/// # Safety
/// The CPU must support AVX-512 F.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vpopcntdq,avx2,popcnt,bmi1")]
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
    let vpat = _mm512_set1_epi64(pat as i64);
    while i + STEP <= n {
        // SAFETY: `i + STEP <= n` was just checked.
        let v = unsafe { load4(words, i) };
        if any_diff(v, vpat) {
            let m = diff_mask(v, vpat);
            return Some(i + m.trailing_zeros() as usize);
        }
        i += STEP;
    }
    while i < n {
        let k = (n - i).min(LANES);
        // SAFETY: `i + k <= n`, `k <= 8`.
        let v = unsafe { load_part(words, i, k) };
        let live = ((1u32 << k) - 1) as __mmask8;
        let m = _mm512_mask_cmpneq_epi64_mask(live, v, vpat);
        if m != 0 {
            return Some(i + m.trailing_zeros() as usize);
        }
        i += k;
    }
    None
}

/// Last index `< end` with `words[i] != pat`.
///
/// # Safety
/// The CPU must support AVX-512 F.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vpopcntdq,avx2,popcnt,bmi1")]
pub(crate) unsafe fn last_diff(words: &[u64], end: usize, pat: u64) -> Option<usize> {
    let mut e = end.min(words.len());
    // Walk down to a 64-byte boundary first.
    while e > 0 && !(words.as_ptr().wrapping_add(e) as usize).is_multiple_of(64) {
        e -= 1;
        if words[e] != pat {
            return Some(e);
        }
    }
    let vpat = _mm512_set1_epi64(pat as i64);
    while e >= STEP {
        let i = e - STEP;
        // SAFETY: `i + STEP == e <= words.len()`.
        let v = unsafe { load4(words, i) };
        if any_diff(v, vpat) {
            let m = diff_mask(v, vpat);
            return Some(i + 31 - m.leading_zeros() as usize);
        }
        e = i;
    }
    scalar::last_diff(words, e, pat)
}

/// Bit `k` set iff `C`-bit lane `k` of `v` is zero (64, 32, 16 or 8
/// lanes).
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn zero_lanes<const C: usize>(v: __m512i) -> u64 {
    match C {
        8 => _mm512_testn_epi8_mask(v, v),
        16 => u64::from(_mm512_testn_epi16_mask(v, v)),
        32 => u64::from(_mm512_testn_epi32_mask(v, v)),
        _ => u64::from(_mm512_testn_epi64_mask(v, v)),
    }
}

/// The lane-wise unsigned minimum of `a` and `b` at `C` bits: zero in a
/// lane iff either input is zero there.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn min_lanes<const C: usize>(a: __m512i, b: __m512i) -> __m512i {
    match C {
        8 => _mm512_min_epu8(a, b),
        16 => _mm512_min_epu16(a, b),
        32 => _mm512_min_epu32(a, b),
        _ => _mm512_min_epu64(a, b),
    }
}

/// [`first_zero_chunk`] for lanes of `C` bits, instantiated per lane width
/// so that no step branches on it.
///
/// A 256-byte step takes the lane-wise minimum of its four vectors and
/// tests it once (a lane of the minimum is zero iff that lane is zero in
/// some vector); the per-vector masks that locate the lane are only built on
/// a hit.
///
/// # Safety
/// The CPU must support AVX-512 F and BW.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vpopcntdq,avx2,popcnt,bmi1")]
#[inline]
unsafe fn zero_chunk_scan<const C: usize>(
    words: &[u64],
    from: usize,
    chunk: Chunk,
) -> Option<usize> {
    let n = words.len();
    let head = n.min(from.saturating_add(head_to_align(words, from)));
    if let Some(bit) = scalar::first_zero_chunk(&words[..head], from, chunk) {
        return Some(bit);
    }
    // Lane `tz(m)` of vector `j` of the step at word `i`.
    let at = |i: usize, j: usize, m: u64| i * 64 + j * 512 + m.trailing_zeros() as usize * C;
    let mut i = head.max(from);
    while i + STEP <= n {
        // SAFETY: `i + STEP <= n`.
        let v = unsafe { load4(words, i) };
        let lo = min_lanes::<C>(v[0], v[1]);
        let hi = min_lanes::<C>(v[2], v[3]);
        if zero_lanes::<C>(min_lanes::<C>(lo, hi)) != 0 {
            for (j, &x) in v.iter().enumerate() {
                let m = zero_lanes::<C>(x);
                if m != 0 {
                    return Some(at(i, j, m));
                }
            }
        }
        i += STEP;
    }
    scalar::first_zero_chunk(words, i, chunk)
}

/// Bit position of the first all-zero `chunk` lane in `words[from..]`.
///
/// # Safety
/// The CPU must support AVX-512 F and BW.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vpopcntdq,avx2,popcnt,bmi1")]
pub(crate) unsafe fn first_zero_chunk(words: &[u64], from: usize, chunk: Chunk) -> Option<usize> {
    // One instantiation per lane width, chosen once per call.
    match chunk {
        // SAFETY: the features `zero_chunk_scan` needs are enabled here.
        Chunk::B8 => unsafe { zero_chunk_scan::<8>(words, from, chunk) },
        // SAFETY: as above.
        Chunk::B16 => unsafe { zero_chunk_scan::<16>(words, from, chunk) },
        // SAFETY: as above.
        Chunk::B32 => unsafe { zero_chunk_scan::<32>(words, from, chunk) },
        // SAFETY: as above.
        Chunk::B64 => unsafe { zero_chunk_scan::<64>(words, from, chunk) },
    }
}

/// Number of set bits in `words`: `vpopcntq` over four vectors per step,
/// the tail through one masked load.
///
/// # Safety
/// The CPU must support AVX-512 F and VPOPCNTDQ.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vpopcntdq,avx2,popcnt,bmi1")]
pub(crate) unsafe fn count_ones(words: &[u64]) -> usize {
    let n = words.len();
    let mut i = 0;
    let mut acc = [_mm512_setzero_si512(); 4];
    while i + STEP <= n {
        // SAFETY: `i + STEP <= n`.
        let v = unsafe { load4(words, i) };
        for (a, x) in acc.iter_mut().zip(v) {
            *a = _mm512_add_epi64(*a, _mm512_popcnt_epi64(x));
        }
        i += STEP;
    }
    while i < n {
        let k = (n - i).min(LANES);
        // SAFETY: `i + k <= n`, `k <= 8`.
        let v = unsafe { load_part(words, i, k) };
        acc[0] = _mm512_add_epi64(acc[0], _mm512_popcnt_epi64(v));
        i += k;
    }
    let s = _mm512_add_epi64(
        _mm512_add_epi64(acc[0], acc[1]),
        _mm512_add_epi64(acc[2], acc[3]),
    );
    _mm512_reduce_add_epi64(s) as usize
}

/// The word holding the `n`-th set bit and its rank there, or
/// `Err(n - total)`: 32-word steps counted with `vpopcntq`, the step that
/// holds the bit narrowed by the scalar loop.
///
/// # Safety
/// The CPU must support AVX-512 F and VPOPCNTDQ.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vpopcntdq,avx2,popcnt,bmi1")]
pub(crate) unsafe fn nth_word(words: &[u64], mut n: usize) -> Result<(usize, u32), usize> {
    let len = words.len();
    let mut i = 0;
    while i + STEP <= len {
        // SAFETY: `i + STEP <= len`.
        let v = unsafe { load4(words, i) };
        let c = _mm512_add_epi64(
            _mm512_add_epi64(_mm512_popcnt_epi64(v[0]), _mm512_popcnt_epi64(v[1])),
            _mm512_add_epi64(_mm512_popcnt_epi64(v[2]), _mm512_popcnt_epi64(v[3])),
        );
        let k = _mm512_reduce_add_epi64(c) as usize;
        if n < k {
            break;
        }
        n -= k;
        i += STEP;
    }
    match scalar::nth_word(&words[i..], n) {
        Ok((w, r)) => Ok((i + w, r)),
        Err(rest) => Err(rest),
    }
}
