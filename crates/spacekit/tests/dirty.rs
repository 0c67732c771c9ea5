//! Dirty logs: range extraction and tables against a per-bit model, the wire
//! format, and the atomic bitmap (including concurrent marking while
//! harvesting).

use proptest::prelude::*;
use spacekit::dirty::{DirtyBitmap, DirtyError, Geometry, MemoryRange, MemoryRangeTable, Scan};
use spacekit::testing::{ranges_or_with, ranges_with, scan_with, ScanOpts};

/// Prints one line when this machine cannot run the AVX-512 level, so a
/// run of the every-path tests that never exercised those loops says so.
/// Called once per such test.
fn note_skipped_levels() {
    use spacekit::arch::{Level, LevelKind};
    if cfg!(target_arch = "x86_64") && !Level::available().any(|l| l.kind() == LevelKind::Avx512) {
        println!("AVX-512 level not available on this machine: its tests were skipped");
    }
}

/// `Geometry::new(base, page)`, for valid test inputs.
fn geo(base: u64, page: u64) -> Geometry {
    Geometry::new(base, page).unwrap()
}

/// A table of `scan`'s ranges, for valid test inputs.
fn table_of(words: &[u64], g: Geometry, gap: u64) -> MemoryRangeTable {
    MemoryRangeTable::from_scan(Scan::new(words, g).unwrap().merge_gap(gap))
}

/// Every way of building ranges over `a` (or `a | b`): the iterators and the
/// serial and parallel table builds, each with every backend the machine
/// runs (the detected one and the scalar one), parallel blocks of `block`
/// words. Each result is paired with a label for failure messages.
fn all_paths(
    a: &[u64],
    b: Option<&[u64]>,
    page: u64,
    base: u64,
    gap: u64,
    block: usize,
) -> Vec<(String, Vec<MemoryRange>)> {
    let mut out = Vec::new();
    let g = geo(base, page);
    for opts in ScanOpts::each_backend(block) {
        let name = format!("{:?}", opts.backend);
        if gap == 0 {
            let it: Vec<_> = match b {
                None => ranges_with(g, a, opts).unwrap().collect(),
                Some(b) => ranges_or_with(g, a, b, opts).unwrap().collect(),
            };
            out.push((format!("iter/{name}"), it));
        }
        for par in [false, true] {
            let mut scan = Scan::new(a, g).unwrap();
            if let Some(b) = b {
                scan = scan.or(b).unwrap();
            }
            let scan = scan_with(scan.merge_gap(gap).parallel(par), opts);
            let mut t = MemoryRangeTable::new();
            t.extend_from(scan);
            out.push((format!("table/{name}/par={par}"), t.ranges().to_vec()));
        }
    }
    out
}

/// The OR of two bitmaps, for the model.
fn or(a: &[u64], b: &[u64]) -> Vec<u64> {
    a.iter().zip(b).map(|(x, y)| x | y).collect()
}

/// Per-bit model: one step per page, coalescing adjacent pages, then joining
/// ranges at most `gap` pages apart.
fn model(words: &[u64], page: u64, base: u64, gap: u64) -> Vec<MemoryRange> {
    let mut out: Vec<MemoryRange> = Vec::new();
    for i in 0..words.len() as u64 * 64 {
        if words[(i / 64) as usize] >> (i % 64) & 1 == 0 {
            continue;
        }
        let gpa = base + i * page;
        match out.last_mut() {
            Some(last) if gpa - (last.gpa + last.length) <= gap * page => {
                last.length = gpa + page - last.gpa;
            }
            _ => out.push(MemoryRange { gpa, length: page }),
        }
    }
    out
}

