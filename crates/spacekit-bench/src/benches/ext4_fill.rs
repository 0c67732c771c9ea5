//! The metadata model of `bench ext4-fallocate`: one block group's block
//! bitmap, a file's extent tree (a root in a 256-byte inode over leaf
//! blocks), the group descriptor and the superblock, held in memory with
//! the on-disk byte layout, and one fallocate request applied to them the
//! way each of seed 001's four columns does it ([`Variant`]).
//!
//! Every checksum lives where ext4 keeps it and is computed as ext4 does
//! (`metadata_csum`):
//!
//! * block bitmap: raw CRC-32C from the file system seed over the bitmap's
//!   `blocks / 8` bytes, stored in the descriptor (`bg_block_bitmap_csum_lo`
//!   at 0x18, `_hi` at 0x38);
//! * extent leaf block: raw CRC-32C from the inode's seed (file system seed,
//!   then `le32(inode number)`, then `le32(i_generation)`) over
//!   `block[0 .. 12 + 12 * eh_max]`, stored right after (the tail);
//! * inode: raw CRC-32C from the inode's seed over the 256 bytes with
//!   `i_checksum_lo` (0x7C) and `i_checksum_hi` (0x82) read as zero, stored
//!   in those two fields;
//! * group descriptor (64 bytes): low 16 bits of raw CRC-32C from the file
//!   system seed over `le32(group)` and the descriptor with `bg_checksum`
//!   (0x1E) read as zero;
//! * superblock: raw CRC-32C from `!0` over the first 0x3FC bytes, stored
//!   at 0x3FC.
//!
//! The incremental variants start from the *stored* checksum and splice in
//! the change of each field they write (a 16-bit stored checksum splices
//! too: the low 16 bits of `crc ^ delta` are the low 16 bits of `crc` XOR
//! those of `delta`).

use std::hash::{Hash, Hasher};

use spacekit::bitmap::{Bitmap, Bits, BitsMut};
use spacekit::checked_bitmap::CheckedBitmap;
use spacekit::crc32c;
use spacekit::ext4::raw::{self, bg, inode, le16, le32, put16, put32, sb};
use spacekit::ext4::Ext4Error;
use spacekit::testing::ext4::extent::{self, Extent, ExtentStore, EXTENT_MAGIC, MAX_INIT_LEN};

use baselines::find_bit::{self, AreaVariant};

/// Blocks per fallocate request: seed 001's "16-block requests".
pub const REQ: usize = 16;
/// The file system's checksum seed (any value: every variant uses the same).
pub const FS_SEED: u32 = 0x5EED_C5C5;
/// The file's inode number and generation (they seed its checksums).
const INO: u32 = 12;
const GENERATION: u32 = 0x0BAD_F11E;
/// The group's number (it seeds the descriptor checksum).
const GROUP: u32 = 1;
/// The longest unwritten extent (`EXT_UNWRITTEN_MAX_LEN`): fallocate makes
/// unwritten extents.
const MAX_LEN: u32 = 32767;

const INODE_SIZE: usize = 256;
const DESC_SIZE: usize = 64;
const SB_SIZE: usize = 1024;

/// Seed 001's columns, in its order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Scan, every checksum recomputed in full.
    Before,
    /// + `flip_range` for the bitmap.
    Flip,
    /// + `splice` for the leaf, inode, descriptor and superblock.
    Splice,
    /// + the free-space index for the search.
    Spacekit,
}

impl Variant {
    /// All four, in the seed's order.
    pub const ALL: [Variant; 4] = [
        Variant::Before,
        Variant::Flip,
        Variant::Splice,
        Variant::Spacekit,
    ];

    /// The column's name.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Before => "before",
            Variant::Flip => "flip",
            Variant::Splice => "splice",
            Variant::Spacekit => "spacekit",
        }
    }

    fn splices(self) -> bool {
        matches!(self, Variant::Splice | Variant::Spacekit)
    }
}

