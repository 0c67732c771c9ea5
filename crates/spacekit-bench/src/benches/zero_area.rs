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

use std::hint::black_box;

use baselines::find_bit as kernel;
use baselines::find_bit::AreaVariant;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit::__testing::{find_clear_area_stats, AtLevel};
use spacekit::arch::Level;
use spacekit::bitmap::{BitView, Bits};

use crate::harness::membw;
use crate::{
    batch, fmt_ns, fmt_ratio, progress, verify, Bars, BenchError, Ctx, Mode, Report, Row, Table,
};

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

/// Results of the four area-search variants on one input.
struct AreaRun {
    ns: [f64; 4],
    restarts: [usize; 4],
}

const VARIANTS: [&str; 4] = ["before", "seed", "spacekit", "spacekit-scalar"];

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

impl AreaRun {
    /// One JSON row per variant, each starting from `row(variant)`.
    fn push_rows(&self, report: &mut Report, row: impl Fn(&str) -> Row) {
        for (k, v) in VARIANTS.iter().enumerate() {
            report.push(
                row(v)
                    .field("restarts", self.restarts[k])
                    .field("median_ns", self.ns[k]),
            );
        }
    }

    /// Table cells: restarts, the four times, seed/spacekit, before/spacekit.
    fn cells(&self) -> Vec<String> {
        let (r, ns) = (&self.restarts, &self.ns);
        vec![
            format!("{}/{}/{}", r[0], r[1], r[2]),
            fmt_ns(ns[0]),
            fmt_ns(ns[1]),
            fmt_ns(ns[2]),
            fmt_ns(ns[3]),
            fmt_ratio(ns[1], ns[2]),
            fmt_ratio(ns[0], ns[2]),
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
    verify(
        what,
        &[
            ("before", before),
            ("seed", seed),
            ("spacekit", spk),
            ("spacekit-scalar", sca),
        ],
    )?;
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
    let m = ctx.timer().medians(&mut [
        kernel_loop(AreaVariant::Before),
        kernel_loop(AreaVariant::Seed),
        batch(|| {
            black_box(black_box(&view).find_clear_area_mask(0, nr, mask, 0).ok());
        }),
        batch(|| {
            black_box(black_box(&scalar).find_clear_area_mask(0, nr, mask, 0).ok());
        }),
    ]);
    let ns = [m[0], m[1], m[2], m[3]];
    Ok(AreaRun {
        ns,
        restarts: [r_before, r_seed, s_spk.restarts, s_sca.restarts],
    })
}

/// spacekit must not be slower than the faster of `before` and `seed`.
fn never_slower(bars: &mut Bars, tag: &str, r: &AreaRun) {
    let fastest_peer = r.ns[0].min(r.ns[1]);
    bars.check(
        r.ns[2] <= fastest_peer,
        format!(
            "{tag}: spacekit {} vs fastest of before/seed {} (bar: never slower)",
            fmt_ns(r.ns[2]),
            fmt_ns(fastest_peer)
        ),
    );
}

pub fn run(ctx: &Ctx) -> Result<Report, BenchError> {
    let mut rng = SmallRng::seed_from_u64(ctx.seed);
    // One membw buffer serves the membw rows and the scans' paired samples.
    let read_buf = membw::buffer(ctx)?;
    let (mut report, bw) = membw::measure(ctx, &read_buf)?;
    let mut bars = Bars::new(NAME);

    // ---- 1. seed 000's table ----
    let mut table = area_table(
        "seed 000: bitmap_find_next_zero_area_off, 327,680 bits, start 0, no alignment",
        &["test", "cnt"],
    );
    for pattern in [Pattern::Random, Pattern::Sparse] {
        let words = pattern.make(&mut rng, SEED_BITS);
        for cnt in [8usize, 32, 128, 1024, 4096] {
            progress(NAME, &format!("seed000 {} cnt={cnt}", pattern.test_name()));
            let what = format!("seed000 {} cnt={cnt}", pattern.test_name());
            let r = area_case(ctx, &words, SEED_BITS, cnt, 0, &what)?;
            r.push_rows(&mut report, |v| {
                Row::new("seed000", v)
                    .field("test", pattern.test_name())
                    .field("cnt", cnt)
                    .field("bits", SEED_BITS)
            });
            let mut cells = vec![pattern.test_name().into(), cnt.to_string()];
            cells.extend(r.cells());
            table.row(cells);
            let ratio = r.ns[1] / r.ns[2];
            let tag = format!("{} cnt={cnt}", pattern.test_name());
            if pattern == Pattern::Random && (cnt == 32 || cnt == 128) {
                bars.check(
                    ratio >= 40.0,
                    format!("{tag}: seed/spacekit = {ratio:.1}x (bar: >= 40x)"),
                );
            }
            if pattern == Pattern::Random && (cnt == 1024 || cnt == 4096) {
                bars.check(
                    ratio >= 5.0,
                    format!("{tag}: seed/spacekit = {ratio:.1}x (bar: >= 5x)"),
                );
            }
            never_slower(&mut bars, &tag, &r);
        }
    }
    report.table(table);

    // ---- 2. large bitmaps, with alignment ----
    let sizes: &[usize] = match ctx.mode {
        Mode::Quick => &[1 << 20],
        _ => &[8 << 20, 64 << 20],
    };
    let mut table = area_table(
        "the same search on large bitmaps (align_mask as in the kernel: 2^k - 1)",
        &["bytes", "test", "cnt", "mask"],
    );
    for &bytes in sizes {
        let nbits = bytes * 8;
        for pattern in [Pattern::Random, Pattern::Sparse] {
            let words = pattern.make(&mut rng, nbits);
            for (cnt, mask) in [
                (32usize, 0usize),
                (128, 0),
                (128, 63),
                (1024, 0),
                (1024, 511),
            ] {
                // The kernel loops take seconds per search on 64 MiB of random
                // bits at small cnt; keep the default run to a few minutes.
                if bytes > 8 << 20
                    && ctx.mode != Mode::Full
                    && pattern == Pattern::Random
                    && cnt != 128
                {
                    continue;
                }
                progress(
                    NAME,
                    &format!(
                        "large {} MiB {} cnt={cnt} mask={mask}",
                        bytes >> 20,
                        pattern.test_name()
                    ),
                );
                let what = format!(
                    "{bytes} bytes {} cnt={cnt} mask={mask}",
                    pattern.test_name()
                );
                let r = area_case(ctx, &words, nbits, cnt, mask, &what)?;
                r.push_rows(&mut report, |v| {
                    Row::new("large", v)
                        .field("bytes", bytes)
                        .field("test", pattern.test_name())
                        .field("cnt", cnt)
                        .field("align_mask", mask)
                });
                never_slower(
                    &mut bars,
                    &format!(
                        "{} MiB {} cnt={cnt} mask={mask}",
                        bytes >> 20,
                        pattern.test_name()
                    ),
                    &r,
                );
                let mut cells = vec![
                    bytes.to_string(),
                    pattern.test_name().into(),
                    cnt.to_string(),
                    mask.to_string(),
                ];
                cells.extend(r.cells());
                table.row(cells);
            }
        }
    }
    report.table(table);

    // ---- 3. scan speed vs memory bandwidth ----
    let scan_bytes: usize = match ctx.mode {
        Mode::Quick => 4 << 20,
        _ => 64 << 20,
    };
    let mut table = Table::new(
        "full-bitmap scans vs single-thread memory bandwidth (the membw read loop sampled alternately with each scan)",
        &["pattern", "bytes", "variant", "time", "GB/s", "membw GB/s", "of membw"],
    );
    let mut suspect = false;
    for (pattern, fill) in [("all-set", !0u64), ("all-clear", 0u64)] {
        progress(NAME, &format!("scan {pattern} {} MiB", scan_bytes >> 20));
        let nbits = scan_bytes * 8;
        let find_clear = fill == !0;
        for variant in ["before", "spacekit", "spacekit-scalar"] {
            // A fresh, freshly written buffer per variant: the host may merge
            // identical (zero) pages of a buffer that lives long, after which
            // reads come from one cached page instead of memory.
            let mut words = vec![!fill; scan_bytes / 8];
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
            verify(
                &format!("scan {pattern} ({variant})"),
                &[("expected", None), (variant, run())],
            )?;
            let (ns, read_ns) = ctx.timer().median_pair(
                || {
                    black_box(black_box(&run)());
                },
                || {
                    black_box(membw::read_xor(black_box(&read_buf)));
                },
            );
            let gbps = scan_bytes as f64 / ns;
            let paired = (read_buf.len() * 8) as f64 / read_ns;
            let frac = gbps / paired;
            suspect |= frac > 1.2;
            report.push(
                Row::new("scan", variant)
                    .field("pattern", pattern)
                    .field("bytes", scan_bytes)
                    .field("median_ns", ns)
                    .field("gbps", gbps)
                    .field("membw_gbps", paired)
                    .field("membw_fraction", frac),
            );
            table.row(vec![
                pattern.into(),
                scan_bytes.to_string(),
                variant.into(),
                fmt_ns(ns),
                format!("{gbps:.2}"),
                format!("{paired:.2}"),
                format!(
                    "{:.0}%{}",
                    frac * 100.0,
                    if frac > 1.2 { " (suspect)" } else { "" }
                ),
            ]);
            // In --quick mode the scan fits in cache: no bandwidth bar.
            if variant == "spacekit" && pattern == "all-set" && ctx.mode != Mode::Quick {
                bars.check(
                    frac >= 0.70,
                    format!(
                        "clear-bit scan of all-set {} MiB: {gbps:.2} GB/s = {:.0}% of membw {paired:.2} GB/s \
                         sampled alongside ({:.2} GB/s at the start of the run) (bar: >= 70%)",
                        scan_bytes >> 20,
                        frac * 100.0,
                        bw.single
                    ),
                );
            }
        }
    }
    drop(read_buf);
    report.table(table);
    if suspect && ctx.mode != Mode::Quick {
        println!(
            "(suspect: faster than memory. The buffer was served from cache, e.g. the host merged \
             identical pages; rerun, or compare with SPACEKIT_TRACE=1 per-sample times.)"
        );
    }

    // ---- 4. find_bit_benchmark-style table ----
    for pattern in [Pattern::Random, Pattern::Sparse] {
        let words = pattern.make(&mut rng, SEED_BITS);
        let label = match pattern {
            Pattern::Random => "random-filled",
            Pattern::Sparse => "sparse",
        };
        progress(NAME, &format!("find_bit ops on the {label} bitmap"));
        println!("\nStart testing find_bit() with {label} bitmap ({SEED_BITS} bits)");
        for op in FindOp::ALL {
            let view = BitView::new(&words, SEED_BITS).map_err(|e| BenchError(e.to_string()))?;
            let b = op.run_kernel(&words, SEED_BITS);
            let s = op.run_spacekit(&view);
            let sc = op.run_spacekit(&AtLevel(view, Level::scalar()));
            verify(
                &format!("{} on {label}", op.name()),
                &[("before", b), ("spacekit", s), ("spacekit-scalar", sc)],
            )?;
            let scalar = AtLevel(view, Level::scalar());
            let m = ctx.timer().medians(&mut [
                batch(|| {
                    black_box(op.run_kernel(black_box(&words), SEED_BITS));
                }),
                batch(|| {
                    black_box(op.run_spacekit(black_box(&view)));
                }),
                batch(|| {
                    black_box(op.run_spacekit(black_box(&scalar)));
                }),
            ]);
            let (ns_b, ns_s, ns_sc) = (m[0], m[1], m[2]);
            println!(
                "{:<24} {:>10.0} ns before, {:>10.0} ns spacekit ({}), {:>8} iterations",
                format!("{}:", op.name()),
                ns_b,
                ns_s,
                fmt_ratio(ns_b, ns_s),
                b.0
            );
            for (variant, ns) in [
                ("before", ns_b),
                ("spacekit", ns_s),
                ("spacekit-scalar", ns_sc),
            ] {
                report.push(
                    Row::new("find_bit", variant)
                        .field("op", op.name())
                        .field(
                            "pattern",
                            if pattern == Pattern::Random {
                                "dense"
                            } else {
                                "sparse"
                            },
                        )
                        .field("bits", SEED_BITS)
                        .field("iterations", b.0)
                        .field("median_ns", ns),
                );
            }
        }
    }

    report.bars(bars);
    Ok(report)
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
