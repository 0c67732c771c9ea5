//! `bench ext4-fallocate`: seed 001's end-to-end table. A process
//! fallocates all the free space of an ext4 block group in fixed-size
//! requests (16 blocks); each request finds free blocks, marks them in the
//! group's block bitmap and brings the bitmap's checksum up to date:
//!
//! * `before`: a first-fit scan of the bitmap from the start of the group
//!   (the kernel's `bitmap_find_next_zero_area_off` loop over
//!   `find_next_zero_bit` / `find_next_bit`, word at a time, ported in
//!   `baselines::find_bit`), then a full CRC-32C of the bitmap's checksummed
//!   bytes: the cost seed 001's "Before" column pays;
//! * `flip`: the same scan, with the checksum updated by `flip_range`
//!   (`CheckedBitmap`): the seed's "+crc_flip_range";
//! * `spacekit`: first fit from ext4's goal (the block after the previous
//!   allocation, wrapping once) through the `FreeSpaceIndex` a
//!   `CheckedBitmap` owns, kept in step with the bitmap and its checksum
//!   (`flip_range`) by every change: the seed's "+free_space_tree".
//!
//! Block sizes 1 KiB to 64 KiB, with the blocks per group e2fsprogs allows
//! (at most 65,528; `source` `image`, the group's starting bitmap read from
//! an image made by mkfs.ext4 when it is installed) and the kernel's limit,
//! block size × 8 (up to 524,288 at 64 KiB; `source` `memory`, in-memory
//! groups, since stock mke2fs cannot make them). Throughput is the space
//! allocated per second (blocks × block size / time), as in the seed's
//! table. All three variants must make the same allocations and end with
//! the same checksum (equal to a fresh computation) before anything is
//! timed.
//!
//! A second table times one first-fit query for 64 blocks aligned to 64 on
//! absolute block numbers in a fragmented 524,288-bit group (free runs of at
//! most 50 bits everywhere except one region near the end): `scan` is the
//! bitmap engine's `find_clear_area` from the start, `spacekit` the index.
//!
//! JSON rows: case `fallocate` with `block_size`, `blocks_per_group`,
//! `source`, `allocs`, `median_ns` (one whole group) and `gbps`; case
//! `first-fit` with `bits`, `median_ns`, variants `scan` and `spacekit`.

use std::hint::black_box;

use baselines::find_bit::{self, AreaVariant};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit::bitmap::{Bitmap, Bits, BitsMut};
use spacekit::checked_bitmap::CheckedBitmap;
use spacekit::crc32c;
use spacekit::freespace::FreeSpaceIndex;

use super::ext4_images::{self, Group};
use crate::chart::{Chart, XAxis};
use crate::context::{BenchError, Ctx, Mode};
use crate::harness::{batch, progress, verify, Bars, Comparison, Medians, Report, Row, Table};

const NAME: &str = "ext4-fallocate";
/// Blocks per request.
const REQ: usize = 16;
/// A checksum seed (any value: every variant uses the same).
const SEED: u32 = 0x5EED_C5C5;

/// What one fill did: allocations, a digest of their positions, and the
/// final checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fill {
    allocs: u64,
    digest: u64,
    crc: u32,
}

