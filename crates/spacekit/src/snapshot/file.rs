//! [`Snapshot`]: a snapshot file opened and checked, its memory read back
//! and hashed.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::vec;
use std::vec::Vec;

use super::error::SnapshotError;
use super::format::{
    block_crc, decode_table, Header, SnapshotInfo, DEFAULT_PAGE_SIZE, HEADER_BYTES, TRAILER_BYTES,
};
use super::id::{Kind, SnapshotId};
use super::io::{is_zero, read_exact_at, scan_chunk, Buf, CHUNK_BYTES};
use crate::crc32c;
use crate::dirty::MemoryRange;

/// A snapshot file, opened and checked: its header, its CRC and (a diff)
/// its whole range table, before any of its data is used.
///
/// ```no_run
/// use spacekit::snapshot::{Kind, Snapshot};
///
/// let snap = Snapshot::open("vm.snap")?;
/// let info = snap.info();
/// println!("{} snapshot of {} bytes, id {}", info.kind, info.memory_size, info.id);
/// if info.kind == Kind::Full {
///     let hashes = snap.hash_pages(4096)?;
///     println!("{} pages", hashes.len());
/// }
/// # Ok::<(), spacekit::snapshot::SnapshotError>(())
/// ```
#[derive(Debug)]
pub struct Snapshot {
    file: File,
    path: PathBuf,
    info: SnapshotInfo,
    ranges: Vec<MemoryRange>,
}

/// What a file looks like from its first bytes and its length.
enum Shape {
    Diff,
    Full,
    Raw,
}

impl Snapshot {
    /// Opens a snapshot of either kind: a file that starts with the magic
    /// and a diff's kind is a diff; one with a trailer is a full snapshot;
    /// anything else is read as a raw memory image (a full snapshot
    /// without trailer, whose id this computes by reading all of it),
    /// unless it starts with the magic (another kind) or with a magic or
    /// trailer magic up to two bits off: a damaged snapshot is an error,
    /// not a raw image.
    ///
    /// # Errors
    /// I/O errors, and every malformed header, checksum, table or length
    /// as a [`SnapshotError`] naming the file.
    pub fn open(path: impl AsRef<Path>) -> Result<Snapshot, SnapshotError> {
        Snapshot::open_as(path.as_ref(), None)
    }

    /// Opens a full snapshot (with a trailer, or a raw memory image).
    ///
    /// # Errors
    /// As [`Snapshot::open`]; [`SnapshotError::WrongKind`] for a diff.
    pub fn open_full(path: impl AsRef<Path>) -> Result<Snapshot, SnapshotError> {
        Snapshot::open_as(path.as_ref(), Some(Kind::Full))
    }

    /// Opens a diff snapshot.
    ///
    /// # Errors
    /// As [`Snapshot::open`]; [`SnapshotError::BadMagic`] for a file that
    /// does not start with the magic, [`SnapshotError::WrongKind`] for a
    /// full snapshot.
    pub fn open_diff(path: impl AsRef<Path>) -> Result<Snapshot, SnapshotError> {
        Snapshot::open_as(path.as_ref(), Some(Kind::Diff))
    }

