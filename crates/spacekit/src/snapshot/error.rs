//! [`SnapshotError`]: what went wrong writing, reading or merging a snapshot.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::string::{String, ToString};

use super::id::{Kind, SnapshotId};

/// What went wrong writing, reading or merging a snapshot.
///
/// Every error that comes from a file names it. A refused call leaves the
/// destination as it was: writes go to a temporary file beside it, renamed
/// over it only once complete and synced.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SnapshotError {
    /// An I/O error on `path` while doing `op` (`"open"`, `"read"`,
    /// `"write"`, `"sync"`, `"rename"`, ...).
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The error's kind.
        kind: io::ErrorKind,
        /// The error's message.
        message: String,
    },
    /// A file given as a diff snapshot that does not start with the magic
    /// bytes [`MAGIC`](super::MAGIC).
    BadMagic {
        /// The file.
        path: PathBuf,
    },
    /// A header of a format version this library does not read.
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version in its header.
        version: u16,
    },
    /// A header field with a value the format does not allow (an unknown
    /// kind, a page size that is not a power of two in range, flags or
    /// reserved bytes that are not zero, a data offset that is not where
    /// the table ends, ...).
    BadHeader {
        /// The file.
        path: PathBuf,
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// A stored CRC-32C that does not match what was read: `what` is
    /// `"header"` (header, range table and padding), `"data"` (a diff's
    /// data) or `"memory"` (a full snapshot's memory).
    BadChecksum {
        /// The file.
        path: PathBuf,
        /// What the checksum covers.
        what: &'static str,
        /// The stored value.
        stored: u32,
        /// The value computed from the file.
        computed: u32,
    },
    /// A file shorter than its header says.
    Truncated {
        /// The file.
        path: PathBuf,
        /// Bytes it should have.
        expected: u64,
        /// Bytes it has.
        got: u64,
    },
    /// A file longer than its header says (bytes after the data).
    TrailingBytes {
        /// The file.
        path: PathBuf,
        /// Bytes it should have.
        expected: u64,
        /// Bytes it has.
        got: u64,
    },
    /// A range of a diff's table that is empty, not page-aligned, out of
    /// order or overlapping its predecessor, or past the end of memory.
    TableOutOfRange {
        /// The file.
        path: PathBuf,
        /// The range's index in the table.
        index: u64,
        /// Its guest-physical address.
        gpa: u64,
        /// Its length.
        length: u64,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A range given to [`write_diff`](super::write_diff) that passes the
    /// end of memory.
    RangeOutsideMemory {
        /// The range's index in the table.
        index: usize,
        /// Its guest-physical address.
        gpa: u64,
        /// Its length.
        length: u64,
        /// The memory's size.
        memory_size: u64,
    },
    /// A diff applied to a snapshot other than its base: merging refuses
    /// it before writing anything.
    BaseMismatch {
        /// The diff.
        path: PathBuf,
        /// The base the diff names.
        expected: SnapshotId,
        /// The snapshot it would be applied to.
        found: SnapshotId,
    },
    /// Two memories of different sizes: a diff and its base, or a source
    /// and the base a diff is written against.
    SizeMismatch {
        /// The file that disagrees.
        path: PathBuf,
        /// The size expected.
        expected: u64,
        /// Its size.
        got: u64,
    },
    /// A file of the wrong kind: a diff given as a base, a full snapshot
    /// given as a diff.
    WrongKind {
        /// The file.
        path: PathBuf,
        /// The kind needed.
        expected: Kind,
        /// Its kind.
        found: Kind,
    },
    /// A page size that is not a power of two from
    /// [`MIN_PAGE_SIZE`](super::MIN_PAGE_SIZE) to
    /// [`MAX_PAGE_SIZE`](super::MAX_PAGE_SIZE).
    BadPageSize {
        /// The page size given.
        page_size: u64,
    },
    /// A memory whose size is not a multiple of the page size.
    UnalignedMemory {
        /// The memory's size.
        size: u64,
        /// The page size.
        page_size: u64,
    },
}

impl SnapshotError {
    /// [`SnapshotError::Io`] for `e` met on `path` while doing `op`.
    pub(crate) fn io(path: &Path, op: &'static str, e: &io::Error) -> Self {
        SnapshotError::Io {
            path: path.to_path_buf(),
            op,
            kind: e.kind(),
            message: e.to_string(),
        }
    }

    /// The file the error is about, if any.
    pub fn path(&self) -> Option<&Path> {
        use SnapshotError::*;
        match self {
            Io { path, .. }
            | BadMagic { path }
            | UnsupportedVersion { path, .. }
            | BadHeader { path, .. }
            | BadChecksum { path, .. }
            | Truncated { path, .. }
            | TrailingBytes { path, .. }
            | TableOutOfRange { path, .. }
            | BaseMismatch { path, .. }
            | SizeMismatch { path, .. }
            | WrongKind { path, .. } => Some(path),
            RangeOutsideMemory { .. } | BadPageSize { .. } | UnalignedMemory { .. } => None,
        }
    }
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use SnapshotError::*;
        match self {
            Io {
                path, op, message, ..
            } => write!(f, "{}: {op}: {message}", path.display()),
            BadMagic { path } => write!(
                f,
                "{}: not a spacekit diff snapshot (bad magic)",
                path.display()
            ),
            UnsupportedVersion { path, version } => write!(
                f,
                "{}: snapshot format version {version} is not supported",
                path.display()
            ),
            BadHeader { path, field, value } => write!(
                f,
                "{}: bad snapshot header: {field} = {value}",
                path.display()
            ),
            BadChecksum {
                path,
                what,
                stored,
                computed,
            } => write!(
                f,
                "{}: {what} checksum mismatch (stored {stored:#010x}, computed {computed:#010x})",
                path.display()
            ),
            Truncated {
                path,
                expected,
                got,
            } => write!(
                f,
                "{}: truncated: {got} bytes, the header says {expected}",
                path.display()
            ),
            TrailingBytes {
                path,
                expected,
                got,
            } => write!(
                f,
                "{}: {got} bytes, the header says {expected}",
                path.display()
            ),
            TableOutOfRange {
                path,
                index,
                gpa,
                length,
                why,
            } => write!(
                f,
                "{}: range {index} ({gpa:#x}, {length:#x} bytes) {why}",
                path.display()
            ),
            RangeOutsideMemory {
                index,
                gpa,
                length,
                memory_size,
            } => write!(
                f,
                "range {index} ({gpa:#x}, {length:#x} bytes) passes the end of memory ({memory_size:#x})"
            ),
            BaseMismatch {
                path,
                expected,
                found,
            } => write!(
                f,
                "{}: a diff of snapshot {expected}, not of {found}",
                path.display()
            ),
            SizeMismatch {
                path,
                expected,
                got,
            } => write!(
                f,
                "{}: memory of {got} bytes, expected {expected}",
                path.display()
            ),
            WrongKind {
                path,
                expected,
                found,
            } => write!(
                f,
                "{}: a {found} snapshot, expected a {expected} one",
                path.display()
            ),
            BadPageSize { page_size } => write!(f, "bad snapshot page size {page_size}"),
            UnalignedMemory { size, page_size } => write!(
                f,
                "memory of {size} bytes is not a multiple of the page size {page_size}"
            ),
        }
    }
}

impl std::error::Error for SnapshotError {}
