//! Growing an htree directory: a full leaf splits in two, and index
//! entries go into dx roots and dx nodes, which are rewritten, created or
//! moved a level down when they fill up (the kernel's `ext4_dx_add_entry`).

use std::vec;
use std::vec::Vec;

use crate::ext4::error::{corrupt, invalid, Ext4Error};
use crate::ext4::layout::{le16, le32, put16, put32};

use super::format::{check_block_size, TAIL_LEN};
use super::hash::DxHash;
use super::htree::{
    dx_count_offset, dx_limit, parse_dx_root, sign_dx, DxEntry, DX_ENTRY_LEN, DX_MAX_INDIRECT,
    DX_NODE_COUNT_OFFSET,
};
use super::linear::{entries, entry_size, rec_len_to_disk, write_entry, DirEntry};
use super::tail::sign_tail;

/// A leaf split in two by [`split_leaf`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeafSplit {
    /// The old leaf's new contents: the names hashing below [`LeafSplit::hash`].
    pub lower: Vec<u8>,
    /// The new leaf: the names from the split hash up.
    pub upper: Vec<u8>,
    /// The index hash of the new leaf: the lowest hash in `upper`, plus 1
    /// when names with that hash remain in `lower` too (a collision run
    /// continued across the two leaves).
    pub hash: u32,
}

/// Splits a full htree leaf (the kernel's `do_split`): its live entries are
/// sorted by `(hash, minor_hash)` and the top ones move to a new block, each
/// one that lies more than half in the upper half of the block's bytes (so
/// both halves keep about half the block free); both blocks are written
/// packed (each record its [`entry_size`], the last one taking the rest) and,
/// with `seed` (metadata_csum: the directory's
/// [`raw::inode_seed`](crate::ext4::raw::inode_seed)), signed. Names keep
/// their inode and file type.
///
/// # Errors
/// As [`entries`] for a bad block; [`Ext4Error::InvalidArgument`]
/// (`"entries"`) for a leaf with fewer than two entries (nothing to split).
#[cfg(any(test, feature = "testing"))]
pub fn split_leaf(leaf: &[u8], hasher: &DxHash, seed: Option<u32>) -> Result<LeafSplit, Ext4Error> {
    split_entries(
        entries(leaf, seed.is_some())?,
        leaf.len(),
        hasher,
        seed,
        None,
    )
}

/// [`split_leaf`] for the entry `name` that did not fit: when the usual
/// split would leave the half that `name`'s hash selects without room for
/// it (entries of very different lengths, long names in small blocks), the
/// nearest split point that has room for it is taken instead, so that
/// [`add_entry`](super::add_entry) into the half that
/// `hash >= LeafSplit::hash & !1` selects succeeds.
///
/// # Errors
/// As [`split_leaf`].
pub fn split_leaf_for(
    leaf: &[u8],
    hasher: &DxHash,
    seed: Option<u32>,
    name: &[u8],
) -> Result<LeafSplit, Ext4Error> {
    let list = entries(leaf, seed.is_some())?;
    split_entries(list, leaf.len(), hasher, seed, Some(name))
}

