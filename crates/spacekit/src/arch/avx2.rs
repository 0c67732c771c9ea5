//! The AVX2 [`Vector`]: four words in a 256-bit register.
//!
//! [`Avx2`] is private to this module and only instantiated by [`run`],
//! which is compiled with AVX2, POPCNT and BMI1 and which callers reach only
//! with a `Level` proving those features; that is what makes the intrinsics
//! in the (safe) trait methods sound.

use core::arch::x86_64::*;

use super::vector::{Job, Vector};

/// Four words in a 256-bit vector.
#[derive(Clone, Copy)]
struct Avx2(__m256i);

/// Runs `job` with [`Avx2`] vectors, the whole job compiled with AVX2,
/// POPCNT and BMI1 (`tzcnt`/`blsr` in the bit loops).
///
/// # Safety
/// The CPU must support AVX2, POPCNT and BMI1.
#[target_feature(enable = "avx2,popcnt,bmi1")]
pub(crate) unsafe fn run<J: Job>(job: J) -> J::Output {
    job.run::<Avx2>()
}

// SAFETY: `Avx2` is only instantiated by `run` (see the module
// documentation); its loads read only the words their contracts name (the
// masked load does not touch masked-off lanes).
unsafe impl Vector for Avx2 {
    const LANES: usize = 4;
    // Eight vectors, 256 bytes (four cache lines), per zero-lane step.
    const FOLD: usize = 8;
    const STREAMS: bool = true;

    /// Two 32-byte `vmovntdq` per line, back to back (one line's write
    /// combining).
    #[inline(always)]
    unsafe fn stream_lines(src: &[u64], dst: *mut u64) {
        debug_assert!(src.len().is_multiple_of(8) && (dst as usize).is_multiple_of(64));
        let mut i = 0;
        while i < src.len() {
            // SAFETY: AVX2 as above; `i + 8 <= src.len()` (a multiple of
            // 8); the caller guarantees `dst` is line-aligned and valid for
            // `src.len()` words, so the two stores write one whole line.
            unsafe {
                let a = _mm256_loadu_si256(src.as_ptr().add(i).cast());
                let b = _mm256_loadu_si256(src.as_ptr().add(i + 4).cast());
                _mm256_stream_si256(dst.add(i).cast(), a);
                _mm256_stream_si256(dst.add(i + 4).cast(), b);
            }
            i += 8;
        }
    }

    #[inline(always)]
    fn store_fence() {
        // SAFETY: SSE, part of the x86_64 baseline.
        unsafe { _mm_sfence() }
    }

    #[inline(always)]
    fn splat(x: u64) -> Self {
        // SAFETY: AVX2 is enabled in `run`, the only instantiator.
        Avx2(unsafe { _mm256_set1_epi64x(x as i64) })
    }

    #[inline(always)]
    unsafe fn load(words: &[u64], i: usize) -> Self {
        debug_assert!(i + 4 <= words.len());
        // SAFETY: AVX2 as above; the caller guarantees four words from `i`
        // are in bounds; the load is unaligned.
        Avx2(unsafe { _mm256_loadu_si256(words.as_ptr().add(i).cast()) })
    }

    #[inline(always)]
    unsafe fn store(self, words: &mut [u64], i: usize) {
        debug_assert!(i + 4 <= words.len());
        // SAFETY: AVX2 as above; the caller guarantees four words from `i`
        // are in bounds; the store is unaligned.
        unsafe { _mm256_storeu_si256(words.as_mut_ptr().add(i).cast(), self.0) }
    }

    #[inline(always)]
    unsafe fn load_part(words: &[u64], i: usize, k: usize) -> Self {
        debug_assert!(k <= 4 && i + k <= words.len());
        // SAFETY: AVX2 as above. `vpmaskmovq` reads only the lanes whose
        // mask element has its top bit set, the first `k`, all in bounds
        // (the pointer itself is `words.as_ptr() + i <= end`); masked-off
        // lanes do not fault and read as zero.
        unsafe {
            let lane = _mm256_setr_epi64x(0, 1, 2, 3);
            let mask = _mm256_cmpgt_epi64(_mm256_set1_epi64x(k as i64), lane);
            Avx2(_mm256_maskload_epi64(words.as_ptr().add(i).cast(), mask))
        }
    }

