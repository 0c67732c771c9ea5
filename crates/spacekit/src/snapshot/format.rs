//! The on-disk header of both kinds and the checks of a diff's range table
//! (the format is described in the module's documentation).

use std::path::Path;
use std::vec::Vec;

use super::error::SnapshotError;
use super::id::{Kind, SnapshotId};
use crate::crc32c;
use crate::dirty::MemoryRange;

/// The first eight bytes of every header.
pub const MAGIC: [u8; 8] = *b"SKSNAP\x1a\n";
/// The format version this library writes and reads.
pub const VERSION: u16 = 1;
/// Bytes of the fixed header.
pub const HEADER_BYTES: u64 = 128;
/// Bytes of a full snapshot's trailer (the header, then zeros), after the
/// memory.
pub const TRAILER_BYTES: u64 = 4096;
/// Bytes per range in a diff's table: `gpa` then `length`, little-endian
/// `u64`s (the migration wire's form).
pub const RANGE_BYTES: u64 = 16;
/// The smallest page size.
pub const MIN_PAGE_SIZE: u64 = 512;
/// The largest page size (a 2 MiB huge page).
pub const MAX_PAGE_SIZE: u64 = 2 << 20;
/// The default page size.
pub const DEFAULT_PAGE_SIZE: u64 = 4096;
/// Where the header's CRC field is.
const CRC_AT: usize = 124;

/// `page_size` if it is a power of two from [`MIN_PAGE_SIZE`] to
/// [`MAX_PAGE_SIZE`].
pub(crate) fn check_page_size(page_size: u64) -> Result<u64, SnapshotError> {
    if page_size.is_power_of_two() && (MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&page_size) {
        Ok(page_size)
    } else {
        Err(SnapshotError::BadPageSize { page_size })
    }
}

/// The header fields, as stored (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub kind: Kind,
    pub page_size: u64,
    pub memory_size: u64,
    pub base_id: SnapshotId,
    pub range_count: u64,
    pub data_offset: u64,
    pub data_bytes: u64,
    pub data_crc: u32,
}

/// Little-endian `u64` at `at`.
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// Where a diff's data starts: after the header and a table of `ranges`
/// ranges, rounded up to a page. `None` on overflow.
pub(crate) fn diff_data_offset(ranges: u64, page_size: u64) -> Option<u64> {
    ranges
        .checked_mul(RANGE_BYTES)?
        .checked_add(HEADER_BYTES)?
        .checked_next_multiple_of(page_size)
}

impl Header {
    /// The 128 header bytes with the CRC field zero.
    pub fn encode(&self) -> [u8; HEADER_BYTES as usize] {
        let mut b = [0u8; HEADER_BYTES as usize];
        b[..8].copy_from_slice(&MAGIC);
        b[8..10].copy_from_slice(&VERSION.to_le_bytes());
        b[10..12].copy_from_slice(&self.kind.code().to_le_bytes());
        // Checked by `check_page_size` (at most 2 MiB) before any header
        // is built.
        b[12..16].copy_from_slice(&(self.page_size as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.memory_size.to_le_bytes());
        b[24..40].copy_from_slice(&self.base_id.0);
        b[40..48].copy_from_slice(&self.range_count.to_le_bytes());
        b[48..56].copy_from_slice(&self.data_offset.to_le_bytes());
        b[56..64].copy_from_slice(&self.data_bytes.to_le_bytes());
        b[64..68].copy_from_slice(&self.data_crc.to_le_bytes());
        b
    }

    /// Whether `b` starts with [`MAGIC`].
    pub fn has_magic(b: &[u8]) -> bool {
        b.get(..8) == Some(&MAGIC[..])
    }

    /// Whether `b` starts with [`MAGIC`] or with bytes at most two bits
    /// from it: a snapshot's damaged magic, not memory that happens to
    /// look like it (random bytes come that close once in about 2^53).
    pub fn near_magic(b: &[u8]) -> bool {
        b.get(..8).is_some_and(|m| {
            let bits: u32 = m.iter().zip(MAGIC).map(|(a, b)| (a ^ b).count_ones()).sum();
            bits <= 2
        })
    }

    /// Decodes and checks the 128 header bytes of `path` on their own:
    /// magic, version, kind, page size, zero flags and reserved bytes, and
    /// the fields each kind fixes. The CRC and the file's length are the
    /// caller's to check.
    pub fn decode(b: &[u8], path: &Path) -> Result<Header, SnapshotError> {
        let bad = |field: &'static str, value: u64| SnapshotError::BadHeader {
            path: path.to_path_buf(),
            field,
            value,
        };
        if b.len() < HEADER_BYTES as usize || !Header::has_magic(b) {
            return Err(SnapshotError::BadMagic {
                path: path.to_path_buf(),
            });
        }
        let version = u16_at(b, 8);
        if version != VERSION {
            return Err(SnapshotError::UnsupportedVersion {
                path: path.to_path_buf(),
                version,
            });
        }
        let kind = match u16_at(b, 10) {
            1 => Kind::Full,
            2 => Kind::Diff,
            k => return Err(bad("kind", u64::from(k))),
        };
        let page_size = u64::from(u32_at(b, 12));
        check_page_size(page_size).map_err(|_| bad("page_size", page_size))?;
        let memory_size = u64_at(b, 16);
        if !memory_size.is_multiple_of(page_size) {
            return Err(bad("memory_size", memory_size));
        }
        let flags = u32_at(b, 68);
        if flags != 0 {
            return Err(bad("flags", u64::from(flags)));
        }
        if let Some(i) = b[72..CRC_AT].iter().position(|&x| x != 0) {
            return Err(bad("reserved", 72 + i as u64));
        }
        let mut base = [0u8; 16];
        base.copy_from_slice(&b[24..40]);
        let h = Header {
            kind,
            page_size,
            memory_size,
            base_id: SnapshotId(base),
            range_count: u64_at(b, 40),
            data_offset: u64_at(b, 48),
            data_bytes: u64_at(b, 56),
            data_crc: u32_at(b, 64),
        };
        match kind {
            Kind::Full => {
                if h.base_id != SnapshotId::zero() {
                    return Err(bad("base_id", 1));
                }
                if h.range_count != 0 {
                    return Err(bad("range_count", h.range_count));
                }
                if h.data_offset != 0 {
                    return Err(bad("data_offset", h.data_offset));
                }
                if h.data_bytes != memory_size {
                    return Err(bad("data_bytes", h.data_bytes));
                }
            }
            Kind::Diff => {
                if Some(h.data_offset) != diff_data_offset(h.range_count, page_size) {
                    return Err(bad("data_offset", h.data_offset));
                }
                if h.data_bytes > memory_size || !h.data_bytes.is_multiple_of(page_size) {
                    return Err(bad("data_bytes", h.data_bytes));
                }
            }
        }
        Ok(h)
    }
}