/// [`split_leaf`] over the live entries of a leaf of `block_size` bytes
/// (also the entries a linear block 0 hands over when it becomes a dx root:
/// [`make_indexed`](super::make_indexed)); with `incoming`, a split that
/// leaves room for that name in its half ([`split_leaf_for`]).
pub(super) fn split_entries(
    list: Vec<DirEntry>,
    block_size: usize,
    hasher: &DxHash,
    seed: Option<u32>,
    incoming: Option<&[u8]>,
) -> Result<LeafSplit, Ext4Error> {
    check_block_size(block_size)?;
    let csum = seed.is_some();
    let mut map: Vec<((u32, u32), DirEntry)> = list
        .into_iter()
        .map(|e| (hasher.hash(&e.name), e))
        .collect();
    if map.len() < 2 {
        return Err(invalid(
            "entries",
            map.len() as u64,
            "a leaf needs two entries to split",
        ));
    }
    map.sort_by_key(|(h, _)| *h);
    let room = block_size - if csum { TAIL_LEN } else { 0 };
    let sizes: Vec<usize> = map.iter().map(|(_, e)| entry_size(e.name.len())).collect();
    let mut split = half_split(&sizes, block_size);
    if let Some(name) = incoming {
        let hash = hasher.hash(name).0;
        let need = entry_size(name.len());
        let lower_sum: Vec<usize> = core::iter::once(0)
            .chain(sizes.iter().scan(0, |acc, s| {
                *acc += s;
                Some(*acc)
            }))
            .collect();
        let total = lower_sum[map.len()];
        // Whether the name fits the half its hash selects when the upper
        // half starts at entry `k`.
        let fits = |k: usize| {
            let used = if hash >= map[k].0 .0 {
                total - lower_sum[k]
            } else {
                lower_sum[k]
            };
            used + need <= room
        };
        if !fits(split) {
            // The nearest split point, below or above, that has room.
            let n = map.len();
            if let Some(k) = (1..n)
                .flat_map(|d| [split.checked_sub(d), Some(split + d)])
                .flatten()
                .find(|&k| (1..n).contains(&k) && fits(k))
            {
                split = k;
            }
        }
    }
    let hash2 = map[split].0 .0;
    let continued = u32::from(map[split - 1].0 .0 == hash2);
    let pack = |part: &[((u32, u32), DirEntry)]| -> Result<Vec<u8>, Ext4Error> {
        let mut b = vec![0u8; block_size];
        let mut off = 0;
        for (i, (_, e)) in part.iter().enumerate() {
            let len = if i + 1 == part.len() {
                room - off
            } else {
                entry_size(e.name.len())
            };
            put16(&mut b, off + 4, rec_len_to_disk(len, block_size)?);
            write_entry(&mut b, off, &e.name, e.inode, e.file_type);
            off += len;
        }
        if let Some(s) = seed {
            sign_tail(s, &mut b)?;
        }
        Ok(b)
    };
    Ok(LeafSplit {
        lower: pack(&map[..split])?,
        upper: pack(&map[split..])?,
        hash: hash2 + continued,
    })
}

/// Where the kernel's `do_split` cuts `sizes` (entries in hash order, at
/// least two): entries move from the top while more than half of the next
/// one lies in the upper half of the block; if that stops only at the first
/// entry (or never), the cut is by count instead (Linux's "ext4: fix
/// potential negative array index in do_split()"). The kernel counts each
/// record's length as it is on disk, slack included; these are the packed
/// sizes. The upper half is `split..`, never empty nor the whole.
fn half_split(sizes: &[usize], block_size: usize) -> usize {
    let n = sizes.len();
    let mut moved = 0;
    let mut stop = None;
    for i in (0..n).rev() {
        if moved + sizes[i] / 2 > block_size / 2 {
            stop = Some(i);
            break;
        }
        moved += sizes[i];
    }
    match stop {
        Some(i) if i > 0 => i + 1,
        _ => n / 2,
    }
    .clamp(1, n - 1)
}

/// Rewrites the index entries of a dx root or node: `count` becomes
/// `entries.len()` and the entries are written in order (the first entry's hash
/// is the count/limit pair, so only its block is written); the slots after them
/// are zeroed, and with `seed` (metadata_csum: the directory's
/// [`raw::inode_seed`](crate::ext4::raw::inode_seed)) the dx tail is re-signed.
/// For an index that splits or moves down a level (the kernel's
/// `ext4_dx_add_entry`).
///
/// # Errors
/// As [`dx_checksum`](super::dx_checksum) for a block that is neither a dx root nor a dx node;
/// [`Ext4Error::InvalidArgument`] (`"entries"`) for none, or more than the
/// limit.
pub fn dx_rewrite(
    index: &mut [u8],
    entries: &[DxEntry],
    seed: Option<u32>,
) -> Result<(), Ext4Error> {
    let off = dx_count_offset(index)?;
    let limit = usize::from(le16(index, off));
    if entries.is_empty() || entries.len() > limit {
        return Err(invalid(
            "entries",
            entries.len() as u64,
            "an index holds 1 to limit entries",
        ));
    }
    let end = off + limit * DX_ENTRY_LEN;
    if end > index.len() {
        return Err(corrupt(
            "dx_countlimit.limit",
            None,
            limit as u64,
            "larger than the block",
        ));
    }
    put16(index, off + 2, entries.len() as u16);
    for (i, e) in entries.iter().enumerate() {
        let at = off + i * DX_ENTRY_LEN;
        if i > 0 {
            put32(index, at, e.hash);
        }
        put32(index, at + 4, e.block);
    }
    index[off + entries.len() * DX_ENTRY_LEN..end].fill(0);
    if let Some(s) = seed {
        sign_dx(s, index)?;
    }
    Ok(())
}

