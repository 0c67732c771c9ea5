//! The directory hashes of htree indexes: legacy, half-MD4 and TEA, each
//! with name bytes as signed or unsigned chars (e2fsprogs'
//! `ext2fs_dirhash`).

use crate::ext4::error::{invalid, Ext4Error};

use super::format::FLAGS_UNSIGNED_HASH;

/// A directory hash function (`DX_HASH_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HashAlg {
    /// The original ext3 hash (`dx_hack_hash`).
    Legacy,
    /// Half-MD4 over 32-byte pieces of the name (the default).
    HalfMd4,
    /// TEA over 16-byte pieces of the name.
    Tea,
}

/// A directory hash with its parameters: which function, whether name bytes
/// are unsigned chars, and the seed (`s_hash_seed`).
///
/// Written from the ext4 on-disk format documentation's description of the
/// hashes (e2fsprogs' `ext2fs_dirhash`); checked against `debugfs dx_hash`.
/// Casefolded directories hash a normalised name and SipHash (version 6)
/// directories are not handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DxHash {
    /// The function.
    pub alg: HashAlg,
    /// Name bytes are taken as unsigned chars (the `*_unsigned` versions,
    /// 3 to 5); else as signed chars (as x86 `char`).
    pub unsigned: bool,
    /// The seed as four little-endian words of `s_hash_seed`; all zero means
    /// the default seed (the MD4 initial state).
    pub seed: [u32; 4],
}

