//! CRC-32C (Castagnoli) with O(log n) updates: shift, combine, flip a bit
//! range, splice a region.
//!
//! # Raw and standard CRC
//!
//! * [`raw`]`(crc, bytes)` is the Linux kernel's `crc32c(crc, p, len)` and what
//!   ext4 stores (seeded with its checksum seed): no inversion on input or
//!   output. It is linear in the message: `raw(0, a ^ b) = raw(0, a) ^ raw(0, b)`
//!   for equal-length `a` and `b`.
//! * [`checksum`]`(bytes)` is the standard CRC-32C (iSCSI, `crc32c` crate):
//!   `!raw(!0, bytes)`; `checksum(b"123456789") == 0xE306_9283`.
//!
//! Every O(log n) operation here works on raw values; see each function for
//! its standard-CRC form.
//!
//! # Bit order
//!
//! Bit `i` of a buffer is bit `i % 8` of byte `i / 8` (the ext4 bitmap
//! layout), and the CRC reads each byte from bit 0 up.
//!
//! # How the updates work
//!
//! A CRC is a remainder of polynomial division. Flipping bits `D` of a message
//! changes its raw CRC by the raw CRC (initial value 0) of `D` alone, and the
//! CRC of a message that is zero except one region is the region's CRC
//! multiplied by `x^(8 * bytes after it)` modulo the polynomial. [`shift`]
//! does that multiplication with a few table lookups and carry-less multiplies
//! (PCLMULQDQ, chosen once at runtime, with a portable fallback);
//! [`flip_range`] goes further and computes the CRC of the run of ones itself
//! in closed form, so its cost does not depend on the run's length. The
//! module `gf2` in the source explains the algebra.
//!
//! # Example
//!
//! ```
//! use spacekit::crc32c;
//!
//! let mut block = vec![0u8; 4096];
//! let seed = 0x1234_5678;
//! let mut crc = crc32c::raw(seed, &block);
//!
//! // Allocate blocks 100..140: every bit in the range flips from 0 to 1.
//! crc = crc32c::flip_range(crc, block.len() as u64, 100, 40)?;
//! for bit in 100..140 {
//!     block[bit / 8] |= 1 << (bit % 8);
//! }
//! assert_eq!(crc, crc32c::raw(seed, &block));
//!
//! // Rewrite a 12-byte directory entry in place.
//! let new_entry = *b"hello, world";
//! let old_entry: [u8; 12] = block[2000..2012].try_into().unwrap();
//! crc = crc32c::splice(crc, block.len() as u64, 2000, &old_entry, &new_entry)?;
//! block[2000..2012].copy_from_slice(&new_entry);
//! assert_eq!(crc, crc32c::raw(seed, &block));
//! # Ok::<(), crc32c::CrcError>(())
//! ```

mod arch;
mod gf2;
mod soft;

use core::fmt;

use crate::arch::Level;
use arch::Unit;

/// What went wrong with a CRC update.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CrcError {
    /// A bit range that does not fit in the buffer.
    BitRangeOutOfBounds {
        /// First bit of the range.
        first_bit: u64,
        /// Number of bits.
        nbits: u64,
        /// The buffer's length in bytes.
        buf_len: u64,
    },
    /// A byte region that does not fit in the buffer.
    ByteRangeOutOfBounds {
        /// Offset of the region.
        offset: u64,
        /// Length of the region.
        len: u64,
        /// The buffer's length in bytes.
        buf_len: u64,
    },
    /// Old and new contents of a splice of different lengths.
    LengthMismatch {
        /// Length of the old contents.
        old: usize,
        /// Length of the new contents.
        new: usize,
    },
    /// A checksummed length longer than the buffer.
    ChecksumLenTooLong {
        /// Bytes to checksum.
        csum_len: usize,
        /// Bytes in the buffer.
        len: usize,
    },
    /// A buffer length whose size in bits does not fit in a `u64` (or, for a
    /// bitmap, in a `usize`).
    BufferTooLarge {
        /// The length given, in bytes.
        buf_len: u64,
    },
}

impl fmt::Display for CrcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            CrcError::BitRangeOutOfBounds {
                first_bit,
                nbits,
                buf_len,
            } => write!(
                f,
                "bits {first_bit}..{first_bit}+{nbits} do not fit in a buffer of {buf_len} bytes"
            ),
            CrcError::ByteRangeOutOfBounds {
                offset,
                len,
                buf_len,
            } => write!(
                f,
                "bytes {offset}..{offset}+{len} do not fit in a buffer of {buf_len} bytes"
            ),
            CrcError::LengthMismatch { old, new } => write!(
                f,
                "old contents are {old} bytes but new contents are {new} bytes"
            ),
            CrcError::ChecksumLenTooLong { csum_len, len } => {
                write!(f, "cannot checksum {csum_len} bytes of a {len}-byte buffer")
            }
            CrcError::BufferTooLarge { buf_len } => {
                write!(f, "a buffer of {buf_len} bytes has 2^64 bits or more")
            }
        }
    }
}