/// Writes `new` at `at` in `buf`; when `crc` is given, splices the change
/// into it first (`len` is the checksummed length of `buf`).
fn write(buf: &mut [u8], crc: Option<&mut u32>, len: usize, at: usize, new: &[u8]) {
    let old = &buf[at..at + new.len()];
    if same(old, new) {
        return;
    }
    if let Some(crc) = crc {
        *crc = crc32c::splice(*crc, len as u64, at as u64, old, new)
            .expect("a field inside the buffer");
    }
    buf[at..at + new.len()].copy_from_slice(new);
}

/// Whether two fields of a few bytes are equal, compared in registers: a
/// slice `==` is a call to `memcmp`, which cost a third of a 64 KiB-block
/// request's time in the fastest variant (every variant writes its fields
/// through here).
#[inline]
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0, |d, (x, y)| d | (x ^ y)) == 0
}

/// The longest region an [`Edit`] splices (the superblock's free count:
/// 0x0C to 0x15C).
const SPAN: usize = 384;

/// Field writes to one small checksummed buffer (inode, descriptor,
/// superblock), spliced into its checksum as one region: from the first
/// changed byte to the last, the XOR of old and new (bytes that did not
/// change drop out, so one splice covers every field: one shift instead of
/// one per field).
struct Edit<'a> {
    buf: &'a mut [u8],
    /// `old ^ new` from `base` on.
    xor: [u8; SPAN],
    base: usize,
    lo: usize,
    hi: usize,
    track: bool,
}

impl<'a> Edit<'a> {
    /// Edits of `buf` at offsets from `base` on; `track` records them for
    /// [`Edit::splice`].
    fn new(buf: &'a mut [u8], base: usize, track: bool) -> Edit<'a> {
        Edit {
            buf,
            xor: [0; SPAN],
            base,
            lo: usize::MAX,
            hi: 0,
            track,
        }
    }

    fn write(&mut self, at: usize, new: &[u8]) {
        let old = &mut self.buf[at..at + new.len()];
        if same(old, new) {
            return;
        }
        if self.track {
            let x = &mut self.xor[at - self.base..at - self.base + new.len()];
            for ((x, o), n) in x.iter_mut().zip(old.iter()).zip(new) {
                *x ^= o ^ n;
            }
            self.lo = self.lo.min(at);
            self.hi = self.hi.max(at + new.len());
        }
        old.copy_from_slice(new);
    }

    /// `crc` (of the buffer's first `len` bytes) after the writes: a
    /// splice over the changed region.
    fn splice(&self, crc: u32, len: usize) -> u32 {
        if self.lo >= self.hi {
            return crc;
        }
        // `crc32c::splice`'s formula with the XOR already at hand: the CRC
        // of `old ^ new` shifted past the bytes after the region.
        let (a, b) = (self.lo - self.base, self.hi - self.base);
        assert!(self.hi <= len, "a region inside the buffer");
        crc ^ crc32c::shift(crc32c::raw(0, &self.xor[a..b]), (len - self.hi) as u64)
    }
}

/// Full descriptor checksum (`ext4_group_desc_csum`, `metadata_csum`).
fn desc_crc(desc: &[u8]) -> u16 {
    raw::desc_checksum_crc32c(FS_SEED, GROUP, desc)
}

fn leaf_csum_end(leaf: &[u8]) -> usize {
    12 + 12 * usize::from(le16(leaf, 4))
}

/// The bitmap and how its checksum is kept.
#[derive(Clone)]
enum Map {
    /// `before`: a plain bitmap, its checksum recomputed in full.
    Plain(Bitmap),
    /// The others: checksum kept by `flip_range` (and, for `spacekit`, a
    /// free-space index).
    Checked(CheckedBitmap),
}

impl Map {
    fn words(&self) -> &[u64] {
        match self {
            Map::Plain(m) => m.as_words(),
            Map::Checked(m) => m.bitmap().as_words(),
        }
    }
}

/// One group's metadata and a file being fallocated into it.
#[derive(Clone)]
pub struct State {
    variant: Variant,
    block_size: usize,
    /// Blocks (bits) in the group.
    blocks: usize,
    /// Block number of the group's first block.
    first_block: u64,
    map: Map,
    /// The file's leaf blocks: (block number, block_size bytes).
    leaves: Vec<(u64, Vec<u8>)>,
    inode: [u8; INODE_SIZE],
    desc: [u8; DESC_SIZE],
    sb: [u8; SB_SIZE],
    seed_i: u32,
    /// The next logical block of the file.
    lblk: u32,
    /// ext4's goal, group-relative: just past the file's last block.
    goal: usize,
}

/// What a fill did: requests served, a digest of where they went, a hash
/// of every final byte (bitmap, leaf blocks, inode, descriptor,
/// superblock), the extents and leaf blocks of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Requests served.
    pub allocs: u64,
    /// A digest of the blocks each request got.
    pub digest: u64,
    /// A hash of every final metadata byte.
    pub bytes: u64,
    /// Extents in the file.
    pub extents: u64,
    /// Leaf blocks of the file.
    pub leaves: u64,
}

