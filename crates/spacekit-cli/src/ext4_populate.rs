//! `spacekit ext4 populate`: build a tree into an image (the library's
//! `ext4::Populate`), with progress on standard error and a JSON summary.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use clap::{ArgGroup, Args};
use serde_json::json;
use spacekit::ext4::{Ext4Error, OpenMode, Populate, PopulateOptions, PopulateReport};

use crate::ext4_args::{open, print_json, source_date_epoch, Common};

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("source").required(true).args(["from", "tar"])))]
pub(crate) struct PopulateArgs {
    #[command(flatten)]
    common: Common,
    /// The host directory whose contents go in (the directory itself gives
    /// its mode, owner, times and xattrs to the target directory).
    #[arg(long, value_name = "DIR")]
    from: Option<PathBuf>,
    /// A tar archive whose entries go in (`-`: standard input): plain,
    /// gzip or zstd, GNU or PAX, with sparse files, xattrs and ACLs; its
    /// `./` entry gives its attributes to the target directory.
    #[arg(long, value_name = "FILE")]
    tar: Option<PathBuf>,
    /// The directory of the image to populate (absolute; it must exist).
    #[arg(long, value_name = "PATH", default_value = "/")]
    at: String,
    /// Every inode owned by UID:GID instead of the source's owners.
    #[arg(long, value_name = "UID:GID", value_parser = parse_owner, conflicts_with = "squash_owner")]
    owner: Option<(u32, u32)>,
    /// Every inode owned by root (0:0), for images built without root.
    #[arg(long)]
    squash_owner: bool,
    /// Clamp times for a reproducible image: mtimes after SECONDS become
    /// SECONDS, and atime, ctime and crtime equal the clamped mtime.
    /// Default: the SOURCE_DATE_EPOCH environment variable, when set (a
    /// value that is not a whole number of seconds is an error).
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    mtime: Option<i64>,
    /// No progress lines on standard error.
    #[arg(long, short)]
    quiet: bool,
}

/// `UID:GID` as two numbers.
fn parse_owner(s: &str) -> Result<(u32, u32), String> {
    let (u, g) = s
        .split_once(':')
        .ok_or_else(|| format!("{s}: expected UID:GID"))?;
    let n = |x: &str| {
        x.parse::<u32>()
            .map_err(|e| format!("{x}: not a number ({e})"))
    };
    Ok((n(u)?, n(g)?))
}

/// Runs `spacekit ext4 populate`.
pub(crate) fn populate(a: &PopulateArgs) -> Result<(), String> {
    let c = &a.common;
    let mut img = open(c, OpenMode::ReadWrite)?;
    let err = |e| format!("{}: {e}", c.image.display());
    let opts = PopulateOptions {
        owner: if a.squash_owner {
            Some((0, 0))
        } else {
            a.owner
        },
        clamp: match a.mtime {
            Some(t) => Some(t),
            None => source_date_epoch()?,
        },
    };
    let start = Instant::now();
    let mut pop = Populate::new(&mut img, &a.at, opts).map_err(err)?;
    if !a.quiet && std::io::stderr().is_terminal() {
        let mut last = Instant::now();
        pop.on_progress(move |r: &PopulateReport| {
            if last.elapsed().as_millis() >= 500 {
                last = Instant::now();
                let secs = start.elapsed().as_secs_f64().max(1e-9);
                eprint!(
                    "\rpopulate: {} entries, {:.1} MB ({:.0} MB/s)   ",
                    r.entries(),
                    r.bytes as f64 / 1e6,
                    r.bytes as f64 / 1e6 / secs
                );
            }
        });
    }
    // clap requires one of --from and --tar.
    let tar = a.tar.clone().unwrap_or_default();
    let (added, source) = match &a.from {
        Some(dir) => (pop.add_dir(dir), dir.display().to_string()),
        None if tar.as_os_str() == "-" => (pop.add_tar(std::io::stdin().lock()), "-".into()),
        None => match std::fs::File::open(&tar) {
            Ok(f) => (
                pop.add_tar(std::io::BufReader::new(f)),
                tar.display().to_string(),
            ),
            Err(e) => return Err(format!("{}: {e}", tar.display())),
        },
    };
    // The entry that failed, when the error is that entry's and does not
    // name it already (as `ext4: PATH: …`, or its image path `…/PATH: `):
    // `at PATH: ` before it. A shortage of room is the whole source's; a
    // source error names its own entry.
    let failed_at = pop
        .failed_at()
        .map(|p| String::from_utf8_lossy(p).into_owned());
    let r = match added {
        Ok(()) => pop.finish(),
        Err(e) => Err(e),
    };
    let at = |e: &Ext4Error| match (&failed_at, e) {
        (_, Ext4Error::PopulateNoSpace { .. } | Ext4Error::BadSource { .. }) => String::new(),
        (Some(p), e) => {
            let m = e.to_string();
            if m.contains(&format!("ext4: {p}:")) || m.contains(&format!("/{p}: ")) {
                String::new()
            } else {
                format!("at {p}: ")
            }
        }
        _ => String::new(),
    };
    if !a.quiet && std::io::stderr().is_terminal() {
        eprint!("\r\x1b[K");
    }
    let r = r.map_err(|e| {
        let at = at(&e);
        format!("{}: populate from {source}: {at}{e}", c.image.display())
    })?;
    let secs = start.elapsed().as_secs_f64();
    if c.json {
        print_json(&json!({
            "image": c.image.display().to_string(), "at": a.at, "from": source,
            "entries": r.entries(), "files": r.files, "dirs": r.dirs, "symlinks": r.symlinks,
            "nodes": r.nodes, "hard_links": r.hard_links, "xattrs": r.xattrs, "bytes": r.bytes,
            "replaced": r.replaced,
            "seconds": secs, "peak_rss_bytes": peak_rss()}));
    } else if !a.quiet {
        eprintln!(
            "populate {} from {}: {} files, {} directories, {} symlinks, {} special files, {} hard links, {} xattrs, {} bytes in {:.2} s",
            a.at,
            source,
            r.files,
            r.dirs,
            r.symlinks,
            r.nodes,
            r.hard_links,
            r.xattrs,
            r.bytes,
            secs
        );
        if r.replaced > 0 {
            eprintln!(
                "populate: {} entries replaced an earlier one of the same path (the later wins, as tar extracts)",
                r.replaced
            );
        }
    }
    Ok(())
}

/// This process's peak resident memory in bytes (`VmHWM` of
/// `/proc/self/status`: the address space since `exec`, without what a
/// spawning parent had), or `None` where there is no such file.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
