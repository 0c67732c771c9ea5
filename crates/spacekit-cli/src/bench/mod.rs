//! The benchmark framework: timing, verification, tables and JSON reports.
//!
//! Every benchmark computes each variant's answer once, outside the timed
//! loop, and fails (non-zero exit, no JSON written) if any two disagree. Times
//! are medians of repeated samples; each sample runs the operation enough
//! times to last a fixed target, so short operations are not dominated by the
//! clock.

use std::fmt;
use std::fs;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use serde_json::{json, Map, Value};

mod cma;
mod crc;
mod dirty;
mod ext4_fallocate;
mod ext4_images;
mod fork;
mod membw;
mod rangetree;
mod zero_area;

/// Arguments of `spacekit bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Benchmarks to run (all when none is named).
    #[arg(value_enum)]
    names: Vec<BenchName>,
    /// Small sizes and few samples: a smoke run that still verifies every
    /// result (what CI runs).
    #[arg(long, conflicts_with = "full")]
    quick: bool,
    /// The seeds' full sizes and more samples (slower).
    #[arg(long)]
    full: bool,
    /// Write the rows as JSON to FILE: one `{"bench": NAME, "rows": [...]}`
    /// object for one benchmark, an array of them for several.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Seed of the random bitmaps (the same seed gives the same data).
    #[arg(long, default_value_t = 0x5EED_0000)]
    seed: u64,
    /// Test hook: make the first verification fail, to check that a
    /// disagreement exits non-zero and writes no JSON.
    #[arg(long, hide = true)]
    inject_mismatch: bool,
}

/// Set by `--inject-mismatch`: the next `verify` reports a disagreement.
static INJECT_MISMATCH: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The benchmarks `spacekit bench` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BenchName {
    /// Memory read bandwidth, one thread and all threads: the limit for scans.
    Membw,
    /// Seed 000: N consecutive clear bits with alignment, plus bit-scan speed
    /// and a find_bit_benchmark-style table.
    ZeroArea,
    /// Seed 001: incremental CRC-32C (flip_range vs full recompute vs the
    /// seed's matrices), combine vs the crates, bulk throughput.
    Crc,
    /// Seed 004: a VM's dirty bitmap to memory ranges (per-bit loop vs the
    /// seed's set-bit iterator vs spacekit, one thread and all threads).
    Dirty,
    /// Seed 002: fork's copy of the VMA tree (one insert per VMA vs BTreeMap
    /// and rangemap clones vs spacekit's dup_map vs a memcpy of the records).
    Fork,
    /// Range tree lookups and gap searches on 1K, 64K and 1M ranges, vs a
    /// BTreeMap.
    Rangetree,
    /// Seed 003: CMA's free of 16,384 contiguous pages (page by page vs
    /// spacekit's batched free_contig_range vs buddy_system_allocator), with
    /// aligned, unaligned, poisoned and section-crossing ranges.
    Cma,
    /// Seed 001: fallocate of a whole ext4 block group (scan + full CRC vs
    /// scan + flip_range vs free-space index + flip_range), block sizes 1k
    /// to 64k, and one aligned first-fit query in a fragmented group.
    Ext4Fallocate,
}

impl BenchName {
    fn as_str(self) -> &'static str {
        match self {
            BenchName::Membw => "membw",
            BenchName::ZeroArea => "zero-area",
            BenchName::Crc => "crc",
            BenchName::Dirty => "dirty",
            BenchName::Fork => "fork",
            BenchName::Rangetree => "rangetree",
            BenchName::Cma => "cma",
            BenchName::Ext4Fallocate => "ext4-fallocate",
        }
    }
}

/// How much work a run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Quick,
    Default,
    Full,
}

/// Everything a benchmark needs from the command line.
pub struct Ctx {
    pub mode: Mode,
    pub seed: u64,
}

impl Ctx {
    /// A timer tuned to the mode.
    pub fn timer(&self) -> Timer {
        match self.mode {
            Mode::Quick => Timer {
                sample: Duration::from_micros(100),
                samples: 5,
                budget: Duration::from_millis(150),
            },
            Mode::Default => Timer {
                sample: Duration::from_millis(2),
                samples: 15,
                budget: Duration::from_millis(1500),
            },
            Mode::Full => Timer {
                sample: Duration::from_millis(5),
                samples: 31,
                budget: Duration::from_secs(8),
            },
        }
    }
}

/// A benchmark failure: variants disagreed, or something could not be set up.
#[derive(Debug)]
pub struct BenchError(pub String);

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BenchError {}

/// Fails the benchmark unless every `(variant, answer)` equals the first.
pub fn verify<T: PartialEq + fmt::Debug>(
    what: &str,
    answers: &[(&str, T)],
) -> Result<(), BenchError> {
    if INJECT_MISMATCH.swap(false, std::sync::atomic::Ordering::Relaxed) {
        return Err(BenchError(format!(
            "variants disagree on {what} (injected by --inject-mismatch)"
        )));
    }
    if let Some((first_name, first)) = answers.first() {
        for (name, a) in &answers[1..] {
            if a != first {
                return Err(BenchError(format!(
                    "variants disagree on {what}: {first_name} gives {first:?}, {name} gives {a:?}"
                )));
            }
        }
    }
    Ok(())
}

