//! Htree (dx) indexes: parsing and checking dx roots and dx nodes, their
//! `dx_tail` checksums, and the lookup of the leaf a name hashes to.

use std::vec::Vec;

use crate::crc32c;
use crate::ext4::error::{corrupt, invalid, Ext4Error};
use crate::ext4::layout::{le16, le32, put32};

use super::format::check_block_size;
use super::hash::DxHash;
use super::linear::rec_len_from_disk;

/// The bits of a dx entry's `block` that hold the block number.
const DX_BLOCK_MASK: u32 = 0x0FFF_FFFF;
/// Bytes of a dx entry (hash, block) and of the dx tail.
pub(super) const DX_ENTRY_LEN: usize = 8;
/// Offset of `dx_countlimit` in a dx root: after `.` (12 bytes), `..`
/// (12 bytes, name padded) and `dx_root_info` (8 bytes).
pub(super) const DX_ROOT_COUNT_OFFSET: usize = 32;
/// Offset of `dx_countlimit` in a dx node: after its empty 8-byte record.
pub(super) const DX_NODE_COUNT_OFFSET: usize = 8;
/// `dx_root_info.info_length`.
pub(super) const DX_INFO_LEN: u8 = 8;
/// Deepest index: the dx root plus two levels of nodes (largedir).
pub(super) const DX_MAX_INDIRECT: u8 = 2;

/// One index entry (`struct dx_entry`): names hashing to at least `hash`
/// (up to the next entry's) live under `block`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DxEntry {
    /// The lowest hash under this entry; 0 for the first entry, whose hash
    /// field holds the count and limit. An odd hash marks a collision run
    /// that continues from the previous leaf.
    pub hash: u32,
    /// The directory's logical block (leaf or lower node), with the reserved
    /// top four bits cleared.
    pub block: u32,
}

/// A parsed dx root (block 0 of an htree directory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DxRoot {
    /// The inode of `.` (the directory itself).
    pub dot: u32,
    /// The inode of `..`.
    pub dotdot: u32,
    /// `dx_root_info.hash_version`: 0 legacy, 1 half-MD4, 2 TEA (the
    /// unsigned variants come from `s_flags`; see [`DxHash::for_dir`]).
    pub hash_version: u8,
    /// `dx_root_info.indirect_levels`: levels of dx nodes below the root
    /// (0 to 2).
    pub indirect_levels: u8,
    /// `dx_countlimit.limit`.
    pub limit: u16,
    /// The `count` entries, in hash order.
    pub entries: Vec<DxEntry>,
}

/// A parsed dx node (an interior index block of an htree directory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DxNode {
    /// `dx_countlimit.limit`.
    pub limit: u16,
    /// The `count` entries, in hash order.
    pub entries: Vec<DxEntry>,
}

/// The number of dx entries a root (`root`) or node block holds: what the
/// kernel's `dx_root_limit` / `dx_node_limit` compute, less one entry for
/// the dx tail with metadata_csum (`csum`).
pub fn dx_limit(block_size: usize, root: bool, csum: bool) -> usize {
    let off = if root {
        DX_ROOT_COUNT_OFFSET
    } else {
        DX_NODE_COUNT_OFFSET
    };
    (block_size.saturating_sub(off) / DX_ENTRY_LEN).saturating_sub(usize::from(csum))
}

/// Reads and checks the `dx_countlimit` at `off` and the entries after it.
fn parse_dx_entries(
    block: &[u8],
    off: usize,
    root: bool,
    csum: bool,
) -> Result<(u16, Vec<DxEntry>), Ext4Error> {
    let limit = le16(block, off);
    let count = le16(block, off + 2);
    if usize::from(limit) != dx_limit(block.len(), root, csum) {
        return Err(corrupt(
            "dx_countlimit.limit",
            None,
            u64::from(limit),
            "not the limit this block size and metadata_csum give",
        ));
    }
    if count == 0 || count > limit {
        return Err(corrupt(
            "dx_countlimit.count",
            None,
            u64::from(count),
            "zero or above the limit",
        ));
    }
    let mut entries = Vec::with_capacity(usize::from(count));
    for i in 0..usize::from(count) {
        let at = off + i * DX_ENTRY_LEN;
        let hash = if i == 0 { 0 } else { le32(block, at) };
        if let Some(prev) = entries.last().map(|e: &DxEntry| e.hash) {
            if hash < prev {
                return Err(corrupt(
                    "dx_entry.hash",
                    None,
                    u64::from(hash),
                    "the index's hashes are out of order",
                ));
            }
        }
        entries.push(DxEntry {
            hash,
            block: le32(block, at + 4) & DX_BLOCK_MASK,
        });
    }
    Ok((limit, entries))
}

