//! KVM dirty-ring entries (page offsets in a slot, unordered and repeated)
//! to ranges and to bitmaps: `ranges_from_pages` and `scatter_pages`
//! against a `BTreeSet` model and against the bitmap path (`Scan`,
//! `Geometry::ranges`), and their errors.

use std::collections::BTreeSet;

use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use spacekit::dirty::{
    ranges_from_pages, ranges_from_pages_with_scratch, scatter_pages, DirtyError, Geometry,
    MemoryRange, MemoryRangeTable, Scan,
};

/// The model: the distinct pages, as maximal runs, placed by `g`.
fn model(pages: &[u64], g: Geometry) -> Vec<MemoryRange> {
    let set: BTreeSet<u64> = pages.iter().copied().collect();
    let ps = g.page_size().get();
    let mut out: Vec<MemoryRange> = Vec::new();
    for p in set {
        let gpa = g.page_addr(p).unwrap();
        match out.last_mut() {
            Some(r) if r.gpa + r.length == gpa => r.length += ps,
            _ => out.push(MemoryRange { gpa, length: ps }),
        }
    }
    out
}

/// `ranges_from_pages` on a copy of `pages` into a new table; checks that
/// `ranges_from_pages_with_scratch` gives the same, with a scratch buffer
/// holding garbage from an earlier call.
fn ranges(
    pages: &[u64],
    slot_pages: u64,
    g: Geometry,
) -> Result<(Vec<MemoryRange>, u64), DirtyError> {
    let mut p = pages.to_vec();
    let mut t = MemoryRangeTable::new();
    let r = ranges_from_pages(&mut p, slot_pages, g, &mut t);
    let mut q = pages.to_vec();
    let mut t2 = MemoryRangeTable::new();
    let mut scratch = vec![0x5555_5555_5555_5555u64; (pages.len() % 7) * 100];
    let r2 = ranges_from_pages_with_scratch(&mut q, slot_pages, g, &mut t2, &mut scratch);
    assert_eq!(r, r2);
    assert_eq!(t, t2);
    let n = r?;
    // The pages are scratch: the same values, in some order.
    for mut got in [p, q] {
        let mut want = pages.to_vec();
        got.sort();
        want.sort();
        assert_eq!(got, want);
    }
    Ok((t.ranges().to_vec(), n))
}

/// The bitmap path: scatter into a bitmap, then scan it (as a table and as
/// the streaming iterator).
fn via_bitmap(pages: &[u64], slot_pages: u64, g: Geometry) -> Vec<MemoryRange> {
    let mut bitmap = vec![0u64; slot_pages.div_ceil(64) as usize];
    scatter_pages(pages, slot_pages, &mut bitmap).unwrap();
    let table = MemoryRangeTable::from_scan(Scan::new(&bitmap, g).unwrap());
    let iter: Vec<_> = g.ranges(&bitmap).unwrap().collect();
    assert_eq!(table.ranges(), iter);
    // No bit past the slot's last page.
    if !slot_pages.is_multiple_of(64) {
        assert_eq!(bitmap.last().unwrap() >> (slot_pages % 64), 0);
    }
    table.ranges().to_vec()
}

/// Every check of one input: model, bitmap path (for slots of up to 2^24
/// pages), distinct count.
fn check(pages: &[u64], slot_pages: u64, g: Geometry) {
    let (got, n) = ranges(pages, slot_pages, g).unwrap();
    let want = model(pages, g);
    assert_eq!(got, want, "pages {pages:?}");
    assert_eq!(n, pages.iter().collect::<BTreeSet<_>>().len() as u64);
    if slot_pages <= 1 << 24 {
        assert_eq!(via_bitmap(pages, slot_pages, g), want, "pages {pages:?}");
    }
}

