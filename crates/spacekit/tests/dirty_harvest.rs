//! The one-pass harvest (`DirtyBitmap::harvest_or_into_table`): the VMM's
//! log taken, ORed with KVM's and turned into ranges in one pass, against
//! the two-step way (`harvest_into`, then `Scan::new(kvm).or(vmm)`) and a
//! per-bit model, on every SIMD level this machine runs; and marks made
//! while it runs are never lost.

use proptest::prelude::*;
use spacekit::dirty::{DirtyBitmap, DirtyError, Geometry, MemoryRange, MemoryRangeTable, Scan};
use spacekit::testing::{harvest_or_with, ScanOpts};

/// Prints one line when this machine cannot run the AVX-512 level, so a
/// run that never exercised those loops says so. Called once per test that
/// loops over the levels.
fn note_skipped_levels() {
    use spacekit::arch::{Level, LevelKind};
    if cfg!(target_arch = "x86_64") && !Level::available().any(|l| l.kind() == LevelKind::Avx512) {
        println!("AVX-512 level not available on this machine: its tests were skipped");
    }
}

fn geo(base: u64, page: u64) -> Geometry {
    Geometry::new(base, page).unwrap()
}

/// A log of `words.len()` words at `g` holding exactly `words` (set page
/// by page through `mark`, in runs).
fn log_of(words: &[u64], g: Geometry) -> DirtyBitmap {
    let page = g.page_size().get();
    let log = DirtyBitmap::new(g, words.len() as u64 * 64 * page).unwrap();
    for r in g.ranges(words).unwrap() {
        log.mark(r.gpa, r.length).unwrap();
    }
    log
}

/// Per-bit model of the ranges of `words`.
fn model(words: &[u64], g: Geometry) -> Vec<MemoryRange> {
    let page = g.page_size().get();
    let mut out: Vec<MemoryRange> = Vec::new();
    for i in 0..words.len() as u64 * 64 {
        if words[(i / 64) as usize] >> (i % 64) & 1 == 0 {
            continue;
        }
        let gpa = g.base() + i * page;
        match out.last_mut() {
            Some(r) if r.end() == gpa => r.length += page,
            _ => out.push(MemoryRange { gpa, length: page }),
        }
    }
    out
}

/// `(index, word)` of the nonzero words.
fn sparse(words: &[u64]) -> Vec<(usize, u64)> {
    words
        .iter()
        .enumerate()
        .filter(|(_, &w)| w != 0)
        .map(|(i, &w)| (i, w))
        .collect()
}

fn pages(words: &[u64]) -> u64 {
    words.iter().map(|w| u64::from(w.count_ones())).sum()
}

/// Checks the one-pass harvest of a log holding `vmm`, ORed with `kvm`, at
/// every level: the same table as the two-step way and the model, the
/// taken words and counts exact, the log clean afterwards.
fn check(vmm: &[u64], kvm: &[u64], g: Geometry, what: &str) {
    let or: Vec<u64> = vmm.iter().zip(kvm).map(|(a, b)| a | b).collect();
    let want = model(&or, g);
    // The two-step way, on its own copy of the log.
    let two = log_of(vmm, g);
    let mut harvested = vec![0u64; vmm.len()];
    two.harvest_into(&mut harvested).unwrap();
    assert_eq!(harvested, vmm, "{what}: harvest_into");
    let table = MemoryRangeTable::from_scan(Scan::new(kvm, g).unwrap().or(&harvested).unwrap());
    assert_eq!(table.ranges(), want, "{what}: Scan::or");
    for opts in ScanOpts::each_backend(64) {
        let log = log_of(vmm, g);
        let mut got = MemoryRangeTable::new();
        let mut taken = vec![(7, 7)];
        let counts = harvest_or_with(&log, kvm, g, &mut got, Some(&mut taken), opts).unwrap();
        let level = opts.backend;
        assert_eq!(got.ranges(), want, "{what} at {level}: table");
        assert_eq!(taken, sparse(vmm), "{what} at {level}: taken words");
        assert_eq!(counts.words, taken.len(), "{what} at {level}: words");
        assert_eq!(counts.pages, pages(vmm), "{what} at {level}: vmm pages");
        assert_eq!(
            counts.other_pages,
            pages(kvm),
            "{what} at {level}: kvm pages"
        );
        assert!(
            log.take().iter().all(|&w| w == 0),
            "{what} at {level}: the log is not clean after the harvest"
        );
        // A second pass takes nothing and gives KVM's ranges alone.
        let mut again = MemoryRangeTable::new();
        let c = harvest_or_with(&log, kvm, g, &mut again, None, opts).unwrap();
        assert_eq!((c.words, c.pages), (0, 0), "{what} at {level}: second pass");
        assert_eq!(
            again.ranges(),
            model(kvm, g),
            "{what} at {level}: second pass"
        );
    }
}

