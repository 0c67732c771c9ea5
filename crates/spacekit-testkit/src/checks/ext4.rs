//! Target `ext4`: structure-aware mutation of small mkfs.ext4 images.
//!
//! The input picks one of the base images in `ext4_images/` (made by
//! `tools/make-ext4-images.sh`: 1 KiB blocks with metadata_csum, 1 KiB
//! blocks with no checksums at all, 2 KiB blocks with gdt_csum and 64bit,
//! 1 KiB blocks with inline_data),
//! then edits chosen structures (superblock, descriptor table, block and
//! inode bitmaps, used inodes, the extent and directory blocks the inodes
//! point to, or any byte), optionally re-signs the checksums so the edits
//! get past them, writes the image to a temporary file and then:
//!
//! * read-only: open, verify, free extents, histogram, lookups, stat,
//!   read_dir; never a panic, never a byte written;
//! * a read-only refusal implies a read-write refusal, and a refused
//!   read-write open writes nothing;
//! * read-write: allocations, frees, create, fallocate, truncate, unlink
//!   and flushes; never a panic, the in-memory invariants (`validate`)
//!   after every call, and, when the image was verify-clean, `verify()`
//!   still clean after every successful call and in a fresh open after
//!   every flush;
//! * on an unedited image, a model of every file's contents (what a
//!   truncate kept, zeros past an old end after a truncate or fallocate
//!   grows it) equals what the flushed image holds, until a raw block or
//!   inode call ends the model.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use spacekit::crc32c;
use spacekit::ext4::raw::{self, le16, le32, put16, put32};
use spacekit::ext4::{AllocRequest, Image, OpenMode};
use spacekit::testing::Validate;

use super::input::Input;

pub(super) const IMAGES: [(&str, &[u8]); 4] = [
    ("csum", include_bytes!("ext4_images/csum.sparse")),
    ("nocsum", include_bytes!("ext4_images/nocsum.sparse")),
    ("gdtcsum", include_bytes!("ext4_images/gdtcsum.sparse")),
    // inline_data: /d, /b and /d/e/file-with-a-longer-name-7 in their
    // inodes.
    ("inline", include_bytes!("ext4_images/inline.sparse")),
];

/// Expands the sparse format of `tools/sparse.py`.
pub(super) fn expand(sparse: &[u8]) -> Vec<u8> {
    assert_eq!(&sparse[..4], b"SKSP", "sparse magic");
    let len = le32(sparse, 4) as usize;
    let mut out = vec![0u8; len];
    for rec in sparse[8..].chunks_exact(4 + 1024) {
        let at = le32(rec, 0) as usize * 1024;
        out[at..at + 1024].copy_from_slice(&rec[4..]);
    }
    out
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Superblock,
    Descriptors,
    BlockBitmap,
    InodeBitmap,
    Inode(u32),
    /// A block an inode's extent tree points to (extent, directory or
    /// file data).
    Block,
    Anywhere,
}

#[derive(Clone, Copy, Debug)]
struct Region {
    kind: Kind,
    start: usize,
    len: usize,
}

/// Where things are in a base image (read once from its pristine bytes).
struct Geo {
    block_size: usize,
    groups: usize,
    desc_size: usize,
    gdt: usize,
    inode_size: usize,
    ipg: u32,
    bpg: u32,
    blocks: u64,
    /// (block bitmap, inode bitmap, inode table, flags) per group.
    desc: Vec<(u64, u64, u64, u16)>,
}

pub(super) struct Base {
    name: &'static str,
    pub(super) bytes: Vec<u8>,
    geo: Geo,
    regions: Vec<Region>,
}