    fn open_as(path: &Path, want: Option<Kind>) -> Result<Snapshot, SnapshotError> {
        // A snapshot is read at offsets: a pipe or a device is refused
        // before it is opened (a FIFO's open would wait for a writer), and
        // an empty file holds no memory.
        let refuse = |why: &str| {
            let e = std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
            SnapshotError::io(path, "open", &e)
        };
        match std::fs::metadata(path) {
            Ok(m) if !m.is_file() => return Err(refuse("not a regular file")),
            Ok(m) if m.len() == 0 => return Err(refuse("an empty file holds no snapshot")),
            _ => {}
        }
        let file = File::open(path).map_err(|e| SnapshotError::io(path, "open", &e))?;
        let meta = file
            .metadata()
            .map_err(|e| SnapshotError::io(path, "stat", &e))?;
        let len = meta.len();
        let mut head = [0u8; HEADER_BYTES as usize];
        let n = head.len().min(len as usize);
        read_exact_at(&file, path, &mut head[..n], 0)?;
        let diff_head = Header::has_magic(&head) && u16::from_le_bytes([head[10], head[11]]) == 2;
        // A magic a bit or two off, at the start or in the trailer, is a
        // damaged snapshot, which the header's decode then names; it is
        // not read as a raw image.
        let trailer = !diff_head && len >= TRAILER_BYTES && {
            let mut m = [0u8; 8];
            read_exact_at(&file, path, &mut m, len - TRAILER_BYTES)?;
            Header::near_magic(&m)
        };
        let shape = if diff_head {
            Shape::Diff
        } else if trailer {
            Shape::Full
        } else if want == Some(Kind::Diff) || Header::near_magic(&head) {
            Shape::Diff // strict: the header's decode says what is wrong
        } else {
            Shape::Raw
        };
        let mut snap = Snapshot {
            file,
            path: path.to_path_buf(),
            info: SnapshotInfo {
                kind: Kind::Full,
                page_size: DEFAULT_PAGE_SIZE,
                memory_size: len,
                id: SnapshotId::zero(),
                base_id: None,
                ranges: 0,
                data_bytes: len,
                data_offset: 0,
                data_crc: 0,
                file_bytes: len,
                allocated_bytes: meta.blocks().saturating_mul(512),
                raw: false,
            },
            ranges: Vec::new(),
        };
        match shape {
            Shape::Diff => snap.read_diff(&head)?,
            Shape::Full => snap.read_trailer()?,
            Shape::Raw => snap.read_raw()?,
        }
        if let Some(want) = want {
            if want != snap.info.kind {
                return Err(SnapshotError::WrongKind {
                    path: snap.path,
                    expected: want,
                    found: snap.info.kind,
                });
            }
        }
        Ok(snap)
    }

    /// Checks a diff's header, length, header CRC and table.
    fn read_diff(&mut self, head: &[u8]) -> Result<(), SnapshotError> {
        let path = &self.path;
        let len = self.info.file_bytes;
        if len < HEADER_BYTES && Header::has_magic(head) {
            return Err(SnapshotError::Truncated {
                path: path.clone(),
                expected: HEADER_BYTES,
                got: len,
            });
        }
        let h = Header::decode(head, path)?;
        if h.kind != Kind::Diff {
            return Err(SnapshotError::WrongKind {
                path: path.clone(),
                expected: Kind::Diff,
                found: h.kind,
            });
        }
        // Disjoint page-aligned ranges: at most one per page.
        if h.range_count > h.memory_size / h.page_size {
            return Err(SnapshotError::BadHeader {
                path: path.clone(),
                field: "range_count",
                value: h.range_count,
            });
        }
        let expected =
            h.data_offset
                .checked_add(h.data_bytes)
                .ok_or_else(|| SnapshotError::BadHeader {
                    path: path.clone(),
                    field: "data_bytes",
                    value: h.data_bytes,
                })?;
        check_len(path, expected, len)?;
        // The block is at most the file's length (checked just above).
        let mut block = vec![0u8; h.data_offset as usize];
        read_exact_at(&self.file, path, &mut block, 0)?;
        let stored = super::format::stored_crc(&block);
        let computed = block_crc(&block);
        if stored != computed {
            return Err(SnapshotError::BadChecksum {
                path: path.clone(),
                what: "header",
                stored,
                computed,
            });
        }
        let table_end = HEADER_BYTES as usize + (h.range_count as usize) * 16;
        self.ranges = decode_table(&block[HEADER_BYTES as usize..table_end], &h, path)?;
        self.info = SnapshotInfo {
            kind: Kind::Diff,
            page_size: h.page_size,
            memory_size: h.memory_size,
            id: SnapshotId::diff(h.memory_size, stored),
            base_id: Some(h.base_id),
            ranges: h.range_count,
            data_bytes: h.data_bytes,
            data_offset: h.data_offset,
            data_crc: h.data_crc,
            ..self.info.clone()
        };
        Ok(())
    }

