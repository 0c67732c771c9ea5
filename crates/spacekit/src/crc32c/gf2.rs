//! Arithmetic on CRC-32C remainders: multiplying by `x^e` in O(log e).
//!
//! # The polynomials
//!
//! CRC-32C divides by `P = 0x1_1EDC_6F41` (degree 32). `P` has an even number
//! of terms, so `(x + 1)` divides it and has no inverse modulo `P`. That
//! matters for [`flip_delta`]: the CRC of a run of `n` one bits involves
//! `(x^n + 1) / (x + 1)`. We therefore compute modulo `Q = P * (x + 1)`
//! (degree 33), where the division is exact, and only reduce modulo `P` at the
//! end:
//!
//! ```text
//! x^a + x^b  (mod Q)  is divisible by (x + 1), and
//! ((x^a + x^b) mod Q) / (x + 1)  ≡  (x^a + x^b) / (x + 1)  (mod P).
//! ```
//!
//! `x` has multiplicative order `ORDER = 2^32 - 2` modulo `Q` (checked by a
//! unit test), so exponents can be reduced modulo `ORDER` and never need more
//! than 32 bits.
//!
//! Everything here uses the *normal* bit order (bit `k` of an integer is the
//! coefficient of `x^k`); CRC values use the reflected order, so callers
//! convert with `u32::reverse_bits`.
//!
//! # Montgomery products
//!
//! A product of two remainders has degree up to 64; reducing it modulo `Q`
//! with a Barrett step needs shifts by 33 bits that straddle 64-bit lanes. A
//! Montgomery product with `R = x^64` needs none: for `p = a * b`,
//!
//! ```text
//! m = (p mod x^64) * Q^-1  mod x^64
//! mont(a, b) = (p + m * Q) / x^64   ≡  a * b * x^-64  (mod Q)
//! ```
//!
//! which is three carry-less multiplies and one XOR, and the result lands in
//! the upper 64 bits. Its degree is at most 32 whenever `deg a <= 63` and
//! `deg b <= 32`, so it is the canonical remainder. Table entries are kept in
//! Montgomery form (`t * x^64 mod Q`): a product of a *plain* value and a
//! Montgomery-form value is plain again, and a product of two Montgomery-form
//! values stays in Montgomery form.
//!
//! # Powers of x
//!
//! [`pow_x`] computes `leaf * x^(e & !63) mod Q`. The low six bits of the
//! exponent are folded into the plain `leaf` by the caller (for `x^e` the leaf
//! is simply `1 << (e & 63)`); the rest is split into 6-bit digits, each looked
//! up in a 64-entry table of Montgomery-form powers, and the few factors are
//! multiplied as a balanced tree: depth 2 for exponents below 2^24 (buffers
//! under 2 MiB), depth 3 up to 2^36. The tables take 5 * 64 * 8 = 2560 bytes.
//!
//! [`mul_xpow`] (a CRC shifted by `e` bits) makes the CRC a factor of that
//! tree rather than a product after it, so the tree is one product deeper
//! only where the leaf joins it: depth 2 below 2^18, 3 above. A shift by
//! fewer than 1024 whole bytes (every field of an inode, a group
//! descriptor or a superblock, spliced into its checksum) looks its factor
//! up in a second table of 8 KiB and is one product.
//!
//! With SSE4.2 as well, shifts skip the Montgomery form and the bit
//! reversals altogether: see the reflected products at `R_BYTES`.

/// CRC-32C's generator polynomial, normal bit order, with its `x^32` term.
pub(crate) const P: u64 = 0x1_1EDC_6F41;
/// `P * (x + 1)`, degree 33.
pub(crate) const Q: u64 = P ^ (P << 1);
/// Multiplicative order of `x` modulo `Q`.
pub(crate) const ORDER: u64 = (1 << 32) - 2;
/// `Q^-1 mod x^64`.
pub(crate) const QINV: u64 = inverse_mod_x64(Q);
/// `x^128 mod Q`: a Montgomery product with it undoes one `x^-64`.
pub(crate) const MONT_R2: u64 = xpow_mod_q(128);

