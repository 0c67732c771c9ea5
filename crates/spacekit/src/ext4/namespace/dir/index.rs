//! Turning a linear directory of one full block into an htree, as the
//! kernel's `make_indexed_dir` does when a name no longer fits: block 0
//! becomes the dx root and its entries move to two new leaves, split by
//! hash.

use std::vec;
use std::vec::Vec;

use crate::ext4::error::{corrupt, invalid, Ext4Error};
use crate::ext4::layout::{put16, put32};

use super::format::check_block_size;
use super::grow::{dx_rewrite, split_entries};
use super::hash::DxHash;
use super::htree::{dx_limit, DxEntry, DX_INFO_LEN, DX_ROOT_COUNT_OFFSET};
use super::linear::{add_entry, iter_records, rec_len_to_disk, DirEntry};

/// compat `dir_index` (`EXT4_FEATURE_COMPAT_DIR_INDEX`): directories may
/// have hash indexes, and a linear one that outgrows its first block gets
/// one.
pub const COMPAT_DIR_INDEX: u32 = 0x20;

/// Offset of `dx_root_info` in a dx root, after `.` and `..`.
const DX_INFO_OFFSET: usize = 24;

/// The hash version a new index gets on a file system with these
/// superblock fields (`s_feature_compat`, `s_def_hash_version`), or `None`
/// when a directory stays linear: without `dir_index`, or with a default
/// hash that is not legacy (0), half-MD4 (1) or TEA (2). Only those three
/// are stored in a dx root (the unsigned forms come from `s_flags`; see
/// [`DxHash::for_dir`]); the kernel would copy any other value into the
/// root and then refuse to read it.
pub fn new_index_version(compat: u32, def_hash_version: u8) -> Option<u8> {
    (compat & COMPAT_DIR_INDEX != 0 && def_hash_version <= 2).then_some(def_hash_version)
}

/// A linear block 0 turned into an htree by [`make_indexed`]: the dx root
/// over two leaves, which go to the directory's logical blocks 1
/// ([`Indexed::lower`]) and 2 ([`Indexed::upper`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Indexed {
    /// The new block 0: `.`, `..` spanning the rest of the block,
    /// `dx_root_info`, and the index entries `(0, 1)` and
    /// `(hash, 2)` (signed with metadata_csum).
    pub root: Vec<u8>,
    /// Logical block 1: the entries hashing below [`Indexed::hash`].
    pub lower: Vec<u8>,
    /// Logical block 2: the entries from the split hash up.
    pub upper: Vec<u8>,
    /// The index hash of block 2 (as [`LeafSplit::hash`](super::LeafSplit::hash):
    /// odd when a run of equal hashes continues from block 1).
    pub hash: u32,
    /// The directory's hash function from now on.
    pub hasher: DxHash,
    /// The file system has metadata_csum (the leaves have tails).
    csum: bool,
}

impl Indexed {
    /// Adds `name` → `inode` to the leaf its hash selects (the upper one
    /// from the split hash on, as the kernel's `do_split` hands back),
    /// keeping that leaf's tail. Returns `Ok(false)`, nothing changed, when
    /// it does not fit there.
    ///
    /// # Errors
    /// As [`add_entry`](super::add_entry).
    pub fn add_entry(&mut self, name: &[u8], inode: u32, file_type: u8) -> Result<bool, Ext4Error> {
        let (hash, _) = self.hasher.hash(name);
        let leaf = if hash >= self.hash & !1 {
            &mut self.upper
        } else {
            &mut self.lower
        };
        add_entry(leaf, name, inode, file_type, self.csum)
    }
}

