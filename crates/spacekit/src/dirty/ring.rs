//! KVM's dirty ring, its entries as ranges: [`ranges_from_pages`]
//! (and [`ranges_from_pages_with_scratch`]) and [`scatter_pages`].
//!
//! With `KVM_CAP_DIRTY_LOG_RING`, KVM reports a dirty page as an entry
//! `{ slot, offset }` of a per-vCPU ring (`struct kvm_dirty_gfn`), where
//! `offset` is the page's index within the memory slot. Entries come in
//! the order the vCPUs dirtied the pages, so they are unordered and a page
//! can appear many times (in one ring after a reset, or in the rings of
//! several vCPUs). A VMM collects each slot's offsets and either turns them
//! straight into ranges ([`ranges_from_pages`]: through a bitmap and the
//! range scanner when the pages are dense, else sort, skip repeats and
//! coalesce runs) or sets them in a bitmap ([`scatter_pages`]) to OR with
//! another log through [`Scan::or`](super::Scan::or). Neither needs KVM:
//! they take plain page indices.

use alloc::vec::Vec;

use super::builder::Scan;
use super::error::DirtyError;
use super::geometry::Geometry;
use super::memory_range::MemoryRange;
use super::table::MemoryRangeTable;

/// Bitmap words per entry up to which [`ranges_from_pages`] scatters into
/// a new bitmap and scans it rather than sorting: a new bitmap of more
/// than a few pages costs a page fault per 4 KiB when first written, about
/// 2 us each on the project's (virtualised) AMD EPYC machines.
const NEW_WORDS_PER_ENTRY: u64 = 2;

/// The same for [`ranges_from_pages_with_scratch`], whose bitmap is
/// reused. Measured on the project's AMD EPYC machines (entries in runs of
/// 1-8 pages, shuffled; medians): at 8 words per entry the bitmap path
/// takes 0.6-0.8 of the sort path's time (8K to 256K entries), at 2-4
/// words about 0.3-0.4, at 16 words it loses (64K entries over 1M words:
/// 1.5 ms against 1.2 ms). An LSD radix sort (11-bit digits) was no better
/// than `sort_unstable` where the bitmap does not apply (0.6-1.5x for
/// 4K-1M entries in a 2^30-page slot), so the sparse path sorts.
const SCRATCH_WORDS_PER_ENTRY: u64 = 8;

