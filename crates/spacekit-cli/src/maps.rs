//! `spacekit maps`: a process's address space (`/proc/PID/maps`) in a
//! [`RangeTree`]: its gaps, an unmapped area found top-down like mmap, and
//! the cost of copying it the way fork does.

use std::fmt::Write as _;
use std::hint::black_box;
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde_json::{json, Value};
use spacekit::rangetree::maps::{Mapping, ProcMaps as Maps};
use spacekit::rangetree::{RangeTree, RangeTreeError};
use spacekit::testing::Validate;
use spacekit_bench::{batch, Comparison, Medians, Timer};

/// Lowest address mmap hands out (`vm.mmap_min_addr`'s usual value).
const MMAP_MIN_ADDR: u64 = 0x10000;
/// Top of a 47-bit user address space (x86-64 with 4-level page tables).
const USER_TOP: u64 = 0x7fff_ffff_ffff;
const PAGE: u64 = 4096;
/// Mappings printed at each end when `--ranges` is not given.
const ENDS: usize = 5;
/// Runs of the dup comparison when `--repeat` is not given, and their
/// time budget (per variant).
const DEFAULT_RUNS: usize = 1000;
const DEFAULT_BUDGET: Duration = Duration::from_millis(100);
/// Target time of one run of the dup comparison (copies per run follow).
const DUP_SAMPLE: Duration = Duration::from_micros(10);

/// Arguments of `spacekit maps`.
#[derive(Args, Debug)]
#[command(after_long_help = "\
Each line of a maps file is `start-end perms offset dev inode [path]`: \
hexadecimal start (inclusive) and end (exclusive) addresses, permissions such \
as r-xp, hexadecimal file offset, device major:minor in hex, decimal inode, \
and an optional path that may contain spaces. Blank lines are skipped; any \
other malformed line, or two mappings that overlap, is an error naming the \
line(s), and the exit status is 1.

Every mapping is stored as the inclusive range [start, end - 1]. \
The mmap window, searched by --gaps and --find, runs from mmap_min_addr \
(0x10000) up to the byte below the start of the [stack] mapping, or up to \
0x7fff_ffff_ffff (the top of a 47-bit user address space) when there is no \
[stack] line.

