//! `bench alloc`: address-range allocation in steady state, spacekit's
//! [`RangeTree`] against rust-vmm's `vm-allocator` [`AddressAllocator`] (the
//! allocator Firecracker and Cloud Hypervisor hand MMIO and PIO ranges
//! out of).
//!
//! An address space at 4 GiB holds `live` allocations (1K, 64K and 1M;
//! `--quick`: 1K and 64K) of mixed sizes and alignments, 4 KiB pages:
//!
//! * half are 1..=16 pages aligned to 4 KiB,
//! * 30% are 2^k pages, k in 0..=6, aligned to their size (PCI BARs),
//! * 20% are 1..=64 pages aligned to 64 KiB,
//!
//! laid out from the bottom with 0..=8 free pages before each (plus what
//! its alignment skips), and 1/8 of their span free at the top. One
//! operation, the figure reported, frees a random live allocation and
//! allocates a new random one with the policy of the row: `first` (lowest
//! fit) or `last` (highest fit). Before anything is timed the space is
//! churned with spacekit alone (2 x `live` operations up to 64K; at 1M,
//! `live / 4`, or `live` with `--full`), so both allocators start from a
//! fragmented steady state, not from the tidy layout; `vm-allocator` is then built with one `ExactMatch` allocation per
//! live range (O(log n) each; its `FirstMatch` would make the build
//! quadratic).
//!
//! How each is used, as its documentation says:
//!
//! * `vm-allocator`: `AddressAllocator::new(base, size)`,
//!   `allocate(size, align, AllocPolicy::FirstMatch | LastMatch)` and
//!   `free(&range)` with the range `allocate` returned. Its first match walks
//!   the tree's nodes (allocated and free) in address order until a free one
//!   holds the aligned request: O(n) once the low addresses are packed.
//! * spacekit: `find_gap_aligned` / `find_gap_rev_aligned` (the aligned forms
//!   of `alloc_range` / `alloc_range_rev`, which take no alignment) then
//!   `insert_range` to take the gap found; `erase(start)` to free. The gap
//!   search descends by each subtree's largest gap: O(log n).
//!
//! Both answer the same question: `FirstMatch` takes the lowest free node
//! that holds an aligned fit, at its first aligned address; with maximal
//! free nodes (`free` merges neighbours) that is the lowest aligned address
//! `s` with `[s, s + size)` free, spacekit's `find_gap_aligned`; `LastMatch`
//! likewise gives the highest, `find_gap_rev_aligned`. Alignment is on
//! absolute addresses in both. Before timing, a run of operations (256, or
//! 16 at 1M) must give the same addresses from both, from identical states;
//! the timed operations then continue the same random stream, and after
//! timing both allocators' frees must all have succeeded and the tree must
//! pass `validate()`.
//!
//! At 1M live allocations one `vm-allocator` first-match operation takes
//! milliseconds, so the default run samples a handful of operations there
//! (5 rounds; `--full` samples as many as at the smaller sizes); the table's
//! `rounds` column says how many were taken.
//!
//! JSON rows: `case` (`alloc_free`), `variant` (`spacekit`,
//! `vm-allocator`), `live`, `policy` (`first`, `last`), `sizes` (`mixed`),
//! `rounds`, `median_ns` (per free + allocate pair).

use std::hint::black_box;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit::rangetree::RangeTree;
use spacekit::testing::Validate;
use vm_allocator::{AddressAllocator, AllocPolicy, RangeInclusive};

use crate::chart::{Chart, XAxis};
use crate::context::{BenchError, Ctx, Mode};
use crate::harness::{batch, progress, Bars, Comparison, Medians, Report, Row, Table, Timer};

const NAME: &str = "alloc";
const PAGE: u64 = 4096;
/// First address of the space.
const BASE: u64 = 1 << 32;
/// Free pages before each allocation of the initial layout: 0..=GAP_PAGES.
const GAP_PAGES: u64 = 8;

/// Where the allocator places a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Policy {
    /// Lowest fit (`AllocPolicy::FirstMatch`, `find_gap_aligned`).
    First,
    /// Highest fit (`AllocPolicy::LastMatch`, `find_gap_rev_aligned`).
    Last,
}

impl Policy {
    fn label(self) -> &'static str {
        match self {
            Policy::First => "first",
            Policy::Last => "last",
        }
    }

    fn vm(self) -> AllocPolicy {
        match self {
            Policy::First => AllocPolicy::FirstMatch,
            Policy::Last => AllocPolicy::LastMatch,
        }
    }
}