fn mix(d: u64, s: usize) -> u64 {
    (d ^ s as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(17)
}

/// The kernel's first-fit scan of the bitmap from the start of the group
/// (`bitmap_find_next_zero_area_off` over `find_next_zero_bit` /
/// `find_next_bit`, word at a time): the seed's "before" search. In a
/// sequential fill every block before the goal is taken or in a run too
/// short, so it finds the block a search from the goal finds.
fn kernel_scan(words: &[u64], blocks: usize) -> Option<usize> {
    let (i, _) =
        find_bit::find_next_zero_area_off(words, blocks, 0, REQ, 0, 0, AreaVariant::Before);
    (i < blocks).then_some(i)
}

impl State {
    /// A group whose bitmap is `bitmap` (`blocks` bits, group number 1 of a
    /// file system of `block_size` blocks), a descriptor, superblock and an
    /// empty regular file with a depth-1 extent tree (its root in the inode,
    /// one empty leaf block, as after its earlier extents left the inode),
    /// every checksum valid; `variant` chooses how requests update them.
    ///
    /// # Errors
    /// If the free-space index cannot be built.
    pub fn new(variant: Variant, block_size: usize, bitmap: &Bitmap) -> Result<State, String> {
        let blocks = bitmap.len();
        let csum_len = blocks / 8;
        let first_block = u64::from(block_size == 1024) + blocks as u64 * u64::from(GROUP);
        let map = match variant {
            Variant::Before => Map::Plain(bitmap.clone()),
            _ => {
                let bytes = bitmap.to_le_bytes();
                let m = CheckedBitmap::from_bytes(&bytes[..blocks.div_ceil(8)], FS_SEED, csum_len)
                    .map_err(|e| format!("bitmap: {e}"))?;
                if variant == Variant::Spacekit {
                    Map::Checked(m.with_index(blocks).map_err(|e| format!("index: {e}"))?)
                } else {
                    Map::Checked(m)
                }
            }
        };
        let seed_i = raw::inode_seed(FS_SEED, INO, GENERATION);
        // One empty leaf, outside the group (in the group before it).
        let leaf_block = first_block - 1;
        let mut leaf = vec![0u8; block_size];
        put16(&mut leaf, 0, EXTENT_MAGIC);
        put16(&mut leaf, 4, extent::node_capacity(block_size));
        let end = leaf_csum_end(&leaf);
        let c = crc32c::raw(seed_i, &leaf[..end]);
        put32(&mut leaf, end, c);

        let mut inode = [0u8; INODE_SIZE];
        put16(&mut inode, inode::MODE, 0o100644);
        put16(&mut inode, inode::LINKS_COUNT, 1);
        put32(&mut inode, inode::BLOCKS_LO, (block_size / 512) as u32);
        put32(&mut inode, inode::FLAGS, 0x80000); // EXT4_EXTENTS_FL
        put32(&mut inode, inode::GENERATION, GENERATION);
        put16(&mut inode, inode::EXTRA_ISIZE, 32);
        let r = inode::BLOCK;
        put16(&mut inode, r, EXTENT_MAGIC);
        put16(&mut inode, r + 2, 1);
        put16(&mut inode, r + 4, 4);
        put16(&mut inode, r + 6, 1);
        put32(&mut inode, r + 12, 0); // ei_block
        put32(&mut inode, r + 16, leaf_block as u32);
        put16(&mut inode, r + 20, (leaf_block >> 32) as u16);
        let c = raw::inode_crc(seed_i, &inode);
        raw::store_checksum(&mut inode, c);

        let free = (blocks - bitmap.count_ones()) as u32;
        let bcsum = crc32c::raw_words(FS_SEED, bitmap.as_words(), csum_len);
        let mut desc = [0u8; DESC_SIZE];
        put16(&mut desc, bg::FREE_BLOCKS_LO, free as u16);
        put16(&mut desc, bg::FREE_BLOCKS_HI, (free >> 16) as u16);
        put16(&mut desc, bg::BLOCK_BITMAP_CSUM_LO, bcsum as u16);
        put16(&mut desc, bg::BLOCK_BITMAP_CSUM_HI, (bcsum >> 16) as u16);
        let c = desc_crc(&desc);
        put16(&mut desc, bg::CHECKSUM, c);

        let mut sbk = [0u8; SB_SIZE];
        // Two groups' free blocks: this one and another like it.
        let sfree = 2 * u64::from(free);
        put32(&mut sbk, sb::FREE_BLOCKS_LO, sfree as u32);
        put32(&mut sbk, sb::FREE_BLOCKS_HI, (sfree >> 32) as u32);
        put32(&mut sbk, sb::BLOCKS_PER_GROUP, blocks as u32);
        put16(&mut sbk, sb::MAGIC, 0xEF53);
        let c = raw::superblock_checksum(&sbk);
        put32(&mut sbk, sb::CHECKSUM, c);

        Ok(State {
            variant,
            block_size,
            blocks,
            first_block,
            map,
            leaves: vec![(leaf_block, leaf)],
            inode,
            desc,
            sb: sbk,
            seed_i,
            lblk: 0,
            goal: 0,
        })
    }

    /// Serves one request of [`REQ`] blocks; `None` when the group has no
    /// room for one.
    ///
    /// # Errors
    /// A bitmap or checksum error, or an extent tree that would need a
    /// fifth leaf (the root in the inode holds four index entries).
    pub fn request(&mut self) -> Result<Option<usize>, String> {
        let v = self.variant;
        let splice = v.splices();
        // 1. Find REQ free blocks.
        let found = match &self.map {
            Map::Checked(m) if v == Variant::Spacekit => m
                .first_fit(REQ, 1, 0, self.goal)
                .map_err(|e| format!("first fit: {e}"))?,
            m => kernel_scan(m.words(), self.blocks),
        };
        let Some(s) = found else {
            return Ok(None);
        };
        // 2. Mark them; the bitmap checksum.
        let csum_len = self.blocks / 8;
        let bcsum = match &mut self.map {
            Map::Plain(m) => {
                m.set_range(s..s + REQ).map_err(|e| format!("set: {e}"))?;
                crc32c::raw_words(FS_SEED, m.as_words(), csum_len)
            }
            Map::Checked(m) => {
                m.set_range(s..s + REQ).map_err(|e| format!("set: {e}"))?;
                m.checksum()
            }
        };
        let phys = self.first_block + s as u64;
        // 3. The extent.
        let added_leaf = self.extend(phys, splice)?;
        // 4. The inode: i_blocks, i_size and, for a new leaf, the root.
        self.lblk += REQ as u32;
        self.update_inode(added_leaf, splice);
        // 5. Descriptor (free count, bitmap checksum) and superblock.
        self.update_counts(bcsum, splice);
        self.goal = s + REQ;
        Ok(Some(s))
    }

    /// Inserts or extends the file's last extent with `REQ` blocks at
    /// `phys`; returns the new leaf block's number if one was started.
    fn extend(&mut self, phys: u64, splice: bool) -> Result<Option<u64>, String> {
        let seed_i = self.seed_i;
        let (_, leaf) = self.leaves.last_mut().expect("a leaf");
        let entries = usize::from(le16(leaf, 2));
        let max = usize::from(le16(leaf, 4));
        let end = leaf_csum_end(leaf);
        let mut crc = le32(leaf, end);
        if entries > 0 {
            let at = 12 + 12 * (entries - 1);
            let last_bytes: [u8; 12] = leaf[at..at + 12].try_into().expect("12 bytes");
            let last = Extent::from_bytes(&last_bytes).map_err(|e| format!("leaf entry: {e}"))?;
            if last.physical_end() == phys && u32::from(last.len) + REQ as u32 <= MAX_LEN {
                let mut e = last;
                e.len += REQ as u16;
                write(leaf, splice.then_some(&mut crc), end, at, &e.to_bytes());
                self.finish_leaf(crc, splice);
                return Ok(None);
            }
        }
        let e = Extent {
            logical: self.lblk,
            physical: phys,
            len: REQ as u16,
            unwritten: true,
        };
        if entries < max {
            let at = 12 + 12 * entries;
            write(leaf, splice.then_some(&mut crc), end, at, &e.to_bytes());
            write(
                leaf,
                splice.then_some(&mut crc),
                end,
                2,
                &((entries + 1) as u16).to_le_bytes(),
            );
            self.finish_leaf(crc, splice);
            return Ok(None);
        }
        // The leaf is full: a fresh one (checksummed in full, as new blocks
        // are), and an index entry in the root.
        let root_entries = le16(&self.inode, inode::BLOCK + 2);
        if root_entries >= 4 {
            return Err("the extent tree would need a fifth leaf".into());
        }
        let block = self.leaves.last().expect("a leaf").0 - 1;
        let mut fresh = vec![0u8; self.block_size];
        put16(&mut fresh, 0, EXTENT_MAGIC);
        put16(&mut fresh, 2, 1);
        put16(&mut fresh, 4, extent::node_capacity(self.block_size));
        fresh[12..24].copy_from_slice(&e.to_bytes());
        let end = leaf_csum_end(&fresh);
        let c = crc32c::raw(seed_i, &fresh[..end]);
        put32(&mut fresh, end, c);
        self.leaves.push((block, fresh));
        Ok(Some(block))
    }

    fn finish_leaf(&mut self, crc: u32, splice: bool) {
        let (_, leaf) = self.leaves.last_mut().expect("a leaf");
        let end = leaf_csum_end(leaf);
        let crc = if splice {
            crc
        } else {
            crc32c::raw(self.seed_i, &leaf[..end])
        };
        put32(leaf, end, crc);
    }

    fn update_inode(&mut self, added_leaf: Option<u64>, splice: bool) {
        let bs = self.block_size as u64;
        let lblk = self.lblk;
        let mut ed = Edit::new(&mut self.inode, 0, splice);
        let old_blocks = u64::from(le32(ed.buf, inode::BLOCKS_LO))
            | (u64::from(le16(ed.buf, inode::BLOCKS_HIGH)) << 32);
        let mut blocks = old_blocks + REQ as u64 * bs / 512;
        if let Some(b) = added_leaf {
            blocks += bs / 512;
            let k = usize::from(le16(ed.buf, inode::BLOCK + 2));
            let mut idx = [0u8; 12];
            put32(&mut idx, 0, lblk - REQ as u32);
            put32(&mut idx, 4, b as u32);
            put16(&mut idx, 8, (b >> 32) as u16);
            ed.write(inode::BLOCK + 12 + 12 * k, &idx);
            ed.write(inode::BLOCK + 2, &((k + 1) as u16).to_le_bytes());
        }
        let size = u64::from(lblk) * bs;
        ed.write(inode::BLOCKS_LO, &(blocks as u32).to_le_bytes());
        ed.write(inode::BLOCKS_HIGH, &((blocks >> 32) as u16).to_le_bytes());
        ed.write(inode::SIZE_LO, &(size as u32).to_le_bytes());
        ed.write(inode::SIZE_HIGH, &((size >> 32) as u32).to_le_bytes());
        let crc = if splice {
            ed.splice(raw::stored_checksum(ed.buf), INODE_SIZE)
        } else {
            raw::inode_crc(self.seed_i, ed.buf)
        };
        raw::store_checksum(&mut self.inode, crc);
    }

    fn update_counts(&mut self, bcsum: u32, splice: bool) {
        // Descriptor: free count and the bitmap's checksum.
        let mut ed = Edit::new(&mut self.desc, bg::FREE_BLOCKS_LO, splice);
        let free = (u32::from(le16(ed.buf, bg::FREE_BLOCKS_LO))
            | (u32::from(le16(ed.buf, bg::FREE_BLOCKS_HI)) << 16))
            - REQ as u32;
        ed.write(bg::FREE_BLOCKS_LO, &(free as u16).to_le_bytes());
        ed.write(bg::FREE_BLOCKS_HI, &((free >> 16) as u16).to_le_bytes());
        ed.write(bg::BLOCK_BITMAP_CSUM_LO, &(bcsum as u16).to_le_bytes());
        ed.write(
            bg::BLOCK_BITMAP_CSUM_HI,
            &((bcsum >> 16) as u16).to_le_bytes(),
        );
        // bg_checksum lies inside the span but is the same before and after
        // (it is stored below), so it drops out of the splice.
        let crc = if splice {
            ed.splice(u32::from(le16(ed.buf, bg::CHECKSUM)), DESC_SIZE) as u16
        } else {
            desc_crc(ed.buf)
        };
        put16(&mut self.desc, bg::CHECKSUM, crc);
        // Superblock: free count.
        let mut ed = Edit::new(&mut self.sb, sb::FREE_BLOCKS_LO, splice);
        let free = (u64::from(le32(ed.buf, sb::FREE_BLOCKS_LO))
            | (u64::from(le32(ed.buf, sb::FREE_BLOCKS_HI)) << 32))
            - REQ as u64;
        ed.write(sb::FREE_BLOCKS_LO, &(free as u32).to_le_bytes());
        ed.write(sb::FREE_BLOCKS_HI, &((free >> 32) as u32).to_le_bytes());
        let crc = if splice {
            ed.splice(le32(ed.buf, sb::CHECKSUM), sb::CHECKSUM)
        } else {
            raw::superblock_checksum(ed.buf)
        };
        put32(&mut self.sb, sb::CHECKSUM, crc);
    }

    /// Fills the group with requests until none fits.
    ///
    /// # Errors
    /// As [`State::request`].
    pub fn fill(&mut self) -> Result<(u64, u64), String> {
        let (mut allocs, mut digest) = (0, 0);
        while let Some(s) = self.request()? {
            allocs += 1;
            digest = mix(digest, s);
        }
        Ok((allocs, digest))
    }

    /// Checks that every stored checksum equals a fresh full computation,
    /// that the library reads the extent tree (headers and tail checksums
    /// checked by `spacekit::ext4::extent`) and that its extents cover
    /// exactly `allocs` requests, every block marked in the bitmap; returns
    /// the outcome.
    ///
    /// # Errors
    /// Names the first checksum or structure that is wrong.
    pub fn check(&self, allocs: u64, digest: u64) -> Result<Outcome, String> {
        let words = self.map.words();
        let bcsum = crc32c::raw_words(FS_SEED, words, self.blocks / 8);
        let stored = u32::from(le16(&self.desc, bg::BLOCK_BITMAP_CSUM_LO))
            | (u32::from(le16(&self.desc, bg::BLOCK_BITMAP_CSUM_HI)) << 16);
        if stored != bcsum {
            return Err(format!("bitmap checksum {stored:#x}, fresh {bcsum:#x}"));
        }
        if let Map::Checked(m) = &self.map {
            if !m.verify() {
                return Err("CheckedBitmap checksum differs from a fresh one".into());
            }
        }
        for (b, leaf) in &self.leaves {
            let fresh = extent::block_checksum(self.seed_i, leaf);
            if fresh != extent::stored_checksum(leaf) {
                return Err(format!(
                    "leaf block {b}: tail checksum differs from a fresh one"
                ));
            }
        }
        let c = raw::inode_crc(self.seed_i, &self.inode);
        if raw::stored_checksum(&self.inode) != c {
            return Err(format!(
                "inode checksum {:#x}, fresh {c:#x}",
                raw::stored_checksum(&self.inode)
            ));
        }
        let c = desc_crc(&self.desc);
        if le16(&self.desc, bg::CHECKSUM) != c {
            return Err(format!(
                "descriptor checksum {:#x}, fresh {c:#x}",
                le16(&self.desc, bg::CHECKSUM)
            ));
        }
        let c = raw::superblock_checksum(&self.sb);
        if le32(&self.sb, sb::CHECKSUM) != c {
            return Err(format!(
                "superblock checksum {:#x}, fresh {c:#x}",
                le32(&self.sb, sb::CHECKSUM)
            ));
        }
        let root: [u8; extent::ROOT_SIZE] = self.inode
            [inode::BLOCK..inode::BLOCK + extent::ROOT_SIZE]
            .try_into()
            .expect("60 bytes");
        let mut store = Leaves(&self.leaves, self.block_size);
        let exts = extent::extents(&root, &mut store, Some(self.seed_i))
            .map_err(|e| format!("extent tree: {e}"))?;
        let mut next = 0u64;
        for e in &exts {
            if u64::from(e.logical) != next || !e.unwritten || e.len > MAX_INIT_LEN - 1 {
                return Err(format!("extent {e:?} after logical block {next}"));
            }
            next = e.end();
            for p in e.physical..e.physical_end() {
                let bit = (p - self.first_block) as usize;
                if words[bit / 64] >> (bit % 64) & 1 == 0 {
                    return Err(format!("extent {e:?}: block {p} is free in the bitmap"));
                }
            }
        }
        if next != allocs * REQ as u64 || next != u64::from(self.lblk) {
            return Err(format!(
                "the extents map {next} blocks, {allocs} requests of {REQ} served"
            ));
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        words.hash(&mut h);
        for (b, leaf) in &self.leaves {
            b.hash(&mut h);
            leaf.hash(&mut h);
        }
        self.inode.hash(&mut h);
        self.desc.hash(&mut h);
        self.sb.hash(&mut h);
        Ok(Outcome {
            allocs,
            digest,
            bytes: h.finish(),
            extents: exts.len() as u64,
            leaves: self.leaves.len() as u64,
        })
    }
}

/// The file's leaf blocks as an [`ExtentStore`] the library reads (it
/// never writes here).
struct Leaves<'a>(&'a [(u64, Vec<u8>)], usize);

impl ExtentStore for Leaves<'_> {
    fn block_size(&self) -> usize {
        self.1
    }
    fn read(&mut self, block: u64) -> Result<Vec<u8>, Ext4Error> {
        self.0
            .iter()
            .find(|(b, _)| *b == block)
            .map(|(_, d)| d.clone())
            .ok_or(Ext4Error::ReadOnly)
    }
    fn write(&mut self, _: u64, _: Vec<u8>) -> Result<(), Ext4Error> {
        Err(Ext4Error::ReadOnly)
    }
    fn alloc_tree_block(&mut self, _: u64) -> Result<u64, Ext4Error> {
        Err(Ext4Error::ReadOnly)
    }
    fn free_tree_block(&mut self, _: u64) -> Result<(), Ext4Error> {
        Err(Ext4Error::ReadOnly)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcomes(block_size: usize, bitmap: &Bitmap) -> Vec<Outcome> {
        Variant::ALL
            .iter()
            .map(|&v| {
                let mut st = State::new(v, block_size, bitmap).unwrap();
                let (a, d) = st.fill().unwrap();
                st.check(a, d).unwrap()
            })
            .collect()
    }

    #[test]
    fn four_variants_agree_on_a_contiguous_group() {
        let mut map = Bitmap::new(8192);
        map.set_range(0..3).unwrap();
        let o = outcomes(1024, &map);
        assert!(o.iter().all(|x| *x == o[0]), "{o:?}");
        assert_eq!(o[0].allocs, (8192 - 3) / 16);
        assert_eq!(o[0].extents, 1);
    }

    #[test]
    fn four_variants_agree_when_the_tree_grows_leaves_and_extents_hit_the_cap() {
        // 1 KiB blocks: 84 entries per leaf. One used block after every
        // 16 free ones for 250 requests makes 250 extents, then a long free
        // run splits at 32,752 blocks (the last multiple of 16 under the
        // 32,767 cap).
        let bits = 131072;
        let mut map = Bitmap::new(bits);
        for k in 0..250 {
            map.set(k * 17 + 16).unwrap();
        }
        let o = outcomes(1024, &map);
        assert!(o.iter().all(|x| *x == o[0]), "{o:?}");
        // 250 + 4 extents (7,926 requests of the long run, 2,047 per
        // extent): 84 + 84 + 84 + 2 entries, four leaves.
        assert_eq!(o[0].extents, 254, "{o:?}");
        assert_eq!(o[0].leaves, 4);
    }
}
