//! Every benchmark: one file each, and one line each in [`BENCHES`].

use crate::context::{BenchError, Ctx};
use crate::harness::Report;

mod alloc;
mod bitmaps;
mod buddy;
mod cma;
mod crc;
mod dirty;
mod dirty_mark;
mod ext4_fallocate;
mod ext4_fill;
mod ext4_images;
mod ext4_populate;
mod ext4_write;
mod fallocate_race;
mod fork;
mod membw;
mod migrate;
mod migrate_conn;
mod procs;
pub use procs::{interrupt, interrupted, remove_scratch};
mod rangetree;
mod zero_area;

/// One benchmark `spacekit bench` can run.
pub struct Bench {
    /// Its name on the command line and in the JSON (`"bench"`).
    pub name: &'static str,
    /// One line for `--help` and the report.
    pub about: &'static str,
    /// Runs it: verifies, times, prints its tables and bars, returns its
    /// rows and charts.
    pub run: fn(&Ctx) -> Result<Report, BenchError>,
}

/// The registry: adding a benchmark is a file under `benches/` and a line here.
#[rustfmt::skip]
pub static BENCHES: &[Bench] = &[
    Bench { name: "membw", run: membw::run, about: "Memory read bandwidth, one thread and all threads: the limit for scans." },
    Bench { name: "zero-area", run: zero_area::run, about: "Seed 000: N consecutive clear bits with alignment, plus bit-scan speed and a find_bit_benchmark-style table." },
    Bench { name: "crc", run: crc::run, about: "Seed 001: incremental CRC-32C (flip_range vs full recompute vs the seed's matrices), combine vs the crates, bulk throughput." },
    Bench { name: "dirty", run: dirty::run, about: "Seed 004: a VM's dirty bitmap to memory ranges (per-bit loop vs the seed's set-bit iterator vs spacekit, one thread and all threads)." },
    Bench { name: "dirty-mark", run: dirty_mark::run, about: "Dirty-page marking (1 to 256 pages per mark) and a whole-log harvest of a 1 GiB guest at 0.1% and 10% dirty: spacekit's DirtyBitmap vs vm-memory's AtomicBitmap." },
    Bench { name: "fork", run: fork::run, about: "Seed 002: fork's copy of the VMA tree (one insert per VMA vs BTreeMap and rangemap clones vs spacekit's dup_map vs a memcpy)." },
    Bench { name: "rangetree", run: rangetree::run, about: "Range tree lookups and gap searches on 1K, 64K and 1M ranges, vs a BTreeMap." },
    Bench { name: "cma", run: cma::run, about: "Seed 003: CMA's free of 16,384 contiguous pages (page by page vs batched free_contig_range vs buddy_system_allocator)." },
    Bench { name: "buddy", run: buddy::run, about: "Single-page alloc_pages(0) / free_pages(p, 0) in ascending and random order, per page, vs buddy_system_allocator." },
    Bench { name: "ext4-fallocate", run: ext4_fallocate::run, about: "Seed 001: sequential fallocate of a file in 16-block requests (bitmap, extent leaf, inode, descriptor, superblock): full CRCs vs + flip_range vs + splice vs + free-space index, block sizes 1k to 64k." },
    Bench { name: "ext4-write", run: ext4_write::run, about: "A 1 GiB file into a fresh ext4 image and back out, and 10,000 small files in 100 directories: spacekit vs debugfs (whole processes) vs the host's cp, each checked by the other tool and e2fsck." },
    Bench { name: "ext4-populate", run: ext4_populate::run, about: "A /usr/share-shaped tree of 10,000 files (and /usr/share itself with --full) into a fresh ext4 image: mkfs.ext4 + spacekit ext4 populate vs mke2fs -d vs genext2fs vs cp -a to tmpfs (whole processes), each checked by e2fsck and a loop-mount compare with the source." },
    Bench { name: "alloc", run: alloc::run, about: "Address-range allocation in steady state (free + allocate, first and last match, 1K to 1M live): spacekit's range tree vs vm-allocator." },
    Bench { name: "migrate", run: migrate::run, about: "Pre-copy live migration of a real KVM guest (4 GiB, uniform workload) over a Unix socket in Cloud Hypervisor's format; each round's VMM-log harvest plus table, re-run on the round's logs by spacekit (one pass), the seed port and the before port; downtime and zero differing pages; then round 0 of fresh guests over one connection and over two." },
    Bench { name: "bitmaps", run: bitmaps::run, about: "Contiguous aligned allocation on 2^28 bits vs bitmap-allocator, next-zero iteration and counts vs fixedbitset." },
];
