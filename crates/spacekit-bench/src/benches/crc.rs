//! `bench crc`: seed 001's incremental CRC-32C experiment, extended.
//!
//! 1. Seed 001's micro-benchmark table over bitmaps of 1 KiB .. 64 KiB, plus
//!    1 MiB and 16 MiB: the median cost of updating a raw CRC-32C after a run
//!    of bits flips, by `spacekit` (`crc32c::flip_range`), by
//!    `spacekit-scalar` (its portable fallback), by `seed` (a port of seed
//!    001's GF(2)-matrix method, `baselines::crc_flip`) and by recomputing the
//!    whole bitmap (`before`). The flips are random ranges: a uniform start
//!    and 1..=64 bits, the size of typical ext4 block allocations (the seed's
//!    method pays per byte of the run, spacekit does not).
//! 2. `combine` (the CRC of A ‖ B from the CRCs of A and B) against the
//!    `crc32c` and `crc-fast` crates' own combine, for several lengths of B.
//! 3. Bulk CRC-32C throughput: spacekit's bulk path (three `crc32` streams
//!    with SSE4.2 and PCLMULQDQ, `crc-fast`'s 512-bit folds from 512 bytes
//!    with AVX-512 and VPCLMULQDQ, else `crc-fast`),
//!    its portable fallback, and both crates called directly.
//!
//! Before any timing, every variant's answer for every flip the timed loops
//! use is checked against a full recompute of the modified buffer, and every
//! combine and bulk answer against the others.
//!
//! Charts (log-log, one series per variant): update time vs bitmap size
//! (`before` being the full recompute), combine time vs len(B), and bulk
//! GB/s vs buffer size.

use std::hint::black_box;

use baselines::crc_flip::SeedFlip;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use spacekit::crc32c::{self, CrcError, Engine};

use crate::chart::{Chart, XAxis};
use crate::context::{BenchError, Ctx, Mode};
use crate::harness::{
    batch, fmt_ns, progress, verify, Bars, Comparison, Medians, Op, Report, Row, Table,
};

const NAME: &str = "crc";
/// Seed 001's kunit seed.
const SEED: u32 = 0x1234_5678;
/// Random flips per size (cycled through by the timed loops).
const FLIPS: usize = 1024;
/// Longest random run, in bits.
const MAX_RUN: u64 = 64;
/// Random CRC pairs the timed combine loops cycle through.
const PAIRS: usize = 256;
/// Of those, how many every combine variant is checked on.
const PAIRS_CHECKED: usize = 8;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

/// Runs `bench crc`.
pub fn run(ctx: &Ctx) -> Result<Report, BenchError> {
    let mut rng = SmallRng::seed_from_u64(ctx.seed);
    let mut report = Report::default();
    let mut bars = Bars::new(NAME);
    flip_table(ctx, &mut rng, &mut report, &mut bars)?;
    combine_table(ctx, &mut rng, &mut report, &mut bars)?;
    bulk_table(ctx, &mut rng, &mut report, &mut bars)?;
    report.bars(bars);
    Ok(report)
}

fn random_bytes(rng: &mut SmallRng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill_bytes(&mut v);
    v
}

fn flip_bits(buf: &mut [u8], first: u64, n: u64) {
    for i in first..first + n {
        buf[(i / 8) as usize] ^= 1 << (i % 8);
    }
}

fn size_name(size: u64) -> String {
    if size >= MIB {
        format!("{} MiB", size / MIB)
    } else {
        format!("{} KiB", size / KIB)
    }
}

/// A log-log chart over the rows of `cases`, one series per variant: x
/// the field `size` (labelled `x`), y the field `y.0` (labelled `y.1`).
fn size_chart(report: &Report, cases: &[&str], title: &str, x: &str, y: (&str, &str)) -> Chart {
    Chart::new(title, x, y.1, XAxis::Log, true).from_rows(
        report
            .rows
            .iter()
            .filter(|r| r.str("case").is_some_and(|c| cases.contains(&c))),
        "size",
        y.0,
    )
}

