//! `bench dirty`: seed 004's table. A VM's dirty bitmap (384 MiB with
//! `--full`, the size of a 12 TiB guest's log with 4 KiB pages; 32 MiB by
//! default) is turned into a memory range table by
//!
//! * `before`: Cloud Hypervisor's per-bit loop,
//! * `seed`: the seed's bit-position iterator plus coalesce,
//! * `spacekit`: `MemoryRangeTable::extend_from` a `Scan` (one thread),
//! * `spacekit-mt`: the same `Scan` with `.parallel(true)` (all threads),
//! * `limit`: the floor of any such pass, one read of the bitmap streaming
//!   as many bytes as the table holds (16 per range) into a reused buffer
//!   ([`membw::read_stream`]; with non-temporal stores from 16 MiB, as
//!   spacekit writes a table that large), timed round-robin with the
//!   others,
//!
//! at uniform random densities 0%, 0.1%, 1% and 5%, clustered (1% of pages
//! dirty in runs of 64) and 100%. Each variant fills its own output buffer
//! (the two spacekit variants one table between them), reused from call to
//! call and filled once before timing, so page faults stay out of the
//! timings. Every variant's ranges are checked equal before
//! anything is timed; samples go round-robin over the four variants, and the
//! memory bandwidth rows come from the same run.

use std::hint::black_box;

use baselines::dirty_log::{self, MemoryRange as BaseRange};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit::dirty::{Geometry, MemoryRangeTable, Scan};

use crate::chart::{Chart, XAxis};
use crate::context::{BenchError, Ctx, Mode};
use crate::harness::membw;
use crate::harness::{batch, progress, verify, Bars, Comparison, Medians, Report, Row, Table};

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

/// Rewrites `w` with the given pattern, every word. The same buffer (on
/// huge pages where the kernel gives them, as membw's: see
/// [`membw::huge_capacity`]) serves every density, so each reads the same
/// memory (fresh allocations for later densities, made after the earlier
/// ones' gigabyte tables, read up to half again slower here: the `limit`
/// row at 100% against 0%). Written anew each time: the host may merge
/// identical pages of a long-lived zero buffer, after which reads come from
/// one cached page instead of memory.
fn fill_bitmap(w: &mut [u64], d: Density, rng: &mut SmallRng) {
    black_box(&mut w[..]).fill(0);
    let bits = w.len() as u64 * 64;
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
}

/// The output buffers, one per variant, reused by every call.
#[derive(Default)]
struct Outputs {
    before: Vec<BaseRange>,
    seed: Vec<BaseRange>,
    /// Both spacekit variants' table: one buffer, so neither pays for
    /// where its own would sit in memory (two tables of 2.4 GB at 5% in
    /// `--full`, whose writes ran up to 15% apart with the same code).
    table: MemoryRangeTable,
    /// The `limit` row's output: two words per range.
    limit: Vec<u64>,
}

