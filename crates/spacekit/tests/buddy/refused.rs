//! Buddy refused calls: bad configs, out-of-range, misaligned, double and
//! unreferenced frees, bad orders and alignments, refcount overflow; each a
//! typed error that changes nothing.

use crate::checks::{refused, snapshot, zone};
use crate::model::{canonical_blocks, E, REF_LIMIT};
use spacekit::buddy::{BuddyAllocator, BuddyConfig, FreeSummary, MAX_ORDER_LIMIT};
use spacekit::testing::Validate;

#[test]
fn bad_config_is_refused() {
    let bad = |base: u64, pages: u64, max_order: u32, section_pages: u64| {
        let r = BuddyAllocator::with_config(
            base,
            pages,
            BuddyConfig {
                max_order,
                section_pages,
            },
        );
        assert!(
            matches!(r, Err(E::BadConfig { .. })),
            "with_config({base}, {pages}, {max_order}, {section_pages}) = {r:?}"
        );
    };
    bad(0, 16, 10, 0);
    bad(0, 16, 10, 3);
    bad(0, 16, 10, 32768 + 1);
    bad(0, 16, 10, u64::MAX);
    // A max-order block larger than a section.
    bad(0, 16, 4, 8);
    bad(0, 16, 1, 1);
    bad(0, 16, MAX_ORDER_LIMIT, 1 << 29);
    bad(0, 16, MAX_ORDER_LIMIT + 1, 32768);
    bad(0, 16, u32::MAX, 32768);
    bad(0, u64::from(u32::MAX), 10, 32768);
    bad(0, u64::MAX, 10, 32768);
    bad(u64::MAX - 5, 6, 10, 32768);
    bad(u64::MAX, 1, 0, 1);
    assert!(matches!(
        BuddyAllocator::new(0, 1 << 32),
        Err(E::BadConfig { .. })
    ));
    // The limits themselves are fine.
    let b = zone(3, 16, MAX_ORDER_LIMIT, 1 << 63);
    b.validate().unwrap();
    assert_eq!(
        (b.max_order(), b.section_pages()),
        (MAX_ORDER_LIMIT, 1 << 63)
    );
    assert_eq!(
        b.free_blocks_per_order().len(),
        MAX_ORDER_LIMIT as usize + 1
    );
    let top = zone(u64::MAX - 6, 6, 2, 4);
    assert_eq!(top.pages(), 6);
    let d = BuddyConfig::default();
    assert_eq!((d.max_order, d.section_pages), (10, 32768));
    // An empty zone has nothing to give.
    let mut empty = zone(7, 0, 3, 8);
    assert_eq!(empty.add_range(7, 0), Ok(FreeSummary::default()));
    assert_eq!(empty.alloc_pages(0), Err(E::NoMemory { order: 0 }));
    assert_eq!(empty.alloc_contig_pages(1, 1), Err(E::NoSpace { pages: 1 }));
    assert_eq!(empty.page(7), Err(E::OutOfRange { pfn: 7, pages: 1 }));
    assert_eq!(empty.largest_free_order(), None);
    empty.validate().unwrap();
}