impl DxHash {
    /// The hash with version number `version` (`DX_HASH_*`: 0 legacy, 1
    /// half_md4, 2 tea, 3 to 5 their unsigned forms) and the 16 bytes of
    /// `s_hash_seed` (offset 0xEC of the superblock, as `dumpe2fs` prints
    /// the UUID "Directory Hash Seed").
    ///
    /// # Errors
    /// [`Ext4Error::Unsupported`] (`"siphash"`) for version 6;
    /// [`Ext4Error::InvalidArgument`] (`"hash_version"`) above 6.
    pub fn new(version: u8, seed: [u8; 16]) -> Result<DxHash, Ext4Error> {
        let alg = match version % 3 {
            0 => HashAlg::Legacy,
            1 => HashAlg::HalfMd4,
            _ => HashAlg::Tea,
        };
        if version == 6 {
            return Err(Ext4Error::Unsupported { feature: "siphash" });
        }
        if version > 6 {
            return Err(invalid(
                "hash_version",
                u64::from(version),
                "not a directory hash version",
            ));
        }
        let mut words = [0u32; 4];
        for (w, b) in words.iter_mut().zip(seed.chunks_exact(4)) {
            *w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        Ok(DxHash {
            alg,
            unsigned: version >= 3,
            seed: words,
        })
    }

    /// The hash a directory's index uses: the dx root's `hash_version`,
    /// made unsigned when `s_flags` (superblock offset 0x160) has
    /// [`FLAGS_UNSIGNED_HASH`], as the kernel's `s_hash_unsigned` does
    /// (neither flag set counts as signed).
    ///
    /// # Errors
    /// As [`DxHash::new`].
    pub fn for_dir(
        root_hash_version: u8,
        s_flags: u32,
        seed: [u8; 16],
    ) -> Result<DxHash, Ext4Error> {
        let mut v = root_hash_version;
        if v <= 2 && s_flags & FLAGS_UNSIGNED_HASH != 0 {
            v += 3;
        }
        DxHash::new(v, seed)
    }

    /// The `(hash, minor_hash)` of `name`: `hash` has its low bit clear
    /// (the index keeps that bit for collision runs). Legacy has no minor
    /// hash (0).
    pub fn hash(&self, name: &[u8]) -> (u32, u32) {
        let mut buf = [0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476];
        if self.seed != [0; 4] {
            buf = self.seed;
        }
        let (hash, minor) = match self.alg {
            HashAlg::Legacy => (legacy_hash(name, self.unsigned), 0),
            HashAlg::HalfMd4 => {
                for (i, piece) in name.chunks(32).enumerate() {
                    let input: [u32; 8] = words_of(piece, name.len() - 32 * i, self.unsigned);
                    half_md4(&mut buf, &input);
                }
                (buf[1], buf[2])
            }
            HashAlg::Tea => {
                for (i, piece) in name.chunks(16).enumerate() {
                    let input: [u32; 4] = words_of(piece, name.len() - 16 * i, self.unsigned);
                    tea(&mut buf, &input);
                }
                (buf[0], buf[1])
            }
        };
        (hash & !1, minor)
    }
}

/// A name byte as the C `char` the hashes read: sign-extended unless
/// `unsigned`.
fn char_of(b: u8, unsigned: bool) -> u32 {
    if unsigned {
        u32::from(b)
    } else {
        i32::from(b as i8) as u32
    }
}

/// Packs the bytes of a piece of the name into `N` words (e2fsprogs'
/// `str2hashbuf`): big-endian-ish accumulation of the bytes, four to a word,
/// with the remaining length (`left`, bytes from the piece's start to the
/// name's end) as padding.
fn words_of<const N: usize>(piece: &[u8], left: usize, unsigned: bool) -> [u32; N] {
    let mut pad = (left as u32) | ((left as u32) << 8);
    pad |= pad << 16;
    let mut out = [pad; N];
    let mut val = pad;
    let mut i = 0;
    for (k, &b) in piece.iter().take(N * 4).enumerate() {
        val = char_of(b, unsigned).wrapping_add(val << 8);
        if k % 4 == 3 {
            out[i] = val;
            i += 1;
            val = pad;
        }
    }
    if i < N && !piece.len().is_multiple_of(4) {
        out[i] = val;
    }
    out
}

/// The legacy hash (`dx_hack_hash`).
fn legacy_hash(name: &[u8], unsigned: bool) -> u32 {
    let (mut h0, mut h1) = (0x12A3_FE2Du32, 0x37AB_E8F9u32);
    for &b in name {
        let c = char_of(b, unsigned);
        let mut h = h1.wrapping_add(h0 ^ c.wrapping_mul(7_152_373));
        if h & 0x8000_0000 != 0 {
            h = h.wrapping_sub(0x7FFF_FFFF);
        }
        h1 = h0;
        h0 = h;
    }
    h0 << 1
}

/// One TEA transform of `buf` by 16 bytes of input (16 rounds).
fn tea(buf: &mut [u32; 4], input: &[u32; 4]) {
    const DELTA: u32 = 0x9E37_79B9;
    let (mut b0, mut b1) = (buf[0], buf[1]);
    let [a, b, c, d] = *input;
    let mut sum = 0u32;
    for _ in 0..16 {
        sum = sum.wrapping_add(DELTA);
        b0 = b0.wrapping_add(
            (b1 << 4).wrapping_add(a) ^ b1.wrapping_add(sum) ^ (b1 >> 5).wrapping_add(b),
        );
        b1 = b1.wrapping_add(
            (b0 << 4).wrapping_add(c) ^ b0.wrapping_add(sum) ^ (b0 >> 5).wrapping_add(d),
        );
    }
    buf[0] = buf[0].wrapping_add(b0);
    buf[1] = buf[1].wrapping_add(b1);
}

/// The half-MD4 transform of `buf` by 32 bytes of input: MD4's three rounds
/// over eight words, each round with its own shifts and constant.
fn half_md4(buf: &mut [u32; 4], x: &[u32; 8]) {
    const K2: u32 = 0x5A82_7999;
    const K3: u32 = 0x6ED9_EBA1;
    let f = |x: u32, y: u32, z: u32| z ^ (x & (y ^ z));
    let g = |x: u32, y: u32, z: u32| (x & y).wrapping_add((x ^ y) & z);
    let h = |x: u32, y: u32, z: u32| x ^ y ^ z;
    let [mut a, mut b, mut c, mut d] = *buf;
    // Each step: a = (a + fun(b, c, d) + word + k) <<< s, with the four
    // registers rotating roles.
    macro_rules! step {
        ($fun:expr, $a:ident, $b:ident, $c:ident, $d:ident, $w:expr, $k:expr, $s:expr) => {
            $a = $a
                .wrapping_add($fun($b, $c, $d))
                .wrapping_add($w.wrapping_add($k))
                .rotate_left($s);
        };
    }
    for &i in &[0usize, 4] {
        step!(f, a, b, c, d, x[i], 0u32, 3);
        step!(f, d, a, b, c, x[i + 1], 0u32, 7);
        step!(f, c, d, a, b, x[i + 2], 0u32, 11);
        step!(f, b, c, d, a, x[i + 3], 0u32, 19);
    }
    for &i in &[1usize, 0] {
        step!(g, a, b, c, d, x[i], K2, 3);
        step!(g, d, a, b, c, x[i + 2], K2, 5);
        step!(g, c, d, a, b, x[i + 4], K2, 9);
        step!(g, b, c, d, a, x[i + 6], K2, 13);
    }
    for &(i0, i1, i2, i3) in &[(3usize, 7usize, 2usize, 6usize), (1, 5, 0, 4)] {
        step!(h, a, b, c, d, x[i0], K3, 3);
        step!(h, d, a, b, c, x[i1], K3, 9);
        step!(h, c, d, a, b, x[i2], K3, 11);
        step!(h, b, c, d, a, x[i3], K3, 15);
    }
    buf[0] = buf[0].wrapping_add(a);
    buf[1] = buf[1].wrapping_add(b);
    buf[2] = buf[2].wrapping_add(c);
    buf[3] = buf[3].wrapping_add(d);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_variants_differ_only_on_high_bytes() {
        for v in 0..3u8 {
            let s = DxHash::new(v, [0; 16]).unwrap();
            let u = DxHash::new(v + 3, [0; 16]).unwrap();
            assert!(u.unsigned && !s.unsigned);
            assert_eq!(s.hash(b"plain-ascii"), u.hash(b"plain-ascii"));
            assert_ne!(
                s.hash("caf\u{e9}".as_bytes()),
                u.hash("caf\u{e9}".as_bytes())
            );
            assert_eq!(s.hash(b"x").0 & 1, 0);
        }
        assert!(
            DxHash::for_dir(2, FLAGS_UNSIGNED_HASH, [0; 16])
                .unwrap()
                .unsigned
        );
        assert!(matches!(
            DxHash::new(7, [0; 16]),
            Err(Ext4Error::InvalidArgument {
                what: "hash_version",
                ..
            })
        ));
    }

    #[test]
    fn hash_known_values() {
        // debugfs 1.47: `dx_hash -h half_md4 -s 333f066d-57d0-4783-a949-d95b2f797695 n5_xx`
        let seed = [
            0x33, 0x3f, 0x06, 0x6d, 0x57, 0xd0, 0x47, 0x83, 0xa9, 0x49, 0xd9, 0x5b, 0x2f, 0x79,
            0x76, 0x95,
        ];
        let h = DxHash::new(1, seed).unwrap();
        assert_eq!(h.hash(b"n5_xx"), (0x466e_c0b2, 0x8764_9ae1));
    }
}
