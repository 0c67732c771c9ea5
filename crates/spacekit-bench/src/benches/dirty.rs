//! `bench dirty`: seed 004's table. A VM's dirty bitmap (384 MiB with
//! `--full`, the size of a 12 TiB guest's log with 4 KiB pages; 32 MiB by
//! default) is turned into a memory range table by
//!
//! * `before`: Cloud Hypervisor's per-bit loop,
//! * `seed`: the seed's bit-position iterator plus coalesce,
//! * `spacekit`: `MemoryRangeTable::extend_from_bitmap` (one thread),
//! * `spacekit-mt`: `MemoryRangeTable::par_extend_from_bitmap` (all threads),
//!
//! at uniform random densities 0%, 0.1%, 1% and 5%, clustered (1% of pages
//! dirty in runs of 64) and 100%. Each variant fills its own output buffer,
//! reused from call to call and filled once before timing, so page faults
//! stay out of the timings. Every variant's ranges are checked equal before
//! anything is timed; samples go round-robin over the four variants, and the
//! memory bandwidth rows come from the same run.

use std::hint::black_box;

use baselines::dirty_log::{self, MemoryRange as BaseRange};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit::dirty::MemoryRangeTable;

use crate::harness::membw;
use crate::{
    batch, fmt_ns, fmt_ratio, progress, verify, Bars, BenchError, Ctx, Mode, Report, Row, Table,
};

const NAME: &str = "dirty";
const PAGE: u64 = 4096;
/// Guest address of the first page (above the 4 GiB hole, like a guest's
/// high memory).
const BASE: u64 = 1 << 32;

/// A bitmap pattern of the table.
#[derive(Clone, Copy, Debug)]
enum Density {
    /// Each page dirty with this probability.
    Uniform(&'static str, f64),
    /// 1% of pages dirty, in runs of 64 pages at random offsets.
    Clustered,
    /// Every page dirty.
    Full,
}

impl Density {
    fn label(self) -> &'static str {
        match self {
            Density::Uniform(l, _) => l,
            Density::Clustered => "clustered",
            Density::Full => "100%",
        }
    }
}

const DENSITIES: [Density; 6] = [
    Density::Uniform("0%", 0.0),
    Density::Uniform("0.1%", 0.001),
    Density::Uniform("1%", 0.01),
    Density::Uniform("5%", 0.05),
    Density::Clustered,
    Density::Full,
];

/// A fresh bitmap of `words` words with the given pattern. Freshly written
/// every time: the host may merge identical pages of a long-lived zero
/// buffer, after which reads come from one cached page instead of memory.
fn bitmap(words: usize, d: Density, rng: &mut SmallRng) -> Vec<u64> {
    let mut w = vec![!0u64; words];
    black_box(&mut w[..]).fill(0);
    let bits = words as u64 * 64;
    match d {
        Density::Uniform(_, p) => {
            // `p * bits` random pages (a few collide, as in the seed's
            // harness).
            for _ in 0..(p * bits as f64) as u64 {
                let b = rng.random_range(0..bits);
                w[(b / 64) as usize] |= 1 << (b % 64);
            }
        }
        Density::Clustered => {
            for _ in 0..bits / 100 / 64 {
                let start = rng.random_range(0..bits - 64);
                for b in start..start + 64 {
                    w[(b / 64) as usize] |= 1 << (b % 64);
                }
            }
        }
        Density::Full => w.fill(!0),
    }
    w
}