// ---- 1. seed 001's table: flip_range ----

/// Bitmap sizes of seed 001's table, plus 1 MiB and 16 MiB.
const FLIP_SIZES: [u64; 9] = [
    KIB,
    2 * KIB,
    4 * KIB,
    8 * KIB,
    16 * KIB,
    32 * KIB,
    64 * KIB,
    MIB,
    16 * MIB,
];
/// The sizes `--quick` runs.
const FLIP_SIZES_QUICK: [u64; 3] = [KIB, 64 * KIB, MIB];

/// The three ways of updating a CRC after a flip.
struct Flippers {
    fast: Engine,
    scalar: Engine,
    seed: SeedFlip,
}

fn flip_table(
    ctx: &Ctx,
    rng: &mut SmallRng,
    report: &mut Report,
    bars: &mut Bars,
) -> Result<(), BenchError> {
    let sizes: &[u64] = match ctx.mode {
        Mode::Quick => &FLIP_SIZES_QUICK,
        _ => &FLIP_SIZES,
    };
    let f = Flippers {
        fast: Engine::detect(),
        scalar: Engine::portable(),
        seed: SeedFlip::new(*sizes.iter().max().unwrap_or(&KIB)),
    };
    let mut table = flip_table_header(&f);
    let mut worst_flip: f64 = 0.0;
    for &size in sizes {
        let m = flip_case(ctx, rng, &f, size)?;
        m.rows(report, |v| {
            Row::new(if v == "before" { "full" } else { "flip" }, v).field("size", size)
        });
        table.row(vec![
            size_name(size),
            m.cell("spacekit"),
            m.cell("seed"),
            m.cell("before"),
            m.cell("spacekit-scalar"),
            m.ratio_cell("before", "spacekit"),
            m.ratio_cell("seed", "spacekit"),
        ]);
        worst_flip = worst_flip.max(m.ns("spacekit"));
        if size == 64 * KIB {
            flip_bars(bars, &m);
        }
    }
    report.table(table);
    bars.check(
        worst_flip <= 40.0,
        format!(
            "slowest flip_range median over all sizes {} (bar: <= 40 ns)",
            fmt_ns(worst_flip)
        ),
    );
    let chart = size_chart(
        report,
        &["flip", "full"],
        &format!(
            "crc: update a bitmap's CRC-32C after a random 1..={MAX_RUN}-bit flip \
             (before = full recompute)"
        ),
        "bitmap bytes",
        ("median_ns", "ns per update"),
    );
    report.chart(chart);
    Ok(())
}

/// The table of seed 001's experiment, naming the engines.
fn flip_table_header(f: &Flippers) -> Table {
    Table::new(
        &format!(
            "seed 001: update a bitmap's CRC-32C after a random run of 1..={MAX_RUN} bits flips \
             (median ns per update; multiply unit {}, seed tables {} bytes)",
            f.fast.names().1,
            f.seed.table_bytes()
        ),
        &[
            "bitmap",
            "flip(spacekit)",
            "flip(seed)",
            "full(before)",
            "flip(scalar)",
            "vs full",
            "vs seed",
        ],
    )
}

/// The bars at 64 KiB: against a full recompute and against the seed.
fn flip_bars(bars: &mut Bars, m: &Medians) {
    bars.check(
        m.ratio("before", "spacekit") >= 50.0,
        format!(
            "64 KiB: flip_range {} vs full recompute {} = {} (bar: >= 50x)",
            m.cell("spacekit"),
            m.cell("before"),
            m.ratio_cell("before", "spacekit")
        ),
    );
    bars.check(
        m.ratio("seed", "spacekit") >= 1.5,
        format!(
            "64 KiB: flip_range {} vs seed's method {} = {} (bar: >= 1.5x)",
            m.cell("spacekit"),
            m.cell("seed"),
            m.ratio_cell("seed", "spacekit")
        ),
    );
}

