//! `bench bitmaps`: spacekit's bitmap engine against the bitmap crates a
//! user would pick instead.
//!
//! 1. **Contiguous allocation** on rcore-os `bitmap-allocator`'s largest
//!    type, `BitAlloc256M` (2^28 bits: 1 TiB of 4 KiB frames; a 16-way
//!    cascade of summary bits over 16-bit leaves, set = free), against a
//!    spacekit [`Bitmap`] of as many bits (set = used, the kernel's sense).
//!    The first `scan` bits are fragmented: used runs of 1..=64 bits
//!    separated by free holes of 1..`size` bits (none for `size` 1), so no
//!    request fits before `scan`; everything past it is free. One operation
//!    allocates `size` bits aligned to `2^align_log2` and frees them again
//!    (the state is unchanged after each):
//!    * `bitmap-allocator`: `alloc_contiguous(None, size, align_log2)`, then
//!      `dealloc_contiguous(base, size)`;
//!    * `spacekit`: `find_clear_area(0, size, 1 << align_log2, 0)`, then
//!      `set_range` and `clear_range` (the bitmap engine alone: a scan);
//!    * `spacekit-index`: the same bitmap with a [`FreeSpaceIndex`] (run
//!      summaries over 4096-bit leaves): `first_fit(.., goal 0)`, then
//!      `set_range` / `clear_range`, each followed by the index's `update`.
//!
//!    * `spacekit-summary`: a [`SummaryBitmap`] (the bitmap plus summary
//!      levels of words with a clear bit, 64-way): `find_clear_area(0, ..)`
//!      from the first clear bit the levels give, then `set` / `clear` (one
//!      bit) or `set_range` / `clear_range`, which keep the levels in step.
//!
//!    All four must return the same first address before timing (the
//!    lowest aligned start of `size` free bits: the same rule in all three);
//!    after the fragmentation the two bitmaps must agree bit for bit over
//!    the fragmented stretch.
//!
//! 2. **Next-zero and count** against `fixedbitset`, whose SIMD is chosen
//!    at compile time (SSE2 here) where spacekit's is chosen at run time, on
//!    a `random` bitmap (random words) and a `mostly-set` one (one clear bit
//!    in 512, where finding the next zero means skipping full words):
//!    * `zeroes`: every clear bit, in order (position count and sum):
//!      `FixedBitSet::zeroes()` vs `Bits::iter_zeros(0)`;
//!    * `count_ones`: `count_ones(..)` vs `count_ones()` (`range` `all`), and
//!      `count_ones(3..n - 5)` vs `count_ones_in(3..n - 5)` (`unaligned`).
//!
//! Semantic differences found (none affects the cases measured):
//! `alloc_contiguous` with `size` 0 never succeeds (its loop needs one free
//! bit per requested bit), where `find_clear_area` returns the aligned first
//! clear bit as the kernel does; an `align_log2` of 64 or more, or an
//! alignment above the capacity, is `None` there and an error
//! ([`BitmapError::InvalidAlignment`](spacekit::bitmap::BitmapError)) only
//! for a non-power-of-two `align` here; `bitmap-allocator` has no start
//! position, no alignment offset and no way to search a sub-range, and its
//! capacity is fixed by the type (16^k bits). `fixedbitset` has no
//! "next zero from an index" (only `zeroes()` from the start, and
//! `minimum()` for the first one).
//!
//! JSON rows: `case` (`alloc_contiguous`, `zeroes`, `count_ones`),
//! `variant` (`bitmap-allocator`, `spacekit`, `spacekit-index`,
//! `spacekit-summary`, `fixedbitset`), and per case `bits`, `scan`, `size`, `align_log2`
//! (alloc_contiguous) or `bits`, `pattern`, `range` (the others), and
//! `median_ns` (per allocate + free pair, per full iteration, per count).

use std::hint::black_box;
use std::ops::Range;

