//! `bench buddy`: single-page allocation and free, the buddy allocator's
//! everyday path, spacekit's [`BuddyAllocator`] against
//! `buddy_system_allocator`'s `FrameAllocator<11>` (max order 10, like
//! ours) over the same zone.
//!
//! The zone is 1M pages (64K with `--quick`) at pfn 0x100000; a window of
//! 16,384 pages (4,096) starts a quarter of the way in. Each case times one
//! pass over the window, one call per page, and reports nanoseconds per
//! page:
//!
//! * `free`, `ascending`: the window's pages are allocated (untimed: our
//!   `alloc_contig_range`, each page then holding one reference; the
//!   crate's `alloc_at` of 1,024-page blocks, as its users free pages one
//!   at a time anyway) and freed one page at a time in ascending order:
//!   `free_pages(p, 0)` / `dealloc(p, 1)`, each with its merge walk;
//! * `free`, `random`: the same, in a random order of the pages;
//! * `alloc`, `ascending`: the zone is all free (max-order blocks); one
//!   `alloc_pages(0)` / `alloc(1)` per page of the window's size, so the
//!   pages come out in ascending order, splitting each max-order block;
//! * `alloc`, `random`: every page of the zone is taken except a random
//!   half of the window's pages, freed one at a time (untimed), so the free
//!   memory is scattered pages and small blocks; the timed pass allocates
//!   all of them.
//!
//! Both allocators hand out the lowest block of the smallest order that
//! fits, split in address order, so before timing one pass of each from
//! identical states must give the same pages in the same order (alloc), or
//! leave the window merged back into the same max-order blocks with every
//! page freed (free: ours by `free_blocks()`, the crate's by taking each
//! block of 1,024 pages again). Each round's untimed setup puts the state
//! back (frees what the timed pass allocated, or takes the window again)
//! and checks what the previous pass did; after timing every allocator is
//! checked again (ours with `validate()`).
//!
//! JSON rows: `case` (`alloc`, `free`), `order` (`ascending`, `random`),
//! `pages` (calls per pass), `zone_pages`, `variant` (`spacekit`,
//! `buddy_system_allocator`) and `median_ns` (per page).

use std::hint::black_box;
use std::time::Duration;

use buddy_system_allocator::FrameAllocator;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use spacekit::buddy::{BuddyAllocator, BuddyError};
use spacekit::testing::Validate;

use crate::chart::{Chart, XAxis};
use crate::context::{BenchError, Ctx, Mode};
use crate::harness::{fmt_ratio, progress, Bars, Comparison, Op, Report, Row, Table, Timer};

const NAME: &str = "buddy";
/// First pfn of the zone (4 GiB).
const BASE: u64 = 0x10_0000;
/// Largest order of both allocators (the kernel's `MAX_PAGE_ORDER`).
const MAX_ORDER: u32 = 10;
/// Pages of a largest block.
const MAX_BLOCK: u64 = 1 << MAX_ORDER;
/// The crate's frame allocator with max order 10 (`ORDER` is max order + 1).
type Bsa = FrameAllocator<11>;
/// The variants, in table order.
const SPK: &str = "spacekit";
const BSA: &str = "buddy_system_allocator";

/// What a pass does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    Alloc,
    Free,
}

/// The order of the pages (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Order {
    Ascending,
    Random,
}

const CASES: [(Case, Order); 4] = [
    (Case::Free, Order::Ascending),
    (Case::Free, Order::Random),
    (Case::Alloc, Order::Ascending),
    (Case::Alloc, Order::Random),
];

impl Case {
    fn label(self) -> &'static str {
        match self {
            Case::Alloc => "alloc",
            Case::Free => "free",
        }
    }
}

impl Order {
    fn label(self) -> &'static str {
        match self {
            Order::Ascending => "ascending",
            Order::Random => "random",
        }
    }
}

fn err(what: &str, e: BuddyError) -> BenchError {
    BenchError(format!("{what}: {e}"))
}

/// The zone and its window.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    zone: u64,
    window: u64,
    pages: u64,
}

