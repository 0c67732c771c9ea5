//! `spacekit migrate`: a pre-copy live migration of a real KVM guest's
//! memory to a receiver process, in Cloud Hypervisor's wire format.

use std::io::{self, IsTerminal, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use serde_json::json;
use spacekit::kvm::{self, DirtyMode, Guest, GuestConfig, MigrateConfig, RoundReport, Workload};
use spacekit::migration::Receiver;

use crate::maps::parse_size;

/// Arguments of `spacekit migrate`.
#[derive(Args, Debug)]
#[command(
    after_long_help = "Starts a guest on /dev/kvm whose vCPUs write one byte to pages \
    chosen by the workload, then migrates its memory while it runs: round 0 sends all of it, \
    each later round harvests KVM's dirty log (or dirty ring) and the VMM's own log, builds the \
    table of dirty ranges with spacekit and sends the ranges with their bytes over a Unix \
    socket, in Cloud Hypervisor's format (16-byte request headers, a table of 16-byte \
    {gpa, length} entries, then the memory). When a round's dirty bytes fall below \
    --stop-below, or after --rounds rounds, the vCPUs are paused, the last round is sent, and \
    every page's CRC-32C is compared between source and destination. Without --to, a receiver \
    child (`spacekit migrate --receive`) is started on a socket in the temporary directory. \
    Exits non-zero if any page differs."
)]
pub struct MigrateArgs {
    /// Guest memory (a multiple of 2 MiB; K/M/G suffixes).
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    size: u64,
    /// vCPUs (1 to 63).
    #[arg(long, default_value_t = 1)]
    vcpus: u32,
    /// What the vCPUs write.
    #[arg(long, value_enum, default_value_t = WorkloadArg::Uniform)]
    workload: WorkloadArg,
    /// Hot set size in pages (`hot` workload).
    #[arg(long, default_value_t = 1024)]
    hot_pages: u64,
    /// Percent of writes that go to the hot set (`hot` workload).
    #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u8).range(0..=100))]
    hot_percent: u8,
    /// Target guest writes per second, all vCPUs together (0 = as fast as
    /// they can).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// How KVM reports dirty pages.
    #[arg(long, value_enum, default_value_t = ModeArg::Log)]
    mode: ModeArg,
    /// Entries per vCPU dirty ring (`--mode ring`; a power of two).
    #[arg(long, default_value_t = 65536)]
    ring_entries: u32,
    /// Most pre-copy rounds after round 0.
    #[arg(long, default_value_t = 8)]
    rounds: u32,
    /// Pause the guest once a round's dirty bytes fall below this.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    stop_below: u64,
    /// Host-side (DMA-like) writes per second into guest memory through
    /// vm-memory during pre-copy.
    #[arg(long, default_value_t = 1000)]
    dma: u64,
    /// Milliseconds between rounds.
    #[arg(long, default_value_t = 20)]
    gap_ms: u64,
    /// Seed of the guest's random page choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Connect to a receiver listening on this Unix socket instead of
    /// starting one.
    #[arg(long, value_name = "SOCKET", conflicts_with = "receive")]
    to: Option<PathBuf>,
    /// Be the receiver: listen on --listen, take one migration into a
    /// --size buffer, and exit.
    #[arg(long, requires = "listen")]
    receive: bool,
    /// The receiver's Unix socket path.
    #[arg(long, value_name = "SOCKET")]
    listen: Option<PathBuf>,
    /// Print the result as JSON on stdout instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum WorkloadArg {
    /// Random pages, uniform over guest memory.
    Uniform,
    /// A hot set plus a uniform cold tail.
    Hot,
    /// Pages in order, wrapping around.
    Sweep,
    /// No writes.
    Idle,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ModeArg {
    /// KVM_GET_DIRTY_LOG (returns and clears).
    Log,
    /// KVM_GET_DIRTY_LOG then KVM_CLEAR_DIRTY_LOG of the harvested pages
    /// (MANUAL_DIRTY_LOG_PROTECT2).
    Clear,
    /// The per-vCPU dirty ring (KVM_CAP_DIRTY_LOG_RING).
    Ring,
}

/// Runs `spacekit migrate`.
pub fn run(a: &MigrateArgs) -> Result<(), String> {
    if a.receive {
        let path = a.listen.as_deref().ok_or("--receive needs --listen")?;
        return receive(path, a.size);
    }
    let config = GuestConfig {
        mem_size: a.size,
        vcpus: a.vcpus,
        workload: match a.workload {
            WorkloadArg::Uniform => Workload::Uniform,
            WorkloadArg::Hot => Workload::Hot {
                hot_pages: a.hot_pages,
                hot_percent: a.hot_percent,
            },
            WorkloadArg::Sweep => Workload::Sweep,
            WorkloadArg::Idle => Workload::Idle,
        },
        writes_per_sec: a.rate,
        max_writes: 0,
        seed: a.seed,
        dirty: match a.mode {
            ModeArg::Log => DirtyMode::Log,
            ModeArg::Clear => DirtyMode::ClearLog,
            ModeArg::Ring => DirtyMode::Ring {
                entries: a.ring_entries,
            },
        },
    };
    let guest = Guest::start(config).map_err(|e| e.to_string())?;
    let (mut stream, child) = connect(a)?;
    let mcfg = MigrateConfig {
        max_rounds: a.rounds,
        stop_below_bytes: a.stop_below,
        dma_writes_per_sec: a.dma,
        round_gap: Duration::from_millis(a.gap_ms),
    };
    let tty = io::stderr().is_terminal() && !a.json;
    if !a.json {
        println!(
            "{:<10} {:>11} {:>9} {:>9} {:>10} {:>10} {:>11} {:>10}",
            "round", "dirty pages", "ranges", "kvm/vmm", "harvest", "build", "sent", "send"
        );
    }
    let result = kvm::migrate(&guest, &mut stream, &mcfg, |r, _| {
        if tty {
            eprint!("\rround {} ({} pages)...", r.round, r.dirty_pages);
            let _ = io::stderr().flush();
        }
    });
    if tty {
        eprint!("\r{:40}\r", "");
    }
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            let why = finish_child(child);
            return Err(format!("{e}{why}"));
        }
    };
    let child_msg = finish_child(child);
    guest.stop().map_err(|e| e.to_string())?;
    if a.json {
        let rounds: Vec<_> = report.rounds.iter().map(round_json).collect();
        let out = json!({
            "guest_bytes": a.size,
            "rounds": rounds,
            "downtime_ns": report.downtime.as_nanos() as u64,
            "precopy_ns": report.precopy.as_nanos() as u64,
            "guest_writes": report.guest_writes,
            "guest_writes_per_sec": report.guest_write_rate(),
            "dirty_pages_per_sec": report.dirty_page_rate(),
            "dma_writes": report.dma_writes,
            "differing_pages": report.differing_pages,
        });
        println!("{out:#}");
    } else {
        for r in &report.rounds {
            println!(
                "{:<10} {:>11} {:>9} {:>9} {:>10} {:>10} {:>11} {:>10}",
                format!("{}{}", r.round, if r.last { " paused" } else { "" }),
                r.dirty_pages,
                r.ranges,
                if r.round == 0 {
                    "-".to_string()
                } else {
                    format!("{}/{}", short(r.kvm_pages), short(r.vmm_pages))
                },
                dur(r.harvest),
                dur(r.build),
                format!("{:.1} MiB", r.bytes_sent as f64 / (1u64 << 20) as f64),
                dur(r.send),
            );
        }
        println!(
            "downtime {} (pause to the last round's acknowledgement); guest {:.0} writes/s, \
             {:.0} dirty pages/s over {} of pre-copy; {} host DMA writes",
            dur(report.downtime),
            report.guest_write_rate(),
            report.dirty_page_rate(),
            dur(report.precopy),
            report.dma_writes,
        );
        println!(
            "{} of {} pages differ between source and destination{child_msg}",
            report.differing_pages.len(),
            a.size / 4096
        );
    }
    if report.differing_pages.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} pages differ, first {:?}",
            report.differing_pages.len(),
            &report.differing_pages[..report.differing_pages.len().min(8)]
        ))
    }
}

