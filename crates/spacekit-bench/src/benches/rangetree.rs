//! `bench rangetree`: point lookups and gap searches on 1K, 64K and 1M
//! ranges (`--quick`: 1K and 64K), spacekit's [`RangeTree`] against a std
//! `BTreeMap<first, (last, value)>` holding the same data.
//!
//! The ranges are 1..=16 pages long (4 KiB pages, indices are byte
//! addresses) and separated by 0..=4 free pages, so some touch; 16 gaps of
//! 1024 pages sit at random places among them.
//!
//! * `get`: 65,536 pre-generated addresses, 90% inside a range and 10% in a
//!   gap; spacekit's `get(i)` against `map.range(..=i).next_back()` with
//!   `last >= i`.
//! * `find_gap`: 256 random window starts within the ranges' span, window
//!   end `u64::MAX`, size 1000 pages (only the big gaps and the space after
//!   the last range fit), lowest fit; spacekit's `find_gap` against a walk of
//!   the map from the window start (what a BTreeMap user writes: O(n)).
//!
//! Both variants' answers to the whole query list are compared before
//! anything is timed; one timed call runs the whole list, and the reported
//! figure is nanoseconds per query.
//!
//! JSON rows: `case` (`get`, `find_gap`), `variant` (`spacekit`,
//! `btreemap`), `ranges` (n), `queries` (per timed call), `size` (find_gap,
//! in bytes), `median_ns` (per query).

use std::collections::BTreeMap;
use std::hint::black_box;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit::rangetree::RangeTree;
use spacekit::testing::Validate;

use crate::chart::{Chart, XAxis};
use crate::context::{BenchError, Ctx, Mode};
use crate::harness::{batch, progress, Bars, Comparison, Medians, Report, Row, Table};

const NAME: &str = "rangetree";
const PAGE: u64 = 4096;
/// Address of the first range.
const BASE: u64 = 1 << 32;
/// Big gaps among the ranges.
const BIG_GAPS: usize = 16;
/// Pages in each big gap.
const BIG_GAP_PAGES: u64 = 1024;
/// Pages asked of `find_gap`: only the big gaps hold that many.
const FIND_PAGES: u64 = 1000;
/// Queries per timed call.
const GET_QUERIES: usize = 1 << 16;
const GAP_QUERIES: usize = 256;

/// The test data: sorted `(first, last, value)` and the free stretches
/// between and around them (`(first, last)`, non-empty).
struct Data {
    ranges: Vec<(u64, u64, u64)>,
    holes: Vec<(u64, u64)>,
}

fn make_data(n: usize, rng: &mut SmallRng) -> Data {
    // Entry indices followed by a big gap.
    let mut big = std::collections::BTreeSet::new();
    while big.len() < BIG_GAPS.min(n.saturating_sub(1)) {
        big.insert(rng.random_range(0..n - 1));
    }
    let mut ranges = Vec::with_capacity(n);
    let mut holes = vec![(BASE - 64 * PAGE, BASE - 1)];
    let mut at = BASE;
    for i in 0..n {
        let len = rng.random_range(1..=16u64) * PAGE;
        ranges.push((at, at + len - 1, rng.random::<u64>()));
        at += len;
        let gap = if big.contains(&i) {
            BIG_GAP_PAGES * PAGE
        } else {
            rng.random_range(0..=4u64) * PAGE
        };
        if gap > 0 {
            holes.push((at, at + gap - 1));
        }
        at += gap;
    }
    holes.push((at, at + 64 * PAGE - 1));
    Data { ranges, holes }
}

/// `get` as a BTreeMap user writes it.
fn btree_get(map: &BTreeMap<u64, (u64, u64)>, i: u64) -> Option<u64> {
    map.range(..=i)
        .next_back()
        .filter(|(_, &(last, _))| last >= i)
        .map(|(_, &(_, v))| v)
}

/// Lowest start of `size` free indices in `[start, u64::MAX]`, by walking
/// the map's entries from `start` (O(n)).
fn btree_find_gap(map: &BTreeMap<u64, (u64, u64)>, size: u64, start: u64) -> Option<u64> {
    let mut cur = start;
    if let Some((_, &(last, _))) = map.range(..=start).next_back() {
        if last >= start {
            cur = last.checked_add(1)?;
        }
    }
    for (&first, &(last, _)) in map.range(cur..) {
        if first - cur >= size {
            return Some(cur);
        }
        cur = last.checked_add(1)?;
    }
    (u64::MAX - cur >= size - 1).then_some(cur)
}

/// Per-query times of one size.
struct SizeRun {
    get: Medians,
    gap: Medians,
}