/// Parses and checks a dx root (block 0 of a directory with [`INDEX_FL`](super::INDEX_FL)):
/// `.` and `..` (whose record spans the rest of the block), `dx_root_info`
/// and the index entries, as the kernel's `dx_probe` checks them. `csum`:
/// the file system has metadata_csum (the limit leaves room for the dx
/// tail). The checksum itself is checked by [`verify_dx`].
///
/// # Errors
/// [`Ext4Error::InvalidArgument`] (`"block_size"`) for a buffer that is not
/// a block; [`Ext4Error::Corrupt`] naming the field (`rec_len`,
/// `dx_root_info.*`, `dx_countlimit.*`, `dx_entry.hash`).
pub fn parse_dx_root(block: &[u8], csum: bool) -> Result<DxRoot, Ext4Error> {
    check_block_size(block.len())?;
    let bs = block.len();
    let dot_len = rec_len_from_disk(le16(block, 4), bs);
    if dot_len != 12 || block[6] != 1 || block[8] != b'.' {
        return Err(corrupt(
            "rec_len",
            None,
            dot_len as u64,
            "a dx root starts with a 12-byte '.' record",
        ));
    }
    let dotdot_len = rec_len_from_disk(le16(block, 16), bs);
    if dotdot_len != bs - 12 || block[18] != 2 || &block[20..22] != b".." {
        return Err(corrupt(
            "rec_len",
            None,
            dotdot_len as u64,
            "a dx root's '..' record spans the rest of the block",
        ));
    }
    let info = 24;
    if le32(block, info) != 0 {
        return Err(corrupt(
            "dx_root_info.reserved_zero",
            None,
            u64::from(le32(block, info)),
            "not zero",
        ));
    }
    let hash_version = block[info + 4];
    if hash_version > 2 && hash_version != 6 {
        return Err(corrupt(
            "dx_root_info.hash_version",
            None,
            u64::from(hash_version),
            "not legacy (0), half_md4 (1), tea (2) or siphash (6)",
        ));
    }
    if block[info + 5] != DX_INFO_LEN {
        return Err(corrupt(
            "dx_root_info.info_length",
            None,
            u64::from(block[info + 5]),
            "not 8",
        ));
    }
    let indirect_levels = block[info + 6];
    if indirect_levels > DX_MAX_INDIRECT {
        return Err(corrupt(
            "dx_root_info.indirect_levels",
            None,
            u64::from(indirect_levels),
            "above 2",
        ));
    }
    if block[info + 7] & 1 != 0 {
        return Err(corrupt(
            "dx_root_info.unused_flags",
            None,
            u64::from(block[info + 7]),
            "an unimplemented flag is set",
        ));
    }
    let (limit, entries) = parse_dx_entries(block, DX_ROOT_COUNT_OFFSET, true, csum)?;
    Ok(DxRoot {
        dot: le32(block, 0),
        dotdot: le32(block, 12),
        hash_version,
        indirect_levels,
        limit,
        entries,
    })
}

/// Parses and checks a dx node (an interior index block): an empty record
/// spanning the block, then the index entries. `csum` as in
/// [`parse_dx_root`].
///
/// # Errors
/// As [`parse_dx_root`].
pub fn parse_dx_node(block: &[u8], csum: bool) -> Result<DxNode, Ext4Error> {
    check_block_size(block.len())?;
    let rec_len = rec_len_from_disk(le16(block, 4), block.len());
    if le32(block, 0) != 0 || rec_len != block.len() || block[6] != 0 {
        return Err(corrupt(
            "rec_len",
            None,
            rec_len as u64,
            "a dx node starts with an empty record spanning the block",
        ));
    }
    let (limit, entries) = parse_dx_entries(block, DX_NODE_COUNT_OFFSET, false, csum)?;
    Ok(DxNode { limit, entries })
}

