//! File contents: [`Image::write`] (`pwrite(2)`), [`Image::read`]
//! (`pread(2)`) and [`File`], a handle with `std::io::{Read, Write, Seek}`.
//!
//! # Where the bytes go
//!
//! File data does not go through the redo log: it is written straight to
//! the device, as the kernel's `data=ordered` mode writes it, and only the
//! metadata that makes it visible (the extents, `i_size`, `i_blocks`, the
//! bitmaps) is logged. Three rules keep that crash-safe:
//!
//! * bytes for a hole or an unwritten extent go to blocks no committed
//!   metadata points at as data yet, so a crash before the flush leaves
//!   them unreferenced (or still unwritten, reading as zeros);
//! * [`Image::flush`] fsyncs the data before it writes the redo log, so a
//!   committed extent never points at bytes still in flight;
//! * a write never lands on a block freed since the last flush (a block
//!   the image on disk still gives to its old owner): a write after frees
//!   flushes them first.
//!
//! Overwriting bytes that are already written happens in place, as with
//! `pwrite(2)` on the kernel's ext4: a crash in the middle may leave part
//! of the new bytes.
//!
//! # Unwritten extents and holes
//!
//! A write into a hole allocates blocks from the file's goal (just past
//! its last block, as an append) and maps them as written extents, merged
//! with their neighbours where they can be. A write into an unwritten
//! extent splits it and marks the written part initialised, as the kernel's
//! `ext4_ext_convert_to_initialized` does. Blocks that are new or were
//! unwritten get zeros around the bytes written, so they never expose old
//! contents. Reads return zeros for holes, unwritten extents and bytes past
//! the last written byte of a block.

use std::io;
use std::vec::Vec;

use crate::ext4::error::{invalid, io as io_err, Ext4Error};
use crate::ext4::flags::{ENCRYPT_FL, INLINE_DATA_FL};
use crate::ext4::image::Image;
use crate::ext4::inode::extent::{self, Extent};
use crate::ext4::inode::file::{ImageStore, ReadStore};
use crate::ext4::inode::space::holes;

/// How a stretch of logical blocks of a write is mapped before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Piece {
    logical: u64,
    physical: u64,
    len: u64,
    /// The blocks' contents are undefined (a new block, or an unwritten
    /// extent's): a partial write fills the rest with zeros.
    fresh: bool,
}

/// Most blocks between two runs of file data that [`Image::bridge_to`]
/// writes to join them.
const BRIDGE_BLOCKS: u64 = 8;

/// A block of zeros of the largest block size ext4 has (64 KiB).
static ZEROS: [u8; 1 << 16] = [0; 1 << 16];

/// File data written between two requests to the device to start writing
/// it back ([`Device::start_writeback`](crate::ext4::Device::start_writeback));
/// the count starts again when write-back was started elsewhere
/// ([`Image::writeback_started`]).
const WRITEBACK_EVERY: u64 = 8 << 20;

/// Where the bytes of a write come from.
#[derive(Clone, Copy, Debug)]
pub(super) enum Source<'a> {
    /// Bytes in memory.
    Bytes(&'a [u8]),
    /// `len` bytes of a host file from byte `at`: whole blocks are copied
    /// in the kernel where the device allows it (see `copy.rs`).
    File {
        file: &'a std::fs::File,
        at: u64,
        len: u64,
    },
}

impl Source<'_> {
    fn len(&self) -> u64 {
        match *self {
            Source::Bytes(b) => b.len() as u64,
            Source::File { len, .. } => len,
        }
    }

    /// Bytes `[a, b)` of the source (counted from its start).
    fn bytes(&self, a: u64, b: u64) -> Result<std::borrow::Cow<'_, [u8]>, Ext4Error> {
        match *self {
            Source::Bytes(d) => Ok(std::borrow::Cow::Borrowed(&d[a as usize..b as usize])),
            Source::File { file, at, .. } => {
                use std::os::unix::fs::FileExt;
                let mut v = std::vec![0u8; (b - a) as usize];
                file.read_exact_at(&mut v, at + a)
                    .map_err(io_err("read source file"))?;
                Ok(std::borrow::Cow::Owned(v))
            }
        }
    }
}