/// Bits of the exponent each table covers.
const DIGIT_BITS: u32 = 6;
/// Number of digit tables: exponent bits 6..36.
const DIGITS: usize = 5;
/// Exponents must stay below this (reduce larger ones modulo `ORDER`).
pub(crate) const EXP_LIMIT: u64 = 1 << (DIGIT_BITS * (DIGITS as u32 + 1));

/// `TABLE[j][d] = x^(d * 2^(6 + 6j)) * x^64 mod Q`.
static TABLE: [[u64; 64]; DIGITS] = build_table();

/// Shifts by fewer bytes than this take their factor from [`BYTES`].
pub(crate) const BYTES_LEN: usize = 1024;
/// `BYTES[n] = x^(8n) * x^64 mod Q`: a CRC shifted by `n < 1024` bytes (a
/// splice inside an inode, a group descriptor or a superblock) is one
/// Montgomery product, with no digits to multiply first. 8 KiB.
static BYTES: [u64; BYTES_LEN] = build_bytes();

const fn build_bytes() -> [u64; BYTES_LEN] {
    let mut t = [0u64; BYTES_LEN];
    let step = xpow_mod_q(8);
    t[0] = xpow_mod_q(64);
    let mut n = 1;
    while n < BYTES_LEN {
        t[n] = mulmod_q(t[n - 1], step);
        n += 1;
    }
    t
}

/// # Reflected products reduced by the `crc32` instruction
///
/// Where the CPU has both PCLMULQDQ and SSE4.2, a shift needs no bit
/// reversal and no Montgomery step. For two reflected 32-bit values the
/// 64-bit carry-less product, read as a reflected 64-bit value, is
/// `a * b * x`, and the `crc32` instruction on it from zero multiplies by
/// `x^32` and reduces modulo `P`: two instructions give `a * b * x^33 mod
/// P` (`arch::x86_64::mul_xpow_crc32`). The tables below hold each factor
/// `x^g` as `S(g) = x^(g - 33) mod P`, reflected, so that a product of
/// `S(g)` and `S(h)` is `S(g + h)`, and a product of a CRC with `S(g)` is
/// the CRC times `x^g`. `x^-33` exists modulo `P` (`P(0) = 1`) and is
/// `x^(ORDER - 33)`, since `x^ORDER = 1` modulo `Q` and so modulo `P`.
///
/// `R_BYTES[n] = S(8n)`: a shift by `n < 1024` whole bytes. 4 KiB.
#[cfg(target_arch = "x86_64")]
pub(crate) static R_BYTES: [u32; BYTES_LEN] = build_r(8);
/// `R_LOW[b] = S(b)` for `b < 64`: the low six bits of a shift.
#[cfg(target_arch = "x86_64")]
pub(crate) static R_LOW: [u32; 64] = build_r(1);
/// `R_TABLE[j][d] = S(d * 2^(6 + 6j))`: digit `j` of a shift's bits above
/// the low six.
#[cfg(target_arch = "x86_64")]
pub(crate) static R_TABLE: [[u32; 64]; DIGITS] = build_r_table();

/// `[S(0), S(step), S(2 * step), ...]`, `N` entries.
#[cfg(target_arch = "x86_64")]
const fn build_r<const N: usize>(step: u64) -> [u32; N] {
    let mut t = [0u32; N];
    let s = xpow_mod_q(step);
    let mut v = xpow_mod_q(ORDER - 33);
    let mut i = 0;
    while i < N {
        t[i] = reflected(v);
        v = mulmod_q(v, s);
        i += 1;
    }
    t
}

#[cfg(target_arch = "x86_64")]
const fn build_r_table() -> [[u32; 64]; DIGITS] {
    let mut t = [[0u32; 64]; DIGITS];
    let mut j = 0;
    while j < DIGITS {
        t[j] = build_r(1 << (DIGIT_BITS as usize * (j + 1)));
        j += 1;
    }
    t
}

/// Digit `j` (six bits) of `h`, a shift's bits above its low six.
#[inline(always)]
pub(crate) const fn digit_of(h: u64, j: usize) -> usize {
    ((h >> (DIGIT_BITS as usize * j)) & 63) as usize
}