fn mix(d: u64, s: usize) -> u64 {
    (d ^ s as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(17)
}

fn csum_len(g: &Group) -> usize {
    g.blocks / 8
}

/// The kernel's first-fit scan from the start of the group (word at a
/// time), as the seed's "before" and "+crc_flip_range" columns run it.
fn kernel_scan(words: &[u64], blocks: usize) -> Option<usize> {
    let (i, _) =
        find_bit::find_next_zero_area_off(words, blocks, 0, REQ, 0, 0, AreaVariant::Before);
    (i < blocks).then_some(i)
}

fn fill_before(g: &Group) -> Fill {
    let mut map = g.bitmap.clone();
    let n = csum_len(g);
    let mut f = Fill {
        allocs: 0,
        digest: 0,
        crc: crc32c::raw_words(SEED, map.as_words(), n),
    };
    while let Some(s) = kernel_scan(map.as_words(), g.blocks) {
        if map.set_range(s..s + REQ).is_err() {
            break;
        }
        f.crc = crc32c::raw_words(SEED, map.as_words(), n);
        f.allocs += 1;
        f.digest = mix(f.digest, s);
    }
    f
}

fn checked(g: &Group) -> CheckedBitmap {
    let bytes = g.bitmap.to_le_bytes();
    CheckedBitmap::from_bytes(&bytes[..g.blocks.div_ceil(8)], SEED, csum_len(g))
        .expect("the bitmap's own bytes")
}

fn fill_flip(g: &Group, start: &CheckedBitmap) -> Fill {
    let mut map = start.clone();
    let mut f = Fill {
        allocs: 0,
        digest: 0,
        crc: map.checksum(),
    };
    while let Some(s) = kernel_scan(map.bitmap().as_words(), g.blocks) {
        if map.set_range(s..s + REQ).is_err() {
            break;
        }
        f.allocs += 1;
        f.digest = mix(f.digest, s);
    }
    f.crc = map.checksum();
    f
}

/// `start` carries its free-space index over the group's blocks; every
/// `set_range` brings checksum and index up to date.
fn fill_spacekit(start: &CheckedBitmap) -> Fill {
    let mut map = start.clone();
    let mut f = Fill {
        allocs: 0,
        digest: 0,
        crc: map.checksum(),
    };
    // ext4's goal: the block after the previous allocation (first fit from
    // there, wrapping once; the same blocks as a scan from the start, since
    // everything before the goal is taken or too short).
    let mut goal = 0;
    while let Ok(Some(s)) = map.first_fit(REQ, 1, 0, goal) {
        if map.set_range(s..s + REQ).is_err() {
            break;
        }
        f.allocs += 1;
        f.digest = mix(f.digest, s);
        goal = s + REQ;
    }
    f.crc = map.checksum();
    f
}

/// An in-memory group: the first blocks hold a backup superblock and group
/// descriptors, the rest is free.
fn memory_group(block_size: u64) -> Group {
    let blocks = (block_size * 8) as usize;
    let mut bitmap = Bitmap::new(blocks);
    let _ = bitmap.set_range(0..3);
    Group {
        block_size,
        blocks,
        bitmap,
        source: "memory",
    }
}

const SIZES: [u64; 7] = [
    1 << 10,
    2 << 10,
    4 << 10,
    8 << 10,
    16 << 10,
    32 << 10,
    64 << 10,
];

/// Verifies and times the three variants on one group; returns the medians
/// (one whole group per call) and the number of allocations.
fn group_case(ctx: &Ctx, g: &Group) -> Result<(Medians, u64), BenchError> {
    progress(
        NAME,
        &format!(
            "{} KiB blocks, {} blocks per group ({})",
            g.block_size >> 10,
            g.blocks,
            g.source
        ),
    );
    let start = checked(g);
    let indexed = start
        .clone()
        .with_index(g.blocks)
        .map_err(|e| BenchError(format!("index: {e}")))?;
    let spk = fill_spacekit(&indexed);
    // The final checksum is a fresh computation's.
    let mut copy = g.bitmap.clone();
    while let Ok(Some(s)) = copy.find_clear_area(0, REQ, 1, 0) {
        let _ = copy.set_range(s..s + REQ);
    }
    verify(
        "final checksum",
        &[
            (
                "fresh",
                crc32c::raw_words(SEED, copy.as_words(), csum_len(g)),
            ),
            ("spacekit", spk.crc),
        ],
    )?;
    let m = Comparison::new(format!("fallocate {} blocks/group", g.blocks))
        .variant(
            "before",
            fill_before(g),
            batch(|| {
                black_box(fill_before(g));
            }),
        )
        .variant(
            "flip",
            fill_flip(g, &start),
            batch(|| {
                black_box(fill_flip(g, &start));
            }),
        )
        .variant(
            "spacekit",
            spk,
            batch(|| {
                black_box(fill_spacekit(&indexed));
            }),
        )
        .run(&ctx.timer())?;
    Ok((m, spk.allocs))
}

/// Runs the benchmark.
pub fn run(ctx: &Ctx) -> Result<Report, BenchError> {
    let mut report = Report::default();
    let mut bars = Bars::new(NAME);
    let sizes: &[u64] = match ctx.mode {
        Mode::Quick => &[4 << 10, 64 << 10],
        _ => &SIZES,
    };
    let mut groups: Vec<Group> = Vec::new();
    groups.extend(ext4_images::groups(ctx, sizes)?);
    groups.extend(sizes.iter().map(|&b| memory_group(b)));
    let mut table = Table::new(
        "seed 001: fallocate of a whole block group in 16-block requests, GB/s of space allocated (one group per call)",
        &["block size", "blocks/group", "source", "allocs", "before", "flip", "spacekit", "flip/before", "spacekit/before"],
    );
    for g in &groups {
        let (m, allocs) = group_case(ctx, g)?;
        let bytes = (allocs * REQ as u64 * g.block_size) as f64;
        let gbps = |v: &str| {
            let ns = m.ns(v);
            if ns > 0.0 {
                bytes / ns
            } else {
                0.0
            }
        };
        m.rows_with(&mut report, |v, ns| {
            Row::new("fallocate", v)
                .field("block_size", g.block_size)
                .field("blocks_per_group", g.blocks as u64)
                .field("source", g.source)
                .field("allocs", allocs)
                .field("gbps", if ns > 0.0 { bytes / ns } else { 0.0 })
        });
        table.row(vec![
            format!("{}k", g.block_size >> 10),
            g.blocks.to_string(),
            g.source.into(),
            allocs.to_string(),
            format!("{:.2}", gbps("before")),
            format!("{:.2}", gbps("flip")),
            format!("{:.2}", gbps("spacekit")),
            m.ratio_cell("before", "flip"),
            m.ratio_cell("before", "spacekit"),
        ]);
        let ratio = m.ratio("before", "spacekit");
        let source = g.source;
        if g.block_size == 64 << 10 && g.blocks == 524288 {
            bars.check(ratio >= 10.0, format!("64 KiB blocks, 524288 blocks/group ({source}): spacekit {ratio:.1}x before (bar: >= 10x)"));
        }
        if g.block_size == 64 << 10 && g.blocks == 65528 {
            bars.check(ratio >= 3.0, format!("64 KiB blocks, 65528 blocks/group ({source}): spacekit {ratio:.1}x before (bar: >= 3x)"));
        }
    }
    report.table(table);
    for (source, what) in [
        ("image", "groups of mkfs.ext4 images"),
        ("memory", "in-memory groups of block size x 8 blocks"),
    ] {
        let chart = Chart::new(
            &format!("ext4-fallocate: GB/s allocated vs block size, {what}"),
            "block size (bytes)",
            "GB/s allocated (log)",
            XAxis::Log,
            true,
        )
        .from_rows(
            report
                .rows
                .iter()
                .filter(|r| r.str("case") == Some("fallocate") && r.str("source") == Some(source)),
            "block_size",
            "gbps",
        );
        if !chart.series.is_empty() {
            report.chart(chart);
        }
    }
    first_fit(ctx, &mut report, &mut bars)?;
    report.bars(bars);
    Ok(report)
}

/// The first-fit query table.
fn first_fit(ctx: &Ctx, report: &mut Report, bars: &mut Bars) -> Result<(), BenchError> {
    let bits = 524288usize;
    let mut rng = SmallRng::seed_from_u64(ctx.seed ^ 0xF17);
    let mut map = Bitmap::new(bits);
    let mut i = 0;
    while i < bits {
        let end = (i + rng.random_range(1..=40usize)).min(bits);
        if rng.random_bool(0.5) {
            let _ = map.set_range(i..end);
        }
        i = end;
    }
    // No free run of 51 bits or more, except one region near the end.
    let runs: Vec<_> = map.clear_runs(0).collect();
    for r in runs {
        let mut k = r.start + 50;
        while k < r.end {
            let _ = map.set(k);
            k += 50;
        }
    }
    let _ = map.clear_range(bits - 24_000..bits - 23_000);
    // Group 3 of a 1 KiB-block file system: bit 0 is block 3 * 524288 + 1.
    let offset = 3 * bits as u64 + 1;
    let index =
        FreeSpaceIndex::new(map.as_words(), bits as u64).map_err(|e| BenchError(e.to_string()))?;
    let align_off = (offset % 64) as usize;
    let scan = || {
        map.find_clear_area(0, 64, 64, align_off)
            .ok()
            .flatten()
            .map(|x| x as u64)
    };
    let fast = || {
        index
            .first_fit(map.as_words(), 64, 64, offset, 0)
            .ok()
            .flatten()
    };
    if scan().is_none() {
        return Err(BenchError(
            "first-fit: the fragmented group has no aligned fit".into(),
        ));
    }
    let m = Comparison::new("first fit of 64 aligned blocks")
        .variant(
            "scan",
            scan(),
            batch(|| {
                black_box(scan());
            }),
        )
        .variant(
            "spacekit",
            fast(),
            batch(|| {
                black_box(fast());
            }),
        )
        .run(&ctx.timer())?;
    let mut table = Table::new(
        "first fit of 64 blocks aligned to 64 (absolute) in a fragmented 524288-bit group",
        &["bits", "scan", "spacekit", "scan/spacekit", "index bytes"],
    );
    table.row(vec![
        bits.to_string(),
        m.cell("scan"),
        m.cell("spacekit"),
        m.ratio_cell("scan", "spacekit"),
        index.memory_bytes().to_string(),
    ]);
    report.table(table);
    m.rows(report, |v| {
        Row::new("first-fit", v).field("bits", bits as u64)
    });
    bars.check(
        m.ratio("scan", "spacekit") >= 100.0,
        format!("first fit, 64 aligned blocks, fragmented 524288-bit group: {} faster than a scan (bar: >= 100x)", m.ratio_cell("scan", "spacekit")),
    );
    Ok(())
}