use bitmap_allocator::{BitAlloc, BitAlloc256M};
use fixedbitset::FixedBitSet;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit::bitmap::{Bitmap, Bits, BitsMut, SummaryBitmap};
use spacekit::freespace::FreeSpaceIndex;
use spacekit::testing::Validate;

use crate::chart::{Chart, XAxis};
use crate::context::{BenchError, Ctx, Mode};
use crate::harness::{batch, progress, Bars, Comparison, Medians, Report, Row, Table};

const NAME: &str = "bitmaps";

/// bitmap-allocator's largest type.
type Peer = BitAlloc256M;
/// Its capacity in bits (2^28).
const CAP: usize = Peer::CAP;

/// The `(size, align_log2)` requests of part 1.
const REQUESTS: [(usize, usize); 4] = [(1, 0), (16, 4), (64, 6), (256, 0)];

fn bad(e: impl std::fmt::Display) -> BenchError {
    BenchError(e.to_string())
}

/// An empty (all used) `BitAlloc256M` on the heap: 34 MiB, too big for the
/// stack its `Default` would build it on.
fn peer_new() -> Box<Peer> {
    let b = Box::<Peer>::new_zeroed();
    // SAFETY: `BitAlloc256M` is nested `BitAllocCascade16 { bitset: u16,
    // sub: [T; 16] }` down to `BitAlloc16(u16)`: integers and arrays of
    // them, for which all-zero bytes are a valid value (every bit used,
    // the same value as `BitAlloc256M::DEFAULT`).
    unsafe { b.assume_init() }
}

/// The used runs of a fragmented stretch of about `scan` bits in which no
/// run of `size` free bits exists (holes of 1..size bits; none for size 1).
fn fragment(rng: &mut SmallRng, scan: usize, size: usize) -> Vec<Range<usize>> {
    let mut runs = Vec::new();
    let mut at = 0;
    while at < scan {
        let used = rng.random_range(1..=64);
        runs.push(at..at + used);
        at += used;
        if size > 1 {
            at += rng.random_range(1..size);
        }
    }
    runs
}

/// The three allocators of part 1, all free but for the current
/// fragmentation.
struct Alloc {
    peer: Box<Peer>,
    scan: Bitmap,
    indexed: Bitmap,
    index: FreeSpaceIndex,
    summary: SummaryBitmap,
}

impl Alloc {
    fn new() -> Result<Alloc, BenchError> {
        let mut peer = peer_new();
        peer.insert(0..CAP);
        let scan = Bitmap::new(CAP);
        let indexed = Bitmap::new(CAP);
        let index = FreeSpaceIndex::new(indexed.as_words(), CAP as u64).map_err(bad)?;
        Ok(Alloc {
            peer,
            scan,
            indexed,
            index,
            summary: SummaryBitmap::new(CAP),
        })
    }

    /// Marks `runs` used (`used`) or free again in all three.
    fn apply(&mut self, runs: &[Range<usize>], used: bool) -> Result<(), BenchError> {
        for r in runs {
            if used {
                self.peer.remove(r.clone());
                self.scan.set_range(r.clone()).map_err(bad)?;
                self.indexed.set_range(r.clone()).map_err(bad)?;
                self.summary.set_range(r.clone()).map_err(bad)?;
            } else {
                self.peer.insert(r.clone());
                self.scan.clear_range(r.clone()).map_err(bad)?;
                self.indexed.clear_range(r.clone()).map_err(bad)?;
                self.summary.clear_range(r.clone()).map_err(bad)?;
            }
        }
        let end = runs.last().map_or(0, |r| r.end) as u64;
        self.index
            .update(self.indexed.as_words(), 0..end)
            .map_err(bad)
    }
}

/// bitmap-allocator's allocate + free.
fn peer_pair<B: BitAlloc>(peer: &mut B, size: usize, align_log2: usize) -> Option<usize> {
    let p = peer.alloc_contiguous(None, size, align_log2);
    if let Some(p) = p {
        peer.dealloc_contiguous(p, size);
    }
    p
}

