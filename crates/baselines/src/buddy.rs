//! Seed 003's "before": freeing a contiguous range of pages one order-0 page
//! at a time.
//!
//! Before the seed (and the earlier patch of its series for the refcounted
//! path), the kernel freed a contiguous range with one call per page:
//!
//! ```c
//! static void __free_contig_frozen_range(unsigned long pfn, unsigned long nr_pages)
//! {
//!         for (; nr_pages--; pfn++)
//!                 free_frozen_pages(pfn_to_page(pfn), 0);
//! }
//! ```
//!
//! and `free_contig_range` did the same with `__free_page` (drop the
//! reference, free at zero). Every page pays the whole single-page free:
//! its reference drop, its `free_pages_prepare` check (a poisoned page is
//! held back) and its own buddy-merge walk, which for a range of 16,384
//! pages rebuilds each order-10 block through ten merges, one page at a
//! time.
//!
//! [`free_contig_range_page_by_page`] is that loop ported onto spacekit's
//! [`BuddyAllocator`]: the same allocator, the same metadata, the same
//! merge code, so a benchmark against
//! [`BuddyAllocator::free_contig_range`] measures the batching alone. Each
//! page goes through [`BuddyAllocator::free_pages`]`(pfn, 0)`, which drops
//! the page's reference, refuses to free a poisoned page and merges the
//! page with its free buddies. That call is spacekit's single-page fast
//! path (a few nanoseconds per page), so the benchmark measures
//! the batching against a fast per-page free, not against a slow one.

use spacekit::buddy::{BuddyAllocator, BuddyError, FreeSummary};

/// Frees the refcounted pages `[pfn, pfn + n)` with one
/// [`BuddyAllocator::free_pages`]`(p, 0)` per page, in ascending order: the
/// pre-seed `for (; nr_pages--; pfn++) __free_page(pfn_to_page(pfn))` loop.
///
/// Returns the same counts as [`BuddyAllocator::free_contig_range`]: pages
/// freed, pages that kept a reference, and poisoned pages held back (a page
/// that was not freed counts as poisoned when its last reference is gone,
/// as spacekit counts it).
///
/// # Errors
/// [`OutOfRange`](BuddyError::OutOfRange) (checked up front, for the whole
/// range, like spacekit's), then whatever the first failing
/// [`free_pages`](BuddyAllocator::free_pages) returns
/// ([`AlreadyFree`](BuddyError::AlreadyFree),
/// [`NotReferenced`](BuddyError::NotReferenced)). Unlike spacekit's range
/// free, which checks the whole range before changing anything, the loop
/// stops at the failing page with the pages before it already freed, as the
/// kernel loop would have.
pub fn free_contig_range_page_by_page(
    b: &mut BuddyAllocator,
    pfn: u64,
    n: u64,
) -> Result<FreeSummary, BuddyError> {
    let bad = BuddyError::OutOfRange { pfn, pages: n };
    let end = pfn.checked_add(n).ok_or(bad)?;
    if pfn < b.base() || end > b.base() + b.pages() {
        return Err(bad);
    }
    let mut sum = FreeSummary::default();
    for p in pfn..end {
        if b.free_pages(p, 0)? {
            sum.freed += 1;
        } else {
            held_back(b, p, &mut sum)?;
        }
    }
    Ok(sum)
}

/// Counts page `p`, which its free did not free, as still referenced or
/// poisoned (the rare case, kept out of the loop).
#[cold]
#[inline(never)]
fn held_back(b: &BuddyAllocator, p: u64, sum: &mut FreeSummary) -> Result<(), BuddyError> {
    if b.page(p)?.refcount != 0 {
        sum.still_referenced += 1;
    } else {
        sum.poisoned += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use spacekit::testing::Validate;

    use super::*;

    /// A 64K-page zone at an unaligned base, all free, with a few blocks
    /// taken so the free lists are not trivial.
    fn zone() -> BuddyAllocator {
        let mut b = BuddyAllocator::new(0x1_0003, 1 << 16).unwrap();
        b.add_range(0x1_0003, 1 << 16).unwrap();
        for o in [0, 3, 5, 0, 1, 7] {
            b.alloc_pages(o).unwrap();
        }
        b
    }

    /// Runs both frees from identical allocators; the results and the
    /// final free lists must agree.
    fn same(setup: impl Fn(&mut BuddyAllocator), pfn: u64, n: u64) -> FreeSummary {
        let mut a = zone();
        setup(&mut a);
        let mut b = a.clone();
        let got = free_contig_range_page_by_page(&mut a, pfn, n);
        let want = b.free_contig_range(pfn, n);
        assert_eq!(got, want, "pfn {pfn:#x} n {n}");
        a.validate().unwrap();
        if want.is_ok() {
            assert_eq!(a.free_blocks(), b.free_blocks());
            assert_eq!(a.free_page_count(), b.free_page_count());
        }
        got.unwrap_or_default()
    }

    #[test]
    fn matches_the_batched_free() {
        for (start, n) in [
            (0x1_4000, 4096),
            (0x1_4007, 5000),
            (0x1_7fff, 3),
            (0x1_8000 - 100, 200),
        ] {
            let s = same(
                |b| b.alloc_contig_range(start, start + n).unwrap(),
                start,
                n,
            );
            assert_eq!(s.freed, n);
        }
    }

    #[test]
    fn poisoned_and_shared_pages_are_held_back() {
        let (start, n) = (0x1_4000, 2048);
        let s = same(
            |b| {
                b.alloc_contig_range(start, start + n).unwrap();
                b.mark_poisoned(start + 5).unwrap();
                b.mark_poisoned(start + 1000).unwrap();
                b.get_page(start + 7).unwrap();
                b.get_page(start + 1000).unwrap();
            },
            start,
            n,
        );
        assert_eq!((s.freed, s.still_referenced, s.poisoned), (n - 3, 2, 1));
    }

    #[test]
    fn errors_match() {
        same(|_| {}, 0x1_0000, 4);
        same(|_| {}, 0x1_0003 + (1 << 16) - 2, 4);
        same(|_| {}, u64::MAX - 1, 4);
        // A free page in the range: both refuse (the page-by-page loop after
        // freeing the pages before it).
        let mut a = zone();
        a.alloc_contig_range(0x1_4000, 0x1_4010).unwrap();
        assert_eq!(
            free_contig_range_page_by_page(&mut a, 0x1_4000, 0x11),
            Err(BuddyError::AlreadyFree { pfn: 0x1_4010 })
        );
        a.validate().unwrap();
        assert_eq!(
            free_contig_range_page_by_page(&mut a, 0x1_4000, 0),
            Ok(FreeSummary::default())
        );
    }
}
