//! [`merge`]: a full snapshot and the diffs taken after it, into one full
//! snapshot.

use std::path::Path;
use std::vec::Vec;

use super::error::SnapshotError;
use super::file::Snapshot;
use super::format::{SnapshotInfo, TRAILER_BYTES};
use super::io::{read_exact_at, scan_chunk, Buf, Tmp, CHUNK_BYTES};
use super::write::finish_full;
use crate::crc32c;

/// Where a merge is in one diff: its next range, where that range's data
/// starts in the data region, and the CRC of the data read so far.
struct Cursor {
    range: usize,
    data_at: u64,
    crc: u32,
}

/// Merges `base` (a full snapshot, or a raw memory image) and `diffs`, in
/// the order taken, into a full snapshot at `out`: the memory as it was
/// when the last diff was taken.
///
/// Each diff must name the snapshot before it as its base (the first
/// names `base`, each later one the diff before it), and all must be of
/// the same memory size; that is checked from the headers before anything
/// is written ([`SnapshotError::BaseMismatch`],
/// [`SnapshotError::SizeMismatch`]).
///
/// The output is built in one pass over memory, a chunk at a time: the
/// base's bytes, then each diff's ranges inside the chunk on top, in
/// order; only non-zero pages are written, so every zero page of the
/// result is a hole, whether it was a hole of the base or a zero page a
/// diff brought (which a copy of the base followed by writing the diffs
/// would leave allocated). Every byte of the base and of each diff's
/// data is read once, so their CRCs are checked too: a damaged input
/// fails the merge ([`SnapshotError::BadChecksum`]) instead of giving a
/// damaged output. The result is written beside `out` under a temporary
/// name, synced and renamed over `out` only when complete.
///
/// Its id is that of a full snapshot of the same memory (ids are derived
/// from contents), so a diff later taken against the last diff does not
/// apply to it: merge the whole chain instead.
///
/// # Errors
/// Any [`SnapshotError`] from opening the inputs (a file that is not a
/// regular one, or is empty, is refused before it is opened), the checks
/// above, or I/O; [`SnapshotError::Io`] (`op` `"refuse"`) when `out` is one
/// of the inputs (the same file by any path), before anything is read.
/// `out` is left as it was.
pub fn merge<P: AsRef<Path>>(
    base: impl AsRef<Path>,
    diffs: &[P],
    out: impl AsRef<Path>,
) -> Result<SnapshotInfo, SnapshotError> {
    merge_with_progress(base, diffs, out, &mut |_, _| {})
}

/// [`merge`], calling `progress(done, total)` (bytes of memory) after each
/// chunk.
///
/// # Errors
/// As [`merge`].
pub fn merge_with_progress<P: AsRef<Path>>(
    base: impl AsRef<Path>,
    diffs: &[P],
    out: impl AsRef<Path>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<SnapshotInfo, SnapshotError> {
    // The output replaces the name `out` only when complete, but an input
    // that is the file that name holds (by any path to it) would be lost
    // with it: refused before anything is read. A symlink or another hard
    // link named `out` is replaced itself, its target kept.
    let out_ref = out.as_ref();
    let entry = |p: &Path| -> Option<std::path::PathBuf> {
        let dir = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        Some(std::fs::canonicalize(dir).ok()?.join(p.file_name()?))
    };
    if let Some(o) = entry(out_ref) {
        let is_out = |p: &Path| std::fs::canonicalize(p).is_ok_and(|c| c == o);
        if is_out(base.as_ref()) || diffs.iter().any(|d| is_out(d.as_ref())) {
            let e = std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the output is one of the merge's inputs: writing it would lose that snapshot; give another path",
            );
            return Err(SnapshotError::io(out_ref, "refuse", &e));
        }
    }
    let base = Snapshot::open_full(base)?;
    let size = base.info().memory_size;
    let page = base.info().page_size;
    let diffs = diffs
        .iter()
        .map(Snapshot::open_diff)
        .collect::<Result<Vec<_>, _>>()?;
    let mut expected = base.info().id;
    for d in &diffs {
        let i = d.info();
        if i.memory_size != size {
            return Err(SnapshotError::SizeMismatch {
                path: d.path().to_path_buf(),
                expected: size,
                got: i.memory_size,
            });
        }
        if i.base_id != Some(expected) {
            return Err(SnapshotError::BaseMismatch {
                path: d.path().to_path_buf(),
                expected: i.base_id.unwrap_or_default(),
                found: expected,
            });
        }
        expected = i.id;
    }
    let out = out.as_ref();
    let tmp = Tmp::create(out)?;
    tmp.set_len(size + TRAILER_BYTES)?;
    let chunk = CHUNK_BYTES.max(page);
    let mut buf = Buf::new(chunk);
    let mut cursors: Vec<Cursor> = diffs
        .iter()
        .map(|_| Cursor {
            range: 0,
            data_at: 0,
            crc: !0,
        })
        .collect();
    let (mut base_crc, mut out_crc) = (!0u32, !0u32);
    let mut at = 0;
    while at < size {
        let n = (size - at).min(chunk) as usize;
        let end = at + n as u64;
        read_exact_at(base.file(), base.path(), buf.bytes_mut(n), at)?;
        base_crc = crc32c::raw(base_crc, buf.bytes(n));
        for (d, c) in diffs.iter().zip(&mut cursors) {
            overlay(d, c, &mut buf, at, end)?;
        }
        scan_chunk(&buf, n, page as usize, &mut out_crc, |s, k| {
            tmp.write_at(&buf.bytes(n)[s..s + k], at + s as u64)
        })?;
        at = end;
        progress(at, size);
    }
    check_crc(&base, "memory", !base_crc)?;
    for (d, c) in diffs.iter().zip(&cursors) {
        check_crc(d, "data", !c.crc)?;
    }
    finish_full(tmp, out, page, size, !out_crc)
}

/// Reads the parts of diff `d`'s ranges inside memory `[at, end)` over the
/// chunk in `buf` (which holds memory from `at`), continuing its CRC. The
/// ranges are sorted and disjoint and the chunks come in order, so each
/// byte of the diff's data is read once, in order.
fn overlay(
    d: &Snapshot,
    c: &mut Cursor,
    buf: &mut Buf,
    at: u64,
    end: u64,
) -> Result<(), SnapshotError> {
    let ranges = d.ranges();
    let n = (end - at) as usize;
    while let Some(r) = ranges.get(c.range).filter(|r| r.gpa < end) {
        let s = r.gpa.max(at);
        let e = r.end().min(end);
        let dst = &mut buf.bytes_mut(n)[(s - at) as usize..(e - at) as usize];
        let off = d.info().data_offset + c.data_at + (s - r.gpa);
        read_exact_at(d.file(), d.path(), dst, off)?;
        c.crc = crc32c::raw(c.crc, dst);
        if r.end() > end {
            break;
        }
        c.data_at += r.length;
        c.range += 1;
    }
    Ok(())
}

/// [`SnapshotError::BadChecksum`] when `computed` is not `snap`'s data CRC.
fn check_crc(snap: &Snapshot, what: &'static str, computed: u32) -> Result<(), SnapshotError> {
    let stored = snap.info().data_crc;
    if stored == computed {
        Ok(())
    } else {
        Err(SnapshotError::BadChecksum {
            path: snap.path().to_path_buf(),
            what,
            stored,
            computed,
        })
    }
}
