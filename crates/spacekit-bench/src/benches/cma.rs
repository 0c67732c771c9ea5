//! `bench cma`: seed 003's experiment. CMA allocates 16,384 contiguous pages
//! and frees them again, over and over; the seed replaced the page-by-page
//! free of the range (one `free_frozen_pages(page, 0)` per page, each with
//! its own buddy-merge walk) with a batched free in the largest aligned
//! chunks, and measured 1406 us -> 402 us per iteration.
//!
//! The zone is a [`BuddyAllocator`] of 1M pages (256K with `--quick`) at pfn
//! 0x100000, all handed over with `add_range`, then fragmented: blocks of
//! random order (0..=10, each order half as likely as the one below, so
//! every order contributes about the same number of pages) are taken at
//! random aligned places everywhere except a reserved window of 65,536
//! pages where the CMA ranges go, until a quarter of the zone is taken;
//! then a random half of them is freed again, so the free lists hold tens
//! of thousands of fragments of every order. Each case frees one range of
//! 16,384 pages (field `start`):
//!
//! * `aligned`: the range starts on a multiple of 16,384,
//! * `unaligned`: 7 pages further on (the chunks are small at both ends),
//! * `poisoned`: the aligned range with 3 pages marked poisoned while in
//!   use, which every variant must hold back (before each round the 3
//!   pages held back by the previous one are unpoisoned and given back
//!   with `free_contig_frozen_range(p, 1)`, outside the timing),
//! * `section`: a range that crosses a 32,768-page memory-section edge
//!   (starting 8,192 pages before it), which no batch may span.
//!
//! Each round first takes the range with `alloc_contig_range` (every page
//! then holds one reference, as CMA's pages do), untimed, then times the
//! free alone:
//!
//! * `before`: [`baselines::buddy::free_contig_range_page_by_page`], the
//!   pre-seed loop on the same allocator (one `free_pages(p, 0)` per page:
//!   reference drop, poison check, buddy merge). This is spacekit's own
//!   single-page fast path (its bar: 6 ns per page), so the
//!   batching's ratio over it is the honest one, not a ratio over a slow
//!   single-page free,
//! * `spacekit`: [`BuddyAllocator::free_contig_range`],
//! * `buddy_system_allocator` (`aligned` only): the crate's
//!   `FrameAllocator<11>` (max order 10, like ours) over the same zone with
//!   the same blocks taken and freed. It has no range free, so its user
//!   returns the pages one at a time: the range is taken as 16 blocks of
//!   1,024 pages with `alloc_at`, untimed, and freed with one `dealloc(p, 1)`
//!   per page, each with its own merge walk over the crate's `BTreeSet`
//!   free lists. It keeps no per-page state, so it does less per page than
//!   the other two: no reference count to drop and no poison to check (and
//!   nothing stops a double free).
//!
//! Every variant has its own allocator, all cloned (or, for the crate,
//! rebuilt) from one prepared zone, and the variants are sampled round-robin
//! (each round: setup, timed free, for each variant in turn); the figure is
//! the median over rounds. Before timing, one round of `before` and
//! `spacekit` from identical clones must give the same counts (pages freed,
//! poisoned pages held back) and the same free lists, equal to the zone's
//! free lists before the range was taken (for `poisoned`, once the held-back
//! pages are given back), and both allocators must pass `validate()`; for
//! the crate, the 16 blocks of 1,024 pages must be allocatable again after
//! its per-page frees (the pages merged back). Every timed free's counts
//! are checked, and so is every allocator's state after timing.
//!
//! JSON rows: `case` `free`, `variant`, `pages` (16384), `start`
//! (`aligned`, `unaligned`, `poisoned`, `section`), `zone_pages` and
//! `median_ns` (per free of the range).

use std::hint::black_box;
use std::time::Duration;

use buddy_system_allocator::FrameAllocator;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit::buddy::{BuddyAllocator, BuddyError, FreeSummary};
use spacekit::testing::Validate;

use crate::chart::{Chart, XAxis};
use crate::context::{BenchError, Ctx, Mode};
use crate::harness::{
    fmt_ratio, progress, verify, verify_lists, Bars, Op, Report, Row, Table, Timer,
};

