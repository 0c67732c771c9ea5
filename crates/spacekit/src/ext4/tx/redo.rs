//! The redo log that makes [`super::Image::flush`] crash-safe.
//!
//! Format (all integers little-endian):
//!
//! ```text
//! 0   8   magic "SKREDO01"
//! 8   4   version (3; versions 1 and 2 are still replayed)
//! 12  4   number of records
//! 16  8   total length of the log in bytes, trailer included
//! 24  16  s_uuid of the file system the log belongs to
//! 40  ... records: offset u64, length u32, then (versions 2 and 3) one
//!         u32 per 512-byte sector of the record (the last one may be
//!         shorter): the standard CRC-32C of that sector as the image held
//!         it before the flush, then the `length` bytes to write at that
//!         byte offset: as they are (versions 1 and 2), or (version 3) a
//!         mask of one bit per sector (bit i of byte i/8), set for a
//!         sector whose bytes are all one value, followed by each sector
//!         in order: that one byte for a set bit, the sector's bytes for a
//!         clear one
//! end-8 4 CRC-32C (standard) of every byte before it
//! end-4 4 magic "SKOK"
//! ```
//!
//! Version 3's mask keeps the log small where a flush fills whole sectors
//! with one value: a block bitmap a large fallocate or write sets from end
//! to end is 4 KiB of 0xff in place and nine bytes in the log, so the log
//! of a 6 GiB fallocate on 4 KiB blocks is 12 KB, not 208 KB. A spacekit
//! older than version 3 logs does not know the version and discards such
//! a log; from this version on a complete log of a newer version is kept
//! and the open refused ([`Ext4Error::RedoLogMismatch`]), since it may be
//! the only record of a flush cut short.
//!
//! A record is a run of 512-byte sectors that the flush changes: sectors
//! of a changed block that already hold their new bytes are neither logged
//! nor written (see [`changed`]).
//!
//! A log is *complete* when its length, both magics and the CRC agree; only
//! a complete log is replayed. Because the image is written only after the
//! log is complete and fsynced, an incomplete log means the image was not
//! touched and is discarded.
//!
//! A complete log is also *current* only while every sector it covers
//! holds either its new bytes or the bytes it had before the flush (the
//! `before` sums): that is all a crash during the flush can leave, as a
//! disk writes a sector whole or not at all. The flush removes the log
//! without fsyncing its directory (one fsync fewer per flush), so after a
//! power failure a finished flush's log can come back; if another tool
//! (the kernel, e2fsck, debugfs) changed any of its blocks in between, the
//! log is *stale* and is discarded instead of replayed over that tool's
//! work. Replaying a current log is harmless whether or not the flush had
//! finished: it writes the same bytes again. (A tool that puts a block
//! back exactly as it was before the flush cannot be told apart from a
//! flush that had not reached it.) A log some of whose sectors hold
//! neither their new nor their old bytes while others still hold their
//! old ones records a flush cut short that another tool wrote over: it is
//! neither replayed nor discarded, and every open is refused
//! ([`Ext4Error::RedoLogMismatch`]) until someone checks the image and
//! removes the log.

use std::borrow::Cow;
use std::vec::Vec;

use crate::ext4::device::Device;

use crate::crc32c;
use crate::ext4::error::{io, Ext4Error};
use crate::ext4::layout::{sb, SB_OFFSET};

const MAGIC: &[u8; 8] = b"SKREDO01";
const END_MAGIC: &[u8; 4] = b"SKOK";
const VERSION: u32 = 3;
/// The unit a disk writes whole; `before` sums are kept per sector.
pub(crate) const SECTOR: usize = 512;
const HEADER: usize = 40;
const TRAILER: usize = 8;

/// One write: `data` at byte `offset` of the image (borrowed from the
/// block cache by a flush, owned when decoded).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Record<'a> {
    pub(crate) offset: u64,
    pub(crate) data: Cow<'a, [u8]>,
    /// The CRC-32C of each sector of the range as the image held it before
    /// the flush (see [`changed`]); empty in a version 1 log.
    pub(crate) before: Vec<u32>,
}