/// A new dx node block holding `entries` (an empty record spanning the
/// block, then the count/limit pair with the node limit for this block
/// size and metadata_csum, the entries and, with `seed`, the signed dx
/// tail).
///
/// # Errors
/// As [`dx_rewrite`]; [`Ext4Error::InvalidArgument`] (`"block_size"`) for
/// a block size that is not a power of two from 1024 to 65536.
pub fn dx_node(
    block_size: usize,
    entries: &[DxEntry],
    seed: Option<u32>,
) -> Result<Vec<u8>, Ext4Error> {
    check_block_size(block_size)?;
    let mut b = vec![0u8; block_size];
    put16(&mut b, 4, rec_len_to_disk(block_size, block_size)?);
    let limit = dx_limit(block_size, false, seed.is_some());
    put16(&mut b, DX_NODE_COUNT_OFFSET, limit as u16);
    dx_rewrite(&mut b, entries, seed)?;
    Ok(b)
}

/// Sets a dx root's `indirect_levels` and re-signs it (with `seed`).
///
/// # Errors
/// As [`parse_dx_root`] for a block that is not a dx root;
/// [`Ext4Error::InvalidArgument`] (`"indirect_levels"`) above 2.
pub fn dx_set_levels(root: &mut [u8], levels: u8, seed: Option<u32>) -> Result<(), Ext4Error> {
    parse_dx_root(root, seed.is_some())?;
    if levels > DX_MAX_INDIRECT {
        return Err(invalid("indirect_levels", levels.into(), "at most 2"));
    }
    root[24 + 6] = levels;
    if let Some(s) = seed {
        sign_dx(s, root)?;
    }
    Ok(())
}

