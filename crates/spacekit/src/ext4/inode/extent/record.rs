//! The on-disk encoding of extent trees: extents, node headers, index
//! entries, and the tail checksum of a tree block.

use crate::crc32c;
use crate::ext4::error::{corrupt, Ext4Error};
use crate::ext4::layout::{le16, le32, put16, put32};

/// `eh_magic`: 0xF30A.
pub const EXTENT_MAGIC: u16 = 0xF30A;
/// Size of the in-inode root (`i_block`): a header and 4 entries.
pub const ROOT_SIZE: usize = 60;
/// The deepest tree ext4 allows (`EXT4_MAX_EXTENT_DEPTH`).
pub const MAX_DEPTH: u16 = 5;
/// The most blocks an initialised extent holds (`EXT_INIT_MAX_LEN`).
pub const MAX_INIT_LEN: u16 = 32768;
/// The most blocks an unwritten extent holds (`EXT_UNWRITTEN_MAX_LEN`).
pub const MAX_UNWRITTEN_LEN: u16 = 32767;

/// Size of a header and of an entry.
pub(super) const HDR: usize = 12;
pub(super) const ENTRY: usize = 12;
/// Entries in the in-inode root.
pub(super) const ROOT_MAX: u16 = 4;

/// One mapping of a leaf: `len` file blocks from `logical` on are stored at
/// `physical` on (`struct ext4_extent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Extent {
    /// First logical (file) block, `ee_block`.
    pub logical: u32,
    /// First physical block, 48 bits (`ee_start_hi:ee_start_lo`).
    pub physical: u64,
    /// Blocks, 1 to 32,768 (to 32,767 if unwritten).
    pub len: u16,
    /// Allocated but not written (reads return zeros): `ee_len > 32768` on
    /// disk.
    pub unwritten: bool,
}

impl Extent {
    /// One past the last logical block.
    pub fn end(&self) -> u64 {
        u64::from(self.logical) + u64::from(self.len)
    }

    /// One past the last physical block.
    pub fn physical_end(&self) -> u64 {
        self.physical + u64::from(self.len)
    }

    /// The longest extent of this kind: 32,767 blocks if unwritten, else
    /// 32,768.
    pub fn max_len(unwritten: bool) -> u16 {
        if unwritten {
            MAX_UNWRITTEN_LEN
        } else {
            MAX_INIT_LEN
        }
    }

    /// Whether `next` continues `self` (the kernel's
    /// `ext4_can_extents_be_merged`): logically and physically adjacent, the
    /// same kind (written or unwritten), and the sum no longer than
    /// [`Extent::max_len`].
    pub fn can_merge(&self, next: &Extent) -> bool {
        self.end() == u64::from(next.logical)
            && self.physical_end() == next.physical
            && self.unwritten == next.unwritten
            && u32::from(self.len) + u32::from(next.len)
                <= u32::from(Extent::max_len(self.unwritten))
    }

    /// The 12 on-disk bytes.
    pub fn to_bytes(&self) -> [u8; 12] {
        let mut b = [0u8; 12];
        let len = if self.unwritten {
            self.len.wrapping_add(MAX_INIT_LEN)
        } else {
            self.len
        };
        put32(&mut b, 0, self.logical);
        put16(&mut b, 4, len);
        put16(&mut b, 6, (self.physical >> 32) as u16);
        put32(&mut b, 8, self.physical as u32);
        b
    }

