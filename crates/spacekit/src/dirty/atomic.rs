//! `DirtyBitmap`: a dirty-page log that many threads mark and one harvests.
//!
//! # Memory orderings
//!
//! * [`DirtyBitmap::mark`] sets bits with `fetch_or(Release)`, one per word the
//!   range touches (not one per page). A writer marks *after* it stored to
//!   guest memory, so the release publishes those stores with the bit.
//! * [`DirtyBitmap::harvest_into`] first reads each word with a `Relaxed`
//!   load (a cache line of 8 words at a time, skipped as a whole when all
//!   8 are zero) and skips it when zero; otherwise it takes the word with
//!   `swap(0, Acquire)`. The acquire pairs with the marks' release: a page
//!   seen dirty is read with the writer's stores visible. A mark that races
//!   with the relaxed load and is missed stays set in the word, so the next
//!   harvest returns it: nothing marked is ever lost, only deferred.
//! * [`DirtyBitmap::reset_range`] clears with `fetch_and(Relaxed)`: it only
//!   discards information.
//!
//! # Compared with rust-vmm's `vm_memory::bitmap::AtomicBitmap`
//!
//! The same log, with the same page arithmetic: a range `(addr, len)`
//! touches the pages of bytes `addr ..= addr + len - 1`, so a range that
//! straddles a page edge marks both pages, and `len == 0` marks nothing.
//! The differences:
//!
//! * addresses: `AtomicBitmap` takes offsets from the start of its region;
//!   a `DirtyBitmap` takes addresses, its [`Geometry`] saying where the
//!   region starts (`mark(base + off, len)` marks what
//!   `set_addr_range(off, len)` marks);
//! * out of range: `AtomicBitmap` silently marks (or resets) the part of a
//!   range inside its pages and ignores the rest (saturating on overflow),
//!   and answers `false` for a page past its end; a `DirtyBitmap` returns
//!   [`DirtyError::OutOfRange`] and changes nothing, also for bytes past
//!   `len()` within the last, partial page;
//! * cost: `set_addr_range` / `reset_addr_range` do one `SeqCst` atomic per
//!   page, [`DirtyBitmap::mark`] / [`DirtyBitmap::reset_range`] one per
//!   64-page word; `get_and_reset` does one `SeqCst` `fetch_and(0)` per word
//!   into a new `Vec`, [`DirtyBitmap::harvest_into`] a plain load per clean
//!   word into the caller's buffer;
//! * names: `AtomicBitmap::len()` counts pages ([`DirtyBitmap::pages`]);
//!   [`DirtyBitmap::len`] counts bytes (`AtomicBitmap::byte_size()`).

use alloc::vec::Vec;

use super::error::DirtyError;
use super::geometry::Geometry;
use super::harvest::{self, HarvestCounts};
use super::table::MemoryRangeTable;
use crate::arch::Level;
// core's atomics, or loom's under `--cfg loom` (tests/loom_dirty.rs).
use super::sync::{AtomicU64, Ordering};

/// Words the harvest checks together with plain loads (one cache line).
const CHUNK: usize = 8;

/// Takes the dirty words of `w` (whose values a plain load saw as `v`)
/// into `o`: a swap for each word seen dirty, a zero for each seen clean.
/// Returns the number of words swapped.
#[inline(always)]
fn take_words(o: &mut [u64], w: &[AtomicU64], v: &[u64]) -> usize {
    let mut dirty = 0;
    for ((o, w), &v) in o.iter_mut().zip(w).zip(v) {
        *o = if v == 0 {
            0
        } else {
            dirty += 1;
            w.swap(0, Ordering::Acquire)
        };
    }
    dirty
}

/// An atomic dirty bitmap over a guest memory region `[base, base + len)`
/// with pages of any power-of-two size (its [`Geometry`]).
///
/// ```
/// use spacekit::dirty::{DirtyBitmap, Geometry, Scan};
///
/// let log = DirtyBitmap::new(Geometry::new(0x4000_0000, 4096)?, 1 << 30)?;
/// log.mark(0x4000_1ff0, 0x20)?;            // touches pages 1 and 2
/// assert!(log.is_dirty(0x4000_2000)?);
/// let words = log.take();
/// assert_eq!(words[0], 0b110);
/// assert!(!log.is_dirty(0x4000_2000)?);    // harvesting clears
/// // The harvest's ranges, placed by the log's own geometry:
/// let ranges: Vec<_> = log.geometry().ranges(&words)?.collect();
/// assert_eq!((ranges[0].gpa, ranges[0].length), (0x4000_1000, 0x2000));
/// # Ok::<(), spacekit::dirty::DirtyError>(())
/// ```
#[derive(Debug)]
pub struct DirtyBitmap {
    words: Vec<AtomicU64>,
    geometry: Geometry,
    len: u64,
    shift: u32,
    pages: u64,
}