/// spacekit's allocate + free with the scan.
fn scan_pair(map: &mut Bitmap, size: usize, align: usize) -> Option<usize> {
    let p = map.find_clear_area(0, size, align, 0).ok().flatten();
    if let Some(p) = p {
        let _ = map.set_range(p..p + size);
        let _ = map.clear_range(p..p + size);
    }
    p
}

/// spacekit's allocate + free on the summary bitmap.
fn summary_pair(map: &mut SummaryBitmap, size: usize, align: usize) -> Option<usize> {
    let p = map.find_clear_area(0, size, align, 0).ok().flatten()?;
    if size == 1 {
        let _ = map.set(p);
        let _ = map.clear(p);
    } else {
        let _ = map.set_range(p..p + size);
        let _ = map.clear_range(p..p + size);
    }
    Some(p)
}

/// spacekit's allocate + free through the free-space index.
fn index_pair(
    map: &mut Bitmap,
    index: &mut FreeSpaceIndex,
    size: usize,
    align: usize,
) -> Option<usize> {
    let p = index
        .first_fit(map.as_words(), size as u64, align as u64, 0, 0)
        .ok()
        .flatten()? as usize;
    let range = p as u64..(p + size) as u64;
    let _ = map.set_range(p..p + size);
    let _ = index.update(map.as_words(), range.clone());
    let _ = map.clear_range(p..p + size);
    let _ = index.update(map.as_words(), range);
    Some(p)
}

/// Verifies and times one request after `scan` fragmented bits.
fn alloc_case(
    ctx: &Ctx,
    a: &mut Alloc,
    rng: &mut SmallRng,
    scan: usize,
    (size, align_log2): (usize, usize),
) -> Result<Medians, BenchError> {
    let align = 1usize << align_log2;
    let what = format!("alloc_contiguous of {size} bits aligned to {align} after {scan} bits");
    progress(NAME, &what);
    let runs = fragment(rng, scan, size);
    a.apply(&runs, true)?;
    // The two bitmaps agree over the fragmented stretch (in quick mode, on
    // a sample of it).
    let end = runs.last().map_or(0, |r| r.end) + 64;
    let step = if ctx.mode == Mode::Quick { 61 } else { 1 };
    for i in (0..end).step_by(step) {
        if a.peer.test(i) == a.scan.get(i).unwrap_or(true) {
            return Err(BenchError(format!(
                "{what}: bit {i} is {} in bitmap-allocator and {} in spacekit",
                if a.peer.test(i) { "free" } else { "used" },
                if a.scan.get(i) == Some(true) {
                    "used"
                } else {
                    "free"
                },
            )));
        }
    }
    if let Err(e) = a.summary.validate() {
        return Err(BenchError(format!("{what}: the summary levels: {e}")));
    }
    if a.summary.as_bitmap() != &a.scan {
        return Err(BenchError(format!(
            "{what}: the summary bitmap's bits differ from the plain bitmap's"
        )));
    }
    let Alloc {
        peer,
        scan: map,
        indexed,
        index,
        summary,
    } = a;
    let want = peer_pair(&mut **peer, size, align_log2);
    let got = scan_pair(map, size, align);
    let got_index = index_pair(indexed, index, size, align);
    let got_summary = summary_pair(summary, size, align);
    let m = Comparison::new(what.clone())
        .variant(
            "bitmap-allocator",
            want,
            batch(|| {
                black_box(peer_pair(&mut **peer, size, align_log2));
            }),
        )
        .variant(
            "spacekit",
            got,
            batch(|| {
                black_box(scan_pair(map, size, align));
            }),
        )
        .variant(
            "spacekit-index",
            got_index,
            batch(|| {
                black_box(index_pair(indexed, index, size, align));
            }),
        )
        .variant(
            "spacekit-summary",
            got_summary,
            batch(|| {
                black_box(summary_pair(summary, size, align));
            }),
        )
        .run(&ctx.timer())?;
    // Every pair left the state as it found it: the same answer again.
    let again = [
        peer_pair(&mut **peer, size, align_log2),
        scan_pair(map, size, align),
        index_pair(indexed, index, size, align),
        summary_pair(summary, size, align),
    ];
    if again.iter().any(|&p| p != want) {
        return Err(BenchError(format!(
            "{what}: after timing the answers are {again:?}, not {want:?}"
        )));
    }
    a.apply(&runs, false)?;
    Ok(m)
}