    /// Parses and checks a leaf entry.
    ///
    /// # Errors
    /// [`Ext4Error::Corrupt`] for `ee_len` 0, `ee_start` 0, or a logical
    /// range past block 2^32.
    pub fn from_bytes(b: &[u8; 12]) -> Result<Extent, Ext4Error> {
        let logical = le32(b, 0);
        let raw_len = le16(b, 4);
        let physical = (u64::from(le16(b, 6)) << 32) | u64::from(le32(b, 8));
        let (len, unwritten) = if raw_len > MAX_INIT_LEN {
            (raw_len - MAX_INIT_LEN, true)
        } else {
            (raw_len, false)
        };
        if len == 0 {
            return Err(corrupt("ee_len", None, raw_len.into(), "an empty extent"));
        }
        if physical == 0 {
            return Err(corrupt("ee_start", None, 0, "an extent at block 0"));
        }
        let e = Extent {
            logical,
            physical,
            len,
            unwritten,
        };
        if e.end() > 1 << 32 {
            return Err(corrupt(
                "ee_block",
                None,
                logical.into(),
                "the extent runs past logical block 2^32",
            ));
        }
        if e.physical_end() > 1 << 48 {
            return Err(corrupt(
                "ee_start",
                None,
                physical,
                "the extent runs past physical block 2^48",
            ));
        }
        Ok(e)
    }
}

/// An extent node's header (`struct ext4_extent_header`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtentHeader {
    /// `eh_entries`: entries in use.
    pub entries: u16,
    /// `eh_max`: room for entries.
    pub max: u16,
    /// `eh_depth`: 0 for a leaf, else the levels below.
    pub depth: u16,
    /// `eh_generation` (unused by ext4; kept as found).
    pub generation: u32,
}

impl ExtentHeader {
    /// Parses and checks the header at the start of `node`, a root
    /// (`node.len() == 60`) or a tree block (`node.len()` the block size).
    ///
    /// Checks (as e2fsprogs' `ext2fs_extent_header_verify`): the magic,
    /// `eh_max` no more than the entries that fit (4 in the root,
    /// (block size - 12) / 12 in a block) and at most 2 fewer, `eh_entries <=
    /// eh_max`, `eh_depth <= 5`.
    ///
    /// # Errors
    /// [`Ext4Error::Corrupt`] naming the field.
    pub fn parse(node: &[u8]) -> Result<ExtentHeader, Ext4Error> {
        if node.len() < HDR + ENTRY {
            return Err(corrupt(
                "eh_max",
                None,
                node.len() as u64,
                "no room for an extent node",
            ));
        }
        let magic = le16(node, 0);
        if magic != EXTENT_MAGIC {
            return Err(corrupt("eh_magic", None, magic.into(), "not 0xF30A"));
        }
        let h = ExtentHeader {
            entries: le16(node, 2),
            max: le16(node, 4),
            depth: le16(node, 6),
            generation: le32(node, 8),
        };
        let space = node_capacity(node.len());
        if h.max > space || h.max < space.saturating_sub(2) || h.max == 0 {
            return Err(corrupt(
                "eh_max",
                None,
                h.max.into(),
                "does not match the room in the node",
            ));
        }
        if h.entries > h.max {
            return Err(corrupt(
                "eh_entries",
                None,
                h.entries.into(),
                "more entries than eh_max",
            ));
        }
        if h.depth > MAX_DEPTH {
            return Err(corrupt("eh_depth", None, h.depth.into(), "deeper than 5"));
        }
        Ok(h)
    }

    pub(super) fn write(&self, node: &mut [u8]) {
        put16(node, 0, EXTENT_MAGIC);
        put16(node, 2, self.entries);
        put16(node, 4, self.max);
        put16(node, 6, self.depth);
        put32(node, 8, self.generation);
    }
}

/// Entries that fit in a node of `len` bytes: 4 for the 60-byte root,
/// (block size - 12) / 12 for a block (the kernel's `ext4_ext_space_block`;
/// the 4-byte tail always fits after them).
pub fn node_capacity(len: usize) -> u16 {
    let n = len.saturating_sub(HDR) / ENTRY;
    u16::try_from(n).unwrap_or(u16::MAX)
}

/// The tail checksum of an extent block as it should be: raw CRC-32C from
/// `seed` (the inode's `seed_i`) over `block[0 .. 12 + 12 * eh_max]`
/// (the kernel's `ext4_extent_block_csum`). Uses the `eh_max` found in the
/// block; `None` if the block is too short for it and its tail.
pub fn block_checksum(seed: u32, block: &[u8]) -> Option<u32> {
    let end = HDR + ENTRY * usize::from(le16(block, 4));
    if end + 4 > block.len() {
        return None;
    }
    Some(crc32c::raw(seed, &block[..end]))
}