/// One flip's answer: `(first bit, bits, CRC after the flip)`.
type FlipAnswer = (u64, u64, Result<u32, CrcError>);

/// Verifies every variant flip by flip against a full recompute of the
/// modified buffer, then times the updates on a `size`-byte bitmap.
fn flip_case(
    ctx: &Ctx,
    rng: &mut SmallRng,
    f: &Flippers,
    size: u64,
) -> Result<Medians, BenchError> {
    progress(NAME, &format!("flip_range on a {size}-byte bitmap"));
    let mut buf = random_bytes(rng, size as usize);
    let bits = size * 8;
    let flips: Vec<(u64, u64)> = (0..FLIPS)
        .map(|_| {
            let first = rng.random_range(0..bits);
            let n = rng.random_range(1..=MAX_RUN.min(bits - first));
            (first, n)
        })
        .collect();

    // Correctness: each flip applied to the buffer's true CRC before it.
    let mut crc = crc32c::raw(SEED, &buf);
    let (mut spk, mut seed, mut full, mut sca) = (vec![], vec![], vec![], vec![]);
    for &(first, n) in &flips {
        spk.push((first, n, f.fast.flip_range(crc, size, first, n)));
        sca.push((first, n, f.scalar.flip_range(crc, size, first, n)));
        seed.push((first, n, Ok(f.seed.flip_range(crc, size, first, n))));
        flip_bits(&mut buf, first, n);
        crc = crc32c::raw(SEED, &buf);
        full.push((first, n, Ok(crc)));
    }

    // Timing: each call applies the next flip of the list to a running CRC.
    let (mut s1, mut s2, mut s3) = ((0, crc), (0, crc), (0, crc));
    let m = Comparison::<Vec<FlipAnswer>>::lists(format!(
        "the CRC after each of {FLIPS} flips of {size} bytes"
    ))
    .variant(
        "spacekit",
        spk,
        running(&flips, &mut s1, |c, first, n| {
            f.fast
                .flip_range(c, black_box(size), first, n)
                .unwrap_or_default()
        }),
    )
    .variant(
        "seed",
        seed,
        running(&flips, &mut s2, |c, first, n| {
            f.seed.flip_range(c, black_box(size), first, n)
        }),
    )
    .variant(
        "before",
        full,
        batch(|| {
            black_box(crc32c::raw(SEED, black_box(&buf)));
        }),
    )
    .variant(
        "spacekit-scalar",
        sca,
        running(&flips, &mut s3, |c, first, n| {
            f.scalar
                .flip_range(c, black_box(size), first, n)
                .unwrap_or_default()
        }),
    )
    .run(&ctx.timer())?;
    black_box((s1, s2, s3));
    Ok(m)
}

/// An operation that applies the next of `flips` (cycling) to the running
/// CRC in `state` (`(flips applied, CRC)`) with `update(crc, first, n)`.
fn running<'a>(
    flips: &'a [(u64, u64)],
    state: &'a mut (usize, u32),
    update: impl Fn(u32, u64, u64) -> u32 + 'a,
) -> Op<'a> {
    batch(move || {
        let (first, n) = flips[state.0 % FLIPS];
        state.0 += 1;
        state.1 = update(state.1, first, n);
    })
}

// ---- 2. combine ----

fn crcfast_combine(a: u32, b: u32, len_b: u64) -> u32 {
    crc_fast::checksum_combine(
        crc_fast::CrcAlgorithm::Crc32Iscsi,
        u64::from(a),
        u64::from(b),
        len_b,
    ) as u32
}

