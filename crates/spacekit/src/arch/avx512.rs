//! The AVX-512 [`Vector`]: eight words in a 512-bit register, compares
//! straight into mask registers, `vpopcntq` counts, masked loads for the
//! tails and the edge expand by one `vpcompressb`.
//!
//! [`Avx512`] is private to this module and only instantiated by [`run`],
//! which is compiled with AVX-512 F, BW, VL, VPOPCNTDQ and VBMI2 (and AVX2,
//! POPCNT, BMI1) and which callers reach only with a `Level` proving those
//! features; that is what makes the intrinsics in the (safe) trait methods
//! sound.

use core::arch::x86_64::*;

use super::vector::{Job, Vector};

/// Eight words in a 512-bit vector.
#[derive(Clone, Copy)]
struct Avx512(__m512i);

/// Runs `job` with [`Avx512`] vectors, the whole job compiled for them.
///
/// # Safety
/// The CPU must support AVX-512 F, BW, VL, VPOPCNTDQ and VBMI2, AVX2,
/// POPCNT and BMI1.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vpopcntdq,avx512vbmi2,avx2,popcnt,bmi1")]
pub(crate) unsafe fn run<J: Job>(job: J) -> J::Output {
    job.run::<Avx512>()
}

// SAFETY: `Avx512` is only instantiated by `run` (see the module
// documentation); its loads read only the words their contracts name (a
// masked load does not touch masked-off lanes), and `expand` stores only to
// the 64 slots it is given.
unsafe impl Vector for Avx512 {
    const LANES: usize = 8;
    // Four vectors, 256 bytes (four cache lines), per zero-lane step.
    const FOLD: usize = 4;
    // `vpcompressb`: 1.3x faster table builds at 1% dirty than the bit
    // loop's unconditional writes (AMD EPYC Zen 4).
    const COMPRESS: bool = true;
    const STREAMS: bool = true;