/// One request, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Req {
    size: u64,
    align: u64,
}

/// A random request of the mix in the module docs.
fn request(rng: &mut SmallRng) -> Req {
    let (pages, align) = match rng.random_range(0..10) {
        0..=4 => (rng.random_range(1..=16u64), PAGE),
        5..=7 => {
            let p = 1u64 << rng.random_range(0..=6);
            (p, p * PAGE)
        }
        _ => (rng.random_range(1..=64u64), 16 * PAGE),
    };
    Req {
        size: pages * PAGE,
        align,
    }
}

/// An address allocator as the benchmark drives it.
trait Space {
    /// Allocates `req` with `policy`; its first address, or `None` if
    /// nothing fits.
    fn alloc(&mut self, req: Req, policy: Policy) -> Option<u64>;
    /// Frees the allocation `[start, start + size)`; whether it was one.
    fn free(&mut self, start: u64, size: u64) -> bool;
}

/// spacekit: a range tree of the allocations, searched by gap.
struct Spk {
    tree: RangeTree<()>,
    first: u64,
    last: u64,
}

impl Space for Spk {
    fn alloc(&mut self, req: Req, policy: Policy) -> Option<u64> {
        let within = self.first..=self.last;
        let s = match policy {
            Policy::First => self.tree.find_gap_aligned(req.size, req.align, within),
            Policy::Last => self.tree.find_gap_rev_aligned(req.size, req.align, within),
        }
        .ok()??;
        self.tree.insert_range(s, s + (req.size - 1), ()).ok()?;
        Some(s)
    }

    fn free(&mut self, start: u64, _size: u64) -> bool {
        self.tree.erase(start).is_some()
    }
}

/// vm-allocator's address allocator.
struct Vm(AddressAllocator);

impl Space for Vm {
    fn alloc(&mut self, req: Req, policy: Policy) -> Option<u64> {
        self.0
            .allocate(req.size, req.align, policy.vm())
            .ok()
            .map(|r| r.start())
    }

    fn free(&mut self, start: u64, size: u64) -> bool {
        RangeInclusive::new(start, start + (size - 1))
            .and_then(|r| self.0.free(&r))
            .is_ok()
    }
}

/// An allocator, its live allocations and the random stream of operations.
struct Churn<S> {
    space: S,
    /// `(start, size)` of every live allocation, in no particular order.
    live: Vec<(u64, u64)>,
    rng: SmallRng,
    policy: Policy,
    /// Frees the allocator refused (must stay 0).
    bad_frees: usize,
}

impl<S: Space> Churn<S> {
    /// One operation: free a random live allocation, allocate a new random
    /// one. Returns the new address (`None`: nothing fit).
    fn step(&mut self) -> Option<u64> {
        if !self.live.is_empty() {
            let k = self.rng.random_range(0..self.live.len());
            let (start, size) = self.live.swap_remove(k);
            if !self.space.free(start, size) {
                self.bad_frees += 1;
            }
        }
        let req = request(&mut self.rng);
        let got = self.space.alloc(req, self.policy);
        if let Some(s) = got {
            self.live.push((s, req.size));
        }
        got
    }

    /// The same live set and random stream over another allocator.
    fn twin<T>(&self, space: T) -> Churn<T> {
        Churn {
            space,
            live: self.live.clone(),
            rng: self.rng.clone(),
            policy: self.policy,
            bad_frees: 0,
        }
    }
}

/// The initial layout: `n` allocations from `BASE` up (sorted), and the
/// last address of the space.
fn layout(n: usize, rng: &mut SmallRng) -> (Vec<(u64, u64)>, u64) {
    let mut at = BASE;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let req = request(rng);
        let s = (at + rng.random_range(0..=GAP_PAGES) * PAGE).next_multiple_of(req.align);
        v.push((s, req.size));
        at = s + req.size;
    }
    let span = at - BASE;
    let slack = (span / 8).max(4096 * PAGE).next_multiple_of(PAGE);
    (v, at + slack - 1)
}

