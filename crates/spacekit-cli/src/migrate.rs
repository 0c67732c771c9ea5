//! `spacekit migrate`: a pre-copy live migration of a real KVM guest's
//! memory to a receiver process, in Cloud Hypervisor's protocol.

use std::io::{self, IsTerminal, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::{error::ErrorKind, Args};
use serde_json::json;
use spacekit::kvm::converge::{AutoConverge, TimeoutAction};
use spacekit::kvm::{
    self, DirtyMode, Guest, GuestConfig, KvmError, MigrateConfig, MigrationReport, Workload,
};
use spacekit::migration::receive_connections_on_unix_socket;

use crate::maps::parse_size;

mod to_file;

/// Arguments of `spacekit migrate`.
#[derive(Args, Debug)]
#[command(
    after_long_help = "Starts a guest on /dev/kvm whose vCPUs write one byte to pages \
    chosen by the workload and migrates its memory while it runs: round 0 sends all of it; each \
    later round harvests KVM's dirty log (or ring) and the VMM's own log, builds the table of \
    dirty ranges and sends them over a Unix socket in Cloud Hypervisor's protocol. With \
    --downtime, once the dirty bytes can be sent within the target at the bandwidth measured so \
    far (without it, below --stop-below), the vCPUs are paused and the last round is sent; after \
    --rounds or --timeout, --on-timeout forces that round or abandons. --auto-converge throttles \
    the dirtiest vCPUs when the guest dirties faster than the link sends. Every page's CRC-32C is \
    then compared, unless the receiver is a plain Cloud Hypervisor one (the output says so). Without --to, a receiver child (`spacekit migrate --receive`) is started.\n\n\
    Exit status: 0 success; 1 failure (the migration, not converged with --on-timeout abandon, \
    a page that differs, a --listen path in use); 2 bad arguments, refused before anything starts (--size not a multiple of 2 MiB, ...)."
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
    /// Pause the guest once a round's dirty bytes fall below this (without
    /// --downtime).
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    stop_below: u64,
    /// Downtime target in milliseconds: pause once the dirty bytes can be
    /// sent within it at the bandwidth measured so far (instead of
    /// --stop-below).
    #[arg(long, value_name = "MS")]
    downtime: Option<u64>,
    /// Give up converging after this many seconds of pre-copy (as after
    /// --rounds); --on-timeout says how.
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,
    /// When --timeout or --rounds comes first: `force` (pause and send what
    /// is dirty, however long) or `abandon` (send Abandon and fail, exit 1).
    #[arg(long, default_value = "force", value_name = "ACTION")]
    on_timeout: TimeoutAction,
    /// Throttle the vCPUs (the dirtiest first, from the ring) when the guest
    /// dirties memory faster than the link sends it: 20% of their time,
    /// then 10% more per round, up to 99%; released at the end.
    #[arg(long)]
    auto_converge: bool,
    /// Hold the sender to this many bytes per second, like a link of that
    /// speed (K/M/G suffixes; default: as fast as the socket goes; one
    /// connection only).
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    bandwidth: Option<u64>,
    /// Memory connections: with N > 1, N extra connections (Cloud
    /// Hypervisor's multi-connection scheme) carry round 0 and rounds of 8
    /// MiB or more, cut by ranges, beside the main one, which carries the
    /// rest and the last round. The receiver accepts as many.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=128))]
    connections: u32,
    /// Do not offer the zero-page extension (every page is sent, as to a
    /// plain Cloud Hypervisor receiver, which never accepts it).
    #[arg(long)]
    no_zero_pages: bool,
    /// Host-side (DMA-like) writes per second through vm-memory.
    #[arg(long, default_value_t = 1000)]
    dma: u64,
    /// Milliseconds between rounds.
    #[arg(long, default_value_t = 20)]
    gap_ms: u64,
    /// Percent of the guest's pages filled with non-zero bytes before it
    /// starts (the rest are zero pages).
    #[arg(long, default_value_t = 0, value_name = "PERCENT")]
    fill: u8,
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
    /// Write the guest's memory to this snapshot file instead of migrating
    /// it (after --run-ms): a full snapshot (a sparse file at guest-physical
    /// offsets), or with --diff-from a diff. The snapshot is then compared
    /// with the paused guest's memory, page by page.
    #[arg(long, value_name = "SNAP", conflicts_with_all = ["to", "receive"])]
    to_file: Option<PathBuf>,
    /// Start the guest from this snapshot chain (a full snapshot, then its
    /// diffs in order: repeat the flag) and write --to-file as a diff of
    /// what it dirtied since, against the last.
    #[arg(long, value_name = "SNAP", requires = "to_file")]
    diff_from: Vec<PathBuf>,
    /// With --to-file: milliseconds the guest runs before the snapshot.
    #[arg(long, default_value_t = 200, value_name = "MS")]
    run_ms: u64,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// Runs `spacekit migrate`.
pub fn run(a: &MigrateArgs) -> Result<(), String> {
    if let (true, Some(path)) = (a.receive, &a.listen) {
        exit_with_sender(path);
        // Ctrl-C reaches a receiver child with its sender (one process
        // group): its socket goes with it.
        crate::cleanup::remove_on_interrupt(path);
        let (s, _) = receive_connections_on_unix_socket(path, a.size, 128)
            .map_err(|e| format!("receiver: {e}"))?;
        eprintln!(
            "receiver: {} memory requests, {} bytes ({} as zero pages), {} extra connections",
            s.memory_requests, s.bytes, s.zero_bytes, s.extra_connections
        );
        return Ok(());
    }
    if a.bandwidth.is_some() && a.connections > 1 {
        return Err("--bandwidth holds one connection: give --connections 1 (the default)".into());
    }
    let cfg = GuestConfig {
        mem_size: a.size,
        vcpus: a.vcpus,
        workload: a.workload,
        writes_per_sec: a.rate,
        max_writes: 0,
        fill_percent: a.fill,
        seed: a.seed,
        dirty: a.mode,
    };
    if let Err(e) = cfg.check() {
        clap::Error::raw(ErrorKind::ValueValidation, format!("{e}\n")).exit(); // status 2
    }
    if let Some(out) = &a.to_file {
        let run = Duration::from_millis(a.run_ms);
        return to_file::run(cfg, out, &a.diff_from, run, a.json);
    }
    // Before the guest and the receiver start: nothing to stop on a bad
    // value.
    if a.timeout
        .is_some_and(|t| Duration::try_from_secs_f64(t).is_err())
    {
        clap::Error::raw(
            ErrorKind::ValueValidation,
            "--timeout: seconds, 0 or more\n",
        )
        .exit();
    }
    let guest = Guest::start(cfg).map_err(|e| e.to_string())?;
    let (mut stream, child) = connect(a)?;
    let mcfg = MigrateConfig {
        max_rounds: a.rounds,
        stop_below_bytes: a.stop_below,
        dma_writes_per_sec: a.dma,
        round_gap: Duration::from_millis(a.gap_ms),
        downtime: a.downtime.map(Duration::from_millis),
        timeout: a.timeout.map(Duration::from_secs_f64),
        on_timeout: a.on_timeout,
        auto_converge: a.auto_converge.then(AutoConverge::default),
        bandwidth: a.bandwidth,
        zero_pages: !a.no_zero_pages,
        ..MigrateConfig::default()
    };
    let tty = io::stderr().is_terminal();
    // On an error the receiver child ends with this process (see
    // `exit_with_sender`).
    let mut extra = connect_extra(a, child.is_some())?;
    let result = kvm::migrate_connections(&guest, &mut stream, &mut extra, &mcfg, |r, _| {
        if tty {
            eprint!("\rround {} ({} dirty pages) ...   ", r.round, r.dirty_pages);
            let _ = io::stderr().flush();
        }
    });
    if tty {
        eprint!("\r{:50}\r", "");
    }
    drop(extra);
    drop(stream); // or a receiver child still reading it never exits
    let child_msg = child.map(finish_child).unwrap_or_default();
    let (report, failure) = match result {
        Ok(r) => (r, None),
        Err(e) => {
            let msg = format!("{e}{child_msg}");
            match e {
                // Not converged: the rounds are still worth printing.
                KvmError::NotConverged { report } => (*report, Some(msg)),
                _ => return Err(msg),
            }
        }
    };
    guest.stop().map_err(|e| e.to_string())?;
    if a.json {
        println!("{:#}", report_json(a, &report, failure.is_none()));
    } else {
        println!("{report}");
    }
    if let Some(f) = failure {
        return Err(f);
    }
    match report.differing_pages.first() {
        None => Ok(()),
        Some(p) => Err(format!(
            "{} pages differ, the first is page {p}",
            report.differing_pages.len()
        )),
    }
}

/// The extra connections (`--connections` above 1) to the receiver's
/// socket.
fn connect_extra(a: &MigrateArgs, child: bool) -> Result<Vec<UnixStream>, String> {
    if a.connections < 2 {
        return Ok(Vec::new());
    }
    let path = match &a.to {
        Some(p) => p.clone(),
        None if child => socket_path(),
        None => return Ok(Vec::new()),
    };
    (0..a.connections)
        .map(|_| {
            UnixStream::connect(&path)
                .map_err(|e| format!("extra connection to {}: {e}", path.display()))
        })
        .collect()
}

/// The socket of the receiver child.
fn socket_path() -> PathBuf {
    std::env::temp_dir().join(format!("spacekit-migrate-{}.sock", std::process::id()))
}

/// The `--json` object.
fn report_json(a: &MigrateArgs, report: &MigrationReport, completed: bool) -> serde_json::Value {
    let ns = |d: Duration| d.as_nanos() as f64;
    let rounds: Vec<_> = report
        .rounds
        .iter()
        .map(|r| {
            json!({
                "round": r.round, "last": r.last, "dirty_pages": r.dirty_pages,
                "kvm_pages": r.kvm_pages, "vmm_pages": r.vmm_pages, "ranges": r.ranges,
                "harvest_ns": ns(r.harvest), "build_ns": ns(r.build),
                "bytes_sent": r.bytes_sent, "payload_bytes": r.payload_bytes,
                "zero_bytes": r.zero_bytes, "connections": r.connections, "send_ns": ns(r.send),
                "dirty_pages_per_sec": r.dirty_pages_per_sec,
                "vcpu_dirty_pages": r.vcpu_dirty_pages, "throttle_percent": r.throttle,
                "bandwidth_bytes_per_sec": r.bandwidth,
                "predicted_ns": r.predicted.map(ns),
            })
        })
        .collect();
    json!({
        "guest_bytes": a.size, "rounds": rounds, "downtime_ns": ns(report.downtime),
        "downtime_target_ns": report.downtime_target.map(ns),
        "converged": report.converged, "completed": completed,
        "max_throttle_percent": report.max_throttle,
        "precopy_ns": ns(report.precopy), "guest_writes": report.guest_writes,
        "guest_writes_per_sec": report.guest_write_rate(),
        "dirty_pages_per_sec": report.dirty_page_rate(), "dma_writes": report.dma_writes,
        "requested_writes_per_sec": a.rate, "rate_reached": report.rate_reached(),
        "pages_checked": report.pages_checked, "differing_pages": report.differing_pages,
    })
}

/// The stream to the receiver: `--to`, or a child started on a fresh socket.
fn connect(a: &MigrateArgs) -> Result<(UnixStream, Option<Child>), String> {
    if let Some(path) = &a.to {
        let s =
            UnixStream::connect(path).map_err(|e| format!("connect {}: {e}", path.display()))?;
        return Ok((s, None));
    }
    let path = socket_path();
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .args("migrate --receive --listen".split(' '))
        .arg(&path)
        .arg(format!("--size={}", a.size))
        .env(SENDER_ENV, std::process::id().to_string())
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

/// Set in a receiver child's environment to the sender's process id.
const SENDER_ENV: &str = "SPACEKIT_MIGRATE_SENDER";

/// In a receiver child a sender started (its id in [`SENDER_ENV`]): ends
/// the process once its parent is no longer that sender (it exited or
/// was killed, maybe before this started), so a sender gone before its
/// first byte leaves no receiver waiting for another connection with the
/// guest's memory held.
fn exit_with_sender(socket: &std::path::Path) {
    let Some(sender) = std::env::var(SENDER_ENV)
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
    else {
        return;
    };
    let socket = socket.to_path_buf();
    std::thread::spawn(move || loop {
        if std::os::unix::process::parent_id() != sender {
            let _ = std::fs::remove_file(&socket);
            eprintln!("receiver: the sender exited");
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(200));
    });
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
