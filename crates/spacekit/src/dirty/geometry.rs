//! [`Geometry`]: where a dirty log's pages are.

use core::num::NonZeroU64;

use super::error::DirtyError;

/// Where a dirty log's pages are: bit `i` of the log stands for the page at
/// `base + i * page_size`.
///
/// Validated once, by [`Geometry::new`]: the page size is a power of two
/// (any: Cloud Hypervisor's `MemoryRangeTable::from_dirty_bitmap` also
/// takes a page size, which its memory manager's `dirty_log` sets to 4096
/// and virtio-mem to its block size; it does not check it), held as a
/// [`NonZeroU64`] like vm-memory's `NonZeroUsize` page size. Whether a given
/// bitmap's pages all have addresses depends on the bitmap's length, so
/// that is checked where a bitmap is applied: [`Geometry::ranges`],
/// [`Scan::new`], [`DirtyBitmap::new`]. Counted in whole words: the 64
/// pages of a bitmap's last word must end at or below 2^64, its padding
/// bits' pages included.
///
/// ```
/// use spacekit::dirty::{DirtyError, Geometry};
///
/// let g = Geometry::new(0x1_0000_0000, 2 << 20)?;     // 2 MiB pages at 4 GiB
/// assert_eq!((g.base(), g.page_size().get(), g.page_shift()), (1 << 32, 2 << 20, 21));
/// assert_eq!(g.page_addr(3), Some((1 << 32) + (6 << 20)));
/// assert_eq!(Geometry::new(0, 3000), Err(DirtyError::InvalidPageSize { page_size: 3000 }));
/// # Ok::<(), DirtyError>(())
/// ```
///
/// [`Scan::new`]: super::builder::Scan::new
/// [`DirtyBitmap::new`]: super::atomic::DirtyBitmap::new
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Geometry {
    base: u64,
    page_size: NonZeroU64,
}

impl Geometry {
    /// Pages of `page_size` bytes from guest address `base`.
    ///
    /// # Errors
    /// [`DirtyError::InvalidPageSize`] unless `page_size` is a power of two
    /// (0 is not).
    pub const fn new(base: u64, page_size: u64) -> Result<Geometry, DirtyError> {
        match NonZeroU64::new(page_size) {
            Some(p) if p.is_power_of_two() => Ok(Geometry { base, page_size: p }),
            _ => Err(DirtyError::InvalidPageSize { page_size }),
        }
    }

    /// Guest address of page 0 (bit 0 of the log).
    #[inline]
    pub const fn base(&self) -> u64 {
        self.base
    }

    /// Bytes per page: a power of two.
    #[inline]
    pub const fn page_size(&self) -> NonZeroU64 {
        self.page_size
    }

    /// `log2(page_size)`.
    #[inline]
    pub const fn page_shift(&self) -> u32 {
        self.page_size.trailing_zeros()
    }

    /// The same page size from another base: the geometry of a slice of a
    /// log that starts later (see [`Geometry::page_addr`]).
    #[inline]
    pub const fn with_base(self, base: u64) -> Geometry {
        Geometry { base, ..self }
    }

    /// Guest address of page `page`, `base + page * page_size`; `None` past
    /// 2^64.
    #[inline]
    pub const fn page_addr(&self, page: u64) -> Option<u64> {
        match page.checked_mul(self.page_size.get()) {
            Some(off) => self.base.checked_add(off),
            None => None,
        }
    }

    /// Checks that every page of a `words`-word bitmap has an address and
    /// every range's end `gpa + length` is a u64: `base + 64 * words *
    /// page_size` must stay below 2^64.
    pub(crate) fn check_span(&self, words: usize) -> Result<(), DirtyError> {
        let bytes = (words as u64)
            .checked_mul(64)
            .and_then(|bits| bits.checked_mul(self.page_size.get()));
        match bytes.and_then(|b| self.base.checked_add(b)) {
            Some(_) => Ok(()),
            None => Err(DirtyError::OutOfRange {
                addr: self.base,
                len: bytes.unwrap_or(u64::MAX),
            }),
        }
    }
}