impl core::error::Error for CrcError {}

/// Which implementations a computation uses: the bulk CRC (three streams of
/// the SSE4.2 `crc32` instruction where the level has SSE4.2 and
/// PCLMULQDQ, else the `crc-fast` crate when its feature is on, else
/// portable slicing-by-8) and the
/// carry-less multiply unit for the O(log n) updates (PCLMULQDQ when the
/// [`Level`] has it, else portable).
///
/// The free functions of this module use [`Engine::detect`]; tests run the
/// same checks on [`Engine::at_level`] for each of [`Level::available`] and
/// on [`Engine::portable`], which also replaces the bulk CRC.
///
/// ```
/// use spacekit::arch::Level;
/// use spacekit::crc32c::{self, Engine};
///
/// for level in Level::available() {
///     let e = Engine::at_level(level);
///     assert_eq!(e.shift(e.raw(7, b"abc"), 5), crc32c::raw(7, b"abc\0\0\0\0\0"));
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Engine {
    unit: Unit,
    bulk: Bulk,
    /// Short inputs (up to 64 bytes) with the SSE4.2 `crc32` instruction,
    /// when the level has it.
    short_sse42: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bulk {
    Soft,
    #[cfg(feature = "crc-fast")]
    CrcFast,
    /// Three interleaved streams of the SSE4.2 `crc32` instruction, merged
    /// with PCLMULQDQ (`arch::x86_64::raw_sse42_bulk`).
    #[cfg(target_arch = "x86_64")]
    Sse42,
    /// `crc-fast`'s AVX-512 VPCLMULQDQ folds from [`FOLDS_FROM`] bytes,
    /// the `crc32` streams below: on a CPU with 512-bit carry-less
    /// multiplies the folds read twice as fast from 512 bytes up (57 GB/s
    /// against 28 at 64 KiB on an AMD EPYC Zen 4), and they tie at 128 to
    /// 256 bytes.
    #[cfg(all(target_arch = "x86_64", feature = "crc-fast"))]
    Folds,
}

/// From this many bytes [`Bulk::Folds`] hands the input to `crc-fast`.
#[cfg(all(target_arch = "x86_64", feature = "crc-fast"))]
const FOLDS_FROM: usize = 512;

/// From this many bytes the input streams from memory rather than cache,
/// where `crc-fast`'s single stream of 64-byte folds reads faster than
/// three `crc32` streams (1.1-1.15x at 32 MiB on an AMD EPYC Zen 3; a
/// toss-up at 16 MiB, and the streams win by 1.2-1.5x below).
#[cfg(all(target_arch = "x86_64", feature = "crc-fast"))]
const FROM_MEMORY: usize = 16 << 20;

/// The raw CRC-32C by the `crc-fast` crate.
#[cfg(feature = "crc-fast")]
fn crc_fast_raw(crc: u32, bytes: &[u8]) -> u32 {
    let mut d =
        crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Iscsi, u64::from(crc));
    d.update(bytes);
    // The digest's state is the raw register (it applies the final
    // inversion only in `finalize`).
    d.get_state() as u32
}

impl Bulk {
    /// The bulk CRC for `level`: the `crc32` streams where the level has
    /// SSE4.2 and PCLMULQDQ, else `crc-fast` (when its feature is on) or
    /// slicing-by-8.
    const fn for_level(level: Level) -> Bulk {
        #[cfg(target_arch = "x86_64")]
        if level.has_sse42() && level.has_pclmulqdq() {
            // crc-fast's widest path needs AVX512VL and VPCLMULQDQ, which
            // only an AVX-512 level claims.
            #[cfg(feature = "crc-fast")]
            if level.has_avx512vl() && level.has_vpclmulqdq() {
                return Bulk::Folds;
            }
            return Bulk::Sse42;
        }
        let _ = level;
        #[cfg(feature = "crc-fast")]
        return Bulk::CrcFast;
        #[cfg(not(feature = "crc-fast"))]
        Bulk::Soft
    }
}