fn combine_table(
    ctx: &Ctx,
    rng: &mut SmallRng,
    report: &mut Report,
    bars: &mut Bars,
) -> Result<(), BenchError> {
    progress(NAME, "combine");
    let lens: &[u64] = match ctx.mode {
        Mode::Quick => &[4 * KIB, MIB],
        _ => &[64, 4 * KIB, 64 * KIB, MIB, 1024 * MIB],
    };
    let mut table = Table::new(
        "combine: CRC-32C of A||B from CRC(A), CRC(B) and len(B) (median ns)",
        &[
            "len(B)",
            "spacekit",
            "crc32c",
            "crc-fast",
            "vs crc32c",
            "vs crc-fast",
        ],
    );
    combine_on_data(rng, lens)?;
    let pairs: Vec<(u32, u32)> = (0..PAIRS).map(|_| (rng.random(), rng.random())).collect();
    for &len in lens {
        let m = combine_case(ctx, &pairs, len)?;
        m.rows(report, |v| Row::new("combine", v).field("size", len));
        table.row(vec![
            len.to_string(),
            m.cell("spacekit"),
            m.cell("crc32c"),
            m.cell("crc-fast"),
            m.ratio_cell("crc32c", "spacekit"),
            m.ratio_cell("crc-fast", "spacekit"),
        ]);
        bars.check(
            m.ratio("crc32c", "spacekit") >= 100.0 && m.ratio("crc-fast", "spacekit") >= 100.0,
            format!(
                "combine len(B)={len}: spacekit {} vs crc32c {} ({}) and crc-fast {} ({}) (bar: >= 100x both)",
                m.cell("spacekit"),
                m.cell("crc32c"),
                m.ratio_cell("crc32c", "spacekit"),
                m.cell("crc-fast"),
                m.ratio_cell("crc-fast", "spacekit")
            ),
        );
    }
    report.table(table);
    let chart = size_chart(
        report,
        &["combine"],
        "crc: combine (CRC of A||B from CRC(A), CRC(B) and len(B)) vs len(B)",
        "len(B), bytes",
        ("median_ns", "ns per combine"),
    );
    report.chart(chart);
    Ok(())
}

/// Correctness on real data for the lengths we can hold: every combine
/// against the CRC of the concatenation.
fn combine_on_data(rng: &mut SmallRng, lens: &[u64]) -> Result<(), BenchError> {
    let a = random_bytes(rng, 1000);
    for &len in lens.iter().filter(|&&l| l <= 16 * MIB) {
        let b = random_bytes(rng, len as usize);
        let mut ab = a.clone();
        ab.extend_from_slice(&b);
        let (ca, cb) = (crc32c::checksum(&a), crc32c::checksum(&b));
        verify(
            &format!("combine with len(B) = {len}"),
            &[
                ("full", crc32c::checksum(&ab)),
                ("spacekit", crc32c::combine(ca, cb, len)),
                ("crc32c", ::crc32c::crc32c_combine(ca, cb, len as usize)),
                ("crc-fast", crcfast_combine(ca, cb, len)),
            ],
        )?;
    }
    Ok(())
}

/// Verifies the three combines on the first random pairs, then times each
/// cycling through all of them.
fn combine_case(ctx: &Ctx, pairs: &[(u32, u32)], len: u64) -> Result<Medians, BenchError> {
    let answers = |g: &dyn Fn(u32, u32) -> u32| -> Vec<u32> {
        pairs[..PAIRS_CHECKED]
            .iter()
            .map(|&(x, y)| g(x, y))
            .collect()
    };
    let (mut i, mut j, mut k) = (0usize, 0usize, 0usize);
    Comparison::lists(format!("combine of random CRCs with len(B) = {len}"))
        .variant(
            "spacekit",
            answers(&|x, y| crc32c::combine(x, y, len)),
            batch(|| {
                let (x, y) = pairs[i % PAIRS];
                i += 1;
                black_box(crc32c::combine(x, y, black_box(len)));
            }),
        )
        .variant(
            "crc32c",
            answers(&|x, y| ::crc32c::crc32c_combine(x, y, len as usize)),
            batch(|| {
                let (x, y) = pairs[j % PAIRS];
                j += 1;
                black_box(::crc32c::crc32c_combine(x, y, black_box(len as usize)));
            }),
        )
        .variant(
            "crc-fast",
            answers(&|x, y| crcfast_combine(x, y, len)),
            batch(|| {
                let (x, y) = pairs[k % PAIRS];
                k += 1;
                black_box(crcfast_combine(x, y, black_box(len)));
            }),
        )
        .run(&ctx.timer())
}

