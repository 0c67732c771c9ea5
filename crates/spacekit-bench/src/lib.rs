//! spacekit's benchmarks, and the small framework they stand on.
//!
//! The rules every benchmark keeps:
//! * every variant's answer is computed outside the timed loop, and the
//!   benchmark fails (non-zero exit, no JSON written) if any two disagree
//!   ([`Comparison`] does it for each case);
//! * times are medians of repeated samples, and the variants of one case are
//!   sampled round-robin so drift on a noisy machine hits them alike; every
//!   ratio comes from one run;
//! * each benchmark is one file under `benches/` plus one line in the
//!   [`BENCHES`] table.
//!
//! [`run`] runs benchmarks and returns their [`Report`]s; [`write_json`]
//! writes the `--json` file (shape documented in `../shared/DESIGN.md`), and
//! [`html::write_report`] the `--report` page with one SVG chart each.

use std::path::Path;

use serde_json::Value;

mod benches;
pub mod chart;
mod context;
pub mod harness;
pub mod html;

pub use benches::{interrupt, interrupted, remove_scratch, Bench, BENCHES};
pub use context::{BenchError, Ctx, Mode};
pub use harness::{
    batch, fmt_ns, fmt_ratio, progress, verify, verify_lists, Bars, Comparison, Medians, Op,
    Report, Row, Table, Timer,
};

/// The benchmark called `name`.
pub fn find(name: &str) -> Option<&'static Bench> {
    BENCHES.iter().find(|b| b.name == name)
}

/// Runs the benchmarks named, in the order given (all of [`BENCHES`], in
/// the table's order, when `names` is empty; a name given twice runs
/// once), and returns each one's report.
pub fn run(names: &[String], ctx: &Ctx) -> Result<Vec<(&'static Bench, Report)>, BenchError> {
    let mut chosen: Vec<&'static Bench> = Vec::new();
    for n in names {
        let b = find(n).ok_or_else(|| BenchError(format!("no benchmark called {n}")))?;
        // A name given twice runs once.
        if !chosen.iter().any(|c| c.name == b.name) {
            chosen.push(b);
        }
    }
    if chosen.is_empty() {
        chosen = BENCHES.iter().collect();
    }
    eprintln!(
        "spacekit bench: {} ({:?} mode, {})",
        chosen.iter().map(|b| b.name).collect::<Vec<_>>().join(", "),
        ctx.mode,
        html::Machine::simd_summary()
    );
    let mut reports = Vec::with_capacity(chosen.len());
    for b in chosen {
        let report = (b.run)(ctx)?;
        reports.push((b, report));
    }
    Ok(reports)
}

/// A `--seed` value: decimal, or hex after `0x` (as the report shows it).
///
/// # Errors
/// A message saying what a seed may be.
pub fn parse_seed(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("not a 64-bit number (decimal, or hex after 0x): {e}"))
}

/// Checks, before a run, that its `--json` file and `--report` directory
/// can be written after it (see [`harness::check_writable`]).
///
/// # Errors
/// The first place that cannot be written, and why.
pub fn check_outputs(json: Option<&Path>, report: Option<&Path>) -> Result<(), BenchError> {
    if let Some(p) = json {
        harness::check_writable(p, false)?;
    }
    if let Some(d) = report {
        harness::check_writable(d, true)?;
    }
    Ok(())
}

/// Writes `reports` as the `--json` file: one `{"bench", "rows"}` object for
/// one benchmark, an array of them for several. Written to a temporary file
/// first and renamed, so a failure never leaves half a report.
pub fn write_json(path: &Path, reports: &[(&Bench, Report)]) -> Result<(), BenchError> {
    let value = match reports {
        [(b, r)] => r.to_json(b.name),
        _ => Value::Array(reports.iter().map(|(b, r)| r.to_json(b.name)).collect()),
    };
    let text = serde_json::to_string_pretty(&value)
        .map_err(|e| BenchError(format!("cannot encode JSON: {e}")))?;
    harness::write_whole(path, &(text + "\n"))
}