fn alloc_table(ctx: &Ctx, report: &mut Report, bars: &mut Bars) -> Result<(), BenchError> {
    let scans: &[usize] = match ctx.mode {
        Mode::Quick => &[1 << 16],
        Mode::Default => &[1 << 16, 1 << 22],
        Mode::Full => &[1 << 16, 1 << 22, 1 << 24],
    };
    progress(NAME, &format!("building the {CAP}-bit bitmaps"));
    let mut a = Alloc::new()?;
    let mut rng = SmallRng::seed_from_u64(ctx.seed ^ 0xB17A);
    let mut table = Table::new(
        &format!(
            "contiguous allocation + free on {CAP} bits (bitmap-allocator's BitAlloc256M), \
             first fit after `scan` fragmented bits"
        ),
        &[
            "scan",
            "size",
            "align",
            "bitmap-allocator",
            "spacekit",
            "spacekit-index",
            "spacekit-summary",
            "peer/spk",
            "peer/index",
            "peer/summary",
        ],
    );
    let labels: Vec<String> = REQUESTS
        .iter()
        .map(|&(size, a)| format!("{size} bits, align {}", 1usize << a))
        .collect();
    let last = scans.last().copied().unwrap_or(0);
    let mut chart = Chart::new(
        &format!("bitmaps: allocate + free after {last} fragmented bits, per request"),
        "request",
        "ns per allocate + free",
        XAxis::Categories(labels),
        true,
    );
    for &scan in scans {
        for (k, req) in REQUESTS.into_iter().enumerate() {
            let m = alloc_case(ctx, &mut a, &mut rng, scan, req)?;
            if scan == last {
                for &v in m.names() {
                    chart.point(v, k as f64, m.ns(v));
                }
            }
            let (size, align_log2) = req;
            m.rows(report, |v| {
                Row::new("alloc_contiguous", v)
                    .field("bits", CAP)
                    .field("scan", scan)
                    .field("size", size)
                    .field("align_log2", align_log2)
            });
            table.row(vec![
                scan.to_string(),
                size.to_string(),
                (1usize << align_log2).to_string(),
                m.cell("bitmap-allocator"),
                m.cell("spacekit"),
                m.cell("spacekit-index"),
                m.cell("spacekit-summary"),
                m.ratio_cell("bitmap-allocator", "spacekit"),
                m.ratio_cell("bitmap-allocator", "spacekit-index"),
                m.ratio_cell("bitmap-allocator", "spacekit-summary"),
            ]);
            let best = m
                .ns("spacekit")
                .min(m.ns("spacekit-index"))
                .min(m.ns("spacekit-summary"));
            bars.check(
                best <= m.ns("bitmap-allocator"),
                format!(
                    "alloc_contiguous size {size} align {} after {scan} bits: faster spacekit \
                     variant {} vs bitmap-allocator {} (bar: never slower)",
                    1usize << align_log2,
                    crate::harness::fmt_ns(best),
                    m.cell("bitmap-allocator"),
                ),
            );
            if size == 1 && align_log2 == 0 && scan == 1 << 22 {
                // The hot case of page and inode allocators, on a mostly
                // full map: the summary's few loads against the peer's.
                let r = m.ns("bitmap-allocator") / best;
                bars.check(
                    r >= 2.0,
                    format!(
                        "alloc_contiguous size 1 after {scan} bits: bitmap-allocator {} vs \
                         fastest spacekit {} = {r:.1}x (bar: >= 2x)",
                        m.cell("bitmap-allocator"),
                        crate::harness::fmt_ns(best),
                    ),
                );
            }
        }
    }
    report.table(table);
    report.chart(chart);
    Ok(())
}

