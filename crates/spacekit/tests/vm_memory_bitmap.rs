//! `VmmBitmap` as vm-memory's `Bitmap`, against vm-memory's own
//! `AtomicBitmap`: the trait methods directly (offsets in and out of range,
//! slices of slices), and guest memory (`GuestMemoryMmap`, feature `kvm`)
//! written by the same random sequences through both, with identical dirty
//! sets and harvests.
#![cfg(feature = "vm-memory")]

use std::collections::BTreeSet;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use spacekit::dirty::{DirtyBitmap, Geometry, MemoryRangeTable, Scan, VmmBitmap};
use vm_memory::bitmap::{AtomicBitmap, Bitmap, NewBitmap};

/// A `VmmBitmap` and an `AtomicBitmap` of `len` bytes in pages of `page`.
fn pair(len: usize, page: u64) -> (VmmBitmap, AtomicBitmap) {
    let ours = VmmBitmap::new(Geometry::new(0, page).unwrap(), len as u64).unwrap();
    let theirs = AtomicBitmap::new(len, NonZeroUsize::new(page as usize).unwrap());
    (ours, theirs)
}

/// Harvests `b` into a new vector.
fn harvest(b: &VmmBitmap) -> Vec<u64> {
    let mut out = vec![0u64; b.log().words()];
    b.harvest_into(&mut out).unwrap();
    out
}

/// The words of a bitmap of `pages` pages, built from `dirty_at` of one
/// byte in each page.
fn words_from_dirty_at<B: Bitmap>(b: &B, pages: u64, page: u64) -> Vec<u64> {
    let mut w = vec![0u64; pages.div_ceil(64) as usize];
    for p in 0..pages {
        if b.dirty_at((p * page + page / 2) as usize) {
            w[(p / 64) as usize] |= 1 << (p % 64);
        }
    }
    w
}

/// vm-memory's own generic bitmap test (`bitmap::tests::test_bitmap`),
/// restated: a region of at least 0x800 bytes, seen whole and through a
/// slice.
fn check_bitmap<B: Bitmap>(b: &B) {
    let (dirty_offset, dirty_len) = (0x400, 0x100);
    let s = b.slice_at(dirty_offset);
    assert!((0..0x800).all(|o| !b.dirty_at(o)));
    assert!((0..dirty_len).all(|o| !s.dirty_at(o)));
    b.mark_dirty(dirty_offset, dirty_len);
    assert!((dirty_offset..dirty_offset + dirty_len).all(|o| b.dirty_at(o)));
    assert!((0..dirty_len).all(|o| s.dirty_at(o)));
}

#[test]
fn generic_bitmap_test_passes_on_both() {
    for page in [1, 128, 4096] {
        let (ours, theirs) = pair(0x800, page);
        check_bitmap(&ours);
        check_bitmap(&theirs);
        assert_eq!(harvest(&ours), theirs.get_and_reset(), "page {page}");
        // A slice of a clean bitmap passes too.
        let (ours, theirs) = pair(0x1000, page);
        check_bitmap(&ours.slice_at(0x100));
        check_bitmap(&theirs.slice_at(0x100));
        assert_eq!(harvest(&ours), theirs.get_and_reset(), "page {page}");
    }
}

#[test]
fn with_len_uses_4096_byte_pages_and_default_is_empty() {
    assert_eq!(VmmBitmap::DEFAULT_PAGE_SIZE, 4096);
    for len in [
        0usize,
        1,
        4095,
        4096,
        4097,
        64 * 4096,
        64 * 4096 + 1,
        1 << 20,
    ] {
        let b = VmmBitmap::with_len(len);
        assert_eq!(b.log().geometry(), Geometry::new(0, 4096).unwrap());
        assert_eq!(b.log().len(), len as u64);
        assert_eq!(b.log().pages(), len.div_ceil(4096) as u64);
        // vm-memory's `with_len` takes the host's page size: where it is
        // 4096 (x86_64), both track the same pages.
        let theirs = AtomicBitmap::with_len(len);
        if AtomicBitmap::with_len(8192).len() == 2 {
            assert_eq!(theirs.len() as u64, b.log().pages());
        }
    }
    let d = VmmBitmap::default();
    assert_eq!((d.log().pages(), d.log().words()), (0, 0));
    d.mark_dirty(0, 100);
    assert!(!d.dirty_at(0));
}

