//! Buddy: batched contiguous frees (refcounted, frozen, `add_range`) equal
//! freeing page by page (proptest and every alignment around a section
//! edge), and spans at the very top of the pfn space.

use crate::checks::{check, snapshot, zone};
use crate::model::{canonical_blocks, Model};
use crate::TOP;
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use spacekit::buddy::{BuddyAllocator, FreeSummary, PageState};
use spacekit::testing::Validate;

#[derive(Clone, Copy, Debug)]
enum Mode {
    Refcounted,
    Frozen,
    Add,
}

#[derive(Clone, Copy, Debug)]
struct BatchCase {
    base: u64,
    pages: u64,
    max_order: u32,
    section_shift: u32,
    off: u64,
    len: u64,
    seed: u64,
    poison: u32,
    extra: u32,
    mode: Mode,
}

fn arb_batch() -> impl Strategy<Value = BatchCase> {
    (
        prop_oneof![
            6 => 0u64..100,
            TOP => (0u64..100).prop_map(|k| u64::MAX - 3000 + k),
        ],
        1u64..2000,
        0u32..=10,
        0u32..=4,
        (any::<u64>(), any::<u64>(), any::<u64>()),
        (0u32..5, 0u32..8),
        prop_oneof![Just(Mode::Refcounted), Just(Mode::Frozen), Just(Mode::Add)],
    )
        .prop_map(
            |(base, pages, max_order, extra_shift, (off, len, seed), (poison, extra), mode)| {
                let off = off % pages;
                BatchCase {
                    base,
                    pages,
                    max_order,
                    section_shift: max_order + extra_shift,
                    off,
                    len: 1 + len % (pages - off),
                    seed,
                    poison,
                    extra,
                    mode,
                }
            },
        )
}

/// Fragments a zone at random, then makes every page of `[s, e)` allocated
/// with at least one reference (taking free runs with
/// `alloc_contig_range`, adding a reference to pages that have none).
fn prepare_range(b: &mut BuddyAllocator, rng: &mut SmallRng, s: u64, e: u64) {
    let mo = b.max_order();
    let (base, end) = (b.base(), b.base() + b.pages());
    let mut blocks = Vec::new();
    for _ in 0..rng.random_range(0..40) {
        let o = rng.random_range(0..=mo);
        if let Ok(p) = b.alloc_pages(o) {
            blocks.push((p, o));
        }
    }
    // Give some back (tail pages of the rest keep no reference).
    for (p, o) in blocks {
        if rng.random_bool(0.5) {
            assert_eq!(b.free_pages(p, o), Ok(true));
        }
    }
    // Holes: poisoned pages outside the range.
    for _ in 0..rng.random_range(0..4) {
        let p = rng.random_range(base..end);
        if !(s..e).contains(&p) {
            b.mark_poisoned(p).unwrap();
        }
    }
    let mut p = s;
    while p < e {
        let st = b.page(p).unwrap();
        if st.free {
            let mut q = p + 1;
            while q < e && b.page(q).unwrap().free {
                q += 1;
            }
            b.alloc_contig_range(p, q).unwrap();
            p = q;
        } else {
            if st.refcount == 0 {
                b.get_page(p).unwrap();
            }
            p += 1;
        }
    }
    b.validate().unwrap();
}