/// What of `records` the flush must write: each record cut down to its
/// runs of 512-byte sectors whose bytes differ from what `dev` holds now
/// (a block where one inode or one bitmap word changed is one sector in
/// the log and in place, not a whole block: less to write and sync, most
/// of all with 64 KiB blocks), each with the `before` sums of its
/// sectors. Sectors that hold their new bytes already need no write, and
/// a crash cannot change them. Called before the flush writes anything.
///
/// # Errors
/// An I/O error reading the image.
pub(crate) fn changed<'r>(
    dev: &dyn Device,
    records: &'r [Record<'_>],
) -> Result<Vec<Record<'r>>, Ext4Error> {
    /// Most bytes one read of adjacent records takes.
    const SPAN: usize = 1 << 20;
    let mut out = Vec::new();
    let mut span = Vec::new();
    let mut k = 0;
    while k < records.len() {
        // Records that follow each other on the device (a flex group's
        // bitmaps, a run of inode-table blocks) in one read, without
        // read-ahead past them.
        let start = records[k].offset;
        let mut end = k + 1;
        let mut len = records[k].data.len();
        while end < records.len()
            && records[end].offset == start + len as u64
            && len + records[end].data.len() <= SPAN
        {
            len += records[end].data.len();
            end += 1;
        }
        span.resize(len, 0);
        dev.read_exact_range(start, &mut span)
            .map_err(io("read image before the flush"))?;
        let mut at = 0;
        for r in &records[k..end] {
            changed_sectors(r, &span[at..at + r.data.len()], &mut out);
            at += r.data.len();
        }
        k = end;
    }
    Ok(out)
}

/// Appends to `out` the runs of sectors of `r` whose bytes differ from
/// `now` (what the image holds under `r`), with their `before` sums.
fn changed_sectors<'r>(r: &'r Record<'_>, now: &[u8], out: &mut Vec<Record<'r>>) {
    let len = r.data.len();
    let sector = |i: usize| i * SECTOR..((i + 1) * SECTOR).min(len);
    let n = len.div_ceil(SECTOR);
    let mut i = 0;
    while i < n {
        if r.data[sector(i)] == now[sector(i)] {
            i += 1;
            continue;
        }
        let first = i;
        while i < n && r.data[sector(i)] != now[sector(i)] {
            i += 1;
        }
        let (a, b) = (sector(first).start, sector(i - 1).end);
        out.push(Record {
            offset: r.offset + a as u64,
            data: Cow::Borrowed(&r.data[a..b]),
            before: now[a..b].chunks(SECTOR).map(crc32c::checksum).collect(),
        });
    }
}

/// What the image holds under a complete log (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Under {
    /// Every sector holds its new bytes or its bytes from before the
    /// flush: replay it (a version 1 log is always current).
    Current,
    /// Some sector holds neither, and none its old bytes: the flush had
    /// finished (every sector new) before another program wrote; the log
    /// came back after a power failure. Discard it.
    Stale,
    /// Some sector holds neither, and some still their old bytes: the
    /// flush was cut short and another program has written since.
    /// Replaying could undo that program's changes, discarding would keep
    /// the flush half done: keep the log and refuse.
    Conflict,
}

/// What the image holds under `records` (see [`Under`]).
fn under(dev: &dyn Device, records: &[Record<'_>]) -> Result<Under, Ext4Error> {
    let mut buf = Vec::new();
    let (mut foreign, mut old_seen) = (false, false);
    for r in records.iter().filter(|r| !r.before.is_empty()) {
        buf.resize(r.data.len(), 0);
        dev.read_at(r.offset, &mut buf).map_err(io("read image"))?;
        let sectors = buf.chunks(SECTOR).zip(r.data.chunks(SECTOR));
        for ((now, new), &old) in sectors.zip(&r.before) {
            if now != new {
                if crc32c::checksum(now) == old {
                    old_seen = true;
                } else {
                    foreign = true;
                }
            }
        }
    }
    Ok(match (foreign, old_seen) {
        (false, _) => Under::Current,
        (true, false) => Under::Stale,
        (true, true) => Under::Conflict,
    })
}

/// The refusal of a log under [`Under::Conflict`].
const CONFLICT: &str = "the flush it records was cut short and another program has written to \
    the image since: replaying it could undo that program's changes, discarding it leaves the \
    flush half done; check the image (e2fsck -fn), then remove the log or restore a copy";

/// Serialises a log; returns the bytes and where the trailer starts.
#[cfg(test)]
pub(crate) fn encode(uuid: &[u8; 16], records: &[Record<'_>]) -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    let trailer = emit(uuid, records, |b| {
        out.extend_from_slice(b);
        Ok(())
    })
    .unwrap_or_default();
    let trailer_at = out.len();
    out.extend_from_slice(&trailer);
    (out, trailer_at)
}