impl Image {
    /// Writes `data` at byte `offset` of regular file `ino`, as `pwrite(2)`:
    /// the file grows to `offset + data.len()` if that is past its end,
    /// holes before `offset` stay holes, and bytes between the old end and
    /// `offset` read as zeros. Blocks come from the file's goal (see
    /// [`Image::fallocate`]); see the module notes on crash safety. The
    /// mtime and ctime become now. Nothing reaches the image's metadata
    /// before [`Image::flush`].
    ///
    /// # Errors
    /// [`Ext4Error::NotARegularFile`]; [`Ext4Error::FileTooBig`];
    /// [`Ext4Error::NoSpace`] (checked before anything changes);
    /// [`Ext4Error::Unsupported`] for inline-data, block-mapped, encrypted
    /// or fs-verity files; [`Ext4Error::Io`]. On an error the metadata is as
    /// before; bytes already overwritten in place may stay.
    pub fn write(&mut self, ino: u32, offset: u64, data: &[u8]) -> Result<(), Ext4Error> {
        self.write_from(ino, offset, Source::Bytes(data))
    }

    /// [`Image::write`] of bytes from `src`.
    pub(super) fn write_from(
        &mut self,
        ino: u32,
        offset: u64,
        src: Source<'_>,
    ) -> Result<(), Ext4Error> {
        self.check_writable()?;
        if self.freed_since_flush {
            self.flush()?;
        }
        self.atomically(|img| img.write_op(ino, offset, src))
    }

