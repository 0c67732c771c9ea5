//! Pre-copy live migration of a running guest's memory.
//!
//! The stream is Cloud Hypervisor's protocol ([`crate::migration::Sender`]):
//! `Start`, `Config` (the caller's payload, or a small JSON description of
//! the test guest), the memory rounds, `State`, `Complete`. Round 0 sends all
//! of memory; every later round harvests the logs
//! ([`DirtyTracker::harvest`]), builds the table of dirty ranges
//! ([`DirtyTracker::build`]) and sends the ranges with their bytes. When a
//! round's dirty bytes fall below the threshold, or after the last round
//! allowed, the vCPUs and the host's DMA writer are paused and the last round
//! is sent; then, if the receiver accepted spacekit's page-hash extension,
//! the destination's CRC-32C of every page is compared with the source's (a
//! plain Cloud Hypervisor receiver does not offer it, and the report says
//! the pages were not compared). The downtime is the time from the pause to
//! the last round's acknowledgement.
//!
//! A host thread can write into guest memory through vm-memory while the
//! guest runs (as a virtio device's DMA does); those writes are logged in
//! the VMM's [`VmmBitmap`](crate::dirty::VmmBitmap) and ORed with KVM's log.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use std::vec::Vec;

use vm_memory::{Bytes, GuestAddress};

use super::error::KvmError;
use super::guest::{Guest, GuestMem};
use super::tracker::DirtyTracker;
use crate::dirty::MemoryRangeTable;
use crate::migration::{diff_pages, hash_pages, Extensions, MemorySource, MigrationError, Sender};

/// A guest's memory as a migration source: copies go through vm-memory's
/// volatile accessors, since the guest may be writing the same bytes.
pub struct GuestSource<'a> {
    memory: &'a GuestMem,
    size: u64,
}

impl<'a> GuestSource<'a> {
    /// The memory of `guest`.
    pub fn new(guest: &'a Guest) -> GuestSource<'a> {
        GuestSource {
            memory: guest.memory(),
            size: guest.layout().mem_size,
        }
    }
}

impl MemorySource for GuestSource<'_> {
    fn size(&self) -> u64 {
        self.size
    }

    fn copy_out(&self, gpa: u64, out: &mut [u8]) {
        // The sender checked the range against `size`; a failure here would
        // be a bug in that check.
        self.memory
            .read_slice(out, GuestAddress(gpa))
            .expect("range checked against the guest's size");
    }
}

/// How a migration runs.
#[derive(Clone, Debug)]
pub struct MigrateConfig {
    /// Most pre-copy rounds after round 0 before the final round.
    pub max_rounds: u32,
    /// Go to the final round once a round's dirty bytes are below this.
    pub stop_below_bytes: u64,
    /// Host-side (DMA-like) writes per second into guest memory through
    /// vm-memory, during pre-copy (0 = none).
    pub dma_writes_per_sec: u64,
    /// Pause between rounds (lets the guest dirty memory; 0 = none).
    pub round_gap: Duration,
    /// The `Config` payload (the VMM's configuration; `None`: a small JSON
    /// object describing the test guest's memory size, vCPUs and seed).
    pub vm_config: Option<Vec<u8>>,
    /// The `State` payload (the VMM's device state; `None`: a small JSON
    /// object with the guest's write count at the pause).
    pub vm_state: Option<Vec<u8>>,
}

impl Default for MigrateConfig {
    fn default() -> Self {
        MigrateConfig {
            max_rounds: 8,
            stop_below_bytes: 1 << 20,
            dma_writes_per_sec: 1000,
            round_gap: Duration::from_millis(20),
            vm_config: None,
            vm_state: None,
        }
    }
}