impl DirtyBitmap {
    /// A clean log of `len` bytes from `geometry.base()`, in pages of
    /// `geometry.page_size()` (the last page may be partial). Corresponds
    /// to vm-memory's `AtomicBitmap::new(len, page_size)` (which has no
    /// base) and to KVM allocating a slot's `dirty_bitmap`
    /// (`kvm_alloc_dirty_bitmap`).
    ///
    /// # Errors
    /// [`DirtyError::OutOfRange`] if `base + len` overflows, if the pages of
    /// the bitmap's last word (padding included) would go past 2^64 (the
    /// scans that turn its words into ranges refuse such a bitmap, see
    /// [`Geometry`]), or if the bitmap would not fit in memory.
    pub fn new(geometry: Geometry, len: u64) -> Result<Self, DirtyError> {
        let base = geometry.base();
        let shift = geometry.page_shift();
        if base.checked_add(len).is_none() {
            return Err(DirtyError::OutOfRange { addr: base, len });
        }
        let pages = len.div_ceil(geometry.page_size().get());
        let nwords = usize::try_from(pages.div_ceil(64))
            .map_err(|_| DirtyError::OutOfRange { addr: base, len })?;
        // What `Geometry::ranges` and the scans check of its words: refused
        // here, not at the first harvest.
        geometry.check_span(nwords)?;
        let mut words = Vec::new();
        words
            .try_reserve_exact(nwords)
            .map_err(|_| DirtyError::OutOfRange { addr: base, len })?;
        words.resize_with(nwords, || AtomicU64::new(0));
        Ok(DirtyBitmap {
            words,
            geometry,
            len,
            shift,
            pages,
        })
    }

    /// Number of pages tracked (vm-memory's `AtomicBitmap::len()`).
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// Number of `u64` words of the bitmap.
    pub fn words(&self) -> usize {
        self.words.len()
    }