/// The tail checksum stored in an extent block, if the block has room for
/// one after its `eh_max` entries.
pub fn stored_checksum(block: &[u8]) -> Option<u32> {
    let end = HDR + ENTRY * usize::from(le16(block, 4));
    if end + 4 > block.len() {
        return None;
    }
    Some(le32(block, end))
}

/// Parses `block` as an extent tree block: checks the header
/// ([`ExtentHeader::parse`]) and, with a seed, the tail checksum.
///
/// # Errors
/// [`Ext4Error::Corrupt`] for a bad header; [`Ext4Error::BadChecksum`]
/// (`"extent block"`) for a wrong tail checksum.
pub fn verify_block(block: &[u8], seed: Option<u32>) -> Result<ExtentHeader, Ext4Error> {
    let h = ExtentHeader::parse(block)?;
    if let Some(seed) = seed {
        if block_checksum(seed, block) != stored_checksum(block) {
            return Err(Ext4Error::BadChecksum {
                what: "extent block",
                group: None,
            });
        }
    }
    Ok(h)
}

pub(super) fn idx_child(b: &[u8; 12]) -> Result<u64, Ext4Error> {
    let child = (u64::from(le16(b, 8)) << 32) | u64::from(le32(b, 4));
    if child == 0 {
        return Err(corrupt("ei_leaf", None, 0, "an index pointing at block 0"));
    }
    Ok(child)
}

pub(super) fn entry_bytes(buf: &[u8], i: usize) -> [u8; 12] {
    let mut b = [0u8; 12];
    let off = HDR + ENTRY * i;
    if let Some(s) = buf.get(off..off + ENTRY) {
        b.copy_from_slice(s);
    }
    b
}

pub(super) fn index_bytes(key: u32, child: u64) -> [u8; 12] {
    let mut b = [0u8; 12];
    put32(&mut b, 0, key);
    put32(&mut b, 4, child as u32);
    put16(&mut b, 8, (child >> 32) as u16);
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ext4::extent::{depth, init_root};

    fn ext(logical: u32, physical: u64, len: u16) -> Extent {
        Extent {
            logical,
            physical,
            len,
            unwritten: false,
        }
    }

    #[test]
    fn encoding_round_trips() {
        for e in [
            ext(0, 1, 1),
            ext(7, 0xABCD_1234_5678, 32768),
            Extent {
                logical: 9,
                physical: 3,
                len: 32767,
                unwritten: true,
            },
        ] {
            assert_eq!(Extent::from_bytes(&e.to_bytes()).unwrap(), e);
        }
        let b = ext(0, 1, 1).to_bytes();
        let mut z = b;
        put16(&mut z, 4, 0);
        assert!(matches!(
            Extent::from_bytes(&z),
            Err(Ext4Error::Corrupt {
                field: "ee_len",
                ..
            })
        ));
    }

    #[test]
    fn headers_are_checked() {
        let mut root = [0u8; 60];
        init_root(&mut root);
        assert_eq!(depth(&root).unwrap(), 0);
        let mut bad = root;
        bad[0] = 0;
        assert!(matches!(
            ExtentHeader::parse(&bad),
            Err(Ext4Error::Corrupt {
                field: "eh_magic",
                ..
            })
        ));
        let mut bad = root;
        put16(&mut bad, 4, 5);
        assert!(matches!(
            ExtentHeader::parse(&bad),
            Err(Ext4Error::Corrupt {
                field: "eh_max",
                ..
            })
        ));
        let mut bad = root;
        put16(&mut bad, 2, 5);
        assert!(ExtentHeader::parse(&bad).is_err());
        let mut bad = root;
        put16(&mut bad, 6, 6);
        assert!(matches!(
            ExtentHeader::parse(&bad),
            Err(Ext4Error::Corrupt {
                field: "eh_depth",
                ..
            })
        ));
    }
}
