//! `bench zero-area`: seed 000's experiment and the bitmap engine's scan speed.
//!
//! 1. Seed 000's table: a 327,680-bit bitmap, test1 = random bytes, test2 = all
//!    clear with 655 random bits set; search for cnt = 8 .. 4096 clear bits from
//!    0 without alignment. Variants: `before` (the kernel loop with
//!    find_next_bit), `seed` (with seed 000's find_last_bit_range), `spacekit`
//!    and `spacekit-scalar`, each with its restart count.
//! 2. The same search on 8 MiB and 64 MiB bitmaps, with and without alignment.
//! 3. Scan speed: a clear-bit search over an all-set bitmap and a set-bit
//!    search over an all-clear one, as a fraction of the memory bandwidth
//!    measured in the same run.
//! 4. A table in lib/find_bit_benchmark.c's style (next set, next clear, last,
//!    nth, set-run iteration) on a dense random and a sparse 1-in-500 bitmap.
//!
//! Every case verifies its variants' answers before timing them round-robin
//! ([`Comparison`]). Charts: time vs cnt per variant, log-log, for seed
//! 000's test1 and test2.

use std::hint::black_box;

use baselines::find_bit as kernel;
use baselines::find_bit::AreaVariant;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit::arch::Level;
use spacekit::bitmap::{BitView, Bits};
use spacekit::testing::{find_clear_area_stats, AtLevel};

use crate::chart::{Chart, XAxis};
use crate::context::{BenchError, Ctx, Mode};
use crate::harness::membw::{self, Bandwidth};
use crate::harness::{batch, fmt_ns, progress, Bars, Comparison, Medians, Op, Report, Row, Table};

const NAME: &str = "zero-area";
/// Seed 000's BITMAP_LEN: 4096 * 8 * 10 bits.
const SEED_BITS: usize = 4096 * 8 * 10;
/// Seed 000's SPARSE: one set bit per 500.
const SPARSE: usize = 500;

/// The two bitmaps of seed 000's experiment, at any size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pattern {
    /// Random bytes (test1).
    Random,
    /// All clear, then size/500 random bits set (test2).
    Sparse,
}

impl Pattern {
    fn test_name(self) -> &'static str {
        match self {
            Pattern::Random => "test1",
            Pattern::Sparse => "test2",
        }
    }

    /// The bitmap's name in the find_bit_benchmark-style lines.
    fn label(self) -> &'static str {
        match self {
            Pattern::Random => "random-filled",
            Pattern::Sparse => "sparse",
        }
    }

    fn make(self, rng: &mut SmallRng, nbits: usize) -> Vec<u64> {
        let nw = nbits.div_ceil(64);
        match self {
            Pattern::Random => (0..nw).map(|_| rng.random::<u64>()).collect(),
            Pattern::Sparse => {
                let mut w = vec![0u64; nw];
                for _ in 0..nbits / SPARSE {
                    let i = rng.random_range(0..nbits);
                    w[i / 64] |= 1 << (i % 64);
                }
                w
            }
        }
    }
}

/// The four area-search variants, in the order they are verified and timed.
const VARIANTS: [&str; 4] = ["before", "seed", "spacekit", "spacekit-scalar"];

/// Seed 000's counts of clear bits asked for.
const SEED_CNTS: [usize; 5] = [8, 32, 128, 1024, 4096];

/// The `(cnt, align_mask)` searches of the large bitmaps.
const LARGE_SEARCHES: [(usize, usize); 5] = [(32, 0), (128, 0), (128, 63), (1024, 0), (1024, 511)];

/// Table columns filled by [`AreaRun::cells`].
const AREA_COLUMNS: [&str; 7] = [
    "restarts b/s/spk",
    "before",
    "seed",
    "spacekit",
    "scalar",
    "seed/spk",
    "before/spk",
];