    #[inline(always)]
    fn or(self, b: Self) -> Self {
        // SAFETY: AVX2 as above.
        Avx2(unsafe { _mm256_or_si256(self.0, b.0) })
    }

    #[inline(always)]
    fn ne_mask(self, pat: Self) -> u64 {
        // SAFETY: AVX2 as above.
        unsafe {
            let z = _mm256_cmpeq_epi64(self.0, pat.0);
            u64::from((!_mm256_movemask_pd(_mm256_castsi256_pd(z)) as u32) & 0xF)
        }
    }

    /// One `vmovmskpd`: the lanes' sign bits.
    #[inline(always)]
    fn top_mask(self) -> u64 {
        // SAFETY: AVX2 as above.
        unsafe { u64::from(_mm256_movemask_pd(_mm256_castsi256_pd(self.0)) as u32 & 0xF) }
    }

    #[inline(always)]
    fn any_ne4(v: [Self; 4], pat: Self) -> bool {
        // SAFETY: AVX2 as above.
        unsafe {
            let x = |a: Self| _mm256_xor_si256(a.0, pat.0);
            let o = _mm256_or_si256(
                _mm256_or_si256(x(v[0]), x(v[1])),
                _mm256_or_si256(x(v[2]), x(v[3])),
            );
            _mm256_testz_si256(o, o) == 0
        }
    }

    /// A nibble lookup (`vpshufb`) summed by `vpsadbw`.
    #[inline(always)]
    fn add_popcnt(acc: Self, v: Self) -> Self {
        // SAFETY: AVX2 as above.
        unsafe {
            let lut = _mm256_setr_epi8(
                0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3,
                2, 3, 3, 4,
            );
            let low = _mm256_set1_epi8(0x0f);
            let lo = _mm256_and_si256(v.0, low);
            let hi = _mm256_and_si256(_mm256_srli_epi16(v.0, 4), low);
            let cnt = _mm256_add_epi8(_mm256_shuffle_epi8(lut, lo), _mm256_shuffle_epi8(lut, hi));
            Avx2(_mm256_add_epi64(
                acc.0,
                _mm256_sad_epu8(cnt, _mm256_setzero_si256()),
            ))
        }
    }

    #[inline(always)]
    fn add(self, b: Self) -> Self {
        // SAFETY: AVX2 as above.
        Avx2(unsafe { _mm256_add_epi64(self.0, b.0) })
    }

