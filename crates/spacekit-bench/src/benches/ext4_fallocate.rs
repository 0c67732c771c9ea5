//! `bench ext4-fallocate`: seed 001's table, its four columns in its
//! order. A file is fallocated sequentially in requests of 16 blocks (the
//! seed's figure, [`REQ`]) until its block group is full; each request does
//! what the kernel does, on in-memory copies of the metadata with ext4's
//! byte layout and checksums (`ext4_fill`):
//!
//! 1. find 16 free blocks;
//! 2. set their bits in the group's block bitmap and update the bitmap's
//!    checksum (stored in the descriptor);
//! 3. extend the file's last extent (unwritten, adjacent, at most 32,767
//!    blocks) or append an entry to its extent leaf block (a whole block:
//!    header, `eh_max` entries, tail checksum at 12 + 12 * `eh_max`), or start
//!    a fresh leaf when that one is full (a depth-1 tree whose root, with up
//!    to 4 index entries, is in the inode), and update the leaf's tail
//!    checksum;
//! 4. update the 256-byte inode (`i_blocks`, `i_size`, the root when a leaf
//!    is added) and its checksum;
//! 5. update the 64-byte group descriptor (free count, bitmap checksum) and
//!    its checksum (low 16 bits of CRC-32C), and the 1024-byte superblock's
//!    free count and checksum (CRC-32C of 0x3FC bytes).
//!
//! The columns:
//!
//! * `before`: the kernel's first-fit scan of the bitmap from the start of
//!   the group (`bitmap_find_next_zero_area_off` over `find_next_zero_bit` /
//!   `find_next_bit`, word at a time, ported in `baselines::find_bit`; in a
//!   sequential fill it finds the blocks a search from the goal finds), and
//!   every checksum recomputed in full (bitmap, leaf, inode, descriptor,
//!   superblock): seed 001's "Before";
//! * `flip`: the same, with the bitmap checksum updated by `flip_range`
//!   (`CheckedBitmap`): "+crc_flip_range";
//! * `splice`: `flip`, with the leaf, inode, descriptor and superblock
//!   checksums updated by `crc32c::splice` over the bytes that changed (the
//!   12-byte extent entry, the header's `eh_entries`, each inode, descriptor
//!   and superblock field), starting from the stored checksum:
//!   "+crc_splice";
//! * `spacekit`: `splice`, with the search done by the free-space index a
//!   `CheckedBitmap` owns (first fit from ext4's goal, just past the file's
//!   last block): "+free_space_tree".
//!
//! Block sizes 1 KiB to 64 KiB, with the blocks per group e2fsprogs allows
//! (at most 65,528; `source` `image`, the starting bitmap of group 1 of an
//! image made by mkfs.ext4 when it is installed) and the kernel's limit,
//! block size x 8 (up to 524,288 at 64 KiB; `source` `memory`, in-memory
//! groups, since stock mke2fs cannot make them). The descriptor, superblock
//! and inode are built in memory with the real sizes, offsets and checksum
//! formulas. Throughput is the space allocated per second (blocks x block
//! size / time), as in the seed's table. Before anything is timed, all four
//! variants must end with identical bytes (bitmap, leaf blocks, inode,
//! descriptor, superblock) and allocations, every stored checksum must
//! equal a fresh full computation, and `spacekit::ext4::extent` must read
//! the tree (headers and tail checksums checked) with extents covering
//! exactly the blocks allocated; anything else fails the run.
//!
//! A second table times one first-fit query for 64 blocks aligned to 64 on
//! absolute block numbers in a fragmented 524,288-bit group (free runs of at
//! most 50 bits everywhere except one region near the end): `scan` is the
//! bitmap engine's `find_clear_area` from the start, `spacekit` the index.
//!
//! A third table races whole processes: one `spacekit ext4 fallocate` of a
//! 6 GiB file in a fresh 8 GiB image against one `debugfs -w` doing the
//! same `write` + `fallocate` (see `fallocate_race`; case
//! `fallocate-process`).
//!
//! JSON rows: case `fallocate`, variants `before`, `flip`, `splice`,
//! `spacekit`, with `block_size`, `blocks_per_group`, `source`, `request`
//! (blocks per request, 16), `allocs` (requests served), `extents` and
//! `leaf_blocks` (of the file at the end), `median_ns` (one whole group) and
//! `gbps`; case `first-fit` with `bits`, `median_ns`, variants `scan` and
//! `spacekit`.

use std::hint::black_box;

use super::fallocate_race;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit::bitmap::{Bitmap, Bits, BitsMut};
use spacekit::freespace::FreeSpaceIndex;

