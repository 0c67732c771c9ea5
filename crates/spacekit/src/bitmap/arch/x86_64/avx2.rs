//! AVX2 word-skipping loops: 128 bytes (four 256-bit loads) per step, and
//! 256 bytes (eight loads folded by a lane-wise minimum, with software
//! prefetch) for the zero-lane search of the clear-area filter.
//!
//! Every function here is `unsafe` only because it is compiled with
//! `#[target_feature(enable = "avx2")]`; callers hold a `Level` of kind
//! `Avx2` or above, which proves the CPU has AVX2 (and POPCNT). Memory
//! accesses stay inside the slices they are given (prefetches, which never
//! fault, may name lines past them).

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

/// Words per 256-bit vector.
const LANES: usize = 4;

/// Words per step of the zero-lane search: eight vectors, 256 bytes (four
/// cache lines).
const ZSTEP: usize = 8 * LANES;

/// How far ahead of the zero-lane search's loads it prefetches, in words
/// (1 KiB, sixteen cache lines). A search that must read a bitmap bigger
/// than L1 (seed 000's 40 KiB) is bound by how fast lines come in from L2;
/// asking for them early keeps more misses in flight (about 8% faster here).
const PREFETCH: usize = 128;

/// All-ones in every `C`-bit lane of `v` that is zero.
#[target_feature(enable = "avx2")]
#[inline]
fn zero_lanes<const C: usize>(v: __m256i) -> __m256i {
    let z = _mm256_setzero_si256();
    match C {
        8 => _mm256_cmpeq_epi8(v, z),
        16 => _mm256_cmpeq_epi16(v, z),
        32 => _mm256_cmpeq_epi32(v, z),
        _ => _mm256_cmpeq_epi64(v, z),
    }
}

/// The lane-wise unsigned minimum of `a` and `b` at `C` bits, which is zero
/// in a lane iff either input is. AVX2 has no 64-bit minimum: at `C = 64`
/// this is the 32-bit one, zero in a 64-bit lane only if *some* input has
/// both halves zero there or one has the low and the other the high half
/// zero; a prefilter, so the search checks its hits exactly.
#[target_feature(enable = "avx2")]
#[inline]
fn min_lanes<const C: usize>(a: __m256i, b: __m256i) -> __m256i {
    match C {
        8 => _mm256_min_epu8(a, b),
        16 => _mm256_min_epu16(a, b),
        _ => _mm256_min_epu32(a, b),
    }
}

/// Bit offset, inside the vector, of the first zero `C`-bit lane of `v`.
#[target_feature(enable = "avx2")]
#[inline]
fn first_zero_lane<const C: usize>(v: __m256i) -> Option<usize> {
    // One mask bit per byte; a zero lane sets all its bytes, so the lowest
    // set bit is the first byte of the first zero lane.
    let m = _mm256_movemask_epi8(zero_lanes::<C>(v)) as u32;
    (m != 0).then(|| m.trailing_zeros() as usize * 8)
}

/// [`first_zero_chunk`] for lanes of `C` bits: the loop is instantiated per
/// lane width, so no step branches on it.
///
/// Each 256-byte step folds its eight vectors into their lane-wise minimum
/// (a lane of the minimum is zero iff that lane is zero in some vector) and
/// tests it once: nine vector operations besides the loads for four cache
/// lines. Only a hit looks at the vectors one by one.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn zero_chunk_scan<const C: usize>(
    words: &[u64],
    from: usize,
    chunk: Chunk,
) -> Option<usize> {
    let n = words.len();
    // Start on a 64-byte boundary: each step is then four whole lines.
    let head = n.min(from.saturating_add(head_to_line(words, from)));
    if let Some(bit) = scalar::first_zero_chunk(&words[..head], from, chunk) {
        return Some(bit);
    }
    let mut i = head.max(from);
    let vec_at = |i: usize| {
        debug_assert!(i + LANES <= n);
        // SAFETY: every caller below checks that the four words from `i`
        // are in bounds; the load is unaligned.
        unsafe { _mm256_loadu_si256(words.as_ptr().add(i).cast::<__m256i>()) }
    };
    while i + ZSTEP <= n {
        // A prefetch never faults, so it may point past the slice; the
        // address is only computed (wrapping), never dereferenced by us.
        let ahead = words.as_ptr().wrapping_add(i + PREFETCH).cast::<i8>();
        for line in 0..4 {
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64 * line));
        }
        let v: [__m256i; 8] = core::array::from_fn(|k| vec_at(i + k * LANES));
        let m = min_lanes::<C>(
            min_lanes::<C>(min_lanes::<C>(v[0], v[1]), min_lanes::<C>(v[2], v[3])),
            min_lanes::<C>(min_lanes::<C>(v[4], v[5]), min_lanes::<C>(v[6], v[7])),
        );
        let z = zero_lanes::<C>(m);
        if _mm256_testz_si256(z, z) == 0 {
            for (k, &x) in v.iter().enumerate() {
                if let Some(off) = first_zero_lane::<C>(x) {
                    return Some((i + k * LANES) * 64 + off);
                }
            }
            // A false hit of the 64-bit prefilter: no word of the step is
            // zero.
        }
        i += ZSTEP;
    }
    while i + LANES <= n {
        if let Some(off) = first_zero_lane::<C>(vec_at(i)) {
            return Some(i * 64 + off);
        }
        i += LANES;
    }
    scalar::first_zero_chunk(words, i, chunk)
}

/// Words to handle one by one from index `i` before `words[i..]` starts on
/// a 64-byte (cache-line) boundary.
#[inline(always)]
fn head_to_line(words: &[u64], i: usize) -> usize {
    let addr = words.as_ptr().wrapping_add(i) as usize;
    (64 - addr % 64) % 64 / 8
}

/// Bit position of the first all-zero `chunk` lane in `words[from..]`.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn first_zero_chunk(words: &[u64], from: usize, chunk: Chunk) -> Option<usize> {
    // One instantiation per lane width, chosen once per call.
    match chunk {
        // SAFETY: AVX2 is enabled here, all `zero_chunk_scan` requires.
        Chunk::B8 => unsafe { zero_chunk_scan::<8>(words, from, chunk) },
        // SAFETY: as above.
        Chunk::B16 => unsafe { zero_chunk_scan::<16>(words, from, chunk) },
        // SAFETY: as above.
        Chunk::B32 => unsafe { zero_chunk_scan::<32>(words, from, chunk) },
        // SAFETY: as above.
        Chunk::B64 => unsafe { zero_chunk_scan::<64>(words, from, chunk) },
    }
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