/// The churned steady state of `n` allocations under `policy`, as a spacekit
/// churn and its vm-allocator twin.
fn prepare(
    n: usize,
    policy: Policy,
    seed: u64,
    warm: usize,
) -> Result<(Churn<Spk>, Churn<Vm>), BenchError> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0xA110C ^ n as u64);
    let (allocs, last) = layout(n, &mut rng);
    let tree = RangeTree::from_sorted(allocs.iter().map(|&(s, size)| (s, s + size - 1, ())))
        .map_err(|e| BenchError(format!("the layout of {n} allocations: {e}")))?;
    let mut spk = Churn {
        space: Spk {
            tree,
            first: BASE,
            last,
        },
        live: allocs,
        rng,
        policy,
        bad_frees: 0,
    };
    for _ in 0..warm {
        spk.step();
    }
    if spk.bad_frees > 0 {
        return Err(BenchError(format!(
            "spacekit refused {} frees while churning",
            spk.bad_frees
        )));
    }
    let mut sorted = spk.live.clone();
    sorted.sort_unstable();
    let mut vm = AddressAllocator::new(BASE, last - BASE + 1)
        .map_err(|e| BenchError(format!("vm-allocator: the space: {e}")))?;
    for &(s, size) in &sorted {
        let r = vm
            .allocate(size, PAGE, AllocPolicy::ExactMatch(s))
            .map_err(|e| BenchError(format!("vm-allocator: ExactMatch({s:#x}, {size:#x}): {e}")))?;
        if r.start() != s || r.end() != s + size - 1 {
            return Err(BenchError(format!(
                "vm-allocator: ExactMatch({s:#x}) gave {r:?}"
            )));
        }
    }
    let vm = spk.twin(Vm(vm));
    Ok((spk, vm))
}

/// The timer of `n` live allocations: a handful of rounds at 1M unless
/// `--full`.
fn timer(ctx: &Ctx, n: usize) -> Timer {
    let t = ctx.timer();
    if n > 1 << 16 && ctx.mode != Mode::Full {
        Timer {
            sample: Duration::from_millis(20),
            samples: 5,
            budget: Duration::from_millis(400),
        }
    } else {
        t
    }
}

/// Operations of the spacekit-only churn before timing: twice `n` up to
/// 64K, `n / 4` at 1M (`n` with `--full`).
fn warm_ops(ctx: &Ctx, n: usize) -> usize {
    match (n <= 1 << 16, ctx.mode) {
        (true, _) => 2 * n,
        (false, Mode::Full) => n,
        (false, _) => n / 4,
    }
}

/// Verifies and times one size and policy; returns the medians (ns per
/// free + allocate) and the rounds sampled.
fn run_case(ctx: &Ctx, n: usize, policy: Policy) -> Result<Medians, BenchError> {
    let label = policy.label();
    progress(NAME, &format!("{n} live, {label} match: preparing"));
    let (mut spk, mut vm) = prepare(n, policy, ctx.seed, warm_ops(ctx, n))?;
    let checks = if n > 1 << 16 { 16 } else { 256 };
    progress(
        NAME,
        &format!("{n} live, {label} match: verifying {checks} operations"),
    );
    let got: Vec<Option<u64>> = (0..checks).map(|_| spk.step()).collect();
    let want: Vec<Option<u64>> = (0..checks).map(|_| vm.step()).collect();
    let misses = got.iter().filter(|a| a.is_none()).count();
    progress(NAME, &format!("{n} live, {label} match: timing"));
    let m = Comparison::lists(format!("{n} live allocations, {label} match"))
        .variant(
            "spacekit",
            got,
            batch(|| {
                black_box(spk.step());
            }),
        )
        .variant(
            "vm-allocator",
            want,
            batch(|| {
                black_box(vm.step());
            }),
        )
        .run(&timer(ctx, n))?;
    if spk.bad_frees + vm.bad_frees > 0 {
        return Err(BenchError(format!(
            "{n} live, {label}: refused frees: spacekit {}, vm-allocator {}",
            spk.bad_frees, vm.bad_frees
        )));
    }
    spk.space
        .tree
        .validate()
        .map_err(|e| BenchError(format!("{n} live, {label}: the tree after timing: {e}")))?;
    if misses > checks / 8 {
        return Err(BenchError(format!(
            "{n} live, {label}: {misses} of {checks} requests found no space (the space is too full to measure a steady state)"
        )));
    }
    Ok(m)
}