/// A table whose leading columns are `lead`, followed by [`AREA_COLUMNS`].
fn area_table(title: &str, lead: &[&str]) -> Table {
    let header: Vec<&str> = lead.iter().chain(AREA_COLUMNS.iter()).copied().collect();
    Table::new(title, &header)
}

/// The four area-search variants on one input: their times, and how often
/// each search started over (in [`VARIANTS`] order).
struct AreaRun {
    m: Medians,
    restarts: [usize; 4],
}

impl AreaRun {
    fn restarts(&self, variant: &str) -> usize {
        VARIANTS
            .iter()
            .position(|v| *v == variant)
            .map_or(0, |i| self.restarts[i])
    }

    /// One JSON row per variant, each `row(variant)` plus `restarts` and
    /// `median_ns`.
    fn push_rows(&self, report: &mut Report, row: impl Fn(&str) -> Row) {
        self.m
            .rows(report, |v| row(v).field("restarts", self.restarts(v)));
    }

    /// Table cells: restarts, the four times, seed/spacekit, before/spacekit.
    fn cells(&self) -> Vec<String> {
        let (r, m) = (&self.restarts, &self.m);
        vec![
            format!("{}/{}/{}", r[0], r[1], r[2]),
            m.cell("before"),
            m.cell("seed"),
            m.cell("spacekit"),
            m.cell("spacekit-scalar"),
            m.ratio_cell("seed", "spacekit"),
            m.ratio_cell("before", "spacekit"),
        ]
    }
}

/// Verifies and times one area search on `words` (nbits bits).
fn area_case(
    ctx: &Ctx,
    words: &[u64],
    nbits: usize,
    nr: usize,
    mask: usize,
    what: &str,
) -> Result<AreaRun, BenchError> {
    let view = BitView::new(words, nbits).map_err(|e| BenchError(e.to_string()))?;
    let scalar = AtLevel(view, Level::scalar());
    let kernel_answer = |v| {
        let (i, restarts) = kernel::find_next_zero_area_off(words, nbits, 0, nr, mask, 0, v);
        ((i < nbits).then_some(i), restarts)
    };
    let (before, r_before) = kernel_answer(AreaVariant::Before);
    let (seed, r_seed) = kernel_answer(AreaVariant::Seed);
    let bad = |e: spacekit::bitmap::BitmapError| BenchError(e.to_string());
    let (spk, s_spk) = find_clear_area_stats(&view, 0, nr, mask + 1, 0).map_err(bad)?;
    let (sca, s_sca) = find_clear_area_stats(&scalar, 0, nr, mask + 1, 0).map_err(bad)?;
    let kernel_loop = |v| {
        batch(move || {
            black_box(kernel::find_next_zero_area_off(
                black_box(words),
                nbits,
                0,
                nr,
                mask,
                0,
                v,
            ));
        })
    };
    let m = Comparison::new(what)
        .variant("before", before, kernel_loop(AreaVariant::Before))
        .variant("seed", seed, kernel_loop(AreaVariant::Seed))
        .variant(
            "spacekit",
            spk,
            batch(|| {
                black_box(black_box(&view).find_clear_area_mask(0, nr, mask, 0).ok());
            }),
        )
        .variant(
            "spacekit-scalar",
            sca,
            batch(|| {
                black_box(black_box(&scalar).find_clear_area_mask(0, nr, mask, 0).ok());
            }),
        )
        .run(&ctx.timer())?;
    Ok(AreaRun {
        m,
        restarts: [r_before, r_seed, s_spk.restarts, s_sca.restarts],
    })
}

/// spacekit must not be slower than the faster of `before` and `seed`.
fn never_slower(bars: &mut Bars, tag: &str, r: &AreaRun) {
    let fastest_peer = r.m.ns("before").min(r.m.ns("seed"));
    bars.check(
        r.m.ns("spacekit") <= fastest_peer,
        format!(
            "{tag}: spacekit {} vs fastest of before/seed {} (bar: never slower)",
            r.m.cell("spacekit"),
            fmt_ns(fastest_peer)
        ),
    );
}