const NAME: &str = "cma";
/// Pages per CMA allocation (the seed's 16,384: 64 MiB of 4 KiB pages).
const PAGES: u64 = 16384;
/// First pfn of the zone (4 GiB).
const BASE: u64 = 0x10_0000;
/// Pages per memory section (x86-64: 128 MiB), spacekit's default.
const SECTION: u64 = 32768;
/// Pages of the window kept clear of the fragmentation for the CMA ranges.
const WINDOW: u64 = 65536;
/// Largest order of both allocators (the kernel's `MAX_PAGE_ORDER`).
const MAX_ORDER: u32 = 10;
/// Pages of a largest block.
const MAX_BLOCK: u64 = 1 << MAX_ORDER;
/// Offsets in the range of the pages the `poisoned` case marks bad.
const POISON_OFFSETS: [u64; 3] = [5, 7777, 16000];

/// The crate's frame allocator with max order 10 (`ORDER` is max order + 1).
type Bsa = FrameAllocator<11>;

/// Where the range starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    Aligned,
    Unaligned,
    Poisoned,
    Section,
}

const CASES: [Case; 4] = [
    Case::Aligned,
    Case::Unaligned,
    Case::Poisoned,
    Case::Section,
];

impl Case {
    fn label(self) -> &'static str {
        match self {
            Case::Aligned => "aligned",
            Case::Unaligned => "unaligned",
            Case::Poisoned => "poisoned",
            Case::Section => "section",
        }
    }

    /// First page of the range, in the window starting at `w` (a multiple
    /// of the section size).
    fn start(self, w: u64) -> u64 {
        match self {
            Case::Aligned | Case::Poisoned => w,
            Case::Unaligned => w + 7,
            Case::Section => w + SECTION - 8192,
        }
    }

    /// Pages the case poisons.
    fn poisoned(self, start: u64) -> Vec<u64> {
        match self {
            Case::Poisoned => POISON_OFFSETS.iter().map(|o| start + o).collect(),
            _ => Vec::new(),
        }
    }

    /// What a free of the range must report.
    fn expected(self) -> FreeSummary {
        let poisoned = self.poisoned(0).len() as u64;
        FreeSummary {
            freed: PAGES - poisoned,
            still_referenced: 0,
            poisoned,
        }
    }
}

fn err(what: &str, e: BuddyError) -> BenchError {
    BenchError(format!("{what}: {e}"))
}

/// The prepared zone: the allocator, and the blocks taken to fragment it.
struct Zone {
    alloc: BuddyAllocator,
    /// Every block taken, in order, as `(pfn, order)`.
    taken: Vec<(u64, u32)>,
    /// The blocks given back again (a subset of `taken`), in order.
    given_back: Vec<(u64, u32)>,
    /// The blocks still held.
    held: Vec<(u64, u32)>,
    /// First page of the CMA window.
    window: u64,
}

/// Builds the fragmented zone of `pages` pages (see the module docs).
fn prepare(pages: u64, seed: u64) -> Result<Zone, BenchError> {
    let mut b = BuddyAllocator::new(BASE, pages).map_err(|e| err("the zone", e))?;
    b.add_range(BASE, pages)
        .map_err(|e| err("adding the zone", e))?;
    let window = BASE + pages / 4;
    let mut rng = SmallRng::seed_from_u64(seed ^ 0xC3A0);
    let (mut taken, mut used) = (Vec::new(), 0u64);
    let mut attempts = 0u64;
    while used < pages / 4 && attempts < 16 * pages {
        attempts += 1;
        // Order k with probability 2^-(k+1), orders above 10 folded into 10.
        let order = (rng.random::<u32>() | 1 << MAX_ORDER).trailing_zeros();
        let size = 1u64 << order;
        let pfn = BASE + rng.random_range(0..pages / size) * size;
        if pfn < window + WINDOW && pfn + size > window {
            continue;
        }
        if b.alloc_contig_range(pfn, pfn + size).is_ok() {
            taken.push((pfn, order));
            used += size;
        }
    }
    let (mut given_back, mut held) = (Vec::new(), Vec::new());
    for &(pfn, order) in &taken {
        if rng.random_bool(0.5) {
            b.free_contig_range(pfn, 1 << order)
                .map_err(|e| err("fragmenting the zone", e))?;
            given_back.push((pfn, order));
        } else {
            held.push((pfn, order));
        }
    }
    b.validate()
        .map_err(|e| BenchError(format!("the prepared zone: {e}")))?;
    Ok(Zone {
        alloc: b,
        taken,
        given_back,
        held,
        window,
    })
}

