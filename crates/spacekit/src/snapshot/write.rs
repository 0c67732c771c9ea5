//! [`write_full`] and [`write_diff`]: a guest's memory, or its dirty
//! ranges, to a snapshot file, zero pages as holes.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::vec;
use std::vec::Vec;

use super::error::SnapshotError;
use super::format::{
    check_page_size, diff_data_offset, encode_table, seal_block, Header, SnapshotInfo,
    TRAILER_BYTES,
};
use super::id::{Kind, SnapshotId};
use super::io::{scan_chunk, Buf, Tmp, CHUNK_BYTES};
use crate::dirty::{MemoryRange, MemoryRangeTable};
use crate::migration::MemorySource;

/// Copies `len` bytes of `source` from `gpa` through `buf` into the file
/// at `file_off`, page by page: zero pages are not written (they stay
/// holes of the file, which the caller sized), runs of non-zero pages are
/// written in one call each. Continues the raw CRC `crc`.
fn copy_range<M: MemorySource + ?Sized>(
    source: &M,
    tmp: &Tmp,
    buf: &mut Buf,
    (gpa, len, file_off): (u64, u64, u64),
    page: u64,
    crc: &mut u32,
) -> Result<(), SnapshotError> {
    let chunk = CHUNK_BYTES.max(page);
    let mut done = 0;
    while done < len {
        let n = (len - done).min(chunk) as usize;
        source.copy_out(gpa + done, buf.bytes_mut(n));
        let at = file_off + done;
        scan_chunk(buf, n, page as usize, crc, |s, k| {
            tmp.write_at(&buf.bytes(n)[s..s + k], at + s as u64)
        })?;
        done += n as u64;
    }
    Ok(())
}

/// The [`SnapshotInfo`] of the file just committed at `path`.
fn committed(path: &Path, mut info: SnapshotInfo) -> SnapshotInfo {
    if let Ok(m) = std::fs::metadata(path) {
        info.file_bytes = m.len();
        info.allocated_bytes = m.blocks().saturating_mul(512);
    }
    info
}