/// Verifies and times both cases on `n` ranges; returns the times and the
/// tree's height.
fn run_size(ctx: &Ctx, n: usize, rng: &mut SmallRng) -> Result<(SizeRun, usize), BenchError> {
    progress(NAME, &format!("{n} ranges: building"));
    let data = make_data(n, rng);
    let mut tree = RangeTree::new();
    let mut map = BTreeMap::new();
    for &(first, last, v) in &data.ranges {
        tree.insert_range(first, last, v)
            .map_err(|e| BenchError(format!("building the tree of {n} ranges: {e}")))?;
        map.insert(first, (last, v));
    }
    tree.validate()
        .map_err(|e| BenchError(format!("the tree of {n} ranges: {e}")))?;
    if tree.len() != n {
        return Err(BenchError(format!(
            "the tree holds {} ranges, not {n}",
            tree.len()
        )));
    }

    // ---- get ----
    let queries: Vec<u64> = (0..GET_QUERIES)
        .map(|_| {
            if rng.random_range(0..10) != 0 {
                let &(f, l, _) = &data.ranges[rng.random_range(0..n)];
                rng.random_range(f..=l)
            } else {
                let &(f, l) = &data.holes[rng.random_range(0..data.holes.len())];
                rng.random_range(f..=l)
            }
        })
        .collect();
    let want: Vec<Option<u64>> = queries.iter().map(|&i| btree_get(&map, i)).collect();
    let got: Vec<Option<u64>> = queries.iter().map(|&i| tree.get(i).copied()).collect();
    progress(NAME, &format!("{n} ranges: get"));
    let get = Comparison::lists(format!("get on {n} ranges"))
        .variant(
            "spacekit",
            got,
            batch(|| {
                let t = black_box(&tree);
                let mut acc = 0u64;
                for &i in &queries {
                    acc = acc.wrapping_add(t.get(i).copied().unwrap_or(1));
                }
                black_box(acc);
            }),
        )
        .variant(
            "btreemap",
            want,
            batch(|| {
                let m = black_box(&map);
                let mut acc = 0u64;
                for &i in &queries {
                    acc = acc.wrapping_add(btree_get(m, i).unwrap_or(1));
                }
                black_box(acc);
            }),
        )
        .run(&ctx.timer())?
        .per(GET_QUERIES as f64);

    // ---- find_gap ----
    let size = FIND_PAGES * PAGE;
    let (span_first, span_last) = (data.ranges[0].0, data.ranges[n - 1].1);
    let starts: Vec<u64> = (0..GAP_QUERIES)
        .map(|_| rng.random_range(span_first..=span_last))
        .collect();
    let want: Vec<Option<u64>> = starts
        .iter()
        .map(|&s| btree_find_gap(&map, size, s))
        .collect();
    let got = starts
        .iter()
        .map(|&s| tree.find_gap(size, s..=u64::MAX))
        .collect::<Result<Vec<Option<u64>>, _>>()
        .map_err(|e| BenchError(format!("find_gap on {n} ranges: {e}")))?;
    progress(NAME, &format!("{n} ranges: find_gap"));
    let gap = Comparison::lists(format!("find_gap on {n} ranges"))
        .variant(
            "spacekit",
            got,
            batch(|| {
                let t = black_box(&tree);
                let mut acc = 0u64;
                for &s in &starts {
                    acc ^= t.find_gap(size, s..=u64::MAX).ok().flatten().unwrap_or(1);
                }
                black_box(acc);
            }),
        )
        .variant(
            "btreemap",
            want,
            batch(|| {
                let m = black_box(&map);
                let mut acc = 0u64;
                for &s in &starts {
                    acc ^= btree_find_gap(m, size, s).unwrap_or(1);
                }
                black_box(acc);
            }),
        )
        .run(&ctx.timer())?
        .per(GAP_QUERIES as f64);
    let times = SizeRun { get, gap };
    Ok((times, tree.height()))
}