    /// [`Image::write`], inside its undo.
    fn write_op(&mut self, ino: u32, offset: u64, data: Source<'_>) -> Result<(), Ext4Error> {
        let (mut root, inode) = self.root_of_file(ino)?;
        if inode.flags & ENCRYPT_FL != 0 {
            return Err(Ext4Error::Unsupported {
                feature: "writing an encrypted file",
            });
        }
        let len = data.len();
        let end = self.range_end(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let bs = u64::from(self.info.block_size);
        let (first, last) = (offset / bs, end.div_ceil(bs));
        let seed = self.seed_of(ino, inode.generation);
        let exts = extent::extents(&root, &mut ReadStore(self), seed)?;
        let holes = holes(&exts, first, last);
        let need: u64 = holes.iter().map(|(a, b)| b - a).sum();
        // Unwritten extents the write touches: each may split in three.
        let unwritten: Vec<Extent> = exts
            .iter()
            .filter(|e| e.unwritten && e.end() > first && u64::from(e.logical) < last)
            .copied()
            .collect();
        let est = holes.len() as u64
            + need / u64::from(Extent::max_len(false))
            + 2 * unwritten.len() as u64
            + 1;
        self.check_room(&root, &inode, need, est, len)?;
        if offset > inode.size {
            // The old last block's bytes past the old end read as zeros.
            self.zero_block_tail(&inode, &root, seed, inode.size, true)?;
        }
        // New blocks first, before any block is freed below (tree blocks a
        // split releases): the data written to them must not land on a
        // block the image on disk still uses.
        let goal = self.file_goal(ino, &root, seed)?;
        let mut pieces = self.alloc_pieces(goal, &holes)?;
        let data_blocks: u64 = pieces.iter().map(|p| p.len).sum();
        let mut store = ImageStore::new(self);
        if let Some(c0) = unwritten.first().map(|e| u64::from(e.logical).max(first)) {
            // Convert: unmap from the first unwritten block on and map the
            // same blocks again, the written part initialised.
            let tail: Vec<Extent> = exts.iter().filter(|e| e.end() > c0).copied().collect();
            extent::truncate(&mut root, &mut store, seed, c0 as u32)?;
            for e in tail {
                for part in split(e, c0, first, last) {
                    extent::insert(&mut root, &mut store, seed, part)?;
                }
            }
        }
        for p in &pieces {
            extent::insert(
                &mut root,
                &mut store,
                seed,
                Extent {
                    logical: p.logical as u32,
                    physical: p.physical,
                    len: p.len as u16,
                    unwritten: false,
                },
            )?;
        }
        let (added, freed) = (store.allocated, store.freed);
        // Every mapped stretch of the write, in logical order.
        for e in &exts {
            let (s, t) = (u64::from(e.logical).max(first), e.end().min(last));
            if s < t {
                pieces.push(Piece {
                    logical: s,
                    physical: e.physical + (s - u64::from(e.logical)),
                    len: t - s,
                    fresh: e.unwritten,
                });
            }
        }
        pieces.sort_unstable_by_key(|p| p.logical);
        for p in &pieces {
            self.write_piece(p, offset, &data)?;
        }
        let size = inode.size.max(end);
        let blocks =
            (inode.blocks + (data_blocks + added) * (bs / 512)).saturating_sub(freed * (bs / 512));
        self.write_file_fields(ino, size, blocks, &root)?;
        self.note_large_file(size);
        self.touch(ino, true)
    }

    /// New blocks for logical block ranges `runs` (`[first, end)`, in
    /// order), each run from `goal` on or just past the last piece, as
    /// many pieces as the free space and the extent length allow.
    fn alloc_pieces(
        &mut self,
        mut goal: u64,
        runs: &[(u64, u64)],
    ) -> Result<Vec<Piece>, Ext4Error> {
        let mut pieces = Vec::new();
        for &(mut a, b) in runs {
            while a < b {
                let want = (b - a).min(u64::from(Extent::max_len(false))) as u32;
                let g = (goal < self.info.blocks_count).then_some(goal);
                let (p, got) = self.alloc_run_from(g, want)?;
                pieces.push(Piece {
                    logical: a,
                    physical: p,
                    len: u64::from(got),
                    fresh: true,
                });
                a += u64::from(got);
                goal = p + u64::from(got);
            }
        }
        Ok(pieces)
    }

    /// Writes `data` into new, empty regular file `ino` whose extent
    /// root `root` the caller holds (the inode is not written here): as
    /// [`Image::write`] at offset 0, with the blocks that are all zero
    /// bytes left as holes (as `mke2fs -d` leaves them). Blocks come from
    /// the file's goal, run by run, and are mapped in `root`. Returns the
    /// file's `i_blocks` (512-byte units, extent-tree blocks included).
    ///
    /// # Errors
    /// [`Ext4Error::FileTooBig`]; [`Ext4Error::NoSpace`]; [`Ext4Error::Io`].
    /// The caller's undo puts back what an error leaves half done.
    pub(crate) fn write_new(
        &mut self,
        ino: u32,
        root: &mut [u8; crate::ext4::inode::extent::ROOT_SIZE],
        seed: Option<u32>,
        data: &[u8],
    ) -> Result<u64, Ext4Error> {
        if self.freed_since_flush {
            self.flush()?;
        }
        self.range_end(0, data.len() as u64)?;
        let bs = u64::from(self.info.block_size);
        let goal = self.file_goal(ino, root, seed)?;
        let pieces = self.alloc_pieces(goal, &nonzero_runs(data, bs as usize))?;
        let data_blocks: u64 = pieces.iter().map(|p| p.len).sum();
        let mut store = ImageStore::new(self);
        for p in &pieces {
            let e = Extent {
                logical: p.logical as u32,
                physical: p.physical,
                len: p.len as u16,
                unwritten: false,
            };
            extent::insert(root, &mut store, seed, e)?;
        }
        let tree = store.allocated;
        for p in &pieces {
            self.write_piece(p, 0, &Source::Bytes(data))?;
        }
        Ok((data_blocks + tree) * (bs / 512))
    }

    /// Writes the bytes of `data` (which starts at byte `offset` of the
    /// file) that fall in piece `p`: whole blocks straight from `data`, a
    /// partial first or last block merged with its old bytes (zeros if
    /// fresh). Blocks the block cache holds go through it.
    fn write_piece(&mut self, p: &Piece, offset: u64, data: &Source<'_>) -> Result<(), Ext4Error> {
        let bs = u64::from(self.info.block_size);
        let end = offset + data.len();
        let (lo, hi) = (p.logical * bs, (p.logical + p.len) * bs);
        let (from, to) = (offset.max(lo), end.min(hi));
        let pos = |byte: u64| p.physical * bs + (byte - lo);
        let bytes = |a: u64, b: u64| data.bytes(a - offset, b - offset);
        // The partial block at each end and the whole blocks between, in
        // ascending order (consecutive writes combine on the device).
        // The end of the block holding `from` (not `from` itself when it
        // is a block boundary: an aligned write has no partial head).
        let head_end = (from - from % bs + bs).min(to);
        let mut mid = (from, to);
        if from % bs != 0 || head_end - from < bs {
            self.merge_block(
                pos(from - from % bs),
                from % bs,
                &bytes(from, head_end)?,
                p.fresh,
            )?;
            mid.0 = head_end;
        }
        let tail = (mid.0 < mid.1 && to % bs != 0).then(|| to - to % bs);
        if let Some(t0) = tail {
            mid.1 = t0;
        }
        if mid.0 < mid.1 {
            let block = pos(mid.0) / bs;
            let copied = match *data {
                Source::File { file, at, .. } => {
                    self.copy_blocks_in(block, file, at + (mid.0 - offset), mid.1 - mid.0)?
                }
                Source::Bytes(_) => false,
            };
            if !copied {
                self.put_blocks(block, &bytes(mid.0, mid.1)?)?;
            }
        }
        if let Some(t0) = tail {
            self.merge_block(pos(t0), 0, &bytes(t0, to)?, p.fresh)?;
        }
        Ok(())
    }

    /// Copies `len` bytes (whole blocks) of host file `file` from byte `at`
    /// to the image from block `block` on, in the kernel; `false` (nothing
    /// that matters written) when the device is not a file, the block cache
    /// holds one of the blocks or the kernel cannot copy.
    fn copy_blocks_in(
        &mut self,
        block: u64,
        file: &std::fs::File,
        at: u64,
        len: u64,
    ) -> Result<bool, Ext4Error> {
        let bs = u64::from(self.info.block_size);
        if self
            .pending_blocks
            .range(block..block + len / bs)
            .next()
            .is_some()
        {
            return Ok(false);
        }
        let Some(img) = self.dev.file() else {
            return Ok(false);
        };
        let done = crate::ext4::device::kernel_copy(file, at, img, block * bs, len)
            .map_err(io_err("copy file data"))?;
        if done {
            self.note_data(len)?;
        }
        Ok(done)
    }

    /// Notes `n` bytes of file data written to the device: the next flush
    /// syncs them first, and every [`WRITEBACK_EVERY`] bytes the device is
    /// asked to start writing them back, so the disk works while the
    /// caller goes on and the flush's sync has less left to wait for.
    fn note_data(&mut self, n: u64) -> Result<(), Ext4Error> {
        self.data_unsynced = true;
        self.data_since_writeback += n;
        if self.data_since_writeback >= WRITEBACK_EVERY {
            self.data_since_writeback = 0;
            self.dev
                .start_writeback()
                .map_err(io_err("start writeback of file data"))?;
        }
        Ok(())
    }

    /// Notes that write-back of the image file was started from elsewhere
    /// (a populate's walking thread, while it waited): the next request
    /// from here waits for another [`WRITEBACK_EVERY`] bytes.
    pub(crate) fn writeback_started(&mut self) {
        self.data_since_writeback = 0;
    }

    /// Writes `bytes` at byte `within` of block `at / bs` (byte address
    /// `at`), keeping the rest of the block (or zeroing it if `fresh`).
    fn merge_block(
        &mut self,
        at: u64,
        within: u64,
        bytes: &[u8],
        fresh: bool,
    ) -> Result<(), Ext4Error> {
        let bs = u64::from(self.info.block_size);
        let block = at / bs;
        if fresh && !self.pending_blocks.contains_key(&block) {
            // Zeros around the bytes, written in line (the device combines
            // consecutive writes): no block-sized buffer to fill per file
            // tail, the common case of a populate.
            self.bridge_to(at)?;
            let (w, n) = (within as usize, bytes.len());
            let zeros = &ZEROS[..bs as usize];
            for (off, part) in [(0, &zeros[..w]), (w, bytes), (w + n, &zeros[w + n..])] {
                if !part.is_empty() {
                    self.dev
                        .write_at(at + off as u64, part)
                        .map_err(io_err("write file data"))?;
                }
            }
            return self.note_data(bs);
        }
        let mut b = if fresh {
            std::vec![0u8; bs as usize]
        } else {
            self.read_block(block)?.into_owned()
        };
        b[within as usize..within as usize + bytes.len()].copy_from_slice(bytes);
        self.put_blocks(block, &b)
    }

    /// Writes whole blocks `bytes` from block `block` on: to the block
    /// cache for blocks it holds (their pending version would otherwise
    /// overwrite these bytes at the flush), straight to the device for the
    /// rest.
    fn put_blocks(&mut self, block: u64, bytes: &[u8]) -> Result<(), Ext4Error> {
        let bs = u64::from(self.info.block_size);
        let n = bytes.len() as u64 / bs;
        let cached: Vec<u64> = self
            .pending_blocks
            .range(block..block + n)
            .map(|(&b, _)| b)
            .collect();
        let mut at = block;
        for c in cached.into_iter().chain(core::iter::once(block + n)) {
            if c > at {
                self.bridge_to(at * bs)?;
                let part = &bytes[((at - block) * bs) as usize..((c - block) * bs) as usize];
                self.dev
                    .write_at(at * bs, part)
                    .map_err(io_err("write file data"))?;
                self.note_data(part.len() as u64)?;
            }
            if c < block + n {
                let part = &bytes[((c - block) * bs) as usize..((c - block + 1) * bs) as usize];
                self.write_block(c, part)?;
            }
            at = c + 1;
        }
        Ok(())
    }

    /// When the device holds back writes that end at most
    /// [`BRIDGE_BLOCKS`] blocks before byte `to`, and every block between
    /// is pending in the cache and means nothing to the committed image (a
    /// new directory, extent or symlink block in free space, which
    /// write-behind may send early too), writes those blocks' pending bytes
    /// there, so the data at `to` joins the same device write instead of
    /// starting another (a populate's data comes in runs a few blocks
    /// apart). The blocks stay pending: the flush writes them again if
    /// they change. Nothing happens when any condition fails.
    fn bridge_to(&mut self, to: u64) -> Result<(), Ext4Error> {
        let bs = u64::from(self.info.block_size);
        let Some(end) = self.dev.waiting_end() else {
            return Ok(());
        };
        if self.log_waiting || end >= to || end % bs != 0 || to - end > BRIDGE_BLOCKS * bs {
            return Ok(());
        }
        let (first, last) = (end / bs, to / bs);
        for b in first..last {
            if !self.pending_blocks.contains_key(&b) || !matches!(self.unseen(b), Ok(true)) {
                return Ok(());
            }
        }
        for b in first..last {
            if let Some(data) = self.pending_blocks.get(&b) {
                self.dev
                    .write_at(b * bs, data)
                    .map_err(io_err("write a block ahead of the flush"))?;
            }
        }
        self.data_unsynced = true;
        Ok(())
    }

    /// Reads up to `buf.len()` bytes at byte `offset` of regular file
    /// `ino`, as `pread(2)`: returns how many bytes were read, fewer at the
    /// end of the file and 0 at or past it. Holes and unwritten extents read
    /// as zeros. Sees the image as the next flush will leave it. An
    /// inline-data file (`inline_data`) reads from its inode and its
    /// `system.data` attribute.
    ///
    /// # Errors
    /// [`Ext4Error::NotARegularFile`]; [`Ext4Error::Unsupported`] for
    /// block-mapped or encrypted files; [`Ext4Error::Corrupt`]
    /// or [`Ext4Error::BadChecksum`] for a bad extent tree; [`Ext4Error::Io`].
    pub fn read(&self, ino: u32, offset: u64, buf: &mut [u8]) -> Result<usize, Ext4Error> {
        let inode = self.inode(ino)?;
        if inode.flags & INLINE_DATA_FL != 0 && inode.is_file() {
            let all = self.inline_bytes(&inode)?;
            let from = (offset.min(all.len() as u64)) as usize;
            let n = (all.len() - from).min(buf.len());
            buf[..n].copy_from_slice(&all[from..from + n]);
            return Ok(n);
        }
        let (root, inode) = self.root_of_file(ino)?;
        if inode.flags & ENCRYPT_FL != 0 {
            return Err(Ext4Error::Unsupported {
                feature: "reading an encrypted file",
            });
        }
        if offset >= inode.size {
            return Ok(0);
        }
        let n = (inode.size - offset).min(buf.len() as u64) as usize;
        let buf = &mut buf[..n];
        buf.fill(0);
        let bs = u64::from(self.info.block_size);
        let end = offset + n as u64;
        let seed = self.seed_of(ino, inode.generation);
        let exts = extent::extents(&root, &mut ReadStore(self), seed)?;
        for e in exts.iter().filter(|e| !e.unwritten) {
            let (lo, hi) = (u64::from(e.logical) * bs, e.end() * bs);
            let (from, to) = (offset.max(lo), end.min(hi));
            if from >= to {
                continue;
            }
            let phys = e.physical * bs + (from - lo);
            let out = &mut buf[(from - offset) as usize..(to - offset) as usize];
            self.dev
                .read_at(phys, out)
                .map_err(io_err("read file data"))?;
            // Blocks the cache holds read as they will be after the flush.
            let (b0, b1) = (phys / bs, (phys + out.len() as u64).div_ceil(bs));
            for (&b, blk) in self.pending_blocks.range(b0..b1) {
                let (s, t) = (
                    (b * bs).max(phys),
                    ((b + 1) * bs).min(phys + out.len() as u64),
                );
                out[(s - phys) as usize..(t - phys) as usize]
                    .copy_from_slice(&blk[(s - b * bs) as usize..(t - b * bs) as usize]);
            }
        }
        Ok(n)
    }

    /// The contents of an inline-data inode (`inline_data` feature): the
    /// 60 bytes of `i_block`, then the value of its `system.data`
    /// attribute, up to `i_size`.
    pub(crate) fn inline_bytes(
        &self,
        inode: &crate::ext4::inode::Inode,
    ) -> Result<Vec<u8>, Ext4Error> {
        let mut all = inode.block.to_vec();
        if let Some(v) = self.get_xattr(inode.number, "system.data")? {
            all.extend_from_slice(&v);
        }
        let size = usize::try_from(inode.size).unwrap_or(usize::MAX);
        if all.len() < size {
            return Err(crate::ext4::error::corrupt(
                "i_size",
                None,
                inode.size,
                "past the inline data",
            ));
        }
        all.truncate(size);
        Ok(all)
    }

    /// A handle on regular file `ino` at offset 0, with `std::io::Read`,
    /// `Write` and `Seek` ([`File`]).
    ///
    /// # Errors
    /// As [`Image::read`] for the inode.
    pub fn file(&mut self, ino: u32) -> Result<File<'_>, Ext4Error> {
        let inode = self.inode(ino)?;
        if !(inode.is_file() && inode.flags & INLINE_DATA_FL != 0) {
            // (An inline file reads; its writes are refused.)
            self.root_of_file(ino)?;
        }
        Ok(File {
            img: self,
            ino,
            pos: 0,
        })
    }
}