/// Writes the log to `dev`'s log file in pieces of up to 1 MiB (never the
/// whole log in memory): its contents, then the trailer that makes it
/// complete (two steps, so a log cut short by a crash is never complete).
///
/// # Errors
/// An I/O error writing the log.
pub(crate) fn write(
    dev: &mut dyn Device,
    uuid: &[u8; 16],
    records: &[Record<'_>],
) -> std::io::Result<()> {
    const PIECE: usize = 1 << 20;
    let mut buf: Vec<u8> = Vec::with_capacity(PIECE);
    let mut at = 0u64;
    let trailer = emit(uuid, records, |b| {
        if buf.len() + b.len() > PIECE && !buf.is_empty() {
            dev.write_log(at, &buf)?;
            at += buf.len() as u64;
            buf.clear();
        }
        if b.len() >= PIECE {
            dev.write_log(at, b)?;
            at += b.len() as u64;
        } else {
            buf.extend_from_slice(b);
        }
        Ok(())
    })?;
    if !buf.is_empty() {
        dev.write_log(at, &buf)?;
        at += buf.len() as u64;
    }
    dev.write_log(at, &trailer)
}

/// Hands the log's contents to `sink` piece by piece (header, then each
/// record's header, sums and bytes) and returns its trailer: the CRC-32C
/// of everything before it and the end magic.
fn emit(
    uuid: &[u8; 16],
    records: &[Record<'_>],
    mut sink: impl FnMut(&[u8]) -> std::io::Result<()>,
) -> std::io::Result<[u8; TRAILER]> {
    // Each sector's fill byte, found once for the length and the bytes.
    let fills: Vec<Vec<Option<u8>>> = records
        .iter()
        .map(|r| r.data.chunks(SECTOR).map(fill).collect())
        .collect();
    let body: usize = records
        .iter()
        .zip(&fills)
        .map(|(r, f)| {
            let n = f.len();
            let payload: usize = r
                .data
                .chunks(SECTOR)
                .zip(f)
                .map(|(s, f)| if f.is_some() { 1 } else { s.len() })
                .sum();
            12 + 4 * n + n.div_ceil(8) + payload
        })
        .sum();
    let total = HEADER + body + TRAILER;
    let mut crc = !0u32;
    let mut put = |b: &[u8]| {
        crc = crc32c::raw(crc, b);
        sink(b)
    };
    let mut head = Vec::with_capacity(HEADER);
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&VERSION.to_le_bytes());
    head.extend_from_slice(&(records.len() as u32).to_le_bytes());
    head.extend_from_slice(&(total as u64).to_le_bytes());
    head.extend_from_slice(uuid);
    put(&head)?;
    let mut rec = Vec::new();
    for (r, fills) in records.iter().zip(&fills) {
        rec.clear();
        rec.extend_from_slice(&r.offset.to_le_bytes());
        rec.extend_from_slice(&(r.data.len() as u32).to_le_bytes());
        debug_assert_eq!(r.before.len(), r.data.len().div_ceil(SECTOR));
        for s in (0..r.data.len().div_ceil(SECTOR)).map(|i| r.before.get(i).copied()) {
            rec.extend_from_slice(&s.unwrap_or(0).to_le_bytes());
        }
        // The fill mask, then the sectors: runs of literal sectors in one
        // piece, each filled sector as its byte.
        let mask_at = rec.len();
        rec.resize(mask_at + fills.len().div_ceil(8), 0);
        for (i, f) in fills.iter().enumerate() {
            if f.is_some() {
                rec[mask_at + i / 8] |= 1 << (i % 8);
            }
        }
        put(&rec)?;
        let mut i = 0;
        while i < fills.len() {
            if let Some(b) = fills[i] {
                put(&[b])?;
                i += 1;
                continue;
            }
            let first = i;
            while i < fills.len() && fills[i].is_none() {
                i += 1;
            }
            put(&r.data[first * SECTOR..(i * SECTOR).min(r.data.len())])?;
        }
    }
    let mut trailer = [0u8; TRAILER];
    trailer[..4].copy_from_slice(&(!crc).to_le_bytes());
    trailer[4..].copy_from_slice(END_MAGIC);
    Ok(trailer)
}

/// The byte every byte of `sector` holds, if they are all one value
/// (logged as that byte alone in a version 3 log).
fn fill(sector: &[u8]) -> Option<u8> {
    let &b = sector.first()?;
    // No early exit, so the loop vectorises.
    (sector.iter().fold(0, |acc, &x| acc | (x ^ b)) == 0).then_some(b)
}

/// The version of a complete log (length, both magics and the CRC agree,
/// whatever the version); `None` if it is incomplete or corrupt.
fn complete_version(bytes: &[u8]) -> Option<u32> {
    if bytes.len() < HEADER + TRAILER || bytes.get(..8)? != MAGIC {
        return None;
    }
    if bytes.get(16..24)? != (bytes.len() as u64).to_le_bytes() {
        return None;
    }
    let trailer_at = bytes.len() - TRAILER;
    if bytes.get(trailer_at + 4..)? != END_MAGIC
        || u32_at(bytes, trailer_at)? != crc32c::checksum(bytes.get(..trailer_at)?)
    {
        return None;
    }
    u32_at(bytes, 8)
}

/// The little-endian `u32` at byte `o`, if the log is long enough.
fn u32_at(bytes: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        bytes.get(o..o.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// The little-endian `u64` at byte `o`, if the log is long enough.
fn u64_at(bytes: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        bytes.get(o..o.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// Why a complete log written by a newer spacekit is kept, not replayed
/// nor removed: it may be the only record of a flush cut short.
const NEWER: &str = "the log is complete but of a newer format than this spacekit reads; open the image with the spacekit that wrote it";

/// Parses a complete log; `None` if it is incomplete or corrupt in any way
/// or of a version this code does not know.
pub(crate) fn decode(bytes: &[u8]) -> Option<([u8; 16], Vec<Record<'static>>)> {
    let version = complete_version(bytes)?;
    if !(1..=VERSION).contains(&version) {
        return None;
    }
    let trailer_at = bytes.len() - TRAILER;
    let mut uuid = [0u8; 16];
    uuid.copy_from_slice(bytes.get(24..40)?);
    let n = u32_at(bytes, 12)?;
    let mut records = Vec::new();
    let mut at = HEADER;
    for _ in 0..n {
        let offset = u64_at(bytes, at)?;
        let len = u32_at(bytes, at + 8)? as usize;
        at += 12;
        let mut before = Vec::new();
        if version >= 2 {
            for _ in 0..len.div_ceil(SECTOR) {
                before.push(u32_at(bytes, at)?);
                at += 4;
            }
        }
        let data = if version >= 3 {
            let n = len.div_ceil(SECTOR);
            let mask = bytes.get(at..at + n.div_ceil(8))?;
            at += n.div_ceil(8);
            // At most one byte of log per filled sector: never trust `len`
            // for more than the log can hold.
            let mut data = Vec::with_capacity(len.min(bytes.len().saturating_sub(at) * SECTOR));
            for i in 0..n {
                let want = SECTOR.min(len - i * SECTOR);
                if mask[i / 8] >> (i % 8) & 1 == 1 {
                    data.resize(data.len() + want, *bytes.get(at)?);
                    at += 1;
                } else {
                    data.extend_from_slice(bytes.get(at..at.checked_add(want)?)?);
                    at += want;
                }
            }
            // Mask bits past the last sector must be clear.
            if !n.is_multiple_of(8) && mask[n / 8] >> (n % 8) != 0 {
                return None;
            }
            Cow::Owned(data)
        } else {
            let data = Cow::Owned(bytes.get(at..at.checked_add(len)?)?.to_vec());
            at += len;
            data
        };
        records.push(Record {
            offset,
            data,
            before,
        });
    }
    (at == trailer_at).then_some((uuid, records))
}

/// Whether a complete, current log is waiting on `dev` (an incomplete one
/// is not: the image was never touched under it; nor is a stale one: see
/// the module doc). A log the image conflicts with is
/// [`Ext4Error::RedoLogMismatch`].
pub(crate) fn pending(dev: &dyn Device) -> Result<bool, Ext4Error> {
    let log = dev.read_log().map_err(io("read redo log"))?;
    let Some(bytes) = log.as_deref() else {
        return Ok(false);
    };
    newer_kept(dev, bytes)?;
    match decode(bytes) {
        Some((_, records)) => match under(dev, &records)? {
            Under::Current => Ok(true),
            Under::Stale => Ok(false),
            Under::Conflict => Err(Ext4Error::RedoLogMismatch {
                path: dev.log_name(),
                reason: CONFLICT,
            }),
        },
        None => Ok(false),
    }
}

/// Refuses a complete log of a newer format ([`NEWER`]), leaving it where
/// it is.
fn newer_kept(dev: &dyn Device, bytes: &[u8]) -> Result<(), Ext4Error> {
    match complete_version(bytes) {
        Some(v) if v > VERSION => Err(Ext4Error::RedoLogMismatch {
            path: dev.log_name(),
            reason: NEWER,
        }),
        _ => Ok(()),
    }
}

/// Replays a complete, current log on `dev` into its image, syncs the
/// image and removes the log; removes an incomplete or stale log. Called
/// before anything else reads the image.
pub(crate) fn replay(dev: &mut dyn Device) -> Result<(), Ext4Error> {
    replay_with(dev, false)
}

/// [`replay`] for a flush that follows one which failed after its log was
/// synced: the log must be there, complete and current (nothing else has
/// written the image since); anything else is an error, and the log is
/// kept.
pub(crate) fn replay_pending(dev: &mut dyn Device) -> Result<(), Ext4Error> {
    replay_with(dev, true)
}

fn replay_with(dev: &mut dyn Device, strict: bool) -> Result<(), Ext4Error> {
    let gone = || Ext4Error::RedoLogMismatch {
        path: dev.log_name(),
        reason: "the log of the flush that failed is gone or damaged",
    };
    let Some(bytes) = dev.read_log().map_err(io("read redo log"))? else {
        if strict {
            return Err(gone());
        }
        return Ok(());
    };
    newer_kept(dev, &bytes)?;
    let Some((uuid, records)) = decode(&bytes) else {
        if strict {
            return Err(gone());
        }
        return dev.remove_log().map_err(io("remove redo log"));
    };
    let mismatch = |reason| Ext4Error::RedoLogMismatch {
        path: dev.log_name(),
        reason,
    };
    let image_len = dev.len().map_err(io("size image"))?;
    let mut have = [0u8; 16];
    let uuid_at = SB_OFFSET + sb::UUID as u64;
    if image_len < uuid_at + 16 {
        return Err(mismatch("the image is too short to hold a superblock"));
    }
    dev.read_at(uuid_at, &mut have)
        .map_err(io("read superblock"))?;
    if have != uuid {
        return Err(mismatch(
            "the log belongs to a file system with another UUID",
        ));
    }
    if records.iter().any(|r| {
        r.offset
            .checked_add(r.data.len() as u64)
            .is_none_or(|end| end > image_len)
    }) {
        return Err(mismatch("a record writes past the end of the image"));
    }
    match under(dev, &records)? {
        Under::Current => {}
        Under::Stale if strict => return Err(gone()),
        Under::Stale => return dev.remove_log().map_err(io("remove stale redo log")),
        Under::Conflict => return Err(mismatch(CONFLICT)),
    }
    for r in &records {
        dev.write_at(r.offset, &r.data)
            .map_err(io("replay redo log"))?;
    }
    dev.sync().map_err(io("fsync image"))?;
    dev.remove_log().map_err(io("remove redo log"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_changed_sectors_are_logged() {
        let mut disk = vec![7u8; 8192];
        disk[4096..].fill(8);
        let dev = crate::ext4::MemDevice::new(disk.clone());
        // One 4 KiB block: sector 1 changed, sectors 3 and 4 changed (one
        // run), the rest as on disk; the next block, which holds other
        // bytes than the first, unchanged (both read in one call, each
        // compared with its own part).
        let mut new = disk[..4096].to_vec();
        new[600] = 1;
        new[3 * 512] = 2;
        new[4 * 512 + 511] = 3;
        let recs = vec![
            Record {
                offset: 0,
                data: new.clone().into(),
                before: Vec::new(),
            },
            Record {
                offset: 4096,
                data: disk[4096..].to_vec().into(),
                before: Vec::new(),
            },
        ];
        let got = changed(&dev, &recs).unwrap();
        let runs: Vec<(u64, usize)> = got.iter().map(|r| (r.offset, r.data.len())).collect();
        assert_eq!(runs, vec![(512, 512), (1536, 1024)]);
        assert_eq!(&got[1].data[..], &new[1536..2560]);
        let old = crc32c::checksum(&disk[..512]);
        assert_eq!(got[0].before, vec![old]);
        assert_eq!(got[1].before, vec![old, old]);
    }

    #[test]
    fn filled_sectors_take_one_byte_and_come_back_whole() {
        // A bitmap block set from end to end, one with a partial first
        // sector, and a record whose last sector is short.
        let mut mixed = vec![0xffu8; 4096];
        mixed[10] = 0x0f;
        let mut short = vec![0u8; 512 + 100];
        short[3] = 9;
        let recs = vec![
            Record {
                offset: 4096,
                data: vec![0xff; 4096].into(),
                before: vec![1; 8],
            },
            Record {
                offset: 8192,
                data: mixed.into(),
                before: vec![2; 8],
            },
            Record {
                offset: 16384,
                data: short.into(),
                before: vec![3, 4],
            },
        ];
        let uuid = [3u8; 16];
        let (bytes, _) = encode(&uuid, &recs);
        // Header, trailer; each record's 12-byte head, sums and mask; the
        // full block 8 bytes, the mixed one 512 + 7, the short one 512 + 1.
        let want = HEADER + TRAILER + 3 * 12 + 4 * (8 + 8 + 2) + 3 + 8 + 519 + 513;
        assert_eq!(bytes.len(), want);
        assert_eq!(decode(&bytes), Some((uuid, recs.clone())));
        // A mask bit past the record's last sector is refused.
        let mask_at = HEADER + (12 + 32 + 1 + 8) + (12 + 32 + 1 + 519) + (12 + 8);
        let mut bad = bytes.clone();
        assert_eq!(bad[mask_at], 0b10);
        bad[mask_at] |= 0b100;
        let crc = crc32c::checksum(&bad[..bad.len() - TRAILER]);
        let at = bad.len() - TRAILER;
        bad[at..at + 4].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(decode(&bad), None);
        // A version 2 log (no fill mask), as earlier spacekits wrote it, is
        // still read.
        let v2: Vec<spacekit_testkit::checks::redo_log::Rec> = recs
            .iter()
            .map(|r| spacekit_testkit::checks::redo_log::Rec {
                offset: r.offset,
                data: r.data.to_vec(),
                before: r.before.clone(),
            })
            .collect();
        let v2 = spacekit_testkit::checks::redo_log::encode(2, &uuid, &v2);
        assert_eq!(decode(&v2), Some((uuid, recs)));
    }

    #[test]
    fn a_complete_log_of_a_newer_version_is_kept_and_refused() {
        // A device whose superblock UUID is the log's.
        let uuid = [0x42u8; 16];
        let mut disk = vec![0u8; 16384];
        let at = SB_OFFSET as usize + sb::UUID;
        disk[at..at + 16].copy_from_slice(&uuid);
        let mut dev = crate::ext4::MemDevice::new(disk.clone());
        let recs = [Record {
            offset: 8192,
            data: vec![9; 512].into(),
            before: vec![crc32c::checksum(&[0; 512])],
        }];
        let (mut log, trailer) = encode(&uuid, &recs);
        // The same log stamped with the next version and signed again.
        log[8..12].copy_from_slice(&(VERSION + 1).to_le_bytes());
        log.truncate(trailer);
        let crc = crc32c::checksum(&log);
        log.extend_from_slice(&crc.to_le_bytes());
        log.extend_from_slice(END_MAGIC);
        assert_eq!(complete_version(&log), Some(VERSION + 1));
        assert_eq!(decode(&log), None);
        dev.write_log(0, &log).unwrap();
        for e in [pending(&dev).unwrap_err(), replay(&mut dev).unwrap_err()] {
            assert!(
                matches!(e, Ext4Error::RedoLogMismatch { reason, .. } if reason == NEWER),
                "{e:?}"
            );
        }
        assert_eq!(dev.read_log().unwrap().as_deref(), Some(&log[..]));
        let mut now = vec![0u8; 16384];
        dev.read_at(0, &mut now).unwrap();
        assert!(now == disk, "nothing replayed");
        // The same bytes with a bad CRC are an incomplete log: removed.
        let last = log.len() - 5;
        log[last] ^= 1;
        dev.write_log(0, &log).unwrap();
        replay(&mut dev).unwrap();
        assert_eq!(dev.read_log().unwrap(), None);
    }

    #[test]
    fn round_trip_and_every_truncation_rejected() {
        let recs = vec![
            Record {
                offset: 1024,
                data: vec![7; 1024].into(),
                before: vec![5, 6],
            },
            Record {
                offset: 8192,
                data: vec![1, 2, 3].into(),
                before: vec![4],
            },
        ];
        let uuid = [9u8; 16];
        let (bytes, trailer) = encode(&uuid, &recs);
        assert_eq!(trailer, bytes.len() - 8);
        assert_eq!(decode(&bytes), Some((uuid, recs)));
        for n in 0..bytes.len() {
            assert_eq!(decode(&bytes[..n]), None, "prefix {n}");
        }
        for i in (0..bytes.len()).step_by(7) {
            let mut b = bytes.clone();
            b[i] ^= 0x10;
            assert_eq!(decode(&b), None, "byte {i} flipped");
        }
    }
}