/// One round's numbers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoundReport {
    /// 0 for the full copy, then 1, 2, ...
    pub round: u32,
    /// Whether the vCPUs were paused (the last round).
    pub last: bool,
    /// Dirty pages in the table (after the OR of the logs).
    pub dirty_pages: u64,
    /// Pages KVM reported (ring entries, with repeats, in ring mode).
    pub kvm_pages: u64,
    /// Pages the VMM's log reported.
    pub vmm_pages: u64,
    /// Ranges in the table.
    pub ranges: u64,
    /// Harvest time (ioctls, ring walk, VMM log swap).
    pub harvest: Duration,
    /// Time to build the table from the harvested logs.
    pub build: Duration,
    /// Bytes of memory sent.
    pub bytes_sent: u64,
    /// Time to send them and get the acknowledgement.
    pub send: Duration,
}

/// A whole migration's numbers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MigrationReport {
    /// Every round, round 0 first.
    pub rounds: Vec<RoundReport>,
    /// From the pause to the last round's acknowledgement.
    pub downtime: Duration,
    /// Whether the pages were compared: the receiver accepted spacekit's
    /// page-hash extension (a plain Cloud Hypervisor receiver does not).
    pub pages_checked: bool,
    /// Pages whose CRC-32C differs between source and destination (must be
    /// empty; empty too when `pages_checked` is false).
    pub differing_pages: Vec<u64>,
    /// Guest writes during pre-copy (all vCPUs).
    pub guest_writes: u64,
    /// Host (DMA) writes during pre-copy.
    pub dma_writes: u64,
    /// Pre-copy wall time (round 0 start to the pause).
    pub precopy: Duration,
    /// The guest's target write rate (its `writes_per_sec`; 0 = unpaced).
    pub requested_write_rate: u64,
}

impl MigrationReport {
    /// The guest's write rate during pre-copy, in writes per second.
    pub fn guest_write_rate(&self) -> f64 {
        self.guest_writes as f64 / self.precopy.as_secs_f64().max(1e-9)
    }

    /// Whether a paced guest reached at least 90% of its target write rate
    /// during pre-copy (always true when unpaced). A guest whose every
    /// write to a logged page exits to KVM may not reach it.
    pub fn rate_reached(&self) -> bool {
        self.guest_write_rate() >= 0.9 * self.requested_write_rate as f64
    }

    /// Pages dirtied per second during pre-copy (the rounds after round 0,
    /// pages in their tables over the pre-copy time).
    pub fn dirty_page_rate(&self) -> f64 {
        let pages: u64 = self
            .rounds
            .iter()
            .filter(|r| r.round > 0 && !r.last)
            .map(|r| r.dirty_pages)
            .sum();
        pages as f64 / self.precopy.as_secs_f64().max(1e-9)
    }
}

impl core::fmt::Display for MigrationReport {
    /// One line per round (dirty pages, ranges, KVM and VMM pages, harvest,
    /// table build, bytes sent, send time), then the downtime, the rates and
    /// the pages that differ.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        writeln!(
            f,
            "{:<12} {:>11} {:>9} {:>9} {:>8} {:>11} {:>11} {:>11} {:>11}",
            "round", "dirty pages", "ranges", "kvm", "vmm", "harvest", "build", "sent", "send"
        )?;
        for r in &self.rounds {
            let round = std::format!("{}{}", r.round, if r.last { " (paused)" } else { "" });
            let mib = std::format!("{:.1} MiB", r.bytes_sent as f64 / f64::from(1 << 20));
            writeln!(
                f,
                "{round:<12} {:>11} {:>9} {:>9} {:>8} {:>11.1?} {:>11.1?} {mib:>11} {:>11.1?}",
                r.dirty_pages, r.ranges, r.kvm_pages, r.vmm_pages, r.harvest, r.build, r.send
            )?;
        }
        writeln!(
            f,
            "downtime {:.2?} (pause to the last round's acknowledgement); the guest made {:.0} \
             writes/s ({:.0} dirty pages/s) over {:.2?} of pre-copy; {} host DMA writes",
            self.downtime,
            self.guest_write_rate(),
            self.dirty_page_rate(),
            self.precopy,
            self.dma_writes
        )?;
        if !self.rate_reached() {
            writeln!(
                f,
                "the guest made {:.0} writes/s, short of the {} asked ({:.0}%): its vCPUs could \
                 not write faster on this host; the migration ran at the rate reached",
                self.guest_write_rate(),
                self.requested_write_rate,
                100.0 * self.guest_write_rate() / self.requested_write_rate as f64
            )?;
        }
        if self.pages_checked {
            write!(
                f,
                "{} pages differ between source and destination",
                self.differing_pages.len()
            )
        } else {
            write!(
                f,
                "pages not compared: the receiver did not accept spacekit's page-hash check \
                 (a plain Cloud Hypervisor peer)"
            )
        }
    }
}