/// Makes the linear block 0 of a one-block directory an htree (the
/// kernel's `make_indexed_dir`): the block must start with a 12-byte `.`
/// record and `..`; every live entry after them is split by
/// `(hash, minor_hash)` into two new leaves as [`split_leaf`](super::split_leaf)
/// splits a full one; block 0 becomes the dx root: `.` (12 bytes), `..`
/// spanning the rest of the block, `dx_root_info` (reserved 0,
/// `hash_version`, info length 8, no indirect levels, no flags) and the
/// count/limit pair over the entries `(0, 1)` and `(split hash, 2)`, the rest
/// zeroed. With `seed` (metadata_csum: the directory's
/// [`raw::inode_seed`](crate::ext4::raw::inode_seed)) the root's dx tail
/// and both leaves' tails are signed.
///
/// `hash_version` is what goes into the root, the default hash of the file
/// system ([`new_index_version`]); `s_flags` and `hash_seed` make the hash
/// ([`DxHash::for_dir`]: unsigned with [`FLAGS_UNSIGNED_HASH`](super::FLAGS_UNSIGNED_HASH)).
/// The caller puts the leaves at logical blocks 1 and 2, sets `INDEX_FL`
/// on the inode, and adds the new name with [`Indexed::add_entry`].
///
/// # Errors
/// [`Ext4Error::InvalidArgument`] (`"block_size"`, `"hash_version"` above 2,
/// `"entries"` for fewer than two entries after `..`);
/// [`Ext4Error::Corrupt`] (`"rec_len"`) when the block does not start with
/// `.` and `..`, and as [`iter_records`] for a bad block.
#[cfg(any(test, feature = "testing"))]
pub fn make_indexed(
    block0: &[u8],
    hash_version: u8,
    s_flags: u32,
    hash_seed: [u8; 16],
    seed: Option<u32>,
) -> Result<Indexed, Ext4Error> {
    index_block0(block0, hash_version, s_flags, hash_seed, seed, None)
}

/// [`make_indexed`] for the entry `name` that did not fit block 0: the
/// leaves are split so that the one `name`'s hash selects has room for it
/// (as [`split_leaf_for`](super::split_leaf_for)), for
/// [`Indexed::add_entry`].
///
/// # Errors
/// As [`make_indexed`].
pub fn make_indexed_for(
    block0: &[u8],
    hash_version: u8,
    s_flags: u32,
    hash_seed: [u8; 16],
    seed: Option<u32>,
    name: &[u8],
) -> Result<Indexed, Ext4Error> {
    index_block0(block0, hash_version, s_flags, hash_seed, seed, Some(name))
}