fn round_json(r: &RoundReport) -> serde_json::Value {
    json!({
        "round": r.round, "last": r.last, "dirty_pages": r.dirty_pages,
        "kvm_pages": r.kvm_pages, "vmm_pages": r.vmm_pages, "ranges": r.ranges,
        "harvest_ns": r.harvest.as_nanos() as u64, "build_ns": r.build.as_nanos() as u64,
        "bytes_sent": r.bytes_sent, "send_ns": r.send.as_nanos() as u64,
    })
}

fn short(n: u64) -> String {
    if n >= 10_000 {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

fn dur(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 1e6 {
        format!("{:.2} s", us / 1e6)
    } else if us >= 1e3 {
        format!("{:.2} ms", us / 1e3)
    } else {
        format!("{us:.0} us")
    }
}

/// The stream to the receiver: `--to`, or a child started on a fresh socket.
fn connect(a: &MigrateArgs) -> Result<(UnixStream, Option<Child>), String> {
    if let Some(path) = &a.to {
        let s = UnixStream::connect(path)
            .map_err(|e| format!("cannot connect to {}: {e}", path.display()))?;
        return Ok((s, None));
    }
    let path = std::env::temp_dir().join(format!("spacekit-migrate-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .args(["migrate", "--receive", "--size"])
        .arg(a.size.to_string())
        .arg("--listen")
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
            Err(_) if t.elapsed() < Duration::from_secs(10) => {
                if let Ok(Some(st)) = child.try_wait() {
                    return Err(format!("the receiver exited before listening ({st})"));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => {
                let _ = child.kill();
                return Err(format!(
                    "the receiver did not listen on {}: {e}",
                    path.display()
                ));
            }
        }
    }
}

fn finish_child(child: Option<Child>) -> String {
    match child {
        None => String::new(),
        Some(c) => match c.wait_with_output() {
            Ok(out) if out.status.success() => String::new(),
            Ok(out) => format!(
                " (the receiver exited with {}: {})",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => format!(" (waiting for the receiver: {e})"),
        },
    }
}

/// The receiver: one connection, into a guest-sized buffer.
fn receive(path: &Path, size: u64) -> Result<(), String> {
    let bytes = usize::try_from(size).map_err(|_| format!("{size} bytes cannot be mapped here"))?;
    let mut memory = Vec::new();
    memory
        .try_reserve_exact(bytes)
        .map_err(|e| format!("cannot allocate {size} bytes of guest memory: {e}"))?;
    memory.resize(bytes, 0u8);
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)
        .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
    let (mut stream, _) = listener.accept().map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(path);
    let summary = Receiver::new(&mut memory)
        .serve(&mut stream)
        .map_err(|e| format!("receiver: {e}"))?;
    eprintln!(
        "receiver: {} requests, {} memory requests, {} ranges, {} bytes",
        summary.requests, summary.memory_requests, summary.ranges, summary.bytes
    );
    Ok(())
}
