//! `spacekit snapshot`: merge a full memory snapshot and its diffs, and
//! describe a snapshot file.

use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde_json::json;
use spacekit::snapshot::{self, Snapshot, SnapshotError, SnapshotInfo};

/// Arguments of `spacekit snapshot`.
#[derive(Args, Debug)]
#[command(
    after_long_help = "Exit status: 0 success; 1 failure (a file missing, damaged, \
    of the wrong kind, or a diff of another base); 2 bad arguments, refused before anything is read."
)]
pub struct SnapshotArgs {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Apply diffs, in the order taken, to a full snapshot: write the memory
    /// as it was at the last diff as a new full snapshot.
    ///
    /// Every diff must name the snapshot before it as its base (BASE for the
    /// first); the chain is checked before anything is written. The output is
    /// built in one pass over memory, every zero page a hole, and the CRC of
    /// everything read is checked. It is written beside OUT under a
    /// temporary name and renamed over OUT only when complete: a failed or
    /// killed merge leaves OUT as it was (Ctrl-C or SIGTERM also removes
    /// the temporary file; exit status 130, or 143 after SIGTERM). A
    /// progress line goes to stderr on a
    /// terminal for memories of 64 MiB and more.
    ///
    /// Exit status: 0 success; 1 failure; 2 bad arguments.
    Merge(MergeArgs),
    /// Describe a snapshot: kind, sizes, ranges, ids, bytes allocated on
    /// disk.
    ///
    /// A full snapshot is the guest's memory at guest-physical offsets, zero
    /// pages left as holes, then a 4 KiB trailer; a diff holds the ranges
    /// dirtied since its base, with its own range table, and names the
    /// snapshot it applies to (the full one, or the diff before it). Every
    /// file carries CRC-32Cs; --verify reads all the data to check them.
    Info(InfoArgs),
}

#[derive(Args, Debug)]
struct MergeArgs {
    /// The full snapshot (or a raw memory image) the first diff applies to.
    base: PathBuf,
    /// The diffs, oldest first.
    #[arg(required = true)]
    diffs: Vec<PathBuf>,
    /// The merged full snapshot to write.
    #[arg(short, long, value_name = "OUT")]
    out: PathBuf,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct InfoArgs {
    /// The snapshot file.
    file: PathBuf,
    /// Also read all of its data and check its CRC.
    #[arg(long)]
    verify: bool,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// Runs `spacekit snapshot`.
pub fn run(a: &SnapshotArgs) -> Result<(), String> {
    let (path, info, json, extra) = match &a.command {
        Cmd::Merge(m) => {
            crate::cleanup::on_interrupt(&m.out);
            let info = progress("merge", |p| {
                snapshot::merge_with_progress(&m.base, &m.diffs, &m.out, p)
            })?;
            (&m.out, info, m.json, json!({ "diffs": m.diffs.len() }))
        }
        Cmd::Info(i) => {
            // An error that names no file (a raw image of an odd size)
            // gets the one given.
            let snap = Snapshot::open(&i.file).map_err(|e| match e.path() {
                Some(_) => e.to_string(),
                None => format!("{}: {e}", i.file.display()),
            })?;
            if i.verify {
                progress("verify", |p| snap.verify(p))?;
            }
            let extra = json!({ "verified": i.verify });
            (&i.file, snap.info().clone(), i.json, extra)
        }
    };
    report(path, &info, json, extra);
    Ok(())
}

/// Runs `f` with a progress callback that rewrites one stderr line on a
/// terminal for memories of 64 MiB and more, cleared at the end.
fn progress<T>(
    what: &str,
    f: impl FnOnce(&mut dyn FnMut(u64, u64)) -> Result<T, SnapshotError>,
) -> Result<T, String> {
    let tty = io::stderr().is_terminal();
    let r = f(&mut |done, total| {
        if tty && total >= 64 << 20 {
            eprint!("\r{what}: {} of {} MiB", done >> 20, total >> 20);
            let _ = io::stderr().flush();
        }
    });
    if tty {
        eprint!("\r{:60}\r", "");
    }
    r.map_err(|e| e.to_string())
}

/// Prints `info` about `path`, as JSON (with the fields of `extra` added)
/// or as text.
fn report(path: &Path, info: &SnapshotInfo, as_json: bool, mut extra: serde_json::Value) {
    let base = info.base_id.map(|b| b.to_string());
    if as_json {
        let v = json!({
            "file": path.display().to_string(), "kind": info.kind.name(),
            "page_size": info.page_size, "memory_size": info.memory_size,
            "id": info.id.to_string(), "base_id": base, "ranges": info.ranges,
            "data_bytes": info.data_bytes, "data_offset": info.data_offset,
            "data_crc": info.data_crc, "file_bytes": info.file_bytes,
            "allocated_bytes": info.allocated_bytes, "raw": info.raw,
        });
        if let (Some(e), Some(v)) = (extra.as_object_mut(), v.as_object()) {
            e.extend(v.clone());
        }
        return println!("{extra:#}");
    }
    let raw = [" (raw image, no trailer)", ""][usize::from(!info.raw)];
    let (file, kind, size, ps) = (path.display(), info.kind, info.memory_size, info.page_size);
    println!("{file}: {kind} snapshot{raw}\nmemory     {size} bytes, {ps}-byte pages");
    println!("id         {}", info.id);
    if let Some(b) = base {
        let (n, d) = (info.ranges, info.data_bytes);
        println!("base       {b}\nranges     {n}, {d} bytes of data");
    }
    let (len, alloc) = (info.file_bytes, info.allocated_bytes);
    println!("file       {len} bytes, {alloc} allocated");
    if extra["verified"] == true {
        println!("verified   every data byte matches its CRC-32C");
    }
}