// ---- 2. fixedbitset ----

/// The bitmaps of part 2.
#[derive(Clone, Copy, Debug)]
enum Pattern {
    Random,
    MostlySet,
}

impl Pattern {
    fn label(self) -> &'static str {
        match self {
            Pattern::Random => "random",
            Pattern::MostlySet => "mostly-set",
        }
    }

    fn make(self, rng: &mut SmallRng, nbits: usize) -> Vec<u64> {
        let nw = nbits.div_ceil(64);
        match self {
            Pattern::Random => (0..nw).map(|_| rng.random()).collect(),
            Pattern::MostlySet => {
                let mut w = vec![!0u64; nw];
                for _ in 0..nbits / 512 {
                    let i = rng.random_range(0..nbits);
                    w[i / 64] &= !(1 << (i % 64));
                }
                w
            }
        }
    }
}

/// `(count, sum)` of positions.
fn tally(it: impl Iterator<Item = usize>) -> (usize, usize) {
    it.fold((0, 0), |(c, s), i| (c + 1, s.wrapping_add(i)))
}

fn fixedbitset_table(ctx: &Ctx, report: &mut Report, bars: &mut Bars) -> Result<(), BenchError> {
    if usize::BITS != 64 {
        return Err(BenchError(
            "fixedbitset's blocks are usize: this comparison needs a 64-bit target".into(),
        ));
    }
    let sizes: &[usize] = match ctx.mode {
        Mode::Quick => &[1 << 16, 1 << 20],
        _ => &[1 << 16, 1 << 23],
    };
    let mut rng = SmallRng::seed_from_u64(ctx.seed ^ 0xF1CB);
    let mut table = Table::new(
        "next zero (every clear bit, in order) and counts vs fixedbitset",
        &[
            "bits",
            "pattern",
            "case",
            "fixedbitset",
            "spacekit",
            "fbs/spk",
        ],
    );
    let last = sizes.last().copied().unwrap_or(0);
    let labels: Vec<String> = [Pattern::Random, Pattern::MostlySet]
        .iter()
        .flat_map(|p| {
            ["zeroes", "count all", "count unaligned"].map(|c| format!("{c}, {}", p.label()))
        })
        .collect();
    let mut chart = Chart::new(
        &format!("bitmaps: next zero and counts on {last} bits vs fixedbitset"),
        "operation, bitmap",
        "ns per full iteration or count",
        XAxis::Categories(labels),
        true,
    );
    let mut slot = 0usize;
    for &n in sizes {
        for pattern in [Pattern::Random, Pattern::MostlySet] {
            let words = pattern.make(&mut rng, n);
            let fb = FixedBitSet::with_capacity_and_blocks(n, words.iter().map(|&w| w as usize));
            let map = Bitmap::from_words(words, n).map_err(bad)?;
            let label = pattern.label();
            progress(NAME, &format!("fixedbitset: {n} bits, {label}"));
            let zeroes = Comparison::new(format!("zeroes of {n} {label} bits"))
                .variant(
                    "fixedbitset",
                    tally(fb.zeroes()),
                    batch(|| {
                        black_box(tally(black_box(&fb).zeroes()));
                    }),
                )
                .variant(
                    "spacekit",
                    tally(map.iter_zeros(0)),
                    batch(|| {
                        black_box(tally(black_box(&map).iter_zeros(0)));
                    }),
                )
                .run(&ctx.timer())?;
            let (lo, hi) = (3, n - 5);
            let mut cases = vec![("zeroes", "all", zeroes)];
            for (range, r) in [("all", 0..n), ("unaligned", lo..hi)] {
                let whole = range == "all";
                let count = Comparison::new(format!("count_ones of {n} {label} bits, {range}"))
                    .variant(
                        "fixedbitset",
                        fb.count_ones(r.clone()),
                        batch(|| {
                            let f = black_box(&fb);
                            black_box(if whole {
                                f.count_ones(..)
                            } else {
                                f.count_ones(lo..hi)
                            });
                        }),
                    )
                    .variant(
                        "spacekit",
                        map.count_ones_in(r.clone()).map_err(bad)?,
                        batch(|| {
                            let m = black_box(&map);
                            black_box(if whole {
                                m.count_ones()
                            } else {
                                m.count_ones_in(lo..hi).unwrap_or(0)
                            });
                        }),
                    )
                    .run(&ctx.timer())?;
                cases.push(("count_ones", range, count));
            }
            for (case, range, m) in cases {
                if n == last {
                    for &v in m.names() {
                        chart.point(v, slot as f64, m.ns(v));
                    }
                    slot += 1;
                }
                m.rows(report, |v| {
                    Row::new(case, v)
                        .field("bits", n)
                        .field("pattern", label)
                        .field("range", range)
                });
                table.row(vec![
                    n.to_string(),
                    label.into(),
                    if case == "zeroes" {
                        "zeroes".into()
                    } else {
                        format!("count_ones {range}")
                    },
                    m.cell("fixedbitset"),
                    m.cell("spacekit"),
                    m.ratio_cell("fixedbitset", "spacekit"),
                ]);
                bars.check(
                    m.ns("spacekit") <= m.ns("fixedbitset"),
                    format!(
                        "{case} ({range}) on {n} {label} bits: spacekit {} vs fixedbitset {} \
                         (bar: never slower)",
                        m.cell("spacekit"),
                        m.cell("fixedbitset"),
                    ),
                );
            }
        }
    }
    report.table(table);
    report.chart(chart);
    Ok(())
}

