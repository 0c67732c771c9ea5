//! Buddy: a fragmented 1M-page zone, then CMA rounds of aligned 16K-page
//! contiguous allocations, some held across rounds, some pages poisoned.

use crate::model::{canonical_blocks, E};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use spacekit::buddy::{BuddyAllocator, FreeSummary};
use spacekit::testing::Validate;

#[test]
fn cma_rounds_on_a_fragmented_million_page_zone() {
    const BASE: u64 = 0x40000;
    const PAGES: u64 = 1 << 20;
    const CMA: u64 = 16384;
    let mut rng = SmallRng::seed_from_u64(0xc3a_0001);
    let mut b = BuddyAllocator::new(BASE, PAGES).unwrap();
    assert_eq!(b.add_range(BASE, PAGES).map(|s| s.freed), Ok(PAGES));
    // Model: free flag per page.
    let mut free = vec![true; PAGES as usize];
    let idx = |p: u64| (p - BASE) as usize;
    let take = |free: &mut Vec<bool>, p: u64, n: u64| {
        for f in &mut free[idx(p)..idx(p) + n as usize] {
            assert!(*f, "page {p:#x}.. handed out twice");
            *f = false;
        }
    };

    // Fragment with buddy allocations, give half back.
    let mut blocks = Vec::new();
    for _ in 0..1500 {
        let o = rng.random_range(0..=10);
        let p = b.alloc_pages(o).unwrap();
        assert!(p.is_multiple_of(1 << o));
        take(&mut free, p, 1 << o);
        blocks.push((p, o));
    }
    blocks.shuffle(&mut rng);
    for &(p, o) in &blocks[..750] {
        assert_eq!(b.free_pages(p, o), Ok(true));
        free[idx(p)..idx(p) + (1 << o)].fill(true);
    }
    // And small pinned runs scattered over the upper half.
    for _ in 0..300 {
        let p = rng.random_range(BASE + 32 * CMA..BASE + PAGES - 64);
        let n = rng.random_range(1..64);
        let got = b.alloc_contig_range(p, p + n);
        match free[idx(p)..idx(p + n)].iter().position(|f| !f) {
            Some(k) => assert_eq!(got, Err(E::Busy { pfn: p + k as u64 })),
            None => {
                assert_eq!(got, Ok(()));
                take(&mut free, p, n);
            }
        }
    }
    let count = |free: &[bool]| free.iter().filter(|&&f| f).count() as u64;
    assert_eq!(b.free_page_count(), count(&free));
    b.validate().unwrap();

    // CMA rounds, some allocations held across rounds, some pages going bad.
    let mut outstanding: Vec<u64> = Vec::new();
    let mut taken = 0;
    for round in 0..50 {
        let want = (BASE..BASE + PAGES)
            .step_by(CMA as usize)
            .find(|&c| free[idx(c)..idx(c + CMA)].iter().all(|&f| f));
        let got = b.alloc_contig_pages(CMA, CMA);
        match want {
            Some(c) => {
                assert_eq!(got, Ok(c), "round {round}");
                take(&mut free, c, CMA);
                outstanding.push(c);
                taken += 1;
            }
            None => assert_eq!(got, Err(E::NoSpace { pages: CMA }), "round {round}"),
        }
        if !outstanding.is_empty() && (outstanding.len() > 3 || rng.random_bool(0.6)) {
            let c = outstanding.swap_remove(rng.random_range(0..outstanding.len()));
            let bad = rng.random_bool(0.1).then(|| c + rng.random_range(0..CMA));
            if let Some(p) = bad {
                b.mark_poisoned(p).unwrap();
            }
            let sum = b.free_contig_range(c, CMA).unwrap();
            let nbad = u64::from(bad.is_some());
            assert_eq!(
                sum,
                FreeSummary {
                    freed: CMA - nbad,
                    still_referenced: 0,
                    poisoned: nbad
                }
            );
            free[idx(c)..idx(c + CMA)].fill(true);
            if let Some(p) = bad {
                free[idx(p)] = false;
            }
        }
        assert_eq!(b.free_page_count(), count(&free), "round {round}");
    }
    assert!(taken >= 25, "only {taken} CMA allocations succeeded");
    for c in outstanding {
        assert_eq!(b.free_contig_range(c, CMA).map(|s| s.freed), Ok(CMA));
        free[idx(c)..idx(c + CMA)].fill(true);
    }
    assert_eq!(b.free_page_count(), count(&free));
    b.validate().unwrap();
    assert_eq!(b.free_blocks(), canonical_blocks(BASE, &free, 10));
    assert_eq!(b.largest_free_order(), Some(10));
}