fn parse(name: &'static str, bytes: Vec<u8>) -> Base {
    let sb = &bytes[1024..2048];
    let block_size = 1024usize << le32(sb, 24);
    let incompat = le32(sb, 0x60);
    let is64 = incompat & 0x80 != 0;
    let blocks = u64::from(le32(sb, 4))
        | if is64 {
            u64::from(le32(sb, 0x150)) << 32
        } else {
            0
        };
    let first = u64::from(le32(sb, 20));
    let bpg = le32(sb, 32);
    let ipg = le32(sb, 40);
    let inode_size = usize::from(le16(sb, 88));
    let desc_size = if is64 {
        usize::from(le16(sb, 0xFE))
    } else {
        32
    };
    let groups = (blocks - first).div_ceil(u64::from(bpg)) as usize;
    let gdt = (first as usize + 1) * block_size;
    let mut desc = Vec::new();
    for g in 0..groups {
        let d = &bytes[gdt + g * desc_size..gdt + (g + 1) * desc_size];
        let hi = |at: usize| {
            if desc_size >= 64 {
                u64::from(le32(d, at)) << 32
            } else {
                0
            }
        };
        desc.push((
            u64::from(le32(d, 0)) | hi(0x20),
            u64::from(le32(d, 4)) | hi(0x24),
            u64::from(le32(d, 8)) | hi(0x28),
            le16(d, 0x12),
        ));
    }
    let geo = Geo {
        block_size,
        groups,
        desc_size,
        gdt,
        inode_size,
        ipg,
        bpg,
        blocks,
        desc,
    };
    let mut regions = vec![
        Region {
            kind: Kind::Superblock,
            start: 1024,
            len: 1024,
        },
        Region {
            kind: Kind::Descriptors,
            start: gdt,
            len: groups * desc_size,
        },
        Region {
            kind: Kind::Anywhere,
            start: 0,
            len: bytes.len(),
        },
    ];
    for &(bb, ib, _, _) in &geo.desc {
        regions.push(Region {
            kind: Kind::BlockBitmap,
            start: bb as usize * block_size,
            len: block_size,
        });
        regions.push(Region {
            kind: Kind::InodeBitmap,
            start: ib as usize * block_size,
            len: block_size,
        });
    }
    // Inodes 1..=32 that are in use, and the blocks their extents name.
    let mut blocks_seen = Vec::new();
    for ino in 1..=32u32.min(ipg * groups as u32) {
        let at = inode_offset(&geo, ino);
        let inode = &bytes[at..at + inode_size];
        if le16(inode, 0) == 0 && ino != 11 {
            continue;
        }
        regions.push(Region {
            kind: Kind::Inode(ino),
            start: at,
            len: inode_size,
        });
        if le32(inode, 0x20) & 0x80000 == 0 {
            continue;
        }
        let root = &inode[40..100];
        collect_extent_blocks(&bytes, block_size, root, 2, &mut blocks_seen);
    }
    blocks_seen.sort_unstable();
    blocks_seen.dedup();
    for b in blocks_seen {
        regions.push(Region {
            kind: Kind::Block,
            start: b as usize * block_size,
            len: block_size,
        });
    }
    Base {
        name,
        bytes,
        geo,
        regions,
    }
}

fn inode_offset(geo: &Geo, ino: u32) -> usize {
    let g = ((ino - 1) / geo.ipg) as usize;
    let i = ((ino - 1) % geo.ipg) as usize;
    geo.desc[g].2 as usize * geo.block_size + i * geo.inode_size
}

/// The blocks of an extent node: index children (recursively) and the
/// first blocks of each leaf extent.
fn collect_extent_blocks(img: &[u8], bs: usize, node: &[u8], budget: u32, out: &mut Vec<u64>) {
    if node.len() < 12 || le16(node, 0) != 0xF30A || budget == 0 {
        return;
    }
    let entries = usize::from(le16(node, 2)).min((node.len() - 12) / 12);
    let depth = le16(node, 6);
    for e in 0..entries {
        let x = &node[12 + 12 * e..24 + 12 * e];
        if depth == 0 {
            let len = u64::from(le16(x, 4) & 0x7FFF);
            let start = u64::from(le32(x, 8)) | u64::from(le16(x, 6)) << 32;
            for b in start..start + len.min(3) {
                if (b as usize + 1) * bs <= img.len() {
                    out.push(b);
                }
            }
        } else {
            let leaf = u64::from(le32(x, 4)) | u64::from(le16(x, 8)) << 32;
            let at = leaf as usize * bs;
            if at + bs <= img.len() {
                out.push(leaf);
                collect_extent_blocks(img, bs, &img[at..at + bs], budget - 1, out);
            }
        }
    }
}

