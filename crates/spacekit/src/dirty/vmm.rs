//! [`VmmBitmap`]: the atomic dirty bitmap as rust-vmm's
//! `vm_memory::bitmap::Bitmap` (feature `vm-memory`).
//!
//! vm-memory tracks the writes of a VMM (`Bytes::write_slice`,
//! `write_obj`, `VolatileSlice::copy_from`, ...) through the `Bitmap` of
//! each guest memory region: after every write it calls
//! `mark_dirty(offset, len)` with the write's offset in the region. Its own
//! backend, `AtomicBitmap`, sets one bit per page with one `SeqCst`
//! `fetch_or` each; a [`VmmBitmap`] is a [`DirtyBitmap`] behind the same
//! traits, so a write marks its pages with one masked `fetch_or(Release)`
//! per 64-page word, and the log is harvested into the caller's buffer and
//! scanned into a [`MemoryRangeTable`](super::MemoryRangeTable) by the
//! rest of [`dirty`](super).

use alloc::sync::Arc;
use core::fmt;

use vm_memory::bitmap::{Bitmap, NewBitmap, RefSlice, WithBitmapSlice};

use super::atomic::DirtyBitmap;
use super::error::DirtyError;
use super::geometry::Geometry;

/// The page size of a [`VmmBitmap`] built by vm-memory
/// (`NewBitmap::with_len`, e.g. through `GuestMemoryMmap::from_ranges`).
const DEFAULT_GEOMETRY: Geometry = match Geometry::new(0, VmmBitmap::DEFAULT_PAGE_SIZE) {
    Ok(g) => g,
    Err(_) => panic!("4096 is a power of two"),
};

