//! File plumbing for snapshots: a word-aligned buffer, the zero-page test,
//! positioned reads and writes that name their file in errors, and the
//! temporary file that becomes the destination only when complete.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::vec::Vec;
use std::{format, vec};

use super::error::SnapshotError;
use crate::bitmap::Bits;
use crate::crc32c;

/// Bytes a write or merge moves per step.
pub(crate) const CHUNK_BYTES: u64 = 1 << 20;

/// A buffer of `u64` words (so the zero test and the CRC read whole,
/// aligned words) that files are read into as bytes.
pub(crate) struct Buf {
    words: Vec<u64>,
}

impl Buf {
    /// A zeroed buffer of `bytes` bytes (a multiple of 8).
    pub fn new(bytes: u64) -> Buf {
        Buf {
            words: vec![0u64; (bytes / 8) as usize],
        }
    }

    /// The first `len` bytes' words (`len` a multiple of 8, at most the
    /// buffer's size).
    pub fn words(&self, len: usize) -> &[u64] {
        &self.words[..len / 8]
    }

    /// The first `len` bytes, writable.
    pub fn bytes_mut(&mut self, len: usize) -> &mut [u8] {
        let all = self.words.len() * 8;
        // SAFETY: the words are initialised, `u8` has no alignment
        // requirement and every bit pattern is valid for both types; the
        // slice covers exactly the vector's `all` bytes and borrows it
        // mutably for its lifetime.
        let bytes = unsafe { core::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast(), all) };
        &mut bytes[..len]
    }

    /// The first `len` bytes.
    pub fn bytes(&self, len: usize) -> &[u8] {
        let all = self.words.len() * 8;
        // SAFETY: as in `bytes_mut`, for a shared borrow.
        let bytes = unsafe { core::slice::from_raw_parts(self.words.as_ptr().cast(), all) };
        &bytes[..len]
    }
}

/// Whether every word is zero: the bitmap engine's word-skipping search
/// (`Bits::first_set`, SIMD at the detected level) over the page.
#[inline]
pub(crate) fn is_zero(words: &[u64]) -> bool {
    words.first_set().is_none()
}

/// Walks `len` bytes of `buf` (starting at memory offset `at`, `len` a
/// multiple of `page`) page by page: continues the raw CRC `crc` over them
/// (zero pages by [`crc32c::shift`], without reading them again) and calls
/// `write(offset_in_buf, bytes)` once per run of non-zero pages.
pub(crate) fn scan_chunk(
    buf: &Buf,
    len: usize,
    page: usize,
    crc: &mut u32,
    mut write: impl FnMut(usize, usize) -> Result<(), SnapshotError>,
) -> Result<(), SnapshotError> {
    let words = buf.words(len);
    let pw = page / 8;
    let mut run: Option<usize> = None;
    for (i, p) in words.chunks(pw).enumerate() {
        if is_zero(p) {
            *crc = crc32c::shift(*crc, (p.len() * 8) as u64);
            if let Some(s) = run.take() {
                write(s, i * page - s)?;
            }
        } else {
            *crc = crc32c::raw_words(*crc, p, p.len() * 8);
            run.get_or_insert(i * page);
        }
    }
    if let Some(s) = run {
        write(s, len - s)?;
    }
    Ok(())
}

/// Reads exactly `buf.len()` bytes of `f` at `off`; a short file is
/// [`SnapshotError::Truncated`] (`file_len` its length, for the message).
pub(crate) fn read_exact_at(
    f: &File,
    path: &Path,
    buf: &mut [u8],
    off: u64,
) -> Result<(), SnapshotError> {
    f.read_exact_at(buf, off).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            let got = f.metadata().map(|m| m.len()).unwrap_or(0);
            SnapshotError::Truncated {
                path: path.to_path_buf(),
                expected: off + buf.len() as u64,
                got,
            }
        } else {
            SnapshotError::io(path, "read", &e)
        }
    })
}

/// Removes the temporary files this process made beside `dest`, named
/// `.NAME.sk-tmp.PID` or `.NAME.sk-tmp.PID.*` (what [`write_full`],
/// [`write_diff`] and [`merge`] write before they rename; the spacekit
/// command names its own temporary files so too): for a program that is
/// interrupted mid-write (a signal handler's thread). Files that cannot be
/// removed stay; nothing is reported.
///
/// [`write_full`]: super::write_full
/// [`write_diff`]: super::write_diff
/// [`merge`]: super::merge
pub fn remove_temporaries(dest: &Path) {
    let name = dest.file_name().unwrap_or_default().to_string_lossy();
    let tmp = format!(".{name}.sk-tmp.{}", std::process::id());
    let numbered = format!("{tmp}.");
    let dir = match dest.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let f = e.file_name();
        let f = f.to_string_lossy();
        if f == tmp || f.starts_with(&numbered) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Counter that keeps temporary names of one process apart.
static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// A file being written beside its destination, named
/// `.NAME.sk-tmp.PID.N`: removed when dropped, unless [`Tmp::commit`]
/// synced it and renamed it over the destination. A process killed while
/// writing leaves the destination as it was (and a stray temporary file).
pub(crate) struct Tmp {
    pub file: File,
    pub path: PathBuf,
    dest: PathBuf,
    done: bool,
}

impl Tmp {
    /// Creates the temporary file for `dest`.
    pub fn create(dest: &Path) -> Result<Tmp, SnapshotError> {
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "snapshot".into());
        let seq = TMP_SEQ.fetch_add(1, Ordering::Relaxed);
        let tmp_name = format!(".{name}.sk-tmp.{}.{seq}", std::process::id());
        let path = match dest.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.join(tmp_name),
            _ => PathBuf::from(tmp_name),
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| SnapshotError::io(&path, "create", &e))?;
        Ok(Tmp {
            file,
            path,
            dest: dest.to_path_buf(),
            done: false,
        })
    }

    /// Writes all of `data` at `off`.
    pub fn write_at(&self, data: &[u8], off: u64) -> Result<(), SnapshotError> {
        self.file
            .write_all_at(data, off)
            .map_err(|e| SnapshotError::io(&self.path, "write", &e))
    }

    /// Sets the length (the part never written stays a hole).
    pub fn set_len(&self, len: u64) -> Result<(), SnapshotError> {
        self.file
            .set_len(len)
            .map_err(|e| SnapshotError::io(&self.path, "set length", &e))
    }

    /// Syncs the file, renames it over the destination and syncs the
    /// directory, so the destination is the whole new file or the old one.
    pub fn commit(mut self) -> Result<(), SnapshotError> {
        self.file
            .sync_all()
            .map_err(|e| SnapshotError::io(&self.path, "sync", &e))?;
        fs::rename(&self.path, &self.dest)
            .map_err(|e| SnapshotError::io(&self.dest, "rename", &e))?;
        self.done = true;
        let dir = match self.dest.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        // A directory that cannot be opened or synced (some filesystems)
        // leaves the rename as durable as the filesystem makes it.
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        if !self.done {
            let _ = fs::remove_file(&self.path);
        }
    }
}