/// Runs `bench zero-area`.
pub fn run(ctx: &Ctx) -> Result<Report, BenchError> {
    let mut rng = SmallRng::seed_from_u64(ctx.seed);
    // One membw buffer serves the membw rows and the scans' paired samples.
    let read_buf = membw::buffer(ctx)?;
    let (mut report, bw) = membw::measure(ctx, &read_buf)?;
    let mut bars = Bars::new(NAME);
    seed000_table(ctx, &mut rng, &mut report, &mut bars)?;
    large_table(ctx, &mut rng, &mut report, &mut bars)?;
    scan_table(ctx, &read_buf, bw, &mut report, &mut bars)?;
    drop(read_buf);
    find_bit_table(ctx, &mut rng, &mut report)?;
    for pattern in [Pattern::Random, Pattern::Sparse] {
        let chart = seed000_chart(&report, pattern);
        report.chart(chart);
    }
    report.bars(bars);
    Ok(report)
}

// ---- 1. seed 000's table ----

fn seed000_table(
    ctx: &Ctx,
    rng: &mut SmallRng,
    report: &mut Report,
    bars: &mut Bars,
) -> Result<(), BenchError> {
    let mut table = area_table(
        "seed 000: bitmap_find_next_zero_area_off, 327,680 bits, start 0, no alignment",
        &["test", "cnt"],
    );
    for pattern in [Pattern::Random, Pattern::Sparse] {
        let words = pattern.make(rng, SEED_BITS);
        for cnt in SEED_CNTS {
            table.row(seed000_case(ctx, &words, pattern, cnt, report, bars)?);
        }
    }
    report.table(table);
    Ok(())
}

/// One search of seed 000's table: its rows and bars; returns its cells.
fn seed000_case(
    ctx: &Ctx,
    words: &[u64],
    pattern: Pattern,
    cnt: usize,
    report: &mut Report,
    bars: &mut Bars,
) -> Result<Vec<String>, BenchError> {
    let test = pattern.test_name();
    progress(NAME, &format!("seed000 {test} cnt={cnt}"));
    let r = area_case(
        ctx,
        words,
        SEED_BITS,
        cnt,
        0,
        &format!("seed000 {test} cnt={cnt}"),
    )?;
    r.push_rows(report, |v| {
        Row::new("seed000", v)
            .field("test", test)
            .field("cnt", cnt)
            .field("bits", SEED_BITS)
    });
    let ratio = r.m.ratio("seed", "spacekit");
    let tag = format!("{test} cnt={cnt}");
    let bar = match (pattern, cnt) {
        (Pattern::Random, 32 | 128) => Some(40.0),
        (Pattern::Random, 1024 | 4096) => Some(5.0),
        _ => None,
    };
    if let Some(bar) = bar {
        bars.check(
            ratio >= bar,
            format!("{tag}: seed/spacekit = {ratio:.1}x (bar: >= {bar}x)"),
        );
    }
    never_slower(bars, &tag, &r);
    let mut cells = vec![test.into(), cnt.to_string()];
    cells.extend(r.cells());
    Ok(cells)
}

/// Time vs cnt per variant for one of seed 000's bitmaps, log-log.
fn seed000_chart(report: &Report, pattern: Pattern) -> Chart {
    let test = pattern.test_name();
    let what = match pattern {
        Pattern::Random => "random bytes",
        Pattern::Sparse => "1 bit in 500 set",
    };
    Chart::new(
        &format!(
            "zero-area: seed 000's {test} ({what}, {SEED_BITS} bits), \
             time to find cnt clear bits"
        ),
        "cnt (clear bits asked for)",
        "ns per search",
        XAxis::Log,
        true,
    )
    .from_rows(
        report
            .rows
            .iter()
            .filter(|r| r.str("case") == Some("seed000") && r.str("test") == Some(test)),
        "cnt",
        "median_ns",
    )
}

