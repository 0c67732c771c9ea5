//! The transaction layer: the block cache (`cache.rs`), the undo of a
//! failed operation (`undo.rs`), the redo log (`redo.rs`) and the flush.
//!
//! Every change since the last [`Image::flush`] belongs to one
//! transaction: operations change the in-memory metadata (each one
//! atomically: [`Image::atomically`] puts back what a failed operation
//! changed) and the flush commits all of them with one redo log and three
//! syncs, however many operations there were. File data is not logged:
//! it goes to the device as it is written (see `inode/data.rs`), and the
//! flush syncs it first.

pub(super) mod behind;
pub(super) mod cache;
pub(super) mod redo;
pub(super) mod undo;

use std::cell::OnceCell;
use std::vec::Vec;

use crate::ext4::error::{host_io, io, Ext4Error};
use crate::ext4::image::Image;
use crate::ext4::layout::SB_OFFSET;
use crate::ext4::mode::OpenMode;

use redo::Record;
use undo::Undo;

impl Image {
    /// Whether there are changes not yet flushed.
    pub fn is_dirty(&self) -> bool {
        self.dirty_sb
            || !self.dirty_gdt.is_empty()
            || !self.dirty_block.is_empty()
            || !self.dirty_inode.is_empty()
            || !self.pending_blocks.is_empty()
    }

    /// Writes every changed metadata block to the image, crash-safely: the
    /// blocks go to the redo log first (written, fsynced, directory
    /// fsynced), then in place, then the image is fsynced and the log
    /// removed (three syncs; a fourth first when file data was written).
    /// The removal is not fsynced: a log that a power failure brings back
    /// is replayed only while the image still holds, sector by sector,
    /// what the log writes or what was there before it (see `redo.rs`).
    /// Does nothing if nothing changed.
    ///
    /// On an error the changes stay in memory (a later `flush` retries them)
    /// and the image is either untouched (an error writing or syncing the
    /// log: the log is removed) or committed: once the log is durable, an
    /// error writing in place or syncing the image leaves the change to the
    /// log, which the next read-write [`Image::open`] replays, and the
    /// error's context says so. A log that cannot be removed once the image
    /// is synced is no error: the change is complete, and that log is
    /// replayed harmlessly (or found stale) at the next read-write open.
    ///
    /// # Errors
    /// [`Ext4Error::ReadOnly`] with changes on a read-only image (cannot
    /// happen: changes are refused earlier); [`Ext4Error::Io`] from any step.
    pub fn flush(&mut self) -> Result<(), Ext4Error> {
        if !self.is_dirty() {
            return Ok(());
        }
        if self.mode == OpenMode::ReadOnly {
            return Err(Ext4Error::ReadOnly);
        }
        // The cache's blocks are taken out while the flush writes them (and
        // put back if it fails), so the records borrow them: no copy.
        // A flush inside an operation commits part of it: a roll-back can
        // no longer return to the image on disk, so nothing may be written
        // behind until the operation ends (see `behind.rs`).
        if let Some(u) = self.undo.as_mut() {
            u.clean_start = false;
        }
        let pending = std::mem::take(&mut self.pending_blocks);
        let r = self.write_records(&pending);
        if let Err(e) = r {
            self.pending_blocks = pending;
            return Err(e);
        }
        // No block is pending now: no kept place is good any more.
        self.append_at = None;
        self.leaf_last.clear();
        self.dirty_sb = false;
        self.dirty_gdt.clear();
        self.dirty_block.clear();
        self.dirty_inode.clear();
        self.freed_since_flush = false;
        self.flushes += 1;
        self.behind_next = self.budget_blocks();
        Ok(())
    }

    /// Runs `f` as one operation: if it fails, every in-memory change it
    /// made (superblock, descriptors, bitmaps, cached blocks, what is
    /// marked dirty) is put back as it was, so a failed operation changes
    /// nothing and the next flush writes only what earlier operations did.
    /// Nested calls belong to the outermost one.
    pub(crate) fn atomically<R>(
        &mut self,
        f: impl FnOnce(&mut Image) -> Result<R, Ext4Error>,
    ) -> Result<R, Ext4Error> {
        if !self.begin_undo() {
            return f(self);
        }
        let r = f(self);
        self.end_undo(r.is_ok());
        if r.is_ok() {
            self.write_behind();
        }
        r
    }

    /// Starts keeping what changes for an undo, unless one is already
    /// open (then returns false: the changes belong to the open one). A
    /// caller that gets true must call [`Image::end_undo`].
    pub(crate) fn begin_undo(&mut self) -> bool {
        if self.undo.is_some() {
            return false;
        }
        self.undo = Some(std::boxed::Box::new(Undo {
            sb: self.sb.clone(),
            dirty_sb: self.dirty_sb,
            dirty_gdt: self.dirty_gdt.clone(),
            dirty_block: self.dirty_block.clone(),
            dirty_inode: self.dirty_inode.clone(),
            clean_start: !self.is_dirty(),
            ..Undo::default()
        }));
        true
    }

    /// Closes the undo [`Image::begin_undo`] opened: keeps the changes
    /// when `keep`, else puts everything back as it was.
    pub(crate) fn end_undo(&mut self, keep: bool) {
        if let Some(u) = self.undo.take() {
            if !keep {
                self.roll_back(*u);
            }
        }
    }

