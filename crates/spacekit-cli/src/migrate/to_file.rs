//! `spacekit migrate --to-file`: the guest's memory to a snapshot file
//! instead of a receiver: a full snapshot, or with `--diff-from` a diff of
//! what a guest restored from a snapshot chain dirtied since it started.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use spacekit::kvm::snapshot::{differing_pages, restore, SnapshotReport, Snapshotter};
use spacekit::kvm::{Guest, GuestConfig};

/// Takes the snapshot to `out` after the guest ran `run`; prints the
/// result; an error if it cannot, or if the snapshot (merged with its chain)
/// is not the guest's memory.
pub fn run(
    cfg: GuestConfig,
    out: &Path,
    chain: &[PathBuf],
    run: Duration,
    json_out: bool,
) -> Result<(), String> {
    check_chain(out, chain)?;
    crate::cleanup::on_interrupt(out);
    let (guest, report) = if chain.is_empty() {
        let guest = Guest::start(cfg).map_err(|e| e.to_string())?;
        std::thread::sleep(run);
        let (_, r) = Snapshotter::full(&guest, out, true).map_err(|e| e.to_string())?;
        (guest, r)
    } else {
        let (guest, base) = restore(cfg, chain).map_err(|e| e.to_string())?;
        std::thread::sleep(run);
        let r = Snapshotter::continue_from(&guest, base)
            .diff(&guest, out, true)
            .map_err(|e| e.to_string())?;
        (guest, r)
    };
    // The guest is paused: compare its memory with the snapshot, merged
    // with the chain for a diff.
    let differing = check(&guest, out, chain);
    guest.resume();
    guest.stop().map_err(|e| e.to_string())?;
    let differing = differing?;
    print(out, chain, &report, &differing, json_out)?;
    match differing.first() {
        None => Ok(()),
        Some(p) => Err(format!(
            "{} pages of the snapshot differ from the guest's memory, the first is page {p}",
            differing.len()
        )),
    }
}

/// Before the guest starts: `out` must not be a file of the chain (the
/// new snapshot is renamed over `out`, which would replace the base the
/// diff names), and every file of the chain must hold the data its
/// CRCs say, so that no guest runs on damaged memory and no diff names a
/// damaged base.
fn check_chain(out: &Path, chain: &[PathBuf]) -> Result<(), String> {
    if let Ok(o) = std::fs::metadata(out) {
        for c in chain {
            let m = std::fs::metadata(c).map_err(|e| format!("{}: {e}", c.display()))?;
            if (m.dev(), m.ino()) == (o.dev(), o.ino()) {
                return Err(format!(
                    "{}: the output is {} of the --diff-from chain: writing it would replace that file; give another path",
                    out.display(),
                    c.display()
                ));
            }
        }
    }
    for c in chain {
        let snap =
            spacekit::snapshot::Snapshot::open(c).map_err(|e| format!("{}: {e}", c.display()))?;
        snap.verify(&mut |_, _| {}).map_err(|e| {
            format!(
                "{}: {e} (the chain is checked before the guest starts)",
                c.display()
            )
        })?;
    }
    Ok(())
}

fn check(guest: &Guest, out: &Path, chain: &[PathBuf]) -> Result<Vec<u64>, String> {
    if chain.is_empty() {
        return differing_pages(guest, out).map_err(|e| e.to_string());
    }
    let name = out.file_name().map(|n| n.to_string_lossy().into_owned());
    let merged = out.with_file_name(format!(
        ".{}.sk-tmp.{}.check",
        name.unwrap_or_default(),
        std::process::id()
    ));
    crate::cleanup::on_interrupt(&merged);
    let diffs: Vec<PathBuf> = chain[1..]
        .iter()
        .cloned()
        .chain([out.to_path_buf()])
        .collect();
    let r = spacekit::snapshot::merge(&chain[0], &diffs, &merged)
        .map_err(|e| format!("merging the chain to check it: {e}"))
        .and_then(|_| differing_pages(guest, &merged).map_err(|e| e.to_string()));
    let _ = std::fs::remove_file(&merged);
    r
}

fn print(
    out: &Path,
    chain: &[PathBuf],
    r: &SnapshotReport,
    differing: &[u64],
    json_out: bool,
) -> Result<(), String> {
    let meta = std::fs::metadata(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let kind = if chain.is_empty() { "full" } else { "diff" };
    if json_out {
        let v = json!({
            "snapshot": out, "kind": kind, "base_chain": chain,
            "memory_bytes": r.info.memory_size, "pages": r.pages, "ranges": r.ranges,
            "paused_ns": r.paused.as_nanos() as f64, "file_bytes": meta.len(),
            "allocated_bytes": meta.blocks() * 512, "pages_checked": true,
            "differing_pages": differing,
        });
        println!("{v:#}");
    } else {
        println!(
            "{kind} snapshot {}: {} pages{} of {} MiB of memory, {:.1} MiB on disk ({} bytes long), \
             guest paused {:.1?}; {} pages differ from the guest's memory{}",
            out.display(),
            r.pages,
            if chain.is_empty() {
                String::new()
            } else {
                format!(" in {} ranges", r.ranges)
            },
            r.info.memory_size >> 20,
            (meta.blocks() * 512) as f64 / f64::from(1 << 20),
            meta.len(),
            r.paused,
            differing.len(),
            if chain.is_empty() {
                ""
            } else {
                " (the chain merged with this diff)"
            }
        );
    }
    Ok(())
}