// ---- 3. bulk throughput ----

fn bulk_table(
    ctx: &Ctx,
    rng: &mut SmallRng,
    report: &mut Report,
    bars: &mut Bars,
) -> Result<(), BenchError> {
    let sizes: &[u64] = match ctx.mode {
        Mode::Quick => &[4 * KIB, 64 * KIB, MIB],
        _ => &[4 * KIB, 64 * KIB, MIB, 16 * MIB],
    };
    let (bulk_name, _) = Engine::detect().names();
    let mut table = Table::new(
        &format!("bulk CRC-32C throughput (GB/s; spacekit's bulk path is {bulk_name})"),
        &[
            "bytes",
            "spacekit",
            "crc32c",
            "crc-fast",
            "spacekit-scalar",
            "vs faster crate",
        ],
    );
    for &size in sizes {
        let m = bulk_case(ctx, rng, size)?;
        let gbps = |v: &str| size as f64 / m.ns(v);
        m.rows(report, |v| {
            Row::new("bulk", v)
                .field("size", size)
                .field("gbps", gbps(v))
        });
        let best_crate = gbps("crc32c").max(gbps("crc-fast"));
        table.row(vec![
            size.to_string(),
            format!("{:.1}", gbps("spacekit")),
            format!("{:.1}", gbps("crc32c")),
            format!("{:.1}", gbps("crc-fast")),
            format!("{:.2}", gbps("spacekit-scalar")),
            format!("{:.0}%", 100.0 * gbps("spacekit") / best_crate),
        ]);
        if size == 64 * KIB || size == MIB {
            bars.check(
                gbps("spacekit") >= 0.9 * best_crate,
                format!(
                    "bulk {size} bytes: spacekit {:.1} GB/s vs faster crate {:.1} GB/s = {:.0}% (bar: >= 90%)",
                    gbps("spacekit"),
                    best_crate,
                    100.0 * gbps("spacekit") / best_crate
                ),
            );
        }
    }
    report.table(table);
    let chart = size_chart(
        report,
        &["bulk"],
        "crc: bulk CRC-32C throughput vs buffer size",
        "buffer bytes",
        ("gbps", "GB/s"),
    );
    report.chart(chart);
    Ok(())
}

/// Verifies and times the bulk CRC of `size` random bytes.
fn bulk_case(ctx: &Ctx, rng: &mut SmallRng, size: u64) -> Result<Medians, BenchError> {
    progress(NAME, &format!("bulk CRC over {size} bytes"));
    let buf = random_bytes(rng, size as usize);
    let fast = Engine::detect();
    let scalar = Engine::portable();
    Comparison::new(format!("CRC-32C of {size} random bytes"))
        .variant(
            "spacekit",
            fast.checksum(&buf),
            batch(|| {
                black_box(fast.raw(!0, black_box(&buf)));
            }),
        )
        .variant(
            "crc32c",
            ::crc32c::crc32c(&buf),
            batch(|| {
                black_box(::crc32c::crc32c(black_box(&buf)));
            }),
        )
        .variant(
            "crc-fast",
            crc_fast::crc32_iscsi(&buf),
            batch(|| {
                black_box(crc_fast::crc32_iscsi(black_box(&buf)));
            }),
        )
        .variant(
            "spacekit-scalar",
            scalar.checksum(&buf),
            batch(|| {
                black_box(scalar.raw(!0, black_box(&buf)));
            }),
        )
        .run(&ctx.timer())
}
