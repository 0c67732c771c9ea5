//! Target `dirty`: dirty-bitmap files (raw little-endian words, as the CLI
//! reads them), the ranges of one bitmap and of the OR of two, through
//! every entry point (`Geometry::ranges`, `ranges_or`, `Scan` into a
//! `MemoryRangeTable`, serial and parallel, on every backend), against a
//! bit-by-bit model; the table's wire format; the dirty-ring conversion;
//! and `DirtyBitmap` operations against a page model.

use spacekit::bitmap::le_words;
use spacekit::dirty::{
    ranges_from_pages, scatter_pages, DirtyBitmap, DirtyError, Geometry, MemoryRange,
    MemoryRangeTable, Scan,
};
use spacekit::testing::{ranges_or_with, ranges_with, scan_with, ScanOpts};

use super::input::Input;

fn bit(words: &[u64], i: usize) -> bool {
    words[i / 64] >> (i % 64) & 1 == 1
}

/// The model: maximal dirty runs as (first page, pages), joined across gaps
/// of at most `gap` clean pages.
fn model_runs(words: &[u64], gap: u64, page_size: u64) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    let n = words.len() * 64;
    let mut i = 0;
    while i < n {
        if !bit(words, i) {
            i += 1;
            continue;
        }
        let s = i;
        while i < n && bit(words, i) {
            i += 1;
        }
        runs.push((s as u64, (i - s) as u64));
    }
    let join_all = gap.checked_mul(page_size).is_none();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (s, len) in runs {
        if let Some(last) = out.last_mut() {
            let clean = s - (last.0 + last.1);
            if join_all || clean <= gap {
                last.1 = s + len - last.0;
                continue;
            }
        }
        out.push((s, len));
    }
    out
}

fn to_ranges(runs: &[(u64, u64)], g: Geometry) -> Vec<MemoryRange> {
    let ps = g.page_size().get();
    runs.iter()
        // Wrapping: only compared where the geometry fits below 2^64.
        .map(|&(s, n)| MemoryRange {
            gpa: g.base().wrapping_add(s.wrapping_mul(ps)),
            length: n.wrapping_mul(ps),
        })
        .collect()
}

fn fits(words: usize, g: Geometry) -> bool {
    // The region's end must be a u64 (a last range ending exactly at 2^64
    // would make `gpa + length` overflow): strictly below 2^64.
    u128::from(g.base()) + words as u128 * 64 * u128::from(g.page_size().get()) < 1u128 << 64
}