/// Where a dx block's `dx_countlimit` lies, told apart as the kernel's
/// `get_dx_countlimit` does: a node's first record spans the block; a
/// root's `.` is 12 bytes and its `..` spans the rest.
pub(super) fn dx_count_offset(block: &[u8]) -> Result<usize, Ext4Error> {
    check_block_size(block.len())?;
    let bs = block.len();
    let first = rec_len_from_disk(le16(block, 4), bs);
    if first == bs {
        return Ok(DX_NODE_COUNT_OFFSET);
    }
    if first == 12
        && rec_len_from_disk(le16(block, 16), bs) == bs - 12
        && block[24 + 5] == DX_INFO_LEN
    {
        return Ok(DX_ROOT_COUNT_OFFSET);
    }
    Err(corrupt(
        "rec_len",
        None,
        first as u64,
        "neither a dx root nor a dx node",
    ))
}

/// The checksum a dx root or node's `dx_tail` should hold (the kernel's
/// `ext4_dx_csum`): raw CRC-32C from the directory's
/// [`raw::inode_seed`](crate::ext4::raw::inode_seed) over the block up to the
/// end of its `count` entries (stale entries between `count` and `limit` are
/// not covered), continued over the whole 8-byte tail with its checksum field
/// taken as zero (`dt_reserved`, then four zero bytes). The tail lies right
/// after the `limit` entries.
///
/// Confirmed against dx roots and dx nodes of images made by mkfs.ext4 and
/// indexed by `e2fsck -D` (the crate's `ext4_dir` tests); leaving out the
/// four zero bytes gives a different value.
///
/// # Errors
/// [`Ext4Error::Corrupt`] if the block is neither a dx root nor a dx node,
/// its count exceeds its limit, or no 8-byte tail fits after the limit.
pub fn dx_checksum(seed: u32, block: &[u8]) -> Result<u32, Ext4Error> {
    let (tail, count_end) = dx_tail_at(block)?;
    let c = crc32c::raw(seed, &block[..count_end]);
    let c = crc32c::raw(c, &block[tail..tail + 4]);
    Ok(crc32c::raw(c, &[0; 4]))
}

/// The dx tail's offset and the end of the counted entries.
pub(super) fn dx_tail_at(block: &[u8]) -> Result<(usize, usize), Ext4Error> {
    let off = dx_count_offset(block)?;
    let limit = usize::from(le16(block, off));
    let count = usize::from(le16(block, off + 2));
    if count > limit {
        return Err(corrupt(
            "dx_countlimit.count",
            None,
            count as u64,
            "above the limit",
        ));
    }
    let tail = off + limit * DX_ENTRY_LEN;
    if tail + DX_ENTRY_LEN > block.len() {
        return Err(corrupt(
            "dx_countlimit.limit",
            None,
            limit as u64,
            "no room for the dx tail (no metadata_csum?)",
        ));
    }
    Ok((tail, off + count * DX_ENTRY_LEN))
}

/// Stores [`dx_checksum`] in a dx root or node's `dx_tail`.
pub(super) fn sign_dx(seed: u32, block: &mut [u8]) -> Result<(), Ext4Error> {
    let (tail, _) = dx_tail_at(block)?;
    let c = dx_checksum(seed, block)?;
    put32(block, tail + 4, c);
    Ok(())
}

/// The checksum stored in a dx root or node's `dx_tail` (`dt_checksum`).
///
/// # Errors
/// As [`dx_checksum`].
pub fn stored_dx_checksum(block: &[u8]) -> Result<u32, Ext4Error> {
    let (tail, _) = dx_tail_at(block)?;
    Ok(le32(block, tail + 4))
}

/// Checks a dx root or node's `dx_tail` checksum (the kernel's
/// `ext4_dx_csum_verify`).
///
/// # Errors
/// As [`dx_checksum`]; [`Ext4Error::BadChecksum`] (`"dx block"`) if it does
/// not match.
pub fn verify_dx(seed: u32, block: &[u8]) -> Result<(), Ext4Error> {
    if stored_dx_checksum(block)? == dx_checksum(seed, block)? {
        Ok(())
    } else {
        Err(Ext4Error::BadChecksum {
            what: "dx block",
            group: None,
        })
    }
}

/// The position of the index entry a hash falls under: the last whose hash
/// is at most `hash` (the first entry stands for hash 0), as the kernel's
/// `dx_probe` binary search.
fn dx_pick(entries: &[DxEntry], hash: u32) -> usize {
    entries
        .get(1..)
        .map_or(0, |rest| rest.partition_point(|e| e.hash <= hash))
}

