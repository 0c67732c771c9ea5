//! [`Kind`] and [`SnapshotId`]: what a snapshot is and which one it is.

use core::fmt;

/// A full snapshot (all of memory) or a diff (the ranges dirtied since a
/// base).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// All of memory, at guest-physical offsets.
    Full,
    /// Only some ranges, applied on top of a base.
    Diff,
}

impl Kind {
    /// `"full"` or `"diff"`.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Full => "full",
            Kind::Diff => "diff",
        }
    }

    /// The header's `kind` field.
    pub(crate) const fn code(self) -> u16 {
        match self {
            Kind::Full => 1,
            Kind::Diff => 2,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The identity of a snapshot, which a diff names as its base: 16 bytes,
/// shown as 32 hex digits.
///
/// Derived from what the file holds, never random, so two runs over the
/// same memory give the same id and a raw memory image made by another
/// tool has one too:
///
/// * a **full** snapshot: the memory size (`u64`), the standard CRC-32C of
///   the whole memory (`u32`), then `b"FULL"`; it depends only on the
///   memory's bytes, so a merged snapshot has the id of a full snapshot
///   taken of the same memory;
/// * a **diff**: the memory size, the CRC-32C of its header (which covers
///   its base's id, its range table and the CRC of its data), then
///   `b"DIFF"`.
///
/// The ids catch a diff applied to the wrong base or out of order; they are
/// CRC-based, not cryptographic (two different memories of one size share
/// an id with probability 2^-32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SnapshotId(pub [u8; 16]);

impl SnapshotId {
    /// The id a full snapshot of `memory_size` bytes whose standard
    /// CRC-32C is `crc` has.
    pub const fn full(memory_size: u64, crc: u32) -> SnapshotId {
        SnapshotId::make(memory_size, crc, *b"FULL")
    }

    /// The id of a diff of `memory_size` bytes of memory whose header
    /// CRC-32C is `header_crc`.
    pub const fn diff(memory_size: u64, header_crc: u32) -> SnapshotId {
        SnapshotId::make(memory_size, header_crc, *b"DIFF")
    }

    const fn make(size: u64, crc: u32, tag: [u8; 4]) -> SnapshotId {
        let s = size.to_le_bytes();
        let c = crc.to_le_bytes();
        SnapshotId([
            s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], c[0], c[1], c[2], c[3], tag[0], tag[1],
            tag[2], tag[3],
        ])
    }

    /// The all-zero id (a full snapshot's `base_id` field).
    pub const fn zero() -> SnapshotId {
        SnapshotId([0; 16])
    }
}

impl fmt::Display for SnapshotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}