pub(super) fn bases() -> &'static [Base] {
    static BASES: OnceLock<Vec<Base>> = OnceLock::new();
    BASES.get_or_init(|| IMAGES.iter().map(|&(n, s)| parse(n, expand(s))).collect())
}

/// Re-signs what the edits broke, from the edited bytes: inode checksums
/// (metadata_csum), bitmap checksums, descriptor checksums, the
/// superblock checksum. Locations come from the base image's geometry.
fn fixup(img: &mut [u8], base: &Base) {
    let geo = &base.geo;
    let sb = img[1024..2048].to_vec();
    let ro_compat = le32(&sb, 0x64);
    let metadata_csum = ro_compat & 0x400 != 0;
    let gdt_csum = !metadata_csum && ro_compat & 0x10 != 0;
    let seed = raw::checksum_seed(&sb);
    let bs = geo.block_size;
    if metadata_csum {
        for r in &base.regions {
            let Kind::Inode(ino) = r.kind else { continue };
            let inode = &mut img[r.start..r.start + r.len];
            let gen = le32(inode, raw::inode::GENERATION);
            let c = raw::inode_crc(raw::inode_seed(seed, ino, gen), inode);
            raw::store_checksum(inode, c);
        }
        for (g, &(bb, ib, _, _)) in geo.desc.iter().enumerate() {
            let d = geo.gdt + g * geo.desc_size;
            let flags = le16(img, d + 0x12);
            let (bb, ib) = (bb as usize * bs, ib as usize * bs);
            if flags & 2 == 0 {
                let c = crc32c::raw(seed, &img[bb..bb + geo.bpg as usize / 8]);
                put16(img, d + 0x18, c as u16);
                if geo.desc_size >= 64 {
                    put16(img, d + 0x38, (c >> 16) as u16);
                }
            }
            if flags & 1 == 0 {
                let c = crc32c::raw(seed, &img[ib..ib + geo.ipg as usize / 8]);
                put16(img, d + 0x1A, c as u16);
                if geo.desc_size >= 64 {
                    put16(img, d + 0x3A, (c >> 16) as u16);
                }
            }
        }
    }
    if metadata_csum || gdt_csum {
        for g in 0..geo.groups {
            let d = geo.gdt + g * geo.desc_size;
            let desc = &img[d..d + geo.desc_size];
            let c = if metadata_csum {
                raw::desc_checksum_crc32c(seed, g as u32, desc)
            } else {
                raw::desc_checksum_crc16(&sb[0x68..0x78], g as u32, desc)
            };
            put16(img, d + 0x1E, c);
        }
    }
    if metadata_csum {
        let c = raw::superblock_checksum(&img[1024..2048]);
        put32(img, 1024 + raw::sb::CHECKSUM, c);
    }
}

