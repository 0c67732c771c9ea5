//! [`MemoryRange`], and the range between two edges of a scan.

/// A guest-physical memory range, laid out as Cloud Hypervisor's
/// `vm_migration::protocol::MemoryRange` (`#[repr(C)] { gpa: u64, length: u64 }`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemoryRange {
    /// Guest-physical address of the first byte.
    pub gpa: u64,
    /// Length in bytes.
    pub length: u64,
}

impl MemoryRange {
    /// One past the last byte (saturating).
    pub fn end(&self) -> u64 {
        self.gpa.saturating_add(self.length)
    }
}

/// The range between edge positions `s` and `e` (in pages).
#[inline(always)]
pub(crate) fn range_of(s: u64, e: u64, shift: u32, base: u64) -> MemoryRange {
    MemoryRange {
        gpa: base + (s << shift),
        length: (e - s) << shift,
    }
}