/// Inputs at and past every edge: the end of the region, the last partial
/// page, `usize::MAX` (where `offset + len - 1` saturates).
#[test]
fn out_of_range_marks_match_atomic_bitmap_and_never_panic() {
    let max = usize::MAX;
    for (len, page) in [
        (10 * 4096 + 100usize, 4096u64),
        (4096, 4096),
        (0, 4096),
        (1000, 1),
        (130 * 128, 128),
    ] {
        let cases = [
            (0, 0),
            (len, 0),
            (len, 1),
            (len.saturating_sub(1), 2),
            (len.saturating_sub(1), max),
            (len + 1, 5000),
            (len + 5000, 1),
            (page as usize * 3 + 1, max),
            (max, 1),
            (max, max),
            (max - 10, 100),
            (0, max),
            (1, max),
            (len / 2, len),
        ];
        for (off, n) in cases {
            let (ours, theirs) = pair(len, page);
            ours.mark_dirty(off, n);
            theirs.mark_dirty(off, n);
            for probe in [off, off.saturating_add(n), len, len + 1, max, max - 4096] {
                assert_eq!(
                    ours.dirty_at(probe),
                    theirs.dirty_at(probe),
                    "{len} {page} {off} {n} @{probe}"
                );
            }
            let pages = ours.log().pages();
            assert_eq!(
                words_from_dirty_at(&ours, pages, page),
                words_from_dirty_at(&theirs, pages, page)
            );
            assert_eq!(
                harvest(&ours),
                theirs.get_and_reset(),
                "len {len} page {page}: mark({off}, {n})"
            );
        }
    }
}

#[test]
fn bytes_past_len_in_the_last_partial_page_belong_to_it() {
    // 2.5 pages: byte 3 * 4096 - 1 is past `len` but in page 2.
    let (ours, theirs) = pair(2 * 4096 + 2048, 4096);
    ours.mark_dirty(3 * 4096 - 1, 10);
    theirs.mark_dirty(3 * 4096 - 1, 10);
    assert!(ours.dirty_at(2 * 4096) && theirs.dirty_at(2 * 4096));
    assert!(!ours.dirty_at(3 * 4096) && !theirs.dirty_at(3 * 4096));
    assert_eq!(harvest(&ours), [0b100]);
    assert_eq!(theirs.get_and_reset(), [0b100]);
}

#[test]
fn slices_add_their_offsets() {
    let (ours, theirs) = pair(100 * 4096, 4096);
    let (s, t) = (ours.slice_at(5 * 4096 + 7), theirs.slice_at(5 * 4096 + 7));
    let (ss, tt) = (s.slice_at(4096), t.slice_at(4096));
    s.mark_dirty(0, 1); // page 5
    t.mark_dirty(0, 1);
    ss.mark_dirty(4096 * 10, 4096); // bytes 16 * 4096 + 7 .. : pages 16 and 17
    tt.mark_dirty(4096 * 10, 4096);
    ss.mark_dirty(usize::MAX - 6 * 4096, 1); // wraps around to page 0
    tt.mark_dirty(usize::MAX - 6 * 4096, 1);
    assert!(ss.dirty_at(4096 * 10) && s.dirty_at(4096 * 11) && ours.dirty_at(17 * 4096));
    assert_eq!(s.dirty_at(0), t.dirty_at(0));
    let w = harvest(&ours);
    assert_eq!(w, theirs.get_and_reset());
    assert_eq!(w[0], 1 | 1 << 5 | 1 << 16 | 1 << 17);
}

