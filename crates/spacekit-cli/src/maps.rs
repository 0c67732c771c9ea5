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
use spacekit::__testing::Validate;
use spacekit::rangetree::{RangeTree, RangeTreeError};
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

/// A size: decimal or `0x` hex, optional K/M/G/T suffix (binary).
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim().replace('_', "");
    let (num, shift) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 10),
        Some('M') => (&t[..t.len() - 1], 20),
        Some('G') => (&t[..t.len() - 1], 30),
        Some('T') => (&t[..t.len() - 1], 40),
        _ => (&t[..], 0),
    };
    let n = match num.strip_prefix("0x").or_else(|| num.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => num.parse(),
    }
    .map_err(|e| format!("`{s}` is not a size: {e}"))?;
    let n = n
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("`{s}` does not fit in 64 bits"))?;
    if n == 0 {
        return Err("the size must be at least 1 byte".into());
    }
    Ok(n)
}

/// One line of a maps file. The path is an index into [`Maps::paths`] (like
/// the kernel's `vm_file` pointer), so copying a mapping is a plain copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mapping {
    start: u64,
    /// Exclusive.
    end: u64,
    perms: [u8; 4],
    offset: u64,
    dev: (u32, u32),
    inode: u64,
    path: Option<u32>,
    /// 1-based line number in the file.
    line: usize,
}

/// A parsed maps file.
struct Maps {
    tree: RangeTree<Mapping>,
    paths: Vec<String>,
    /// The `[stack]` mapping's start, if there is one.
    stack: Option<u64>,
}

impl Maps {
    fn path(&self, m: &Mapping) -> &str {
        m.path.map_or("", |i| self.paths[i as usize].as_str())
    }
}

/// Strict lowercase/uppercase hex: no sign, no prefix, no spaces.
fn hex(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

fn hex32(s: &str) -> Option<u32> {
    hex(s).and_then(|v| u32::try_from(v).ok())
}

/// The fields of one line, and its path (empty when absent).
fn parse_line(text: &str, line: usize) -> Result<(Mapping, &str), String> {
    let err = |what: &str, field: &str| format!("line {line}: bad {what} {field:?}");
    let mut rest = text;
    let mut f = [""; 5];
    for (k, slot) in f.iter_mut().enumerate() {
        rest = rest.trim_start();
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        if end == 0 {
            return Err(format!(
                "line {line}: expected `start-end perms offset dev inode [path]`, \
                 found {} field{} in {text:?}",
                k,
                if k == 1 { "" } else { "s" }
            ));
        }
        *slot = &rest[..end];
        rest = &rest[end..];
    }
    let path = rest.trim_start();
    let (start, end) = f[0]
        .split_once('-')
        .and_then(|(a, b)| Some((hex(a)?, hex(b)?)))
        .ok_or_else(|| err("address range", f[0]))?;
    if end <= start {
        return Err(format!(
            "line {line}: bad address range {:?}: the end is not above the start",
            f[0]
        ));
    }
    let p = f[1].as_bytes();
    let ok = p.len() == 4
        && matches!(p[0], b'r' | b'-')
        && matches!(p[1], b'w' | b'-')
        && matches!(p[2], b'x' | b'-')
        && matches!(p[3], b'p' | b's');
    if !ok {
        return Err(err("permissions", f[1]));
    }
    let perms = [p[0], p[1], p[2], p[3]];
    let offset = hex(f[2]).ok_or_else(|| err("offset", f[2]))?;
    let dev = f[3]
        .split_once(':')
        .and_then(|(a, b)| Some((hex32(a)?, hex32(b)?)))
        .ok_or_else(|| err("device", f[3]))?;
    let inode = f[4]
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| f[4].parse::<u64>().ok())
        .flatten()
        .ok_or_else(|| err("inode", f[4]))?;
    Ok((
        Mapping {
            start,
            end,
            perms,
            offset,
            dev,
            inode,
            path: None,
            line,
        },
        path,
    ))
}

/// Parses a whole maps file into a tree.
fn parse(text: &str) -> Result<Maps, String> {
    let mut tree = RangeTree::new();
    let mut paths: Vec<String> = Vec::new();
    let mut stack = None;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        if raw.trim().is_empty() {
            continue;
        }
        let (mut m, path) = parse_line(raw, line)?;
        if !path.is_empty() {
            // Consecutive lines usually name the same file.
            if paths.last().map(String::as_str) != Some(path) {
                let id = u32::try_from(paths.len())
                    .map_err(|_| format!("line {line}: too many paths"))?;
                paths.push(path.to_string());
                m.path = Some(id);
            } else {
                m.path = Some((paths.len() - 1) as u32);
            }
            if path == "[stack]" && stack.is_none() {
                stack = Some(m.start);
            }
        }
        match tree.insert_range(m.start, m.end - 1, m) {
            Ok(()) => {}
            Err(RangeTreeError::Occupied { first, last }) => {
                let other = tree.get(first).map_or(0, |o: &Mapping| o.line);
                return Err(format!(
                    "line {line}: {:#x}-{:#x} overlaps line {other} ({:#x}-{:#x})",
                    m.start,
                    m.end,
                    first,
                    last.wrapping_add(1)
                ));
            }
            Err(e) => return Err(format!("line {line}: {e}")),
        }
    }
    Ok(Maps { tree, paths, stack })
}

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
    let maps = parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
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
    fn sizes() {
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("0x1000"), Ok(4096));
        assert_eq!(parse_size("0x10K"), Ok(16 << 10));
        assert_eq!(parse_size("12345"), Ok(12345));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert!(parse_size("0").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("1X").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn lines() {
        let (m, p) = parse_line(
            "7f0000001000-7f0000003000 r-xp 00001000 08:01 1234   /usr/lib/a b.so",
            1,
        )
        .unwrap();
        assert_eq!(
            (m.start, m.end, m.offset, m.inode),
            (0x7f00_0000_1000, 0x7f00_0000_3000, 0x1000, 1234)
        );
        assert_eq!(m.dev, (8, 1));
        assert_eq!(&m.perms, b"r-xp");
        assert_eq!(p, "/usr/lib/a b.so");
        let (_, p) = parse_line("1000-2000 rw-p 00000000 00:00 0", 2).unwrap();
        assert_eq!(p, "");
        for (bad, msg) in [
            (
                "zz-10 r--p 0 00:00 0",
                "line 3: bad address range \"zz-10\"",
            ),
            ("2000-1000 r--p 0 00:00 0", "end is not above"),
            ("1000-2000 rwz 0 00:00 0", "bad permissions"),
            ("1000-2000 r--p +0 00:00 0", "bad offset"),
            ("1000-2000 r--p 0 0000 0", "bad device"),
            ("1000-2000 r--p 0 00:00 x", "bad inode"),
            ("1000-2000 r--p", "found 2 fields"),
        ] {
            let e = parse_line(bad, 3).unwrap_err();
            assert!(e.contains(msg), "{bad}: {e}");
        }
    }

    #[test]
    fn source_paths() {
        assert_eq!(source_path("self"), PathBuf::from("/proc/self/maps"));
        assert_eq!(source_path("42"), PathBuf::from("/proc/42/maps"));
        assert_eq!(source_path("x/42"), PathBuf::from("x/42"));
    }
}
