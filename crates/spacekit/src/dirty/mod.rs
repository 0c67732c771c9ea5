//! Dirty-page logs: an atomic dirty bitmap, and the conversion of a dirty
//! bitmap into a table of guest memory ranges (Cloud Hypervisor's
//! `MemoryRangeTable`).
//!
//! A [`Geometry`] says where a log's pages are: bit `i` of a dirty bitmap
//! stands for the page at `base + i * page_size`. It is validated once, when
//! it is built (the page size is a power of two, kept as a `NonZeroU64` like
//! vm-memory keeps its `NonZeroUsize`), and every call below takes it as it
//! is:
//!
//! * [`Geometry::ranges`] yields one [`MemoryRange`] per maximal run of dirty
//!   pages, coalesced across word boundaries; [`Geometry::ranges_or`] does the
//!   same for the OR of two logs (a hypervisor's and a VMM's) without
//!   building it;
//! * [`Scan`] is the one table builder: a bitmap and its geometry, with
//!   options [`Scan::or`] (a second log), [`Scan::merge_gap`] (join ranges a
//!   few clean pages apart) and [`Scan::parallel`] (all threads, feature
//!   `rayon`); [`MemoryRangeTable::extend_from`] runs it into a table,
//!   reusing the table's allocation;
//! * [`MemoryRangeTable`] speaks Cloud Hypervisor's wire format;
//! * [`DirtyBitmap`] is the atomic log itself, and documents its memory
//!   orderings; [`DirtyBitmap::harvest_or_into_table`] harvests it, ORs
//!   KVM's log in and builds the table in one pass over the words (a
//!   migration round's harvest and table); `VmmBitmap` (feature `vm-memory`) is the same log behind
//!   rust-vmm's `vm_memory::bitmap::Bitmap` traits, for
//!   `GuestMemoryMmap<VmmBitmap>`;
//! * [`ranges_from_pages`] (and [`ranges_from_pages_with_scratch`], which
//!   reuses its bitmap) turns KVM dirty-ring entries (page offsets in a
//!   slot, unordered and repeated) into ranges, and [`scatter_pages`] sets
//!   them in a bitmap to OR with another log.
//!
//! ```
//! use spacekit::dirty::{Geometry, MemoryRange, MemoryRangeTable, Scan};
//!
//! let geometry = Geometry::new(0x1_0000_0000, 4096)?;
//! let kvm = [0b0011u64, 0];
//! let vmm = [0b1_0000u64, 1 << 63];
//! let mut table = MemoryRangeTable::new();
//! table.extend_from(Scan::new(&kvm, geometry)?.or(&vmm)?.merge_gap(2).parallel(true));
//! assert_eq!(table.ranges(), [
//!     MemoryRange { gpa: 0x1_0000_0000, length: 5 * 4096 },
//!     MemoryRange { gpa: 0x1_0000_0000 + 127 * 4096, length: 4096 },
//! ]);
//! # Ok::<(), spacekit::dirty::DirtyError>(())
//! ```
//!
//! Every path starts from the same stage 1 (`scan.rs`): the vector code
//! marks the words of a 64-word batch whose bits change. The iterators then
//! write each marked word's change positions to an edge buffer and pair
//! them; the table builder writes each word's run starts and ends straight
//! into the table's ranges and converts a batch to addresses while it is
//! still in cache. Clean stretches and stretches inside a long dirty run are
//! skipped by the bitmap engine's SIMD search, so neither sparse nor dense
//! bitmaps cost a step per dirty page. [`Scan::parallel`] runs on two or
//! more threads only where a sample of the log shows a split pays: a
//! sparse log in chunks the caller and the pool claim from both ends
//! (`claim.rs`; the caller never waits for a thread to start), a dense one
//! by counting each block's ranges first; elsewhere it runs on one.

mod arch;
mod atomic;
mod builder;
#[cfg(feature = "rayon")]
#[doc(hidden)]
pub mod claim;
mod error;
#[cfg(feature = "rayon")]
mod gate;
mod geometry;
mod harvest;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod hooks;
mod iter;
mod memory_range;
mod opts;
mod ring;
mod scan;
mod sync;
mod table;
#[cfg(feature = "vm-memory")]
mod vmm;

pub use atomic::DirtyBitmap;
pub use builder::Scan;
pub use error::DirtyError;
pub use geometry::Geometry;
pub use harvest::HarvestCounts;
pub use iter::{DirtyRanges, DirtyRangesOr};
pub use memory_range::MemoryRange;
pub use ring::{ranges_from_pages, ranges_from_pages_with_scratch, scatter_pages};
pub use table::{MemoryRangeTable, WIRE_RANGE_BYTES};
#[cfg(feature = "vm-memory")]
#[cfg_attr(docsrs, doc(cfg(feature = "vm-memory")))]
pub use vmm::{VmmBitmap, VmmBitmapSlice};

use iter::RangeIter;
use opts::ScanOpts;
use scan::{One, Or};

impl Geometry {
    /// The dirty ranges of `bitmap`, in ascending address order, each a
    /// maximal run of dirty pages, coalesced across word boundaries: a
    /// streaming iterator with a fixed 8 KiB buffer (for a table, see
    /// [`Scan`]).
    ///
    /// ```
    /// use spacekit::dirty::{Geometry, MemoryRange};
    ///
    /// let bitmap = [0b0110u64, 1 << 63, 1];
    /// let got: Vec<_> = Geometry::new(0x1_0000, 4096)?.ranges(&bitmap)?.collect();
    /// assert_eq!(got, [
    ///     MemoryRange { gpa: 0x1_0000 + 4096, length: 2 * 4096 },
    ///     MemoryRange { gpa: 0x1_0000 + 127 * 4096, length: 2 * 4096 },
    /// ]);
    /// # Ok::<(), spacekit::dirty::DirtyError>(())
    /// ```
    ///
    /// # Errors
    /// [`DirtyError::OutOfRange`] if the bitmap's last page would end past
    /// 2^64.
    pub fn ranges<'a>(&self, bitmap: &'a [u64]) -> Result<DirtyRanges<'a>, DirtyError> {
        Ok(DirtyRanges(RangeIter::new(
            One(bitmap),
            *self,
            ScanOpts::default(),
        )?))
    }

    /// The dirty ranges of `a | b` (a hypervisor's log and a VMM's own), as
    /// [`Geometry::ranges`] would give for the OR of the two, without
    /// building it.
    ///
    /// ```
    /// use spacekit::dirty::{Geometry, MemoryRange};
    ///
    /// let kvm = [0b0011u64];
    /// let vmm = [0b1100u64];
    /// let got: Vec<_> = Geometry::new(0, 4096)?.ranges_or(&kvm, &vmm)?.collect();
    /// assert_eq!(got, [MemoryRange { gpa: 0, length: 4 * 4096 }]);
    /// # Ok::<(), spacekit::dirty::DirtyError>(())
    /// ```
    ///
    /// # Errors
    /// [`DirtyError::LengthMismatch`] if the bitmaps differ in length (never a
    /// silent truncation, unlike a `zip`); otherwise as [`Geometry::ranges`].
    pub fn ranges_or<'a>(
        &self,
        a: &'a [u64],
        b: &'a [u64],
    ) -> Result<DirtyRangesOr<'a>, DirtyError> {
        Ok(DirtyRangesOr(RangeIter::new(
            Or::new(a, b)?,
            *self,
            ScanOpts::default(),
        )?))
    }
}