impl Geometry {
    fn new(mode: Mode) -> Geometry {
        let (zone, pages) = match mode {
            Mode::Quick => (1 << 16, 4096),
            _ => (1 << 20, 16384),
        };
        Geometry {
            zone,
            window: BASE + zone / 4,
            pages,
        }
    }

    fn end(&self) -> u64 {
        BASE + self.zone
    }

    /// The window's max-order blocks, as `free_blocks()` lists them once the
    /// window is merged back.
    fn window_blocks(&self) -> Vec<(u64, u32)> {
        (0..self.pages / MAX_BLOCK)
            .map(|k| (self.window + k * MAX_BLOCK, MAX_ORDER))
            .collect()
    }
}

/// The zone all free, in both allocators.
fn fresh(g: Geometry) -> Result<(BuddyAllocator, Bsa), BenchError> {
    let mut b = BuddyAllocator::new(BASE, g.zone).map_err(|e| err("the zone", e))?;
    b.add_range(BASE, g.zone)
        .map_err(|e| err("adding the zone", e))?;
    let mut f = Bsa::new();
    f.add_frame(BASE as usize, g.end() as usize);
    Ok((b, f))
}

/// Takes `[start, start + n)` (a multiple of the max block, aligned) from
/// the crate's allocator as max-order blocks.
fn bsa_take(f: &mut Bsa, start: u64, n: u64) -> Result<(), BenchError> {
    for k in 0..n / MAX_BLOCK {
        let p = (start + k * MAX_BLOCK) as usize;
        if f.alloc_at(p, MAX_BLOCK as usize) != Some(p) {
            return Err(BenchError(format!(
                "{BSA}: alloc_at({p:#x}, {MAX_BLOCK}) failed"
            )));
        }
    }
    Ok(())
}

/// The window's max-order blocks the crate holds free: each block that
/// can be taken (and is given back at once).
fn bsa_window_blocks(f: &mut Bsa, g: Geometry) -> Vec<(u64, u32)> {
    let mut v = Vec::new();
    for (p, o) in g.window_blocks() {
        if f.alloc_at(p as usize, MAX_BLOCK as usize).is_some() {
            f.dealloc(p as usize, MAX_BLOCK as usize);
            v.push((p, o));
        }
    }
    v
}

/// Our window's free blocks.
fn spk_window_blocks(b: &BuddyAllocator, g: Geometry) -> Vec<(u64, u32)> {
    b.free_blocks()
        .into_iter()
        .filter(|&(p, _)| p >= g.window && p < g.window + g.pages)
        .collect()
}

/// One variant's state across rounds: the allocator, what the last timed
/// pass gave, and the first problem an untimed setup found.
struct State<A> {
    a: A,
    /// Pages the last alloc pass took, in order.
    got: Vec<u64>,
    /// Frees of the last free pass that did not free the page.
    refused: u64,
    failed: Option<BenchError>,
}

impl<A> State<A> {
    fn new(a: A, pages: u64) -> State<A> {
        State {
            a,
            got: Vec::with_capacity(pages as usize),
            refused: 0,
            failed: None,
        }
    }

    /// Keeps the first error of an untimed setup (reported after timing).
    fn keep(&mut self, r: Result<(), BenchError>) {
        if let Err(e) = r {
            self.failed.get_or_insert(e);
        }
    }

    fn finish(&mut self, variant: &str) -> Result<(), BenchError> {
        if let Some(e) = self.failed.take() {
            return Err(BenchError(format!("{variant}: {e}")));
        }
        if self.refused != 0 {
            return Err(BenchError(format!(
                "{variant}: {} timed frees did not free their page",
                self.refused
            )));
        }
        Ok(())
    }
}

/// The timer: rounds per case and a time budget per variant after which
/// sampling stops (keeping at least 3 rounds); one pass per round.
fn timer(mode: Mode) -> Timer {
    let (samples, budget) = match mode {
        Mode::Quick => (5, Duration::from_millis(40)),
        Mode::Default => (31, Duration::from_millis(1500)),
        Mode::Full => (101, Duration::from_secs(5)),
    };
    Timer {
        sample: Duration::ZERO,
        samples,
        budget,
    }
}