    /// Checks a full snapshot's trailer and length.
    fn read_trailer(&mut self) -> Result<(), SnapshotError> {
        let path = &self.path;
        let len = self.info.file_bytes;
        let mut block = vec![0u8; TRAILER_BYTES as usize];
        read_exact_at(&self.file, path, &mut block, len - TRAILER_BYTES)?;
        let h = Header::decode(&block, path)?;
        if h.kind != Kind::Full {
            return Err(SnapshotError::BadHeader {
                path: path.clone(),
                field: "kind",
                value: u64::from(h.kind.code()),
            });
        }
        let expected =
            h.memory_size
                .checked_add(TRAILER_BYTES)
                .ok_or_else(|| SnapshotError::BadHeader {
                    path: path.clone(),
                    field: "memory_size",
                    value: h.memory_size,
                })?;
        check_len(path, expected, len)?;
        let stored = super::format::stored_crc(&block);
        let computed = block_crc(&block);
        if stored != computed {
            return Err(SnapshotError::BadChecksum {
                path: path.clone(),
                what: "header",
                stored,
                computed,
            });
        }
        self.info.page_size = h.page_size;
        self.info.memory_size = h.memory_size;
        self.info.data_bytes = h.memory_size;
        self.info.data_crc = h.data_crc;
        self.info.id = SnapshotId::full(h.memory_size, h.data_crc);
        Ok(())
    }

    /// A raw memory image: its length is the memory size; its id needs the
    /// CRC of all of it.
    fn read_raw(&mut self) -> Result<(), SnapshotError> {
        let size = self.info.file_bytes;
        if !size.is_multiple_of(DEFAULT_PAGE_SIZE) {
            return Err(SnapshotError::UnalignedMemory {
                size,
                page_size: DEFAULT_PAGE_SIZE,
            });
        }
        self.info.raw = true;
        self.info.data_crc = self.memory_crc(&mut |_, _| {})?;
        self.info.id = SnapshotId::full(size, self.info.data_crc);
        Ok(())
    }

    /// The standard CRC-32C of all of a full snapshot's memory, read from
    /// the file (`progress(done, total)` after each chunk).
    fn memory_crc(&self, progress: &mut dyn FnMut(u64, u64)) -> Result<u32, SnapshotError> {
        self.crc_of(0, self.info.memory_size, progress)
    }

