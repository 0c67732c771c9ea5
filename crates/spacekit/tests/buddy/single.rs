//! Buddy: the single-page fast path (`alloc_pages(0)` / `free_pages(p, 0)`)
//! and small orders against the per-page model, page by page: frees in
//! ascending, descending and random order, churn of allocations and frees,
//! and allocation always taking the lowest block of the smallest order that
//! fits (address-ordered, like the kernel's and buddy_system_allocator's
//! first fit), across unaligned bases, word and summary-level boundaries.

use crate::checks::{check, zone};
use crate::model::{Model, E};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use spacekit::buddy::BuddyAllocator;
use spacekit::testing::Validate;

/// `alloc_pages(order)` on both; the allocator must give the lowest head of
/// the model's smallest fitting free blocks.
fn alloc_lowest(b: &mut BuddyAllocator, m: &mut Model, order: u32) -> Option<u64> {
    let got = b.alloc_pages(order);
    match m.alloc_candidates(order) {
        Err(e) => {
            assert_eq!(got, Err(e));
            None
        }
        Ok(heads) => {
            let want = heads.iter().copied().min().unwrap();
            assert_eq!(got, Ok(want), "alloc_pages({order}): not the lowest fit");
            m.take_block(want, order);
            Some(want)
        }
    }
}

/// Every page of a zone taken one at a time, then freed one at a time in
/// three orders, the state checked against the model after every call.
#[test]
fn single_pages_in_every_order_match_the_model() {
    let mut rng = SmallRng::seed_from_u64(0x51_6E6E);
    for &(base, pages, max_order) in &[
        (0u64, 64u64, 3u32),
        (13, 300, 4),
        (64 * 64 - 5, 700, 6),
        (u64::MAX - 520, 520, 5),
    ] {
        for order_kind in 0..3 {
            let mut b = zone(base, pages, max_order, 1 << max_order.max(6));
            let mut m = Model::new(base, pages, max_order);
            assert_eq!(b.add_range(base, pages), m.add_range(base, pages));
            let mut taken = Vec::new();
            while let Some(p) = alloc_lowest(&mut b, &mut m, 0) {
                taken.push(p);
            }
            check(&b, &m, &"all taken");
            // Every page, once (in the order of the blocks' sizes, then
            // addresses: alloc_lowest checked each call).
            let mut sorted = taken.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (base..=base + (pages - 1)).collect::<Vec<_>>());
            match order_kind {
                0 => {}
                1 => taken.reverse(),
                _ => taken.shuffle(&mut rng),
            }
            for (k, &p) in taken.iter().enumerate() {
                assert_eq!(b.free_pages(p, 0), m.free_pages(p, 0));
                if k % 7 == 0 || k + 1 == taken.len() {
                    check(&b, &m, &(order_kind, k, p));
                } else {
                    b.validate().unwrap();
                }
            }
            assert_eq!(b.free_page_count(), pages);
        }
    }
}

/// Random churn of single pages and small orders, with references and
/// poison on the way, against the model after every call.
#[test]
fn churn_of_small_orders_matches_the_model() {
    let mut rng = SmallRng::seed_from_u64(0xC4_0211);
    for round in 0..40 {
        let base = rng.random_range(0..200u64);
        let pages = rng.random_range(1..1500u64);
        let max_order = rng.random_range(0..=6u32);
        let mut b = zone(base, pages, max_order, 1 << 6);
        let mut m = Model::new(base, pages, max_order);
        assert_eq!(b.add_range(base, pages), m.add_range(base, pages));
        let mut held: Vec<(u64, u32)> = Vec::new();
        for step in 0..600 {
            let ctx = (round, step);
            match rng.random_range(0..10) {
                0..=4 => {
                    let order = rng.random_range(0..=max_order.min(2));
                    if let Some(p) = alloc_lowest(&mut b, &mut m, order) {
                        held.push((p, order));
                    }
                }
                5..=7 if !held.is_empty() => {
                    let (p, o) = held.swap_remove(rng.random_range(0..held.len()));
                    assert_eq!(b.free_pages(p, o), m.free_pages(p, o), "{ctx:?}");
                }
                8 if !held.is_empty() => {
                    let (p, _) = held[rng.random_range(0..held.len())];
                    if rng.random_bool(0.5) {
                        assert_eq!(b.get_page(p), m.get_page(p));
                    } else {
                        assert_eq!(b.mark_poisoned(p), m.mark_poisoned(p));
                    }
                }
                _ => {
                    // A free of any page: refused unless it is held.
                    let p = base + rng.random_range(0..pages);
                    let got = b.free_pages(p, 0);
                    assert_eq!(got, m.free_pages(p, 0), "{ctx:?}");
                    if got.is_ok() {
                        held.retain(|&(q, _)| q != p);
                    }
                }
            }
            check(&b, &m, &ctx);
        }
    }
}