// ---- free ----

/// One `free_pages(p, 0)` per page of `list` (read from memory, so nothing
/// is known of the pages in advance); returns how many were not freed.
fn spk_free_pass(b: &mut BuddyAllocator, list: &[u64]) -> u64 {
    let mut refused = 0;
    for &p in black_box(list) {
        if !matches!(b.free_pages(p, 0), Ok(true)) {
            refused += 1;
        }
    }
    refused
}

/// One `dealloc(p, 1)` per page of `list`.
fn bsa_free_pass(f: &mut Bsa, list: &[u64]) {
    for &p in black_box(list) {
        f.dealloc(p as usize, 1);
    }
}

/// Verifies and times a free pass over the window in `order`.
fn free_case(ctx: &Ctx, g: Geometry, list: &[u64]) -> Result<Vec<f64>, BenchError> {
    let (zone, bsa_zone) = fresh(g)?;
    let take_spk = |b: &mut BuddyAllocator| {
        b.alloc_contig_range(g.window, g.window + g.pages)
            .map_err(|e| err("alloc_contig_range of the window", e))
    };
    // One pass of each from the same state: every page freed, the window
    // merged back into its max-order blocks, the free page count restored.
    let mut b = zone.clone();
    take_spk(&mut b)?;
    let refused = spk_free_pass(&mut b, list);
    b.validate()
        .map_err(|e| BenchError(format!("{SPK} after a free pass: {e}")))?;
    if refused != 0 || b.free_page_count() != g.zone {
        return Err(BenchError(format!(
            "{SPK}: a free pass refused {refused} pages and left {} of {} pages free",
            b.free_page_count(),
            g.zone
        )));
    }
    let spk_answer = spk_window_blocks(&b, g);
    let mut f = Bsa::new();
    f.add_frame(BASE as usize, g.end() as usize);
    bsa_take(&mut f, g.window, g.pages)?;
    bsa_free_pass(&mut f, list);
    let bsa_answer = bsa_window_blocks(&mut f, g);

    let mut spk = State::new(zone, g.pages);
    let mut bsa = State::new(bsa_zone, g.pages);
    let m = Comparison::lists(format!(
        "the window's free blocks after a free pass of {} pages",
        g.pages
    ))
    .expect(g.window_blocks())
    .variant(
        SPK,
        spk_answer,
        Op::with_setup(
            &mut spk,
            |s| {
                let r = take_spk(&mut s.a);
                s.keep(r);
            },
            |s| s.refused += spk_free_pass(black_box(&mut s.a), list),
        ),
    )
    .variant(
        BSA,
        bsa_answer,
        Op::with_setup(
            &mut bsa,
            |s| {
                let r = bsa_take(&mut s.a, g.window, g.pages);
                s.keep(r);
            },
            |s| bsa_free_pass(black_box(&mut s.a), list),
        ),
    )
    .run(&timer(ctx.mode))?
    .per(g.pages as f64);
    // After timing: the last pass freed everything and merged it back.
    spk.finish(SPK)?;
    bsa.finish(BSA)?;
    spk.a
        .validate()
        .map_err(|e| BenchError(format!("{SPK} after timing: {e}")))?;
    let after = (
        spk.a.free_page_count(),
        spk_window_blocks(&spk.a, g),
        bsa_window_blocks(&mut bsa.a, g),
    );
    crate::harness::verify(
        "the state after the timed free passes",
        &[
            ("expected", (g.zone, g.window_blocks(), g.window_blocks())),
            ("timed", after),
        ],
    )?;
    Ok(m.names().iter().map(|v| m.ns(v)).collect())
}

// ---- alloc ----

fn spk_alloc_pass(b: &mut BuddyAllocator, n: u64, got: &mut Vec<u64>) {
    for _ in 0..n {
        match black_box(&mut *b).alloc_pages(0) {
            Ok(p) => got.push(p),
            Err(_) => break,
        }
    }
}

fn bsa_alloc_pass(f: &mut Bsa, n: u64, got: &mut Vec<u64>) {
    for _ in 0..n {
        match black_box(&mut *f).alloc(1) {
            Some(p) => got.push(p as u64),
            None => break,
        }
    }
}