// ---- 2. large bitmaps, with alignment ----

fn large_table(
    ctx: &Ctx,
    rng: &mut SmallRng,
    report: &mut Report,
    bars: &mut Bars,
) -> Result<(), BenchError> {
    let sizes: &[usize] = match ctx.mode {
        Mode::Quick => &[1 << 20],
        _ => &[8 << 20, 64 << 20],
    };
    let mut table = area_table(
        "the same search on large bitmaps (align_mask as in the kernel: 2^k - 1)",
        &["bytes", "test", "cnt", "mask"],
    );
    for &bytes in sizes {
        for pattern in [Pattern::Random, Pattern::Sparse] {
            let words = pattern.make(rng, bytes * 8);
            for (cnt, mask) in LARGE_SEARCHES {
                // The kernel loops take seconds per search on 64 MiB of
                // random bits at small cnt; keep the default run to a few
                // minutes.
                if bytes > 8 << 20
                    && ctx.mode != Mode::Full
                    && pattern == Pattern::Random
                    && cnt != 128
                {
                    continue;
                }
                let search = (pattern, cnt, mask);
                table.row(large_case(ctx, &words, bytes, search, report, bars)?);
            }
        }
    }
    report.table(table);
    Ok(())
}

/// One search on a large bitmap: its rows and bar; returns its cells.
fn large_case(
    ctx: &Ctx,
    words: &[u64],
    bytes: usize,
    (pattern, cnt, mask): (Pattern, usize, usize),
    report: &mut Report,
    bars: &mut Bars,
) -> Result<Vec<String>, BenchError> {
    let test = pattern.test_name();
    let mib = bytes >> 20;
    progress(
        NAME,
        &format!("large {mib} MiB {test} cnt={cnt} mask={mask}"),
    );
    let what = format!("{bytes} bytes {test} cnt={cnt} mask={mask}");
    let r = area_case(ctx, words, bytes * 8, cnt, mask, &what)?;
    r.push_rows(report, |v| {
        Row::new("large", v)
            .field("bytes", bytes)
            .field("test", test)
            .field("cnt", cnt)
            .field("align_mask", mask)
    });
    never_slower(bars, &format!("{mib} MiB {test} cnt={cnt} mask={mask}"), &r);
    let mut cells = vec![
        bytes.to_string(),
        test.into(),
        cnt.to_string(),
        mask.to_string(),
    ];
    cells.extend(r.cells());
    Ok(cells)
}

// ---- 3. scan speed vs memory bandwidth ----

/// The scans' variants.
const SCAN_VARIANTS: [&str; 3] = ["before", "spacekit", "spacekit-scalar"];

fn scan_table(
    ctx: &Ctx,
    read_buf: &[u64],
    bw: Bandwidth,
    report: &mut Report,
    bars: &mut Bars,
) -> Result<(), BenchError> {
    let scan_bytes: usize = match ctx.mode {
        Mode::Quick => 4 << 20,
        _ => 64 << 20,
    };
    let mut table = Table::new(
        "full-bitmap scans vs single-thread memory bandwidth (the membw read loop sampled alternately with each scan)",
        &["pattern", "bytes", "variant", "time", "GB/s", "membw GB/s", "of membw"],
    );
    let mut suspect = false;
    for pattern in ["all-set", "all-clear"] {
        progress(NAME, &format!("scan {pattern} {} MiB", scan_bytes >> 20));
        for variant in SCAN_VARIANTS {
            let s = scan_case(ctx, read_buf, pattern, variant, scan_bytes)?;
            suspect |= s.frac > 1.2;
            report.push(
                Row::new("scan", variant)
                    .field("pattern", pattern)
                    .field("bytes", scan_bytes)
                    .field("median_ns", s.ns)
                    .field("gbps", s.gbps)
                    .field("membw_gbps", s.membw_gbps)
                    .field("membw_fraction", s.frac),
            );
            table.row(s.cells(pattern, variant, scan_bytes));
            // In --quick mode the scan fits in cache: no bandwidth bar.
            if variant == "spacekit" && pattern == "all-set" && ctx.mode != Mode::Quick {
                scan_bar(bars, &s, scan_bytes, bw);
            }
        }
    }
    report.table(table);
    if ctx.mode == Mode::Quick {
        report.note(
            "clear-bit scan bandwidth: not checked in --quick mode (the bitmap fits in cache)"
                .into(),
        );
    } else if suspect {
        report.note(
            "suspect: faster than memory. The buffer was served from cache, e.g. the host merged \
             identical pages; rerun, or compare with SPACEKIT_TRACE=1 per-sample times."
                .into(),
        );
    }
    Ok(())
}