/// A guest memory region's dirty log for rust-vmm's vm-memory: a shared
/// [`DirtyBitmap`] that implements `vm_memory::bitmap::{Bitmap,
/// NewBitmap, WithBitmapSlice}`, so a VMM tracks its own writes with
/// `GuestMemoryMmap<VmmBitmap>` where it would use
/// `GuestMemoryMmap<AtomicBitmap>`.
///
/// # The same pages as `AtomicBitmap`
///
/// Offsets are bytes from the start of the region; bit `i` stands for
/// bytes `[i * page_size, (i + 1) * page_size)` of the region.
/// `mark_dirty(offset, len)` marks the pages of bytes
/// `offset ..= offset + len - 1`, exactly those vm-memory's `AtomicBitmap`
/// marks, including its treatment of input outside the region (vm-memory's
/// `Bitmap` methods cannot fail):
///
/// * `len == 0` marks nothing;
/// * `offset + len - 1` saturates at `usize::MAX` instead of overflowing;
/// * pages at or past [`DirtyBitmap::pages`] are ignored, the pages of the
///   range inside the region are still marked;
/// * `dirty_at` answers `false` for a page past the end;
/// * a byte past [`DirtyBitmap::len`] but within the last, partial page
///   belongs to that page (it is marked and reported with it).
///
/// It never panics on any input. (The address-based
/// [`DirtyBitmap::mark`] instead returns an error for a range outside the
/// region.)
///
/// The differences: a write marks its pages with one masked
/// `fetch_or(Release)` per 64-page word, where `AtomicBitmap` does one
/// `SeqCst` `fetch_or` per page; `dirty_at` is an `Acquire` load in both.
/// The harvest, [`VmmBitmap::harvest_into`], writes into the caller's
/// buffer and costs a plain load per clean word (`AtomicBitmap::
/// get_and_reset` allocates and does a `SeqCst` `fetch_and` per word).
///
/// # Page size
///
/// vm-memory builds each region's bitmap with `NewBitmap::with_len(len)`,
/// which has no page size argument: `AtomicBitmap` then asks the host
/// (`sysconf(_SC_PAGE_SIZE)`, 4096 on x86_64), a `VmmBitmap` uses
/// [`VmmBitmap::DEFAULT_PAGE_SIZE`], 4096, the page size of KVM's dirty log
/// on x86_64, so the harvested words line up with KVM's and can be ORed
/// with them ([`Scan::or`](super::Scan::or)). For another page size, build
/// the bitmap with [`VmmBitmap::new`] and hand it to vm-memory's
/// `MmapRegionBuilder::new_with_bitmap`.
///
/// # Slices and sharing
///
/// The log is held in an [`Arc`]: [`VmmBitmap::shared`] gives a handle that
/// a migration thread harvests while the VMM keeps writing through
/// `GuestMemoryMmap`. The slices vm-memory takes for each access
/// ([`VmmBitmapSlice`], vm-memory's `RefSlice`: a reference to the bitmap
/// and a byte offset) cost no reference count.
///
/// ```
/// # #[cfg(feature = "kvm")] {
/// use spacekit::dirty::{MemoryRange, MemoryRangeTable, Scan, VmmBitmap};
/// use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, MmapRegion};
///
/// let mem: GuestMemoryMmap<VmmBitmap> =
///     GuestMemoryMmap::from_ranges(&[(GuestAddress(0x10_0000), 0x10_0000)]).unwrap();
/// mem.write_slice(&[1u8; 0x20], GuestAddress(0x10_1ff0)).unwrap(); // pages 1 and 2
/// mem.write_obj(7u64, GuestAddress(0x10_8000)).unwrap();          // page 8
///
/// let region = mem.find_region(GuestAddress(0x10_0000)).unwrap();
/// let log = MmapRegion::bitmap(region).shared();
/// let mut words = vec![0u64; log.words()];
/// log.harvest_into(&mut words).unwrap();
/// assert_eq!(words[0], 0b1_0000_0110);
///
/// // Placed at the region's guest address:
/// let g = log.geometry().with_base(0x10_0000);
/// let table = MemoryRangeTable::from_scan(Scan::new(&words, g).unwrap());
/// assert_eq!(table.ranges(), [
///     MemoryRange { gpa: 0x10_1000, length: 0x2000 },
///     MemoryRange { gpa: 0x10_8000, length: 0x1000 },
/// ]);
/// # }
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "vm-memory")))]
pub struct VmmBitmap {
    log: Arc<DirtyBitmap>,
    /// `log.geometry().page_shift()`, kept at hand for `mark_dirty`.
    shift: u32,
}

/// The slice of a [`VmmBitmap`] that vm-memory hands to each memory access:
/// vm-memory's `RefSlice`, a reference to the bitmap and a byte offset into
/// it, which it adds to the offsets it is given (wrapping, as vm-memory's
/// own slices do).
#[cfg_attr(docsrs, doc(cfg(feature = "vm-memory")))]
pub type VmmBitmapSlice<'a> = RefSlice<'a, VmmBitmap>;

impl VmmBitmap {
    /// The page size [`NewBitmap::with_len`] uses: 4096 bytes, the page
    /// size of KVM's dirty log on x86_64 (see the type's documentation).
    pub const DEFAULT_PAGE_SIZE: u64 = 4096;

    /// A clean log of a `len`-byte region in pages of
    /// `geometry.page_size()`. `geometry.base()` (the region's guest
    /// address, or 0) does not affect the vm-memory methods, which take
    /// offsets into the region; it only places the harvested words
    /// ([`DirtyBitmap::geometry`]) and the address-based methods of
    /// [`VmmBitmap::log`]. Corresponds to vm-memory's
    /// `AtomicBitmap::new(len, page_size)`.
    ///
    /// # Errors
    /// As [`DirtyBitmap::new`]: [`DirtyError::OutOfRange`] if
    /// `base + len` overflows or the bitmap cannot be allocated.
    pub fn new(geometry: Geometry, len: u64) -> Result<Self, DirtyError> {
        Ok(Self::from_shared(Arc::new(DirtyBitmap::new(
            geometry, len,
        )?)))
    }