/// Where a name goes in an htree directory: what [`dx_path`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DxPath {
    /// The directory's hash function.
    pub hasher: DxHash,
    /// The name's hash (low bit clear).
    pub hash: u32,
    /// The logical block of the leaf the name hashes to.
    pub leaf: u32,
    /// Each index block from the root down: its logical block (0 for the
    /// root), its entries, its limit, and the position of the entry
    /// followed. The last one points at the leaf.
    pub levels: Vec<DxLevel>,
}

/// One index block on a [`DxPath`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DxLevel {
    /// Its logical block in the directory (0: the dx root).
    pub block: u32,
    /// Its entries.
    pub entries: Vec<DxEntry>,
    /// `dx_countlimit.limit`.
    pub limit: u16,
    /// The position of the entry followed.
    pub at: usize,
}

/// The logical block of the leaf that `name` hashes to in an htree
/// directory (the kernel's `dx_probe`): [`dx_path`]'s leaf.
///
/// # Errors
/// As [`dx_path`].
#[cfg(any(test, feature = "testing"))]
pub fn leaf_for<F>(
    name: &[u8],
    root_block: &[u8],
    s_flags: u32,
    hash_seed: [u8; 16],
    seed: Option<u32>,
    read: F,
) -> Result<u32, Ext4Error>
where
    F: FnMut(u32) -> Result<Vec<u8>, Ext4Error>,
{
    Ok(dx_path(name, root_block, s_flags, hash_seed, seed, read)?.leaf)
}

