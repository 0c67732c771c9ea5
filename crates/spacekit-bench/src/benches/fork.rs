//! `bench fork`: seed 002's experiment. UnixBench's "spawn" (fork + exit +
//! wait in a loop) in a process with 21 default VMAs plus N added 10-page
//! VMAs, N in 0, 100, 200, .., 6400; the seed replaced dup_mmap's
//! one-by-one insert into the child's maple tree with `__mt_dup`.
//!
//! Here the address space is a [`RangeTree`] of VMA records keyed by
//! `[start, end - 1]`. The 21 default VMAs are those of a small dynamically
//! linked program (executable text/data/bss, heap, libc and ld.so with their
//! r--/r-x/r--/rw- segments, vvar, vdso, stack near the top of the 47-bit
//! space); the added VMAs are 40 KiB each, mapped top-down below the
//! libraries the way mmap places them (each directly below the previous one,
//! with alternating PROT_READ / PROT_WRITE, as in the seed's harness, so
//! neighbours never merge). The source tree is built by inserting in that
//! order. One "fork" copies the whole tree and every VMA record:
//!
//! * `before`: a new tree filled by `insert_range`, one VMA at a time in
//!   ascending order (dup_mmap before the seed stored each VMA in turn),
//! * `btreemap`: `BTreeMap<u64, Vma>::clone()` of the same VMAs keyed by start,
//! * `rangemap`: `rangemap::RangeInclusiveMap<u64, Vma>::clone()`,
//! * `spacekit`: `RangeTree::dup_map(|v| v.clone())` (the seed's `__mt_dup`
//!   plus the per-VMA copy),
//! * `limit`: `Vec<Vma>::clone()` of the same records (a memcpy).
//!
//! Each timed call builds its copy and drops it (the child's exit frees its
//! mm in the real loop): the drop is inside the timed operation for every
//! variant alike. Every variant's copy is compared entry by entry with the
//! layout before anything is timed, and the five are sampled round-robin so
//! the ratios come from one run.
//!
//! JSON rows: `case` `fork`, `variant`, `vmas` (in all, 21 + added),
//! `added`, `median_ns` (per fork) and `forks_per_sec`.

use std::collections::BTreeMap;

use std::hint::black_box;
use std::num::NonZeroU32;

use rangemap::RangeInclusiveMap;
use spacekit::rangetree::RangeTree;
use spacekit::testing::Validate;

use crate::chart::{Chart, XAxis};
use crate::context::{BenchError, Ctx, Mode};
use crate::harness::{
    batch, progress, verify_lists, Bars, Comparison, Medians, Report, Row, Table,
};

const NAME: &str = "fork";
const PAGE: u64 = 4096;
/// Size of each added VMA: the seed's `10 * getpagesize()`.
const ADDED_BYTES: u64 = 10 * PAGE;
/// Added VMAs of the seed's table.
const ADDED: [usize; 8] = [0, 100, 200, 400, 800, 1600, 3200, 6400];
/// The subset `--quick` runs (21, 421 and 6421 VMAs in all).
const ADDED_QUICK: [usize; 3] = [0, 400, 6400];
/// VMA count at which the bars are checked.
const BAR_VMAS: usize = 21 + 6400;

// vm_flags bits (include/linux/mm.h).
const VM_READ: u64 = 0x1;
const VM_WRITE: u64 = 0x2;
const VM_EXEC: u64 = 0x4;
const VM_MAYREAD: u64 = 0x10;
const VM_MAYWRITE: u64 = 0x20;
const VM_MAYEXEC: u64 = 0x40;
const VM_GROWSDOWN: u64 = 0x100;
const VM_PFNMAP: u64 = 0x400;
const VM_IO: u64 = 0x4000;
const VM_DONTEXPAND: u64 = 0x40000;
const VM_ACCOUNT: u64 = 0x100000;
const VM_DONTDUMP: u64 = 0x0400_0000;
const VM_MAY: u64 = VM_MAYREAD | VM_MAYWRITE | VM_MAYEXEC;

/// A VMA record: what `vm_area_dup` copies, reduced to the fields that
/// identify a mapping. The file is an id (the kernel's `vm_file` pointer,
/// whose reference count this model does not track), so a copy is a plain
/// copy of 40 bytes.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Vma {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// `vm_flags`.
    pub flags: u64,
    /// `vm_pgoff`: file offset in pages (for anonymous VMAs, `start >> 12`).
    pub pgoff: u64,
    /// The mapped file, if any.
    pub file: Option<NonZeroU32>,
}