    #[inline(always)]
    fn sum(self) -> u64 {
        let mut lanes = [0u64; 4];
        // SAFETY: AVX2 as above; `lanes` is 32 bytes (an unaligned store).
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), self.0) };
        lanes.iter().sum()
    }

    /// AVX2 has no 64-bit minimum: at `C = 64` this is the 32-bit one, zero
    /// in a 64-bit lane only if *some* input has both halves zero there or
    /// one has the low and the other the high half zero; a prefilter, so
    /// the search checks its hits exactly.
    #[inline(always)]
    fn min_lanes<const C: usize>(a: Self, b: Self) -> Self {
        // SAFETY: AVX2 as above.
        Avx2(unsafe {
            match C {
                8 => _mm256_min_epu8(a.0, b.0),
                16 => _mm256_min_epu16(a.0, b.0),
                _ => _mm256_min_epu32(a.0, b.0),
            }
        })
    }

    #[inline(always)]
    fn has_zero_lane<const C: usize>(self) -> bool {
        let z = zero_lanes::<C>(self.0);
        // SAFETY: AVX2 as above.
        unsafe { _mm256_testz_si256(z, z) == 0 }
    }

    #[inline(always)]
    fn first_zero_lane<const C: usize>(self) -> Option<usize> {
        // One mask bit per byte; a zero lane sets all its bytes, so the
        // lowest set bit is the first byte of the first zero lane.
        // SAFETY: AVX2 as above.
        let m = unsafe { _mm256_movemask_epi8(zero_lanes::<C>(self.0)) } as u32;
        (m != 0).then(|| m.trailing_zeros() as usize * 8)
    }

    /// The word below each lane comes from rotating the vector
    /// (`vpermq`) and blending in the previous vector's top lane, which
    /// `prev` holds rotated already, so each step permutes once.
    #[inline(always)]
    fn edges(self, prev: &mut Self) -> Self {
        // SAFETY: AVX2 as above.
        unsafe {
            let v = self.0;
            // [v3, v0, v1, v2], then lane 0 from the previous vector's v3
            // (lane 0 of the rotated previous vector; of a splat, the word).
            let r = _mm256_permute4x64_epi64(v, 0b10_01_00_11);
            let below = _mm256_blend_epi32(r, prev.0, 0b0000_0011);
            *prev = Avx2(r);
            Avx2(_mm256_xor_si256(
                v,
                _mm256_or_si256(_mm256_slli_epi64(v, 1), _mm256_srli_epi64(below, 63)),
            ))
        }
    }

    #[inline(always)]
    fn pairs_to_ranges(pairs: &mut [u64], shift: u32, base: u64) {
        // SAFETY: only reached inside `run`, with AVX2 enabled.
        unsafe { pairs_to_ranges_avx2(pairs, shift, base) }
    }

    /// Prefetch into all cache levels (`prefetcht0`). Only this level's
    /// loops ask: at AVX-512 the zero-chunk search's step is a whole batch
    /// of lines, and prefetching there made `bench zero-area`'s 64 MiB
    /// `test1` rows 10-20% slower on an Intel Xeon.
    #[inline(always)]
    fn prefetch(p: *const u64) {
        super::vector::prefetch(p)
    }
}

/// [`Vector::pairs_to_ranges`] two pairs (one per 128-bit lane) per step:
/// each lane's start copied over its end (`vpunpcklqdq`), subtracted from
/// it, blended back into the end's place, then one shift and one add of
/// `base` to the starts. `shift` is at most 63 in every geometry; a larger
/// one gives 0 here where the portable form wraps it, so it is taken there.
///
/// # Safety
/// The caller must be compiled with AVX2 enabled (the `run` entry points
/// of this module and of AVX-512, which enables AVX2 too).
#[inline(always)]
pub(super) unsafe fn pairs_to_ranges_avx2(pairs: &mut [u64], shift: u32, base: u64) {
    if shift > 63 {
        return super::vector::pairs_to_ranges_scalar(pairs, shift, base);
    }
    let mut chunks = pairs.chunks_exact_mut(4);
    // SAFETY: AVX2 as the caller guarantees; each load and store covers
    // one chunk of four words.
    unsafe {
        let b = _mm256_set_epi64x(0, base as i64, 0, base as i64);
        let c = _mm_cvtsi32_si128(shift as i32);
        for q in &mut chunks {
            let v = _mm256_loadu_si256(q.as_ptr().cast());
            let starts = _mm256_unpacklo_epi64(v, v);
            let r = _mm256_blend_epi32(v, _mm256_sub_epi64(v, starts), 0b1100_1100);
            let r = _mm256_add_epi64(_mm256_sll_epi64(r, c), b);
            _mm256_storeu_si256(q.as_mut_ptr().cast(), r);
        }
    }
    super::vector::pairs_to_ranges_scalar(chunks.into_remainder(), shift, base);
}

/// All-ones in every `C`-bit lane of `v` that is zero. Only called from
/// `Avx2`'s methods (so only inside `run`, with AVX2 enabled).
#[inline(always)]
fn zero_lanes<const C: usize>(v: __m256i) -> __m256i {
    // SAFETY: only called from `Avx2`'s methods, so AVX2 is enabled.
    unsafe {
        let z = _mm256_setzero_si256();
        match C {
            8 => _mm256_cmpeq_epi8(v, z),
            16 => _mm256_cmpeq_epi16(v, z),
            32 => _mm256_cmpeq_epi32(v, z),
            _ => _mm256_cmpeq_epi64(v, z),
        }
    }
}