/// Verifies and times the four variants on one bitmap; returns the medians
/// and the number of ranges.
fn density_case(
    ctx: &Ctx,
    bm: &[u64],
    label: &str,
    o: &mut Outputs,
) -> Result<(Medians, usize), BenchError> {
    let geometry = Geometry::new(BASE, PAGE).map_err(|e| BenchError(e.to_string()))?;
    let scan = Scan::new(bm, geometry).map_err(|e| BenchError(e.to_string()))?;
    // Correctness first; this also faults in every output buffer.
    dirty_log::before(bm, BASE, PAGE, &mut o.before);
    dirty_log::seed(bm, BASE, PAGE, &mut o.seed);
    let table_pairs = |t: &MemoryRangeTable| {
        t.ranges()
            .iter()
            .map(|r| (r.gpa, r.length))
            .collect::<Vec<_>>()
    };
    o.table.clear();
    o.table.extend_from(scan);
    let a_spk = table_pairs(&o.table);
    let nranges = o.table.len();
    o.table.clear();
    o.table.extend_from(scan.parallel(true));
    let a_mt = table_pairs(&o.table);
    let base_pairs = |v: &[BaseRange]| v.iter().map(|r| (r.gpa, r.length)).collect::<Vec<_>>();
    let (a_before, a_seed) = (base_pairs(&o.before), base_pairs(&o.seed));
    // The limit writes as many bytes as the table holds; filled once here
    // so its page faults stay out of the timings too.
    o.limit.resize(2 * nranges, 0);
    let xor = membw::read_stream(bm, &mut o.limit);
    verify(
        &format!("the limit pass's read at {label}"),
        &[("read_stream", xor), ("read_xor", membw::read_xor(bm))],
    )?;
    let mut timer = ctx.timer();
    // `before` takes about two seconds per call at the full size: fewer
    // samples there, still round-robin with the others.
    if ctx.mode == Mode::Full {
        timer.samples = 9;
    }
    let Outputs {
        before,
        seed,
        table,
        limit,
    } = o;
    let table = core::cell::RefCell::new(table);
    let m = Comparison::lists(format!("the ranges at {label}"))
        .variant(
            "before",
            a_before,
            batch(|| dirty_log::before(black_box(bm), BASE, PAGE, before)),
        )
        .variant(
            "seed",
            a_seed,
            batch(|| dirty_log::seed(black_box(bm), BASE, PAGE, seed)),
        )
        .variant(
            "spacekit",
            a_spk,
            batch(|| {
                let mut t = table.borrow_mut();
                t.clear();
                t.extend_from(black_box(scan));
            }),
        )
        .variant(
            "spacekit-mt",
            a_mt,
            batch(|| {
                let mut t = table.borrow_mut();
                t.clear();
                t.extend_from(black_box(scan).parallel(true));
            }),
        )
        .limit(
            "limit",
            batch(|| {
                black_box(membw::read_stream(black_box(bm), limit));
            }),
        )
        .run(&timer)?;
    // The timed calls must still give the verified answer.
    verify(
        &format!("the ranges after timing at {label}"),
        &[
            ("spacekit", nranges),
            (
                "spacekit and spacekit-mt (their shared table)",
                o.table.len(),
            ),
            ("before", o.before.len()),
        ],
    )?;
    Ok((m, nranges))
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
            "limit",
            "GB/s",
            "of membw",
            "vs seed",
            "of limit",
            "mt vs 1",
        ],
    );
    // One output buffer per variant, reused by every call and every density.
    let mut outs = Outputs::default();
    let mut results = Vec::new();
    let mut bm = membw::huge_vec(words, !0)?;
    for d in DENSITIES {
        progress(NAME, &format!("{} MiB at {}", bytes >> 20, d.label()));
        fill_bitmap(&mut bm, d, &mut rng);
        let (m, nranges) = density_case(ctx, &bm, d.label(), &mut outs)?;
        m.rows_with(&mut report, |v, ns| {
            Row::new("scan", v)
                .field("density", d.label())
                .field("bytes", bytes)
                .field("ranges", nranges)
                .field("gbps", bytes as f64 / ns)
        });
        let gbps = bytes as f64 / m.ns("spacekit");
        table.row(vec![
            d.label().into(),
            nranges.to_string(),
            m.cell("before"),
            m.cell("seed"),
            m.cell("spacekit"),
            m.cell("spacekit-mt"),
            m.cell("limit"),
            format!("{gbps:.2}"),
            format!("{:.0}%", gbps / bw.single * 100.0),
            m.ratio_cell("seed", "spacekit"),
            m.ratio_cell("spacekit", "limit"),
            m.ratio_cell("spacekit", "spacekit-mt"),
        ]);
        results.push((d.label(), m));
    }
    report.table(table);

    let mut chart = Chart::new(
        &format!(
            "dirty: {} MiB bitmap to ranges, GB/s of bitmap by density",
            bytes >> 20
        ),
        "dirty pages",
        "GB/s (log)",
        XAxis::Categories(DENSITIES.iter().map(|d| d.label().to_string()).collect()),
        true,
    )
    .from_rows(
        report.rows.iter().filter(|r| r.str("case") == Some("scan")),
        "density",
        "gbps",
    );
    chart.limit("membw", bw.single);
    if bw.threads > 1 {
        chart.limit("membw-mt", bw.all);
    }
    report.chart(chart);

    let get = |label: &str| -> Result<&Medians, BenchError> {
        results
            .iter()
            .find(|(l, _)| *l == label)
            .map(|(_, m)| m)
            .ok_or_else(|| BenchError(format!("no {label} row")))
    };
    if ctx.mode != Mode::Quick {
        let gbps = bytes as f64 / get("0%")?.ns("spacekit");
        bars.check(
            gbps >= 0.85 * bw.single,
            format!(
                "0% dirty: {gbps:.2} GB/s = {:.0}% of single-thread membw {:.2} GB/s (bar: >= 85%)",
                gbps / bw.single * 100.0,
                bw.single
            ),
        );
    }
    for (label, bar) in [("0.1%", 2.5), ("1%", 3.0), ("5%", 2.0), ("100%", 100.0)] {
        let m = get(label)?;
        let r = m.ratio("seed", "spacekit");
        bars.check(
            r >= bar,
            format!(
                "{label}: spacekit {} vs seed {} = {r:.1}x faster (bar: >= {bar}x)",
                m.cell("spacekit"),
                m.cell("seed")
            ),
        );
    }
    if threads > 1 {
        // The same bar for the two-thread build, which splits a sparse
        // log of the full size into one pass per thread (the seed is one
        // thread).
        let m = get("0.1%")?;
        let r = m.ratio("seed", "spacekit-mt");
        bars.check(
            r >= 2.5,
            format!(
                "0.1%: spacekit-mt ({threads} threads) {} vs seed (one thread) {} = {r:.1}x faster (bar: >= 2.5x)",
                m.cell("spacekit-mt"),
                m.cell("seed")
            ),
        );
    }
    for label in ["1%", "5%"] {
        let m = get(label)?;
        let r = m.ratio("spacekit", "limit");
        bars.check(
            r <= 2.0,
            format!(
                "{label}: spacekit {} vs limit {} (read the bitmap, write the table's bytes) = {r:.2}x (bar: <= 2x)",
                m.cell("spacekit"),
                m.cell("limit")
            ),
        );
    }
    if threads > 1 && ctx.mode != Mode::Quick {
        let gbps = bytes as f64 / get("0%")?.ns("spacekit-mt");
        bars.check(
            gbps >= 0.8 * bw.all,
            format!(
                "0%: spacekit-mt {gbps:.2} GB/s = {:.0}% of {threads}-thread membw {:.2} GB/s (bar: >= 80%)",
                gbps / bw.all * 100.0,
                bw.all
            ),
        );
        // Two threads must pay or step aside: below the density where the
        // split pays, `spacekit-mt` runs the very same serial scan, so what
        // separates the two there is the machine's noise; 5% is allowed for
        // it (the same variant's medians move more than that between runs).
        for density in DENSITIES {
            let label = density.label();
            let m = get(label)?;
            let r = m.ratio("spacekit", "spacekit-mt");
            let times = format!(
                "{label}: spacekit-mt ({threads} threads) {} vs 1 thread {} = {r:.2}x",
                m.cell("spacekit-mt"),
                m.cell("spacekit")
            );
            bars.check(r >= 0.95, format!("{times} (bar: no slower, >= 0.95x)"));
            if matches!(label, "1%" | "5%") {
                bars.check(r >= 1.5, format!("{times} (bar: >= 1.5x)"));
            }
        }
    }
    report.bars(bars);
    Ok(report)
}