/// Inserts the index entry `(hash, block)` into a dx root or node right after
/// the entry at position `after` (the kernel's `dx_insert_block`), and with
/// `seed` (metadata_csum: the directory's
/// [`raw::inode_seed`](crate::ext4::raw::inode_seed)) re-signs its dx tail
/// (computed afresh: the entries after the new one move).
///
/// Returns `Ok(false)`, with the block unchanged, when the block is full
/// (`count == limit`): the index itself would have to split.
///
/// # Errors
/// As [`dx_checksum`](super::dx_checksum) for a block that is neither a dx root nor a dx node;
/// [`Ext4Error::InvalidArgument`] (`"after"`) for a position past the
/// entries, or a hash that would break their order.
pub fn dx_insert(
    index: &mut [u8],
    after: usize,
    hash: u32,
    block: u32,
    seed: Option<u32>,
) -> Result<bool, Ext4Error> {
    let off = dx_count_offset(index)?;
    let limit = usize::from(le16(index, off));
    let count = usize::from(le16(index, off + 2));
    if after >= count {
        return Err(invalid("after", after as u64, "past the index's entries"));
    }
    let hash_at = |i: usize| {
        if i == 0 {
            0
        } else {
            le32(index, off + i * DX_ENTRY_LEN)
        }
    };
    if hash < hash_at(after) || (after + 1 < count && hash > hash_at(after + 1)) {
        return Err(invalid("after", after as u64, "the hash does not go there"));
    }
    if count >= limit {
        return Ok(false);
    }
    let at = off + (after + 1) * DX_ENTRY_LEN;
    let end = off + count * DX_ENTRY_LEN;
    if end + DX_ENTRY_LEN > index.len() {
        return Err(corrupt(
            "dx_countlimit.limit",
            None,
            limit as u64,
            "larger than the block",
        ));
    }
    index.copy_within(at..end, at + DX_ENTRY_LEN);
    put32(index, at, hash);
    put32(index, at + 4, block);
    put16(index, off + 2, (count + 1) as u16);
    if let Some(s) = seed {
        sign_dx(s, index)?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ext4::namespace::dir::htree::dx_tail_at;
    use crate::ext4::namespace::dir::{
        add_entry, dx_checksum, init_block, parse_dx_node, verify_dx, verify_tail, FT_REG_FILE,
    };

    /// The cut follows the kernel's `do_split`: an entry moves up while
    /// more than half of it lies above the block's middle; a cut that would
    /// stop only at the first entry (or never) goes by count.
    #[test]
    fn half_split_cuts_by_size_then_by_count() {
        // Three 264-byte names (255 bytes each) in a 1 KiB block: two move.
        assert_eq!(half_split(&[264, 264, 264], 1024), 1);
        // Small entries: those in the upper half move.
        let small = [16; 60];
        assert_eq!(half_split(&small, 1024), 60 - 32);
        // All of them fit in half the block: by count.
        assert_eq!(half_split(&[16, 16, 16, 16], 1024), 2);
        // Stops at the first entry: by count.
        assert_eq!(half_split(&[264, 264, 264, 12, 12, 12], 1024), 3);
        assert_eq!(half_split(&[264, 264, 264, 264, 12, 12, 12], 1024), 2);
        // Never empty, never the whole.
        assert_eq!(half_split(&[600, 8], 1024), 1);
        assert_eq!(half_split(&[8, 600], 1024), 1);
    }

    /// A leaf full of names of mixed lengths (up to 255 bytes) in 1 KiB
    /// blocks splits so that the name that did not fit goes into the half
    /// its hash selects: for every seed and leaf tried. The size rule alone
    /// can leave that half without room (a long name next to the cut).
    #[test]
    fn split_for_a_name_leaves_it_room() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut splits = 0;
        for trial in 0..3000u32 {
            let seed = (trial % 2 == 0).then_some(0x5eed_0000 | trial);
            let csum = seed.is_some();
            let hasher = DxHash::new(1, (next() as u128).to_le_bytes()).unwrap();
            let mut leaf = init_block(1024, seed).unwrap();
            let mut count = 0;
            let incoming = loop {
                let len = if next() % 4 == 0 {
                    1 + (next() % 40) as usize
                } else {
                    200 + (next() % 56) as usize
                };
                let name: Vec<u8> = (0..len).map(|_| b'a' + (next() % 26) as u8).collect();
                if !add_entry(&mut leaf, &name, 100 + count, FT_REG_FILE, csum).unwrap() {
                    break name;
                }
                count += 1;
            };
            if count < 2 {
                continue;
            }
            let mut sp = split_leaf_for(&leaf, &hasher, seed, &incoming).unwrap();
            let upper = hasher.hash(&incoming).0 >= sp.hash & !1;
            let half = if upper { &mut sp.upper } else { &mut sp.lower };
            assert!(
                add_entry(half, &incoming, 9, FT_REG_FILE, csum).unwrap(),
                "trial {trial}: {} entries, the name ({} bytes) fits neither half",
                count,
                incoming.len()
            );
            let split = sp.hash & !1;
            for e in entries(&sp.lower, csum).unwrap() {
                let h = hasher.hash(&e.name).0;
                assert!(h < split || (h == split && sp.hash & 1 == 1));
            }
            for e in entries(&sp.upper, csum).unwrap() {
                assert!(hasher.hash(&e.name).0 >= split);
            }
            if let Some(s) = seed {
                verify_tail(s, &sp.lower).unwrap();
                verify_tail(s, &sp.upper).unwrap();
            }
            splits += 1;
        }
        assert!(splits > 2000, "{splits}");
    }

    /// Where the size rule cuts by count (it stops at the first entry) and
    /// the lower half keeps three 255-byte names, a fourth one hashing into
    /// that half would not fit: the split for that name cuts elsewhere.
    #[test]
    fn split_for_a_name_moves_the_cut_when_its_half_is_full() {
        let hasher = DxHash::new(1, [3; 16]).unwrap();
        let long = |i: usize| {
            let mut n = std::format!("L{i}-").into_bytes();
            n.resize(255, b'x');
            n
        };
        let short = |i: usize| std::format!("s{i}").into_bytes();
        let h = |n: &[u8]| hasher.hash(n).0;
        let mut shorts: Vec<Vec<u8>> = (0..200).map(short).collect();
        shorts.sort_by_key(|n| core::cmp::Reverse(h(n)));
        shorts.truncate(3);
        let floor = shorts.iter().map(|n| h(n)).min().unwrap();
        let longs: Vec<Vec<u8>> = (0..200)
            .map(long)
            .filter(|n| h(n) < floor)
            .take(4)
            .collect();
        assert_eq!(longs.len(), 4);
        for seed in [None, Some(0xabcd_0123)] {
            let csum = seed.is_some();
            let mut leaf = init_block(1024, seed).unwrap();
            for (i, n) in longs[..3].iter().chain(&shorts).enumerate() {
                assert!(add_entry(&mut leaf, n, 10 + i as u32, FT_REG_FILE, csum).unwrap());
            }
            let incoming = &longs[3];
            assert!(!add_entry(&mut leaf.clone(), incoming, 9, FT_REG_FILE, csum).unwrap());
            // The size rule alone: its half for the name has no room.
            let plain = split_leaf(&leaf, &hasher, seed).unwrap();
            assert!(h(incoming) < plain.hash & !1);
            assert!(!add_entry(&mut plain.lower.clone(), incoming, 9, FT_REG_FILE, csum).unwrap());
            // Split for the name: it fits where its hash sends it.
            let mut sp = split_leaf_for(&leaf, &hasher, seed, incoming).unwrap();
            let half = if h(incoming) >= sp.hash & !1 {
                &mut sp.upper
            } else {
                &mut sp.lower
            };
            assert!(add_entry(half, incoming, 9, FT_REG_FILE, csum).unwrap());
        }
    }

    /// A full leaf splits into two signed blocks holding the same names,
    /// the lower ones below the split hash and the upper ones from it, and
    /// the new index entry goes in order with a fresh dx tail.
    #[test]
    fn split_leaf_and_dx_insert() {
        let hasher = DxHash::new(1, [7; 16]).unwrap();
        for (bs, seed) in [(1024, Some(0x1234_5678)), (4096, None), (1024, None)] {
            let mut leaf = init_block(bs, seed).unwrap();
            let mut names = Vec::new();
            for i in 0.. {
                let name = std::format!("name-{i:04}-{}", "x".repeat(i % 37));
                if !add_entry(
                    &mut leaf,
                    name.as_bytes(),
                    100 + i as u32,
                    FT_REG_FILE,
                    seed.is_some(),
                )
                .unwrap()
                {
                    break;
                }
                names.push(name.into_bytes());
            }
            let sp = split_leaf(&leaf, &hasher, seed).unwrap();
            let csum = seed.is_some();
            if let Some(s) = seed {
                verify_tail(s, &sp.lower).unwrap();
                verify_tail(s, &sp.upper).unwrap();
            }
            let lower = entries(&sp.lower, csum).unwrap();
            let upper = entries(&sp.upper, csum).unwrap();
            assert_eq!(lower.len() + upper.len(), names.len());
            assert!(!lower.is_empty() && !upper.is_empty());
            let split = sp.hash & !1;
            for e in &lower {
                let h = hasher.hash(&e.name).0;
                assert!(h < split || (h == split && sp.hash & 1 == 1));
            }
            for e in &upper {
                assert!(hasher.hash(&e.name).0 >= split);
                assert_eq!(
                    u64::from(e.inode),
                    100 + names.iter().position(|n| *n == e.name).unwrap() as u64
                );
            }
            // Each half has room again.
            assert!(add_entry(&mut sp.lower.clone(), b"one-more-name", 9, 1, csum).unwrap());
            assert!(add_entry(&mut sp.upper.clone(), b"one-more-name", 9, 1, csum).unwrap());

            // A dx node with three entries; insert after the second.
            let mut node = vec![0u8; bs];
            put16(&mut node, 4, rec_len_to_disk(bs, bs).unwrap());
            let limit = dx_limit(bs, false, csum);
            put16(&mut node, 8, limit as u16);
            put16(&mut node, 10, 3);
            for (i, (h, b)) in [(0, 1), (split / 2, 2), (split.saturating_add(8) | 0x100, 3)]
                .iter()
                .enumerate()
            {
                if i > 0 {
                    put32(&mut node, 8 + i * 8, *h);
                }
                put32(&mut node, 12 + i * 8, *b);
            }
            if let Some(s) = seed {
                let (tail, _) = dx_tail_at(&node).unwrap();
                let c = dx_checksum(s, &node).unwrap();
                put32(&mut node, tail + 4, c);
            }
            let bad = dx_insert(&mut node.clone(), 0, sp.hash, 9, seed);
            assert!(bad.is_err(), "out of order");
            assert!(dx_insert(&mut node, 1, sp.hash, 9, seed).unwrap());
            let parsed = parse_dx_node(&node, csum).unwrap();
            let blocks: Vec<u32> = parsed.entries.iter().map(|e| e.block).collect();
            assert_eq!(blocks, [1, 2, 9, 3]);
            assert_eq!(parsed.entries[2].hash, sp.hash);
            if let Some(s) = seed {
                verify_dx(s, &node).unwrap();
            }
            // Full: refused, unchanged.
            put16(&mut node, 8, 4);
            let before = node.clone();
            assert!(!dx_insert(&mut node, 1, sp.hash, 10, seed).unwrap());
            assert_eq!(node, before);
        }
    }
}