    /// A `VmmBitmap` over an existing log, shared with whoever else holds
    /// it: marks through either are seen by both.
    pub fn from_shared(log: Arc<DirtyBitmap>) -> Self {
        let shift = log.geometry().page_shift();
        VmmBitmap { log, shift }
    }

    /// The underlying log: [`DirtyBitmap::harvest_into`],
    /// [`DirtyBitmap::words`], [`DirtyBitmap::geometry`], ...
    pub fn log(&self) -> &DirtyBitmap {
        &self.log
    }

    /// A new handle to the underlying log, for a thread that harvests it
    /// while the VMM keeps writing guest memory.
    pub fn shared(&self) -> Arc<DirtyBitmap> {
        Arc::clone(&self.log)
    }

    /// Moves the log into `out` (bit `i` of word `w`: page `64 * w + i` of
    /// the region) and clears it; returns the number of dirty words. See
    /// [`DirtyBitmap::harvest_into`], which this is. Corresponds to
    /// vm-memory's `AtomicBitmap::get_and_reset`.
    ///
    /// # Errors
    /// [`DirtyError::LengthMismatch`] unless `out.len()` is
    /// [`DirtyBitmap::words`]; nothing is harvested then.
    pub fn harvest_into(&self, out: &mut [u64]) -> Result<usize, DirtyError> {
        self.log.harvest_into(out)
    }

    /// The page of byte `offset` of the region (a 64-bit shift also where
    /// `usize` is narrower).
    #[inline(always)]
    fn page(&self, offset: usize) -> u64 {
        (offset as u64) >> self.shift
    }
}

impl fmt::Debug for VmmBitmap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VmmBitmap")
            .field("geometry", &self.log.geometry())
            .field("len", &self.log.len())
            .field("pages", &self.log.pages())
            .finish_non_exhaustive()
    }
}

impl<'a> WithBitmapSlice<'a> for VmmBitmap {
    type S = VmmBitmapSlice<'a>;
}

impl Bitmap for VmmBitmap {
    /// Marks the pages of bytes `offset ..= offset + len - 1` of the region
    /// (saturating), ignoring those past its end: one masked
    /// `fetch_or(Release)` per 64-page word. `len == 0` marks nothing.
    /// Never panics.
    #[inline]
    fn mark_dirty(&self, offset: usize, len: usize) {
        if len == 0 {
            return;
        }
        let last = offset.saturating_add(len - 1);
        self.log
            .mark_pages_clipped(self.page(offset), self.page(last));
    }

    /// Whether the page of byte `offset` of the region is dirty; `false`
    /// past the region's last page.
    #[inline]
    fn dirty_at(&self, offset: usize) -> bool {
        self.log.page_dirty(self.page(offset))
    }

    /// The bitmap seen from byte `offset` of the region on.
    #[inline]
    fn slice_at(&self, offset: usize) -> VmmBitmapSlice<'_> {
        RefSlice::new(self, offset)
    }
}

impl Default for VmmBitmap {
    /// An empty log (no pages), as vm-memory's `AtomicBitmap::default()`.
    fn default() -> Self {
        Self::with_len(0)
    }
}

impl NewBitmap for VmmBitmap {
    /// A clean log of a `len`-byte region in pages of
    /// [`VmmBitmap::DEFAULT_PAGE_SIZE`] (4096) bytes, at base 0 (vm-memory
    /// calls this for each region it maps).
    ///
    /// # Panics
    /// If the bitmap (one bit per page) cannot be allocated, as a `Vec`
    /// allocation would (vm-memory's `AtomicBitmap` aborts then).
    fn with_len(len: usize) -> Self {
        match Self::new(DEFAULT_GEOMETRY, len as u64) {
            Ok(b) => b,
            Err(e) => panic!("VmmBitmap::with_len({len}): {e}"),
        }
    }
}