#[test]
fn shared_handles_see_the_same_words() {
    let log =
        Arc::new(DirtyBitmap::new(Geometry::new(0x4000_0000, 4096).unwrap(), 1 << 20).unwrap());
    let b = VmmBitmap::from_shared(Arc::clone(&log));
    b.mark_dirty(0x3000, 0x1001); // pages 3 and 4
    assert!(log.is_dirty(0x4000_4000).unwrap());
    log.mark(0x4000_9000, 1).unwrap(); // page 9, through the address-based log
    assert!(b.dirty_at(0x9fff));
    let other = b.shared();
    assert!(Arc::ptr_eq(&other, &log));
    let mut words = vec![0; other.words()];
    assert_eq!(other.harvest_into(&mut words).unwrap(), 1);
    assert_eq!(words[0], 0b10_0001_1000);
    assert!(!b.dirty_at(0x3000));
    // The base only places the harvest: ranges at the region's address.
    b.mark_dirty(0x1000, 0x2000);
    let words = harvest(&b);
    let t = MemoryRangeTable::from_scan(Scan::new(&words, b.log().geometry()).unwrap());
    assert_eq!(
        (t.ranges()[0].gpa, t.ranges()[0].length),
        (0x4000_1000, 0x2000)
    );
    // A wrong buffer length is an error, not a panic.
    assert!(b.harvest_into(&mut [0; 3]).is_err());
}

#[test]
fn concurrent_marks_are_never_lost_by_harvests() {
    let b = Arc::new(VmmBitmap::with_len(4096 * 4096));
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (b, done) = (Arc::clone(&b), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut marked = BTreeSet::new();
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            for _ in 0..200_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let page = x % 4096;
                let n = (x >> 32) % 3 * 4096;
                b.mark_dirty((page * 4096) as usize, n as usize + 1);
                for p in page..=(page + n / 4096).min(4095) {
                    marked.insert(p);
                }
            }
            done.store(true, Ordering::Release);
            marked
        })
    };
    let mut seen = BTreeSet::new();
    let mut words = vec![0u64; b.log().words()];
    loop {
        let last = done.load(Ordering::Acquire);
        b.harvest_into(&mut words).unwrap();
        for (i, &w) in words.iter().enumerate() {
            for bit in 0..64 {
                if w >> bit & 1 == 1 {
                    seen.insert(i as u64 * 64 + bit);
                }
            }
        }
        if last {
            break;
        }
    }
    assert_eq!(seen, writer.join().unwrap());
}

/// One call on a bitmap: a mark, through the bitmap or a slice.
#[derive(Clone, Debug)]
enum Op {
    Mark(usize, usize),
    SliceMark(usize, usize, usize),
    Harvest,
}

/// Offsets near the interesting places of a `len`-byte region: page edges,
/// the region's end, and far past it.
fn offset(len: usize, page: usize) -> impl Strategy<Value = usize> {
    let pages = len.div_ceil(page).max(1);
    prop_oneof![
        4 => 0..len.max(1) + 2 * page,
        2 => (0..pages + 2, -2isize..=2).prop_map(move |(p, d)| (p * page).saturating_add_signed(d)),
        1 => Just(len),
        1 => (0usize..4096).prop_map(|d| usize::MAX - d),
    ]
}