/// Runs `bench dirty`.
pub fn run(ctx: &Ctx) -> Result<Report, BenchError> {
    let bytes: usize = match ctx.mode {
        Mode::Quick => 1 << 20,
        Mode::Default => 32 << 20,
        Mode::Full => 384 << 20,
    };
    let words = bytes / 8;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let read_buf = membw::buffer(ctx)?;
    let (mut report, bw) = membw::measure(ctx, &read_buf)?;
    drop(read_buf);
    let mut bars = Bars::new(NAME);
    let mut rng = SmallRng::seed_from_u64(ctx.seed ^ 0xD1E7);
    let mut table = Table::new(
        &format!(
            "dirty bitmap ({} MiB, {} pages of 4 KiB) -> memory range table; spacekit-mt on {threads} threads; \
             membw {:.2} GB/s (1 thread, this run)",
            bytes >> 20,
            words * 64,
            bw.single
        ),
        &[
            "density",
            "ranges",
            "before",
            "seed",
            "spacekit",
            "spacekit-mt",
            "GB/s",
            "of membw",
            "vs seed",
            "mt vs 1",
        ],
    );
    // One output buffer per variant, reused by every call and every density.
    let mut out_before: Vec<BaseRange> = Vec::new();
    let mut out_seed: Vec<BaseRange> = Vec::new();
    let mut out_sk = MemoryRangeTable::new();
    let mut out_mt = MemoryRangeTable::new();
    let mut results = Vec::new();
    for d in DENSITIES {
        progress(NAME, &format!("{} MiB at {}", bytes >> 20, d.label()));
        let bm = bitmap(words, d, &mut rng);
        // Correctness first; this also faults in every output buffer.
        dirty_log::before(&bm, BASE, PAGE, &mut out_before);
        dirty_log::seed(&bm, BASE, PAGE, &mut out_seed);
        out_sk.clear();
        out_sk
            .extend_from_bitmap(&bm, PAGE, BASE, 0)
            .map_err(|e| BenchError(e.to_string()))?;
        out_mt.clear();
        out_mt
            .par_extend_from_bitmap(&bm, PAGE, BASE, 0)
            .map_err(|e| BenchError(e.to_string()))?;
        let as_pairs = |v: &[BaseRange]| v.iter().map(|r| (r.gpa, r.length)).collect::<Vec<_>>();
        let sk_pairs = |t: &MemoryRangeTable| {
            t.ranges()
                .iter()
                .map(|r| (r.gpa, r.length))
                .collect::<Vec<_>>()
        };
        verify(
            &format!("the ranges at {}", d.label()),
            &[
                ("before", as_pairs(&out_before)),
                ("seed", as_pairs(&out_seed)),
                ("spacekit", sk_pairs(&out_sk)),
                ("spacekit-mt", sk_pairs(&out_mt)),
            ],
        )?;
        let nranges = out_sk.len();
        let mut timer = ctx.timer();
        // `before` takes about two seconds per call at the full size: fewer
        // samples there, still round-robin with the others.
        if ctx.mode == Mode::Full {
            timer.samples = 9;
        }
        let ns = timer.medians(&mut [
            batch(|| dirty_log::before(black_box(&bm), BASE, PAGE, &mut out_before)),
            batch(|| dirty_log::seed(black_box(&bm), BASE, PAGE, &mut out_seed)),
            batch(|| {
                out_sk.clear();
                let _ = out_sk.extend_from_bitmap(black_box(&bm), PAGE, BASE, 0);
            }),
            batch(|| {
                out_mt.clear();
                let _ = out_mt.par_extend_from_bitmap(black_box(&bm), PAGE, BASE, 0);
            }),
        ]);
        // The timed calls must still give the verified answer.
        verify(
            &format!("the ranges after timing at {}", d.label()),
            &[("spacekit", nranges), ("spacekit-mt", out_mt.len())],
        )?;
        for (variant, &t) in ["before", "seed", "spacekit", "spacekit-mt"]
            .iter()
            .zip(&ns)
        {
            report.push(
                Row::new("scan", variant)
                    .field("density", d.label())
                    .field("bytes", bytes)
                    .field("ranges", nranges)
                    .field("median_ns", t)
                    .field("gbps", bytes as f64 / t),
            );
        }
        let gbps = bytes as f64 / ns[2];
        table.row(vec![
            d.label().into(),
            nranges.to_string(),
            fmt_ns(ns[0]),
            fmt_ns(ns[1]),
            fmt_ns(ns[2]),
            fmt_ns(ns[3]),
            format!("{gbps:.2}"),
            format!("{:.0}%", gbps / bw.single * 100.0),
            fmt_ratio(ns[1], ns[2]),
            fmt_ratio(ns[2], ns[3]),
        ]);
        results.push((d.label(), ns));
    }
    report.table(table);

    let get = |label: &str| {
        results
            .iter()
            .find(|(l, _)| *l == label)
            .map(|(_, ns)| ns.clone())
            .unwrap_or_default()
    };
    let zero = get("0%");
    if ctx.mode != Mode::Quick {
        let gbps = bytes as f64 / zero[2];
        bars.check(
            gbps >= 0.8 * bw.single,
            format!(
                "0% dirty: {gbps:.2} GB/s = {:.0}% of single-thread membw {:.2} GB/s (bar: >= 80%)",
                gbps / bw.single * 100.0,
                bw.single
            ),
        );
    }
    for (label, bar) in [("0.1%", 1.5), ("1%", 3.0), ("5%", 2.0), ("100%", 100.0)] {
        let ns = get(label);
        let r = ns[1] / ns[2];
        bars.check(
            r >= bar,
            format!(
                "{label}: spacekit {} vs seed {} = {r:.1}x faster (bar: >= {bar}x)",
                fmt_ns(ns[2]),
                fmt_ns(ns[1])
            ),
        );
    }
    for label in ["0%", "1%"] {
        let ns = get(label);
        let r = ns[2] / ns[3];
        bars.check(
            r >= 1.6,
            format!(
                "{label}: spacekit-mt ({threads} threads) {} vs 1 thread {} = {r:.2}x (bar: >= 1.6x)",
                fmt_ns(ns[3]),
                fmt_ns(ns[2])
            ),
        );
    }
    report.bars(bars);
    Ok(report)
}