/// The path from the dx root to the leaf that `name` hashes to (the
/// kernel's `dx_probe`): hashes the name with the root's hash version
/// ([`DxHash::for_dir`] with `s_flags` and `s_hash_seed`) and walks from
/// the dx root in `root_block` down through `indirect_levels` dx nodes,
/// each read by `read(logical_block)`.
///
/// With `seed` (metadata_csum: the directory's
/// [`raw::inode_seed`](crate::ext4::raw::inode_seed)) every dx block's tail
/// checksum is verified on the way. The name, if present, is in the returned
/// leaf, except when a run of names with the same hash spans leaves: the kernel
/// then also searches the following leaves while their index hash (low bit
/// cleared) equals the name's (its `ext4_htree_next_block`).
///
/// # Errors
/// As [`parse_dx_root`], [`parse_dx_node`], [`verify_dx`] and
/// [`DxHash::for_dir`]; whatever `read` returns.
pub fn dx_path<F>(
    name: &[u8],
    root_block: &[u8],
    s_flags: u32,
    hash_seed: [u8; 16],
    seed: Option<u32>,
    mut read: F,
) -> Result<DxPath, Ext4Error>
where
    F: FnMut(u32) -> Result<Vec<u8>, Ext4Error>,
{
    let csum = seed.is_some();
    let root = parse_dx_root(root_block, csum)?;
    if let Some(s) = seed {
        verify_dx(s, root_block)?;
    }
    let hasher = DxHash::for_dir(root.hash_version, s_flags, hash_seed)?;
    let (hash, _) = hasher.hash(name);
    let mut level = DxLevel {
        block: 0,
        at: dx_pick(&root.entries, hash),
        entries: root.entries,
        limit: root.limit,
    };
    let mut levels = Vec::new();
    for _ in 0..root.indirect_levels {
        let child = level.entries[level.at].block;
        let block = read(child)?;
        if let Some(s) = seed {
            verify_dx(s, &block)?;
        }
        if block.len() != root_block.len() {
            return Err(invalid(
                "block_size",
                block.len() as u64,
                "read returned a block of another size than the root's",
            ));
        }
        let node = parse_dx_node(&block, csum)?;
        levels.push(level);
        level = DxLevel {
            block: child,
            at: dx_pick(&node.entries, hash),
            entries: node.entries,
            limit: node.limit,
        };
    }
    let leaf = level.entries[level.at].block;
    levels.push(level);
    Ok(DxPath {
        hasher,
        hash,
        leaf,
        levels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ext4::layout::put16;
    use crate::ext4::namespace::dir::{records, FLAGS_SIGNED_HASH, FT_DIR};

    /// A dx root for 1 KiB blocks with metadata_csum and the given
    /// entries (hash of the first ignored), signed with `seed`.
    fn dx_root(entries: &[(u32, u32)], seed: u32) -> Vec<u8> {
        let mut b = vec![0u8; 1024];
        put32(&mut b, 0, 12);
        put16(&mut b, 4, 12);
        b[6] = 1;
        b[7] = FT_DIR;
        b[8] = b'.';
        put32(&mut b, 12, 2);
        put16(&mut b, 16, 1012);
        b[18] = 2;
        b[19] = FT_DIR;
        b[20..22].copy_from_slice(b"..");
        b[24 + 4] = 1;
        b[24 + 5] = 8;
        put16(&mut b, 32, dx_limit(1024, true, true) as u16);
        put16(&mut b, 34, entries.len() as u16);
        for (i, &(h, blk)) in entries.iter().enumerate() {
            if i > 0 {
                put32(&mut b, 32 + 8 * i, h);
            }
            put32(&mut b, 36 + 8 * i, blk);
        }
        let c = dx_checksum(seed, &b).unwrap();
        put32(&mut b, 1020, c);
        b
    }

    #[test]
    fn dx_root_parse_checks_and_lookup() {
        let seed = 77;
        let b = dx_root(&[(0, 1), (0x4000_0000, 2), (0x8000_0001, 3)], seed);
        let r = parse_dx_root(&b, true).unwrap();
        assert_eq!((r.dot, r.dotdot, r.hash_version, r.limit), (12, 2, 1, 123));
        assert_eq!(
            r.entries[2],
            DxEntry {
                hash: 0x8000_0001,
                block: 3
            }
        );
        verify_dx(seed, &b).unwrap();
        assert_eq!(
            stored_dx_checksum(&b).unwrap(),
            dx_checksum(seed, &b).unwrap()
        );
        assert!(matches!(
            verify_dx(seed + 1, &b),
            Err(Ext4Error::BadChecksum { .. })
        ));
        // Without metadata_csum the limit is one more.
        assert!(parse_dx_root(&b, false).is_err());
        // Not a linear block under csum.
        assert!(records(&b, true).is_err());
        // The lookup picks the last entry whose hash is at most the name's.
        let h = DxHash::for_dir(1, FLAGS_SIGNED_HASH, [0; 16]).unwrap();
        for name in [&b"a"[..], b"bb", b"some-longer-name", b"x"] {
            let (hash, _) = h.hash(name);
            let want = if hash >= 0x8000_0001 {
                3
            } else if hash >= 0x4000_0000 {
                2
            } else {
                1
            };
            let got = leaf_for(name, &b, FLAGS_SIGNED_HASH, [0; 16], Some(seed), |_| {
                panic!("no nodes to read")
            })
            .unwrap();
            assert_eq!(got, want, "{name:?} hash {hash:#x}");
        }
        // Damage, field by field.
        let field = |b: &[u8]| match parse_dx_root(b, true) {
            Err(Ext4Error::Corrupt { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let mut x = b.clone();
        put16(&mut x, 34, 124);
        assert_eq!(field(&x), "dx_countlimit.count");
        put16(&mut x, 34, 0);
        assert_eq!(field(&x), "dx_countlimit.count");
        let mut x = b.clone();
        put16(&mut x, 32, 122);
        assert_eq!(field(&x), "dx_countlimit.limit");
        let x = dx_root(&[(0, 1), (0x8000_0000, 2), (0x4000_0000, 3)], seed);
        assert_eq!(field(&x), "dx_entry.hash");
        let mut x = b.clone();
        x[24 + 5] = 12;
        assert_eq!(field(&x), "dx_root_info.info_length");
        let mut x = b.clone();
        x[24 + 6] = 3;
        assert_eq!(field(&x), "dx_root_info.indirect_levels");
        let mut x = b.clone();
        x[24 + 4] = 4;
        assert_eq!(field(&x), "dx_root_info.hash_version");
        let mut x = b.clone();
        put16(&mut x, 16, 12);
        assert_eq!(field(&x), "rec_len");
        // The top four bits of a dx block number are not part of it.
        let x = dx_root(&[(0, 0xF000_0001)], seed);
        assert_eq!(parse_dx_root(&x, true).unwrap().entries[0].block, 1);
    }
}