impl Vma {
    fn new(start: u64, end: u64, flags: u64, pgoff: u64, file: u32) -> Vma {
        Vma {
            start,
            end,
            flags,
            pgoff: if file == 0 { start / PAGE } else { pgoff },
            file: NonZeroU32::new(file),
        }
    }

    /// The tree key's inclusive last index.
    fn last(&self) -> u64 {
        self.end - 1
    }
}

/// The 21 VMAs of a small dynamically linked program (like the seed's
/// `spawn`, run without ASLR), in the order exec and ld.so create them:
/// stack, executable, vvar/vdso, ld.so, heap, then libc.
fn default_vmas() -> Vec<Vma> {
    const R: u64 = VM_READ | VM_MAY;
    const RX: u64 = VM_READ | VM_EXEC | VM_MAY;
    const RW: u64 = VM_READ | VM_WRITE | VM_MAY;
    const RW_ANON: u64 = RW | VM_ACCOUNT;
    const EXE: u32 = 1;
    const LIBC: u32 = 2;
    const LD: u32 = 3;
    vec![
        // [stack]
        Vma::new(
            0x7fff_fffd_e000,
            0x7fff_ffff_f000,
            RW_ANON | VM_GROWSDOWN,
            0,
            0,
        ),
        // /usr/bin/spawn: headers, text, rodata, relro, data+bss
        Vma::new(0x5555_5555_4000, 0x5555_5555_5000, R, 0, EXE),
        Vma::new(0x5555_5555_5000, 0x5555_5555_6000, RX, 1, EXE),
        Vma::new(0x5555_5555_6000, 0x5555_5555_7000, R, 2, EXE),
        Vma::new(0x5555_5555_7000, 0x5555_5555_8000, R | VM_ACCOUNT, 2, EXE),
        Vma::new(0x5555_5555_8000, 0x5555_5555_9000, RW_ANON, 3, EXE),
        // [vvar], [vdso]
        Vma::new(
            0x7fff_f7fb_0000,
            0x7fff_f7fb_4000,
            VM_READ | VM_MAYREAD | VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP,
            0,
            0,
        ),
        Vma::new(
            0x7fff_f7fb_4000,
            0x7fff_f7fb_6000,
            RX | VM_DONTEXPAND | VM_DONTDUMP,
            0,
            0,
        ),
        // ld-linux-x86-64.so.2
        Vma::new(0x7fff_f7fb_8000, 0x7fff_f7fb_a000, R, 0, LD),
        Vma::new(0x7fff_f7fb_a000, 0x7fff_f7fe_4000, RX, 0x2, LD),
        Vma::new(0x7fff_f7fe_4000, 0x7fff_f7fe_f000, R, 0x2c, LD),
        Vma::new(0x7fff_f7ff_0000, 0x7fff_f7ff_2000, R | VM_ACCOUNT, 0x37, LD),
        Vma::new(0x7fff_f7ff_2000, 0x7fff_f7ff_4000, RW_ANON, 0x39, LD),
        // [heap]
        Vma::new(0x5555_5555_9000, 0x5555_5557_a000, RW_ANON, 0, 0),
        // libc.so.6: headers, text, rodata, relro, data, bss (anonymous)
        Vma::new(0x7fff_f7d8_0000, 0x7fff_f7da_8000, R, 0, LIBC),
        Vma::new(0x7fff_f7da_8000, 0x7fff_f7f3_d000, RX, 0x28, LIBC),
        Vma::new(0x7fff_f7f3_d000, 0x7fff_f7f9_5000, R, 0x1bd, LIBC),
        Vma::new(
            0x7fff_f7f9_5000,
            0x7fff_f7f9_9000,
            R | VM_ACCOUNT,
            0x214,
            LIBC,
        ),
        Vma::new(0x7fff_f7f9_9000, 0x7fff_f7f9_b000, RW_ANON, 0x218, LIBC),
        Vma::new(0x7fff_f7f9_b000, 0x7fff_f7fa_8000, RW_ANON, 0, 0),
        // libc's TLS and ld.so's scratch
        Vma::new(0x7fff_f7fa_a000, 0x7fff_f7fa_c000, RW_ANON, 0, 0),
    ]
}