/// A host thread writing into guest memory through vm-memory (logged in
/// the VMM's bitmap), like a device's DMA.
struct DmaWriter {
    stop: Arc<AtomicBool>,
    writes: Arc<AtomicU64>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl DmaWriter {
    fn start(guest: &Guest, per_sec: u64, seed: u64) -> DmaWriter {
        let stop = Arc::new(AtomicBool::new(false));
        let writes = Arc::new(AtomicU64::new(0));
        if per_sec == 0 {
            return DmaWriter {
                stop,
                writes,
                handle: None,
            };
        }
        let memory = guest.memory().clone();
        let first = guest.layout().first_page;
        let pages = guest.layout().region_pages;
        let (s, w) = (Arc::clone(&stop), Arc::clone(&writes));
        let gap = Duration::from_nanos(1_000_000_000 / per_sec.max(1));
        let handle = std::thread::spawn(move || {
            let mut x = super::layout::vcpu_seed(seed ^ 0xd1a, 63);
            let mut buf = std::vec![0u8; 1500];
            let mut next = Instant::now();
            while !s.load(Ordering::Acquire) {
                x = super::layout::xorshift64(x);
                let page = super::layout::uniform_page(x, first, pages);
                let off = (x >> 52) & 0x7ff;
                buf.fill(x as u8);
                // A packet-sized write, possibly across a page boundary.
                let gpa = (page * 4096 + off).min((first + pages) * 4096 - buf.len() as u64);
                if memory.write_slice(&buf, GuestAddress(gpa)).is_ok() {
                    w.fetch_add(1, Ordering::Relaxed);
                }
                next += gap;
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                } else {
                    next = now;
                }
            }
        });
        DmaWriter {
            stop,
            writes,
            handle: Some(handle),
        }
    }

    /// Stops the writer; its last write is complete (and logged) on return.
    fn stop(&mut self) -> u64 {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.writes.load(Ordering::Relaxed)
    }
}