/// The crate's allocator over the same zone, with the same blocks taken and
/// given back; checked to have exactly the prepared zone's free pages.
fn prepare_bsa(zone: &Zone) -> Result<Bsa, BenchError> {
    let base = zone.alloc.base() as usize;
    let mut f = Bsa::new();
    f.add_frame(base, base + zone.alloc.pages() as usize);
    for &(pfn, order) in &zone.taken {
        if f.alloc_at(pfn as usize, 1 << order) != Some(pfn as usize) {
            return Err(BenchError(format!(
                "buddy_system_allocator: alloc_at({pfn:#x}, {}) failed while fragmenting",
                1u64 << order
            )));
        }
    }
    for &(pfn, order) in &zone.given_back {
        f.dealloc(pfn as usize, 1 << order);
    }
    // Same free pages as spacekit's zone: every free block of ours can be
    // taken from the crate's allocator (then given back), and no page of a
    // held block can.
    let free = zone.alloc.free_blocks();
    for &(pfn, order) in &free {
        if f.alloc_at(pfn as usize, 1 << order).is_none() {
            return Err(BenchError(format!(
                "buddy_system_allocator: the free block {pfn:#x} of order {order} is not free there"
            )));
        }
    }
    for &(pfn, order) in &free {
        f.dealloc(pfn as usize, 1 << order);
    }
    for &(pfn, _) in &zone.held {
        if f.alloc_at(pfn as usize, 1).is_some() {
            return Err(BenchError(format!(
                "buddy_system_allocator: the held page {pfn:#x} is free there"
            )));
        }
    }
    Ok(f)
}

/// One variant's allocator and the poisoned pages it holds back from its
/// previous round.
struct Instance {
    b: BuddyAllocator,
    held_back: Vec<u64>,
    /// What the last timed free returned, checked by the next setup.
    last: Option<Result<FreeSummary, BuddyError>>,
    /// The first error met in an untimed setup.
    failed: Option<BenchError>,
}

impl Instance {
    fn new(zone: &Zone) -> Instance {
        Instance {
            b: zone.alloc.clone(),
            held_back: Vec::new(),
            last: None,
            failed: None,
        }
    }

    /// Gives back the pages held back by the last free.
    fn release(&mut self) -> Result<(), BenchError> {
        for p in self.held_back.drain(..) {
            self.b
                .clear_poisoned(p)
                .map_err(|e| err("unpoisoning", e))?;
            self.b
                .free_contig_frozen_range(p, 1)
                .map_err(|e| err("giving back a held page", e))?;
        }
        Ok(())
    }

    /// The untimed part of a round: take the range (and poison its pages).
    fn setup(&mut self, case: Case, start: u64) -> Result<(), BenchError> {
        self.release()?;
        self.b
            .alloc_contig_range(start, start + PAGES)
            .map_err(|e| err(&format!("alloc_contig_range at {start:#x}"), e))?;
        for p in case.poisoned(start) {
            self.b.mark_poisoned(p).map_err(|e| err("poisoning", e))?;
            self.held_back.push(p);
        }
        Ok(())
    }