/// The runs of blocks of `data` (`bs` bytes each, the last one maybe
/// short) that are not all zero bytes, as `[first, end)` block numbers.
pub(crate) fn nonzero_runs(data: &[u8], bs: usize) -> Vec<(u64, u64)> {
    let level = crate::arch::Level::detect();
    let zero = |i: usize| {
        crate::migration::zero::is_zero(level, &data[i * bs..((i + 1) * bs).min(data.len())])
    };
    let n = data.len().div_ceil(bs);
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for i in (0..n).filter(|&i| !zero(i)) {
        match runs.last_mut() {
            Some(r) if r.1 == i as u64 => r.1 += 1,
            _ => runs.push((i as u64, i as u64 + 1)),
        }
    }
    runs
}

/// The parts of extent `e` from logical block `c0` on, split at `first`
/// and `last`: the part inside `[first, last)` written, the rest as it was.
fn split(e: Extent, c0: u64, first: u64, last: u64) -> impl Iterator<Item = Extent> {
    let (s, t) = (u64::from(e.logical).max(c0), e.end());
    let cuts = [s, first.clamp(s, t), last.clamp(s, t), t];
    (0..3).filter_map(move |i| {
        let (a, b) = (cuts[i], cuts[i + 1]);
        (a < b).then(|| Extent {
            logical: a as u32,
            physical: e.physical + (a - u64::from(e.logical)),
            len: (b - a) as u16,
            unwritten: e.unwritten && i != 1,
        })
    })
}