/// The header CRC of a header block (`block[..128]` the header): the
/// standard CRC-32C of the block without its CRC field.
pub(crate) fn block_crc(block: &[u8]) -> u32 {
    let c = crc32c::raw(!0, &block[..CRC_AT]);
    !crc32c::raw(c, &block[CRC_AT + 4..])
}

/// Stores [`block_crc`] in the block's CRC field.
pub(crate) fn seal_block(block: &mut [u8]) -> u32 {
    let crc = block_crc(block);
    block[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    crc
}

/// The CRC stored in a header block.
pub(crate) fn stored_crc(block: &[u8]) -> u32 {
    u32_at(block, CRC_AT)
}

/// Decodes a diff's table (`bytes`, [`RANGE_BYTES`] per range) and checks
/// it: every range non-empty, page-aligned, after the one before it
/// (ascending, no overlap), inside memory, and their lengths adding up to
/// `data_bytes`.
pub(crate) fn decode_table(
    bytes: &[u8],
    h: &Header,
    path: &Path,
) -> Result<Vec<MemoryRange>, SnapshotError> {
    let mut out = Vec::with_capacity(bytes.len() / RANGE_BYTES as usize);
    let mut prev_end = 0u64;
    let mut total = 0u64;
    for (i, e) in bytes.chunks_exact(RANGE_BYTES as usize).enumerate() {
        let r = MemoryRange {
            gpa: u64_at(e, 0),
            length: u64_at(e, 8),
        };
        let why = if r.length == 0 {
            Some("is empty")
        } else if !r.gpa.is_multiple_of(h.page_size) || !r.length.is_multiple_of(h.page_size) {
            Some("is not page-aligned")
        } else if r.gpa < prev_end {
            Some("is out of order or overlaps the one before")
        } else if r
            .gpa
            .checked_add(r.length)
            .is_none_or(|e| e > h.memory_size)
        {
            Some("passes the end of memory")
        } else {
            None
        };
        if let Some(why) = why {
            return Err(SnapshotError::TableOutOfRange {
                path: path.to_path_buf(),
                index: i as u64,
                gpa: r.gpa,
                length: r.length,
                why,
            });
        }
        prev_end = r.end();
        // Disjoint ranges inside memory: the sum stays below memory_size.
        total += r.length;
        out.push(r);
    }
    if total != h.data_bytes {
        return Err(SnapshotError::BadHeader {
            path: path.to_path_buf(),
            field: "data_bytes",
            value: h.data_bytes,
        });
    }
    Ok(out)
}

/// Appends `ranges` to `out` in the table's form.
pub(crate) fn encode_table(ranges: &[MemoryRange], out: &mut Vec<u8>) {
    for r in ranges {
        out.extend_from_slice(&r.gpa.to_le_bytes());
        out.extend_from_slice(&r.length.to_le_bytes());
    }
}

/// What a snapshot file is: from its header (or, for a raw memory image
/// without a trailer, from its length and contents).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// Full or diff.
    pub kind: Kind,
    /// The page size it was written with (a raw image: 4096).
    pub page_size: u64,
    /// Bytes of guest memory.
    pub memory_size: u64,
    /// This snapshot's id (see [`SnapshotId`]).
    pub id: SnapshotId,
    /// A diff's base; `None` for a full snapshot.
    pub base_id: Option<SnapshotId>,
    /// A diff's ranges; 0 for a full snapshot.
    pub ranges: u64,
    /// Bytes of memory the file carries: a diff's ranges, all of memory
    /// for a full snapshot.
    pub data_bytes: u64,
    /// Where a diff's data starts in the file (0 for a full snapshot).
    pub data_offset: u64,
    /// The standard CRC-32C of the data (a full snapshot: of all memory).
    pub data_crc: u32,
    /// The file's length.
    pub file_bytes: u64,
    /// Bytes the file occupies on disk (`st_blocks * 512`): less than its
    /// length where zero pages are holes.
    pub allocated_bytes: u64,
    /// A full snapshot without spacekit's trailer: a plain memory image
    /// (made by another tool, or cut to its memory size).
    pub raw: bool,
}
