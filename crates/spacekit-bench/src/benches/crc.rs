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
//! 3. Bulk CRC-32C throughput: spacekit's bulk path (`crc-fast` underneath),
//!    its portable fallback, and both crates called directly.
//!
//! Before any timing, every variant's answer for every flip the timed loops
//! use is checked against a full recompute of the modified buffer, and every
//! combine and bulk answer against the others.

use std::hint::black_box;

use baselines::crc_flip::SeedFlip;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use spacekit::crc32c::{self, Engine};

use crate::{
    batch, fmt_ns, fmt_ratio, progress, verify, Bars, BenchError, Ctx, Mode, Report, Row, Table,
};

const NAME: &str = "crc";
/// Seed 001's kunit seed.
const SEED: u32 = 0x1234_5678;
/// Random flips per size (cycled through by the timed loops).
const FLIPS: usize = 1024;
/// Longest random run, in bits.
const MAX_RUN: u64 = 64;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

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

fn flip_table(
    ctx: &Ctx,
    rng: &mut SmallRng,
    report: &mut Report,
    bars: &mut Bars,
) -> Result<(), BenchError> {
    let sizes: &[u64] = match ctx.mode {
        Mode::Quick => &[KIB, 64 * KIB, MIB],
        _ => &[
            KIB,
            2 * KIB,
            4 * KIB,
            8 * KIB,
            16 * KIB,
            32 * KIB,
            64 * KIB,
            MIB,
            16 * MIB,
        ],
    };
    let timer = ctx.timer();
    let fast = Engine::detect();
    let scalar = Engine::portable();
    let seed_port = SeedFlip::new(*sizes.iter().max().unwrap_or(&KIB));
    let mut table = Table::new(
        &format!(
            "seed 001: update a bitmap's CRC-32C after a random run of 1..={MAX_RUN} bits flips \
             (median ns per update; multiply unit {}, seed tables {} bytes)",
            fast.names().1,
            seed_port.table_bytes()
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
    );
    let mut worst_flip: f64 = 0.0;
    for &size in sizes {
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

        // Correctness: every variant against a full recompute, flip by flip.
        let mut crc = crc32c::raw(SEED, &buf);
        for &(first, n) in &flips {
            let a = fast.flip_range(crc, size, first, n);
            let b = scalar.flip_range(crc, size, first, n);
            let c = seed_port.flip_range(crc, size, first, n);
            flip_bits(&mut buf, first, n);
            let full = crc32c::raw(SEED, &buf);
            verify(
                &format!("CRC after flipping bits {first}+{n} of {size} bytes"),
                &[
                    ("before", Ok(full)),
                    ("spacekit", a),
                    ("spacekit-scalar", b),
                    ("seed", Ok(c)),
                ],
            )?;
            crc = full;
        }

        // Timing: each call applies the next flip of the list to a running CRC.
        let mut i = 0usize;
        let mut c1 = crc;
        let mut c2 = crc;
        let mut c3 = crc;
        let mut i2 = 0usize;
        let mut i3 = 0usize;
        let m = timer.medians(&mut [
            batch(|| {
                let (f, n) = flips[i % FLIPS];
                i += 1;
                c1 = fast
                    .flip_range(c1, black_box(size), f, n)
                    .unwrap_or_default();
            }),
            batch(|| {
                let (f, n) = flips[i2 % FLIPS];
                i2 += 1;
                c2 = seed_port.flip_range(c2, black_box(size), f, n);
            }),
            batch(|| {
                black_box(crc32c::raw(SEED, black_box(&buf)));
            }),
            batch(|| {
                let (f, n) = flips[i3 % FLIPS];
                i3 += 1;
                c3 = scalar
                    .flip_range(c3, black_box(size), f, n)
                    .unwrap_or_default();
            }),
        ]);
        black_box((c1, c2, c3));
        let (spk, seed, full, sca) = (m[0], m[1], m[2], m[3]);
        for (case, variant, ns) in [
            ("flip", "spacekit", spk),
            ("flip", "seed", seed),
            ("full", "before", full),
            ("flip", "spacekit-scalar", sca),
        ] {
            report.push(
                Row::new(case, variant)
                    .field("size", size)
                    .field("median_ns", ns),
            );
        }
        table.row(vec![
            size_name(size),
            fmt_ns(spk),
            fmt_ns(seed),
            fmt_ns(full),
            fmt_ns(sca),
            fmt_ratio(full, spk),
            fmt_ratio(seed, spk),
        ]);
        worst_flip = worst_flip.max(spk);
        if size == 64 * KIB {
            bars.check(
                full / spk >= 50.0,
                format!(
                    "64 KiB: flip_range {} vs full recompute {} = {} (bar: >= 50x)",
                    fmt_ns(spk),
                    fmt_ns(full),
                    fmt_ratio(full, spk)
                ),
            );
            bars.check(
                seed / spk >= 1.5,
                format!(
                    "64 KiB: flip_range {} vs seed's method {} = {} (bar: >= 1.5x)",
                    fmt_ns(spk),
                    fmt_ns(seed),
                    fmt_ratio(seed, spk)
                ),
            );
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
    Ok(())
}

fn size_name(size: u64) -> String {
    if size >= MIB {
        format!("{} MiB", size / MIB)
    } else {
        format!("{} KiB", size / KIB)
    }
}

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
    let timer = ctx.timer();
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
    // Correctness on real data for the lengths we can hold.
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
    let pairs: Vec<(u32, u32)> = (0..256).map(|_| (rng.random(), rng.random())).collect();
    for &len in lens {
        for &(x, y) in &pairs[..8] {
            verify(
                &format!("combine of random CRCs with len(B) = {len}"),
                &[
                    ("spacekit", crc32c::combine(x, y, len)),
                    ("crc32c", ::crc32c::crc32c_combine(x, y, len as usize)),
                    ("crc-fast", crcfast_combine(x, y, len)),
                ],
            )?;
        }
        let (mut i, mut j, mut k) = (0usize, 0usize, 0usize);
        let ops = &mut [
            batch(|| {
                let (x, y) = pairs[i % 256];
                i += 1;
                black_box(crc32c::combine(x, y, black_box(len)));
            }),
            batch(|| {
                let (x, y) = pairs[j % 256];
                j += 1;
                black_box(::crc32c::crc32c_combine(x, y, black_box(len as usize)));
            }),
            batch(|| {
                let (x, y) = pairs[k % 256];
                k += 1;
                black_box(crcfast_combine(x, y, black_box(len)));
            }),
        ];
        let m = timer.medians(ops);
        for (variant, ns) in [("spacekit", m[0]), ("crc32c", m[1]), ("crc-fast", m[2])] {
            report.push(
                Row::new("combine", variant)
                    .field("size", len)
                    .field("median_ns", ns),
            );
        }
        table.row(vec![
            len.to_string(),
            fmt_ns(m[0]),
            fmt_ns(m[1]),
            fmt_ns(m[2]),
            fmt_ratio(m[1], m[0]),
            fmt_ratio(m[2], m[0]),
        ]);
        bars.check(
            m[1] / m[0] >= 100.0 && m[2] / m[0] >= 100.0,
            format!(
                "combine len(B)={len}: spacekit {} vs crc32c {} ({}) and crc-fast {} ({}) (bar: >= 100x both)",
                fmt_ns(m[0]),
                fmt_ns(m[1]),
                fmt_ratio(m[1], m[0]),
                fmt_ns(m[2]),
                fmt_ratio(m[2], m[0])
            ),
        );
    }
    report.table(table);
    Ok(())
}

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
    let timer = ctx.timer();
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
        progress(NAME, &format!("bulk CRC over {size} bytes"));
        let buf = random_bytes(rng, size as usize);
        let fast = Engine::detect();
        let scalar = Engine::portable();
        verify(
            &format!("CRC-32C of {size} random bytes"),
            &[
                ("spacekit", fast.checksum(&buf)),
                ("crc32c", ::crc32c::crc32c(&buf)),
                ("crc-fast", crc_fast::crc32_iscsi(&buf)),
                ("spacekit-scalar", scalar.checksum(&buf)),
            ],
        )?;
        let ops = &mut [
            batch(|| {
                black_box(fast.raw(!0, black_box(&buf)));
            }),
            batch(|| {
                black_box(::crc32c::crc32c(black_box(&buf)));
            }),
            batch(|| {
                black_box(crc_fast::crc32_iscsi(black_box(&buf)));
            }),
            batch(|| {
                black_box(scalar.raw(!0, black_box(&buf)));
            }),
        ];
        let m = timer.medians(ops);
        let gbps: Vec<f64> = m.iter().map(|ns| size as f64 / ns).collect();
        for (variant, (ns, g)) in ["spacekit", "crc32c", "crc-fast", "spacekit-scalar"]
            .iter()
            .zip(m.iter().zip(&gbps))
        {
            report.push(
                Row::new("bulk", variant)
                    .field("size", size)
                    .field("median_ns", *ns)
                    .field("gbps", *g),
            );
        }
        let best_crate = gbps[1].max(gbps[2]);
        table.row(vec![
            size.to_string(),
            format!("{:.1}", gbps[0]),
            format!("{:.1}", gbps[1]),
            format!("{:.1}", gbps[2]),
            format!("{:.2}", gbps[3]),
            format!("{:.0}%", 100.0 * gbps[0] / best_crate),
        ]);
        if size == 64 * KIB || size == MIB {
            bars.check(
                gbps[0] >= 0.9 * best_crate,
                format!(
                    "bulk {size} bytes: spacekit {:.1} GB/s vs faster crate {:.1} GB/s = {:.0}% (bar: >= 90%)",
                    gbps[0],
                    best_crate,
                    100.0 * gbps[0] / best_crate
                ),
            );
        }
    }
    report.table(table);
    Ok(())
}