/// Median-of-samples timer.
#[derive(Clone, Copy, Debug)]
pub struct Timer {
    /// Target duration of one sample.
    pub sample: Duration,
    /// Number of samples.
    pub samples: usize,
    /// Stop sampling after this long (keeping at least 3 samples).
    pub budget: Duration,
}

impl Timer {
    /// Median nanoseconds per call of `f`.
    pub fn median_ns(&self, mut f: impl FnMut()) -> f64 {
        let batch = self.calibrate(&mut |n| {
            for _ in 0..n {
                f();
            }
        });
        let started = Instant::now();
        let mut v = Vec::with_capacity(self.samples);
        for _ in 0..self.samples {
            let t = Instant::now();
            for _ in 0..batch {
                f();
            }
            v.push(t.elapsed().as_nanos() as f64 / batch as f64);
            if v.len() >= 3 && started.elapsed() > self.budget {
                break;
            }
        }
        if std::env::var_os("SPACEKIT_TRACE").is_some() {
            eprintln!("trace: batch {batch} samples {v:?}");
        }
        median(&mut v)
    }
}

impl Timer {
    /// Median nanoseconds per call of `f` and of `g`, sampled alternately so
    /// that drift on a noisy machine hits both alike (for ratios between an
    /// operation and a physical limit). One call per sample.
    pub fn median_pair(&self, mut f: impl FnMut(), mut g: impl FnMut()) -> (f64, f64) {
        f();
        g();
        let started = Instant::now();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..self.samples {
            let t = Instant::now();
            f();
            a.push(t.elapsed().as_nanos() as f64);
            let t = Instant::now();
            g();
            b.push(t.elapsed().as_nanos() as f64);
            if a.len() >= 3 && started.elapsed() > self.budget * 2 {
                break;
            }
        }
        (median(&mut a), median(&mut b))
    }
}

/// An operation to time, run `n` times per call (see [`batch`]).
pub type Batch<'a> = Box<dyn FnMut(usize) + 'a>;

/// Wraps `f` so one dynamic call runs it `n` times: the indirection is paid
/// once per batch, not once per operation.
pub fn batch<'a, F: FnMut() + 'a>(mut f: F) -> Batch<'a> {
    Box::new(move |n| {
        for _ in 0..n {
            f();
        }
    })
}

impl Timer {
    /// Calls per sample so one sample lasts about `self.sample`: one warm-up
    /// call, then batches doubling until one takes at least a tenth of the
    /// target (so a cold first call cannot skew the estimate).
    fn calibrate(&self, op: &mut dyn FnMut(usize)) -> usize {
        op(1);
        let floor = self.sample / 10;
        let mut n = 1usize;
        loop {
            let t = Instant::now();
            op(n);
            let took = t.elapsed();
            if took >= floor || n >= 1 << 24 {
                let per_call = took.as_nanos().max(1) as f64 / n as f64;
                return ((self.sample.as_nanos() as f64 / per_call) as usize).clamp(1, 1 << 24);
            }
            n *= 2;
        }
    }

    /// Median nanoseconds per call of each operation. Samples are taken
    /// round-robin (one batch of every operation per round), so drift on a
    /// noisy machine affects all variants alike and their ratios stay fair.
    pub fn medians(&self, ops: &mut [Batch<'_>]) -> Vec<f64> {
        let batches: Vec<usize> = ops.iter_mut().map(|op| self.calibrate(op)).collect();
        let started = Instant::now();
        let budget = self.budget * ops.len().max(1) as u32;
        let mut samples = vec![Vec::with_capacity(self.samples); ops.len()];
        for round in 0..self.samples {
            for ((op, &n), v) in ops.iter_mut().zip(&batches).zip(&mut samples) {
                let t = Instant::now();
                op(n);
                v.push(t.elapsed().as_nanos() as f64 / n as f64);
            }
            if round >= 2 && started.elapsed() > budget {
                break;
            }
        }
        if std::env::var_os("SPACEKIT_TRACE").is_some() {
            eprintln!("trace: batches {batches:?} samples {samples:?}");
        }
        samples.iter_mut().map(|v| median(v)).collect()
    }
}

/// Median of `v` (sorted in place); 0 for an empty slice.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One JSON row: `case`, `variant`, parameters, and the measured figures.
#[derive(Clone, Debug)]
pub struct Row(Map<String, Value>);

impl Row {
    pub fn new(case: &str, variant: &str) -> Row {
        let mut m = Map::new();
        m.insert("case".into(), json!(case));
        m.insert("variant".into(), json!(variant));
        Row(m)
    }

    pub fn field(mut self, key: &str, value: impl Into<Value>) -> Row {
        self.0.insert(key.into(), value.into());
        self
    }
}

/// The rows of one benchmark.
#[derive(Debug, Default)]
pub struct Report {
    pub rows: Vec<Row>,
}

impl Report {
    pub fn push(&mut self, row: Row) {
        self.rows.push(row);
    }