/// Bitmaps of random runs: density and run length vary per case.
fn arb_bitmap() -> impl Strategy<Value = Vec<u64>> {
    (0usize..=2000, any::<u64>(), 0u32..=100, 1u64..=200).prop_map(|(n, seed, pct, run)| {
        let mut s = seed | 1;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let mut w = vec![0u64; n];
        let bits = n as u64 * 64;
        let mut i = 0;
        while i < bits {
            let len = next() % run + 1;
            if next() % 100 < u64::from(pct) {
                for b in i..(i + len).min(bits) {
                    w[(b / 64) as usize] |= 1 << (b % 64);
                }
            }
            i += len;
        }
        w
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn ranges_match_the_per_bit_model(words in arb_bitmap(), shift in 9u32..=21, base_pages in 0u64..1 << 20) {
        let page = 1u64 << shift;
        let base = base_pages * page;
        let got: Vec<_> = geo(base, page).ranges(&words).unwrap().collect();
        prop_assert_eq!(got, model(&words, page, base, 0));
    }

    #[test]
    fn table_merges_gaps_like_the_model(words in arb_bitmap(), gap in 0u64..=70) {
        let g = geo(0x1000_0000, 4096);
        let t = table_of(&words, g, gap);
        prop_assert_eq!(t.ranges(), &model(&words, 4096, 0x1000_0000, gap)[..]);
        // Reuse: refilling a cleared table gives the same ranges.
        let mut again = t.clone();
        again.clear();
        again.extend_from(Scan::new(&words, g).unwrap().merge_gap(gap));
        prop_assert_eq!(&again, &t);
    }

    #[test]
    fn every_path_matches_the_model(words in arb_bitmap(), gap in prop_oneof![Just(0u64), 0u64..=70], block in 1usize..=40) {
        let want = model(&words, 4096, 0x1_0000_0000, gap);
        for (name, got) in all_paths(&words, None, 4096, 0x1_0000_0000, gap, block) {
            prop_assert_eq!(&got, &want, "{}", name);
        }
    }

    #[test]
    fn or_of_two_bitmaps_matches_the_model(
        a in arb_bitmap(),
        seed in any::<u64>(),
        gap in prop_oneof![Just(0u64), 0u64..=9],
        block in 1usize..=40,
    ) {
        // A second log over the same pages: sparse random bits, sometimes
        // whole words.
        let mut s = seed | 1;
        let b: Vec<u64> = a.iter().map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            match s % 8 { 0 => !0, 1..=3 => s & (s >> 17) & (s >> 33), _ => 0 }
        }).collect();
        let want = model(&or(&a, &b), 4096, 0, gap);
        for (name, got) in all_paths(&a, Some(&b), 4096, 0, gap, block) {
            prop_assert_eq!(&got, &want, "{}", name);
        }
    }

    #[test]
    fn partition_keeps_order_and_bytes(words in arb_bitmap(), max_pages in 1u64..=300) {
        let t = table_of(&words, geo(0, 4096), 0);
        let max = max_pages * 4096;
        let parts = t.partition(max);
        let mut flat = MemoryRangeTable::new();
        for (k, p) in parts.iter().enumerate() {
            prop_assert!(p.total_bytes() <= max);
            if k + 1 < parts.len() {
                prop_assert_eq!(p.total_bytes(), max, "only the last part is short");
            }
            for r in p.ranges() {
                flat.push_merging(*r, 0);
            }
        }
        prop_assert_eq!(flat, t);
    }

    #[test]
    fn wire_format_round_trips(words in arb_bitmap()) {
        let t = table_of(&words, geo(0x8000_0000, 4096), 0);
        let bytes = t.to_bytes();
        prop_assert_eq!(bytes.len(), t.len() * 16);
        prop_assert_eq!(MemoryRangeTable::from_bytes(&bytes).unwrap(), t);
    }
}

#[test]
fn runs_crossing_words_coalesce() {
    // Bits 60..=67 and 127..=128: each one range.
    let words = [0xF000_0000_0000_0000u64, 0x8000_0000_0000_000F, 1];
    let got: Vec<_> = geo(0, 4096).ranges(&words).unwrap().collect();
    assert_eq!(
        got,
        [
            MemoryRange {
                gpa: 60 * 4096,
                length: 8 * 4096
            },
            MemoryRange {
                gpa: 127 * 4096,
                length: 2 * 4096
            },
        ]
    );
    let all = [!0u64; 5];
    let got: Vec<_> = geo(0, 1 << 21).ranges(&all).unwrap().collect();
    assert_eq!(
        got,
        [MemoryRange {
            gpa: 0,
            length: 320 << 21
        }]
    );
}

