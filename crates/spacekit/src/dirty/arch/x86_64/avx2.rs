//! AVX2 kernels of the dirty scanner: four words per step.
//!
//! The kernel type [`Avx2`] is private to this module and only instantiated
//! by [`run`], which is compiled with AVX2, POPCNT and BMI1 and which callers
//! reach only with a `Level` proving those features; that is what makes the
//! intrinsics in the (safe) kernel methods sound, as for the PCLMULQDQ unit
//! of `crc32c`.

use core::arch::x86_64::*;

use super::super::kernel::{Job, Kernel, Words};
use super::super::scalar::{self, mark_word};

/// The AVX2 kernels (see the module documentation for why they may use
/// AVX2 without an `unsafe` signature).
struct Avx2;

/// Runs `job` with the AVX2 kernels, the whole job compiled with AVX2,
/// POPCNT and BMI1.
///
/// # Safety
/// The CPU must support AVX2, POPCNT and BMI1.
#[target_feature(enable = "avx2,popcnt,bmi1")]
pub(crate) unsafe fn run<J: Job>(job: J) -> J::Output {
    job.run::<Avx2>()
}

impl Kernel for Avx2 {
    #[inline(always)]
    fn marks<W: Words>(src: W, i: usize, n: usize, carry: u64) -> (u64, u64) {
        let end = i + n;
        let (mut j, mut m, mut carry) = (i, 0, carry);
        if n >= 5 {
            // The vector loop reads the word below each lane, so it starts at
            // word 1 at the earliest.
            if j == 0 {
                m = mark_word(src.word(0), carry);
                j = 1;
            }
            // SAFETY: `Avx2` is only instantiated by `run`, so AVX2 is
            // available; `1 <= j`, `j + 4 <= end <= src.len()` (as `n >= 5`)
            // and `end - i <= 64`.
            (m, j) = unsafe { marks_avx(src, i, j, end, m) };
            carry = src.word(j - 1) >> 63;
        }
        scalar::marks_from(src, i, j, end, m, carry)
    }

    #[inline(always)]
    fn expand(pos: u64, e: u64, buf: &mut [u64], k: usize, dense: bool) -> usize {
        scalar::Scalar::expand(pos, e, buf, k, dense)
    }

    #[inline(always)]
    fn count_edges<W: Words>(src: W, from: usize, end: usize) -> usize {
        // Short blocks stay scalar; the first block's first word (no word
        // below it) is counted on its own.
        if end < from + 8 {
            return scalar::count_edges(src, from, end);
        }
        let head = usize::from(from == 0);
        // SAFETY: `Avx2` is only instantiated by `run`, so AVX2 and POPCNT
        // are available; `1 <= from + head <= end <= src.len()`.
        scalar::count_edges(src, from, from + head)
            + unsafe { count_edges_body(src, from + head, end) }
    }
}

/// Words `i..i + 4` of `src` (the OR of its parts) as one vector.
///
/// # Safety
/// AVX2 must be available and `i + 4 <= src.len()`.
#[inline(always)]
unsafe fn load4<W: Words>(src: &W, i: usize) -> __m256i {
    let (a, b) = src.parts();
    debug_assert!(i + 4 <= a.len());
    // SAFETY: the caller guarantees AVX2 and `i + 4 <= len`; `Words` (an
    // `unsafe trait`) guarantees both parts hold `len` words. The loads are
    // unaligned.
    unsafe {
        let v = _mm256_loadu_si256(a.as_ptr().add(i).cast());
        match b {
            None => v,
            Some(b) => _mm256_or_si256(v, _mm256_loadu_si256(b.as_ptr().add(i).cast())),
        }
    }
}

/// Stage 1 over words `j..` in steps of four while a whole step fits before
/// `end`, or-ing marks into `m` (bit `t` for word `i + t`); returns the marks
/// and the first word not done. The word below each lane comes from rotating
/// the current vector and taking the previous vector's top lane, so each
/// step loads once.
///
/// # Safety
/// AVX2 must be available; `i <= j`, `1 <= j`, `end <= src.len()` and
/// `end - i <= 64`.
#[inline(always)]
unsafe fn marks_avx<W: Words>(
    src: W,
    i: usize,
    mut j: usize,
    end: usize,
    mut m: u64,
) -> (u64, usize) {
    // SAFETY: the caller guarantees AVX2 and that words `j - 1 .. end`
    // exist; every step's load is of words `j..j + 4` with `j + 4 <= end`.
    unsafe {
        // Lane 3 of `rot` is the word below the next step's lane 0.
        let mut rot = _mm256_set1_epi64x(src.word(j - 1) as i64);
        while j + 4 <= end {
            let v = load4(&src, j);
            // [v3, v0, v1, v2], then lane 0 from the previous vector's v3.
            let r = _mm256_permute4x64_epi64(v, 0b10_01_00_11);
            let below = _mm256_blend_epi32(r, rot, 0b0000_0011);
            rot = r;
            let e = _mm256_xor_si256(
                v,
                _mm256_or_si256(_mm256_slli_epi64(v, 1), _mm256_srli_epi64(below, 63)),
            );
            let zero = _mm256_cmpeq_epi64(e, _mm256_setzero_si256());
            let bits = (_mm256_movemask_pd(_mm256_castsi256_pd(zero)) as u32 ^ 0xF) as u64;
            m |= bits << (j - i);
            j += 4;
        }
        (m, j)
    }
}

/// AVX2 edge count over words `[from, end)`: each step forms four words'
/// edge masks as in [`marks_avx`] and counts their bits with a nibble lookup
/// (`vpshufb`) summed by `vpsadbw`.
///
/// # Safety
/// AVX2 must be available; `1 <= from <= end <= src.len()`.
#[inline(always)]
unsafe fn count_edges_body<W: Words>(src: W, from: usize, end: usize) -> usize {
    // SAFETY: the caller guarantees AVX2; every load is of words
    // `j..j + 4` with `j + 4 <= end <= src.len()`, and `lanes` is 32 bytes
    // (an unaligned store).
    unsafe {
        let mut j = from;
        let lut = _mm256_setr_epi8(
            0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2,
            3, 3, 4,
        );
        let low = _mm256_set1_epi8(0x0f);
        let zero = _mm256_setzero_si256();
        let mut acc = zero;
        let mut rot = _mm256_set1_epi64x(src.word(j - 1) as i64);
        while j + 4 <= end {
            let v = load4(&src, j);
            let r = _mm256_permute4x64_epi64(v, 0b10_01_00_11);
            let below = _mm256_blend_epi32(r, rot, 0b0000_0011);
            rot = r;
            let e = _mm256_xor_si256(
                v,
                _mm256_or_si256(_mm256_slli_epi64(v, 1), _mm256_srli_epi64(below, 63)),
            );
            let lo = _mm256_and_si256(e, low);
            let hi = _mm256_and_si256(_mm256_srli_epi16(e, 4), low);
            let cnt = _mm256_add_epi8(_mm256_shuffle_epi8(lut, lo), _mm256_shuffle_epi8(lut, hi));
            acc = _mm256_add_epi64(acc, _mm256_sad_epu8(cnt, zero));
            j += 4;
        }
        let mut lanes = [0u64; 4];
        _mm256_storeu_si256(lanes.as_mut_ptr().cast(), acc);
        let n: u64 = lanes.iter().sum();
        n as usize + scalar::count_edges(src, j, end)
    }
}