/// Appends to `table` one [`MemoryRange`] per maximal run of consecutive
/// pages in `pages`, a dirty ring's offsets for one memory slot of
/// `slot_pages` pages placed by `geometry` (page `p` is at
/// `geometry.base() + p * geometry.page_size()`). Returns the number of
/// distinct pages.
///
/// `pages` may hold the offsets in any order and with repeats (KVM's
/// `kvm_dirty_gfn.offset`, gathered from every vCPU's ring). The ranges
/// appended are in ascending address order, each a maximal run: exactly
/// what [`Scan`](super::Scan) gives for a bitmap with the same pages set
/// (see [`scatter_pages`]). Two ways there, chosen per call by the pages'
/// density (the result is the same):
///
/// * dense (a bitmap from the smallest page given to the largest takes at
///   most 2 words per entry; 8 with
///   [`ranges_from_pages_with_scratch`]): the pages are set in a bitmap
///   and the bitmap is scanned by the SIMD range scanner
///   ([`MemoryRangeTable::extend_from`]); `pages` is not changed. 64K
///   entries in runs of 1-8 pages over a bitmap of 64K words take about
///   0.3 ms this way against about 1 ms to sort;
/// * sparse: `pages` is sorted in place (`sort_unstable`) and read once: a
///   repeat is skipped, the next page extends the current run, any other
///   page ends it.
///
/// So `pages` is scratch: on return it holds the same values, in an
/// unspecified order. A VMM that converts rings every pass should use
/// [`ranges_from_pages_with_scratch`], which keeps its bitmap from call
/// to call: a new bitmap costs a page fault per 4 KiB, so this function
/// takes the bitmap only for the densest input.
///
/// The ranges are appended as they are: the first one is never merged with
/// the table's last range, even where the two touch (unlike
/// [`MemoryRangeTable::extend_from`], which joins across the seam). Call
/// [`MemoryRangeTable::clear`] first to refill a table.
///
/// The kernel, draining a ring to re-protect its pages
/// (`kvm_dirty_ring_reset`), folds consecutive entries that lie within 64
/// pages of each other into one 64-page mask and starts a new mask
/// otherwise, so its batches depend on the entries' order; here every run
/// becomes one range whatever the order.
///
/// ```
/// use spacekit::dirty::{ranges_from_pages, Geometry, MemoryRange, MemoryRangeTable};
///
/// // A slot of 16 pages at 1 MiB; the ring reported pages 5, 3, 4, 3, 9.
/// let geometry = Geometry::new(0x10_0000, 4096)?;
/// let mut pages = vec![5, 3, 4, 3, 9];
/// let mut table = MemoryRangeTable::new();
/// assert_eq!(ranges_from_pages(&mut pages, 16, geometry, &mut table)?, 4);
/// assert_eq!(table.ranges(), [
///     MemoryRange { gpa: 0x10_0000 + 3 * 4096, length: 3 * 4096 },
///     MemoryRange { gpa: 0x10_0000 + 9 * 4096, length: 4096 },
/// ]);
///
/// // A page outside the slot: an error, and nothing appended.
/// let mut bad = vec![1, 16];
/// assert!(ranges_from_pages(&mut bad, 16, geometry, &mut table).is_err());
/// assert_eq!(table.len(), 2);
/// # Ok::<(), spacekit::dirty::DirtyError>(())
/// ```
///
/// # Errors
/// [`DirtyError::OutOfRange`], checked before anything changes (`table`
/// and `pages` are then as they were):
/// * if a page is `>= slot_pages`; `addr` is then the address of the
///   largest such page (`u64::MAX` if it has none) and `len` the page
///   size;
/// * if the slot itself does not fit below 2^64 (`base + slot_pages *
///   page_size` overflows), even with no pages given; `addr` is then the
///   base and `len` the slot's size in bytes (saturating), as
///   [`Scan::new`](super::Scan::new) reports it.
pub fn ranges_from_pages(
    pages: &mut [u64],
    slot_pages: u64,
    geometry: Geometry,
    table: &mut MemoryRangeTable,
) -> Result<u64, DirtyError> {
    let mut bitmap = Vec::new();
    ranges_with(
        pages,
        slot_pages,
        geometry,
        table,
        &mut bitmap,
        NEW_WORDS_PER_ENTRY,
    )
}

/// [`ranges_from_pages`], keeping its bitmap in `scratch` from call to
/// call: no allocation (and no page faults) once `scratch` has grown, so
/// the bitmap is used for sparser pages too (up to 8 words, 64 bytes, per
/// entry, which bounds how far `scratch` grows).
/// `scratch`'s contents on entry and on return are unspecified; start with
/// an empty `Vec`.
///
/// ```
/// use spacekit::dirty::{ranges_from_pages_with_scratch, Geometry, MemoryRangeTable};
///
/// let geometry = Geometry::new(0, 4096)?;
/// let (mut table, mut scratch) = (MemoryRangeTable::new(), Vec::new());
/// for ring in [vec![7, 8, 6, 8], vec![100, 3]] {
///     let mut pages = ring;
///     table.clear();
///     ranges_from_pages_with_scratch(&mut pages, 1 << 20, geometry, &mut table, &mut scratch)?;
/// }
/// assert_eq!(table.len(), 2); // pages 3 and 100 of the second ring
/// # Ok::<(), spacekit::dirty::DirtyError>(())
/// ```
///
/// # Errors
/// As [`ranges_from_pages`]; `scratch` may have changed.
pub fn ranges_from_pages_with_scratch(
    pages: &mut [u64],
    slot_pages: u64,
    geometry: Geometry,
    table: &mut MemoryRangeTable,
    scratch: &mut Vec<u64>,
) -> Result<u64, DirtyError> {
    ranges_with(
        pages,
        slot_pages,
        geometry,
        table,
        scratch,
        SCRATCH_WORDS_PER_ENTRY,
    )
}