The dup line compares RangeTree::dup_map (the copy fork makes with the \
maple tree's __mt_dup) with inserting every mapping into a new tree one by \
one (dup_mmap before __mt_dup); both copies are checked equal to the source \
before they are timed, and each timed copy is dropped inside its timing.")]
pub struct MapsArgs {
    /// What to read: a process id (reads /proc/PID/maps), `self` (the
    /// spacekit process's own /proc/self/maps), or the path of a file in the
    /// /proc/PID/maps format.
    source: String,
    /// Print one JSON object instead of text: {"source", "mappings",
    /// "height", "ranges": [{"line", "start", "end", "perms", "offset", "dev",
    /// "inode", "path"}], "window": {"first", "last"}, "gap_count", "gaps":
    /// [{"first", "last", "size"}], "find": {"size", "align", "start", "end"},
    /// "dup": {"runs", "copies_per_run", "dup_map_ns", "insert_ns", "ratio"}}.
    /// Addresses are numbers; "end" is exclusive, "last" inclusive; "ranges"
    /// always lists every mapping; "find"'s start and end are null when no
    /// area fits.
    #[arg(long)]
    json: bool,
    /// Print every mapping (text output; by default only the first and the
    /// last few).
    #[arg(long)]
    ranges: bool,
    /// How many of the largest gaps of the mmap window to list (largest
    /// first; equal sizes lowest address first), found with RangeTree::gaps.
    #[arg(long, value_name = "N", default_value_t = 5)]
    gaps: usize,
    /// Find an unmapped area of SIZE bytes top-down, like mmap without a
    /// hint: the highest 4 KiB-aligned start in the mmap window, with
    /// RangeTree::find_gap_rev_aligned(SIZE, 4096, 0x10000..=STACK-1).
    /// SIZE is decimal or 0x-hex with an optional K, M, G or T suffix
    /// (powers of 1024), rounded up to whole 4 KiB pages as mmap does.
    #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = parse_size)]
    find: u64,
    /// Timed runs of the dup comparison (the median is reported). By
    /// default: up to 1000 runs, stopping after about 0.2 s.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    repeat: Option<u64>,
}

pub(crate) use crate::args::parse_nonzero_size as parse_size;

/// The file `source` names.
fn source_path(source: &str) -> PathBuf {
    if source == "self" {
        PathBuf::from("/proc/self/maps")
    } else if !source.is_empty() && source.bytes().all(|b| b.is_ascii_digit()) {
        PathBuf::from(format!("/proc/{source}/maps"))
    } else {
        PathBuf::from(source)
    }
}

fn read_source(source: &str) -> Result<(PathBuf, String), String> {
    let path = source_path(source);
    let bytes = std::fs::read(&path).map_err(|e| {
        let verb = if e.kind() == io::ErrorKind::NotFound {
            "cannot open"
        } else {
            "cannot read"
        };
        let hint = if path != std::path::Path::new(source) && e.kind() == io::ErrorKind::NotFound {
            " (no such process?)"
        } else {
            ""
        };
        format!("{verb} {}: {e}{hint}", path.display())
    })?;
    // Paths in maps files are raw bytes; show invalid UTF-8 as U+FFFD.
    Ok((path, String::from_utf8_lossy(&bytes).into_owned()))
}

/// What fork did before `__mt_dup`: one insert per mapping into a new tree.
fn insert_one_by_one(tree: &RangeTree<Mapping>) -> RangeTree<Mapping> {
    let mut t = RangeTree::new();
    for (first, last, m) in tree.iter() {
        // Cannot fail: the source's ranges are disjoint (checked before
        // timing).
        let _ = t.insert_range(first, last, *m);
    }
    t
}

/// Times `dup_map` against one-by-one insertion with the bench harness
/// (both copies checked equal to the source first; sampled round-robin).
fn time_dup(tree: &RangeTree<Mapping>, repeat: Option<u64>) -> Result<Medians, String> {
    let a = tree.dup_map(|m| *m);
    a.validate()
        .map_err(|e| format!("dup_map's copy is not a valid tree: {e}"))?;
    if a != *tree {
        return Err("dup_map's copy differs from the source".into());
    }
    // With --repeat, exactly that many rounds; otherwise a time budget.
    let timer = match repeat {
        Some(n) => Timer {
            sample: DUP_SAMPLE,
            samples: usize::try_from(n).unwrap_or(usize::MAX),
            budget: Duration::from_secs(86_400),
        },
        None => Timer {
            sample: DUP_SAMPLE,
            samples: DEFAULT_RUNS,
            budget: DEFAULT_BUDGET,
        },
    };
    Comparison::new("the copy of the tree")
        .variant(
            "dup_map",
            a,
            batch(|| drop(black_box(black_box(tree).dup_map(|m| *m)))),
        )
        .variant(
            "insert",
            insert_one_by_one(tree),
            batch(|| drop(black_box(insert_one_by_one(black_box(tree))))),
        )
        .run(&timer)
        .map_err(|e| e.to_string())
}

fn fmt_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

fn perms_str(m: &Mapping) -> String {
    m.perms.iter().map(|&b| b as char).collect()
}

fn maps_line(maps: &Maps, m: &Mapping) -> String {
    let mut s = format!(
        "{:012x}-{:012x} {} {:08x} {:02x}:{:02x} {}",
        m.start,
        m.end,
        perms_str(m),
        m.offset,
        m.dev.0,
        m.dev.1,
        m.inode
    );
    let path = maps.path(m);
    if !path.is_empty() {
        let _ = write!(s, " {path}");
    }
    s
}

/// Runs `spacekit maps`.
pub fn run(a: &MapsArgs) -> Result<(), String> {
    let (path, text) = read_source(&a.source)?;
    let maps = Maps::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let tree = &maps.tree;
    tree.validate()
        .map_err(|e| format!("the tree built from {} is invalid: {e}", path.display()))?;

    // The mmap window.
    let low = MMAP_MIN_ADDR;
    let high = match maps.stack {
        Some(s) => s.saturating_sub(1),
        None => USER_TOP,
    };
    let window = (low <= high).then_some(low..=high);

    // Gaps: all of them, largest first.
    let mut gaps: Vec<(u64, u64)> = window
        .clone()
        .map(|w| tree.gaps(w).collect())
        .unwrap_or_default();
    let gap_count = gaps.len();
    gaps.sort_by(|x, y| (y.1 - y.0).cmp(&(x.1 - x.0)).then(x.0.cmp(&y.0)));
    gaps.truncate(a.gaps);

    // An unmapped area, top-down.
    let size = a
        .find
        .checked_next_multiple_of(PAGE)
        .ok_or_else(|| format!("--find {}: too large", a.find))?;
    let found = match window.clone() {
        None => None,
        Some(w) => match tree.find_gap_rev_aligned(size, PAGE, w) {
            Ok(x) => x,
            Err(RangeTreeError::NoSpace { .. } | RangeTreeError::WindowTooSmall { .. }) => None,
            Err(e) => return Err(format!("--find {size:#x}: {e}")),
        },
    };

    let dup = time_dup(tree, a.repeat)?;

    let out = io::stdout();
    let mut out = io::BufWriter::new(out.lock());
    let werr = |e: io::Error| format!("cannot write the output: {e}");
    if a.json {
        let ranges: Vec<Value> = tree
            .iter()
            .map(|(_, _, m)| {
                json!({
                    "line": m.line,
                    "start": m.start,
                    "end": m.end,
                    "perms": perms_str(m),
                    "offset": m.offset,
                    "dev": format!("{:02x}:{:02x}", m.dev.0, m.dev.1),
                    "inode": m.inode,
                    "path": m.path.map(|_| maps.path(m)),
                })
            })
            .collect();
        let v = json!({
            "source": path.display().to_string(),
            "mappings": tree.len(),
            "height": tree.height(),
            "ranges": ranges,
            "window": {"first": low, "last": high},
            "gap_count": gap_count,
            "gaps": gaps.iter().map(|&(f, l)| json!({"first": f, "last": l, "size": l - f + 1})).collect::<Vec<_>>(),
            "find": {
                "size": size,
                "align": PAGE,
                "start": found,
                "end": found.map(|s| s + size),
            },
            "dup": {
                "runs": dup.rounds(),
                "copies_per_run": dup.batch("dup_map"),
                "dup_map_ns": dup.ns("dup_map"),
                "insert_ns": dup.ns("insert"),
                "ratio": dup.ratio("insert", "dup_map"),
            },
        });
        serde_json::to_writer_pretty(&mut out, &v).map_err(|e| e.to_string())?;
        writeln!(out).map_err(werr)?;
    } else {
        let n = tree.len();
        writeln!(
            out,
            "{}: {n} mapping{}, range tree height {}",
            path.display(),
            if n == 1 { "" } else { "s" },
            tree.height()
        )
        .map_err(werr)?;
        let all: Vec<&Mapping> = tree.iter().map(|(_, _, m)| m).collect();
        if a.ranges || n <= 2 * ENDS {
            for m in &all {
                writeln!(out, "  {}", maps_line(&maps, m)).map_err(werr)?;
            }
        } else {
            for m in &all[..ENDS] {
                writeln!(out, "  {}", maps_line(&maps, m)).map_err(werr)?;
            }
            writeln!(out, "  ... {} more (--ranges lists all)", n - 2 * ENDS).map_err(werr)?;
            for m in &all[n - ENDS..] {
                writeln!(out, "  {}", maps_line(&maps, m)).map_err(werr)?;
            }
        }
        writeln!(
            out,
            "mmap window: {low:#x}..={high:#x} ({})",
            if maps.stack.is_some() {
                "up to [stack]"
            } else {
                "no [stack] line: up to the top of a 47-bit address space"
            }
        )
        .map_err(werr)?;
        writeln!(
            out,
            "{gap_count} gap{} in the window; the {} largest:",
            if gap_count == 1 { "" } else { "s" },
            gaps.len()
        )
        .map_err(werr)?;
        for &(f, l) in &gaps {
            writeln!(out, "  {f:#014x}-{:#014x}  {}", l + 1, fmt_bytes(l - f + 1)).map_err(werr)?;
        }
        match found {
            Some(s) => writeln!(
                out,
                "unmapped area of {} ({size:#x}) top-down like mmap: {s:#x}-{:#x}",
                fmt_bytes(size),
                s + size
            ),
            None => writeln!(
                out,
                "unmapped area of {} ({size:#x}) top-down like mmap: none fits",
                fmt_bytes(size)
            ),
        }
        .map_err(werr)?;
        writeln!(
            out,
            "copy of the tree: dup_map {} vs inserting one by one {} = {:.1}x faster \
             (median of {} runs of {} copies)",
            dup.cell("dup_map"),
            dup.cell("insert"),
            dup.ratio("insert", "dup_map"),
            dup.rounds(),
            dup.batch("dup_map")
        )
        .map_err(werr)?;
    }
    out.flush().map_err(werr)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_paths() {
        assert_eq!(source_path("self"), PathBuf::from("/proc/self/maps"));
        assert_eq!(source_path("42"), PathBuf::from("/proc/42/maps"));
        assert_eq!(source_path("x/42"), PathBuf::from("x/42"));
    }
}
