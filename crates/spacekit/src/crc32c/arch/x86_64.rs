//! PCLMULQDQ instantiation of the remainder arithmetic.
//!
//! Values stay in XMM registers from the table loads to the final quotient;
//! each Montgomery product is three `pclmulqdq` and one `pxor`.

use core::arch::x86_64::{
    __m128i, _mm_clmulepi64_si128, _mm_cvtsi128_si64, _mm_cvtsi64_si128, _mm_set_epi64x,
    _mm_srli_si128, _mm_xor_si128,
};

use super::super::gf2::{self, Mont, Q, QINV};

/// One remainder in the low lane of an XMM register.
///
/// Private to this module, and only instantiated (as the type parameter of
/// the generic algorithms) by the `#[target_feature(enable = "pclmulqdq")]`
/// entry points below, which callers reach only once PCLMULQDQ was detected;
/// that is what makes the intrinsic calls in the trait methods sound.
#[derive(Clone, Copy)]
struct Clmul(__m128i);

impl Mont for Clmul {
    #[inline(always)]
    fn load(v: u64) -> Self {
        // SAFETY: SSE2 is part of the x86_64 baseline.
        Clmul(unsafe { _mm_cvtsi64_si128(v as i64) })
    }
    #[inline(always)]
    fn mul(self, b: Self) -> Self {
        // SAFETY: `Clmul` is only instantiated by this module's PCLMULQDQ
        // entry points (see the type's documentation).
        unsafe {
            let qinv = _mm_set_epi64x(0, QINV as i64);
            let q = _mm_set_epi64x(0, Q as i64);
            let p = _mm_clmulepi64_si128(self.0, b.0, 0x00);
            let m = _mm_clmulepi64_si128(p, qinv, 0x00);
            let t = _mm_clmulepi64_si128(m, q, 0x00);
            Clmul(_mm_srli_si128(_mm_xor_si128(p, t), 8))
        }
    }
    #[inline(always)]
    fn add(self, b: Self) -> Self {
        // SAFETY: SSE2 is part of the x86_64 baseline.
        Clmul(unsafe { _mm_xor_si128(self.0, b.0) })
    }
    #[inline(always)]
    fn get(self) -> u64 {
        // SAFETY: SSE2 is part of the x86_64 baseline.
        unsafe { _mm_cvtsi128_si64(self.0) as u64 }
    }
    #[inline(always)]
    fn div_x1(self) -> u64 {
        // SAFETY: as in `mul`. The low 64 bits of v * (1 + x + ... + x^63)
        // are the prefix XOR of v's coefficients.
        unsafe {
            let ones = _mm_set_epi64x(0, -1);
            _mm_cvtsi128_si64(_mm_clmulepi64_si128(self.0, ones, 0x00)) as u64
        }
    }
}

/// [`gf2::flip_delta`] with PCLMULQDQ.
///
/// # Safety
/// The CPU must support PCLMULQDQ.
#[target_feature(enable = "pclmulqdq")]
pub(crate) unsafe fn flip_delta(a: u64, b: u64) -> u32 {
    gf2::flip_delta::<Clmul>(a, b)
}

/// [`gf2::mul_xpow`] with PCLMULQDQ.
///
/// # Safety
/// The CPU must support PCLMULQDQ.
#[target_feature(enable = "pclmulqdq")]
pub(crate) unsafe fn mul_xpow(crc: u32, e: u64) -> u32 {
    gf2::mul_xpow::<Clmul>(crc, e)
}

/// `a * b * x^33 mod P` on reflected values: their carry-less product,
/// reduced by the `crc32` instruction (see `gf2`'s reflected products).
///
/// # Safety
/// The CPU must support PCLMULQDQ and SSE4.2.
#[inline(always)]
unsafe fn mulr(a: u32, b: u32) -> u32 {
    use core::arch::x86_64::{
        _mm_clmulepi64_si128, _mm_crc32_u64, _mm_cvtsi128_si64, _mm_cvtsi32_si128,
    };
    // SAFETY: the caller's guarantee (PCLMULQDQ and SSE4.2); SSE2, for the
    // moves, is part of x86_64.
    unsafe {
        let p = _mm_clmulepi64_si128(
            _mm_cvtsi32_si128(a as i32),
            _mm_cvtsi32_si128(b as i32),
            0x00,
        );
        _mm_crc32_u64(0, _mm_cvtsi128_si64(p) as u64) as u32
    }
}