/// Gives back what an alloc pass took (untimed), after checking it.
fn spk_give_back(s: &mut State<BuddyAllocator>, want: &[u64]) -> Result<(), BenchError> {
    if !s.got.is_empty() && s.got != want {
        return Err(BenchError("a timed alloc pass gave other pages".into()));
    }
    for &p in &s.got {
        if s.a.free_pages(p, 0) != Ok(true) {
            return Err(BenchError(format!("giving back page {p:#x}")));
        }
    }
    s.got.clear();
    Ok(())
}

fn bsa_give_back(s: &mut State<Bsa>, want: &[u64]) -> Result<(), BenchError> {
    if !s.got.is_empty() && s.got != want {
        return Err(BenchError("a timed alloc pass gave other pages".into()));
    }
    for &p in &s.got {
        s.a.dealloc(p as usize, 1);
    }
    s.got.clear();
    Ok(())
}

/// The states an alloc pass starts from: the zone all free (`ascending`),
/// or all taken but a random half of the window's pages (`random`); and
/// how many pages a pass allocates.
fn alloc_start(
    g: Geometry,
    order: Order,
    rng: &mut SmallRng,
) -> Result<(BuddyAllocator, Bsa, u64), BenchError> {
    let (mut b, mut f) = fresh(g)?;
    if order == Order::Ascending {
        return Ok((b, f, g.pages));
    }
    b.alloc_contig_range(BASE, g.end())
        .map_err(|e| err("taking the zone", e))?;
    bsa_take(&mut f, BASE, g.zone)?;
    let mut pages: Vec<u64> = (g.window..g.window + g.pages).collect();
    pages.shuffle(rng);
    pages.truncate(pages.len() / 2);
    for &p in &pages {
        if b.free_pages(p, 0) != Ok(true) {
            return Err(BenchError(format!("{SPK}: freeing page {p:#x}")));
        }
        f.dealloc(p as usize, 1);
    }
    Ok((b, f, pages.len() as u64))
}

/// Verifies and times an alloc pass.
fn alloc_case(
    ctx: &Ctx,
    g: Geometry,
    order: Order,
    rng: &mut SmallRng,
) -> Result<(Vec<f64>, u64), BenchError> {
    let same = rng.clone();
    let (zone, bsa_zone, n) = alloc_start(g, order, rng)?;
    // One pass of each from the same state: the same pages in the same
    // order, and (random) every free page taken.
    let mut b = zone.clone();
    let mut spk_got = Vec::new();
    spk_alloc_pass(&mut b, n, &mut spk_got);
    b.validate()
        .map_err(|e| BenchError(format!("{SPK} after an alloc pass: {e}")))?;
    // The crate's allocator cannot be cloned: build the same state again.
    let (_, mut f, _) = alloc_start(g, order, &mut same.clone())?;
    let mut bsa_got = Vec::new();
    bsa_alloc_pass(&mut f, n, &mut bsa_got);
    if spk_got.len() as u64 != n {
        return Err(BenchError(format!(
            "{SPK}: {} of {n} allocations succeeded",
            spk_got.len()
        )));
    }
    if order == Order::Random && (b.free_page_count() != 0 || f.alloc(1).is_some()) {
        return Err(BenchError(
            "an alloc pass over the random half left free pages".into(),
        ));
    }
    let want = spk_got.clone();

    let mut spk = State::new(zone, n);
    let mut bsa = State::new(bsa_zone, n);
    let m = Comparison::lists(format!(
        "the pages of {n} single-page allocations ({})",
        order.label()
    ))
    .variant(
        SPK,
        spk_got,
        Op::with_setup(
            &mut spk,
            |s| {
                let r = spk_give_back(s, &want);
                s.keep(r);
            },
            |s| spk_alloc_pass(&mut s.a, n, &mut s.got),
        ),
    )
    .variant(
        BSA,
        bsa_got,
        Op::with_setup(
            &mut bsa,
            |s| {
                let r = bsa_give_back(s, &want);
                s.keep(r);
            },
            |s| bsa_alloc_pass(&mut s.a, n, &mut s.got),
        ),
    )
    .run(&timer(ctx.mode))?
    .per(n as f64);
    let r = spk_give_back(&mut spk, &want);
    spk.keep(r);
    let r = bsa_give_back(&mut bsa, &want);
    bsa.keep(r);
    spk.finish(SPK)?;
    bsa.finish(BSA)?;
    spk.a
        .validate()
        .map_err(|e| BenchError(format!("{SPK} after timing: {e}")))?;
    Ok((m.names().iter().map(|v| m.ns(v)).collect(), n))
}