fn ops(len: usize, page: usize) -> impl Strategy<Value = Vec<Op>> {
    let n =
        prop_oneof![3 => 0..3 * page, 1 => 0..len + 2 * page, 1 => Just(usize::MAX), 1 => Just(0)];
    let op = prop_oneof![
        6 => (offset(len, page), n.clone()).prop_map(|(o, n)| Op::Mark(o, n)),
        3 => (offset(len, page), offset(len, page), n).prop_map(|(s, o, n)| Op::SliceMark(s, o, n)),
        1 => Just(Op::Harvest),
    ];
    proptest::collection::vec(op, 0..40)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The same marks, through the bitmap and through slices, give the same
    /// `dirty_at` for every page and the same harvested words as vm-memory's
    /// `AtomicBitmap`.
    #[test]
    fn trait_calls_match_atomic_bitmap(
        (page, len, ops) in (prop::sample::select(vec![1usize, 64, 512, 4096]), 0usize..300)
            .prop_flat_map(|(page, pages_and_tail)| {
                let len = pages_and_tail * page + pages_and_tail % 7 * page / 8;
                (Just(page), Just(len), ops(len, page))
            })
    ) {
        let (ours, theirs) = pair(len, page as u64);
        let pages = ours.log().pages();
        prop_assert_eq!(pages, theirs.len() as u64);
        for op in &ops {
            match *op {
                Op::Mark(o, n) => {
                    ours.mark_dirty(o, n);
                    theirs.mark_dirty(o, n);
                }
                Op::SliceMark(s, o, n) => {
                    ours.slice_at(s).mark_dirty(o, n);
                    theirs.slice_at(s).mark_dirty(o, n);
                    prop_assert_eq!(ours.slice_at(s).dirty_at(o), theirs.slice_at(s).dirty_at(o));
                }
                Op::Harvest => prop_assert_eq!(harvest(&ours), theirs.get_and_reset()),
            }
            for p in 0..pages + 2 {
                let at = (p as usize) * page + page - 1;
                prop_assert_eq!(ours.dirty_at(at), theirs.dirty_at(at), "page {} after {:?}", p, op);
            }
        }
        let from_theirs = words_from_dirty_at(&theirs, pages, page as u64);
        prop_assert_eq!(&harvest(&ours), &from_theirs);
        prop_assert_eq!(theirs.get_and_reset(), from_theirs);
    }
}

/// Guest memory, as a VMM holds it: `GuestMemoryMmap` over both backends
/// (needs vm-memory's `backend-mmap`, which the `kvm` feature enables).
#[cfg(feature = "kvm")]
mod guest_memory {
    use super::*;

    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use vm_memory::{
        Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion, MmapRegion,
    };

    const PAGE: usize = 4096;

    /// Layouts of two and three regions: adjacent regions (writes span
    /// them), a last partial page, non-zero bases, sizes that are not a
    /// multiple of 64 pages.
    fn layouts() -> Vec<Vec<(u64, usize)>> {
        vec![
            vec![
                (0x10_0000, 67 * PAGE),
                (0x10_0000 + 67 * PAGE as u64, 130 * PAGE + 0x800),
            ],
            vec![
                (0x1000, 3 * PAGE),
                (0x1000 + 3 * PAGE as u64, 65 * PAGE),
                (0x1_0000_0000, 200 * PAGE + 1),
            ],
            vec![
                (0xfff0_0000, 63 * PAGE),
                (0xfff0_0000 + 63 * PAGE as u64, 129 * PAGE),
            ],
        ]
    }

    fn memory<B: NewBitmap>(layout: &[(u64, usize)]) -> GuestMemoryMmap<B> {
        let ranges: Vec<_> = layout.iter().map(|&(a, n)| (GuestAddress(a), n)).collect();
        GuestMemoryMmap::from_ranges(&ranges).unwrap()
    }

    /// A guest address near something interesting in `layout`: anywhere in
    /// a region, at or just before a region's end, at its start, in the
    /// hole after it.
    fn addr(rng: &mut SmallRng, layout: &[(u64, usize)]) -> u64 {
        let &(base, len) = &layout[rng.random_range(0..layout.len())];
        let len = len as u64;
        match rng.random_range(0..6) {
            0 | 1 => base + rng.random_range(0..len),
            2 => base + len - rng.random_range(1..=64.min(len)),
            3 => base + rng.random_range(0..len / PAGE as u64 + 1) * PAGE as u64,
            4 => {
                base + rng.random_range(0..len / PAGE as u64 + 1) * PAGE as u64
                    - rng.random_range(0..8).min(base)
            }
            _ => base + len + rng.random_range(0..2 * PAGE as u64),
        }
    }