/// Runs `bench alloc`.
pub fn run(ctx: &Ctx) -> Result<Report, BenchError> {
    let sizes: &[usize] = match ctx.mode {
        Mode::Quick => &[1 << 10, 1 << 16],
        _ => &[1 << 10, 1 << 16, 1 << 20],
    };
    let mut report = Report::default();
    let mut bars = Bars::new(NAME);
    let mut table = Table::new(
        "free + allocate in steady state, per pair: spacekit RangeTree vs vm-allocator AddressAllocator \
         (mixed sizes 4 KiB-256 KiB, alignments 4 KiB / natural / 64 KiB)",
        &["live", "policy", "spacekit", "vm-allocator", "vm/spk", "rounds"],
    );
    for &n in sizes {
        for policy in [Policy::First, Policy::Last] {
            let m = run_case(ctx, n, policy)?;
            let rounds = m.rounds();
            m.rows(&mut report, |v| {
                Row::new("alloc_free", v)
                    .field("live", n)
                    .field("policy", policy.label())
                    .field("sizes", "mixed")
                    .field("rounds", rounds)
            });
            let few = if n > 1 << 16 && ctx.mode != Mode::Full {
                " (few: --full for more)"
            } else {
                ""
            };
            table.row(vec![
                n.to_string(),
                policy.label().into(),
                m.cell("spacekit"),
                m.cell("vm-allocator"),
                m.ratio_cell("vm-allocator", "spacekit"),
                format!("{rounds}{few}"),
            ]);
            let bar = match n {
                1024 => Some(1.0),
                65536 => Some(10.0),
                _ => None,
            };
            if let Some(bar) = bar {
                let r = m.ratio("vm-allocator", "spacekit");
                bars.check(
                    r >= bar,
                    format!(
                        "{n} live, {} match: spacekit {} vs vm-allocator {} = {r:.1}x faster (bar: >= {bar}x)",
                        policy.label(),
                        m.cell("spacekit"),
                        m.cell("vm-allocator"),
                    ),
                );
            }
        }
    }
    report.table(table);
    for policy in [Policy::First, Policy::Last] {
        let chart = Chart::new(
            &format!(
                "alloc: free + allocate ({} match) vs live allocations",
                policy.label()
            ),
            "live allocations",
            "ns per free + allocate",
            XAxis::Log,
            true,
        )
        .from_rows(
            report
                .rows
                .iter()
                .filter(|r| r.str("policy") == Some(policy.label())),
            "live",
            "median_ns",
        );
        report.chart(chart);
    }
    report.bars(bars);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// From an empty space, both allocators give the same address to every
    /// request of a long churn, both policies (the equivalence the
    /// benchmark relies on, without the spacekit-only warm-up).
    #[test]
    fn both_allocators_agree_from_scratch() {
        for policy in [Policy::First, Policy::Last] {
            let last = BASE + 4096 * PAGE - 1;
            let spk = Spk {
                tree: RangeTree::new(),
                first: BASE,
                last,
            };
            let vm = Vm(AddressAllocator::new(BASE, last - BASE + 1).unwrap());
            let mut a = Churn {
                space: spk,
                live: Vec::new(),
                rng: SmallRng::seed_from_u64(7),
                policy,
                bad_frees: 0,
            };
            let mut b = a.twin(vm);
            // Fill to about 200 live allocations, then churn.
            for i in 0..3000 {
                if i < 400 && i % 2 == 0 {
                    let req = request(&mut a.rng);
                    let _ = request(&mut b.rng);
                    let x = a.space.alloc(req, policy);
                    let y = b.space.alloc(req, policy);
                    assert_eq!(x, y, "fill {i} {policy:?} {req:?}");
                    if let Some(s) = x {
                        a.live.push((s, req.size));
                        b.live.push((s, req.size));
                    }
                    continue;
                }
                assert_eq!(a.step(), b.step(), "step {i} {policy:?}");
            }
            assert_eq!((a.bad_frees, b.bad_frees), (0, 0));
            a.space.tree.validate().unwrap();
        }
    }

    #[test]
    fn prepared_states_agree_and_hold_n() {
        for policy in [Policy::First, Policy::Last] {
            let (mut a, mut b) = prepare(500, policy, 3, 1000).unwrap();
            assert_eq!(a.live.len(), 500);
            for i in 0..500 {
                assert_eq!(a.step(), b.step(), "step {i} {policy:?}");
            }
        }
    }

    #[test]
    fn requests_are_aligned_pages() {
        let mut rng = SmallRng::seed_from_u64(1);
        for _ in 0..1000 {
            let r = request(&mut rng);
            assert!(r.size.is_multiple_of(PAGE) && r.align.is_power_of_two() && r.align >= PAGE);
            assert!(r.size <= 64 * PAGE);
        }
    }
}