/// The default VMAs, then `added` 10-page anonymous VMAs mapped top-down
/// below the lowest library, each directly below the previous, with the
/// seed's alternating `PROT_WRITE` / `PROT_READ`: the mmap order.
fn layout(added: usize) -> Vec<Vma> {
    let mut v = default_vmas();
    let libs_start = v
        .iter()
        .filter(|m| m.start > 0x7000_0000_0000 && m.flags & VM_GROWSDOWN == 0)
        .map(|m| m.start)
        .min()
        .unwrap_or(0x7fff_f7d8_0000);
    let mut end = libs_start;
    for i in 0..added {
        let prot = if i & 1 == 1 {
            VM_READ
        } else {
            VM_WRITE | VM_ACCOUNT
        };
        v.push(Vma::new(end - ADDED_BYTES, end, prot | VM_MAY, 0, 0));
        end -= ADDED_BYTES;
    }
    v
}

/// One entry of a copy, as every variant is compared: `(first, last, vma)`.
type Entry = (u64, u64, Vma);

/// `before`: dup_mmap before the seed, one store per VMA into a new tree.
fn fork_before(src: &RangeTree<Vma>) -> RangeTree<Vma> {
    let mut t = RangeTree::new();
    for (first, last, v) in src.iter() {
        // Cannot fail: the source's ranges do not overlap (and the result
        // is verified before timing).
        let _ = t.insert_range(first, last, v.clone());
    }
    t
}

fn tree_entries(t: &RangeTree<Vma>) -> Vec<Entry> {
    t.iter().map(|(f, l, v)| (f, l, v.clone())).collect()
}

fn btree_entries(m: &BTreeMap<u64, Vma>) -> Vec<Entry> {
    m.iter().map(|(&s, v)| (s, v.last(), v.clone())).collect()
}

fn rangemap_entries(m: &RangeInclusiveMap<u64, Vma>) -> Vec<Entry> {
    m.iter()
        .map(|(r, v)| (*r.start(), *r.end(), v.clone()))
        .collect()
}

fn vec_entries(v: &[Vma]) -> Vec<Entry> {
    v.iter().map(|m| (m.start, m.last(), m.clone())).collect()
}

/// Builds the address space of 21 + `n_added` VMAs, verifies every
/// variant's copy of it, and times the copies.
fn fork_case(ctx: &Ctx, n_added: usize) -> Result<Medians, BenchError> {
    let vmas = layout(n_added);
    let total = vmas.len();
    progress(NAME, &format!("{total} VMAs (21 + {n_added})"));
    // The sources, each built in mmap order.
    let mut tree = RangeTree::new();
    let mut btree = BTreeMap::new();
    let mut rmap = RangeInclusiveMap::new();
    for v in &vmas {
        tree.insert_range(v.start, v.last(), v.clone())
            .map_err(|e| BenchError(format!("building the source tree: {e}")))?;
        btree.insert(v.start, v.clone());
        rmap.insert(v.start..=v.last(), v.clone());
    }
    let mut sorted = vmas.clone();
    sorted.sort_by_key(|v| v.start);
    tree.validate()
        .map_err(|e| BenchError(format!("the source tree at {total} VMAs: {e}")))?;
    if rmap.len() != total || tree.len() != total || btree.len() != total {
        return Err(BenchError(format!(
            "the sources hold {} (rangetree), {} (btreemap), {} (rangemap) entries, not {total}",
            tree.len(),
            btree.len(),
            rmap.len()
        )));
    }
    verify_lists(
        &format!("the source VMAs at {total} VMAs"),
        &[
            ("layout", vec_entries(&sorted)),
            ("source", tree_entries(&tree)),
        ],
    )?;
    // Every variant's copy, compared with the layout before timing.
    let c_spk = tree.dup_map(|v| v.clone());
    c_spk
        .validate()
        .map_err(|e| BenchError(format!("the spacekit copy at {total} VMAs: {e}")))?;
    Comparison::lists(format!("the forked VMAs at {total} VMAs"))
        .variant(
            "before",
            tree_entries(&fork_before(&tree)),
            batch(|| drop(black_box(fork_before(black_box(&tree))))),
        )
        .variant(
            "btreemap",
            btree_entries(&btree.clone()),
            batch(|| drop(black_box(black_box(&btree).clone()))),
        )
        .variant(
            "rangemap",
            rangemap_entries(&rmap.clone()),
            batch(|| drop(black_box(black_box(&rmap).clone()))),
        )
        .variant(
            "spacekit",
            tree_entries(&c_spk),
            batch(|| drop(black_box(black_box(&tree).dup_map(|v| v.clone())))),
        )
        .variant(
            "limit",
            vec_entries(&sorted.clone()),
            batch(|| drop(black_box(black_box(&sorted).clone()))),
        )
        .run(&ctx.timer())
}

