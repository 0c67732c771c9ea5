//! Seed 001's `crc32c_flip_range()`: GF(2) shift matrices applied through
//! nibble lookup tables.
//!
//! The seed updates a raw CRC-32C after bits `[first_bit, first_bit + nbits)`
//! of a `buf_len`-byte buffer flip as `old ^ crc(flip_mask << trailing)`:
//!
//! 1. the CRC of the flip mask itself: its bytes (a partial first byte, whole
//!    `0xFF` bytes, a partial last byte) go through the ordinary hardware
//!    CRC-32C, so this step costs O(nbits / 8) (a mask of up to 16 bytes is
//!    built on the stack and hashed in one call);
//! 2. the mask is followed by `trailing` zero bytes; multiplying by
//!    `x^(8 * trailing)` is done by one 32x32 GF(2) matrix per set bit of
//!    `trailing` (matrix `k` shifts by `2^k` bytes), each matrix applied as
//!    eight lookups in 16-entry tables indexed by the CRC's nibbles.
//!
//! The seed ships 19 matrices (`19 * 8 * 16` u32 = 9728 bytes, enough for
//! 512 KiB bitmaps); this port builds as many as the largest buffer needs, so
//! the same method also runs at 1 MiB and 16 MiB. Tables are built at
//! construction with a bit-serial CRC, not copied from anywhere.

/// Reflected CRC-32C polynomial.
const POLY: u32 = 0x82F6_3B78;

/// The seed's flip-range method with its precomputed tables.
pub struct SeedFlip {
    /// `tables[k][i][v]`: the CRC value with nibble `i` equal to `v` (others
    /// zero) shifted by `2^k` zero bytes.
    tables: Vec<[[u32; 16]; 8]>,
}

/// Raw CRC of one zero byte appended to `crc` (bit-serial).
fn zero_byte(mut crc: u32) -> u32 {
    for _ in 0..8 {
        crc = if crc & 1 != 0 {
            (crc >> 1) ^ POLY
        } else {
            crc >> 1
        };
    }
    crc
}

impl SeedFlip {
    /// Tables for buffers of up to `max_len` bytes (at least the seed's 19
    /// matrices).
    pub fn new(max_len: u64) -> SeedFlip {
        let levels = (64 - max_len.leading_zeros()).max(19) as usize;
        // Matrix columns: the image of each single-bit CRC value.
        let mut cols = [0u32; 32];
        for (j, c) in cols.iter_mut().enumerate() {
            *c = zero_byte(1 << j);
        }
        let mut tables = Vec::with_capacity(levels);
        for _ in 0..levels {
            let mut t = [[0u32; 16]; 8];
            for (i, ti) in t.iter_mut().enumerate() {
                for (v, e) in ti.iter_mut().enumerate() {
                    *e = (0..4)
                        .filter(|b| v >> b & 1 != 0)
                        .fold(0, |acc, b| acc ^ cols[4 * i + b]);
                }
            }
            tables.push(t);
            // Square the matrix: shifting by 2^(k+1) bytes is shifting twice.
            let apply = |m: &[u32; 32], x: u32| -> u32 {
                (0..32)
                    .filter(|j| x >> j & 1 != 0)
                    .fold(0, |acc, j| acc ^ m[j])
            };
            let prev = cols;
            for c in cols.iter_mut() {
                *c = apply(&prev, *c);
            }
        }
        SeedFlip { tables }
    }

    /// Table bytes the method keeps (the seed's is 9728).
    pub fn table_bytes(&self) -> usize {
        self.tables.len() * 8 * 16 * 4
    }

    /// `crc * x^(8 * nbytes) mod P` with one matrix per set bit of `nbytes`.
    #[inline]
    pub fn shift(&self, mut crc: u32, nbytes: u64) -> u32 {
        let mut n = nbytes;
        let mut k = 0;
        while n != 0 {
            if n & 1 != 0 {
                let t = &self.tables[k];
                crc = t[0][(crc & 15) as usize]
                    ^ t[1][((crc >> 4) & 15) as usize]
                    ^ t[2][((crc >> 8) & 15) as usize]
                    ^ t[3][((crc >> 12) & 15) as usize]
                    ^ t[4][((crc >> 16) & 15) as usize]
                    ^ t[5][((crc >> 20) & 15) as usize]
                    ^ t[6][((crc >> 24) & 15) as usize]
                    ^ t[7][(crc >> 28) as usize];
            }
            n >>= 1;
            k += 1;
        }
        crc
    }

    /// The new raw CRC after bits `[first_bit, first_bit + nbits)` of a
    /// `buf_len`-byte buffer flipped. The caller guarantees the range fits
    /// and that `buf_len` is within the tables' reach.
    #[inline]
    pub fn flip_range(&self, crc: u32, buf_len: u64, first_bit: u64, nbits: u64) -> u32 {
        if nbits == 0 {
            return crc;
        }
        let last_bit = first_bit + nbits - 1;
        let (b0, b1) = (first_bit / 8, last_bit / 8);
        let first = 0xFFu8 << (first_bit % 8);
        let last = 0xFFu8 >> (7 - last_bit % 8);
        let span = (b1 - b0 + 1) as usize;
        let mask_crc = if span <= SHORT {
            // A short mask is built on the stack and hashed in one call.
            let mut m = [0xFFu8; SHORT];
            m[0] = first;
            m[span - 1] &= last;
            hw(0, &m[..span])
        } else {
            let mut c = hw(0, &[first]);
            let mut full = span as u64 - 2;
            while full > 0 {
                let n = full.min(ONES.len() as u64) as usize;
                c = hw(c, &ONES[..n]);
                full -= n as u64;
            }
            hw(c, &[last])
        };
        crc ^ self.shift(mask_crc, buf_len - 1 - b1)
    }
}

/// Masks up to this many bytes are hashed in one call.
const SHORT: usize = 16;

/// A run of ones fed to the hardware CRC for the mask's middle bytes.
static ONES: [u8; 4096] = [0xFF; 4096];

/// The kernel's raw `crc32c()` (hardware accelerated; the `crc32c` crate uses
/// SSE4.2 `crc32` instructions like the kernel's x86 code).
#[inline]
fn hw(crc: u32, bytes: &[u8]) -> u32 {
    !crc32c::crc32c_append(!crc, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(mut crc: u32, bytes: &[u8]) -> u32 {
        for &b in bytes {
            crc ^= u32::from(b);
            crc = zero_byte(crc);
        }
        crc
    }

    #[test]
    fn flips_match_a_recompute() {
        let s = SeedFlip::new(5000);
        assert_eq!(s.table_bytes(), 9728);
        let mut buf: Vec<u8> = (0..3000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 9) as u8)
            .collect();
        let mut crc = reference(0x1234_5678, &buf);
        for (f, n) in [
            (0u64, 1u64),
            (7, 2),
            (8, 8),
            (100, 1000),
            (23_999, 1),
            (0, 24_000),
        ] {
            for i in f..f + n {
                buf[(i / 8) as usize] ^= 1 << (i % 8);
            }
            crc = s.flip_range(crc, buf.len() as u64, f, n);
            assert_eq!(crc, reference(0x1234_5678, &buf), "flip {f}+{n}");
        }
        assert_eq!(s.flip_range(crc, 3000, 5, 0), crc);
    }

    #[test]
    fn shift_appends_zero_bytes() {
        let s = SeedFlip::new(1 << 20);
        for n in [0u64, 1, 2, 3, 255, 4096, 70_001] {
            assert_eq!(
                s.shift(0xDEAD_BEEF, n),
                reference(0xDEAD_BEEF, &vec![0; n as usize])
            );
        }
    }
}