/// The bar on spacekit's clear-bit scan of an all-set bitmap.
fn scan_bar(bars: &mut Bars, s: &ScanRun, bytes: usize, bw: Bandwidth) {
    bars.check(
        s.frac >= 0.70,
        format!(
            "clear-bit scan of all-set {} MiB: {:.2} GB/s = {:.0}% of membw {:.2} GB/s \
             sampled alongside ({:.2} GB/s at the start of the run) (bar: >= 70%)",
            bytes >> 20,
            s.gbps,
            s.frac * 100.0,
            s.membw_gbps,
            bw.single
        ),
    );
}

/// One full-bitmap scan and the membw read loop sampled alongside it.
struct ScanRun {
    ns: f64,
    gbps: f64,
    membw_gbps: f64,
    /// `gbps / membw_gbps`.
    frac: f64,
}

impl ScanRun {
    fn cells(&self, pattern: &str, variant: &str, bytes: usize) -> Vec<String> {
        vec![
            pattern.into(),
            bytes.to_string(),
            variant.into(),
            fmt_ns(self.ns),
            format!("{:.2}", self.gbps),
            format!("{:.2}", self.membw_gbps),
            format!(
                "{:.0}%{}",
                self.frac * 100.0,
                if self.frac > 1.2 { " (suspect)" } else { "" }
            ),
        ]
    }
}

/// An operation timed once per sample (no batching), as a scan of many
/// megabytes and the memory read loop paired with it are.
fn once<'a>(mut f: impl FnMut() + 'a) -> Op<'a> {
    Op::with_setup((), |_| {}, move |_| f())
}

/// Verifies and times `variant`'s scan of `bytes` of all-set (a clear-bit
/// search) or all-clear (a set-bit search) bitmap, sampled alternately with
/// the membw read loop over `read_buf`.
fn scan_case(
    ctx: &Ctx,
    read_buf: &[u64],
    pattern: &str,
    variant: &'static str,
    bytes: usize,
) -> Result<ScanRun, BenchError> {
    let find_clear = pattern == "all-set";
    let fill = if find_clear { !0u64 } else { 0 };
    let nbits = bytes * 8;
    // A fresh, freshly written buffer per variant: the host may merge
    // identical (zero) pages of a buffer that lives long, after which reads
    // come from one cached page instead of memory.
    // On huge pages where the kernel gives them, as membw's buffer.
    let mut words = membw::huge_vec(bytes / 8, !fill)?;
    black_box(&mut words[..]).fill(fill);
    let view = BitView::new(&words, nbits).map_err(|e| BenchError(e.to_string()))?;
    let scalar = AtLevel(view, Level::scalar());
    let run = || -> Option<usize> {
        match (variant, find_clear) {
            ("before", true) => {
                Some(kernel::find_next_zero_bit(&words, nbits, 0)).filter(|&i| i < nbits)
            }
            ("before", false) => {
                Some(kernel::find_next_bit(&words, nbits, 0)).filter(|&i| i < nbits)
            }
            ("spacekit", true) => view.find_next_clear(0),
            ("spacekit", false) => view.find_next_set(0),
            (_, true) => scalar.find_next_clear(0),
            (_, false) => scalar.find_next_set(0),
        }
    };
    let m = Comparison::new(format!("scan {pattern} ({variant})"))
        .expect(None)
        .variant(
            variant,
            run(),
            once(|| {
                black_box(black_box(&run)());
            }),
        )
        .limit(
            "membw",
            once(|| {
                black_box(membw::read_xor(black_box(read_buf)));
            }),
        )
        .run(&ctx.timer())?;
    let ns = m.ns(variant);
    let gbps = bytes as f64 / ns;
    let membw_gbps = (read_buf.len() * 8) as f64 / m.ns("membw");
    Ok(ScanRun {
        ns,
        gbps,
        membw_gbps,
        frac: gbps / membw_gbps,
    })
}