/// Runs `bench fork`.
pub fn run(ctx: &Ctx) -> Result<Report, BenchError> {
    let added: &[usize] = match ctx.mode {
        Mode::Quick => &ADDED_QUICK,
        _ => &ADDED,
    };
    let mut report = Report::default();
    let mut bars = Bars::new(NAME);
    let mut table = Table::new(
        "seed 002: fork's copy of the VMA tree (21 default VMAs + N added 10-page VMAs), \
         per fork, copy and drop timed",
        &[
            "vmas",
            "before",
            "btreemap",
            "rangemap",
            "spacekit",
            "limit",
            "spk forks/s",
            "before/spk",
            "btree/spk",
            "rangemap/spk",
            "spk/limit",
        ],
    );
    let mut at_bar = None;
    for &n_added in added {
        let total = 21 + n_added;
        let m = fork_case(ctx, n_added)?;
        for &variant in m.names() {
            let t = m.ns(variant);
            report.push(
                Row::new("fork", variant)
                    .field("vmas", total)
                    .field("added", n_added)
                    .field("median_ns", t)
                    .field("forks_per_sec", 1e9 / t),
            );
        }
        table.row(vec![
            total.to_string(),
            m.cell("before"),
            m.cell("btreemap"),
            m.cell("rangemap"),
            m.cell("spacekit"),
            m.cell("limit"),
            format!("{:.0}", 1e9 / m.ns("spacekit")),
            m.ratio_cell("before", "spacekit"),
            m.ratio_cell("btreemap", "spacekit"),
            m.ratio_cell("rangemap", "spacekit"),
            m.ratio_cell("spacekit", "limit"),
        ]);
        if total == BAR_VMAS {
            at_bar = Some(m);
        }
    }
    report.table(table);
    let chart = Chart::new(
        "fork: time to copy the VMA tree (copy and drop) vs VMAs",
        "VMAs",
        "ns per fork",
        XAxis::Log,
        true,
    )
    .from_rows(&report.rows, "vmas", "median_ns");
    report.chart(chart);

    if let Some(m) = at_bar {
        let spk = m.cell("spacekit");
        bars.check(
            m.ratio("before", "spacekit") >= 40.0,
            format!(
                "{BAR_VMAS} VMAs: spacekit {spk} vs before {} = {:.1}x faster (bar: >= 40x)",
                m.cell("before"),
                m.ratio("before", "spacekit")
            ),
        );
        bars.check(
            m.ratio("btreemap", "spacekit") >= 2.5,
            format!(
                "{BAR_VMAS} VMAs: spacekit {spk} vs btreemap {} = {:.1}x faster (bar: >= 2.5x)",
                m.cell("btreemap"),
                m.ratio("btreemap", "spacekit")
            ),
        );
        bars.check(
            m.ratio("spacekit", "limit") <= 3.0,
            format!(
                "{BAR_VMAS} VMAs: spacekit {spk} vs memcpy of the records {} = {:.2}x (bar: <= 3x)",
                m.cell("limit"),
                m.ratio("spacekit", "limit")
            ),
        );
    }
    report.bars(bars);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_disjoint_and_never_mergeable() {
        for added in [0, 100, 6400] {
            let mut v = layout(added);
            assert_eq!(v.len(), 21 + added);
            // Added VMAs: 40 KiB each, each directly below the previous.
            for w in v[21..].windows(2) {
                assert_eq!(w[1].end, w[0].start);
                assert_eq!(w[0].end - w[0].start, ADDED_BYTES);
            }
            v.sort_by_key(|m| m.start);
            for w in v.windows(2) {
                assert!(w[0].start < w[0].end && w[0].end <= w[1].start, "{w:?}");
                // Adjacent neighbours differ, so rangemap cannot coalesce them.
                assert_ne!(w[0], w[1]);
                if w[0].end == w[1].start {
                    assert!(w[0].flags != w[1].flags || w[0].file != w[1].file);
                }
            }
            assert!(v.last().unwrap().end <= 1 << 47);
        }
    }
}