fn run_batch(c: BatchCase) {
    let mut rng = SmallRng::seed_from_u64(c.seed);
    let mut b = zone(c.base, c.pages, c.max_order, 1 << c.section_shift);
    let (s, e) = (c.base + c.off, c.base + c.off + c.len);
    match c.mode {
        Mode::Add => {
            // Everything but the range is free memory; the range's pages
            // are reserved, some with references or poison.
            b.add_range(c.base, c.off).unwrap();
            b.add_range(e, c.base + c.pages - e).unwrap();
            for _ in 0..c.extra {
                b.get_page(rng.random_range(s..e)).unwrap();
            }
        }
        Mode::Refcounted | Mode::Frozen => {
            b.add_range(c.base, c.pages).unwrap();
            prepare_range(&mut b, &mut rng, s, e);
            for _ in 0..c.extra {
                b.get_page(rng.random_range(s..e)).unwrap();
            }
        }
    }
    for _ in 0..c.poison {
        b.mark_poisoned(rng.random_range(s..e)).unwrap();
    }
    if let Mode::Frozen = c.mode {
        for p in s..e {
            while b.page(p).unwrap().refcount > 0 {
                b.put_ref(p).unwrap();
            }
        }
    }
    b.validate().unwrap();
    let before: Vec<PageState> = (s..e).map(|p| b.page(p).unwrap()).collect();
    let mut one = b.clone();

    // Batched.
    let sum = match c.mode {
        Mode::Refcounted => b.free_contig_range(s, c.len),
        Mode::Frozen => b.free_contig_frozen_range(s, c.len),
        Mode::Add => b.add_range(s, c.len),
    }
    .unwrap();
    b.validate().unwrap();

    // One page at a time, in an independent way where there is one.
    let mut want = FreeSummary::default();
    let mut order: Vec<u64> = (s..e).collect();
    order.shuffle(&mut rng);
    for p in order {
        let st = before[(p - s) as usize];
        match c.mode {
            Mode::Refcounted => {
                let freed = one.free_pages(p, 0).unwrap();
                if st.refcount > 1 {
                    want.still_referenced += 1;
                } else if st.poisoned {
                    want.poisoned += 1;
                } else {
                    want.freed += 1;
                }
                assert_eq!(
                    freed,
                    st.refcount == 1 && !st.poisoned,
                    "page {p:#x} {st:?}"
                );
            }
            Mode::Frozen => {
                if st.poisoned {
                    want.poisoned += 1;
                } else {
                    want.freed += 1;
                    one.get_page(p).unwrap();
                    assert_eq!(one.free_pages(p, 0), Ok(true));
                }
            }
            Mode::Add => {
                let r = one.add_range(p, 1).unwrap();
                if st.poisoned {
                    want.poisoned += 1;
                    assert_eq!(r.poisoned, 1);
                } else {
                    want.freed += 1;
                    assert_eq!(r.freed, 1);
                }
            }
        }
    }
    one.validate().unwrap();
    assert_eq!(sum, want);
    assert_eq!(b.free_blocks(), one.free_blocks());
    assert_eq!(snapshot(&b), snapshot(&one));
    // And both are the canonical form of their free pages.
    let free: Vec<bool> = (c.base..c.base + c.pages)
        .map(|p| b.page(p).unwrap().free)
        .collect();
    assert_eq!(
        b.free_blocks(),
        canonical_blocks(c.base, &free, c.max_order)
    );
}

proptest! {
    #![proptest_config(crate::regressions::with_cases(768))]

    #[test]
    fn batched_contig_free_equals_page_by_page(c in arb_batch()) {
        run_batch(c);
    }
}

/// The batching paths at their edges: every start alignment and length
/// around a section edge, with sections smaller than, equal to and larger
/// than the largest block.
#[test]
fn batched_free_across_section_edges() {
    for (max_order, section) in [
        (3u32, 8u64),
        (3, 16),
        (2, 4),
        (0, 1),
        (0, 2),
        (1, 2),
        (4, 16),
    ] {
        for off in 0..20u64 {
            for len in 1..=40u64 {
                let base = 3;
                let pages = 64;
                if off + len > pages {
                    continue;
                }
                let mut b = zone(base, pages, max_order, section);
                b.add_range(base, pages).unwrap();
                let s = base + off;
                b.alloc_contig_range(s, s + len).unwrap();
                let mut one = b.clone();
                let mut m = Model::new(base, pages, max_order);
                m.add_range(base, pages).unwrap();
                m.alloc_contig_range(s, s + len).unwrap();
                let want = m.free_contig(s, len, false).unwrap();
                assert_eq!(b.free_contig_range(s, len), Ok(want));
                for p in s..s + len {
                    assert_eq!(one.free_pages(p, 0), Ok(true));
                }
                check(&b, &m, &(max_order, section, off, len));
                assert_eq!(snapshot(&b), snapshot(&one));
            }
        }
    }
}