#[test]
fn refused_calls_change_nothing() {
    // 200 pages from pfn 13 (unaligned), order <= 4, 32-page sections.
    let (base, pages) = (13u64, 200u64);
    let end = base + pages;
    let mut b = zone(base, pages, 4, 32);

    // Reserved memory: nothing to allocate, nothing to free.
    assert_eq!(
        refused(&mut b, |b| b.alloc_pages(0)),
        E::NoMemory { order: 0 }
    );
    assert_eq!(
        refused(&mut b, |b| b.free_pages(16, 0)),
        E::NotReferenced { pfn: 16 }
    );
    assert_eq!(
        refused(&mut b, |b| b.free_contig_range(20, 5)),
        E::NotReferenced { pfn: 20 }
    );
    assert_eq!(
        refused(&mut b, |b| b.put_ref(20)),
        E::NotReferenced { pfn: 20 }
    );
    assert_eq!(
        refused(&mut b, |b| b.alloc_contig_range(20, 21)),
        E::Busy { pfn: 20 }
    );

    b.add_range(base, pages).unwrap();
    b.validate().unwrap();

    // Out of range: below the base, at the end, and pfn + n overflowing.
    let oor = |pfn, pages| E::OutOfRange { pfn, pages };
    for (p, n) in [
        (base - 1, 1),
        (base - 1, 2),
        (0, 1),
        (end, 1),
        (end - 1, 2),
        (end + 1, 0),
        (base, pages + 1),
        (base, u64::MAX),
        (u64::MAX, 1),
        (u64::MAX - 1, 5),
        (u64::MAX, u64::MAX),
    ] {
        assert_eq!(refused(&mut b, |b| b.add_range(p, n)), oor(p, n));
        assert_eq!(refused(&mut b, |b| b.free_contig_range(p, n)), oor(p, n));
        assert_eq!(
            refused(&mut b, |b| b.free_contig_frozen_range(p, n)),
            oor(p, n)
        );
        if let Some(e) = p.checked_add(n) {
            assert_eq!(refused(&mut b, |b| b.alloc_contig_range(p, e)), oor(p, n));
        }
    }
    for p in [0, base - 1, end, end + 1, u64::MAX] {
        assert_eq!(refused(&mut b, |b| b.get_page(p)), oor(p, 1));
        assert_eq!(refused(&mut b, |b| b.put_ref(p)), oor(p, 1));
        assert_eq!(refused(&mut b, |b| b.mark_poisoned(p)), oor(p, 1));
        assert_eq!(refused(&mut b, |b| b.clear_poisoned(p)), oor(p, 1));
        assert_eq!(b.page(p), Err(oor(p, 1)));
    }
    // A block reaching past either end (aligned, so not Misaligned).
    assert_eq!(refused(&mut b, |b| b.free_pages(8, 3)), oor(8, 8));
    assert_eq!(refused(&mut b, |b| b.free_pages(208, 3)), oor(208, 8));
    assert_eq!(
        refused(&mut b, |b| b.free_pages(u64::MAX - 15, 4)),
        oor(u64::MAX - 15, 16)
    );
    // start > end.
    let e = refused(&mut b, |b| b.alloc_contig_range(50, 49));
    assert!(matches!(e, E::OutOfRange { pfn: 50, .. }), "{e:?}");
    // Empty ranges at the end are fine and change nothing.
    let before = snapshot(&b);
    assert_eq!(b.free_contig_range(end, 0), Ok(FreeSummary::default()));
    assert_eq!(
        b.free_contig_frozen_range(end, 0),
        Ok(FreeSummary::default())
    );
    assert_eq!(b.alloc_contig_range(end, end), Ok(()));
    assert_eq!(snapshot(&b), before);

    // Bad orders (checked before any shift by the order).
    for o in [5, 6, 31, 63, 64, u32::MAX] {
        let bad = E::BadOrder {
            order: o,
            max_order: 4,
        };
        assert_eq!(refused(&mut b, |b| b.alloc_pages(o)), bad);
        assert_eq!(refused(&mut b, |b| b.free_pages(0, o)), bad);
        assert_eq!(refused(&mut b, |b| b.free_pages(32, o)), bad);
    }
    // Bad contiguous allocations.
    assert_eq!(
        refused(&mut b, |b| b.alloc_contig_pages(0, 1)),
        E::ZeroPages
    );
    for a in [0, 3, 6, 12, u64::MAX] {
        assert_eq!(
            refused(&mut b, |b| b.alloc_contig_pages(1, a)),
            E::BadAlignment { align: a }
        );
    }
    for (n, a) in [
        (pages + 1, 1),
        (u64::MAX, 1),
        (1, 1 << 63),
        (pages, 2),
        (198, 8),
    ] {
        assert_eq!(
            refused(&mut b, |b| b.alloc_contig_pages(n, a)),
            E::NoSpace { pages: n }
        );
    }

    // Allocated blocks: misaligned, double frees, partly free blocks.
    let p = b.alloc_pages(3).unwrap();
    b.validate().unwrap();
    assert!(p.is_multiple_of(8) && (base..end - 7).contains(&p));
    for k in 1..8 {
        assert_eq!(
            refused(&mut b, |b| b.free_pages(p + k, 3)),
            E::Misaligned {
                pfn: p + k,
                order: 3
            }
        );
    }
    assert_eq!(
        refused(&mut b, |b| b.free_pages(p + 4, 3)),
        E::Misaligned {
            pfn: p + 4,
            order: 3
        }
    );
    // Tail pages hold no reference.
    assert_eq!(
        refused(&mut b, |b| b.free_pages(p + 2, 1)),
        E::NotReferenced { pfn: p + 2 }
    );
    assert_eq!(
        refused(&mut b, |b| b.free_contig_range(p, 8)),
        E::NotReferenced { pfn: p + 1 }
    );
    assert_eq!(
        refused(&mut b, |b| b.free_contig_frozen_range(p, 8)),
        E::Referenced {
            pfn: p,
            refcount: 1
        }
    );
    // The page below the block is free (only the block is allocated).
    let r0 = p - 1;
    assert!(b.page(r0).unwrap().free);
    assert_eq!(
        refused(&mut b, |b| b.free_contig_range(r0, 9)),
        E::AlreadyFree { pfn: r0 }
    );
    assert_eq!(
        refused(&mut b, |b| b.add_range(r0, 9)),
        E::AlreadyFree { pfn: r0 }
    );
    assert_eq!(
        refused(&mut b, |b| b.alloc_contig_range(r0, r0 + 9)),
        E::Busy { pfn: p }
    );
    assert_eq!(b.free_pages(p, 3), Ok(true));
    b.validate().unwrap();
    // Double free.
    assert_eq!(
        refused(&mut b, |b| b.free_pages(p, 3)),
        E::AlreadyFree { pfn: p }
    );
    assert_eq!(
        refused(&mut b, |b| b.get_page(p + 3)),
        E::AlreadyFree { pfn: p + 3 }
    );
    assert_eq!(
        refused(&mut b, |b| b.put_ref(p + 3)),
        E::AlreadyFree { pfn: p + 3 }
    );
    // A block with one free page inside: freeing it names that page.
    let q = b.alloc_pages(2).unwrap();
    assert_eq!(b.free_contig_frozen_range(q + 3, 1).map(|s| s.freed), Ok(1));
    b.validate().unwrap();
    assert_eq!(
        refused(&mut b, |b| b.free_pages(q, 2)),
        E::AlreadyFree { pfn: q + 3 }
    );
    // Freeing the other three pages brings the block back whole.
    assert_eq!(b.free_contig_frozen_range(q + 1, 2).map(|s| s.freed), Ok(2));
    assert_eq!(b.free_pages(q, 0), Ok(true));
    b.validate().unwrap();
    assert_eq!(b.free_page_count(), pages);
    assert_eq!(
        b.free_blocks(),
        canonical_blocks(base, &vec![true; pages as usize], 4)
    );
}

/// A page's reference count stops at its 24-bit limit.
#[test]
fn refcount_overflow_is_refused() {
    let mut b = zone(0, 4, 2, 4);
    b.add_range(0, 4).unwrap();
    let p = b.alloc_pages(0).unwrap();
    let mut n = 1;
    loop {
        match b.get_page(p) {
            Ok(c) => {
                n += 1;
                assert_eq!(c, n);
            }
            Err(e) => {
                assert_eq!(e, E::RefcountOverflow { pfn: p });
                break;
            }
        }
        assert!(n <= REF_LIMIT, "no overflow at {n}");
    }
    assert_eq!(n, REF_LIMIT);
    assert_eq!(
        refused(&mut b, |b| b.get_page(p)),
        E::RefcountOverflow { pfn: p }
    );
    assert_eq!(b.page(p).unwrap().refcount, REF_LIMIT);
    b.mark_poisoned(p).unwrap();
    assert_eq!(b.page(p).unwrap().refcount, REF_LIMIT);
    assert_eq!(b.put_ref(p), Ok(REF_LIMIT - 1));
    b.validate().unwrap();
}