    /// The counts of the last timed free, if any, must be `want`.
    fn finish(&mut self, want: FreeSummary) -> Result<(), BenchError> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        match self.last.take() {
            None => Ok(()),
            Some(r) => verify(
                "the counts of a timed free",
                &[("expected", Ok(want)), ("timed", r)],
            ),
        }
    }

    /// A round's untimed setup: checks the previous free, then takes the
    /// range again. Errors are kept for [`Instance::finish`].
    fn prepare_round(&mut self, case: Case, start: u64, want: FreeSummary) {
        if self.failed.is_some() {
            return;
        }
        if let Err(e) = self.finish(want).and_then(|()| self.setup(case, start)) {
            self.failed = Some(e);
        }
    }

    /// Checks the state after a free: validate(), the held-back pages, and
    /// (once they are given back) the prepared free lists.
    fn check(&mut self, variant: &str, pristine: &[(u64, u32)]) -> Result<(), BenchError> {
        let what = |s: &str| format!("{variant}: {s}");
        self.b
            .validate()
            .map_err(|e| BenchError(what(&format!("validate: {e}"))))?;
        for &p in &self.held_back {
            let s = self.b.page(p).map_err(|e| err(&what("page"), e))?;
            if s.free || !s.poisoned || s.refcount != 0 {
                return Err(BenchError(what(&format!(
                    "poisoned page {p:#x} not held back: {s:?}"
                ))));
            }
        }
        self.release()?;
        verify_lists(
            &what("the free blocks after the range went back"),
            &[
                ("prepared zone", pristine.to_vec()),
                (variant, self.b.free_blocks()),
            ],
        )
    }
}

/// The crate's untimed setup: the range as 16 blocks of 1,024 pages.
fn bsa_take(f: &mut Bsa, start: u64) -> Result<(), BenchError> {
    for k in 0..PAGES / MAX_BLOCK {
        let p = (start + k * MAX_BLOCK) as usize;
        if f.alloc_at(p, MAX_BLOCK as usize) != Some(p) {
            return Err(BenchError(format!(
                "buddy_system_allocator: alloc_at({p:#x}, {MAX_BLOCK}) failed"
            )));
        }
    }
    Ok(())
}

/// The crate's timed free: one `dealloc(p, 1)` per page.
fn bsa_free(f: &mut Bsa, start: u64) {
    for p in start..start + PAGES {
        f.dealloc(p as usize, 1);
    }
}

/// Checks that the crate's per-page frees merged the range back: its 16
/// blocks of 1,024 pages can be taken again (and are given back).
fn bsa_check(f: &mut Bsa, start: u64) -> Result<(), BenchError> {
    bsa_take(f, start)
        .map_err(|e| BenchError(format!("{e} after the per-page frees: they did not merge")))?;
    for k in 0..PAGES / MAX_BLOCK {
        f.dealloc((start + k * MAX_BLOCK) as usize, MAX_BLOCK as usize);
    }
    Ok(())
}

/// The timer of a case: rounds per case, and a time budget per variant
/// after which sampling stops (keeping at least 3 rounds). Each round times
/// one free per variant (a setup runs before each).
fn timer(mode: Mode) -> Timer {
    let (samples, budget) = match mode {
        Mode::Quick => (5, Duration::from_millis(100)),
        Mode::Default => (51, Duration::from_secs(3)),
        Mode::Full => (301, Duration::from_secs(20)),
    };
    Timer {
        sample: Duration::ZERO,
        samples,
        budget,
    }
}

