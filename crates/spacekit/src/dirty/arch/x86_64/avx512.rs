//! AVX-512 kernels of the dirty scanner: eight words per step.
//!
//! * Stage 1 forms eight words' edge masks per step (`valignq` brings each
//!   lane the word below it) and tests them into a mask register: one bit
//!   per word, no movemask.
//! * Stage 2 turns a word's edge mask into its edge positions with one
//!   `vpcompressb` of the byte indices 0..63 under that mask, widens the
//!   first eight (sixteen in dense batches) to `u64`, adds the word's first
//!   bit and stores them unconditionally: no loop over the bits, and no
//!   branch unless a word has more edges than that.
//! * The edge count of the parallel scan's sizing pass is a `vpopcntq` sum.
//!
//! The kernel type [`Avx512`] is private to this module and only
//! instantiated by [`run`], which is compiled with AVX-512 F, BW, VL,
//! VPOPCNTDQ and VBMI2 (and AVX2, POPCNT, BMI1) and which callers reach only
//! with a `Level` proving those features; that is what makes the intrinsics
//! in the (safe) kernel methods sound, as for the AVX2 kernels.

use core::arch::x86_64::*;

use super::super::kernel::{Job, Kernel, Words};
use super::super::scalar;

/// The AVX-512 kernels (see the module documentation for why they may use
/// AVX-512 without an `unsafe` signature).
struct Avx512;

/// Runs `job` with the AVX-512 kernels, the whole job compiled for them.
///
/// # Safety
/// The CPU must support AVX-512 F, BW, VL, VPOPCNTDQ and VBMI2, AVX2,
/// POPCNT and BMI1.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vpopcntdq,avx512vbmi2,avx2,popcnt,bmi1")]
pub(crate) unsafe fn run<J: Job>(job: J) -> J::Output {
    job.run::<Avx512>()
}

impl Kernel for Avx512 {
    #[inline(always)]
    fn marks<W: Words>(src: W, i: usize, n: usize, carry: u64) -> (u64, u64) {
        let end = i + n;
        let (mut j, mut m) = (i, 0);
        // The vector loop reads the word below each lane, so it starts at
        // word 1 at the earliest.
        if j == 0 && n > 0 {
            m = scalar::mark_word(src.word(0), carry);
            j = 1;
        }
        if j + 8 <= end {
            // SAFETY: `Avx512` is only instantiated by `run`, so the
            // features are available; `1 <= j`, `j + 8 <= end <= src.len()`
            // and `end - i <= 64`.
            (m, j) = unsafe { marks_avx512(src, i, j, end, m) };
        }
        let carry = if j == i { carry } else { src.word(j - 1) >> 63 };
        scalar::marks_from(src, i, j, end, m, carry)
    }

    #[inline(always)]
    fn expand(pos: u64, e: u64, buf: &mut [u64], k: usize, dense: bool) -> usize {
        let s = &mut buf[k..k + 64];
        // SAFETY: `Avx512` is only instantiated by `run`; `s` holds 64
        // slots, and at most 64 positions are written.
        unsafe { expand_avx512(pos, e, s, dense) };
        k + e.count_ones() as usize
    }

    #[inline(always)]
    fn count_edges<W: Words>(src: W, from: usize, end: usize) -> usize {
        if end < from + 9 {
            return scalar::count_edges(src, from, end);
        }
        let head = usize::from(from == 0);
        // SAFETY: `Avx512` is only instantiated by `run`;
        // `1 <= from + head <= end <= src.len()`.
        scalar::count_edges(src, from, from + head)
            + unsafe { count_edges_body(src, from + head, end) }
    }
}

/// Words `i..i + 8` of `src` (the OR of its parts) as one vector.
///
/// # Safety
/// AVX-512 F must be available and `i + 8 <= src.len()`.
#[inline(always)]
unsafe fn load8<W: Words>(src: &W, i: usize) -> __m512i {
    let (a, b) = src.parts();
    debug_assert!(i + 8 <= a.len());
    // SAFETY: the caller guarantees AVX-512 F and `i + 8 <= len`; `Words`
    // (an `unsafe trait`) guarantees both parts hold `len` words. The loads
    // are unaligned.
    unsafe {
        let v = _mm512_loadu_si512(a.as_ptr().add(i).cast());
        match b {
            None => v,
            Some(b) => _mm512_or_si512(v, _mm512_loadu_si512(b.as_ptr().add(i).cast())),
        }
    }
}