#[test]
fn runs_crossing_every_chunk_edge() {
    note_skipped_levels();
    // Blocks of 1..=5 words over 24 words; runs of every length from 1 to
    // 130 bits placed at every offset around each block edge, plus a run
    // spanning several blocks and one reaching the end of the bitmap.
    for block in 1..=5usize {
        let nw = 24;
        for edge in (block..nw).step_by(block) {
            for len in [1usize, 2, 63, 64, 65, 127, 128, 130] {
                for back in [0usize, 1, 2, 31, 63, 64, 65] {
                    let mut w = vec![0u64; nw];
                    let start = (edge * 64).saturating_sub(back);
                    let end = (start + len).min(nw * 64);
                    for bit in start..end {
                        w[bit / 64] |= 1 << (bit % 64);
                    }
                    // Something earlier and later too, so blocks have
                    // neighbours with edges.
                    w[0] |= 1 << 3;
                    w[nw - 1] |= 1 << 63;
                    let want = model(&w, 4096, 0, 0);
                    for (name, got) in all_paths(&w, None, 4096, 0, 0, block) {
                        assert_eq!(
                            got, want,
                            "{name}: block {block} edge {edge} len {len} back {back}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn sparse_and_dense_batches_alternate() {
    note_skipped_levels();
    // Batches of 64 words in turn: sparse (a few words, runs through the
    // top bit into the next word and into the next batch), dense, clean,
    // full, one whose first word continues the full one's run (a run open
    // into a sparse batch), and sparse again.
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut w = vec![0u64; 64 * 24];
    for (b, batch) in w.chunks_mut(64).enumerate() {
        match b % 6 {
            0 | 5 => {
                batch[3] = 1 << 9;
                batch[17] = 3 << 62;
                batch[18] = 0b111;
                batch[40] = 1 << 63;
                batch[63] = 1 << 63;
            }
            1 => batch.iter_mut().for_each(|x| *x = next() & next()),
            2 => {}
            3 => batch.fill(!0),
            _ => batch[0] = 1,
        }
    }
    let want = model(&w, 4096, 0, 0);
    for block in [64, 100, 1000] {
        for (name, got) in all_paths(&w, None, 4096, 0, 0, block) {
            assert_eq!(got, want, "{name}: block {block}");
        }
        let zero = vec![0u64; w.len()];
        for (name, got) in all_paths(&zero, Some(&w), 4096, 0, 0, block) {
            assert_eq!(got, want, "{name}: OR, block {block}");
        }
    }
}

#[test]
fn or_length_mismatch_is_an_error() {
    let a = [1u64; 4];
    let b = [1u64; 3];
    let want = DirtyError::LengthMismatch {
        expected: 4,
        found: 3,
    };
    let g = geo(0, 4096);
    assert_eq!(g.ranges_or(&a, &b).err(), Some(want.clone()));
    let t = table_of(&[1], g, 0);
    let before = t.clone();
    // The table builder refuses the second log before it can touch a table,
    // serial or parallel, whichever option comes first.
    let scan = Scan::new(&a, g).unwrap();
    assert_eq!(scan.or(&b).err(), Some(want.clone()));
    assert_eq!(scan.parallel(true).merge_gap(3).or(&b).err(), Some(want));
    assert_eq!(t, before, "a failed call leaves the table alone");
}

#[test]
fn extend_joins_across_calls_and_spans_are_checked() {
    // Two halves of one bitmap appended in turn give the whole bitmap's
    // ranges: the run across the seam joins.
    let w = [0xFF00_0000_0000_0000u64, 0xFF, 0, 1 << 63, !0];
    let g = geo(0, 4096);
    let whole = table_of(&w, g, 0);
    let mut t = table_of(&w[..1], g, 0);
    t.extend_from(Scan::new(&w[1..4], g.with_base(64 * 4096)).unwrap());
    let at = g.page_addr(4 * 64).unwrap();
    assert_eq!(at, 4 * 64 * 4096);
    t.extend_from(Scan::new(&w[4..], g.with_base(at)).unwrap().parallel(true));
    assert_eq!(t, whole);
    // A bitmap whose last page would end past 2^64 is refused.
    assert!(matches!(
        geo(u64::MAX - (1 << 45), 1 << 40).ranges(&[1, 2]),
        Err(DirtyError::OutOfRange { .. })
    ));
    assert!(Scan::new(&[0; 4], geo(0, 1 << 62)).is_err());
    assert_eq!(geo(u64::MAX - 4095, 4096).page_addr(1), None);
}

/// A table past 16 MiB (1 Mi ranges), from which the builder streams its
/// stores past the cache: every path, serial and both parallel splits,
/// at every level, gives the model's ranges, also after a table that
/// already holds one to three ranges (each place in a 64-byte line).
#[test]
fn tables_past_sixteen_mib_agree_on_every_path() {
    note_skipped_levels();
    // Alternate bits (32 ranges a word), some words busier or clean.
    let nw = 36 * 1024 + 5;
    let w: Vec<u64> = (0..nw)
        .map(|i| match i % 97 {
            0 => 0,
            1 => !0,
            2 => 0x3333_3333_3333_3333,
            _ => 0x5555_5555_5555_5555,
        })
        .collect();
    let want = model(&w, 4096, 0, 0);
    assert!(want.len() > 1 << 20, "{} ranges", want.len());
    for (name, got) in all_paths(&w, None, 4096, 0, 0, 16 * 1024) {
        assert!(
            got == want,
            "{name}: {} ranges, want {}",
            got.len(),
            want.len()
        );
    }
    // The log from 1 TiB up, after ranges below it that no new one joins.
    let base = 1u64 << 40;
    let g = geo(base, 4096);
    let want = model(&w, 4096, base, 0);
    for opts in ScanOpts::each_backend(16 * 1024) {
        for pre in 1..4u64 {
            let first: Vec<MemoryRange> = (0..pre)
                .map(|k| MemoryRange {
                    gpa: 2 * k * 4096,
                    length: 4096,
                })
                .collect();
            let mut t = MemoryRangeTable::new();
            for r in &first {
                t.push(*r);
            }
            t.extend_from(scan_with(Scan::new(&w, g).unwrap(), opts));
            let (head, rest) = t.ranges().split_at(pre as usize);
            assert_eq!(head, &first[..], "{:?} after {pre}", opts.backend);
            assert!(rest == &want[..], "{:?} after {pre}", opts.backend);
        }
    }
}

#[test]
fn large_bitmaps_agree_on_every_path() {
    note_skipped_levels();
    // Big enough for the default parallel block size (16 Ki words) to split
    // the work several ways; densities from clean to full.
    let nw = 5 * 16 * 1024 + 77;
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    for pct in [0u64, 1, 10, 50, 100] {
        let w: Vec<u64> = (0..nw)
            .map(|i| {
                let mut x = 0u64;
                for b in 0..64 {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    if s % 1000 < pct * 10 || (i / 600) % 7 == 3 && pct > 0 {
                        x |= 1 << b;
                    }
                }
                x
            })
            .collect();
        let g = geo(0, 4096);
        let want: Vec<_> = g.ranges(&w).unwrap().collect();
        assert_eq!(want, model(&w, 4096, 0, 0), "{pct}%");
        let mut par = MemoryRangeTable::new();
        par.extend_from(Scan::new(&w, g).unwrap().parallel(true));
        assert_eq!(par.ranges(), &want[..], "{pct}% parallel");
        let or_par = {
            let mut t = MemoryRangeTable::new();
            let zero = vec![0u64; nw];
            t.extend_from(Scan::new(&zero, g).unwrap().or(&w).unwrap().parallel(true));
            t
        };
        assert_eq!(or_par, par, "{pct}% parallel OR with a clean log");
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    assert_eq!(
        Geometry::new(0, 3000).err(),
        Some(DirtyError::InvalidPageSize { page_size: 3000 })
    );
    assert_eq!(
        Geometry::new(0, 0).err(),
        Some(DirtyError::InvalidPageSize { page_size: 0 })
    );
    assert_eq!(
        MemoryRangeTable::from_bytes(&[0; 17]),
        Err(DirtyError::BadWireLength { len: 17 })
    );
    let mut wire = MemoryRangeTable::new();
    wire.push(MemoryRange {
        gpa: 0,
        length: 4096,
    });
    let mut bytes = wire.to_bytes();
    bytes.extend_from_slice(&u64::MAX.to_le_bytes());
    bytes.extend_from_slice(&2u64.to_le_bytes());
    assert_eq!(
        MemoryRangeTable::from_bytes(&bytes),
        Err(DirtyError::RangeOverflow { index: 1 })
    );
    // Truncated input is rejected, never silently shortened.
    assert!(MemoryRangeTable::from_bytes(&bytes[..bytes.len() - 1]).is_err());

    let log = DirtyBitmap::new(geo(0x1000, 4096), 0x10_0000).unwrap();
    assert!(log.mark(0x0fff, 1).is_err(), "before the region");
    assert!(log.mark(0x10_0000, 0x1001).is_err(), "past the end");
    assert!(log.mark(u64::MAX, 2).is_err(), "overflow");
    assert!(log.is_dirty(0x10_1000).is_err());
    assert_eq!(
        log.take().iter().filter(|&&w| w != 0).count(),
        0,
        "nothing marked by failed calls"
    );
    let mut short = vec![0u64; 3];
    assert!(log.harvest_into(&mut short).is_err());
    assert!(Geometry::new(0, 1000).is_err());
    assert!(DirtyBitmap::new(geo(u64::MAX, 4096), 2).is_err());
    // Five pages that fit below 2^64, but not the 64 pages of their word:
    // refused when made, not at the first harvest.
    let top = u64::MAX - 15 * 4096 + 1;
    assert_eq!(
        DirtyBitmap::new(geo(top, 4096), 5 * 4096).err(),
        Some(DirtyError::OutOfRange {
            addr: top,
            len: 64 * 4096
        })
    );
    // A log whose word ends below 2^64 is made, and its harvest scans.
    let top = u64::MAX - 65 * 4096 + 1;
    let log = DirtyBitmap::new(geo(top, 4096), 5 * 4096).unwrap();
    log.mark(top + 4096, 1).unwrap();
    let mut t = MemoryRangeTable::new();
    log.harvest_or_into_table(&[0], geo(top, 4096), &mut t, None)
        .unwrap();
    assert_eq!(
        t.ranges(),
        [MemoryRange {
            gpa: top + 4096,
            length: 4096
        }]
    );
}

#[test]
fn mark_reset_and_harvest_follow_a_page_model() {
    let page = 4096u64;
    let base = 0x4000_0000u64;
    let len = 1000 * page + 123; // a partial last page
    let log = DirtyBitmap::new(geo(base, page), len).unwrap();
    assert_eq!(log.pages(), 1001);
    assert_eq!((log.geometry(), log.len()), (geo(base, page), len));
    let mut model = vec![false; 1001];
    let mut s = 0x1234_5678_9abc_def1u64;
    for round in 0..2000 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let off = s % len;
        let n = (s >> 32) % (70 * page) % (len - off) + 1;
        let (a, b) = (off / page, (off + n - 1) / page);
        if round % 5 == 4 {
            log.reset_range(base + off, n).unwrap();
            model[a as usize..=b as usize].fill(false);
        } else {
            log.mark(base + off, n).unwrap();
            model[a as usize..=b as usize].fill(true);
        }
        if round % 97 == 0 {
            let p = s % 1001;
            assert_eq!(log.is_dirty(base + p * page).unwrap(), model[p as usize]);
        }
        if round % 400 == 399 {
            let mut out = vec![!0u64; log.words()];
            let dirty = log.harvest_into(&mut out).unwrap();
            for (p, &m) in model.iter().enumerate() {
                assert_eq!(out[p / 64] >> (p % 64) & 1 == 1, m, "page {p}");
            }
            assert_eq!(dirty, out.iter().filter(|&&w| w != 0).count());
            assert!(out.iter().skip(1001 / 64 + 1).all(|&w| w == 0));
            model.fill(false);
            assert!(
                log.take().iter().all(|&w| w == 0),
                "harvest cleared the log"
            );
        }
    }
}

#[test]
fn concurrent_marks_are_never_lost() {
    let pages = 64 * 512u64;
    let log = DirtyBitmap::new(geo(0, 4096), pages * 4096).unwrap();
    let threads = 4u64;
    let mut union = vec![0u64; log.words()];
    let done = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|sc| {
        let log = &log;
        let done = &done;
        for t in 0..threads {
            sc.spawn(move || {
                // Thread t marks every page p with p % threads == t, in
                // ranges of 1..=3 pages of its own, many times over.
                for pass in 0..20u64 {
                    let mut p = t;
                    while p < pages {
                        log.mark(p * 4096, 1 + (pass + p) % 4096).unwrap();
                        p += threads * (1 + pass % 3);
                    }
                }
                done.fetch_add(1, std::sync::atomic::Ordering::Release);
            });
        }
        let mut out = vec![0u64; log.words()];
        loop {
            let finished = done.load(std::sync::atomic::Ordering::Acquire) == threads as usize;
            log.harvest_into(&mut out).unwrap();
            for (u, o) in union.iter_mut().zip(&out) {
                *u |= o;
            }
            if finished {
                break;
            }
        }
    });
    // Pass 0 marks every page p (thread p % threads) at least once; the last
    // harvest ran after every thread finished, so every page must be in the
    // union of the harvests.
    assert!(union.iter().all(|&w| w == !0), "a marked page was lost");
}

#[test]
fn geometry_is_checked_once_and_scan_options_compose() {
    let g = geo(0x1_0000_0000, 1 << 21);
    assert_eq!(g.base(), 0x1_0000_0000);
    assert_eq!(g.page_size().get(), 1 << 21);
    assert_eq!(g.page_shift(), 21);
    assert_eq!(g.page_addr(5), Some(0x1_0000_0000 + (5 << 21)));
    assert_eq!(g.with_base(0).page_addr(1), Some(1 << 21));
    for bad in [0u64, 3, 4097, u64::MAX] {
        assert_eq!(
            Geometry::new(0, bad),
            Err(DirtyError::InvalidPageSize { page_size: bad })
        );
    }
    assert!(Geometry::new(0, 1 << 63).is_ok());

    // Pages 0, 10 and 200 dirty in one log, page 5 in another.
    let a = [1u64 | 1 << 10, 0, 0, 1 << 8];
    let b = [1u64 << 5, 0, 0, 0];
    let scan = Scan::new(&a, g).unwrap();
    assert_eq!((scan.words(), scan.geometry()), (4, g));
    let page = |p: u64, n: u64| MemoryRange {
        gpa: g.page_addr(p).unwrap(),
        length: n << 21,
    };
    // Options in any order give the same table; a Scan is Copy and reusable.
    let merged = scan.or(&b).unwrap().merge_gap(4);
    let other_order = scan.merge_gap(4).parallel(true).or(&b).unwrap();
    assert_eq!(
        MemoryRangeTable::from_scan(merged).ranges(),
        [page(0, 11), page(200, 1)]
    );
    assert_eq!(
        MemoryRangeTable::from_scan(other_order),
        MemoryRangeTable::from_scan(merged)
    );
    // A second `or` replaces the first.
    let zero = [0u64; 4];
    assert_eq!(
        MemoryRangeTable::from_scan(scan.or(&b).unwrap().or(&zero).unwrap()).ranges(),
        [page(0, 1), page(10, 1), page(200, 1)]
    );
    // A gap too large to count in bytes joins everything.
    assert_eq!(
        MemoryRangeTable::from_scan(scan.merge_gap(u64::MAX)).ranges(),
        [page(0, 201)]
    );
    // The log's geometry places its harvest.
    let log = DirtyBitmap::new(g, 256 << 21).unwrap();
    log.mark(g.page_addr(200).unwrap(), 1).unwrap();
    let words = log.take();
    let got: Vec<_> = log.geometry().ranges(&words).unwrap().collect();
    assert_eq!(got, [page(200, 1)]);
}

#[test]
fn harvest_crosses_every_chunk_edge() {
    // The harvest checks 8 words (a cache line) at a time and the last
    // `words % 8` one at a time: every log size around those edges, with
    // one dirty word at every position, then every word dirty, must come
    // back word for word with the right count and leave the log clean.
    let page = 4096u64;
    for words in 1..=41usize {
        let pages = words as u64 * 64 - (words as u64 % 3) * 7; // some partial last words
        let log = DirtyBitmap::new(geo(0x10_0000, page), pages * page).unwrap();
        assert_eq!(log.words(), words);
        let mut out = vec![!0u64; words];
        for w in 0..words {
            // The last page of word w (or the last page of the log).
            let p = ((w as u64 + 1) * 64 - 1).min(pages - 1);
            log.mark(0x10_0000 + p * page, 1).unwrap();
            assert_eq!(
                log.harvest_into(&mut out).unwrap(),
                1,
                "words {words}, w {w}"
            );
            for (i, &o) in out.iter().enumerate() {
                let want = if i == w { 1u64 << (p % 64) } else { 0 };
                assert_eq!(o, want, "words {words}, dirty word {w}, word {i}");
            }
            out.fill(!0);
            assert_eq!(log.harvest_into(&mut out).unwrap(), 0, "cleared");
            assert!(out.iter().all(|&o| o == 0), "stale output words");
        }
        log.mark(0x10_0000, pages * page).unwrap();
        assert_eq!(log.harvest_into(&mut out).unwrap(), words);
        for (i, &o) in out.iter().enumerate() {
            let last = (pages - 64 * i as u64).min(64);
            assert_eq!(o, !0u64 >> (64 - last), "full log, words {words}, word {i}");
        }
        assert_eq!(log.harvest_into(&mut out).unwrap(), 0);
    }
}

#[test]
fn marks_follow_vm_memory_page_arithmetic_and_refuse_what_it_ignores() {
    // vm-memory's AtomicBitmap::set_addr_range(off, len) sets the pages of
    // bytes off ..= off + len - 1; mark(base + off, len) must set the same.
    let (base, page) = (0x8000_0000u64, 128u64);
    let log = DirtyBitmap::new(geo(base, page), 1025).unwrap(); // 9 pages, last partial
    assert_eq!((log.pages(), log.len(), log.words()), (9, 1025, 1));
    for (off, len, want) in [
        (128, 129, 0b110u64), // vm-memory's own test: pages 1 and 2
        (127, 2, 0b11),       // straddles an edge by one byte each side
        (256, 128, 0b100),    // exactly one page
        (0, 1025, 0x1ff),     // the whole region, partial last page
        (1024, 1, 1 << 8),    // the partial last page's only byte
        (300, 0, 0),          // nothing
    ] {
        log.mark(base + off, len).unwrap();
        assert_eq!(log.take(), [want], "mark({off}, {len})");
    }
    // Where vm-memory silently marks the pages in range and ignores the
    // rest, spacekit refuses the whole call and marks nothing.
    for (off, len) in [(1000, 100), (1025, 1), (1030, 1), (0, u64::MAX)] {
        assert_eq!(
            log.mark(base + off, len),
            Err(DirtyError::OutOfRange {
                addr: base + off,
                len
            }),
            "mark({off}, {len})"
        );
        assert_eq!(log.take(), [0], "mark({off}, {len}) marked something");
    }
    // reset_range uses the same pages and leaves the others.
    log.mark(base, 1025).unwrap();
    log.reset_range(base + 127, 2).unwrap();
    assert_eq!(log.take(), [0x1ff & !0b11]);
}

/// `push_merging` joins a range that overlaps the last one, starts inside
/// it or ends just before it, into the smallest range holding both.
#[test]
fn push_merging_absorbs_overlaps_with_the_last_range() {
    let r = |gpa, length| MemoryRange { gpa, length };
    let mut t = MemoryRangeTable::new();
    t.push(r(100, 50));
    t.push_merging(r(110, 5), 0); // inside
    assert_eq!(t.ranges(), [r(100, 50)]);
    t.push_merging(r(140, 30), 0); // overlaps the end
    assert_eq!(t.ranges(), [r(100, 70)]);
    t.push_merging(r(90, 10), 0); // ends where it starts
    assert_eq!(t.ranges(), [r(90, 80)]);
    t.push_merging(r(80, 5), 5); // within the gap before it
    assert_eq!(t.ranges(), [r(80, 90)]);
    t.push_merging(r(10, 5), 5); // wholly below: appended as it is
    assert_eq!(t.ranges(), [r(80, 90), r(10, 5)]);
    t.push_merging(r(16, 4), 0); // after the new last, not adjacent
    assert_eq!(t.ranges(), [r(80, 90), r(10, 5), r(16, 4)]);
}

proptest! {
    /// Ranges pushed in ascending order of `gpa`, overlapping or not, give
    /// the union's runs (joined across gaps of at most `gap` bytes).
    #[test]
    fn push_merging_in_order_is_the_union(
        mut rs in proptest::collection::vec((0u64..2000, 1u64..100), 0..60),
        gap in 0u64..20,
    ) {
        rs.sort();
        let mut t = MemoryRangeTable::new();
        for &(gpa, length) in &rs {
            t.push_merging(MemoryRange { gpa, length }, gap);
        }
        // The model: a byte map, then runs joined across small gaps.
        let mut covered = vec![false; 2200];
        for &(gpa, length) in &rs {
            for b in gpa..gpa + length {
                covered[b as usize] = true;
            }
        }
        let mut want: Vec<MemoryRange> = Vec::new();
        let mut i = 0;
        while i < covered.len() {
            if !covered[i] {
                i += 1;
                continue;
            }
            let s = i;
            while i < covered.len() && covered[i] {
                i += 1;
            }
            match want.last_mut() {
                Some(l) if s as u64 - l.end() <= gap => l.length = i as u64 - l.gpa,
                _ => want.push(MemoryRange { gpa: s as u64, length: (i - s) as u64 }),
            }
        }
        prop_assert_eq!(t.ranges(), &want[..]);
    }
}
