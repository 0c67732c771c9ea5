//! `spacekit bench`: argument parsing over `spacekit-bench`.

use std::path::PathBuf;

use clap::builder::{PossibleValue, PossibleValuesParser};
use clap::Args;
use spacekit_bench::{Ctx, Mode, BENCHES};

/// Arguments of `spacekit bench`.
#[derive(Args, Debug)]
#[command(
    after_long_help = "Every benchmark first checks that all variants return identical \
    results and exits non-zero (writing no JSON and no report) if any two disagree. Times are \
    medians; variants are sampled round-robin and every ratio comes from one run."
)]
pub struct BenchArgs {
    /// Benchmarks to run (all when none is named).
    #[arg(value_parser = names())]
    names: Vec<String>,
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
    /// Write an HTML report to DIR/index.html: per benchmark, SVG charts,
    /// its tables and its bars, and the machine. Self-contained (opens
    /// offline).
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
    /// Seed of the random data (the same seed gives the same data);
    /// decimal, or hex with `0x` as the report shows it.
    #[arg(long, default_value = "0x5eed0000", value_parser = spacekit_bench::parse_seed)]
    seed: u64,
    /// Test hook: make the first verification fail, to check that a
    /// disagreement exits non-zero and writes no JSON.
    #[arg(long, hide = true)]
    inject_mismatch: bool,
}

/// The registry's names, with their descriptions for `--help`.
fn names() -> PossibleValuesParser {
    PossibleValuesParser::new(
        BENCHES
            .iter()
            .map(|b| PossibleValue::new(b.name).help(b.about)),
    )
}

/// Runs `spacekit bench`.
pub fn run(args: &BenchArgs) -> Result<(), String> {
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
    // Ctrl-C: the run stops at its next command or round and drops its
    // loop mounts and scratch images; a run still busy after 10 s has them
    // removed from outside.
    crate::cleanup::on_interrupt_run(|| {
        spacekit_bench::interrupt();
        std::thread::sleep(std::time::Duration::from_secs(10));
        spacekit_bench::remove_scratch();
    });
    // Where the results go is checked now, not after minutes of running.
    spacekit_bench::check_outputs(args.json.as_deref(), args.report.as_deref())
        .map_err(|e| e.to_string())?;
    spacekit_bench::harness::inject_mismatch(args.inject_mismatch);
    let reports = spacekit_bench::run(&args.names, &ctx).map_err(|e| {
        if spacekit_bench::interrupted() {
            eprintln!("interrupted");
            std::process::exit(crate::cleanup::interrupted_status());
        }
        e.to_string()
    })?;
    if let Some(path) = &args.json {
        spacekit_bench::write_json(path, &reports).map_err(|e| e.to_string())?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(dir) = &args.report {
        let page =
            spacekit_bench::html::write_report(dir, &ctx, &reports).map_err(|e| e.to_string())?;
        eprintln!("wrote {}", page.display());
    }
    Ok(())
}