/// Median nanoseconds per free of `case`'s range for each variant:
/// `before`, `spacekit`, then (if given) the crate's.
fn time_case(
    ctx: &Ctx,
    zone: &Zone,
    case: Case,
    mut bsa: Option<&mut Bsa>,
) -> Result<Vec<f64>, BenchError> {
    let start = case.start(zone.window);
    let want = case.expected();
    let pristine = zone.alloc.free_blocks();

    // Correctness first: one round of each from identical clones.
    let mut before = Instance::new(zone);
    let mut spk = Instance::new(zone);
    before.setup(case, start)?;
    spk.setup(case, start)?;
    let s_before = baselines::buddy::free_contig_range_page_by_page(&mut before.b, start, PAGES)
        .map_err(|e| err("before", e))?;
    let s_spk = spk
        .b
        .free_contig_range(start, PAGES)
        .map_err(|e| err("spacekit", e))?;
    let label = case.label();
    verify(
        &format!("the counts of the {label} free (freed, still referenced, poisoned)"),
        &[
            ("expected", want),
            ("before", s_before),
            ("spacekit", s_spk),
        ],
    )?;
    verify_lists(
        &format!("the free blocks after the {label} free"),
        &[
            ("before", before.b.free_blocks()),
            ("spacekit", spk.b.free_blocks()),
        ],
    )?;
    verify(
        &format!("the free page count after the {label} free"),
        &[
            ("expected", zone.alloc.free_page_count() - want.poisoned),
            ("before", before.b.free_page_count()),
            ("spacekit", spk.b.free_page_count()),
        ],
    )?;
    before.check("before", &pristine)?;
    spk.check("spacekit", &pristine)?;
    if let Some(f) = bsa.as_deref_mut() {
        bsa_take(f, start)?;
        bsa_free(f, start);
        bsa_check(f, start)?;
    }

    // Round-robin: each round sets up (untimed) and frees the range once
    // per variant. A setup also checks the counts of the previous timed
    // free, and keeps the first error to report after timing.
    let timer = timer(ctx.mode);
    let mut bsa_failed = None;
    let mut ops = vec![
        Op::with_setup(
            &mut before,
            |i| i.prepare_round(case, start, want),
            |i| {
                i.last = Some(baselines::buddy::free_contig_range_page_by_page(
                    black_box(&mut i.b),
                    black_box(start),
                    PAGES,
                ))
            },
        ),
        Op::with_setup(
            &mut spk,
            |i| i.prepare_round(case, start, want),
            |i| i.last = Some(black_box(&mut i.b).free_contig_range(black_box(start), PAGES)),
        ),
    ];
    if let Some(f) = bsa.as_deref_mut() {
        ops.push(Op::with_setup(
            (f, &mut bsa_failed),
            move |(f, failed)| {
                if let Err(e) = bsa_take(f, start) {
                    failed.get_or_insert(e);
                }
            },
            move |(f, _)| bsa_free(black_box(f), black_box(start)),
        ));
    }
    let ns = timer.medians(&mut ops);
    drop(ops);
    // The timed frees reported the right counts and left every allocator
    // as verified.
    for (name, inst) in [("before", &mut before), ("spacekit", &mut spk)] {
        inst.finish(want)?;
        inst.check(&format!("{name} (after timing)"), &pristine)?;
    }
    if let Some(e) = bsa_failed {
        return Err(e);
    }
    if let Some(f) = bsa {
        bsa_check(f, start)?;
    }
    Ok(ns)
}

/// Microseconds with one decimal.
fn fmt_us(ns: f64) -> String {
    format!("{:.1}", ns / 1e3)
}