/// Carry-less product of two polynomials of degree < 64 (portable).
#[inline(always)]
pub(crate) const fn clmul_portable(a: u64, b: u64) -> u128 {
    // Four bits of `b` at a time, against a table of the 16 multiples of `a`.
    let mut t = [0u128; 16];
    let mut k = 1;
    while k < 16 {
        t[k] = if k & 1 == 0 {
            t[k / 2] << 1
        } else {
            t[k - 1] ^ a as u128
        };
        k += 1;
    }
    let mut r = 0u128;
    let mut i = 16;
    while i > 0 {
        i -= 1;
        r = (r << 4) ^ t[((b >> (4 * i)) & 15) as usize];
    }
    r
}

/// Bit-serial `a * b mod Q` for build-time tables (`deg a, deg b <= 33`).
const fn mulmod_q(a: u64, b: u64) -> u64 {
    let p = clmul_portable(a, b);
    let mut r = p;
    let mut bit = 127;
    while bit >= 33 {
        if (r >> bit) & 1 == 1 {
            r ^= (Q as u128) << (bit - 33);
        }
        bit -= 1;
    }
    r as u64
}

/// `x^e mod Q` by square-and-multiply (build time only).
const fn xpow_mod_q(mut e: u64) -> u64 {
    let mut result = 1u64;
    let mut base = 2u64;
    while e != 0 {
        if e & 1 == 1 {
            result = mulmod_q(result, base);
        }
        base = mulmod_q(base, base);
        e >>= 1;
    }
    result
}

/// The inverse of an odd polynomial modulo `x^64`.
const fn inverse_mod_x64(q: u64) -> u64 {
    // Solve q * inv = 1 one bit at a time, lowest first.
    let mut inv = 0u64;
    let mut rem = 1u64;
    let mut i = 0;
    while i < 64 {
        if (rem >> i) & 1 == 1 {
            inv |= 1 << i;
            rem ^= q << i;
        }
        i += 1;
    }
    inv
}

const fn build_table() -> [[u64; 64]; DIGITS] {
    let mut t = [[0u64; 64]; DIGITS];
    let mut j = 0;
    while j < DIGITS {
        let step = xpow_mod_q(1 << (DIGIT_BITS as usize * (j + 1)));
        t[j][0] = xpow_mod_q(64);
        let mut d = 1;
        while d < 64 {
            t[j][d] = mulmod_q(t[j][d - 1], step);
            d += 1;
        }
        j += 1;
    }
    t
}

/// A carry-less multiply unit: the portable one below, or PCLMULQDQ.
///
/// `Self` is the unit's register type holding one remainder.
pub(crate) trait Mont: Copy {
    /// Moves a polynomial into a register.
    fn load(v: u64) -> Self;
    /// Montgomery product `a * b * x^-64 mod Q` (`deg a <= 63`, `deg b <= 32`).
    fn mul(self, b: Self) -> Self;
    /// Sum (XOR).
    fn add(self, b: Self) -> Self;
    /// The polynomial, as an integer.
    fn get(self) -> u64;
    /// `v / (x + 1)` for a `v` it divides (`deg v <= 63`), i.e. the prefix XOR
    /// of the coefficients from the lowest up.
    fn div_x1(self) -> u64;
}

/// The portable unit: carry-less products by 4-bit windows.
#[derive(Clone, Copy)]
pub(crate) struct Portable(u64);

impl Mont for Portable {
    #[inline(always)]
    fn load(v: u64) -> Self {
        Portable(v)
    }
    #[inline(always)]
    fn mul(self, b: Self) -> Self {
        let p = clmul_portable(self.0, b.0);
        let m = clmul_portable(p as u64, QINV) as u64;
        let t = p ^ clmul_portable(m, Q);
        Portable((t >> 64) as u64)
    }
    #[inline(always)]
    fn add(self, b: Self) -> Self {
        Portable(self.0 ^ b.0)
    }
    #[inline(always)]
    fn get(self) -> u64 {
        self.0
    }
    #[inline(always)]
    fn div_x1(self) -> u64 {
        let mut v = self.0;
        v ^= v << 1;
        v ^= v << 2;
        v ^= v << 4;
        v ^= v << 8;
        v ^= v << 16;
        v ^= v << 32;
        v
    }
}