/// Runs `bench buddy`.
pub fn run(ctx: &Ctx) -> Result<Report, BenchError> {
    let g = Geometry::new(ctx.mode);
    let mut rng = SmallRng::seed_from_u64(ctx.seed ^ 0x0B0D_D1E5);
    let mut report = Report::default();
    let bars = Bars::new(NAME);
    let mut table = Table::new(
        &format!(
            "single-page alloc and free, one call per page over a window of {} pages in a zone \
             of {} pages; median ns per page",
            g.pages, g.zone
        ),
        &["case", "order", "pages", SPK, "bsa", "bsa/spk"],
    );
    let labels: Vec<String> = CASES
        .iter()
        .map(|(c, o)| format!("{} {}", c.label(), o.label()))
        .collect();
    let mut chart = Chart::new(
        "buddy: single-page alloc and free, ns per page",
        "case and order of the pages",
        "ns per page (log)",
        XAxis::Categories(labels),
        true,
    );
    for (x, &(case, order)) in CASES.iter().enumerate() {
        progress(NAME, &format!("{} {}", case.label(), order.label()));
        let (ns, n) = match case {
            Case::Free => {
                let mut list: Vec<u64> = (g.window..g.window + g.pages).collect();
                if order == Order::Random {
                    list.shuffle(&mut rng);
                }
                (free_case(ctx, g, &list)?, g.pages)
            }
            Case::Alloc => alloc_case(ctx, g, order, &mut rng)?,
        };
        for (variant, &t) in [SPK, BSA].iter().zip(&ns) {
            report.push(
                Row::new(case.label(), variant)
                    .field("order", order.label())
                    .field("pages", n)
                    .field("zone_pages", g.zone)
                    .field("median_ns", t),
            );
            chart.point(variant, x as f64, t);
        }
        table.row(vec![
            case.label().into(),
            order.label().into(),
            n.to_string(),
            format!("{:.2}", ns[0]),
            format!("{:.2}", ns[1]),
            fmt_ratio(ns[1], ns[0]),
        ]);
    }
    report.table(table);
    report.chart(chart);
    report.bars(bars);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_allocators_agree_on_small_passes() {
        let g = Geometry {
            zone: 1 << 14,
            window: BASE + (1 << 12),
            pages: 2048,
        };
        let mut rng = SmallRng::seed_from_u64(3);
        let (mut b, mut f, n) = alloc_start(g, Order::Random, &mut rng).unwrap();
        assert_eq!(n, 1024);
        let (mut x, mut y) = (Vec::new(), Vec::new());
        spk_alloc_pass(&mut b, n, &mut x);
        bsa_alloc_pass(&mut f, n, &mut y);
        assert_eq!(x, y);
        assert!(x.iter().all(|&p| p >= g.window && p < g.window + g.pages));
        let mut list: Vec<u64> = (g.window..g.window + g.pages).collect();
        list.shuffle(&mut rng);
        let (mut b, mut f) = fresh(g).unwrap();
        b.alloc_contig_range(g.window, g.window + g.pages).unwrap();
        bsa_take(&mut f, g.window, g.pages).unwrap();
        assert_eq!(bsa_window_blocks(&mut f, g), vec![]);
        assert_eq!(spk_free_pass(&mut b, &list), 0);
        bsa_free_pass(&mut f, &list);
        assert_eq!(spk_window_blocks(&b, g), g.window_blocks());
        assert_eq!(bsa_window_blocks(&mut f, g), g.window_blocks());
    }
}