/// Runs `bench cma`.
pub fn run(ctx: &Ctx) -> Result<Report, BenchError> {
    let zone_pages: u64 = match ctx.mode {
        Mode::Quick => 1 << 18,
        _ => 1 << 20,
    };
    progress(
        NAME,
        &format!("zone of {zone_pages} pages: fragmenting a quarter of it"),
    );
    let zone = prepare(zone_pages, ctx.seed)?;
    let orders = zone.alloc.free_blocks_per_order();
    progress(
        NAME,
        &format!(
            "{} blocks taken, {} given back; {} pages free in {} blocks (per order {orders:?})",
            zone.taken.len(),
            zone.given_back.len(),
            zone.alloc.free_page_count(),
            orders.iter().sum::<u64>()
        ),
    );
    let mut bsa = prepare_bsa(&zone)?;

    let mut report = Report::default();
    let mut bars = Bars::new(NAME);
    let mut table = Table::new(
        &format!(
            "seed 003: CMA free of {PAGES} contiguous pages (alloc_contig_range untimed, the free \
             timed), zone of {zone_pages} pages with {} blocks held; median us per free",
            zone.held.len()
        ),
        &[
            "start",
            "before",
            "spacekit",
            "bsa",
            "before/spk",
            "bsa/spk",
            "spk ns/page",
        ],
    );
    let mut at_bar = None;
    for case in CASES {
        let label = case.label();
        progress(
            NAME,
            &format!("{label}: pages {:#x}..+{PAGES}", case.start(zone.window)),
        );
        let with_bsa = case == Case::Aligned;
        let ns = time_case(ctx, &zone, case, with_bsa.then_some(&mut bsa))?;
        let variants = ["before", "spacekit", "buddy_system_allocator"];
        for (variant, &t) in variants.iter().zip(&ns) {
            report.push(
                Row::new("free", variant)
                    .field("pages", PAGES)
                    .field("start", label)
                    .field("zone_pages", zone_pages)
                    .field("median_ns", t),
            );
        }
        let bsa_ns = ns.get(2).copied();
        table.row(vec![
            label.into(),
            fmt_us(ns[0]),
            fmt_us(ns[1]),
            bsa_ns.map_or("-".into(), fmt_us),
            fmt_ratio(ns[0], ns[1]),
            bsa_ns.map_or("-".into(), |b| fmt_ratio(b, ns[1])),
            format!("{:.2}", ns[1] / PAGES as f64),
        ]);
        if with_bsa {
            at_bar = Some(ns);
        }
    }
    report.table(table);
    let chart = Chart::new(
        &format!("cma: time to free {PAGES} contiguous pages, by where the range starts"),
        "start of the range",
        "ns per free (log)",
        XAxis::Categories(CASES.iter().map(|c| c.label().to_string()).collect()),
        true,
    )
    .from_rows(&report.rows, "start", "median_ns");
    report.chart(chart);

    if let Some(ns) = at_bar {
        let (before, spk, bsa) = (ns[0], ns[1], ns[2]);
        bars.check(
            before / spk >= 20.0,
            format!(
                "aligned: spacekit {} us vs before {} us = {:.1}x faster (bar: >= 20x; the seed: 3.5x)",
                fmt_us(spk),
                fmt_us(before),
                before / spk
            ),
        );
        let per_page = |ns: f64| ns / PAGES as f64;
        bars.check(
            per_page(before) <= 6.0,
            format!(
                "aligned: single-page free (before: {PAGES} x free_pages(p, 0)) {:.2} ns per page \
                 (bar: <= 6 ns per page; a minimal intrusive-list buddy: ~4)",
                per_page(before)
            ),
        );
        bars.check(
            per_page(spk) <= 0.5,
            format!(
                "aligned: batched free (spacekit) {:.3} ns per page (bar: <= 0.5 ns per page)",
                per_page(spk)
            ),
        );
        bars.check(
            bsa / spk >= 10.0,
            format!(
                "aligned: spacekit {} us vs buddy_system_allocator {} us = {:.1}x faster (bar: >= 10x)",
                fmt_us(spk),
                fmt_us(bsa),
                bsa / spk
            ),
        );
    }
    report.bars(bars);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_ranges_sit_in_the_window() {
        let w = BASE + (1 << 18);
        assert_eq!(Case::Aligned.start(w) % PAGES, 0);
        assert_eq!(Case::Unaligned.start(w) % PAGES, 7);
        let s = Case::Section.start(w);
        let edge = (s / SECTION + 1) * SECTION;
        assert!(s < edge && edge < s + PAGES);
        for c in CASES {
            assert!(c.start(w) >= w && c.start(w) + PAGES <= w + WINDOW);
        }
        assert_eq!(Case::Poisoned.expected().poisoned, 3);
        assert_eq!(Case::Aligned.expected().freed, PAGES);
    }

    #[test]
    fn a_small_zone_is_fragmented_alike_in_both_allocators() {
        let zone = prepare(1 << 17, 7).unwrap();
        assert!(zone.held.len() > 1000, "{}", zone.held.len());
        assert!(zone.alloc.free_blocks().len() > 1000);
        let w = zone.window;
        assert!(zone
            .held
            .iter()
            .all(|&(p, o)| p + (1 << o) <= w || p >= w + WINDOW));
        let mut f = prepare_bsa(&zone).unwrap();
        bsa_take(&mut f, w).unwrap();
        bsa_free(&mut f, w);
        bsa_check(&mut f, w).unwrap();
    }
}