/// `leaf * x^(e & !63) mod Q` as a plain remainder (`deg <= 32`), for
/// `deg leaf <= 63` and `e < EXP_LIMIT`.
#[inline(always)]
pub(crate) fn pow_x<M: Mont>(leaf: u64, e: u64) -> M {
    debug_assert!(e < EXP_LIMIT);
    let h = e >> DIGIT_BITS;
    let digit = |j: usize| M::load(TABLE[j][digit_of(h, j)]);
    let l = M::load(leaf);
    if h < 1 << (3 * DIGIT_BITS) {
        // plain * Mont = plain; Mont * Mont = Mont.
        l.mul(digit(0)).mul(digit(1).mul(digit(2)))
    } else {
        let a = l.mul(digit(0));
        let b = digit(1).mul(digit(2));
        let c = digit(3).mul(digit(4));
        a.mul(b).mul(c)
    }
}

/// The raw CRC (zero initial value) of a message of `a - 32` bits that is all
/// zero except bits `[a - 32 - (a - b) .. a - 32)` counted from its end, i.e.
/// `(x^a + x^b) / (x + 1) mod P`, reflected. Both exponents below
/// [`EXP_LIMIT`] (in either order: the expression is symmetric).
#[inline(always)]
pub(crate) fn flip_delta<M: Mont>(a: u64, b: u64) -> u32 {
    let va: M = pow_x(1 << (a & 63), a);
    let vb: M = pow_x(1 << (b & 63), b);
    // deg(va + vb) <= 32 and (x + 1) divides it, so the quotient has degree
    // <= 31 and is already reduced modulo P.
    (va.add(vb).div_x1() as u32).reverse_bits()
}

/// `crc * x^e mod P` on reflected CRC values (`e < EXP_LIMIT`).
#[inline(always)]
pub(crate) fn mul_xpow<M: Mont>(crc: u32, e: u64) -> u32 {
    debug_assert!(e < EXP_LIMIT);
    if e.is_multiple_of(8) && e < 8 * BYTES_LEN as u64 {
        // `BYTES[n]` is `xpow_factor(8n)`.
        return mul_by::<M>(crc, BYTES[(e / 8) as usize]);
    }
    let h = e >> DIGIT_BITS;
    let digit = |j: usize| M::load(TABLE[j][digit_of(h, j)]);
    // The CRC is one more factor of the tree, not a product after it: `c`
    // (plain) times digit 0 is plain, and `x^(e & 63)` enters in
    // Montgomery form (times `x^128 * x^-64`), so the last product of the
    // tree is plain again with no product to undo an `x^-64` after it.
    // Depth 2 for exponents below 2^18 (fields of buffers up to 32 KiB),
    // 3 up to 2^36.
    let a = M::load(u64::from(crc.reverse_bits())).mul(digit(0));
    let low = M::load(1 << (e & 63)).mul(M::load(MONT_R2));
    let r = if h < 1 << DIGIT_BITS {
        a.mul(low)
    } else if h < 1 << (2 * DIGIT_BITS) {
        a.mul(digit(1).mul(low))
    } else if h < 1 << (3 * DIGIT_BITS) {
        a.mul(digit(1).mul(digit(2))).mul(low)
    } else {
        let b = digit(1).mul(digit(2));
        let g = digit(3).mul(digit(4));
        a.mul(b).mul(g.mul(low))
    };
    reflected(r.get())
}

/// A plain remainder modulo `Q` (degree <= 32) reduced modulo `P` and
/// reflected: a CRC value (also for the build-time reflected tables).
#[inline(always)]
const fn reflected(r: u64) -> u32 {
    let r = if r >> 32 != 0 { r ^ P } else { r };
    (r as u32).reverse_bits()
}

/// `x^e * x^64 mod Q`: the factor that multiplies by `x^e` in one
/// Montgomery product ([`mul_by`]), for an `e` known at build time.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const fn xpow_factor(e: u64) -> u64 {
    xpow_mod_q(e + 64)
}