/// [`make_indexed`], with the name to make room for if any.
fn index_block0(
    block0: &[u8],
    hash_version: u8,
    s_flags: u32,
    hash_seed: [u8; 16],
    seed: Option<u32>,
    incoming: Option<&[u8]>,
) -> Result<Indexed, Ext4Error> {
    check_block_size(block0.len())?;
    if hash_version > 2 {
        return Err(invalid(
            "hash_version",
            hash_version.into(),
            "a new index uses legacy (0), half_md4 (1) or tea (2)",
        ));
    }
    let bs = block0.len();
    let csum = seed.is_some();
    let mut dots = Vec::with_capacity(2);
    let mut moved: Vec<DirEntry> = Vec::new();
    for r in iter_records(block0, csum) {
        let r = r?;
        if dots.len() < 2 {
            let (offset, name): (usize, &[u8]) = if dots.is_empty() {
                (0, b".")
            } else {
                (12, b"..")
            };
            if r.offset != offset || r.name(block0) != name || (offset == 0 && r.rec_len != 12) {
                return Err(corrupt(
                    "rec_len",
                    None,
                    r.rec_len as u64,
                    "block 0 of a directory starts with a 12-byte '.' record, then '..'",
                ));
            }
            dots.push((r.inode, r.file_type));
        } else if r.inode != 0 {
            moved.push(DirEntry {
                inode: r.inode,
                name: r.name(block0).to_vec(),
                file_type: r.file_type,
            });
        }
    }
    let [(dot, dot_ft), (dotdot, dotdot_ft)] = dots[..] else {
        return Err(corrupt(
            "rec_len",
            None,
            0,
            "block 0 of a directory starts with '.' and '..'",
        ));
    };
    let hasher = DxHash::for_dir(hash_version, s_flags, hash_seed)?;
    let split = split_entries(moved, bs, &hasher, seed, incoming)?;

    let mut root = vec![0u8; bs];
    put32(&mut root, 0, dot);
    put16(&mut root, 4, 12);
    root[6] = 1;
    root[7] = dot_ft;
    root[8] = b'.';
    put32(&mut root, 12, dotdot);
    put16(&mut root, 16, rec_len_to_disk(bs - 12, bs)?);
    root[18] = 2;
    root[19] = dotdot_ft;
    root[20..22].copy_from_slice(b"..");
    // dx_root_info: reserved_zero (4 bytes, already 0), hash_version,
    // info_length, indirect_levels 0, unused_flags 0.
    root[DX_INFO_OFFSET + 4] = hash_version;
    root[DX_INFO_OFFSET + 5] = DX_INFO_LEN;
    put16(
        &mut root,
        DX_ROOT_COUNT_OFFSET,
        dx_limit(bs, true, csum) as u16,
    );
    let entries = [
        DxEntry { hash: 0, block: 1 },
        DxEntry {
            hash: split.hash,
            block: 2,
        },
    ];
    dx_rewrite(&mut root, &entries, seed)?;
    Ok(Indexed {
        root,
        lower: split.lower,
        upper: split.upper,
        hash: split.hash,
        hasher,
        csum,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ext4::layout::le16;
    use crate::ext4::namespace::dir::{
        add_entry, entries, init_block, leaf_for, parse_dx_root, sign_tail, verify_dx, verify_tail,
        FLAGS_UNSIGNED_HASH, FT_DIR, FT_REG_FILE,
    };
    use std::format;
    use std::vec::Vec;

    /// A new directory's block 0: `.` (inode 12) and `..` (inode 2), as
    /// mkdir writes it.
    fn dots(bs: usize, seed: Option<u32>) -> Vec<u8> {
        let mut b = init_block(bs, seed).unwrap();
        let end = bs - if seed.is_some() { 12 } else { 0 };
        for (at, len, ino, name) in [(0, 12, 12, &b"."[..]), (12, end - 12, 2, b"..")] {
            put32(&mut b, at, ino);
            put16(&mut b, at + 4, rec_len_to_disk(len, bs).unwrap());
            b[at + 6] = name.len() as u8;
            b[at + 7] = FT_DIR;
            b[at + 8..at + 8 + name.len()].copy_from_slice(name);
        }
        if let Some(s) = seed {
            sign_tail(s, &mut b).unwrap();
        }
        b
    }

    /// [`dots`], then names until one of `len` bytes no longer fits;
    /// returns the block and the names.
    fn full_block(bs: usize, seed: Option<u32>, len: usize) -> (Vec<u8>, Vec<Vec<u8>>) {
        let csum = seed.is_some();
        let mut b = dots(bs, seed);
        let mut names = Vec::new();
        for i in 0u32.. {
            let mut name = format!("n{i:05}-").into_bytes();
            name.resize(len.max(name.len()).min(254), b'a' + (i % 26) as u8);
            if i % 3 == 0 {
                name.push(0xE9); // a high byte: signed and unsigned differ
            }
            if !add_entry(&mut b, &name, 100 + i, FT_REG_FILE, csum).unwrap() {
                break;
            }
            names.push(name);
        }
        (b, names)
    }

    #[test]
    fn a_full_block_becomes_a_root_over_two_leaves() {
        let hash_seed = [0x5A; 16];
        for (bs, seed, len, version, s_flags) in [
            (1024, Some(0x1234_5678), 10, 1, 0),
            (1024, None, 255, 2, FLAGS_UNSIGNED_HASH),
            (4096, Some(7), 40, 0, FLAGS_UNSIGNED_HASH),
            (65536, Some(9), 3, 1, 1),
            (65536, None, 200, 2, 0),
        ] {
            let csum = seed.is_some();
            let (b0, names) = full_block(bs, seed, len);
            let mut ix = make_indexed(&b0, version, s_flags, hash_seed, seed).unwrap();
            assert_eq!(ix.hasher.unsigned, s_flags & FLAGS_UNSIGNED_HASH != 0);
            let r = parse_dx_root(&ix.root, csum).unwrap();
            assert_eq!((r.dot, r.dotdot, r.hash_version), (12, 2, version));
            assert_eq!(r.indirect_levels, 0);
            assert_eq!(usize::from(r.limit), dx_limit(bs, true, csum));
            assert_eq!(
                r.entries,
                [
                    DxEntry { hash: 0, block: 1 },
                    DxEntry {
                        hash: ix.hash,
                        block: 2
                    }
                ]
            );
            assert_eq!(ix.root[DX_INFO_OFFSET + 5], 8);
            assert_eq!(ix.root[7], FT_DIR);
            assert_eq!(le16(&ix.root, 4), 12);
            if let Some(s) = seed {
                verify_dx(s, &ix.root).unwrap();
                verify_tail(s, &ix.lower).unwrap();
                verify_tail(s, &ix.upper).unwrap();
            }
            // Nothing of the old entries is left in the root past its index.
            let end = DX_ROOT_COUNT_OFFSET + 16;
            let tail = bs - if csum { 8 } else { 0 };
            assert!(ix.root[end..tail].iter().all(|&x| x == 0));
            // Every name is in the leaf the index gives it.
            let leaves = [ix.lower.clone(), ix.upper.clone()];
            let mut all = Vec::new();
            for (i, leaf) in leaves.iter().enumerate() {
                for e in entries(leaf, csum).unwrap() {
                    let l = leaf_for(&e.name, &ix.root, s_flags, hash_seed, seed, |_| {
                        panic!("no nodes")
                    })
                    .unwrap();
                    // A run of equal hashes may continue into block 2.
                    assert!(l as usize == i + 1 || ix.hash & 1 == 1, "{:?}", e.name);
                    all.push(e.name);
                }
            }
            all.sort();
            let mut want = names.clone();
            want.sort();
            assert_eq!(all, want);
            // The new name goes where the index sends it.
            let name = b"the-new-name";
            assert!(ix.add_entry(name, 999, FT_REG_FILE).unwrap());
            let l = leaf_for(name, &ix.root, s_flags, hash_seed, seed, |_| {
                panic!("no nodes")
            })
            .unwrap();
            let leaf = if l == 1 { &ix.lower } else { &ix.upper };
            assert!(entries(leaf, csum).unwrap().iter().any(|e| e.name == name));
            if let Some(s) = seed {
                verify_tail(s, leaf).unwrap();
            }
        }
    }

    #[test]
    fn refused_blocks_and_versions() {
        let (b0, _) = full_block(1024, None, 20);
        assert!(matches!(
            make_indexed(&b0, 3, 0, [0; 16], None),
            Err(Ext4Error::InvalidArgument {
                what: "hash_version",
                ..
            })
        ));
        // `.` not first.
        let mut b = dots(1024, None);
        b[8] = b'x';
        assert!(matches!(
            make_indexed(&b, 1, 0, [0; 16], None),
            Err(Ext4Error::Corrupt {
                field: "rec_len",
                ..
            })
        ));
        // Nothing to split.
        let mut b = dots(1024, None);
        assert!(add_entry(&mut b, b"only", 13, FT_REG_FILE, false).unwrap());
        assert!(matches!(
            make_indexed(&b, 1, 0, [0; 16], None),
            Err(Ext4Error::InvalidArgument {
                what: "entries",
                ..
            })
        ));
        assert_eq!(new_index_version(COMPAT_DIR_INDEX | 0x4, 2), Some(2));
        assert_eq!(new_index_version(0x4, 1), None);
        assert_eq!(new_index_version(COMPAT_DIR_INDEX, 3), None);
    }
}