/// An open regular file of an [`Image`]: `Read`, `Write` and `Seek` over
/// [`Image::read`] and [`Image::write`], so `std::io::copy` streams a
/// large file in or out. `Write::flush` flushes the image.
///
/// ```no_run
/// use spacekit::ext4::{Image, OpenMode};
/// use std::io::Write;
///
/// let mut img = Image::open("fs.img", OpenMode::ReadWrite)?;
/// let ino = img.create("/hello.txt", 0o644)?;
/// img.file(ino)?.write_all(b"hello\n")?;
/// img.flush()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct File<'a> {
    img: &'a mut Image,
    ino: u32,
    pos: u64,
}

impl File<'_> {
    /// The inode number.
    pub fn ino(&self) -> u32 {
        self.ino
    }
}

fn to_io(e: Ext4Error) -> io::Error {
    match e {
        Ext4Error::Io { source, .. } => source,
        e => io::Error::other(e),
    }
}

impl io::Read for File<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.img.read(self.ino, self.pos, buf).map_err(to_io)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl io::Write for File<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.img.write(self.ino, self.pos, buf).map_err(to_io)?;
        self.pos += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.img.flush().map_err(to_io)
    }
}

impl io::Seek for File<'_> {
    fn seek(&mut self, to: io::SeekFrom) -> io::Result<u64> {
        let base = match to {
            io::SeekFrom::Start(p) => {
                self.pos = p;
                return Ok(p);
            }
            io::SeekFrom::Current(d) => (self.pos, d),
            io::SeekFrom::End(d) => (self.img.inode(self.ino).map_err(to_io)?.size, d),
        };
        let p = base
            .0
            .checked_add_signed(base.1)
            .ok_or_else(|| to_io(invalid("offset", base.0, "seek before the start")))?;
        self.pos = p;
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use crate::ext4::{AllocRequest, Image, OpenMode};

    /// Block `b` of the image file as the file holds it (past the device's
    /// combining).
    fn on_file(path: &std::path::Path, b: u64, bs: usize) -> Vec<u8> {
        use std::os::unix::fs::FileExt;
        let mut buf = std::vec![0u8; bs];
        std::fs::File::open(path)
            .unwrap()
            .read_exact_at(&mut buf, b * bs as u64)
            .unwrap();
        buf
    }

    #[test]
    fn data_runs_bridge_new_pending_blocks_but_not_committed_ones() {
        let Some((dir, path)) = crate::ext4::tx::cache::tests::image("bridge") else {
            std::eprintln!("skipping: mkfs.ext4 not found");
            return;
        };
        let mut img = Image::open(&path, OpenMode::ReadWrite).unwrap();
        let bs = img.info.block_size as usize;
        let (s, _) = img.free_extents(0).unwrap()[0];
        let run = img
            .alloc_blocks(AllocRequest {
                goal: Some(s),
                len: 8,
                align: 1,
            })
            .unwrap();
        // New block run + 2 between two runs of data: bridged (its pending
        // bytes on the file with the data, before any flush).
        img.put_blocks(run, &std::vec![0x11; 2 * bs]).unwrap();
        img.write_block(run + 2, std::vec![0x22; bs]).unwrap();
        img.put_blocks(run + 3, &std::vec![0x33; bs]).unwrap();
        assert_eq!(img.dev.waiting_end(), Some((run + 4) * bs as u64));
        img.dev.sync().unwrap();
        assert!(
            on_file(&path, run + 2, bs) == std::vec![0x22; bs],
            "bridged"
        );
        // After the flush the run is in the committed bitmap: block run + 5
        // between data is not written before the next flush logs it.
        img.flush().unwrap();
        let before = on_file(&path, run + 5, bs);
        img.put_blocks(run + 4, &std::vec![0x44; bs]).unwrap();
        img.write_block(run + 5, std::vec![0x55; bs]).unwrap();
        img.put_blocks(run + 6, &std::vec![0x66; bs]).unwrap();
        img.dev.sync().unwrap();
        assert!(on_file(&path, run + 5, bs) == before, "a committed block");
        assert!(on_file(&path, run + 6, bs) == std::vec![0x66; bs]);
        img.flush().unwrap();
        assert!(
            on_file(&path, run + 5, bs) == std::vec![0x55; bs],
            "flushed"
        );
        drop(img);
        let _ = std::fs::remove_dir_all(dir);
    }
}