    /// Puts back what [`Image::atomically`] kept.
    fn roll_back(&mut self, u: Undo) {
        // A directory the failed operation made may be unmade.
        self.last_dir = None;
        self.append_at = None;
        self.leaf_last.clear();
        self.sb = u.sb;
        self.dirty_sb = u.dirty_sb;
        self.dirty_gdt = u.dirty_gdt;
        self.dirty_block = u.dirty_block;
        self.dirty_inode = u.dirty_inode;
        let size = self.info.desc_size as usize;
        for (g, raw) in u.descs {
            let off = g as usize * size;
            if let Some(d) = self.gdt.get_mut(off..off + size) {
                d.copy_from_slice(&raw);
            }
        }
        for ((g, inode), l) in u.bitmaps {
            let cache = &mut self.groups[g as usize];
            let cell = if inode {
                &mut cache.inode
            } else {
                &mut cache.block
            };
            *cell = l.map_or_else(OnceCell::new, OnceCell::from);
        }
        for (b, data) in u.blocks {
            match data {
                Some(d) => self.pending_blocks.insert(b, d),
                None => self.pending_blocks.remove(&b),
            };
        }
    }

    /// The writes a flush makes, in block order within each kind: the
    /// superblock, descriptor-table blocks, block bitmaps, inode bitmaps,
    /// then the block cache's pending blocks.
    fn write_records(
        &mut self,
        pending: &std::collections::BTreeMap<u64, Vec<u8>>,
    ) -> Result<(), Ext4Error> {
        let bs = u64::from(self.info.block_size);
        let mut records = self.metadata_records();
        // The block cache's blocks last. They never overlap the records
        // above: `write_block` refuses the superblock, descriptor-table and
        // bitmap blocks, and `validate` checks it.
        records.extend(pending.iter().map(|(&b, data)| Record {
            offset: b * bs,
            data: std::borrow::Cow::Borrowed(&data[..]),
            ..Record::default()
        }));
        if self.log_waiting {
            // A flush failed after its log was synced: complete it from
            // that log first (its bytes in place, synced, the log removed),
            // so this flush's log never replaces the only record of it.
            redo::replay_pending(&mut *self.dev)?;
            self.log_waiting = false;
        }
        let records = redo::changed(&*self.dev, &records)?;
        let dev = &mut *self.dev;
        if self.data_unsynced {
            // File data first: the log must not commit extents whose bytes
            // are still in flight (the kernel's data=ordered).
            dev.sync().map_err(io("fsync file data"))?;
            self.data_unsynced = false;
            self.data_since_writeback = 0;
        }
        if records.is_empty() {
            // Every block already holds its new bytes: no log needed.
            return Ok(());
        }
        // The log: contents, then the trailer that makes it complete. From
        // here until the log is removed the device's descriptors and bitmaps
        // may be half old, half new: write-behind waits for a flush that
        // completes (see `behind.rs`).
        self.log_waiting = true;
        self.committed = None;
        let log = dev.log_name();
        let logged = redo::write(dev, &self.info.uuid, &records)
            .map_err(host_io("write redo log", &log))
            .and_then(|()| dev.sync_log().map_err(host_io("fsync redo log", &log)));
        if let Err(e) = logged {
            // Nothing was written in place (an earlier failed flush was
            // completed above): without its log the image is as it was (a
            // log that reached the disk whole would otherwise be replayed
            // by the next open, committing what failed here).
            let _ = dev.remove_log();
            self.log_waiting = false;
            return Err(e);
        }
        // Committed: from here an error leaves the change to the log.
        let committed = |call: &str| {
            let context = std::format!(
                "{call} (the change is committed in the redo log {}: the next read-write open completes it)",
                log.display()
            );
            move |source| Ext4Error::Io {
                context: context.into(),
                source,
            }
        };
        for r in &records {
            dev.write_at(r.offset, &r.data)
                .map_err(committed("write image"))?;
        }
        dev.sync().map_err(committed("fsync image"))?;
        // The change is complete and durable; a log left behind is
        // replayed harmlessly (or found stale) by the next read-write open.
        let _ = dev.remove_log();
        self.log_waiting = false;
        Ok(())
    }

    /// The superblock, descriptor-table and bitmap records of a flush.
    fn metadata_records(&self) -> Vec<Record<'static>> {
        let bs = u64::from(self.info.block_size);
        let mut out = Vec::new();
        if self.dirty_sb {
            out.push(Record {
                offset: SB_OFFSET,
                data: self.sb.clone().into(),
                ..Record::default()
            });
        }
        for &b in &self.dirty_gdt {
            let s = b as usize * bs as usize;
            out.push(Record {
                offset: (self.info.gdt_start() + u64::from(b)) * bs,
                data: self
                    .gdt
                    .get(s..s + bs as usize)
                    .unwrap_or(&[])
                    .to_vec()
                    .into(),
                ..Record::default()
            });
        }
        for &g in &self.dirty_block {
            if let Some(l) = self.groups[g as usize].block.get() {
                out.push(Record {
                    offset: self.desc(g).block_bitmap() * bs,
                    data: l.to_bytes().into(),
                    ..Record::default()
                });
            }
        }
        for &g in &self.dirty_inode {
            if let Some(l) = self.groups[g as usize].inode.get() {
                out.push(Record {
                    offset: self.desc(g).inode_bitmap() * bs,
                    data: l.to_bytes().into(),
                    ..Record::default()
                });
            }
        }
        out
    }
}
