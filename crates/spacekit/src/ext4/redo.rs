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

use std::borrow::ToOwned;
use std::fs::{self, File};
use std::io::{self, Seek, SeekFrom};
#[cfg(not(unix))]
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::vec::Vec;

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

/// The log's path: the image's path with `.spacekit-redo` appended.
pub(crate) fn log_path(image: &Path) -> PathBuf {
    let mut s = image.as_os_str().to_owned();
    s.push(".spacekit-redo");
    PathBuf::from(s)
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

/// Reads the log at `path`: `Ok(None)` if there is none.
fn read_log(path: &Path) -> Result<Option<Vec<u8>>, Ext4Error> {
    match fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io("read redo log")(e)),
    }
}

/// Whether a complete log is waiting at `path` (an incomplete one is not:
/// the image was never touched under it).
pub(crate) fn pending(path: &Path) -> Result<bool, Ext4Error> {
    Ok(read_log(path)?.is_some_and(|b| decode(&b).is_some()))
}

/// Replays a complete log at `log` into `file`, fsyncs the image and removes
/// the log; removes an incomplete log. Called before anything else reads the
/// image.
pub(crate) fn replay(file: &File, log: &Path) -> Result<(), Ext4Error> {
    let Some(bytes) = read_log(log)? else {
        return Ok(());
    };
    let Some((uuid, records)) = decode(&bytes) else {
        remove_log(log)?;
        return sync_dir(log);
    };
    let mismatch = |reason| Ext4Error::RedoLogMismatch {
        path: log.to_path_buf(),
        reason,
    };
    let mut f = file;
    let image_len = f.seek(SeekFrom::End(0)).map_err(io("size image"))?;
    let mut have = [0u8; 16];
    let uuid_at = SB_OFFSET + sb::UUID as u64;
    if image_len < uuid_at + 16 {
        return Err(mismatch("the image is too short to hold a superblock"));
    }
    read_exact_at(file, uuid_at, &mut have).map_err(io("read superblock"))?;
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
        write_all_at(file, r.offset, &r.data).map_err(io("replay redo log"))?;
    }
    file.sync_all().map_err(io("fsync image"))?;
    remove_log(log)?;
    sync_dir(log)
}

fn remove_log(log: &Path) -> Result<(), Ext4Error> {
    match fs::remove_file(log) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io("remove redo log")(e)),
    }
}

/// fsyncs the directory holding `path`, so a created or removed log is
/// durable (a no-op where directories cannot be opened).
pub(crate) fn sync_dir(path: &Path) -> Result<(), Ext4Error> {
    #[cfg(unix)]
    {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io("fsync directory"))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(())
    }
}

/// Reads `buf.len()` bytes at `offset` (one `pread` on Unix).
pub(crate) fn read_exact_at(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
    }
    #[cfg(not(unix))]
    {
        let mut f = file;
        f.seek(SeekFrom::Start(offset))?;
        f.read_exact(buf)
    }
}

/// Writes all of `buf` at `offset` (`pwrite` on Unix).
pub(crate) fn write_all_at(file: &File, offset: u64, buf: &[u8]) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::write_all_at(file, buf, offset)
    }
    #[cfg(not(unix))]
    {
        let mut f = file;
        f.seek(SeekFrom::Start(offset))?;
        f.write_all(buf)
    }
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