// ---- 4. find_bit_benchmark-style table ----

fn find_bit_table(ctx: &Ctx, rng: &mut SmallRng, report: &mut Report) -> Result<(), BenchError> {
    for pattern in [Pattern::Random, Pattern::Sparse] {
        let words = pattern.make(rng, SEED_BITS);
        let label = pattern.label();
        progress(NAME, &format!("find_bit ops on the {label} bitmap"));
        println!("\nStart testing find_bit() with {label} bitmap ({SEED_BITS} bits)");
        // The lines go out in the kernel benchmark's style; the HTML report
        // gets them as a table (kept, not printed again).
        let mut table = Table::new(
            &format!("find_bit() with {label} bitmap ({SEED_BITS} bits): lib/find_bit_benchmark.c's loops, whole loop per sample"),
            &["op", "before", "spacekit", "spacekit-scalar", "before/spacekit", "iterations"],
        );
        for op in FindOp::ALL {
            find_bit_case(ctx, &words, pattern, op, report, &mut table)?;
        }
        report.tables.push(table);
    }
    Ok(())
}

/// Verifies and times one find_bit_benchmark loop; prints its line and
/// pushes its rows.
fn find_bit_case(
    ctx: &Ctx,
    words: &[u64],
    pattern: Pattern,
    op: FindOp,
    report: &mut Report,
    table: &mut Table,
) -> Result<(), BenchError> {
    let label = pattern.label();
    let view = BitView::new(words, SEED_BITS).map_err(|e| BenchError(e.to_string()))?;
    let scalar = AtLevel(view, Level::scalar());
    let b = op.run_kernel(words, SEED_BITS);
    let m = Comparison::new(format!("{} on {label}", op.name()))
        .variant(
            "before",
            b,
            batch(|| {
                black_box(op.run_kernel(black_box(words), SEED_BITS));
            }),
        )
        .variant(
            "spacekit",
            op.run_spacekit(&view),
            batch(|| {
                black_box(op.run_spacekit(black_box(&view)));
            }),
        )
        .variant(
            "spacekit-scalar",
            op.run_spacekit(&scalar),
            batch(|| {
                black_box(op.run_spacekit(black_box(&scalar)));
            }),
        )
        .run(&ctx.timer())?;
    println!(
        "{:<24} {:>10.0} ns before, {:>10.0} ns spacekit ({}), {:>8} iterations",
        format!("{}:", op.name()),
        m.ns("before"),
        m.ns("spacekit"),
        m.ratio_cell("before", "spacekit"),
        b.0
    );
    table.row(vec![
        op.name().to_string(),
        fmt_ns(m.ns("before")),
        fmt_ns(m.ns("spacekit")),
        fmt_ns(m.ns("spacekit-scalar")),
        m.ratio_cell("before", "spacekit"),
        b.0.to_string(),
    ]);
    let pattern = match pattern {
        Pattern::Random => "dense",
        Pattern::Sparse => "sparse",
    };
    m.rows(report, |v| {
        Row::new("find_bit", v)
            .field("op", op.name())
            .field("pattern", pattern)
            .field("bits", SEED_BITS)
            .field("iterations", b.0)
    });
    Ok(())
}