/// [`gf2::mul_xpow`] in the reflected domain: each factor is one
/// carry-less product and one `crc32` (about 7 cycles), with no bit
/// reversal and no Montgomery step; a shift by fewer than 1,024 whole
/// bytes is one product, any other a balanced tree of one factor per
/// six-bit digit of `e` and one for its low six bits.
///
/// # Safety
/// The CPU must support PCLMULQDQ and SSE4.2.
#[target_feature(enable = "pclmulqdq,sse4.2")]
pub(crate) unsafe fn mul_xpow_crc32(crc: u32, e: u64) -> u32 {
    use gf2::{digit_of, BYTES_LEN, R_BYTES, R_LOW, R_TABLE};
    debug_assert!(e < gf2::EXP_LIMIT);
    if e.is_multiple_of(8) && e < 8 * BYTES_LEN as u64 {
        // SAFETY: `mulr` needs PCLMULQDQ and SSE4.2, this function's own
        // features.
        return unsafe { mulr(crc, R_BYTES[(e / 8) as usize]) };
    }
    let h = e >> 6;
    let low = R_LOW[(e & 63) as usize];
    let d = |j: usize| R_TABLE[j][digit_of(h, j)];
    // SAFETY: as above.
    unsafe {
        if h == 0 {
            mulr(crc, low)
        } else if h < 1 << 6 {
            mulr(mulr(crc, low), d(0))
        } else if h < 1 << 12 {
            mulr(mulr(crc, low), mulr(d(0), d(1)))
        } else if h < 1 << 18 {
            mulr(mulr(crc, low), mulr(mulr(d(0), d(1)), d(2)))
        } else {
            let a = mulr(mulr(crc, low), mulr(d(0), d(1)));
            let b = mulr(mulr(d(2), d(3)), d(4));
            mulr(a, b)
        }
    }
}

/// The longest input [`raw_sse42`] takes: below this, the `crc32`
/// instruction one word at a time beats the bulk CRC's setup.
pub(crate) const SHORT: usize = 64;

/// Raw CRC-32C of a short input with the SSE4.2 `crc32` instruction (the
/// Castagnoli polynomial, reflected, no inversion: the kernel's
/// `crc32c(crc, p, len)`), eight bytes at a time, then the tail byte by
/// byte. One dependent `crc32` per word: for the 12- to 64-byte regions a
/// splice or an ext4 metadata field change, faster than a bulk call.
///
/// # Safety
/// The CPU must have SSE4.2 (callers hold a [`crate::arch::Level`] with
/// `has_sse42()`).
#[target_feature(enable = "sse4.2")]
pub(crate) unsafe fn raw_sse42(crc: u32, bytes: &[u8]) -> u32 {
    use core::arch::x86_64::{_mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};
    let mut c = u64::from(crc);
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        c = _mm_crc32_u64(c, u64::from_le_bytes(b));
    }
    // The tail in at most three steps (4, 2, 1 bytes): a 2- or 4-byte
    // field, the common ext4 splice, is one instruction, not one a byte.
    let mut c = c as u32;
    let mut rest = words.remainder();
    if let Some((w, r)) = rest.split_first_chunk::<4>() {
        c = _mm_crc32_u32(c, u32::from_le_bytes(*w));
        rest = r;
    }
    if let Some((w, r)) = rest.split_first_chunk::<2>() {
        c = _mm_crc32_u16(c, u16::from_le_bytes(*w));
        rest = r;
    }
    if let Some(&b) = rest.first() {
        c = _mm_crc32_u8(c, b);
    }
    c
}