/// [`ranges_from_pages`], with the bitmap in `bitmap` when it takes at most
/// `words_per_entry` words per entry (0: always sort; `u64::MAX`: always
/// the bitmap where it can be allocated and scanned).
fn ranges_with(
    pages: &mut [u64],
    slot_pages: u64,
    geometry: Geometry,
    table: &mut MemoryRangeTable,
    bitmap: &mut Vec<u64>,
    words_per_entry: u64,
) -> Result<u64, DirtyError> {
    let ps = geometry.page_size().get();
    if geometry.page_addr(slot_pages).is_none() {
        return Err(DirtyError::OutOfRange {
            addr: geometry.base(),
            len: slot_pages.saturating_mul(ps),
        });
    }
    if pages.is_empty() {
        return Ok(0);
    }
    // One pass the compiler vectorises, before anything is written.
    let (min, max) = pages
        .iter()
        .fold((u64::MAX, 0), |(lo, hi), &p| (lo.min(p), hi.max(p)));
    if max >= slot_pages {
        return Err(DirtyError::OutOfRange {
            addr: geometry.page_addr(max).unwrap_or(u64::MAX),
            len: ps,
        });
    }
    // Every page is below `slot_pages`, whose address was checked above:
    // from here on, neither `p + 1` nor an address overflows.
    let words = max / 64 - min / 64 + 1;
    if words <= (pages.len() as u64).saturating_mul(words_per_entry) {
        if let Some(distinct) = via_bitmap(pages, min, words, geometry, table, bitmap) {
            return Ok(distinct);
        }
    }
    Ok(via_sort(pages, geometry, table))
}

/// The dense path: scatters `pages` (all in words `[min / 64, min / 64 +
/// words)`) into `bitmap` and appends its ranges. `None`, with nothing
/// appended, if the bitmap cannot be allocated or scanned (its padding
/// pages past the last one given would end past 2^64).
fn via_bitmap(
    pages: &[u64],
    min: u64,
    words: u64,
    geometry: Geometry,
    table: &mut MemoryRangeTable,
    bitmap: &mut Vec<u64>,
) -> Option<u64> {
    let n = usize::try_from(words).ok()?;
    bitmap.clear();
    bitmap.try_reserve_exact(n).ok()?;
    bitmap.resize(n, 0);
    let first = min / 64 * 64;
    for &p in pages {
        let i = p - first;
        bitmap[(i / 64) as usize] |= 1 << (i % 64);
    }
    // Bit 0 of the bitmap is page `first`, whose address is below the
    // slot's end.
    let g = geometry.with_base(geometry.page_addr(first)?);
    let scan = Scan::new(bitmap, g).ok()?;
    let old = table.len();
    let seam = table.ranges().last().map(MemoryRange::end);
    if seam == geometry.page_addr(min) {
        // The scan would join its first range to the table's last one:
        // push the ranges one by one instead.
        for r in g.ranges(bitmap).ok()? {
            table.push(r);
        }
    } else {
        table.extend_from(scan);
    }
    let shift = geometry.page_shift();
    Some(
        table.ranges()[old..]
            .iter()
            .map(|r| r.length >> shift)
            .sum(),
    )
}

/// The sparse path: sorts `pages` (all below the slot's end) and appends
/// their runs; returns the number of distinct pages.
fn via_sort(pages: &mut [u64], geometry: Geometry, table: &mut MemoryRangeTable) -> u64 {
    pages.sort_unstable();
    let shift = geometry.page_shift();
    let base = geometry.base();
    let range = |s: u64, e: u64| MemoryRange {
        gpa: base + (s << shift),
        length: (e - s) << shift,
    };
    // The current run is pages `[start, end)`.
    let Some((&first, rest)) = pages.split_first() else {
        return 0;
    };
    let (mut start, mut end) = (first, first + 1);
    let mut distinct = 1;
    for &p in rest {
        if p < end {
            continue; // a repeat of `end - 1`
        }
        distinct += 1;
        if p == end {
            end += 1;
        } else {
            table.push(range(start, end));
            (start, end) = (p, p + 1);
        }
    }
    table.push(range(start, end));
    distinct
}

