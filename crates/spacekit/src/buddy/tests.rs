//! Unit tests: batched contiguous free against page-by-page free, and
//! random operations with `validate()` after each (the integration tests
//! add proptest against a per-page model).

use alloc::vec::Vec;

use crate::test_rng::Rng;
use crate::testing::Validate;

use super::{BuddyAllocator, BuddyConfig, BuddyError};

fn zone(base: u64, pages: u64, max_order: u32, section: u64) -> BuddyAllocator {
    let mut b = BuddyAllocator::with_config(
        base,
        pages,
        BuddyConfig {
            max_order,
            section_pages: section,
        },
    )
    .unwrap();
    b.add_range(base, pages).unwrap();
    b.validate().unwrap();
    b
}

#[test]
fn batched_free_equals_page_by_page() {
    let mut r = Rng(0x1234_5678);
    for round in 0..300 {
        let base = r.below(100);
        let pages = 64 + r.below(2000);
        let max_order = r.below(8) as u32;
        let section = 1 << (u64::from(max_order) + r.below(4));
        let mut b = zone(base, pages, max_order, section);
        // Fragment: allocate some blocks.
        let mut held = Vec::new();
        for _ in 0..r.below(20) {
            if let Ok(p) = b.alloc_pages(r.below(u64::from(max_order) + 1) as u32) {
                held.push(p);
            }
        }
        let n = 1 + r.below(pages / 2);
        let Ok(start) = b.alloc_contig_pages(n, 1 << r.below(4)) else {
            continue;
        };
        b.validate().unwrap();
        for _ in 0..r.below(4) {
            b.mark_poisoned(start + r.below(n)).unwrap();
        }
        for _ in 0..r.below(4) {
            b.get_page(start + r.below(n)).unwrap();
        }
        let mut one = b.clone();
        let sum = b.free_contig_range(start, n).unwrap();
        b.validate()
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        let mut freed = 0;
        for p in start..start + n {
            if one.free_pages(p, 0).unwrap() {
                freed += 1;
            }
        }
        one.validate().unwrap();
        assert_eq!(sum.freed, freed);
        assert_eq!(b.free_blocks(), one.free_blocks(), "round {round}");
        assert_eq!(b.free_page_count(), one.free_page_count());
    }
}

#[test]
fn errors_change_nothing_and_frozen_pages_free() {
    let mut b = zone(5, 300, 4, 16);
    let s = b.alloc_contig_pages(40, 8).unwrap();
    assert_eq!(s, 8);
    let before = b.free_blocks();
    assert_eq!(
        b.free_contig_frozen_range(s, 40),
        Err(BuddyError::Referenced {
            pfn: s,
            refcount: 1
        })
    );
    assert_eq!(
        b.free_contig_range(s - 1, 2),
        Err(BuddyError::AlreadyFree { pfn: s - 1 })
    );
    assert_eq!(
        b.free_contig_range(4, 3),
        Err(BuddyError::OutOfRange { pfn: 4, pages: 3 })
    );
    assert_eq!(
        b.free_pages(s + 1, 1),
        Err(BuddyError::Misaligned {
            pfn: s + 1,
            order: 1
        })
    );
    assert_eq!(b.free_blocks(), before);
    b.validate().unwrap();
    // Drop every reference one page at a time except the last: each page
    // is then held with no reference (frozen), as a caller that froze them.
    let t = b.alloc_contig_pages(17, 4).unwrap();
    for p in t..t + 17 {
        b.get_page(p).unwrap();
        assert_eq!(b.free_pages(p, 0), Ok(false));
        assert_eq!(b.page(p).unwrap().refcount, 1);
    }
    for p in t..t + 17 {
        assert_eq!(b.put_ref(p), Ok(0));
    }
    assert_eq!(
        b.free_contig_range(t, 17),
        Err(BuddyError::NotReferenced { pfn: t })
    );
    b.mark_poisoned(t + 3).unwrap();
    let sum = b.free_contig_frozen_range(t, 17).unwrap();
    assert_eq!((sum.freed, sum.poisoned), (16, 1));
    assert!(b.page(t + 3).unwrap().poisoned && !b.page(t + 3).unwrap().free);
    assert!(b.clear_poisoned(t + 3).unwrap());
    assert_eq!(b.free_contig_frozen_range(t + 3, 1).unwrap().freed, 1);
    b.free_contig_range(s, 40).unwrap();
    assert_eq!(b.free_page_count(), 300);
    b.validate().unwrap();
    // The whole zone is free again: 300 pages from pfn 5 in the largest
    // aligned chunks that fit order 4 and 16-page sections.
    let mut at = 5u64;
    for (pfn, order) in b.free_blocks() {
        assert_eq!(pfn, at);
        at += 1 << order;
    }
    assert_eq!(at, 305);
}

#[test]
fn a_block_with_a_referenced_tail_is_held_back() {
    let mut b = zone(0, 1024, 10, 32768);
    let p = b.alloc_pages(3).unwrap();
    b.get_page(p + 2).unwrap();
    assert_eq!(b.free_pages(p, 3), Ok(false));
    assert!(!b.page(p).unwrap().free && b.page(p + 2).unwrap().refcount == 1);
    assert_eq!(b.free_page_count(), 1024 - 8);
    b.validate().unwrap();
    assert_eq!(
        BuddyAllocator::with_config(
            0,
            64,
            BuddyConfig {
                max_order: 6,
                section_pages: 16
            }
        )
        .err(),
        Some(BuddyError::BadConfig {
            what: "a max-order block is larger than a section"
        })
    );
}