fn apply_edit(img: &mut [u8], base: &Base, input: &mut Input) {
    let r = base.regions[input.below(base.regions.len() as u64) as usize];
    let off = r.start + input.below(r.len as u64) as usize;
    let room = img.len() - off;
    let op = input.u8() % 8;
    let value = input.u32();
    let geo = &base.geo;
    match op {
        0 => img[off] = value as u8,
        1 => img[off] ^= 1 << (value % 8),
        2 if room >= 2 => put16(img, off, value as u16),
        3 if room >= 4 => put32(img, off, value),
        4 if room >= 4 => {
            let v = le32(img, off).wrapping_add((value as i8) as i32 as u32);
            put32(img, off, v);
        }
        5 if room >= 4 => {
            // Values that matter to ext4: counts and block numbers at
            // their limits.
            let interesting = [
                0,
                1,
                u32::MAX,
                0x7FFF_FFFF,
                0x8000_0000,
                geo.blocks as u32,
                geo.blocks as u32 - 1,
                geo.blocks as u32 + 1,
                geo.bpg,
                geo.ipg,
                geo.ipg * geo.groups as u32,
                geo.block_size as u32,
                0xF30A,
            ];
            put32(img, off, interesting[value as usize % interesting.len()]);
        }
        6 => {
            let n = (value as usize % 64).min(room);
            img[off..off + n].fill(0);
        }
        _ => {
            // Copy 4..64 bytes from elsewhere in the same image.
            let n = (4 + value as usize % 60).min(room);
            let from = input.below((img.len() - n) as u64) as usize;
            let src = img[from..from + n].to_vec();
            img[off..off + n].copy_from_slice(&src);
        }
    }
}

/// The image in a temporary file (tmpfs when there is one), removed with
/// its redo log on drop.
pub(super) struct TempImage {
    pub(super) path: PathBuf,
}