    /// Where the log's pages are: its first address and page size. The
    /// words [`DirtyBitmap::harvest_into`] returns are placed by it (bit `i`
    /// = the page at `geometry().page_addr(i)`).
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Bytes tracked, from `geometry().base()` (vm-memory's
    /// `AtomicBitmap::byte_size()`).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the log tracks no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Pages `[first, last]` of the byte range, checked against the region.
    fn pages_of(&self, addr: u64, len: u64) -> Result<Option<(u64, u64)>, DirtyError> {
        let err = DirtyError::OutOfRange { addr, len };
        let off = addr.checked_sub(self.geometry.base()).ok_or(err.clone())?;
        let end = off.checked_add(len).ok_or(err.clone())?;
        if end > self.len {
            return Err(err);
        }
        if len == 0 {
            return Ok(None);
        }
        Ok(Some((off >> self.shift, (end - 1) >> self.shift)))
    }

    /// Applies `f(word, mask)` to every word of pages `[first, last]`.
    #[inline]
    fn for_words(&self, first: u64, last: u64, f: impl Fn(&AtomicU64, u64)) {
        let (w0, w1) = ((first / 64) as usize, (last / 64) as usize);
        for w in w0..=w1 {
            let lo = if w == w0 { first % 64 } else { 0 };
            let hi = if w == w1 { last % 64 } else { 63 };
            let mask = (!0u64 >> (63 - hi)) & (!0u64 << lo);
            f(&self.words[w], mask);
        }
    }

    /// Marks every page that `[addr, addr + len)` touches dirty: one
    /// `fetch_or` per word. `len == 0` marks nothing.
    ///
    /// Corresponds to vm-memory's `Bitmap::mark_dirty` /
    /// `AtomicBitmap::set_addr_range(addr - base, len)` (same pages, but one
    /// `SeqCst` `fetch_or` per page there, and out-of-range pages silently
    /// ignored) and, for one page, to Linux's `mark_page_dirty_in_slot`
    /// (`set_bit_le` on the slot's `dirty_bitmap`).
    ///
    /// # Errors
    /// [`DirtyError::OutOfRange`] if the range leaves the region; nothing is
    /// marked then.
    pub fn mark(&self, addr: u64, len: u64) -> Result<(), DirtyError> {
        if let Some((a, b)) = self.pages_of(addr, len)? {
            self.for_words(a, b, |w, m| {
                w.fetch_or(m, Ordering::Release);
            });
        }
        Ok(())
    }

    /// Clears the pages `[addr, addr + len)` touches, without harvesting
    /// them: one `fetch_and` per word. Corresponds to vm-memory's
    /// `AtomicBitmap::reset_addr_range(addr - base, len)` (one `SeqCst`
    /// `fetch_and` per page there).
    ///
    /// # Errors
    /// [`DirtyError::OutOfRange`] if the range leaves the region; nothing
    /// changes then.
    pub fn reset_range(&self, addr: u64, len: u64) -> Result<(), DirtyError> {
        if let Some((a, b)) = self.pages_of(addr, len)? {
            self.for_words(a, b, |w, m| {
                w.fetch_and(!m, Ordering::Relaxed);
            });
        }
        Ok(())
    }

    /// Whether the page holding `addr` is dirty. Corresponds to vm-memory's
    /// `Bitmap::dirty_at` / `AtomicBitmap::is_addr_set(addr - base)`, which
    /// answers `false` out of range instead of an error.
    ///
    /// # Errors
    /// [`DirtyError::OutOfRange`] if `addr` is outside the region.
    pub fn is_dirty(&self, addr: u64) -> Result<bool, DirtyError> {
        match self.pages_of(addr, 1)? {
            Some((p, _)) => {
                Ok(self.words[(p / 64) as usize].load(Ordering::Acquire) >> (p % 64) & 1 != 0)
            }
            None => Ok(false),
        }
    }

    /// Marks pages `[first, last]` dirty, clipped to the log's pages (pages
    /// at or past [`DirtyBitmap::pages`] are ignored; `first > last` marks
    /// nothing): one `fetch_or(Release)` per word, as [`DirtyBitmap::mark`].
    /// The page-index form behind vm-memory's `Bitmap::mark_dirty`, whose
    /// contract is to ignore what lies outside the region.
    #[cfg_attr(not(feature = "vm-memory"), allow(dead_code))]
    pub(crate) fn mark_pages_clipped(&self, first: u64, last: u64) {
        if first >= self.pages || first > last {
            return;
        }
        self.for_words(first, last.min(self.pages - 1), |w, m| {
            w.fetch_or(m, Ordering::Release);
        });
    }

    /// Whether page `page` is dirty (an `Acquire` load); `false` for a page
    /// at or past [`DirtyBitmap::pages`].
    #[cfg_attr(not(feature = "vm-memory"), allow(dead_code))]
    pub(crate) fn page_dirty(&self, page: u64) -> bool {
        page < self.pages
            && self.words[(page / 64) as usize].load(Ordering::Acquire) >> (page % 64) & 1 != 0
    }

    /// Moves the log into `out` (one word per 64 pages) and clears it: clean
    /// words cost one plain load (checked a cache line of 8 words at a
    /// time), dirty ones one atomic swap. Returns the number of dirty words.
    ///
    /// Corresponds to vm-memory's `AtomicBitmap::get_and_reset()` (the same
    /// words, but into a new `Vec`, with a `SeqCst` `fetch_and(0)` on every
    /// word) and to the loop of Linux's `kvm_get_dirty_log_protect`, which
    /// also skips zero words and takes the others with `xchg(word, 0)`.
    ///
    /// # Errors
    /// [`DirtyError::LengthMismatch`] unless `out.len() == self.words()`;
    /// nothing is harvested then.
    pub fn harvest_into(&self, out: &mut [u64]) -> Result<usize, DirtyError> {
        if out.len() != self.words.len() {
            return Err(DirtyError::LengthMismatch {
                expected: self.words.len(),
                found: out.len(),
            });
        }
        let mut dirty = 0;
        let mut outs = out.chunks_exact_mut(CHUNK);
        let mut words = self.words.chunks_exact(CHUNK);
        for (o, w) in (&mut outs).zip(&mut words) {
            let v: [u64; CHUNK] = core::array::from_fn(|i| w[i].load(Ordering::Relaxed));
            if v.iter().fold(0, |a, &b| a | b) == 0 {
                o.fill(0);
                continue;
            }
            dirty += take_words(o, w, &v);
        }
        // The last `words() % CHUNK` words, one at a time.
        let (o, w) = (outs.into_remainder(), words.remainder());
        let mut v = [0u64; CHUNK];
        for (v, w) in v.iter_mut().zip(w) {
            *v = w.load(Ordering::Relaxed);
        }
        dirty += take_words(o, w, &v);
        Ok(dirty)
    }

    /// Harvests the log and builds the round's table in one pass: each
    /// dirty word of the log is swapped to zero, ORed with the same word of
    /// `other` (KVM's log for the same pages) and its runs of dirty pages
    /// appended to `table` as ranges placed by `geometry` (normally
    /// [`DirtyBitmap::geometry`], or the same page size from the region's
    /// guest address). The ranges are those of
    /// [`Scan::new(other, geometry).or(harvested)`](super::Scan::or) after a
    /// [`DirtyBitmap::harvest_into`], and the log is left as that harvest
    /// leaves it; but the log's words are read once, a clean word costs a
    /// plain load and is never written (a batch of 64 clean words in both
    /// logs is skipped after one test), and no harvested copy is written
    /// unless asked for.
    ///
    /// `taken`, when given, is cleared and receives `(word index, word)` for
    /// every word taken from the log, in order: the harvested log in sparse
    /// form, for a caller that keeps it (one push per dirty word, where a
    /// dense copy writes every word).
    ///
    /// Like [`MemoryRangeTable::extend_from`](super::MemoryRangeTable::extend_from),
    /// the table is appended to (call [`MemoryRangeTable::clear`] first to
    /// refill it) and a first range that continues its last one is joined to
    /// it.
    ///
    /// Corresponds to what Cloud Hypervisor's `MemoryManager::dirty_log`
    /// does per region with vm-memory's `AtomicBitmap::get_and_reset` (a
    /// `SeqCst` `fetch_and(0)` on every word, into a new `Vec`), the `zip`
    /// of KVM's and the VMM's words and `MemoryRangeTable::from_dirty_bitmap`,
    /// three passes fused into one. The swap of only the words a plain load
    /// saw dirty is the loop of Linux's `kvm_get_dirty_log_protect`; why it
    /// loses no concurrent [`DirtyBitmap::mark`] is argued in `harvest.rs`
    /// and model-checked in `tests/loom_dirty.rs`.
    ///
    /// ```
    /// use spacekit::dirty::{DirtyBitmap, Geometry, MemoryRange, MemoryRangeTable};
    ///
    /// let g = Geometry::new(0, 4096)?;
    /// let log = DirtyBitmap::new(g, 128 * 4096)?;
    /// log.mark(2 * 4096, 2 * 4096)?;                   // pages 2-3, VMM writes
    /// let kvm = [0b0001_0011u64, 1];                   // pages 0-1, 4 and 64
    /// let mut table = MemoryRangeTable::new();
    /// let mut taken = Vec::new();
    /// let counts = log.harvest_or_into_table(&kvm, g, &mut table, Some(&mut taken))?;
    /// assert_eq!(table.ranges(), [
    ///     MemoryRange { gpa: 0, length: 5 * 4096 },
    ///     MemoryRange { gpa: 64 * 4096, length: 4096 },
    /// ]);
    /// assert_eq!((counts.words, counts.pages, counts.other_pages), (1, 2, 4));
    /// assert_eq!(taken, [(0, 0b1100)]);
    /// assert!(!log.is_dirty(2 * 4096)?);               // harvested
    /// # Ok::<(), spacekit::dirty::DirtyError>(())
    /// ```
    ///
    /// # Errors
    /// [`DirtyError::LengthMismatch`] unless `other.len() == self.words()`;
    /// [`DirtyError::OutOfRange`] if the log's last page would end past
    /// 2^64 when placed by `geometry`. Nothing is harvested then.
    pub fn harvest_or_into_table(
        &self,
        other: &[u64],
        geometry: Geometry,
        table: &mut MemoryRangeTable,
        taken: Option<&mut Vec<(usize, u64)>>,
    ) -> Result<HarvestCounts, DirtyError> {
        self.harvest_or_at(other, geometry, table, taken, Level::detect())
    }

    /// [`DirtyBitmap::harvest_or_into_table`] at `level`.
    pub(crate) fn harvest_or_at(
        &self,
        other: &[u64],
        geometry: Geometry,
        table: &mut MemoryRangeTable,
        taken: Option<&mut Vec<(usize, u64)>>,
        level: Level,
    ) -> Result<HarvestCounts, DirtyError> {
        if other.len() != self.words.len() {
            return Err(DirtyError::LengthMismatch {
                expected: self.words.len(),
                found: other.len(),
            });
        }
        geometry.check_span(self.words.len())?;
        let mut taken = taken;
        if let Some(t) = taken.as_deref_mut() {
            t.clear();
        }
        let (shift, base) = (geometry.page_shift(), geometry.base());
        Ok(table.extend_with(|out| {
            harvest::harvest_or(&self.words, other, level, out, shift, base, taken)
        }))
    }

    /// The atomic words themselves, under `--cfg loom` only: the hook
    /// through which `tests/loom_dirty.rs` runs a deliberately broken
    /// harvest (a load then a store of 0 instead of a swap) on a real
    /// bitmap, to show that its model catches the lost mark.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn loom_words(&self) -> &[AtomicU64] {
        &self.words
    }

    /// [`DirtyBitmap::harvest_into`] a new vector: what vm-memory's
    /// `AtomicBitmap::get_and_reset()` returns.
    pub fn take(&self) -> Vec<u64> {
        let mut out = alloc::vec![0u64; self.words.len()];
        // The length is right by construction.
        let _ = self.harvest_into(&mut out);
        out
    }
}