/// The edge masks of the eight words `v`, given `prev` whose lane 7 is the
/// word below `v`'s lane 0: `w ^ (w << 1 | below >> 63)` per lane.
///
/// # Safety
/// AVX-512 F must be available.
#[inline(always)]
unsafe fn edges8(v: __m512i, prev: __m512i) -> __m512i {
    // SAFETY: only called from functions compiled with AVX-512 F.
    unsafe {
        // [prev7, v0, .., v6]: the word below each lane.
        let below = _mm512_alignr_epi64::<7>(v, prev);
        // a ^ (b | c): truth table 0xF0 ^ (0xCC | 0xAA) = 0x1E.
        _mm512_ternarylogic_epi64::<0x1E>(
            v,
            _mm512_slli_epi64::<1>(v),
            _mm512_srli_epi64::<63>(below),
        )
    }
}

/// Stage 1 over words `j..` in steps of eight while a whole step fits
/// before `end`, or-ing marks into `m` (bit `t` for word `i + t`); returns
/// the marks and the first word not done.
///
/// # Safety
/// AVX-512 F must be available; `i <= j`, `1 <= j`, `end <= src.len()` and
/// `end - i <= 64`.
#[inline(always)]
unsafe fn marks_avx512<W: Words>(
    src: W,
    i: usize,
    mut j: usize,
    end: usize,
    mut m: u64,
) -> (u64, usize) {
    // SAFETY: the caller guarantees AVX-512 F and that words `j - 1 .. end`
    // exist; every step's load is of words `j..j + 8` with `j + 8 <= end`.
    unsafe {
        let mut prev = _mm512_set1_epi64(src.word(j - 1) as i64);
        while j + 8 <= end {
            let v = load8(&src, j);
            let e = edges8(v, prev);
            prev = v;
            m |= u64::from(_mm512_test_epi64_mask(e, e)) << (j - i);
            j += 8;
        }
        (m, j)
    }
}

/// The byte indices 0..63, which `vpcompressb` packs under an edge mask.
const IOTA: [u8; 64] = {
    let mut a = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        a[i] = i as u8;
        i += 1;
    }
    a
};

/// Writes the positions of `e`'s set bits plus `pos` to `s` in ascending
/// order: eight (sixteen when `dense`) written unconditionally, the rest
/// only when there are more.
///
/// # Safety
/// AVX-512 F, BW and VBMI2 must be available.
#[inline(always)]
unsafe fn expand_avx512(pos: u64, e: u64, s: &mut [u64], dense: bool) {
    assert!(s.len() >= 64);
    let n = e.count_ones() as usize;
    // SAFETY: the caller guarantees the features; every store writes eight
    // slots at `s[8g..8g + 8]` with `8g + 8 <= 64 <= s.len()`, and `IOTA`
    // is 64 bytes.
    unsafe {
        let iota = _mm512_loadu_si512(IOTA.as_ptr().cast());
        let idx = _mm512_maskz_compress_epi8(e, iota);
        let p = _mm512_set1_epi64(pos as i64);
        let out = s.as_mut_ptr();
        // Group `g`: positions 8g..8g + 8, from bytes 8g..8g + 8 of `idx`.
        let store = |g: usize, bytes: __m128i| {
            let v = _mm512_add_epi64(_mm512_cvtepu8_epi64(bytes), p);
            _mm512_storeu_si512(out.add(8 * g).cast(), v);
        };
        let lane0 = _mm512_castsi512_si128(idx);
        store(0, lane0);
        if dense || n > 8 {
            store(1, _mm_unpackhi_epi64(lane0, lane0));
        }
        if n > 16 {
            let lanes = [
                _mm512_extracti32x4_epi32::<1>(idx),
                _mm512_extracti32x4_epi32::<2>(idx),
                _mm512_extracti32x4_epi32::<3>(idx),
            ];
            let mut g = 2;
            while 8 * g < n {
                let lane = lanes[g / 2 - 1];
                store(
                    g,
                    if g % 2 == 0 {
                        lane
                    } else {
                        _mm_unpackhi_epi64(lane, lane)
                    },
                );
                g += 1;
            }
        }
    }
}

/// Edge count over words `[from, end)`: each step forms eight words' edge
/// masks as in [`marks_avx512`] and sums their `vpopcntq`.
///
/// # Safety
/// AVX-512 F and VPOPCNTDQ must be available; `1 <= from <= end <=
/// src.len()`.
#[inline(always)]
unsafe fn count_edges_body<W: Words>(src: W, from: usize, end: usize) -> usize {
    // SAFETY: the caller guarantees the features; every load is of words
    // `j..j + 8` with `j + 8 <= end <= src.len()`.
    unsafe {
        let mut j = from;
        let mut acc = _mm512_setzero_si512();
        let mut prev = _mm512_set1_epi64(src.word(j - 1) as i64);
        while j + 8 <= end {
            let v = load8(&src, j);
            acc = _mm512_add_epi64(acc, _mm512_popcnt_epi64(edges8(v, prev)));
            prev = v;
            j += 8;
        }
        _mm512_reduce_add_epi64(acc) as usize + scalar::count_edges(src, j, end)
    }
}