/// Sets bit `p` of `bitmap` for every page `p` in `pages` (in any order,
/// with repeats), the dirty ring's offsets for one memory slot of
/// `slot_pages` pages: the bitmap form of [`ranges_from_pages`], to OR a
/// ring's pages with another log (a VMM's, or KVM's dirty log) through
/// [`Scan::or`](super::Scan::or), or to collect several rings before one
/// scan. Bits already set stay set. Corresponds to what
/// `KVM_GET_DIRTY_LOG` would have reported for those pages: bit `p % 64`
/// of word `p / 64`.
///
/// ```
/// use spacekit::dirty::{scatter_pages, Geometry, MemoryRange, MemoryRangeTable, Scan};
///
/// let ring = [65, 2, 64, 2];
/// let vmm_log = [0b1000u64, 0];                 // page 3, dirtied by the VMM
/// let mut bitmap = [0u64; 2];
/// scatter_pages(&ring, 100, &mut bitmap)?;      // a 100-page slot: 2 words
/// assert_eq!(bitmap, [0b100, 0b11]);
///
/// let scan = Scan::new(&bitmap, Geometry::new(0, 4096)?)?.or(&vmm_log)?;
/// assert_eq!(MemoryRangeTable::from_scan(scan).ranges(), [
///     MemoryRange { gpa: 2 * 4096, length: 2 * 4096 },
///     MemoryRange { gpa: 64 * 4096, length: 2 * 4096 },
/// ]);
/// # Ok::<(), spacekit::dirty::DirtyError>(())
/// ```
///
/// # Errors
/// Checked before any bit is set, so `bitmap` is unchanged on error:
/// * [`DirtyError::LengthMismatch`] unless `bitmap` has exactly
///   `slot_pages.div_ceil(64)` words (`expected`, saturating at
///   `usize::MAX`);
/// * [`DirtyError::OutOfRange`] if a page is `>= slot_pages`; the bitmap
///   has no geometry, so the error counts in pages: `addr` is the largest
///   such page and `len` is 1.
pub fn scatter_pages(pages: &[u64], slot_pages: u64, bitmap: &mut [u64]) -> Result<(), DirtyError> {
    let words = usize::try_from(slot_pages.div_ceil(64)).unwrap_or(usize::MAX);
    if bitmap.len() != words {
        return Err(DirtyError::LengthMismatch {
            expected: words,
            found: bitmap.len(),
        });
    }
    // One pass the compiler vectorises, before anything is written.
    let max = pages.iter().fold(0, |m, &p| m.max(p));
    if !pages.is_empty() && max >= slot_pages {
        return Err(DirtyError::OutOfRange { addr: max, len: 1 });
    }
    for &p in pages {
        bitmap[(p / 64) as usize] |= 1 << (p % 64);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Both paths of [`ranges_from_pages`] against each other and a
    //! page-at-a-time model, and the choice between them.
    use super::*;
    use crate::test_rng::Rng;
    use alloc::vec::Vec;

    /// Maximal runs of the distinct pages, placed by `g`.
    fn model(pages: &[u64], g: Geometry) -> Vec<MemoryRange> {
        let mut sorted = pages.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let ps = g.page_size().get();
        let mut out: Vec<MemoryRange> = Vec::new();
        for p in sorted {
            let gpa = g.page_addr(p).unwrap();
            match out.last_mut() {
                Some(r) if r.end() == gpa => r.length += ps,
                _ => out.push(MemoryRange { gpa, length: ps }),
            }
        }
        out
    }

    /// Runs [`ranges_with`] on a copy of `pages`, after `prefix` in the
    /// table; the ranges appended, the distinct count and the pages
    /// afterwards.
    fn run(
        pages: &[u64],
        slot: u64,
        g: Geometry,
        prefix: &[MemoryRange],
        words_per_entry: u64,
    ) -> (Vec<MemoryRange>, u64, Vec<u64>) {
        let mut p = pages.to_vec();
        let mut t = MemoryRangeTable::new();
        for &r in prefix {
            t.push(r);
        }
        let mut bitmap = alloc::vec![!0u64; 3];
        let n = ranges_with(&mut p, slot, g, &mut t, &mut bitmap, words_per_entry).unwrap();
        assert_eq!(&t.ranges()[..prefix.len()], prefix);
        (t.ranges()[prefix.len()..].to_vec(), n, p)
    }

    #[test]
    fn both_paths_match_the_model() {
        let mut rng = Rng(0x1234);
        for round in 0..400 {
            let slot = 1 + rng.below([70, 700, 1 << 14, 1 << 24][round % 4]);
            let n = rng.below(300) as usize;
            let mut pages = Vec::with_capacity(n);
            let near = rng.below(slot);
            while pages.len() < n {
                // Half the rounds cluster the pages (a narrow bitmap away
                // from page 0).
                let s = if round % 2 == 0 {
                    rng.below(slot)
                } else {
                    (near + rng.below(500)).min(slot - 1)
                };
                for p in s..(s + 1 + rng.below(9)).min(slot) {
                    pages.push(p);
                }
            }
            let g = Geometry::new(rng.below(1 << 40) << 12, 1 << rng.below(22)).unwrap();
            let want = model(&pages, g);
            let distinct = want.iter().map(|r| r.length >> g.page_shift()).sum::<u64>();
            // A prefix that ends where the first new range starts, or not.
            let touching = want.first().filter(|r| r.gpa > 0).map(|r| MemoryRange {
                gpa: r.gpa - 1,
                length: 1,
            });
            for prefix in [None, touching, Some(MemoryRange { gpa: 0, length: 0 })] {
                let prefix: Vec<_> = prefix.into_iter().collect();
                for wpe in [0, NEW_WORDS_PER_ENTRY, SCRATCH_WORDS_PER_ENTRY, u64::MAX] {
                    let (got, d, _) = run(&pages, slot, g, &prefix, wpe);
                    assert_eq!(
                        got, want,
                        "round {round} words/entry {wpe} prefix {prefix:?}"
                    );
                    assert_eq!(d, distinct, "round {round} words/entry {wpe}");
                }
            }
        }
    }

    #[test]
    fn dense_input_takes_the_bitmap_and_sparse_the_sort() {
        let g = Geometry::new(0, 4096).unwrap();
        // (pages, words per entry, whether the bitmap is taken): the bitmap
        // path leaves the pages as they are, the sort sorts them.
        let b = 10_000_000u64;
        let cases: [(&[u64], u64, bool); 6] = [
            (&[511, 5, 6, 0], NEW_WORDS_PER_ENTRY, true), // 8 words, 4 entries
            (&[512, 5, 6, 0], NEW_WORDS_PER_ENTRY, false), // 9 words
            (&[2047, 5, 6, 0], SCRATCH_WORDS_PER_ENTRY, true), // 32 words
            (&[2048, 5, 6, 0], SCRATCH_WORDS_PER_ENTRY, false), // 33 words
            (&[b + 511, b + 5, b + 6, b], NEW_WORDS_PER_ENTRY, true), // from word b / 64
            (&[b + 512, b + 5, b + 6, b], NEW_WORDS_PER_ENTRY, false),
        ];
        for (pages, wpe, bitmap) in cases {
            let (got, _, after) = run(pages, 1 << 30, g, &[], wpe);
            assert_eq!(got, model(pages, g));
            let mut sorted = pages.to_vec();
            sorted.sort_unstable();
            assert_eq!(
                after,
                if bitmap { pages.to_vec() } else { sorted },
                "{pages:?}"
            );
        }
    }

    #[test]
    fn a_bitmap_that_cannot_be_scanned_falls_back_to_the_sort() {
        // The slot ends 1 page below 2^64; a bitmap word's padding pages
        // would end past it.
        let g = Geometry::new(u64::MAX - 100 * 4096 + 1, 4096).unwrap();
        let (got, n, after) = run(&[98, 97, 3], 99, g, &[], u64::MAX);
        assert_eq!(
            (got, n, after),
            (model(&[3, 97, 98], g), 3, alloc::vec![3, 97, 98])
        );
    }
}