/// Runs `bench bitmaps`.
pub fn run(ctx: &Ctx) -> Result<Report, BenchError> {
    let mut report = Report::default();
    let mut bars = Bars::new(NAME);
    alloc_table(ctx, &mut report, &mut bars)?;
    fixedbitset_table(ctx, &mut report, &mut bars)?;
    report.bars(bars);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitmap_allocator::BitAlloc4K;

    #[test]
    fn fragments_hold_no_fit() {
        let mut rng = SmallRng::seed_from_u64(5);
        for size in [1, 2, 16, 64] {
            let runs = fragment(&mut rng, 5000, size);
            for w in runs.windows(2) {
                let hole = w[1].start - w[0].end;
                assert!(hole < size.max(1), "hole {hole} for size {size}");
                assert!(size > 1 || hole == 0);
            }
        }
    }

    /// The answer rule of `alloc_contiguous` is `find_clear_area`'s, on a
    /// small bitmap-allocator type, for many random states and requests.
    #[test]
    fn alloc_contiguous_is_the_lowest_aligned_fit() {
        let mut rng = SmallRng::seed_from_u64(9);
        for _ in 0..300 {
            let mut peer = BitAlloc4K::default();
            peer.insert(0..BitAlloc4K::CAP);
            let mut map = Bitmap::new(BitAlloc4K::CAP);
            for _ in 0..rng.random_range(0..60) {
                let s = rng.random_range(0..4000);
                let e = (s + rng.random_range(1..200)).min(BitAlloc4K::CAP);
                peer.remove(s..e);
                map.set_range(s..e).unwrap();
            }
            let size = rng.random_range(1..300);
            let a = rng.random_range(0..8);
            assert_eq!(
                peer_pair(&mut peer, size, a),
                scan_pair(&mut map, size, 1 << a),
                "size {size} align_log2 {a}"
            );
        }
    }
}