/// The operations of lib/find_bit_benchmark.c (plus set-run iteration).
#[derive(Clone, Copy, Debug)]
enum FindOp {
    NextBit,
    NextZeroBit,
    LastBit,
    NthBit,
    SetBitRange,
}

impl FindOp {
    const ALL: [FindOp; 5] = [
        FindOp::NextBit,
        FindOp::NextZeroBit,
        FindOp::LastBit,
        FindOp::NthBit,
        FindOp::SetBitRange,
    ];

    fn name(self) -> &'static str {
        match self {
            FindOp::NextBit => "find_next_bit",
            FindOp::NextZeroBit => "find_next_zero_bit",
            FindOp::LastBit => "find_last_bit",
            FindOp::NthBit => "find_nth_bit",
            FindOp::SetBitRange => "for_each_set_bitrange",
        }
    }

    /// `(iterations, checksum of positions)` with the kernel ports.
    fn run_kernel(self, w: &[u64], size: usize) -> (usize, usize) {
        let (mut cnt, mut sum) = (0usize, 0usize);
        match self {
            FindOp::NextBit | FindOp::NextZeroBit => {
                let mut i = 0;
                while i < size {
                    i = if matches!(self, FindOp::NextBit) {
                        kernel::find_next_bit(w, size, i)
                    } else {
                        kernel::find_next_zero_bit(w, size, i)
                    };
                    if i < size {
                        cnt += 1;
                        sum = sum.wrapping_add(i);
                    }
                    i += 1;
                }
            }
            FindOp::LastBit => {
                let mut len = size;
                while len > 0 {
                    let l = kernel::find_last_bit(w, len);
                    if l >= len {
                        break;
                    }
                    cnt += 1;
                    sum = sum.wrapping_add(l);
                    len = l;
                }
            }
            FindOp::NthBit => {
                let weight: usize = w.iter().map(|x| x.count_ones() as usize).sum();
                for k in 0..NTH_CALLS {
                    let n = k * weight / NTH_CALLS;
                    let i = kernel::find_nth_bit(w, size, n);
                    cnt += 1;
                    sum = sum.wrapping_add(i.min(size));
                }
            }
            FindOp::SetBitRange => kernel::for_each_set_bitrange(w, size, |b, e| {
                cnt += 1;
                sum = sum.wrapping_add(b ^ (e << 20));
            }),
        }
        (cnt, sum)
    }

    /// The same loop through spacekit's API.
    fn run_spacekit<B: Bits>(self, m: &B) -> (usize, usize) {
        let size = m.bit_len();
        let (mut cnt, mut sum) = (0usize, 0usize);
        match self {
            FindOp::NextBit | FindOp::NextZeroBit => {
                let mut i = 0;
                loop {
                    let next = if matches!(self, FindOp::NextBit) {
                        m.find_next_set(i)
                    } else {
                        m.find_next_clear(i)
                    };
                    let Some(p) = next else { break };
                    cnt += 1;
                    sum = sum.wrapping_add(p);
                    i = p + 1;
                }
            }
            FindOp::LastBit => {
                let mut len = size;
                while len > 0 {
                    let Some(l) = m.find_prev_set(len - 1) else {
                        break;
                    };
                    cnt += 1;
                    sum = sum.wrapping_add(l);
                    len = l;
                }
            }
            FindOp::NthBit => {
                let weight = m.count_ones();
                for k in 0..NTH_CALLS {
                    let n = k * weight / NTH_CALLS;
                    cnt += 1;
                    sum = sum.wrapping_add(m.nth_set(n).unwrap_or(size));
                }
            }
            FindOp::SetBitRange => {
                for r in m.set_runs(0) {
                    cnt += 1;
                    sum = sum.wrapping_add(r.start ^ (r.end << 20));
                }
            }
        }
        (cnt, sum)
    }
}

/// Calls per find_nth_bit measurement, spread evenly over the set bits.
const NTH_CALLS: usize = 1000;