/// `crc * x^e mod P` on reflected CRC values, with `k = xpow_factor(e)`:
/// one Montgomery product where [`mul_xpow`] needs the power's digits too.
#[inline(always)]
pub(crate) fn mul_by<M: Mont>(crc: u32, k: u64) -> u32 {
    let c = M::load(u64::from(crc.reverse_bits()));
    // c * (x^e * x^64) * x^-64: plain, degree <= 32.
    reflected(c.mul(M::load(k)).get())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `x^e mod Q` the slow way.
    fn slow_pow(e: u64) -> u64 {
        xpow_mod_q(e)
    }

    #[test]
    fn order_of_x_modulo_q() {
        assert_eq!(xpow_mod_q(ORDER), 1);
        // ORDER = 2 * (2^31 - 1) with 2^31 - 1 prime: no proper divisor works.
        assert_ne!(xpow_mod_q(2), 1);
        assert_ne!(xpow_mod_q(ORDER / 2), 1);
    }

    #[test]
    fn q_inverse() {
        assert_eq!(clmul_portable(Q, QINV) as u64, 1);
    }

    #[test]
    fn pow_matches_square_and_multiply() {
        let mut e = 1u64;
        for k in 0..2000u64 {
            // A spread of exponents: small, around table boundaries, large.
            e = e
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let exp = match k % 4 {
                0 => k,
                1 => e >> 40,
                2 => e >> 28,
                _ => (1u64 << (k % 36)).wrapping_sub(k % 3),
            } % EXP_LIMIT;
            let got: Portable = pow_x(1 << (exp & 63), exp);
            assert_eq!(got.get(), slow_pow(exp), "x^{exp}");
        }
    }

    #[test]
    fn mul_by_a_factor_is_mul_xpow() {
        for e in [0u64, 1, 8, 64, 8 * 4096, 8 * 16384, 123_456_789] {
            let k = xpow_factor(e);
            for crc in [0u32, 1, 0x8000_0000, 0xDEAD_BEEF, !0] {
                assert_eq!(
                    mul_by::<Portable>(crc, k),
                    mul_xpow::<Portable>(crc, e),
                    "e {e} crc {crc:#x}"
                );
            }
        }
    }

    /// `crc * x^e mod P` on reflected CRC values, the slow way.
    fn slow_mul_xpow(crc: u32, e: u64) -> u32 {
        reflected(mulmod_q(u64::from(crc.reverse_bits()), xpow_mod_q(e)))
    }

    #[test]
    fn mul_xpow_matches_square_and_multiply() {
        // Every byte shift the byte table covers and the bit shifts between
        // them, then a spread over each digit count up to the limit.
        let mut exps: std::vec::Vec<u64> = (0..8 * BYTES_LEN as u64 + 64).collect();
        let mut e = 7u64;
        for k in 0..4000u64 {
            e = e
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let bits = 12 + k % 25;
            exps.push((e >> (64 - bits)) & !(k % 2 * 7));
        }
        #[cfg(target_arch = "x86_64")]
        let clmul = std::arch::is_x86_feature_detected!("pclmulqdq");
        #[cfg(target_arch = "x86_64")]
        let crc32 = clmul && std::arch::is_x86_feature_detected!("sse4.2");
        let mut crc = 0x1234_5678u32;
        for &e in &exps {
            crc = crc.rotate_left(5) ^ e as u32;
            let want = slow_mul_xpow(crc, e);
            assert_eq!(mul_xpow::<Portable>(crc, e), want, "crc {crc:#x} e {e}");
            #[cfg(target_arch = "x86_64")]
            if clmul {
                // SAFETY: the CPU has PCLMULQDQ (checked above).
                let got = unsafe { super::super::arch::x86_64::mul_xpow(crc, e) };
                assert_eq!(got, want, "PCLMULQDQ: crc {crc:#x} e {e}");
            }
            #[cfg(target_arch = "x86_64")]
            if crc32 {
                // SAFETY: the CPU has PCLMULQDQ and SSE4.2 (checked above).
                let got = unsafe { super::super::arch::x86_64::mul_xpow_crc32(crc, e) };
                assert_eq!(got, want, "PCLMULQDQ + crc32: crc {crc:#x} e {e}");
            }
        }
    }

    #[test]
    fn div_x1_inverts_multiplication() {
        for v in [1u64, 0x1234_5678, 0xFFFF_FFFF, 0x1_0000_0001] {
            let times = v ^ (v << 1);
            assert_eq!(Portable(times).div_x1(), v);
        }
    }
}