/// A single-page free outside the span, of a free page, or of a page with
/// no reference is refused with the error the model gives, changing
/// nothing; one holding two references is kept.
#[test]
fn single_page_refusals() {
    let mut b = zone(100, 64, 3, 64);
    let mut m = Model::new(100, 64, 3);
    assert_eq!(b.add_range(100, 64), m.add_range(100, 64));
    for p in [0, 99, 164, u64::MAX, 100, 130] {
        let before = b.free_blocks();
        assert_eq!(b.free_pages(p, 0), m.free_pages(p, 0));
        assert_eq!(b.free_blocks(), before);
    }
    assert_eq!(
        b.free_pages(99, 0),
        Err(E::OutOfRange { pfn: 99, pages: 1 })
    );
    let p = alloc_lowest(&mut b, &mut m, 0).unwrap();
    assert_eq!(b.get_page(p), m.get_page(p));
    assert_eq!(b.free_pages(p, 0), Ok(false));
    assert_eq!(m.free_pages(p, 0), Ok(false));
    assert_eq!(b.put_ref(p), m.put_ref(p));
    assert_eq!(b.free_pages(p, 0), Err(E::NotReferenced { pfn: p }));
    assert_eq!(m.free_pages(p, 0), Err(E::NotReferenced { pfn: p }));
    check(&b, &m, &"refusals");
}

/// A 1M-page zone: a random half of a 64K-page window freed page by page
/// from fully taken, then allocated back page by page: the pages come back
/// lowest block first, the smallest order first (so the singletons first),
/// and the zone ends as it began.
#[test]
fn a_large_zone_frees_and_allocates_back_lowest_first() {
    const BASE: u64 = 0x10_0000;
    const PAGES: u64 = 1 << 20;
    let mut rng = SmallRng::seed_from_u64(0xB16_0001);
    let mut b = BuddyAllocator::new(BASE, PAGES).unwrap();
    b.add_range(BASE, PAGES).unwrap();
    let pristine = b.free_blocks();
    b.alloc_contig_range(BASE, BASE + PAGES).unwrap();
    let w = BASE + PAGES / 2;
    let mut half: Vec<u64> = (w..w + 65536).collect();
    half.shuffle(&mut rng);
    half.truncate(32768);
    let mut free = vec![false; 65536];
    for &p in &half {
        assert_eq!(b.free_pages(p, 0), Ok(true));
        free[(p - w) as usize] = true;
    }
    b.validate().unwrap();
    // The expected order: blocks of the canonical form, by order then pfn.
    let mut blocks = crate::model::canonical_blocks(w, &free, 10);
    blocks.sort_by_key(|&(p, o)| (o, p));
    let mut want = Vec::new();
    for (p, o) in blocks {
        // A block of order o is split for single pages lowest first, but
        // only once every smaller order is empty: its pages come out in
        // address order after all blocks of lower order.
        want.extend(p..p + (1 << o));
    }
    let mut got = Vec::new();
    while let Ok(p) = b.alloc_pages(0) {
        got.push(p);
    }
    assert_eq!(got.len(), 32768);
    assert_eq!(got, want);
    b.validate().unwrap();
    // Everything back: the zone as it began.
    b.free_contig_range(BASE, w - BASE).unwrap();
    b.free_contig_range(w + 65536, BASE + PAGES - w - 65536)
        .unwrap();
    for p in (w..w + 65536).rev() {
        assert_eq!(b.free_pages(p, 0), Ok(true));
    }
    b.validate().unwrap();
    assert_eq!(b.free_blocks(), pristine);
}