/// Writes all of `source`'s memory to a full snapshot at `path`: a sparse
/// file whose bytes `0..size` are the memory at guest-physical offsets
/// (every all-zero page of `page_size` bytes left a hole, never written),
/// followed by a 4 KiB trailer (see the [module documentation](super)).
///
/// The file is written beside `path` under a temporary name, synced, and
/// renamed over `path`: `path` is the old file or the whole new snapshot,
/// whenever the process stops. Firecracker's full snapshot memory file is
/// the same memory at the same offsets (without the trailer); its
/// `snapshot_type: Full`.
///
/// ```
/// use spacekit::snapshot::{self, Kind};
///
/// let mut memory = vec![0u8; 64 << 10]; // 16 pages, 15 of them zero
/// memory[5 * 4096 + 9] = 7;
/// let dir = std::env::temp_dir().join(format!("sk-doc-full-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let info = snapshot::write_full(&memory, 4096, dir.join("vm.snap"))?;
/// assert_eq!((info.kind, info.memory_size), (Kind::Full, 64 << 10));
/// let back = snapshot::Snapshot::open(dir.join("vm.snap"))?;
/// assert_eq!(back.info().id, info.id);
/// assert_eq!(back.hash_pages(4096)?, spacekit::migration::hash_pages(&memory, 4096).unwrap());
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`SnapshotError::BadPageSize`], [`SnapshotError::UnalignedMemory`] (a
/// size that is not a multiple of the page size), I/O errors naming the
/// file. Nothing is left at `path` or beside it on error.
///
/// # Panics
/// Only if `source` does (its `copy_out` is asked for ranges inside
/// `0..size()` only).
pub fn write_full<M: MemorySource + ?Sized>(
    source: &M,
    page_size: u64,
    path: impl AsRef<Path>,
) -> Result<SnapshotInfo, SnapshotError> {
    let path = path.as_ref();
    let page = check_page_size(page_size)?;
    let size = source.size();
    if !size.is_multiple_of(page) {
        return Err(SnapshotError::UnalignedMemory {
            size,
            page_size: page,
        });
    }
    let end = size
        .checked_add(TRAILER_BYTES)
        .ok_or(SnapshotError::UnalignedMemory {
            size,
            page_size: page,
        })?;
    let tmp = Tmp::create(path)?;
    tmp.set_len(end)?;
    let mut buf = Buf::new(CHUNK_BYTES.max(page));
    let mut crc = !0u32;
    copy_range(source, &tmp, &mut buf, (0, size, 0), page, &mut crc)?;
    finish_full(tmp, path, page, size, !crc)
}

/// Seals a full snapshot whose memory (`size` bytes, CRC-32C `crc`) is in
/// `tmp`: writes the trailer after the memory, commits `tmp` to `path`,
/// and returns its info (with its bytes on disk).
pub(super) fn finish_full(
    tmp: Tmp,
    path: &Path,
    page: u64,
    size: u64,
    crc: u32,
) -> Result<SnapshotInfo, SnapshotError> {
    let h = Header {
        kind: Kind::Full,
        page_size: page,
        memory_size: size,
        base_id: SnapshotId::zero(),
        range_count: 0,
        data_offset: 0,
        data_bytes: size,
        data_crc: crc,
    };
    let mut block = vec![0u8; TRAILER_BYTES as usize];
    block[..h.encode().len()].copy_from_slice(&h.encode());
    seal_block(&mut block);
    tmp.write_at(&block, size)?;
    tmp.commit()?;
    Ok(committed(
        path,
        SnapshotInfo {
            kind: Kind::Full,
            page_size: page,
            memory_size: size,
            id: SnapshotId::full(size, crc),
            base_id: None,
            ranges: 0,
            data_bytes: size,
            data_offset: 0,
            data_crc: crc,
            file_bytes: size + TRAILER_BYTES,
            allocated_bytes: 0,
            raw: false,
        },
    ))
}

/// `table`'s ranges widened to whole pages, sorted, and joined where they
/// overlap or touch.
fn page_ranges(
    table: &MemoryRangeTable,
    page: u64,
    size: u64,
) -> Result<Vec<MemoryRange>, SnapshotError> {
    let mut out = Vec::with_capacity(table.len());
    for (index, r) in table.ranges().iter().enumerate() {
        if r.length == 0 {
            continue;
        }
        let end = match r.gpa.checked_add(r.length) {
            Some(e) if e <= size => e,
            _ => {
                return Err(SnapshotError::RangeOutsideMemory {
                    index,
                    gpa: r.gpa,
                    length: r.length,
                    memory_size: size,
                })
            }
        };
        // `size` is a multiple of `page`, so the rounded end stays inside.
        let start = r.gpa - r.gpa % page;
        let end = end.next_multiple_of(page);
        out.push(MemoryRange {
            gpa: start,
            length: end - start,
        });
    }
    out.sort_unstable();
    let mut joined: Vec<MemoryRange> = Vec::with_capacity(out.len());
    for r in out {
        match joined.last_mut() {
            Some(last) if r.gpa <= last.end() => {
                last.length = last.length.max(r.end() - last.gpa);
            }
            _ => joined.push(r),
        }
    }
    Ok(joined)
}

/// Writes the ranges of `table` (the memory dirtied since `base` was
/// taken) from `source` to a diff snapshot at `path` that applies on top
/// of `base` (a full snapshot or the diff before this one: see
/// [`merge`](super::merge)).
///
/// The ranges are widened to whole pages of `base.page_size`, sorted and
/// joined where they touch, and stored as the diff's table; their
/// contents follow at page-aligned offsets, zero pages as holes (which
/// read back as zeros, so a merge still zeroes those pages). Written
/// beside `path` under a temporary name, synced and renamed, as
/// [`write_full`]. Firecracker's `snapshot_type: Diff` writes the dirty
/// pages of its memory file at their guest-physical offsets instead,
/// with no table: a page that became zero and one that was not written
/// look the same there.
///
/// ```
/// use spacekit::dirty::{MemoryRange, MemoryRangeTable};
/// use spacekit::snapshot::{self, Kind};
///
/// let dir = std::env::temp_dir().join(format!("sk-doc-diff-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let mut memory = vec![1u8; 8 * 4096];
/// let base = snapshot::write_full(&memory, 4096, dir.join("base"))?;
/// memory[3 * 4096..4 * 4096].fill(0); // page 3 becomes zero
/// memory[6 * 4096] = 9;
/// let mut dirty = MemoryRangeTable::new();
/// dirty.push(MemoryRange { gpa: 3 * 4096, length: 4096 });
/// dirty.push(MemoryRange { gpa: 6 * 4096, length: 1 });
/// let diff = snapshot::write_diff(&memory, &dirty, &base, dir.join("diff1"))?;
/// assert_eq!((diff.kind, diff.ranges, diff.base_id), (Kind::Diff, 2, Some(base.id)));
/// let merged = snapshot::merge(dir.join("base"), &[dir.join("diff1")], dir.join("out"))?;
/// let out = snapshot::Snapshot::open(dir.join("out"))?;
/// assert_eq!(out.hash_pages(4096)?, spacekit::migration::hash_pages(&memory, 4096).unwrap());
/// assert_eq!(merged.id, snapshot::write_full(&memory, 4096, dir.join("again"))?.id);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`SnapshotError::SizeMismatch`] when `source` is not the size of
/// `base`'s memory (the path named is `path`);
/// [`SnapshotError::RangeOutsideMemory`] for a range past its end; I/O
/// errors naming the file. Nothing is left at `path` or beside it on
/// error.
///
/// # Panics
/// Only if `source` does.
pub fn write_diff<M: MemorySource + ?Sized>(
    source: &M,
    table: &MemoryRangeTable,
    base: &SnapshotInfo,
    path: impl AsRef<Path>,
) -> Result<SnapshotInfo, SnapshotError> {
    let path = path.as_ref();
    let page = check_page_size(base.page_size)?;
    let size = source.size();
    if size != base.memory_size {
        return Err(SnapshotError::SizeMismatch {
            path: path.to_path_buf(),
            expected: base.memory_size,
            got: size,
        });
    }
    let ranges = page_ranges(table, page, size)?;
    let count = ranges.len() as u64;
    let data_bytes: u64 = ranges.iter().map(|r| r.length).sum();
    // At most one range per page of memory: no overflow below 2^64 / 16.
    let data_offset = diff_data_offset(count, page).ok_or(SnapshotError::UnalignedMemory {
        size,
        page_size: page,
    })?;
    let tmp = Tmp::create(path)?;
    tmp.set_len(data_offset + data_bytes)?;
    let mut buf = Buf::new(CHUNK_BYTES.max(page));
    let mut crc = !0u32;
    let mut at = data_offset;
    for r in &ranges {
        copy_range(
            source,
            &tmp,
            &mut buf,
            (r.gpa, r.length, at),
            page,
            &mut crc,
        )?;
        at += r.length;
    }
    let crc = !crc;
    let h = Header {
        kind: Kind::Diff,
        page_size: page,
        memory_size: size,
        base_id: base.id,
        range_count: count,
        data_offset,
        data_bytes,
        data_crc: crc,
    };
    let mut block = Vec::with_capacity(data_offset as usize);
    block.extend_from_slice(&h.encode());
    encode_table(&ranges, &mut block);
    block.resize(data_offset as usize, 0);
    let header_crc = seal_block(&mut block);
    tmp.write_at(&block, 0)?;
    tmp.commit()?;
    Ok(committed(
        path,
        SnapshotInfo {
            kind: Kind::Diff,
            page_size: page,
            memory_size: size,
            id: SnapshotId::diff(size, header_crc),
            base_id: Some(base.id),
            ranges: count,
            data_bytes,
            data_offset,
            data_crc: crc,
            file_bytes: data_offset + data_bytes,
            allocated_bytes: 0,
            raw: false,
        },
    ))
}