    fn to_json(&self, bench: &str) -> Value {
        json!({
            "bench": bench,
            "rows": self.rows.iter().map(|r| Value::Object(r.0.clone())).collect::<Vec<_>>(),
        })
    }
}

/// A text table printed with aligned columns: first column left-aligned,
/// the rest right-aligned.
pub struct Table {
    title: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(title: &str, header: &[&str]) -> Table {
        Table {
            title: title.into(),
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn print(&self) {
        let mut width: Vec<usize> = self.header.iter().map(String::len).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                if i < width.len() {
                    width[i] = width[i].max(c.len());
                }
            }
        }
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                let w = width.get(i).copied().unwrap_or(0);
                if i == 0 {
                    s.push_str(&format!("{c:<w$}"));
                } else {
                    s.push_str(&format!("  {c:>w$}"));
                }
            }
            s
        };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "\n{}", self.title);
        let _ = writeln!(out, "{}", line(&self.header));
        for r in &self.rows {
            let _ = writeln!(out, "{}", line(r));
        }
        let _ = out.flush();
    }
}

/// The bars, checked on the rows of one run and printed after its
/// tables as `[met]` / `[NOT MET]` lines.
pub struct Bars {
    bench: &'static str,
    lines: Vec<(bool, String)>,
}

impl Bars {
    pub fn new(bench: &'static str) -> Bars {
        Bars {
            bench,
            lines: Vec::new(),
        }
    }

    pub fn check(&mut self, ok: bool, text: String) {
        self.lines.push((ok, text));
    }

    pub fn print(&self) {
        println!("\n{} bars (ratios from this run):", self.bench);
        for (ok, text) in &self.lines {
            println!("  [{}] {text}", if *ok { "met" } else { "NOT MET" });
        }
    }
}

/// Progress message on stderr.
pub fn progress(bench: &str, msg: &str) {
    eprintln!("[{bench}] {msg}");
}

/// Formats nanoseconds with a unit that keeps 3-4 significant digits.
pub fn fmt_ns(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e4 {
        format!("{:.1} us", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// Formats a ratio `a / b` as `12.3x`.
pub fn fmt_ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.1}x", a / b)
    } else {
        "-".into()
    }
}

/// Runs the benchmarks named in `args`.
pub fn run(args: &BenchArgs) -> Result<(), BenchError> {
    let mode = if args.quick {
        Mode::Quick
    } else if args.full {
        Mode::Full
    } else {
        Mode::Default
    };
    let ctx = Ctx {
        mode,
        seed: args.seed,
    };
    INJECT_MISMATCH.store(args.inject_mismatch, std::sync::atomic::Ordering::Relaxed);
    let names: Vec<BenchName> = if args.names.is_empty() {
        BenchName::value_variants().to_vec()
    } else {
        args.names.clone()
    };
    eprintln!(
        "spacekit bench: {} ({:?} mode, bitmap backend {})",
        names
            .iter()
            .map(|n| n.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        mode,
        spacekit::bitmap::Backend::detect().name()
    );
    let mut reports = Vec::new();
    for &name in &names {
        let report = match name {
            BenchName::Membw => membw::run(&ctx)?,
            BenchName::ZeroArea => zero_area::run(&ctx)?,
            BenchName::Crc => crc::run(&ctx)?,
            BenchName::Dirty => dirty::run(&ctx)?,
            BenchName::Fork => fork::run(&ctx)?,
            BenchName::Rangetree => rangetree::run(&ctx)?,
            BenchName::Cma => cma::run(&ctx)?,
            BenchName::Ext4Fallocate => ext4_fallocate::run(&ctx)?,
        };
        reports.push((name, report));
    }
    if let Some(path) = &args.json {
        let value = if reports.len() == 1 {
            reports[0].1.to_json(reports[0].0.as_str())
        } else {
            Value::Array(reports.iter().map(|(n, r)| r.to_json(n.as_str())).collect())
        };
        let text = serde_json::to_string_pretty(&value)
            .map_err(|e| BenchError(format!("cannot encode JSON: {e}")))?;
        // Write to a temporary file first so a failure never leaves half a report.
        let tmp = path.with_extension("json.tmp");
        fs::write(&tmp, text + "\n")
            .and_then(|_| fs::rename(&tmp, path))
            .map_err(|e| BenchError(format!("cannot write {}: {e}", path.display())))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_reports_the_disagreeing_variant() {
        assert!(verify("x", &[("a", 1), ("b", 1), ("c", 1)]).is_ok());
        let e = verify("x", &[("a", 1), ("b", 1), ("c", 2)]).unwrap_err();
        assert!(e.0.contains("c gives 2"), "{e}");
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }

    #[test]
    fn medians_time_every_operation() {
        let t = Timer {
            sample: Duration::from_micros(50),
            samples: 3,
            budget: Duration::from_millis(50),
        };
        let (mut a, mut b) = (0u64, 0u64);
        let m = t.medians(&mut [batch(|| a += 1), batch(|| b += 1)]);
        assert_eq!(m.len(), 2);
        assert!(m.iter().all(|&x| x > 0.0));
        assert!(
            a >= 4 && b >= 4,
            "each op ran its calibration call and 3 samples"
        );
    }
}