use super::ext4_fill::{Outcome, State, Variant, REQ};
use super::ext4_images::{self, Group};
use crate::chart::{Chart, XAxis};
use crate::context::{BenchError, Ctx, Mode};
use crate::harness::{batch, progress, Bars, Comparison, Medians, Report, Row, Table};

const NAME: &str = "ext4-fallocate";

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

/// One fill of a copy of `start`.
fn fill(start: &State) -> Result<(u64, u64), String> {
    start.clone().fill()
}

/// Verifies and times the four variants on one group; returns the medians
/// (one whole group per call) and the verified outcome.
fn group_case(ctx: &Ctx, g: &Group) -> Result<(Medians, Outcome), BenchError> {
    progress(
        NAME,
        &format!(
            "{} KiB blocks, {} blocks per group ({})",
            g.block_size >> 10,
            g.blocks,
            g.source
        ),
    );
    let mut starts = Vec::new();
    let mut outcomes = Vec::new();
    for v in Variant::ALL {
        let err = |e: String| {
            BenchError(format!(
                "{} KiB blocks, {} blocks/group ({}), {}: {e}",
                g.block_size >> 10,
                g.blocks,
                g.source,
                v.name()
            ))
        };
        let start = State::new(v, g.block_size as usize, &g.bitmap).map_err(err)?;
        let mut end = start.clone();
        let (allocs, digest) = end.fill().map_err(err)?;
        // Every checksum as a fresh computation gives it, the tree readable.
        outcomes.push(end.check(allocs, digest).map_err(err)?);
        starts.push(start);
    }
    let mut cmp = Comparison::new(format!(
        "fallocate of {} {} KiB blocks/group ({})",
        g.blocks,
        g.block_size >> 10,
        g.source
    ));
    for ((v, start), out) in Variant::ALL.iter().zip(&starts).zip(&outcomes) {
        cmp = cmp.variant(
            v.name(),
            *out,
            batch(move || {
                let _ = black_box(fill(start));
            }),
        );
    }
    let m = cmp.run(&ctx.timer())?;
    Ok((m, outcomes[0]))
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
        "seed 001: sequential fallocate of a file in 16-block requests until its group is full (bitmap, extent leaf, inode, descriptor, superblock and their checksums), GB/s of space allocated",
        &["block size", "blocks/group", "source", "allocs", "extents", "before", "flip", "splice", "spacekit", "flip/before", "splice/before", "spacekit/before", "splice vs flip"],
    );
    for g in &groups {
        let (m, out) = group_case(ctx, g)?;
        let allocs = out.allocs;
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
                .field("request", REQ as u64)
                .field("allocs", allocs)
                .field("extents", out.extents)
                .field("leaf_blocks", out.leaves)
                .field("gbps", if ns > 0.0 { bytes / ns } else { 0.0 })
        });
        table.row(vec![
            format!("{}k", g.block_size >> 10),
            g.blocks.to_string(),
            g.source.into(),
            allocs.to_string(),
            out.extents.to_string(),
            format!("{:.2}", gbps("before")),
            format!("{:.2}", gbps("flip")),
            format!("{:.2}", gbps("splice")),
            format!("{:.2}", gbps("spacekit")),
            m.ratio_cell("before", "flip"),
            m.ratio_cell("before", "splice"),
            m.ratio_cell("before", "spacekit"),
            m.ratio_cell("flip", "splice"),
        ]);
        let ratio = m.ratio("before", "spacekit");
        let source = g.source;
        let kib = g.block_size >> 10;
        let blocks = g.blocks;
        if g.block_size >= 8 << 10 {
            let r = m.ratio("flip", "splice");
            bars.check(
                r > 1.0,
                format!("{kib} KiB blocks, {blocks} blocks/group ({source}): splice {:.2} GB/s vs flip {:.2} GB/s, {r:.2}x (bar: splice faster than flip)", gbps("splice"), gbps("flip")),
            );
        }
        if g.block_size == 64 << 10 && g.blocks == 524288 {
            bars.check(ratio >= 20.0, format!("64 KiB blocks, 524288 blocks/group ({source}): spacekit {ratio:.1}x before (bar: >= 20x)"));
        }
        if g.block_size == 64 << 10 && g.blocks == 65528 {
            bars.check(ratio >= 5.0, format!("64 KiB blocks, 65528 blocks/group ({source}): spacekit {ratio:.1}x before (bar: >= 5x)"));
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
    fallocate_race::run(ctx, &mut report, &mut bars)?;
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