/// Runs `bench rangetree`.
pub fn run(ctx: &Ctx) -> Result<Report, BenchError> {
    let sizes: &[usize] = match ctx.mode {
        Mode::Quick => &[1 << 10, 1 << 16],
        _ => &[1 << 10, 1 << 16, 1 << 20],
    };
    let mut rng = SmallRng::seed_from_u64(ctx.seed ^ 0x7A6E_6E72);
    let mut report = Report::default();
    let mut bars = Bars::new(NAME);
    let mut table = Table::new(
        &format!(
            "range tree vs BTreeMap<first, (last, value)>, per query: get ({GET_QUERIES} addresses, \
             10% in gaps), find_gap ({GAP_QUERIES} window starts, {FIND_PAGES} pages, lowest fit)"
        ),
        &[
            "ranges",
            "height",
            "get spacekit",
            "get btreemap",
            "spk/btree",
            "find_gap spacekit",
            "find_gap btreemap",
            "btree/spk",
        ],
    );
    let mut results: Vec<(usize, SizeRun)> = Vec::new();
    for &n in sizes {
        let (r, height) = run_size(ctx, n, &mut rng)?;
        r.get.rows(&mut report, |v| {
            Row::new("get", v)
                .field("ranges", n)
                .field("queries", GET_QUERIES)
        });
        r.gap.rows(&mut report, |v| {
            Row::new("find_gap", v)
                .field("ranges", n)
                .field("queries", GAP_QUERIES)
                .field("size", FIND_PAGES * PAGE)
        });
        table.row(vec![
            n.to_string(),
            height.to_string(),
            r.get.cell("spacekit"),
            r.get.cell("btreemap"),
            format!("{:.2}x", r.get.ratio("spacekit", "btreemap")),
            r.gap.cell("spacekit"),
            r.gap.cell("btreemap"),
            r.gap.ratio_cell("btreemap", "spacekit"),
        ]);
        results.push((n, r));
    }
    report.table(table);
    for case in ["get", "find_gap"] {
        let chart = Chart::new(
            &format!("{case}: time per query vs ranges in the tree"),
            "ranges",
            "ns per query",
            XAxis::Log,
            true,
        )
        .from_rows(
            report.rows.iter().filter(|r| r.str("case") == Some(case)),
            "ranges",
            "median_ns",
        );
        report.chart(chart);
    }

    const MILLION: usize = 1 << 20;
    match results.iter().find(|(n, _)| *n == MILLION) {
        Some((_, r)) => bars.check(
            r.get.ratio("spacekit", "btreemap") <= 1.5,
            format!(
                "get at 1M ranges: spacekit {} vs btreemap {} = {:.2}x (bar: <= 1.5x)",
                r.get.cell("spacekit"),
                r.get.cell("btreemap"),
                r.get.ratio("spacekit", "btreemap")
            ),
        ),
        None => report.note("get at 1M ranges: not checked in --quick mode".into()),
    }
    for (i, (n1, r1)) in results.iter().enumerate() {
        for (n2, r2) in &results[i + 1..] {
            let grew = r2.gap.ns("spacekit") / r1.gap.ns("spacekit");
            let allowed = (*n2 as f64).log2() / (*n1 as f64).log2();
            bars.check(
                grew <= allowed,
                format!(
                    "find_gap {n1} -> {n2} ranges: time x{grew:.2} ({} -> {}), \
                     log2 n x{allowed:.2} (bar: time grows no faster than log n)",
                    r1.gap.cell("spacekit"),
                    r2.gap.cell("spacekit")
                ),
            );
        }
    }
    report.bars(bars);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_has_the_documented_shape() {
        let mut rng = SmallRng::seed_from_u64(1);
        let d = make_data(1000, &mut rng);
        assert_eq!(d.ranges.len(), 1000);
        let big = d
            .holes
            .iter()
            .filter(|(f, l)| l - f + 1 == BIG_GAP_PAGES * PAGE)
            .count();
        assert_eq!(big, BIG_GAPS);
        let touching = d.ranges.windows(2).filter(|w| w[0].1 + 1 == w[1].0).count();
        assert!(touching > 100, "{touching}");
        for w in d.ranges.windows(2) {
            assert!(w[0].1 < w[1].0);
        }
    }

    #[test]
    fn btree_find_gap_walks_to_the_first_fit() {
        let mut m = BTreeMap::new();
        m.insert(10, (19, 0));
        m.insert(20, (29, 0));
        m.insert(40, (49, 0));
        assert_eq!(btree_find_gap(&m, 5, 0), Some(0));
        assert_eq!(btree_find_gap(&m, 5, 8), Some(30));
        assert_eq!(btree_find_gap(&m, 10, 8), Some(30));
        assert_eq!(btree_find_gap(&m, 11, 8), Some(50));
        assert_eq!(btree_find_gap(&m, 5, 45), Some(50));
        assert_eq!(btree_find_gap(&m, 2, u64::MAX - 1), Some(u64::MAX - 1));
        assert_eq!(btree_find_gap(&m, 3, u64::MAX - 1), None);
        assert_eq!(btree_get(&m, 25), Some(0));
        assert_eq!(btree_get(&m, 35), None);
    }
}