impl Engine {
    /// The fastest implementations available:
    /// [`Engine::at_level`]`(`[`Level::detect`]`())`, detected once and
    /// cached.
    #[inline]
    pub fn detect() -> Engine {
        Engine::at_level(Level::detect())
    }

    /// The multiply unit `level` may use (PCLMULQDQ when
    /// [`Level::has_pclmulqdq`], so not at [`Level::scalar`]) and its bulk
    /// CRC: three streams of the `crc32` instruction when the level also
    /// has SSE4.2 (handing inputs of 512 bytes and more to `crc-fast`'s
    /// AVX-512 VPCLMULQDQ folds at a level with those, when the feature is
    /// on), else `crc-fast` (which dispatches on its own) when the feature
    /// is on, else slicing-by-8.
    #[inline]
    pub const fn at_level(level: Level) -> Engine {
        Engine {
            unit: Unit::for_level(level),
            bulk: Bulk::for_level(level),
            short_sse42: cfg!(target_arch = "x86_64") && level.has_sse42(),
        }
    }

    /// The portable fallbacks only: slicing-by-8 and 4-bit-window carry-less
    /// products ([`Engine::at_level`]`(`[`Level::scalar`]`())` with the
    /// bulk CRC portable too).
    #[inline]
    pub const fn portable() -> Engine {
        Engine {
            unit: Unit::for_level(Level::scalar()),
            bulk: Bulk::Soft,
            short_sse42: false,
        }
    }

    /// Names for reports, e.g. `("crc-fast", "pclmulqdq")`: the bulk path and
    /// the multiply unit.
    pub fn names(self) -> (&'static str, &'static str) {
        let bulk = match self.bulk {
            Bulk::Soft => "slicing-by-8",
            #[cfg(feature = "crc-fast")]
            Bulk::CrcFast => "crc-fast",
            #[cfg(target_arch = "x86_64")]
            Bulk::Sse42 => "sse4.2-crc32x3",
            #[cfg(all(target_arch = "x86_64", feature = "crc-fast"))]
            Bulk::Folds => "crc-fast-avx512",
        };
        (bulk, self.unit.name())
    }