    /// One random write, applied the same way to `m`. Returns whether it
    /// succeeded (all of it written), and the address and length of what
    /// it tried to write.
    fn write<B: Bitmap>(
        m: &GuestMemoryMmap<B>,
        kind: u32,
        a: u64,
        buf: &[u8],
        sub: (usize, usize),
    ) -> (bool, u64, usize) {
        let at = GuestAddress(a);
        let ok = match kind {
            0 => m.write_slice(buf, at).is_ok(),
            1 => m.write(buf, at).is_ok_and(|n| n == buf.len()),
            2 => m.write_obj(0x0102_0304_0506_0708u64, at).is_ok(),
            3 => m.write_obj(7u8, at).is_ok(),
            4 => m.write_obj([0x55u8; 32], at).is_ok(),
            5 => m.write_slice(&[], at).is_ok(),
            6 => m
                .store(9u32, GuestAddress(a & !3), Ordering::Relaxed)
                .is_ok(),
            // A volatile slice of one region, written through a subslice
            // (the bitmap slice of a slice).
            _ => match m.get_slice(at, buf.len()) {
                Ok(s) => s
                    .subslice(sub.0, sub.1)
                    .map(|s| s.copy_from(&buf[..sub.1]))
                    .is_ok(),
                Err(_) => false,
            },
        };
        let len = match kind {
            2 => 8,
            3 => 1,
            4 => 32,
            5 => 0,
            6 => 4,
            7 => sub.1,
            _ => buf.len(),
        };
        let a = match kind {
            6 => a & !3,
            7 => a + sub.0 as u64,
            _ => a,
        };
        (ok, a, len)
    }

    /// For every region: `dirty_at` of both bitmaps agrees on every page
    /// (and past the end), the harvest of ours equals the words built from
    /// theirs and their `get_and_reset`. Returns the dirty pages (guest page
    /// numbers).
    fn compare_and_harvest(
        ours: &GuestMemoryMmap<VmmBitmap>,
        theirs: &GuestMemoryMmap<AtomicBitmap>,
    ) -> BTreeSet<u64> {
        let mut dirty = BTreeSet::new();
        assert_eq!(ours.num_regions(), theirs.num_regions());
        for (r, t) in ours.iter().zip(theirs.iter()) {
            assert_eq!((r.start_addr(), r.len()), (t.start_addr(), t.len()));
            let (rb, tb) = (MmapRegion::bitmap(r), MmapRegion::bitmap(t));
            let pages = rb.log().pages();
            assert_eq!(pages, tb.len() as u64);
            for p in 0..pages + 1 {
                for at in [p as usize * PAGE, p as usize * PAGE + PAGE - 1] {
                    assert_eq!(
                        rb.dirty_at(at),
                        tb.dirty_at(at),
                        "region {:#x} page {p}",
                        r.start_addr().0
                    );
                    // Through the region's bitmap slice too.
                    assert_eq!(r.bitmap().dirty_at(at), t.bitmap().dirty_at(at));
                }
            }
            let from_theirs = words_from_dirty_at(tb, pages, PAGE as u64);
            let words = harvest(rb);
            assert_eq!(words, from_theirs, "region {:#x}", r.start_addr().0);
            assert_eq!(tb.get_and_reset(), words);
            // The harvest placed at the region's guest address.
            let g = rb.log().geometry().with_base(r.start_addr().0);
            for range in MemoryRangeTable::from_scan(Scan::new(&words, g).unwrap()).ranges() {
                for p in 0..range.length / PAGE as u64 {
                    dirty.insert(range.gpa / PAGE as u64 + p);
                }
            }
        }
        dirty
    }