/// Spans in the last section of the pfn space (the section end is 2^64)
/// and ending at `u64::MAX`: every path that frees a run computes a
/// section edge there.
#[test]
fn spans_at_the_top_of_the_pfn_space() {
    for (base, pages, max_order, section) in [
        (u64::MAX - 1000, 1000, 10, 32768),
        (u64::MAX - 37, 37, 3, 8),
        (u64::MAX - 300, 200, 4, 1 << 63),
        ((1 << 63) + 5, 100, 2, 1 << 63),
    ] {
        let ctx = (base, pages, max_order, section);
        let mut b = zone(base, pages, max_order, section);
        let mut m = Model::new(base, pages, max_order);
        assert_eq!(b.add_range(base, pages), m.add_range(base, pages));
        check(&b, &m, &ctx);
        let p = b.alloc_pages(1).unwrap();
        assert!(m.alloc_candidates(1).unwrap().contains(&p));
        m.take_block(p, 1);
        check(&b, &m, &ctx);
        let end = base + pages;
        assert_eq!(
            b.alloc_contig_range(end - 9, end - 2),
            m.alloc_contig_range(end - 9, end - 2)
        );
        assert_eq!(b.mark_poisoned(end - 1), m.mark_poisoned(end - 1));
        check(&b, &m, &ctx);
        let got = b.alloc_contig_pages(5, 1);
        assert_eq!(got, m.alloc_contig_pages(5, 1));
        assert_eq!(b.free_pages(p, 1), m.free_pages(p, 1));
        assert_eq!(
            b.free_contig_range(end - 9, 7),
            m.free_contig(end - 9, 7, false)
        );
        let q = got.unwrap();
        assert_eq!(b.free_contig_range(q, 5), m.free_contig(q, 5, false));
        assert_eq!(b.clear_poisoned(end - 1), m.clear_poisoned(end - 1));
        assert_eq!(
            b.free_contig_frozen_range(end - 1, 1),
            m.free_contig(end - 1, 1, true)
        );
        check(&b, &m, &ctx);
        assert_eq!(b.free_page_count(), pages);
    }
}

/// Ranges longer than the common-case check's chunk (1,024 pages) with the
/// one page off the common case far in: refused (a free page, a frozen page
/// in a refcounted free, a referenced page in a frozen free) with nothing
/// changed, or freed with the page held back, as the model says.
#[test]
fn odd_pages_past_the_first_check_chunk() {
    use crate::checks::{check, refused};
    use crate::model::Model;
    let (base, pages) = (7u64, 6000u64);
    for (at, what) in [1023u64, 1024, 3000, 4999]
        .into_iter()
        .flat_map(|at| (0..5).map(move |w| (at, w)))
    {
        let mut b = crate::checks::zone(base, pages, 10, 1 << 12);
        let mut m = Model::new(base, pages, 10);
        assert_eq!(b.add_range(base, pages), m.add_range(base, pages));
        let (s, n) = (base + 100, 5000u64);
        assert_eq!(
            b.alloc_contig_range(s, s + n),
            m.alloc_contig_range(s, s + n)
        );
        let p = s + at;
        let frozen = what == 4;
        match what {
            0 => {
                // A free page: refused.
                assert_eq!(b.free_contig_range(p, 1), m.free_contig(p, 1, false));
            }
            1 => assert_eq!(b.mark_poisoned(p), m.mark_poisoned(p)),
            2 => assert_eq!(b.get_page(p), m.get_page(p)),
            _ => {
                // Frozen: every page drops its reference; for what == 3 one
                // keeps it (a referenced page in a frozen free).
                for q in s..s + n {
                    assert_eq!(b.put_ref(q), m.put_ref(q));
                }
                if what == 3 {
                    assert_eq!(b.get_page(p), m.get_page(p));
                }
            }
        }
        check(&b, &m, &(at, what));
        let want = m.clone().free_contig(s, n, frozen || what == 3);
        if want.is_err() {
            let e = refused(&mut b, |b| {
                if frozen || what == 3 {
                    b.free_contig_frozen_range(s, n)
                } else {
                    b.free_contig_range(s, n)
                }
            });
            assert_eq!(Err(e), want, "{at} {what}");
        } else {
            let got = if frozen {
                b.free_contig_frozen_range(s, n)
            } else {
                b.free_contig_range(s, n)
            };
            assert_eq!(got, m.free_contig(s, n, frozen), "{at} {what}");
            check(&b, &m, &(at, what, "freed"));
        }
    }
}