    /// See [`raw`].
    #[inline]
    pub fn raw(self, crc: u32, bytes: &[u8]) -> u32 {
        #[cfg(target_arch = "x86_64")]
        if self.short_sse42 && bytes.len() <= arch::x86_64::SHORT {
            // SAFETY: `short_sse42` is only set from a level with SSE4.2,
            // and a level never claims a feature the CPU lacks.
            return unsafe { arch::x86_64::raw_sse42(crc, bytes) };
        }
        match self.bulk {
            Bulk::Soft => soft::raw(crc, bytes),
            #[cfg(feature = "crc-fast")]
            Bulk::CrcFast => crc_fast_raw(crc, bytes),
            #[cfg(all(target_arch = "x86_64", feature = "crc-fast"))]
            Bulk::Sse42 if bytes.len() >= FROM_MEMORY => crc_fast_raw(crc, bytes),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Sse42` is only chosen for a level with SSE4.2 and
            // PCLMULQDQ, and a level never claims a feature the CPU lacks.
            Bulk::Sse42 => unsafe { arch::x86_64::raw_sse42_bulk(crc, bytes) },
            #[cfg(all(target_arch = "x86_64", feature = "crc-fast"))]
            Bulk::Folds if bytes.len() >= FOLDS_FROM => crc_fast_raw(crc, bytes),
            #[cfg(all(target_arch = "x86_64", feature = "crc-fast"))]
            // SAFETY: `Folds` is only chosen for a level with SSE4.2 and
            // PCLMULQDQ (and AVX-512), and a level never claims a feature
            // the CPU lacks.
            Bulk::Folds => unsafe { arch::x86_64::raw_sse42_bulk(crc, bytes) },
        }
    }

    /// See [`checksum`].
    #[inline]
    pub fn checksum(self, bytes: &[u8]) -> u32 {
        !self.raw(!0, bytes)
    }

    /// See [`shift`].
    #[inline]
    pub fn shift(self, crc: u32, nbytes: u64) -> u32 {
        // 8 * nbytes without overflow and below EXP_LIMIT (2^36), reduced
        // modulo the order of x where needed so that x^e is unchanged.
        let e = if nbytes < 1 << 33 {
            nbytes * 8
        } else {
            (nbytes % gf2::ORDER) * 8
        };
        self.unit.mul_xpow(crc, e)
    }

    /// See [`combine`].
    #[inline]
    pub fn combine(self, crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
        self.shift(crc_a, len_b) ^ crc_b
    }

    /// See [`flip_range`].
    #[inline]
    pub fn flip_range(
        self,
        crc: u32,
        buf_len: u64,
        first_bit: u64,
        nbits: u64,
    ) -> Result<u32, CrcError> {
        let buf_bits = buf_len
            .checked_mul(8)
            .ok_or(CrcError::BufferTooLarge { buf_len })?;
        match first_bit.checked_add(nbits) {
            Some(end) if end <= buf_bits => {}
            _ => {
                return Err(CrcError::BitRangeOutOfBounds {
                    first_bit,
                    nbits,
                    buf_len,
                })
            }
        }
        if nbits == 0 {
            return Ok(crc);
        }
        // The flipped bits are x^(buf_bits - first_bit - nbits) * ones(nbits)
        // = (x^a + x^b) / (x + 1) / x^32 with the exponents below; the raw CRC
        // multiplies by x^32.
        let after = buf_bits - first_bit;
        let (a, b) = match after.checked_add(32) {
            Some(a) if a < gf2::EXP_LIMIT => (a, a - nbits),
            _ => (
                (after % gf2::ORDER + 32) % gf2::ORDER,
                (after - nbits) % gf2::ORDER + 32,
            ),
        };
        // Both exponents are now below EXP_LIMIT.
        Ok(crc ^ self.unit.flip_delta(a, b))
    }

    /// See [`splice`].
    pub fn splice(
        self,
        crc: u32,
        buf_len: u64,
        offset: u64,
        old: &[u8],
        new: &[u8],
    ) -> Result<u32, CrcError> {
        if old.len() != new.len() {
            return Err(CrcError::LengthMismatch {
                old: old.len(),
                new: new.len(),
            });
        }
        let len = old.len() as u64;
        let end = match offset.checked_add(len) {
            Some(end) if end <= buf_len => end,
            _ => {
                return Err(CrcError::ByteRangeOutOfBounds {
                    offset,
                    len,
                    buf_len,
                })
            }
        };
        // Linearity: the CRC of old ^ new is the XOR of their CRCs (both from
        // 0), so two bulk passes replace a copy into a scratch buffer.
        let delta = self.raw(0, old) ^ self.raw(0, new);
        Ok(crc ^ self.shift(delta, buf_len - end))
    }
}

/// Raw CRC-32C of `bytes` continuing from `crc`: the kernel's
/// `crc32c(crc, p, len)`, with no inversion in or out.
///
/// ext4 computes `raw(csum_seed, data)`. The standard CRC-32C of `bytes` is
/// `!raw(!0, bytes)` (see [`checksum`]).
#[inline]
pub fn raw(crc: u32, bytes: &[u8]) -> u32 {
    Engine::detect().raw(crc, bytes)
}

/// Raw CRC-32C of the first `nbytes` bytes of `words` laid out in
/// little-endian byte order: an on-disk bitmap held as `u64` words, as
/// [`crate::bitmap::Bitmap`] holds it. No copy on little-endian targets.
/// `nbytes` is capped at the words' length.
///
/// ```
/// use spacekit::crc32c::{raw, raw_words};
/// let words = [0x0807_0605_0403_0201u64, 0x100f_0e0d_0c0b_0a09];
/// let bytes: Vec<u8> = (1..=16).collect();
/// assert_eq!(raw_words(7, &words, 11), raw(7, &bytes[..11]));
/// assert_eq!(raw_words(7, &words, 99), raw(7, &bytes));
/// ```
#[inline]
pub fn raw_words(crc: u32, words: &[u64], nbytes: usize) -> u32 {
    Engine::detect().raw_words(crc, words, nbytes)
}

impl Engine {
    /// See [`raw_words`].
    pub fn raw_words(self, crc: u32, words: &[u64], nbytes: usize) -> u32 {
        let nbytes = nbytes.min(words.len() * 8);
        #[cfg(target_endian = "little")]
        {
            // SAFETY: `u64` has no padding and every byte pattern is a valid `u8`;
            // the length stays inside `words` (`nbytes` was capped at
            // 8 * words.len() above), and
            // `u8` has alignment 1. On a little-endian target the in-memory bytes
            // are the on-disk layout.
            let bytes = unsafe { core::slice::from_raw_parts(words.as_ptr().cast::<u8>(), nbytes) };
            self.raw(crc, bytes)
        }
        #[cfg(not(target_endian = "little"))]
        {
            let mut crc = crc;
            let mut left = nbytes;
            // Words per on-stack byte buffer.
            const CHUNK_WORDS: usize = 32;
            for chunk in words.chunks(CHUNK_WORDS) {
                if left == 0 {
                    break;
                }
                let mut buf = [0u8; CHUNK_WORDS * 8];
                for (out, w) in buf.chunks_exact_mut(8).zip(chunk) {
                    out.copy_from_slice(&w.to_le_bytes());
                }
                let n = left.min(chunk.len() * 8);
                crc = self.raw(crc, &buf[..n]);
                left -= n;
            }
            crc
        }
    }
}

/// Standard CRC-32C (iSCSI; initial value and output inverted) of `bytes`.
///
/// ```
/// assert_eq!(spacekit::crc32c::checksum(b"123456789"), 0xE306_9283);
/// ```
#[inline]
pub fn checksum(bytes: &[u8]) -> u32 {
    Engine::detect().checksum(bytes)
}

/// The raw CRC of a message followed by `nbytes` zero bytes, given the raw CRC
/// `crc` of the message: `crc * x^(8 * nbytes) mod P`, in O(log nbytes).
///
/// Equivalently `raw(crc, &[0; nbytes])`. The Linux kernel had this as
/// `crc32_generic_shift` (logarithmic, but with a bit-serial multiply; removed
/// in 2025).
#[inline]
pub fn shift(crc: u32, nbytes: u64) -> u32 {
    Engine::detect().shift(crc, nbytes)
}

/// The CRC of `A ‖ B` from the CRCs of `A` and `B` and the length of `B`:
/// `shift(crc_a, len_b) ^ crc_b`, in O(log len_b).
///
/// * **Standard CRC-32C** (as [`checksum`], zlib's `crc32_combine`, the `crc32c`
///   crate's `crc32c_combine`): `checksum(A ‖ B) == combine(checksum(A),
///   checksum(B), len B)`.
/// * **Raw**: `raw(seed, A ‖ B) == combine(raw(seed, A), raw(0, B), len B)` —
///   the second part's CRC must start from 0. (For a `crc_b` computed from a
///   nonzero seed `s`, XOR in `shift(s, len_b)` first.)
///
/// ```
/// use spacekit::crc32c::{checksum, combine, raw};
///
/// let (a, b) = (b"hello, ".as_slice(), b"world".as_slice());
/// assert_eq!(combine(checksum(a), checksum(b), 5), checksum(b"hello, world"));
/// assert_eq!(combine(raw(7, a), raw(0, b), 5), raw(7, b"hello, world"));
/// ```
#[inline]
pub fn combine(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
    Engine::detect().combine(crc_a, crc_b, len_b)
}

/// The new raw CRC of a `buf_len`-byte buffer after exactly the bits
/// `[first_bit, first_bit + nbits)` flipped (bit `i` = bit `i % 8` of byte
/// `i / 8`). The cost is a few table lookups and carry-less multiplies,
/// independent of `nbits`, for buffers of up to 2^61 - 1 bytes.
///
/// The `crc32c_flip_range()` proposed for Linux's ext4 bitmap checksums (2026). Only valid when every bit of the range
/// really changed (setting bits that were all clear, clearing bits that were
/// all set); for partial changes use [`splice`]. The update XORs in the CRC
/// of the change alone, so it is the same for a raw CRC under any seed and for
/// a standard CRC-32C value of the buffer.
///
/// # Errors
/// [`CrcError::BitRangeOutOfBounds`] if the range ends past the buffer,
/// [`CrcError::BufferTooLarge`] if `8 * buf_len` overflows. `nbits == 0`
/// returns `crc` unchanged.
#[inline]
pub fn flip_range(crc: u32, buf_len: u64, first_bit: u64, nbits: u64) -> Result<u32, CrcError> {
    Engine::detect().flip_range(crc, buf_len, first_bit, nbits)
}

/// The new raw CRC of a `buf_len`-byte buffer after the bytes at `offset`
/// changed from `old` to `new`: one pass over the region plus an O(log
/// buf_len) shift, never touching the rest of the buffer.
///
/// The `crc32c_splice()` planned for Linux's ext4 directory and extent blocks. Like
/// [`flip_range`], it applies to raw CRCs under any seed and to standard
/// CRC-32C values alike.
///
/// # Errors
/// [`CrcError::LengthMismatch`] if `old` and `new` differ in length,
/// [`CrcError::ByteRangeOutOfBounds`] if the region ends past the buffer.
#[inline]
pub fn splice(
    crc: u32,
    buf_len: u64,
    offset: u64,
    old: &[u8],
    new: &[u8],
) -> Result<u32, CrcError> {
    Engine::detect().splice(crc, buf_len, offset, old, new)
}