/// Bitmaps of random runs: density and run length vary per case.
fn arb_bitmap() -> impl Strategy<Value = Vec<u64>> {
    (0usize..=700, any::<u64>(), 0u32..=100, 1u64..=200).prop_map(|(n, seed, pct, run)| {
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

/// A second log over the same words: per word, clean (most), a few random
/// bits, or all set, with long clean stretches when `sparse`.
fn second(a: &[u64], seed: u64, sparse: bool) -> Vec<u64> {
    let mut s = seed | 1;
    a.iter()
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            match s % if sparse { 64 } else { 8 } {
                0 => !0,
                1..=3 => s & (s >> 17) & (s >> 33),
                _ => 0,
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// KVM's log dense-ish and the VMM's sparse, and the other way round,
    /// against the two-step way and the model on every level.
    #[test]
    fn one_pass_equals_harvest_then_scan_or(
        a in arb_bitmap(),
        seed in any::<u64>(),
        sparse in any::<bool>(),
        swap in any::<bool>(),
        shift in 9u32..=21,
        base_pages in 0u64..1 << 20,
    ) {
        let b = second(&a, seed, sparse);
        let g = geo(base_pages << shift, 1 << shift);
        let (vmm, kvm) = if swap { (&b, &a) } else { (&a, &b) };
        check(vmm, kvm, g, &format!("{} words, swap {swap}", a.len()));
    }
}

#[test]
fn runs_crossing_every_batch_edge() {
    note_skipped_levels();
    // The pass tests 64 words at a time and skips a batch clean in both
    // logs: runs that end at, start at, or cross a batch's first or last
    // page, from either log, with clean batches between; and bitmaps whose
    // length is not a multiple of 64 words.
    let g = geo(0x4000_0000, 4096);
    for words in [1usize, 63, 64, 65, 128, 129, 200] {
        let bits = words as u64 * 64;
        let edges: Vec<u64> = (0..=bits)
            .step_by(4096)
            .flat_map(|e| [e.saturating_sub(1), e, e + 1])
            .filter(|&e| e <= bits)
            .collect();
        for &s in &edges {
            for &e in &edges {
                if e <= s {
                    continue;
                }
                let mut run = vec![0u64; words];
                for b in s..e {
                    run[(b / 64) as usize] |= 1 << (b % 64);
                }
                let clean = vec![0u64; words];
                check(
                    &run,
                    &clean,
                    g,
                    &format!("vmm run {s}..{e} of {words} words"),
                );
                check(
                    &clean,
                    &run,
                    g,
                    &format!("kvm run {s}..{e} of {words} words"),
                );
                // Split between the logs at the middle.
                let mid = (s + e) / 2;
                let (mut x, mut y) = (clean.clone(), clean.clone());
                for b in s..e {
                    let t = if b < mid { &mut x } else { &mut y };
                    t[(b / 64) as usize] |= 1 << (b % 64);
                }
                check(&x, &y, g, &format!("split run {s}..{e} of {words} words"));
            }
        }
    }
}

#[test]
fn appends_joining_the_seam_and_refuses_bad_input() {
    let g = geo(0, 4096);
    let log = log_of(&[1, 0], g);
    let mut table = MemoryRangeTable::new();
    // A table ending where the pass's first range starts: joined.
    table.push(MemoryRange {
        gpa: 0x10_0000 - 4096,
        length: 4096,
    });
    let c = log
        .harvest_or_into_table(&[0, 1 << 5], g.with_base(0x10_0000), &mut table, None)
        .unwrap();
    assert_eq!((c.words, c.pages, c.other_pages), (1, 1, 1));
    assert_eq!(
        table.ranges(),
        [
            MemoryRange {
                gpa: 0x10_0000 - 4096,
                length: 2 * 4096
            },
            MemoryRange {
                gpa: 0x10_0000 + 69 * 4096,
                length: 4096
            },
        ]
    );
    // Bad input: typed errors, and nothing harvested.
    let log = log_of(&[1, 0], g);
    assert_eq!(
        log.harvest_or_into_table(&[0; 3], g, &mut table, None),
        Err(DirtyError::LengthMismatch {
            expected: 2,
            found: 3
        })
    );
    assert!(matches!(
        log.harvest_or_into_table(&[0; 2], geo(u64::MAX - 4096 * 64, 4096), &mut table, None),
        Err(DirtyError::OutOfRange { .. })
    ));
    assert!(log.is_dirty(0).unwrap(), "a refused harvest took a word");
}

#[test]
fn concurrent_marks_during_the_pass_are_never_lost() {
    // Four threads mark every page many times over while the main thread
    // runs one-pass harvests (with an empty KVM log) back to back; the
    // union of the tables and of the taken words must hold every page, and
    // each table must be the ranges of exactly the words taken.
    let pages = 64 * 512u64;
    let g = geo(0, 4096);
    let log = DirtyBitmap::new(g, pages * 4096).unwrap();
    let threads = 4u64;
    let kvm = vec![0u64; log.words()];
    let mut union = vec![0u64; log.words()];
    let mut from_tables = vec![0u64; log.words()];
    let done = std::sync::atomic::AtomicUsize::new(0);
    let mut harvests = 0;
    std::thread::scope(|sc| {
        let log = &log;
        let done = &done;
        for t in 0..threads {
            sc.spawn(move || {
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
        let mut table = MemoryRangeTable::new();
        let mut taken = Vec::new();
        let mut words = vec![0u64; log.words()];
        loop {
            let finished = done.load(std::sync::atomic::Ordering::Acquire) == threads as usize;
            table.clear();
            log.harvest_or_into_table(&kvm, g, &mut table, Some(&mut taken))
                .unwrap();
            harvests += 1;
            words.fill(0);
            for &(i, w) in &taken {
                words[i] = w;
                union[i] |= w;
            }
            assert_eq!(table.ranges(), model(&words, g), "table != taken words");
            for r in table.ranges() {
                for p in r.gpa / 4096..r.end() / 4096 {
                    from_tables[(p / 64) as usize] |= 1 << (p % 64);
                }
            }
            if finished {
                break;
            }
        }
    });
    println!("{harvests} one-pass harvests while marking");
    assert!(union.iter().all(|&w| w == !0), "a marked page was lost");
    assert_eq!(union, from_tables);
}