    /// One `vmovntdq` of 64 bytes per line.
    #[inline(always)]
    unsafe fn stream_lines(src: &[u64], dst: *mut u64) {
        debug_assert!(src.len().is_multiple_of(8) && (dst as usize).is_multiple_of(64));
        let mut i = 0;
        while i < src.len() {
            // SAFETY: AVX-512 F as above; `i + 8 <= src.len()` (a multiple
            // of 8); the caller guarantees `dst` is line-aligned and valid
            // for `src.len()` words, so each store writes one whole line.
            unsafe {
                let v = _mm512_loadu_si512(src.as_ptr().add(i).cast());
                _mm512_stream_si512(dst.add(i).cast(), v);
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
        // SAFETY: AVX-512 F is enabled in `run`, the only instantiator.
        Avx512(unsafe { _mm512_set1_epi64(x as i64) })
    }

    #[inline(always)]
    unsafe fn load(words: &[u64], i: usize) -> Self {
        debug_assert!(i + 8 <= words.len());
        // SAFETY: AVX-512 F as above; the caller guarantees eight words
        // from `i` are in bounds; the load is unaligned.
        Avx512(unsafe { _mm512_loadu_si512(words.as_ptr().add(i).cast()) })
    }

    /// The AVX2 form's steps on four pairs a vector, the last up to three
    /// with a masked load and store (no scalar tail: a table builder's
    /// round ends on any number of pairs).
    #[inline(always)]
    fn pairs_to_ranges(pairs: &mut [u64], shift: u32, base: u64) {
        if shift > 63 {
            return super::vector::pairs_to_ranges_scalar(pairs, shift, base);
        }
        let n = pairs.len();
        let p = pairs.as_mut_ptr();
        // SAFETY: AVX-512 F as above. Each full step loads and stores the
        // eight words `i..i + 8` with `i + 8 <= n`; the last step's mask
        // covers only words `i..n`, and masked-off lanes are neither read
        // nor written.
        unsafe {
            let b = _mm512_set_epi64(
                0,
                base as i64,
                0,
                base as i64,
                0,
                base as i64,
                0,
                base as i64,
            );
            let c = _mm_cvtsi32_si128(shift as i32);
            let step = |v: __m512i| {
                let starts = _mm512_unpacklo_epi64(v, v);
                let r = _mm512_mask_blend_epi64(0b1010_1010, v, _mm512_sub_epi64(v, starts));
                _mm512_add_epi64(_mm512_sll_epi64(r, c), b)
            };
            let mut i = 0;
            while i + 8 <= n {
                let v = _mm512_loadu_si512(p.add(i).cast());
                _mm512_storeu_si512(p.add(i).cast(), step(v));
                i += 8;
            }
            if i < n {
                let m = ((1u32 << (n - i)) - 1) as __mmask8;
                let v = _mm512_maskz_loadu_epi64(m, p.add(i).cast());
                _mm512_mask_storeu_epi64(p.add(i).cast(), m, step(v));
            }
        }
    }

    #[inline(always)]
    unsafe fn store(self, words: &mut [u64], i: usize) {
        debug_assert!(i + 8 <= words.len());
        // SAFETY: AVX-512 F as above; the caller guarantees eight words
        // from `i` are in bounds; the store is unaligned.
        unsafe { _mm512_storeu_si512(words.as_mut_ptr().add(i).cast(), self.0) }
    }

    #[inline(always)]
    unsafe fn load_part(words: &[u64], i: usize, k: usize) -> Self {
        debug_assert!(k <= 8 && i + k <= words.len());
        let m = ((1u32 << k) - 1) as __mmask8;
        // SAFETY: AVX-512 F as above. A masked load reads only the `k`
        // lanes its mask selects, all in bounds (the pointer itself is
        // `words.as_ptr() + i <= end`); masked lanes do not fault.
        Avx512(unsafe { _mm512_maskz_loadu_epi64(m, words.as_ptr().add(i).cast()) })
    }

    #[inline(always)]
    fn or(self, b: Self) -> Self {
        // SAFETY: AVX-512 F as above.
        Avx512(unsafe { _mm512_or_si512(self.0, b.0) })
    }

    #[inline(always)]
    fn ne_mask(self, pat: Self) -> u64 {
        // SAFETY: AVX-512 F as above.
        u64::from(unsafe { _mm512_cmpneq_epi64_mask(self.0, pat.0) })
    }

    /// One signed compare with zero: a lane is negative when its top bit is
    /// set.
    #[inline(always)]
    fn top_mask(self) -> u64 {
        // SAFETY: AVX-512 F as above.
        u64::from(unsafe { _mm512_cmplt_epi64_mask(self.0, _mm512_setzero_si512()) })
    }

    /// Eight compares of each kind, each kind's masks joined by seven
    /// `kunpck`.
    #[inline(always)]
    fn batch_masks(mut f: impl FnMut(usize) -> Self, pat: Self) -> (u64, u64) {
        let mut ne = [0; 8];
        let mut top = [0; 8];
        for g in 0..8 {
            let v = f(8 * g);
            // SAFETY: AVX-512 F as above.
            unsafe {
                ne[g] = _mm512_cmpneq_epi64_mask(v.0, pat.0);
                top[g] = _mm512_cmplt_epi64_mask(v.0, _mm512_setzero_si512());
            }
        }
        // SAFETY: AVX-512 F and BW as above.
        unsafe { (join_masks(ne), join_masks(top)) }
    }

    /// Two ternary-logic ops (`(a ^ c) | (b ^ c)`, truth table 0x7E), an OR
    /// and one test.
    #[inline(always)]
    fn any_ne4(v: [Self; 4], pat: Self) -> bool {
        // SAFETY: AVX-512 F as above.
        unsafe {
            let d01 = _mm512_ternarylogic_epi64::<0x7E>(v[0].0, v[1].0, pat.0);
            let d23 = _mm512_ternarylogic_epi64::<0x7E>(v[2].0, v[3].0, pat.0);
            let o = _mm512_or_si512(d01, d23);
            _mm512_test_epi64_mask(o, o) != 0
        }
    }

    /// `vpopcntq`.
    #[inline(always)]
    fn add_popcnt(acc: Self, v: Self) -> Self {
        // SAFETY: AVX-512 F and VPOPCNTDQ as above.
        Avx512(unsafe { _mm512_add_epi64(acc.0, _mm512_popcnt_epi64(v.0)) })
    }

    #[inline(always)]
    fn add(self, b: Self) -> Self {
        // SAFETY: AVX-512 F as above.
        Avx512(unsafe { _mm512_add_epi64(self.0, b.0) })
    }

    #[inline(always)]
    fn sum(self) -> u64 {
        // SAFETY: AVX-512 F as above.
        unsafe { _mm512_reduce_add_epi64(self.0) as u64 }
    }

    #[inline(always)]
    fn min_lanes<const C: usize>(a: Self, b: Self) -> Self {
        // SAFETY: AVX-512 F and BW as above.
        Avx512(unsafe {
            match C {
                8 => _mm512_min_epu8(a.0, b.0),
                16 => _mm512_min_epu16(a.0, b.0),
                32 => _mm512_min_epu32(a.0, b.0),
                _ => _mm512_min_epu64(a.0, b.0),
            }
        })
    }

    #[inline(always)]
    fn has_zero_lane<const C: usize>(self) -> bool {
        zero_lanes::<C>(self.0) != 0
    }

    #[inline(always)]
    fn first_zero_lane<const C: usize>(self) -> Option<usize> {
        let m = zero_lanes::<C>(self.0);
        (m != 0).then(|| m.trailing_zeros() as usize * C)
    }

    /// `valignq` brings each lane the word below it from `prev`'s lane 7.
    #[inline(always)]
    fn edges(self, prev: &mut Self) -> Self {
        // SAFETY: AVX-512 F as above.
        unsafe {
            let v = self.0;
            // [prev7, v0, .., v6]: the word below each lane.
            let below = _mm512_alignr_epi64::<7>(v, prev.0);
            *prev = self;
            // a ^ (b | c): truth table 0xF0 ^ (0xCC | 0xAA) = 0x1E.
            Avx512(_mm512_ternarylogic_epi64::<0x1E>(
                v,
                _mm512_slli_epi64::<1>(v),
                _mm512_srli_epi64::<63>(below),
            ))
        }
    }

    /// One `vpcompressb` of the byte indices 0..63 under the edge mask,
    /// the first eight (sixteen when `dense`) widened to `u64`, plus `pos`,
    /// stored unconditionally: no loop over the bits, and no branch unless
    /// the word has more edges than that.
    #[inline(always)]
    fn expand(pos: u64, e: u64, s: &mut [u64], dense: bool) {
        assert!(s.len() >= 64);
        let n = e.count_ones() as usize;
        // SAFETY: AVX-512 F, BW and VBMI2 as above; every store writes eight
        // slots at `s[8g..8g + 8]` with `8g + 8 <= 64 <= s.len()`, and
        // `IOTA` is 64 bytes.
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
}

/// Eight 8-lane masks as one 64-bit mask (`k[g]` in bits `8g..8g + 8`),
/// with `kunpckbw`, `kunpckwd` and `kunpckdq` in mask registers. Written
/// as `asm!` because the compiler otherwise rewrites the joins as byte
/// inserts into a vector register (the chain this replaces).
///
/// # Safety
/// The CPU has AVX-512 F and BW (callers run inside `run`).
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn join_masks(k: [__mmask8; 8]) -> u64 {
    let w = |hi: u8, lo: u8| -> u16 {
        let r: u16;
        // SAFETY: `kunpckbw` reads and writes only mask registers; AVX-512
        // F, as the callers (inside `run`) are compiled with and the CPU
        // has.
        unsafe {
            core::arch::asm!("kunpckbw {r}, {hi}, {lo}", r = lateout(kreg) r, hi = in(kreg) hi,
                lo = in(kreg) lo, options(pure, nomem, nostack, preserves_flags))
        };
        r
    };
    let d = |hi: u16, lo: u16| -> u32 {
        let r: u32;
        // SAFETY: as above; `kunpckwd` is AVX-512 BW, which `run` has too.
        unsafe {
            core::arch::asm!("kunpckwd {r}, {hi}, {lo}", r = lateout(kreg) r, hi = in(kreg) hi,
                lo = in(kreg) lo, options(pure, nomem, nostack, preserves_flags))
        };
        r
    };
    let (w0, w1, w2, w3) = (w(k[1], k[0]), w(k[3], k[2]), w(k[5], k[4]), w(k[7], k[6]));
    let (lo, hi) = (d(w1, w0), d(w3, w2));
    let r: u64;
    // SAFETY: as above (`kunpckdq`: AVX-512 BW).
    unsafe {
        core::arch::asm!("kunpckdq {r}, {hi}, {lo}", r = lateout(kreg) r, hi = in(kreg) hi,
            lo = in(kreg) lo, options(pure, nomem, nostack, preserves_flags))
    };
    r
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

/// Bit `k` set iff `C`-bit lane `k` of `v` is zero (64, 32, 16 or 8
/// lanes). Only called from `Avx512`'s methods (so only inside `run`, with
/// AVX-512 F and BW enabled).
#[inline(always)]
fn zero_lanes<const C: usize>(v: __m512i) -> u64 {
    // SAFETY: AVX-512 F and BW are enabled wherever this is inlined.
    unsafe {
        match C {
            8 => _mm512_testn_epi8_mask(v, v),
            16 => u64::from(_mm512_testn_epi16_mask(v, v)),
            32 => u64::from(_mm512_testn_epi32_mask(v, v)),
            _ => u64::from(_mm512_testn_epi64_mask(v, v)),
        }
    }
}
