//! The redo log that makes [`super::Image::flush`] crash-safe.
//!
//! Format (all integers little-endian):
//!
//! ```text
//! 0   8   magic "SKREDO01"
//! 8   4   version (1)
//! 12  4   number of records
//! 16  8   total length of the log in bytes, trailer included
//! 24  16  s_uuid of the file system the log belongs to
//! 40  ... records: offset u64, length u32, then `length` bytes to write at
//!         that byte offset of the image
//! end-8 4 CRC-32C (standard) of every byte before it
//! end-4 4 magic "SKOK"
//! ```
//!
//! A log is *complete* when its length, both magics and the CRC agree; only
//! a complete log is replayed. Because the image is written only after the
//! log is complete and fsynced, an incomplete log means the image was not
//! touched and is discarded.

use std::vec::Vec;

use super::device::Device;

use super::error::{io, Ext4Error};
use super::layout::{sb, SB_OFFSET};
use crate::crc32c;

const MAGIC: &[u8; 8] = b"SKREDO01";
const END_MAGIC: &[u8; 4] = b"SKOK";
const VERSION: u32 = 1;
const HEADER: usize = 40;
const TRAILER: usize = 8;

/// One write: `data` at byte `offset` of the image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) offset: u64,
    pub(crate) data: Vec<u8>,
}

/// Serialises a log; returns the bytes and where the trailer starts.
pub(crate) fn encode(uuid: &[u8; 16], records: &[Record]) -> (Vec<u8>, usize) {
    let body: usize = records.iter().map(|r| 12 + r.data.len()).sum();
    let total = HEADER + body + TRAILER;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(records.len() as u32).to_le_bytes());
    out.extend_from_slice(&(total as u64).to_le_bytes());
    out.extend_from_slice(uuid);
    for r in records {
        out.extend_from_slice(&r.offset.to_le_bytes());
        out.extend_from_slice(&(r.data.len() as u32).to_le_bytes());
        out.extend_from_slice(&r.data);
    }
    let trailer_at = out.len();
    let crc = crc32c::checksum(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(END_MAGIC);
    (out, trailer_at)
}

/// Parses a complete log; `None` if it is incomplete or corrupt in any way.
pub(crate) fn decode(bytes: &[u8]) -> Option<([u8; 16], Vec<Record>)> {
    if bytes.len() < HEADER + TRAILER || bytes.get(..8)? != MAGIC {
        return None;
    }
    let u32_at = |o: usize| -> Option<u32> {
        Some(u32::from_le_bytes(bytes.get(o..o + 4)?.try_into().ok()?))
    };
    let u64_at = |o: usize| -> Option<u64> {
        Some(u64::from_le_bytes(bytes.get(o..o + 8)?.try_into().ok()?))
    };
    if u32_at(8)? != VERSION || u64_at(16)? != bytes.len() as u64 {
        return None;
    }
    let trailer_at = bytes.len() - TRAILER;
    if bytes.get(trailer_at + 4..)? != END_MAGIC
        || u32_at(trailer_at)? != crc32c::checksum(bytes.get(..trailer_at)?)
    {
        return None;
    }
    let mut uuid = [0u8; 16];
    uuid.copy_from_slice(bytes.get(24..40)?);
    let n = u32_at(12)?;
    let mut records = Vec::new();
    let mut at = HEADER;
    for _ in 0..n {
        let offset = u64_at(at)?;
        let len = u32_at(at + 8)? as usize;
        let data = bytes.get(at + 12..at.checked_add(12 + len)?)?.to_vec();
        at += 12 + len;
        records.push(Record { offset, data });
    }
    (at == trailer_at).then_some((uuid, records))
}

/// Whether a complete log is waiting on `dev` (an incomplete one is not:
/// the image was never touched under it).
pub(crate) fn pending(dev: &dyn Device) -> Result<bool, Ext4Error> {
    let log = dev.read_log().map_err(io("read redo log"))?;
    Ok(log.is_some_and(|b| decode(&b).is_some()))
}

/// Replays a complete log on `dev` into its image, syncs the image and
/// removes the log; removes an incomplete log. Called before anything else
/// reads the image.
pub(crate) fn replay(dev: &mut dyn Device) -> Result<(), Ext4Error> {
    let Some(bytes) = dev.read_log().map_err(io("read redo log"))? else {
        return Ok(());
    };
    let Some((uuid, records)) = decode(&bytes) else {
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
    fn round_trip_and_every_truncation_rejected() {
        let recs = vec![
            Record {
                offset: 1024,
                data: vec![7; 1024],
            },
            Record {
                offset: 8192,
                data: vec![1, 2, 3],
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
