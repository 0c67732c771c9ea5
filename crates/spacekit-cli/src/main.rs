//! `spacekit`: benchmarks that reproduce the seeds' tables on this machine,
//! and tools over real data.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

// Messages to standard error that cannot be written (`2>/dev/full`, a
// closed terminal) are dropped: std's macros panic, which ended a command
// that had done its work with status 101. These shadow them in every
// module below.
macro_rules! eprintln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}
macro_rules! eprint {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($t)*);
    }};
}

mod args;
mod bench;
mod cleanup;
mod dirty;
mod ext4;
mod ext4_args;
mod ext4_ns;
mod ext4_populate;
mod maps;
mod migrate;
mod snapshot;

/// spacekit: fast paths for memory and storage managers.
///
/// `spacekit bench` reproduces the seeds' benchmark tables on this machine,
/// checking that every variant returns identical results before timing it.
#[derive(Parser, Debug)]
#[command(name = "spacekit", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run benchmarks: the seeds' experiments side by side with faithful ports
    /// of their "before" and "after" code.
    Bench(bench::BenchArgs),
    /// Dirty-page logs: turn a VM's dirty bitmap into memory ranges.
    Dirty(dirty::DirtyArgs),
    /// ext4 images: geometry, checksums, free extents, and files (ls, stat,
    /// fallocate, truncate, rm) written crash-safely with full accounting.
    Ext4(ext4::Ext4Args),
    /// Process address spaces: load a /proc/PID/maps into a range tree, list
    /// its gaps, find an unmapped area top-down like mmap, time its dup.
    Maps(maps::MapsArgs),
    /// Live migration of a real KVM guest's memory: dirty log or dirty ring
    /// to ranges each round, sent in Cloud Hypervisor's format to a
    /// receiver, checked page by page.
    Migrate(migrate::MigrateArgs),
    /// Memory snapshots: merge a full snapshot and its diffs, describe one.
    Snapshot(snapshot::SnapshotArgs),
}

fn main() -> ExitCode {
    quiet_broken_pipe();
    let cli = Cli::parse();
    // Only these commands write their results to standard output, and
    // write nothing else that can fail with EPIPE (no sockets).
    let output_only = !matches!(cli.command, Command::Bench(_) | Command::Migrate(_));
    let result = match cli.command {
        Command::Bench(args) => bench::run(&args),
        Command::Dirty(args) => dirty::run(&args),
        Command::Ext4(args) => ext4::run(&args),
        Command::Maps(args) => maps::run(&args),
        Command::Migrate(args) => migrate::run(&args),
        Command::Snapshot(args) => snapshot::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A write to a pipe whose reader has gone (`spacekit ... | head`):
        // quiet, with the status a SIGPIPE death gives, as for a panic
        // below.
        Err(e) if output_only && e.ends_with(BROKEN_PIPE) => ExitCode::from(141),
        Err(e) => {
            eprintln!("error: {}", printable(&e));
            ExitCode::FAILURE
        }
    }
}

/// How an `EPIPE` error ends its message (`std::io::Error`'s display).
const BROKEN_PIPE: &str = "(os error 32)";

/// `spacekit ... | head` closes stdout early: exit quietly with the status a
/// SIGPIPE death would give (141) instead of printing a panic.
fn quiet_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.contains("Broken pipe") {
            spacekit_bench::remove_scratch(); // exit runs no destructor
            std::process::exit(141);
        }
        default(info);
    }));
}

/// `text` with its control characters escaped (`\u{1b}`, `\n`, ...): an
/// error may quote a name from an archive or an image, which must not
/// move the cursor or recolour the terminal, nor split the one line.
fn printable(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}
