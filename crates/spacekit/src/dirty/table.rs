//! `MemoryRangeTable`: the ranges a migration pass copies, and their wire
//! format.

use alloc::vec::Vec;

use super::{page_shift, ranges, DirtyError, MemoryRange};

/// Bytes per range on the wire: `gpa` then `length`, little-endian `u64`s.
pub const WIRE_RANGE_BYTES: usize = 16;

/// An ordered table of memory ranges, as Cloud Hypervisor's
/// `vm_migration::protocol::MemoryRangeTable`.
///
/// ```
/// use spacekit::dirty::{MemoryRange, MemoryRangeTable};
///
/// // Pages 0-1 and 4 dirty; merging gaps of up to 2 clean pages joins them.
/// let table = MemoryRangeTable::from_bitmap(&[0b1_0011], 4096, 0, 2)?;
/// assert_eq!(table.ranges(), [MemoryRange { gpa: 0, length: 5 * 4096 }]);
/// let wire = table.to_bytes();
/// assert_eq!(MemoryRangeTable::from_bytes(&wire)?, table);
/// # Ok::<(), spacekit::dirty::DirtyError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryRangeTable {
    data: Vec<MemoryRange>,
}

impl MemoryRangeTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The dirty ranges of `bitmap` (see [`super::ranges`]), joining ranges
    /// separated by at most `merge_gap` clean pages (0: only adjacent pages
    /// join, which [`super::ranges`] already does).
    ///
    /// # Errors
    /// [`DirtyError::InvalidPageSize`] unless `page_size` is a power of two.
    pub fn from_bitmap(
        bitmap: &[u64],
        page_size: u64,
        base: u64,
        merge_gap: u64,
    ) -> Result<Self, DirtyError> {
        let mut t = Self::new();
        t.extend_from_bitmap(bitmap, page_size, base, merge_gap)?;
        Ok(t)
    }

    /// Appends the dirty ranges of `bitmap`, reusing the table's allocation
    /// (call [`MemoryRangeTable::clear`] first to refill it). A first range
    /// that continues the table's last one (within `merge_gap` pages) is
    /// joined to it.
    ///
    /// # Errors
    /// [`DirtyError::InvalidPageSize`] unless `page_size` is a power of two;
    /// the table is unchanged then.
    pub fn extend_from_bitmap(
        &mut self,
        bitmap: &[u64],
        page_size: u64,
        base: u64,
        merge_gap: u64,
    ) -> Result<(), DirtyError> {
        let shift = page_shift(page_size)?;
        let gap = merge_gap.checked_shl(shift).unwrap_or(u64::MAX);
        for r in ranges(bitmap, page_size, base)? {
            self.push_merging(r, gap);
        }
        Ok(())
    }

    /// Appends `r`, joining it to the last range when it starts at most
    /// `gap_bytes` after that range's end.
    #[inline]
    pub fn push_merging(&mut self, r: MemoryRange, gap_bytes: u64) {
        if let Some(last) = self.data.last_mut() {
            let end = last.end();
            if r.gpa >= end && r.gpa - end <= gap_bytes {
                last.length = r.end() - last.gpa;
                return;
            }
        }
        self.data.push(r);
    }

    /// Appends `r` as it is.
    pub fn push(&mut self, r: MemoryRange) {
        self.data.push(r);
    }

    /// Removes every range, keeping the allocation.
    pub fn clear(&mut self) {
        self.data.clear();
    }

    /// The ranges.
    pub fn ranges(&self) -> &[MemoryRange] {
        &self.data
    }

    /// Number of ranges.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether there are no ranges.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Total bytes covered.
    pub fn total_bytes(&self) -> u64 {
        self.data.iter().map(|r| r.length).sum()
    }

    /// Splits the table, in ascending order, into tables of at most
    /// `max_bytes` bytes each, cutting ranges where needed (Cloud
    /// Hypervisor's `partition`). `max_bytes == 0` yields the whole table
    /// as one part.
    pub fn partition(&self, max_bytes: u64) -> Vec<MemoryRangeTable> {
        if max_bytes == 0 {
            return alloc::vec![self.clone()];
        }
        let mut parts = Vec::new();
        let mut cur = MemoryRangeTable::new();
        let mut room = max_bytes;
        for r in &self.data {
            let mut r = *r;
            while r.length > 0 {
                let take = r.length.min(room);
                cur.data.push(MemoryRange {
                    gpa: r.gpa,
                    length: take,
                });
                r.gpa += take;
                r.length -= take;
                room -= take;
                if room == 0 {
                    parts.push(core::mem::take(&mut cur));
                    room = max_bytes;
                }
            }
        }
        if !cur.is_empty() {
            parts.push(cur);
        }
        parts
    }

    /// The wire format: each range as `gpa` then `length`, little-endian
    /// `u64`s (byte-compatible with Cloud Hypervisor's `#[repr(C)]` table).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.data.len() * WIRE_RANGE_BYTES);
        for r in &self.data {
            out.extend_from_slice(&r.gpa.to_le_bytes());
            out.extend_from_slice(&r.length.to_le_bytes());
        }
        out
    }

    /// Parses the wire format.
    ///
    /// # Errors
    /// [`DirtyError::BadWireLength`] unless the length is a multiple of 16;
    /// [`DirtyError::RangeOverflow`] for a range whose end passes 2^64.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DirtyError> {
        if !bytes.len().is_multiple_of(WIRE_RANGE_BYTES) {
            return Err(DirtyError::BadWireLength { len: bytes.len() });
        }
        let mut data = Vec::with_capacity(bytes.len() / WIRE_RANGE_BYTES);
        for (index, c) in bytes.chunks_exact(WIRE_RANGE_BYTES).enumerate() {
            let mut g = [0u8; 8];
            let mut l = [0u8; 8];
            g.copy_from_slice(&c[..8]);
            l.copy_from_slice(&c[8..]);
            let r = MemoryRange {
                gpa: u64::from_le_bytes(g),
                length: u64::from_le_bytes(l),
            };
            if r.gpa.checked_add(r.length).is_none() {
                return Err(DirtyError::RangeOverflow { index });
            }
            data.push(r);
        }
        Ok(MemoryRangeTable { data })
    }
}