/// Bytes per stream of a long block of [`raw_sse42_bulk`] (three streams,
/// 24 KiB a block).
const LONG: usize = 8192;
/// Multiplies a CRC by `x^(8 * LONG)` (one stream's bytes) in one product.
const K_LONG: u64 = gf2::xpow_factor(8 * LONG as u64);
/// Multiplies a CRC by `x^(16 * LONG)` (two streams' bytes).
const K_LONG2: u64 = gf2::xpow_factor(16 * LONG as u64);
/// From this length the streams of [`raw_sse42_bulk`] pay for their
/// merge (two shifts of about 40 cycles each against a third of the
/// `crc32` latency saved on every word).
const THREE_WAY: usize = 512;

/// Eight little-endian bytes at `p`.
///
/// # Safety
/// `p` must be valid for reads of 8 bytes.
#[inline(always)]
unsafe fn word(p: *const u8) -> u64 {
    // SAFETY: the caller's guarantee; any alignment.
    u64::from_le(unsafe { p.cast::<u64>().read_unaligned() })
}

/// The `crc32` of `n` words from each of `a`, `b` and `c`, from `crc` for
/// `a` and 0 for the others: three independent chains, so the
/// instruction's three-cycle latency is hidden and one word goes in per
/// cycle.
///
/// # Safety
/// SSE4.2; each pointer valid for reads of `8 * n` bytes.
#[inline]
#[target_feature(enable = "sse4.2")]
unsafe fn three_streams(crc: u32, a: *const u8, b: *const u8, c: *const u8, n: usize) -> [u32; 3] {
    use core::arch::x86_64::_mm_crc32_u64;
    let (mut x, mut y, mut z) = (u64::from(crc), 0u64, 0u64);
    for i in 0..n {
        // SAFETY: `8 * i + 8 <= 8 * n` bytes from each pointer.
        unsafe {
            x = _mm_crc32_u64(x, word(a.add(8 * i)));
            y = _mm_crc32_u64(y, word(b.add(8 * i)));
            z = _mm_crc32_u64(z, word(c.add(8 * i)));
        }
    }
    [x as u32, y as u32, z as u32]
}

/// Raw CRC-32C of `bytes` from `crc` with the SSE4.2 `crc32` instruction
/// in three interleaved streams, merged by carry-less multiplication (the
/// raw CRC is linear: the CRC of `A || B` is the CRC of `A` times
/// `x^(8 |B|)`, plus the CRC of `B` from zero). Blocks of three 8 KiB
/// streams merge with two products by constants; what is left (under 24
/// KiB) is split in three equal streams once and merged with two general
/// shifts; the last bytes (under 24) and inputs under 512 bytes go one
/// word at a time. One word per cycle, where one stream gets one per three.
///
/// # Safety
/// The CPU must have SSE4.2 and PCLMULQDQ (callers hold a
/// [`crate::arch::Level`] with both).
#[target_feature(enable = "sse4.2,pclmulqdq")]
pub(crate) unsafe fn raw_sse42_bulk(crc: u32, bytes: &[u8]) -> u32 {
    let mut crc = crc;
    let mut rest = bytes;
    while rest.len() >= 3 * LONG {
        let p = rest.as_ptr();
        // SAFETY: SSE4.2 (this function's features); three streams of
        // `LONG` bytes within `rest`.
        let [x, y, z] = unsafe { three_streams(crc, p, p.add(LONG), p.add(2 * LONG), LONG / 8) };
        crc = gf2::mul_by::<Clmul>(x, K_LONG2) ^ gf2::mul_by::<Clmul>(y, K_LONG) ^ z;
        rest = &rest[3 * LONG..];
    }
    if rest.len() >= THREE_WAY {
        let n = rest.len() / 24;
        let s = 8 * n;
        let p = rest.as_ptr();
        // SAFETY: as above, three streams of `s` bytes within `rest`.
        let [x, y, z] = unsafe { three_streams(crc, p, p.add(s), p.add(2 * s), n) };
        crc =
            gf2::mul_xpow::<Clmul>(x, 16 * s as u64) ^ gf2::mul_xpow::<Clmul>(y, 8 * s as u64) ^ z;
        rest = &rest[3 * s..];
    }
    // SAFETY: SSE4.2 (this function's features).
    unsafe { raw_sse42(crc, rest) }
}
