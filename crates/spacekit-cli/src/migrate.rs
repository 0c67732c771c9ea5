//! `spacekit migrate`: a pre-copy live migration of a real KVM guest's
//! memory to a receiver process, in Cloud Hypervisor's protocol.

use std::io::{self, IsTerminal, Read, Write};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;
use spacekit::kvm::{self, DirtyMode, Guest, GuestConfig, MigrateConfig, Workload};
use spacekit::migration::{receive_on_unix_socket, MigrationError};

use crate::maps::parse_size;

/// Arguments of `spacekit migrate`.
#[derive(Args, Debug)]
#[command(
    after_long_help = "Starts a guest on /dev/kvm whose vCPUs write one byte to pages \
    chosen by the workload and migrates its memory while it runs: round 0 sends all of it; each \
    later round harvests KVM's dirty log (or ring) and the VMM's own log, builds the table of \
    dirty ranges and sends them over a Unix socket in Cloud Hypervisor's format. Below \
    --stop-below, or after --rounds, the vCPUs are paused, the last round is sent and every \
    page's CRC-32C is compared. Without --to, a receiver child (`spacekit migrate --receive`) \
    is started. The stream is Cloud Hypervisor's protocol (Start, Config, Memory rounds, State, \
    Complete); spacekit's page-hash check is offered in header bytes Cloud Hypervisor ignores and \
    used only when the receiver accepts it: against a plain Cloud Hypervisor receiver (--to) the \
    pages are not compared, and the output says so. A paced workload (--rate) that this host cannot \
    run at its rate gets a warning with the rate reached.\n\n\
    Exit status: 0 when the migration completed (and every page compared equal); 1 when it \
    failed, or a page differs; 2 for bad arguments, all refused before anything starts (a value \
    that does not parse, --size not a multiple of 2 MiB, --vcpus outside 1..=63, a ring that is \
    not a power of two of at least 256 entries, a --listen path that is not a socket or is in \
    use)."
)]
pub struct MigrateArgs {
    /// Guest memory (a multiple of 2 MiB; K/M/G suffixes).
    #[arg(long, default_value = "256M", value_parser = parse_guest_size)]
    size: u64,
    /// vCPUs (1 to 63).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=63))]
    vcpus: u32,
    /// What the vCPUs write: uniform, hot[:PAGES:PERCENT], sweep, idle.
    #[arg(long, default_value = "uniform")]
    workload: Workload,
    /// Target guest writes per second, all vCPUs together (0 = unpaced).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// How KVM reports dirty pages: log (KVM_GET_DIRTY_LOG), clear (then
    /// KVM_CLEAR_DIRTY_LOG), ring[:ENTRIES] (the dirty ring, 65536 entries).
    #[arg(long, default_value = "log", value_parser = parse_mode)]
    mode: DirtyMode,
    /// Most pre-copy rounds after round 0.
    #[arg(long, default_value_t = 8)]
    rounds: u32,
    /// Pause the guest once a round's dirty bytes fall below this.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    stop_below: u64,
    /// Host-side (DMA-like) writes per second through vm-memory.
    #[arg(long, default_value_t = 1000)]
    dma: u64,
    /// Milliseconds between rounds.
    #[arg(long, default_value_t = 20)]
    gap_ms: u64,
    /// Seed of the guest's random page choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Connect to a receiver listening on this Unix socket.
    #[arg(long, value_name = "SOCKET", conflicts_with = "receive")]
    to: Option<PathBuf>,
    /// Be the receiver: listen on --listen, take one migration of --size
    /// bytes, and exit.
    #[arg(long, requires = "listen")]
    receive: bool,
    /// The receiver's Unix socket path.
    #[arg(long, value_name = "SOCKET")]
    listen: Option<PathBuf>,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// How `spacekit migrate` failed: the exit status rule of its `--help`.
#[derive(Debug)]
pub enum Failure {
    /// A bad argument, refused before anything started: exit status 2.
    Usage(String),
    /// The migration failed or a page differs: exit status 1.
    Failed(String),
}

impl From<String> for Failure {
    fn from(e: String) -> Self {
        Failure::Failed(e)
    }
}

/// A guest size: a size (K/M/G suffixes) that is a multiple of 2 MiB.
fn parse_guest_size(s: &str) -> Result<u64, String> {
    let n = parse_size(s)?;
    if n % (2 << 20) != 0 {
        return Err(format!("{n} bytes is not a multiple of 2 MiB"));
    }
    Ok(n)
}

/// A dirty-tracking mode; a ring's entries must be a power of two of at
/// least 256 (one page of entries; the host's own maximum is checked when
/// the guest starts).
fn parse_mode(s: &str) -> Result<DirtyMode, String> {
    let mode: DirtyMode = s.parse().map_err(|e| format!("{e}"))?;
    if let DirtyMode::Ring { entries } = mode {
        if !entries.is_power_of_two() || entries < 256 {
            return Err(format!(
                "a ring of {entries} entries: must be a power of two of at least 256"
            ));
        }
    }
    Ok(mode)
}

/// Refuses a `--listen` path that holds anything but a socket (a stale
/// socket is replaced by the receiver; a live one it refuses itself).
fn check_listen_path(path: &Path) -> Result<(), Failure> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => Err(Failure::Usage(format!(
            "--listen {}: exists and is not a socket; refusing to replace it",
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// Runs `spacekit migrate`.
pub fn run(a: &MigrateArgs) -> Result<(), Failure> {
    if let (true, Some(path)) = (a.receive, &a.listen) {
        check_listen_path(path)?;
        let (s, _) = receive_on_unix_socket(path, a.size).map_err(|e| match e {
            MigrationError::Io {
                kind: io::ErrorKind::AlreadyExists | io::ErrorKind::AddrInUse,
                ..
            } => Failure::Usage(format!("--listen: {e}")),
            e => Failure::Failed(format!("receiver: {e}")),
        })?;
        eprintln!(
            "receiver: {} memory requests, {} bytes",
            s.memory_requests, s.bytes
        );
        return Ok(());
    }
    let (mem_size, vcpus, seed) = (a.size, a.vcpus, a.seed);
    let guest = Guest::start(GuestConfig {
        mem_size,
        vcpus,
        workload: a.workload,
        writes_per_sec: a.rate,
        max_writes: 0,
        seed,
        dirty: a.mode,
    })
    .map_err(|e| e.to_string())?;
    let (mut stream, child) = connect(a)?;
    let mcfg = MigrateConfig {
        max_rounds: a.rounds,
        stop_below_bytes: a.stop_below,
        dma_writes_per_sec: a.dma,
        round_gap: Duration::from_millis(a.gap_ms),
        ..MigrateConfig::default()
    };
    let tty = io::stderr().is_terminal();
    let result = kvm::migrate(&guest, &mut stream, &mcfg, |r, _| {
        if tty {
            eprint!("\rround {} ({} dirty pages) ...   ", r.round, r.dirty_pages);
            let _ = io::stderr().flush();
        }
    });
    if tty {
        eprint!("\r{:50}\r", "");
    }
    // Close the stream before waiting: a receiver child still reading it
    // would otherwise wait for this process while this one waits for it.
    drop(stream);
    let child_msg = finish_child(child);
    let report = result.map_err(|e| format!("{e}{child_msg}"))?;
    guest.stop().map_err(|e| e.to_string())?;
    let ns = |d: Duration| d.as_nanos() as f64;
    if a.json {
        let rounds: Vec<_> = report
            .rounds
            .iter()
            .map(|r| {
                json!({
                    "round": r.round, "last": r.last, "dirty_pages": r.dirty_pages,
                    "kvm_pages": r.kvm_pages, "vmm_pages": r.vmm_pages, "ranges": r.ranges,
                    "harvest_ns": ns(r.harvest), "build_ns": ns(r.build),
                    "bytes_sent": r.bytes_sent, "send_ns": ns(r.send),
                })
            })
            .collect();
        let out = json!({
            "guest_bytes": a.size, "rounds": rounds, "downtime_ns": ns(report.downtime),
            "precopy_ns": ns(report.precopy), "guest_writes": report.guest_writes,
            "guest_writes_per_sec": report.guest_write_rate(),
            "dirty_pages_per_sec": report.dirty_page_rate(), "dma_writes": report.dma_writes,
            "requested_writes_per_sec": a.rate, "pages_checked": report.pages_checked,
            "differing_pages": report.differing_pages,
        });
        println!("{out:#}");
    } else {
        println!("{report}");
    }
    if let Some(w) = rate_warning(a.rate, report.guest_write_rate()) {
        eprintln!("{w}");
    }
    match report.differing_pages.first() {
        None => Ok(()),
        Some(p) => Err(Failure::Failed(format!(
            "{} pages differ, the first is page {p}",
            report.differing_pages.len()
        ))),
    }
}

/// A warning when a paced guest (`--rate`) made fewer than 90% of the
/// writes per second asked for.
fn rate_warning(asked: u64, reached: f64) -> Option<String> {
    if asked == 0 || reached >= 0.9 * asked as f64 {
        return None;
    }
    Some(format!(
        "warning: the guest made {reached:.0} writes/s, short of --rate {asked} ({:.0}%): its \
         vCPUs could not write faster on this host (every write to a page being logged can \
         exit to KVM); the migration ran at the rate reached",
        100.0 * reached / asked as f64
    ))
}

/// The stream to the receiver: `--to`, or a child started on a fresh socket.
fn connect(a: &MigrateArgs) -> Result<(UnixStream, Option<Child>), String> {
    if let Some(path) = &a.to {
        let s =
            UnixStream::connect(path).map_err(|e| format!("connect {}: {e}", path.display()))?;
        return Ok((s, None));
    }
    let path = std::env::temp_dir().join(format!("spacekit-migrate-{}.sock", std::process::id()));
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .args([
            "migrate",
            "--receive",
            "--size",
            &a.size.to_string(),
            "--listen",
        ])
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the receiver: {e}"))?;
    let t = Instant::now();
    loop {
        match UnixStream::connect(&path) {
            Ok(s) => return Ok((s, Some(child))),
            Err(e) => {
                let exited = child.try_wait().ok().flatten();
                if exited.is_some() || t.elapsed() > Duration::from_secs(10) {
                    let _ = child.kill();
                    let why = finish_child(Some(child));
                    return Err(format!("the receiver did not listen: {e}{why}"));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// How long the receiver child may take to exit once the stream is closed.
const CHILD_EXIT_WAIT: Duration = Duration::from_secs(30);

/// Waits for the receiver child (at most [`CHILD_EXIT_WAIT`], then kills
/// it); its error output if it failed.
fn finish_child(child: Option<Child>) -> String {
    let Some(mut child) = child else {
        return String::new();
    };
    // Its error output is read as it comes, so a full pipe never blocks it.
    let reader = child.stderr.take().map(|mut e| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = e.read_to_string(&mut s);
            s
        })
    });
    let t = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Ok(st),
            Ok(None) if t.elapsed() < CHILD_EXIT_WAIT => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(format!(
                    "did not exit within {} s and was killed",
                    CHILD_EXIT_WAIT.as_secs()
                ));
            }
            Err(e) => break Err(format!("waiting for it: {e}")),
        }
    };
    let stderr = reader.and_then(|r| r.join().ok()).unwrap_or_default();
    match status {
        Ok(st) if st.success() => String::new(),
        Ok(st) => format!(" (receiver: {st}, {})", stderr.trim()),
        Err(why) => format!(" (receiver: {why}; {})", stderr.trim()),
    }
}