    /// The standard CRC-32C of `total` bytes of the file from byte `from`,
    /// a chunk at a time (`progress(done, total)` after each).
    fn crc_of(
        &self,
        from: u64,
        total: u64,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<u32, SnapshotError> {
        let chunk = CHUNK_BYTES.max(self.info.page_size);
        let mut buf = Buf::new(chunk);
        let mut crc = !0u32;
        let mut at = 0;
        while at < total {
            let n = (total - at).min(chunk) as usize;
            read_exact_at(&self.file, &self.path, buf.bytes_mut(n), from + at)?;
            scan_chunk(&buf, n, self.info.page_size as usize, &mut crc, |_, _| {
                Ok(())
            })?;
            at += n as u64;
            progress(at, total);
        }
        Ok(!crc)
    }

    /// What the file is.
    pub fn info(&self) -> &SnapshotInfo {
        &self.info
    }

    /// A diff's ranges, in ascending order (empty for a full snapshot).
    pub fn ranges(&self) -> &[MemoryRange] {
        &self.ranges
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file (to read a diff's data at
    /// [`SnapshotInfo::data_offset`]).
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// Reads `buf.len()` bytes of a full snapshot's memory at guest-physical
    /// address `gpa`.
    ///
    /// # Errors
    /// [`SnapshotError::WrongKind`] for a diff;
    /// [`SnapshotError::RangeOutsideMemory`] past the memory's end; I/O
    /// errors.
    pub fn read_memory(&self, gpa: u64, buf: &mut [u8]) -> Result<(), SnapshotError> {
        self.need_full()?;
        let size = self.info.memory_size;
        if gpa
            .checked_add(buf.len() as u64)
            .is_none_or(|end| end > size)
        {
            return Err(SnapshotError::RangeOutsideMemory {
                index: 0,
                gpa,
                length: buf.len() as u64,
                memory_size: size,
            });
        }
        read_exact_at(&self.file, &self.path, buf, gpa)
    }

    fn need_full(&self) -> Result<(), SnapshotError> {
        if self.info.kind == Kind::Full {
            Ok(())
        } else {
            Err(SnapshotError::WrongKind {
                path: self.path.clone(),
                expected: Kind::Full,
                found: self.info.kind,
            })
        }
    }

    /// The standard CRC-32C of each `page_size`-byte page of a full
    /// snapshot's memory: the list [`crate::migration::hash_pages`] gives
    /// for the guest's memory, so
    /// [`diff_pages`](crate::migration::diff_pages) can compare a snapshot
    /// with the memory it was taken of.
    ///
    /// # Errors
    /// [`SnapshotError::BadPageSize`] for a page size that is not a power
    /// of two from 512 to 2 MiB; [`SnapshotError::WrongKind`] for a diff;
    /// I/O errors.
    pub fn hash_pages(&self, page_size: u64) -> Result<Vec<u32>, SnapshotError> {
        self.need_full()?;
        let page = super::format::check_page_size(page_size)?;
        let size = self.info.memory_size;
        let chunk = CHUNK_BYTES.max(page);
        let zero_crc = crc32c::checksum(&vec![0u8; page as usize]);
        let mut buf = Buf::new(chunk);
        let mut out = Vec::with_capacity(size.div_ceil(page) as usize);
        let mut at = 0;
        while at < size {
            let n = (size - at).min(chunk) as usize;
            read_exact_at(&self.file, &self.path, buf.bytes_mut(n), at)?;
            let bytes = buf.bytes(n);
            for (p, w) in bytes
                .chunks(page as usize)
                .zip(buf.words(n).chunks(page as usize / 8))
            {
                out.push(if p.len() == page as usize && is_zero(w) {
                    zero_crc
                } else {
                    crc32c::checksum(p)
                });
            }
            at += n as u64;
        }
        Ok(out)
    }

    /// Reads all of the file's data and checks it against its CRC: a full
    /// snapshot's memory, a diff's data (opening checks only the header and
    /// table). `progress(done, total)` after each chunk.
    ///
    /// # Errors
    /// [`SnapshotError::BadChecksum`] (`what` is `"memory"` or `"data"`);
    /// I/O errors.
    pub fn verify(&self, progress: &mut dyn FnMut(u64, u64)) -> Result<(), SnapshotError> {
        let (what, computed) = match self.info.kind {
            Kind::Full => ("memory", self.memory_crc(progress)?),
            Kind::Diff => ("data", self.data_crc(progress)?),
        };
        if computed != self.info.data_crc {
            return Err(SnapshotError::BadChecksum {
                path: self.path.clone(),
                what,
                stored: self.info.data_crc,
                computed,
            });
        }
        Ok(())
    }

    /// The standard CRC-32C of a diff's data.
    fn data_crc(&self, progress: &mut dyn FnMut(u64, u64)) -> Result<u32, SnapshotError> {
        self.crc_of(self.info.data_offset, self.info.data_bytes, progress)
    }
}

/// [`SnapshotError::Truncated`] or [`SnapshotError::TrailingBytes`] when
/// the file is not `expected` bytes long.
fn check_len(path: &Path, expected: u64, got: u64) -> Result<(), SnapshotError> {
    let path = path.to_path_buf();
    match got.cmp(&expected) {
        core::cmp::Ordering::Less => Err(SnapshotError::Truncated {
            path,
            expected,
            got,
        }),
        core::cmp::Ordering::Greater => Err(SnapshotError::TrailingBytes {
            path,
            expected,
            got,
        }),
        core::cmp::Ordering::Equal => Ok(()),
    }
}

/// What the snapshot at `path` is ([`Snapshot::open`]'s checks, then its
/// [`SnapshotInfo`]).
///
/// # Errors
/// As [`Snapshot::open`].
pub fn info(path: impl AsRef<Path>) -> Result<SnapshotInfo, SnapshotError> {
    Ok(Snapshot::open(path)?.info)
}