/// Ring-like input: clusters of consecutive pages, shuffled, with repeats.
fn ring(slot_pages: u64) -> impl Strategy<Value = Vec<u64>> {
    let cluster = (0..slot_pages, 1u64..20, 1usize..3).prop_map(move |(s, n, rep)| {
        let e = (s + n).min(slot_pages);
        (s..e)
            .flat_map(|p| std::iter::repeat_n(p, rep))
            .collect::<Vec<_>>()
    });
    (proptest::collection::vec(cluster, 0..30), any::<u64>()).prop_map(|(cs, seed)| {
        let mut v: Vec<u64> = cs.concat();
        v.shuffle(&mut SmallRng::seed_from_u64(seed));
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn ranges_match_the_model_and_the_bitmap_path(
        (slot_pages, pages, base, shift) in (1u64..3000).prop_flat_map(|n| {
            (Just(n), ring(n), 0u64..1 << 40, prop::sample::select(vec![0u32, 9, 12, 21]))
        })
    ) {
        let g = Geometry::new(base << 12, 1 << shift).unwrap();
        check(&pages, slot_pages, g);
    }

    /// Slots from a few pages (dense: the bitmap path) to 2^40 pages
    /// (sparse: the sort path).
    #[test]
    fn uniform_random_pages(
        slot_pages in prop_oneof![1u64..700, 1u64..1 << 20, 1u64..1 << 40],
        pages in proptest::collection::vec(any::<u64>(), 0..400),
    ) {
        let pages: Vec<u64> = pages.iter().map(|p| p % slot_pages).collect();
        check(&pages, slot_pages, Geometry::new(0x8000_0000, 4096).unwrap());
    }
}

/// Every set of pages of a 10-page slot, each in a shuffled order with one
/// page repeated; and pages around word edges of a 200-page slot.
#[test]
fn exhaustive_small_sets() {
    let g = Geometry::new(0x1000, 4096).unwrap();
    let mut rng = SmallRng::seed_from_u64(10);
    for mask in 0u32..1 << 10 {
        let mut pages: Vec<u64> = (0..10).filter(|b| mask >> b & 1 == 1).collect();
        if let Some(&p) = pages.first() {
            pages.push(p);
        }
        pages.shuffle(&mut rng);
        check(&pages, 10, g);
    }
    let edges = [
        0u64, 1, 62, 63, 64, 65, 126, 127, 128, 129, 190, 191, 192, 198, 199,
    ];
    for mask in 0u32..1 << edges.len() {
        let mut pages: Vec<u64> = (0..edges.len())
            .filter(|&b| mask >> b & 1 == 1)
            .map(|b| edges[b])
            .collect();
        pages.shuffle(&mut rng);
        check(&pages, 200, g);
    }
}

#[test]
fn empty_input_appends_nothing() {
    let g = Geometry::new(0, 4096).unwrap();
    let mut t = MemoryRangeTable::new();
    t.push(MemoryRange {
        gpa: 0,
        length: 4096,
    });
    assert_eq!(ranges_from_pages(&mut [], 100, g, &mut t), Ok(0));
    assert_eq!(t.len(), 1);
    let mut bitmap = [0xffu64, 0];
    assert_eq!(scatter_pages(&[], 100, &mut bitmap), Ok(()));
    assert_eq!(bitmap, [0xff, 0]);
    // An empty slot takes no pages and no words.
    assert_eq!(ranges_from_pages(&mut [], 0, g, &mut t), Ok(0));
    assert_eq!(scatter_pages(&[], 0, &mut []), Ok(()));
    assert!(ranges_from_pages(&mut [0], 0, g, &mut t).is_err());
}

#[test]
fn all_pages_with_repeats_are_one_range() {
    let mut rng = SmallRng::seed_from_u64(1);
    for slot_pages in [1u64, 63, 64, 65, 1000, 4096, 100_000] {
        let mut pages: Vec<u64> = (0..slot_pages).chain(0..slot_pages / 3).collect();
        pages.shuffle(&mut rng);
        let g = Geometry::new(0x1_0000_0000, 4096).unwrap();
        let (got, n) = ranges(&pages, slot_pages, g).unwrap();
        assert_eq!(
            got,
            [MemoryRange {
                gpa: 0x1_0000_0000,
                length: slot_pages * 4096
            }]
        );
        assert_eq!(n, slot_pages);
        assert_eq!(via_bitmap(&pages, slot_pages, g), got);
    }
}

#[test]
fn one_page_repeated_is_one_page() {
    let g = Geometry::new(0x10_0000, 2 << 20).unwrap();
    let pages = vec![7u64; 5000];
    let (got, n) = ranges(&pages, 8, g).unwrap();
    assert_eq!(
        got,
        [MemoryRange {
            gpa: 0x10_0000 + 7 * (2 << 20),
            length: 2 << 20
        }]
    );
    assert_eq!(n, 1);
    check(&pages, 8, g);
    // Sparse (the sort path): a page far into a large slot, repeated.
    let pages = vec![1u64 << 33; 3];
    let (got, n) = ranges(&pages, 1 << 34, g).unwrap();
    assert_eq!((got.len(), got[0].length, n), (1, 2 << 20, 1));
    check(&pages, 1 << 34, g);
}

#[test]
fn large_random_rings_match_the_model() {
    let mut rng = SmallRng::seed_from_u64(0x4a11);
    for (slot_pages, entries) in [
        (1u64 << 20, 65_536usize),
        (1 << 16, 65_536),
        (5_000_000, 10_000),
        (1 << 24, 4_096),
        (1 << 34, 65_536),
    ] {
        let mut pages: Vec<u64> = Vec::with_capacity(entries);
        while pages.len() < entries {
            let s = rng.random_range(0..slot_pages);
            for p in s..(s + rng.random_range(1..40)).min(slot_pages) {
                pages.push(p);
                if rng.random_bool(0.2) {
                    pages.push(p); // a repeat (another vCPU, or a later lap)
                }
            }
        }
        pages.shuffle(&mut rng);
        check(&pages, slot_pages, Geometry::new(0, 4096).unwrap());
    }
}

#[test]
fn appends_after_existing_ranges_without_merging() {
    let g = Geometry::new(0, 4096).unwrap();
    let mut t = MemoryRangeTable::new();
    t.push(MemoryRange {
        gpa: 0,
        length: 2 * 4096,
    }); // pages 0-1
        // Page 2 touches the existing range; it is still a range of its own.
    assert_eq!(ranges_from_pages(&mut [4, 2, 3, 9], 10, g, &mut t), Ok(4));
    assert_eq!(
        t.ranges(),
        [
            MemoryRange {
                gpa: 0,
                length: 2 * 4096
            },
            MemoryRange {
                gpa: 2 * 4096,
                length: 3 * 4096
            },
            MemoryRange {
                gpa: 9 * 4096,
                length: 4096
            },
        ]
    );
    // A second slot, placed by its own geometry, appended after the first.
    let g2 = Geometry::new(1 << 32, 4096).unwrap();
    assert_eq!(ranges_from_pages(&mut [1, 0], 4, g2, &mut t), Ok(2));
    assert_eq!(
        t.ranges()[3],
        MemoryRange {
            gpa: 1 << 32,
            length: 2 * 4096
        }
    );
}

#[test]
fn out_of_range_pages_change_nothing() {
    let g = Geometry::new(0x4000, 4096).unwrap();
    let mut t = MemoryRangeTable::new();
    t.push(MemoryRange { gpa: 1, length: 1 });
    let before = t.clone();
    for bad in [
        vec![100u64],
        vec![0, 1, 2, 100, 3],
        vec![5, 99, 101, 5, 300],
        vec![u64::MAX, 0],
    ] {
        let mut pages = bad.clone();
        let err = ranges_from_pages(&mut pages, 100, g, &mut t).unwrap_err();
        let max = *bad.iter().max().unwrap();
        let addr = g.page_addr(max).unwrap_or(u64::MAX);
        assert_eq!(err, DirtyError::OutOfRange { addr, len: 4096 }, "{bad:?}");
        assert_eq!(t, before);
        assert_eq!(pages, bad, "checked before the pages are touched");

        let mut bitmap = [0x8000_0000_0000_0001u64, 0x10];
        assert_eq!(
            scatter_pages(&bad, 100, &mut bitmap),
            Err(DirtyError::OutOfRange { addr: max, len: 1 })
        );
        assert_eq!(bitmap, [0x8000_0000_0000_0001, 0x10]);
    }
    // Page 99 of a 100-page slot is the last one in range.
    assert_eq!(ranges_from_pages(&mut [99], 100, g, &mut t), Ok(1));
    // A padding bit of the last word (page 100 of 128) is out of range too.
    assert!(scatter_pages(&[100], 100, &mut [0; 2]).is_err());
    assert_eq!(scatter_pages(&[99], 100, &mut [0; 2]), Ok(()));
}

#[test]
fn bitmaps_of_the_wrong_length_are_refused() {
    for (slot_pages, words) in [(100u64, 1usize), (100, 3), (64, 2), (65, 1), (0, 1)] {
        let mut bitmap = vec![0u64; words];
        assert_eq!(
            scatter_pages(&[0], slot_pages, &mut bitmap),
            Err(DirtyError::LengthMismatch {
                expected: slot_pages.div_ceil(64) as usize,
                found: words
            })
        );
        assert!(bitmap.iter().all(|&w| w == 0));
    }
}

#[test]
fn slots_that_do_not_fit_in_the_address_space_are_refused() {
    let mut t = MemoryRangeTable::new();
    // 2^20 pages of 4 KiB from 2^64 - 2^31: the slot ends past 2^64.
    let g = Geometry::new(u64::MAX - (1 << 31) + 1, 4096).unwrap();
    let err = ranges_from_pages(&mut [], 1 << 20, g, &mut t).unwrap_err();
    assert_eq!(
        err,
        DirtyError::OutOfRange {
            addr: g.base(),
            len: 1 << 32
        }
    );
    assert!(ranges_from_pages(&mut [0], 1 << 20, g, &mut t).is_err());
    assert!(t.is_empty());
    // The largest slot that fits: 1-byte pages from 0, the last page at
    // 2^64 - 2.
    let g = Geometry::new(0, 1).unwrap();
    assert_eq!(
        ranges_from_pages(&mut [u64::MAX - 2, u64::MAX - 3], u64::MAX, g, &mut t),
        Ok(2)
    );
    assert_eq!(
        t.ranges(),
        [MemoryRange {
            gpa: u64::MAX - 3,
            length: 2
        }]
    );
}

#[test]
fn one_scratch_serves_many_slots_and_passes() {
    let mut rng = SmallRng::seed_from_u64(77);
    let mut scratch = Vec::new();
    let mut t = MemoryRangeTable::new();
    let mut most = 0;
    for pass in 0..200 {
        let slot_pages = [10u64, 1000, 1 << 20, 1 << 36][pass % 4];
        let n = rng.random_range(0..2000);
        let mut pages: Vec<u64> = (0..n).map(|_| rng.random_range(0..slot_pages)).collect();
        let g = Geometry::new(rng.random_range(0..1u64 << 30) << 12, 4096).unwrap();
        let want = model(&pages, g);
        t.clear();
        let d = ranges_from_pages_with_scratch(&mut pages, slot_pages, g, &mut t, &mut scratch)
            .unwrap();
        assert_eq!(t.ranges(), want, "pass {pass}");
        assert_eq!(d, want.iter().map(|r| r.length / 4096).sum::<u64>());
        // The scratch stays within 8 words per entry of the largest call.
        most = most.max(n);
        assert!(scratch.len() <= 8 * most, "pass {pass}");
    }
}