fn words_from(input: &mut Input, nwords: usize) -> Vec<u64> {
    let mode = input.u8() % 4;
    (0..nwords)
        .map(|_| match mode {
            0 => input.u64(),
            1 => {
                if input.u8() < 64 {
                    !0
                } else {
                    u64::from(input.u8()) << (input.u8() % 57)
                }
            }
            2 => [0, !0, 1, 1 << 63][(input.u8() % 4) as usize],
            _ => {
                let b = input.u8();
                if b < 200 {
                    0
                } else {
                    1u64 << (b % 64)
                }
            }
        })
        .collect()
}

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    // The file as the CLI reads it: whole words or an error.
    let file_len = input.below(4096) as usize;
    let file = input.bytes(file_len);
    match le_words(file) {
        Ok(w) => {
            assert!(
                file.len().is_multiple_of(8),
                "le_words accepted {} bytes",
                file.len()
            );
            assert_eq!(w.len(), file.len() / 8);
            for (i, &word) in w.iter().enumerate() {
                let mut b = [0u8; 8];
                b.copy_from_slice(&file[i * 8..i * 8 + 8]);
                assert_eq!(word, u64::from_le_bytes(b), "word {i}");
            }
        }
        Err(_) => assert!(
            !file.len().is_multiple_of(8),
            "le_words refused {} bytes",
            file.len()
        ),
    }
    // Any bytes as a wire table: refused or round-tripped.
    match MemoryRangeTable::from_bytes(file) {
        Ok(t) => {
            assert_eq!(t.to_bytes(), file, "wire round trip");
            assert_eq!(t.len() * 16, file.len());
        }
        Err(DirtyError::BadWireLength { .. }) => assert!(!file.len().is_multiple_of(16)),
        Err(DirtyError::RangeOverflow { index }) => {
            let c = &file[index * 16..index * 16 + 16];
            let gpa = u64::from_le_bytes(c[..8].try_into().expect("8 bytes"));
            let len = u64::from_le_bytes(c[8..].try_into().expect("8 bytes"));
            assert!(gpa.checked_add(len).is_none(), "range {index} refused");
        }
        Err(e) => panic!("from_bytes: unexpected {e}"),
    }

    let base = match input.u8() % 4 {
        0 => 0,
        1 => u64::from(input.u32()) << 12,
        2 => u64::MAX - (u64::from(input.u16()) << (input.u8() % 40)),
        _ => input.u64(),
    };
    let page_size = match input.u8() % 8 {
        0 => input.edgy_u64(),
        k => 1u64 << [12, 12, 12, 0, 21, 30, 63][(k - 1) as usize],
    };
    let geometry = match Geometry::new(base, page_size) {
        Ok(g) => g,
        Err(e) => {
            assert!(
                !page_size.is_power_of_two(),
                "Geometry::new({base}, {page_size}): {e}"
            );
            return;
        }
    };
    let nwords = match input.u8() % 4 {
        0 => input.below(4) as usize,
        1 | 2 => input.below(40) as usize,
        _ => input.below(600) as usize,
    };
    let a = words_from(&mut input, nwords);
    let b_len = if input.u8() == 0xFF {
        input.below(40) as usize
    } else {
        nwords
    };
    let b = words_from(&mut input, b_len);
    let gap = match input.u8() % 4 {
        0 => 0,
        1 => u64::from(input.u8() % 8),
        2 => u64::from(input.u16()),
        _ => input.edgy_u64(),
    };
    let ok = fits(nwords, geometry);
    let or: Vec<u64> = a.iter().zip(&b).map(|(x, y)| x | y).collect();

    // Streaming iterators, default backend and each one.
    let want_a = to_ranges(&model_runs(&a, 0, page_size), geometry);
    let got = geometry.ranges(&a).map(|it| it.collect::<Vec<_>>());
    if ok {
        assert_eq!(got, Ok(want_a.clone()), "ranges of {nwords} words");
    } else {
        assert!(got.is_err(), "ranges past 2^64 accepted");
    }
    let want_or = to_ranges(&model_runs(&or, 0, page_size), geometry);
    let got = geometry.ranges_or(&a, &b).map(|it| it.collect::<Vec<_>>());
    if b.len() != a.len() {
        assert!(
            matches!(got, Err(DirtyError::LengthMismatch { .. })),
            "ranges_or lengths: {got:?}"
        );
    } else if ok {
        assert_eq!(got, Ok(want_or.clone()), "ranges_or of {nwords} words");
    } else {
        assert!(got.is_err(), "ranges_or past 2^64 accepted");
    }
    let block_words = 1 + input.below(8) as usize;
    for opts in ScanOpts::each_backend(block_words) {
        let got = ranges_with(geometry, &a, opts).map(|it| it.collect::<Vec<_>>());
        assert_eq!(got.ok(), ok.then(|| want_a.clone()), "ranges_with {opts:?}");
        if a.len() == b.len() {
            let got = ranges_or_with(geometry, &a, &b, opts).map(|it| it.collect::<Vec<_>>());
            assert_eq!(
                got.ok(),
                ok.then(|| want_or.clone()),
                "ranges_or_with {opts:?}"
            );
        }
    }

    // Tables through Scan, with merge_gap, serial and parallel.
    let scan = Scan::new(&a, geometry);
    if !ok {
        assert!(scan.is_err(), "Scan::new past 2^64 accepted");
    } else {
        let scan = scan.expect("scan");
        let scan = if a.len() == b.len() {
            scan.or(&b).expect("or of equal lengths")
        } else {
            assert!(
                scan.or(&b).is_err(),
                "Scan::or of different lengths accepted"
            );
            scan
        };
        let src = if a.len() == b.len() { &or } else { &a };
        let want = to_ranges(&model_runs(src, gap, page_size), geometry);
        let parallel = input.bool();
        let scan = scan.merge_gap(gap).parallel(parallel);
        let table = MemoryRangeTable::from_scan(scan);
        assert_eq!(
            table.ranges(),
            want,
            "table (gap {gap}, parallel {parallel})"
        );
        let total: u128 = want.iter().map(|r| u128::from(r.length)).sum();
        if total <= u128::from(u64::MAX) {
            assert_eq!(u128::from(table.total_bytes()), total, "total_bytes");
        }
        for opts in ScanOpts::each_backend(block_words) {
            let mut t = MemoryRangeTable::new();
            t.push(MemoryRange { gpa: 1, length: 1 });
            t.clear();
            t.extend_from(scan_with(scan, opts));
            assert_eq!(t.ranges(), want, "table with {opts:?}");
        }
        let bytes = table.to_bytes();
        let back = MemoryRangeTable::from_bytes(&bytes).expect("own wire bytes");
        assert_eq!(back.ranges(), table.ranges(), "wire round trip of a scan");
        // Pieces of at most `max` bytes: only where they are few (a range
        // of 2^63 bytes cut into 1 MiB pieces is legitimately huge).
        let max = (1 + input.below(1 << 20)).max((total >> 12).min(u128::from(u64::MAX)) as u64);
        let parts = table.partition(max);
        let rejoined: Vec<MemoryRange> = parts.iter().flat_map(|p| p.ranges().to_vec()).collect();
        let sum: u128 = rejoined.iter().map(|r| u128::from(r.length)).sum();
        assert_eq!(sum, total, "partition({max}) keeps every byte");
    }

    // The dirty ring: pages of a slot to ranges, and scattered into a log.
    let slot_pages = input.below(5000);
    let npages = input.below(64) as usize;
    let mut pages: Vec<u64> = (0..npages)
        .map(|_| {
            if input.u8() == 0 {
                input.u64()
            } else {
                input.below(slot_pages + 1)
            }
        })
        .collect();
    let orig = pages.clone();
    let mut table = MemoryRangeTable::new();
    let got = ranges_from_pages(&mut pages, slot_pages, geometry, &mut table);
    let slot_fits = u128::from(base) + u128::from(slot_pages) * u128::from(page_size) < 1u128 << 64;
    if orig.iter().any(|&p| p >= slot_pages) || !slot_fits {
        assert!(
            got.is_err(),
            "ranges_from_pages accepted a page past the slot"
        );
        assert_eq!(pages, orig, "pages changed on error");
        assert!(table.is_empty());
    } else {
        got.unwrap_or_else(|e| panic!("ranges_from_pages: {e}"));
        let mut log = vec![0u64; slot_pages.div_ceil(64) as usize];
        scatter_pages(&orig, slot_pages, &mut log).expect("scatter");
        let want = to_ranges(&model_runs(&log, 0, page_size), geometry);
        assert_eq!(table.ranges(), want, "ranges_from_pages");
    }

    // DirtyBitmap against a page model.
    let region = input.below(64 * 300);
    let Ok(log) = DirtyBitmap::new(geometry, region) else {
        return;
    };
    let npg = region.div_ceil(page_size) as usize;
    assert_eq!(log.pages(), npg as u64);
    let mut model = vec![false; npg];
    let end = u128::from(base) + u128::from(region);
    let mut steps = 0;
    while !input.is_empty() && steps < 64 {
        steps += 1;
        let addr = if input.u8() < 16 {
            input.u64()
        } else {
            base.wrapping_add(input.below(region + 2))
        };
        let len = input.below(region + 2);
        let inside =
            u128::from(addr) >= u128::from(base) && u128::from(addr) + u128::from(len) <= end;
        let touched = || {
            let first = ((addr - base) / page_size) as usize;
            let last = ((addr - base + len - 1) / page_size) as usize;
            first..=last
        };
        match input.u8() % 5 {
            0 | 1 => {
                let got = log.mark(addr, len);
                if len == 0 {
                    let _ = got;
                } else if inside {
                    assert_eq!(got, Ok(()), "mark({addr}, {len})");
                    for p in touched() {
                        model[p] = true;
                    }
                } else {
                    assert!(got.is_err(), "mark({addr}, {len}) outside accepted");
                }
            }
            2 => {
                let got = log.reset_range(addr, len);
                if len == 0 {
                    let _ = got;
                } else if inside {
                    assert_eq!(got, Ok(()), "reset_range({addr}, {len})");
                    for p in touched() {
                        model[p] = false;
                    }
                } else {
                    assert!(got.is_err(), "reset_range({addr}, {len}) outside accepted");
                }
            }
            3 => {
                let got = log.is_dirty(addr);
                if u128::from(addr) >= u128::from(base) && u128::from(addr) < end {
                    assert_eq!(
                        got,
                        Ok(model[((addr - base) / page_size) as usize]),
                        "is_dirty({addr})"
                    );
                } else {
                    assert!(got.is_err(), "is_dirty({addr}) outside accepted");
                }
            }
            _ => {
                let words: Vec<u64> = if input.bool() {
                    log.take()
                } else {
                    let mut out = vec![0u64; log.words()];
                    let n = log.harvest_into(&mut out).expect("harvest");
                    assert_eq!(n, out.iter().filter(|&&w| w != 0).count(), "dirty words");
                    let mut wrong = vec![0u64; log.words() + 1];
                    assert!(
                        log.harvest_into(&mut wrong).is_err(),
                        "harvest of a wrong length"
                    );
                    out
                };
                let mut want = vec![0u64; npg.div_ceil(64)];
                for (p, &d) in model.iter().enumerate() {
                    if d {
                        want[p / 64] |= 1 << (p % 64);
                    }
                }
                assert_eq!(words, want, "harvest");
                model.iter_mut().for_each(|d| *d = false);
            }
        }
    }
}