    #[test]
    fn random_writes_give_the_same_dirty_pages_as_atomic_bitmap() {
        for (li, layout) in layouts().iter().enumerate() {
            let ours: GuestMemoryMmap<VmmBitmap> = memory(layout);
            let theirs: GuestMemoryMmap<AtomicBitmap> = memory(layout);
            for seed in 0..6u64 {
                let mut rng = SmallRng::seed_from_u64(0x7a11_0000 + 16 * li as u64 + seed);
                let (mut must, mut may) = (BTreeSet::new(), BTreeSet::new());
                let writes = [1, 5, 40, 300][seed as usize % 4];
                for _ in 0..writes {
                    let kind = rng.random_range(0..8);
                    let a = addr(&mut rng, layout);
                    let n = match rng.random_range(0..4) {
                        0 => rng.random_range(0..16),
                        1 => rng.random_range(0..PAGE + 1),
                        2 => rng.random_range(0..4 * PAGE),
                        _ => rng.random_range(60 * PAGE..70 * PAGE),
                    };
                    let buf = vec![rng.random::<u8>(); n];
                    let s0 = rng.random_range(0..=n);
                    let sub = (s0, rng.random_range(0..=n - s0));
                    let r1 = write(&ours, kind, a, &buf, sub);
                    let r2 = write(&theirs, kind, a, &buf, sub);
                    assert_eq!(
                        r1, r2,
                        "layout {li} seed {seed}: write {kind} at {a:#x}+{n}"
                    );
                    let (ok, a, len) = r1;
                    if len > 0 {
                        for p in a / PAGE as u64..=(a + len as u64 - 1) / PAGE as u64 {
                            may.insert(p);
                            if ok {
                                must.insert(p);
                            }
                        }
                    }
                }
                let dirty = compare_and_harvest(&ours, &theirs);
                // Every successful write's pages are dirty, and nothing is
                // dirty that no write (whole or partial) could have touched.
                assert!(must.is_subset(&dirty), "layout {li} seed {seed}");
                assert!(dirty.is_subset(&may), "layout {li} seed {seed}");
                assert!(writes < 40 || !dirty.is_empty());
                // The harvest cleared both.
                assert!(compare_and_harvest(&ours, &theirs).is_empty());
            }
        }
    }

    #[test]
    fn writes_at_region_edges_and_across_regions() {
        let layout = &layouts()[0];
        let ours: GuestMemoryMmap<VmmBitmap> = memory(layout);
        let theirs: GuestMemoryMmap<AtomicBitmap> = memory(layout);
        let seam = layout[1].0; // region 0 ends, region 1 starts
        let end = layout[1].0 + layout[1].1 as u64;
        let cases: [(u64, usize, bool); 8] = [
            (0x10_0000, 1, true), // first byte of the memory
            (seam - 1, 2, true),  // one byte on each side of the seam
            (seam - 3 * PAGE as u64, 5 * PAGE, true),
            (end - 1, 1, true),                // last byte, in the partial page
            (end - 10, 20, false),             // runs off the end: partial write
            (end, 1, false),                   // past the end
            (seam + 7 * PAGE as u64, 0, true), // zero length: nothing
            (0x10_0000 - 4, 8, false),         // starts before the memory
        ];
        for (a, n, ok) in cases {
            let buf = vec![0xa5u8; n];
            assert_eq!(
                ours.write_slice(&buf, GuestAddress(a)).is_ok(),
                ok,
                "{a:#x}+{n}"
            );
            assert_eq!(
                theirs.write_slice(&buf, GuestAddress(a)).is_ok(),
                ok,
                "{a:#x}+{n}"
            );
        }
        let dirty = compare_and_harvest(&ours, &theirs);
        let seam_page = seam / PAGE as u64;
        let last_page = (end - 1) / PAGE as u64;
        let want: BTreeSet<u64> = [0x100]
            .into_iter()
            .chain(seam_page - 3..seam_page + 2)
            .chain([last_page])
            .collect();
        assert_eq!(dirty, want);
    }
}
