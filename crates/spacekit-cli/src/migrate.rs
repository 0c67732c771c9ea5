//! `spacekit migrate`: a pre-copy live migration of a real KVM guest's
//! memory to a receiver process, in Cloud Hypervisor's protocol.

use std::io::{self, IsTerminal, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::{error::ErrorKind, Args};
use serde_json::json;
use spacekit::kvm::{self, DirtyMode, Guest, GuestConfig, MigrateConfig, Workload};
use spacekit::migration::receive_on_unix_socket;

use crate::maps::parse_size;

/// Arguments of `spacekit migrate`.
#[derive(Args, Debug)]
#[command(
    after_long_help = "Starts a guest on /dev/kvm whose vCPUs write one byte to pages \
    chosen by the workload and migrates its memory while it runs: round 0 sends all of it; each \
    later round harvests KVM's dirty log (or ring) and the VMM's own log, builds the table of \
    dirty ranges and sends them over a Unix socket in Cloud Hypervisor's protocol. Below \
    --stop-below, or after --rounds, the vCPUs are paused, the last round is sent and every \
    page's CRC-32C is compared, unless the receiver is a plain Cloud Hypervisor one (the output \
    says so). Without --to, a receiver child (`spacekit migrate --receive`) is started.\n\n\
    Exit status: 0 success; 1 failure (the migration, a page that differs, a --listen path in \
    use); 2 bad arguments, refused before anything starts (--size not a multiple of 2 MiB, ...)."
)]
pub struct MigrateArgs {
    /// Guest memory (a multiple of 2 MiB; K/M/G suffixes).
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    size: u64,
    /// vCPUs (1 to 63).
    #[arg(long, default_value_t = 1)]
    vcpus: u32,
    /// What the vCPUs write: uniform, hot[:PAGES:PERCENT], sweep, idle.
    #[arg(long, default_value = "uniform")]
    workload: Workload,
    /// Target guest writes per second, all vCPUs together (0 = unpaced).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// How KVM reports dirty pages: log (KVM_GET_DIRTY_LOG), clear (then
    /// KVM_CLEAR_DIRTY_LOG), ring[:ENTRIES] (the dirty ring, 65536 entries).
    #[arg(long, default_value = "log")]
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

/// Runs `spacekit migrate`.
pub fn run(a: &MigrateArgs) -> Result<(), String> {
    if let (true, Some(path)) = (a.receive, &a.listen) {
        let (s, _) = receive_on_unix_socket(path, a.size).map_err(|e| format!("receiver: {e}"))?;
        eprintln!(
            "receiver: {} memory requests, {} bytes",
            s.memory_requests, s.bytes
        );
        return Ok(());
    }
    let cfg = GuestConfig {
        mem_size: a.size,
        vcpus: a.vcpus,
        workload: a.workload,
        writes_per_sec: a.rate,
        max_writes: 0,
        seed: a.seed,
        dirty: a.mode,
    };
    if let Err(e) = cfg.check() {
        clap::Error::raw(ErrorKind::ValueValidation, format!("{e}\n")).exit(); // status 2
    }
    let guest = Guest::start(cfg).map_err(|e| e.to_string())?;
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
    drop(stream); // or a receiver child still reading it never exits
    let child_msg = child.map(finish_child).unwrap_or_default();
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
            "requested_writes_per_sec": a.rate, "rate_reached": report.rate_reached(),
            "pages_checked": report.pages_checked, "differing_pages": report.differing_pages,
        });
        println!("{out:#}");
    } else {
        println!("{report}");
    }
    match report.differing_pages.first() {
        None => Ok(()),
        Some(p) => Err(format!(
            "{} pages differ, the first is page {p}",
            report.differing_pages.len()
        )),
    }
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
        .args("migrate --receive --listen".split(' '))
        .arg(&path)
        .arg(format!("--size={}", a.size))
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
                    let why = finish_child(child);
                    return Err(format!("the receiver did not listen: {e}{why}"));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// Waits for the receiver child, at most 30 s (then kills it); its error
/// output if it failed.
fn finish_child(mut child: Child) -> String {
    let t = Instant::now();
    while matches!(child.try_wait(), Ok(None)) && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill(); // harmless once it has exited
    match child.wait_with_output() {
        Ok(out) if out.status.success() => String::new(),
        Ok(out) => format!(
            " (receiver: {}, {})",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => format!(" (waiting for the receiver: {e})"),
    }
}