impl TempImage {
    pub(super) fn new(bytes: &[u8]) -> TempImage {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = if fs::metadata("/dev/shm").is_ok_and(|m| m.is_dir()) {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let path = dir.join(format!(
            "spacekit-fuzz-{}-{}.img",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        fs::write(&path, bytes).expect("write temporary image");
        TempImage { path }
    }

    pub(super) fn bytes(&self) -> Vec<u8> {
        fs::read(&self.path).expect("read temporary image")
    }
}

impl Drop for TempImage {
    fn drop(&mut self) {
        let _ = fs::remove_file(Image::redo_log_path(&self.path));
        let _ = fs::remove_file(&self.path);
    }
}

const PATHS: [&str; 14] = [
    "/",
    "/a",
    "/b",
    "/d",
    "/d/c",
    "/d/e",
    "/d/e/file-with-a-longer-name-7",
    "/lost+found",
    "/new",
    "/d/e/new-file",
    "/a/below-a-file",
    "relative",
    "/d//e/../e",
    "/nope/x",
];

fn path(input: &mut Input) -> String {
    match input.u8() % 16 {
        14 => format!("/d/e/{}", "n".repeat(1 + input.u8() as usize)),
        15 => format!("/new{}", input.u8()),
        k => PATHS[k as usize].to_string(),
    }
}

fn check_valid(img: &Image, what: &str) {
    if let Err(e) = img.validate() {
        panic!("in-memory invariants after {what}: {e}");
    }
}

fn assert_clean(img: &Image, what: &str) {
    match img.verify() {
        Ok(r) => assert!(r.is_clean(), "verify after {what}: {:?}", r.mismatches),
        Err(e) => panic!("verify after {what}: {e}"),
    }
}

/// The read-only surface. Returns whether the image verified clean.
fn read_only(img: &mut Image, input: &mut Input) -> bool {
    let info = img.info().clone();
    let clean = img.verify().is_ok_and(|r| r.is_clean());
    check_valid(img, "verify");
    let mut free_total = 0u64;
    for g in 0..=info.group_count {
        let gi = img.group(g);
        let ext = img.free_extents(g);
        if g == info.group_count {
            assert!(
                gi.is_err() && ext.is_err(),
                "group {g} of {} accepted",
                info.group_count
            );
            continue;
        }
        let _ = img.group_checksums(g);
        if let (Ok(gi), Ok(ext)) = (gi, ext) {
            // Inclusive (first, last) ranges, ascending, not touching.
            let sum: u64 = ext.iter().map(|&(s, l)| l + 1 - s).sum();
            free_total += sum;
            for w in ext.windows(2) {
                assert!(
                    w[0].1 + 1 < w[1].0,
                    "free extents {w:?} of group {g} touch or overlap"
                );
            }
            for &(s, l) in &ext {
                assert!(s <= l, "empty free extent {s}..={l} in group {g}");
                assert!(
                    s >= gi.first_block && l <= gi.last_block,
                    "free extent {s}..={l} outside group {g} ({}..={})",
                    gi.first_block,
                    gi.last_block
                );
                assert_eq!(
                    img.block_in_use(s).ok(),
                    Some(false),
                    "free extent start {s} in use"
                );
                assert_eq!(
                    img.block_in_use(l).ok(),
                    Some(false),
                    "free extent end {l} in use"
                );
            }
            if clean {
                assert_eq!(
                    sum,
                    u64::from(gi.free_blocks),
                    "free extents of clean group {g}"
                );
            }
        }
    }
    if let Ok(h) = img.free_histogram() {
        if clean {
            assert_eq!(h.free_blocks, free_total, "histogram against free extents");
            assert_eq!(
                h.free_blocks,
                img.free_blocks_count(),
                "histogram against the superblock"
            );
        }
        let n: u64 = h.buckets.iter().map(|b| b.extents).sum();
        assert_eq!(n, h.extents, "histogram buckets");
    }
    let _ = img.superblock_checksum();
    for _ in 0..4 {
        let b = input.below(info.blocks_count + 4);
        let _ = img.block_in_use(b);
        let i = input.below(u64::from(info.inodes_count) + 4) as u32;
        let _ = img.inode_in_use(i);
    }
    for _ in 0..3 {
        let p = path(input);
        if let Ok(ino) = img.lookup(&p) {
            let _ = img.stat(ino);
            let _ = img.read_dir(ino);
        }
    }
    let _ = img.read_dir(2);
    for ino in 1..=16 {
        let _ = img.stat(ino);
    }
    check_valid(img, "the read-only calls");
    clean
}

fn reopen_clean(tmp: &TempImage, what: &str, files: Option<&BTreeMap<u32, Vec<u8>>>) {
    match Image::open(&tmp.path, OpenMode::ReadOnly) {
        Ok(mut img) => {
            assert_clean(&img, &format!("a fresh open after {what}"));
            if let Some(files) = files {
                let bytes = tmp.bytes();
                for (&ino, want) in files {
                    let got = file_bytes(&mut img, &bytes, ino);
                    if got.as_ref() != Some(want) {
                        let at = got
                            .as_ref()
                            .map(|g| (0..g.len().min(want.len())).find(|&i| g[i] != want[i]));
                        panic!(
                            "after {what}: inode {ino} holds {:?} bytes (first difference {at:?}), the model {}",
                            got.map(|g| g.len()),
                            want.len()
                        );
                    }
                }
            }
        }
        Err(e) => panic!("reopen after {what}: {e}"),
    }
}

/// A regular file's contents as a reader of the flushed image sees them:
/// written extents from the image's bytes, unwritten extents and holes as
/// zeros, up to `i_size`.
fn file_bytes(img: &mut Image, bytes: &[u8], ino: u32) -> Option<Vec<u8>> {
    let st = img.stat(ino).ok()?;
    let bs = img.info().block_size as u64;
    let size = usize::try_from(st.size).ok().filter(|&s| s <= 64 << 20)?;
    let mut out = vec![0u8; size];
    for e in st.extents.iter().filter(|e| !e.unwritten) {
        for i in 0..u64::from(e.len) {
            let at = (u64::from(e.logical) + i) * bs;
            if at >= st.size {
                break;
            }
            let n = bs.min(st.size - at) as usize;
            let from = ((e.physical + i) * bs) as usize;
            out[at as usize..at as usize + n].copy_from_slice(bytes.get(from..from + n)?);
        }
    }
    Some(out)
}

/// The model's new size for inode `ino` (only growing when `grow_only`):
/// zeros past the old end. A file past 64 MiB leaves the model.
fn model_resize(files: &mut Option<BTreeMap<u32, Vec<u8>>>, ino: u32, size: u64, grow_only: bool) {
    let Some(files) = files.as_mut() else { return };
    let Some(data) = files.get_mut(&ino) else {
        return;
    };
    if size > 64 << 20 {
        files.remove(&ino);
    } else if !grow_only || size as usize > data.len() {
        data.resize(size as usize, 0);
    }
}

/// The regular files of the base images (see tools/make-ext4-images.sh).
const FILES: [&str; 4] = ["/a", "/b", "/d/c", "/d/e/file-with-a-longer-name-7"];

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    // (The corpus was grown with three images; its inputs now pick among
    // four, each still a valid input.)
    let base = &bases()[input.below(IMAGES.len() as u64) as usize];
    let flags = input.u8();
    let edits = input.u8() % 24;
    let mut bytes = base.bytes.clone();
    for _ in 0..edits {
        apply_edit(&mut bytes, base, &mut input);
    }
    if flags & 1 == 1 {
        fixup(&mut bytes, base);
    }
    let tmp = TempImage::new(&bytes);
    let _name = base.name;

    let ro_ok = match Image::open(&tmp.path, OpenMode::ReadOnly) {
        Err(e) => {
            let _ = e.to_string();
            false
        }
        Ok(mut img) => {
            read_only(&mut img, &mut input);
            true
        }
    };
    assert!(
        tmp.bytes() == bytes,
        "the read-only phase wrote to the image"
    );

    let mut img = match Image::open(&tmp.path, OpenMode::ReadWrite) {
        Err(_) => {
            assert!(
                tmp.bytes() == bytes,
                "a refused read-write open wrote to the image"
            );
            return;
        }
        Ok(img) => img,
    };
    assert!(ro_ok, "opened read-write, refused read-only");
    let clean = img.verify().is_ok_and(|r| r.is_clean());
    let info = img.info().clone();
    // On an unedited image, the model of every file's contents: what was
    // kept, zeros past an old end. Raw block and inode calls (which can
    // free a file's blocks under it) end the model.
    let mut files: Option<BTreeMap<u32, Vec<u8>>> = (edits == 0).then(|| {
        FILES
            .iter()
            .filter_map(|p| {
                let ino = img.lookup(p).ok()?;
                Some((ino, file_bytes(&mut img, &bytes, ino)?))
            })
            .collect()
    });
    let mut steps = 0;
    while !input.is_empty() && steps < 16 {
        steps += 1;
        let op = input.u8() % 16;
        let (what, ok) = match op {
            0 => {
                let goal = if input.bool() {
                    Some(input.below(info.blocks_count + 8))
                } else {
                    None
                };
                let len = if input.u8() < 8 {
                    input.u32()
                } else {
                    1 + input.below(80) as u32
                };
                let align = if input.u8() < 8 {
                    u32::from(input.u8())
                } else {
                    1 << input.below(7)
                };
                let req = AllocRequest { goal, len, align };
                let r = img.alloc_blocks(req);
                if let Ok(first) = r {
                    assert!(
                        u64::from(len) > 0 && first % u64::from(align) == 0,
                        "{req:?} gave {first}"
                    );
                    for b in [first, first + u64::from(len) - 1] {
                        assert_eq!(
                            img.block_in_use(b).ok(),
                            Some(true),
                            "{req:?}: block {b} not in use"
                        );
                    }
                }
                (format!("alloc_blocks({req:?})"), r.is_ok())
            }
            1 => {
                let start = input.below(info.blocks_count + 8);
                let len = input.below(70);
                (
                    format!("free_blocks({start}, {len})"),
                    img.free_blocks(start, len).is_ok(),
                )
            }
            2 => {
                let g = if input.bool() {
                    Some(input.below(u64::from(info.group_count) + 2) as u32)
                } else {
                    None
                };
                let dir = input.bool();
                (
                    format!("alloc_inode({g:?}, {dir})"),
                    img.alloc_inode(g, dir).is_ok(),
                )
            }
            3 => {
                let ino = input.below(u64::from(info.inodes_count) + 4) as u32;
                let dir = input.bool();
                (
                    format!("free_inode({ino}, {dir})"),
                    img.free_inode(ino, dir).is_ok(),
                )
            }
            4 => {
                let p = path(&mut input);
                let mode = if input.u8() < 16 {
                    input.u16()
                } else {
                    0o100644
                };
                let r = img.create(&p, mode);
                if let (Ok(ino), Some(files)) = (&r, files.as_mut()) {
                    files.insert(*ino, Vec::new());
                }
                if let Ok(ino) = r {
                    match img.lookup(&p) {
                        Ok(found) => assert_eq!(found, ino, "create({p}) then lookup"),
                        Err(e) => panic!("create({p}) made inode {ino}, then lookup: {e:?}"),
                    }
                }
                (format!("create({p:?}, {mode:o})"), r.is_ok())
            }
            5 | 6 => {
                let p = path(&mut input);
                let ino = match img.lookup(&p) {
                    Ok(i) => i,
                    Err(_) => input.below(u64::from(info.inodes_count) + 2) as u32,
                };
                let bs = u64::from(info.block_size);
                let off = match input.u8() % 4 {
                    0 => input.below(64) * bs,
                    1 => input.below(1 << 20),
                    2 => input.edgy_u64(),
                    _ => 0,
                };
                if op == 5 {
                    let len = match input.u8() % 3 {
                        0 => input.below(40) * bs,
                        1 => input.below(1 << 18),
                        _ => input.edgy_u64(),
                    };
                    let keep = input.bool();
                    let r = img.fallocate(ino, off, len, keep);
                    if r.is_ok() && !keep {
                        model_resize(&mut files, ino, off + len, true);
                    }
                    (
                        format!("fallocate({p:?} = {ino}, {off}, {len}, {keep})"),
                        r.is_ok(),
                    )
                } else {
                    let r = img.truncate(ino, off);
                    if r.is_ok() {
                        model_resize(&mut files, ino, off, false);
                    }
                    (format!("truncate({p:?} = {ino}, {off})"), r.is_ok())
                }
            }
            7 => {
                let p = path(&mut input);
                let ino = img.lookup(&p);
                let r = img.unlink(&p);
                if let (Ok(_), Ok(ino), Some(files)) = (&r, ino, files.as_mut()) {
                    files.remove(&ino);
                }
                if r.is_ok() {
                    assert!(img.lookup(&p).is_err(), "unlink({p}) then lookup found it");
                }
                (format!("unlink({p:?})"), r.is_ok())
            }
            8 => {
                let r = img.flush();
                if r.is_ok() && clean {
                    reopen_clean(&tmp, "flush", files.as_ref());
                }
                ("flush".to_string(), r.is_ok())
            }
            10 => {
                let p = path(&mut input);
                let ino = img.lookup(&p).unwrap_or(0);
                let off = match input.u8() % 3 {
                    0 => input.below(16 * u64::from(info.block_size)),
                    1 => input.below(1 << 20),
                    _ => input.edgy_u64(),
                };
                let n = input.below(3 * u64::from(info.block_size)) as usize;
                let bytes: Vec<u8> = (0..n).map(|i| (i as u8) ^ 0x5A).collect();
                let r = img.write(ino, off, &bytes);
                if r.is_ok() && !bytes.is_empty() && files.is_some() {
                    let end = off + n as u64;
                    model_resize(&mut files, ino, end, true);
                    if let Some(d) = files.as_mut().and_then(|f| f.get_mut(&ino)) {
                        d[off as usize..end as usize].copy_from_slice(&bytes);
                    }
                    let mut back = vec![0u8; n];
                    let got = img.read(ino, off, &mut back);
                    assert!(
                        got.is_ok_and(|k| k == n) && back == bytes,
                        "write({p}) then read"
                    );
                }
                (format!("write({p:?} = {ino}, {off}, {n})"), r.is_ok())
            }
            11 => {
                let p = path(&mut input);
                let r = img.mkdir(&p, 0o755);
                // (Only while no raw free has handed a live block out again.)
                if let (Ok(ino), true) = (&r, files.is_some()) {
                    assert_eq!(img.lookup(&p).ok(), Some(*ino), "mkdir({p}) then lookup");
                }
                (format!("mkdir({p:?})"), r.is_ok())
            }
            12 => {
                let p = path(&mut input);
                let n = 1 + input.below(120) as usize;
                let target = vec![b't'; n];
                let r = img.symlink(&p, &target);
                if let (Ok(ino), true) = (&r, files.is_some()) {
                    assert_eq!(
                        img.read_link(*ino).ok(),
                        Some(target),
                        "symlink({p}) then read_link"
                    );
                }
                (format!("symlink({p:?}, {n} bytes)"), r.is_ok())
            }
            13 => {
                let (a, b) = (path(&mut input), path(&mut input));
                (format!("link({a:?}, {b:?})"), img.link(&a, &b).is_ok())
            }
            14 => {
                let (a, b) = (path(&mut input), path(&mut input));
                let ino = img.lookup(&a).ok();
                let replaced = img.lookup(&b).ok().filter(|&t| Some(t) != ino);
                let r = img.rename(&a, &b);
                if r.is_ok() && a != b && files.is_some() {
                    assert_eq!(img.lookup(&b).ok(), ino, "rename({a}, {b}) then lookup");
                    // The replaced inode's last link may be gone.
                    if let (Some(t), Some(files)) = (replaced, files.as_mut()) {
                        files.remove(&t);
                    }
                }
                (format!("rename({a:?}, {b:?})"), r.is_ok())
            }
            15 => {
                let p = path(&mut input);
                (format!("rmdir({p:?})"), img.rmdir(&p).is_ok())
            }
            _ => {
                let p = path(&mut input);
                let mut changed = false;
                if let Ok(ino) = img.lookup(&p) {
                    let _ = img.stat(ino);
                    let _ = img.read_dir(ino);
                    let mut buf = [0u8; 300];
                    let _ = img.read(ino, input.below(1 << 16), &mut buf);
                    let _ = img.read_link(ino);
                    // Extended attributes: parsed from what the edits left
                    // of the inode's extra space and its xattr block, then
                    // set (in the inode or a block) or removed, and read
                    // back.
                    let _ = img.xattrs(ino);
                    let name = ["user.a", "trusted.b", "security.selinux"][input.below(3) as usize];
                    if input.bool() {
                        let n = if input.bool() {
                            input.below(40)
                        } else {
                            input.below(3000)
                        } as usize;
                        let value = vec![input.u8(); n];
                        if img.set_xattr(ino, name, &value).is_ok() {
                            changed = true;
                            if files.is_some() {
                                assert_eq!(
                                    img.get_xattr(ino, name).ok().flatten(),
                                    Some(value),
                                    "set_xattr({p}, {name}) then get"
                                );
                            }
                        }
                    } else {
                        changed = img.remove_xattr(ino, name).is_ok();
                    }
                }
                ("lookup and xattrs".to_string(), changed)
            }
        };
        if ok && op <= 3 {
            files = None;
        }
        check_valid(&img, &what);
        if ok && clean {
            assert_clean(&img, &what);
        }
    }
    let flushed = img.flush();
    check_valid(&img, "the last flush");
    drop(img);
    if flushed.is_ok() && clean {
        reopen_clean(&tmp, "the last flush", files.as_ref());
    }
}