impl Drop for DmaWriter {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Migrates `guest`'s memory over `stream` to a receiver speaking Cloud
/// Hypervisor's protocol — a [`Receiver`], or a Cloud Hypervisor receiver
/// (the guest keeps running until the last round; it is left paused on
/// return). `on_round` sees every round's report and the tracker holding
/// that round's harvested logs, after the round is sent (and, for the last,
/// after the downtime is taken), so a caller can time other table builders
/// on the same logs.
///
/// # Errors
/// [`KvmError::Migration`] for a stream or receiver failure; [`KvmError`]s
/// of the harvest. After any failure past `Start`, the receiver is sent
/// `Abandon` (best effort) unless the stream itself failed (an I/O error or
/// a stream that ended).
///
/// [`Receiver`]: crate::migration::Receiver
pub fn migrate<S: Read + Write + ?Sized>(
    guest: &Guest,
    stream: &mut S,
    config: &MigrateConfig,
    on_round: impl FnMut(&RoundReport, &DirtyTracker),
) -> Result<MigrationReport, KvmError> {
    let mut sender = Sender::new();
    sender.start(stream)?;
    match run(guest, stream, config, &mut sender, on_round) {
        Ok(report) => Ok(report),
        Err(e) => {
            let stream_failed = matches!(
                e,
                KvmError::Migration(MigrationError::Io { .. } | MigrationError::Truncated { .. })
            );
            if !stream_failed {
                // Best effort: a receiver that refused a request has closed
                // the stream, and this fails quietly.
                let _ = sender.abandon(stream);
            }
            Err(e)
        }
    }
}

/// The JSON object sent as `Config` when the caller supplies none.
fn default_config(guest: &Guest) -> Vec<u8> {
    let c = guest.config();
    std::format!(
        r#"{{"spacekit_test_guest":{{"mem_size":{},"vcpus":{},"seed":{}}}}}"#,
        c.mem_size,
        c.vcpus,
        c.seed
    )
    .into_bytes()
}

/// Everything after `Start`.
fn run<S: Read + Write + ?Sized>(
    guest: &Guest,
    stream: &mut S,
    config: &MigrateConfig,
    sender: &mut Sender,
    mut on_round: impl FnMut(&RoundReport, &DirtyTracker),
) -> Result<MigrationReport, KvmError> {
    let source = GuestSource::new(guest);
    let mut tracker = DirtyTracker::new(guest);
    let mut table = MemoryRangeTable::new();
    let mut report = MigrationReport {
        requested_write_rate: guest.config().writes_per_sec,
        ..MigrationReport::default()
    };
    match &config.vm_config {
        Some(c) => sender.send_config(stream, c)?,
        None => sender.send_config(stream, &default_config(guest))?,
    }
    let writes0 = guest.writes();
    let t0 = Instant::now();
    let mut dma = DmaWriter::start(guest, config.dma_writes_per_sec, guest.config().seed);
    // Round 0: everything, with the logs emptied just before the copy, so
    // round 1 holds exactly what changed during and after it.
    tracker.reset(guest)?;
    table.clear();
    table.push(crate::dirty::MemoryRange {
        gpa: 0,
        length: guest.layout().mem_size,
    });
    let t = Instant::now();
    let stats = sender.send_memory(stream, &table, &source)?;
    let r0 = RoundReport {
        round: 0,
        dirty_pages: guest.layout().pages(),
        ranges: 1,
        bytes_sent: stats.bytes,
        send: t.elapsed(),
        ..RoundReport::default()
    };
    on_round(&r0, &tracker);
    report.rounds.push(r0);

    let mut round = 1;
    loop {
        let last = round > config.max_rounds
            || report.rounds.last().is_some_and(|r| {
                r.round > 0 && r.dirty_pages * super::layout::PAGE < config.stop_below_bytes
            });
        let mut pause_at = None;
        if last {
            report.dma_writes = dma.stop();
            let t = Instant::now();
            guest.pause();
            report.precopy = t0.elapsed();
            report.guest_writes = guest.writes().saturating_sub(writes0);
            pause_at = Some(t);
        } else if !config.round_gap.is_zero() {
            std::thread::sleep(config.round_gap);
        }
        let h = tracker.harvest(guest)?;
        let t = Instant::now();
        tracker.build(&mut table)?;
        let build = t.elapsed();
        let mut rr = RoundReport {
            round,
            last,
            dirty_pages: table.total_bytes() / super::layout::PAGE,
            kvm_pages: h.kvm_pages,
            vmm_pages: h.vmm_pages,
            ranges: table.len() as u64,
            harvest: h.time,
            build,
            ..RoundReport::default()
        };
        let t = Instant::now();
        let stats = sender.send_memory(stream, &table, &source)?;
        rr.bytes_sent = stats.bytes;
        rr.send = t.elapsed();
        if let Some(p) = pause_at {
            report.downtime = p.elapsed();
        }
        // After the send and the downtime's end: a caller's own work here
        // (timing other builders) delays the next round, never the copy.
        on_round(&rr, &tracker);
        report.rounds.push(rr);
        if pause_at.is_some() {
            break;
        }
        round += 1;
    }
    if sender.extensions().contains(Extensions::PAGE_HASHES) {
        let remote = sender.page_hashes(stream, super::layout::PAGE)?;
        let local = hash_pages(&source, super::layout::PAGE)?;
        report.differing_pages = diff_pages(&local, &remote)?;
        report.pages_checked = true;
    }
    match &config.vm_state {
        Some(s) => sender.send_state(stream, s)?,
        None => {
            let s = std::format!(
                r#"{{"spacekit_test_guest":{{"guest_writes":{}}}}}"#,
                guest.writes()
            );
            sender.send_state(stream, s.as_bytes())?;
        }
    }
    sender.complete(stream)?;
    Ok(report)
}
