//! Pre-copy live migration of a running guest's memory.
//!
//! The stream is Cloud Hypervisor's protocol ([`crate::migration::Sender`]):
//! `Start`, `Config` (the caller's payload, or a small JSON description of
//! the test guest), the memory rounds, `State`, `Complete`. Round 0 sends all
//! of memory; every later round harvests the logs
//! ([`DirtyTracker::harvest`]), builds the table of dirty ranges
//! ([`DirtyTracker::build`]) and decides ([`Converger`]): with a downtime
//! target, once the round's dirty bytes can be sent within it at the
//! bandwidth measured so far (without one, once they fall below a
//! threshold), the vCPUs and the host's DMA writer are paused, the pages
//! dirtied since the harvest are harvested too, and both are sent as the
//! last round; otherwise the round is sent and, with auto-converge, the
//! dirtiest vCPUs are throttled when the guest dirties faster than the link
//! sends. A timeout (or the last allowed round) either forces the last round
//! or abandons the migration ([`TimeoutAction`]). Then, if the receiver
//! accepted spacekit's page-hash extension, the destination's CRC-32C of
//! every page is compared with the source's (a plain Cloud Hypervisor
//! receiver does not offer it, and the report says the pages were not
//! compared). The downtime is the time from the pause to the last round's
//! acknowledgement.
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

use super::converge::{
    union_into, AutoConverge, Converger, Decision, LimitedStream, TimeoutAction,
};
use super::error::KvmError;
use super::guest::{Guest, GuestMem};
pub use super::report::{MigrationReport, RoundReport};
use super::tracker::DirtyTracker;
use crate::dirty::MemoryRangeTable;
use crate::migration::{
    diff_pages, hash_pages, Extensions, MemorySource, MigrationError, SendStats, Sender,
};

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
    /// The downtime target: pause once the dirty bytes can be sent within
    /// it at the bandwidth measured so far (`None`: the `stop_below_bytes`
    /// rule).
    pub downtime: Option<Duration>,
    /// Give up converging after this long in pre-copy (as after the last
    /// allowed round); `on_timeout` says how.
    pub timeout: Option<Duration>,
    /// What happens when the timeout or the last allowed round comes first.
    pub on_timeout: TimeoutAction,
    /// Throttle the vCPUs when the guest dirties memory faster than the link
    /// sends it (`None`: never).
    pub auto_converge: Option<AutoConverge>,
    /// Hold the stream to this many bytes per second, like a link of that
    /// speed (`None`: as fast as the stream goes). Only the main connection
    /// is held: use it with one connection.
    pub bandwidth: Option<u64>,
    /// Offer spacekit's zero-page extension: all-zero pages go without
    /// payload when the receiver accepts it (a plain Cloud Hypervisor
    /// receiver does not, and then every page is sent).
    pub zero_pages: bool,
    /// Rounds of at least this many bytes (and round 0) go over every extra
    /// connection at once ([`migrate_connections`]); smaller rounds and the
    /// last one go on the main connection.
    pub parallel_min_bytes: u64,
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
            downtime: None,
            timeout: None,
            on_timeout: TimeoutAction::Force,
            auto_converge: None,
            bandwidth: None,
            zero_pages: true,
            parallel_min_bytes: 8 << 20,
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
    migrate_connections::<S, std::os::unix::net::UnixStream>(
        guest,
        stream,
        &mut [],
        config,
        on_round,
    )
}

/// [`migrate`] over a main connection and `extra` connections to the same
/// receiver, in Cloud Hypervisor's multi-connection scheme
/// ([`crate::migration`]'s connections): each extra stream is attached
/// (its role bytes written) after `Config`; round 0 and every round of at
/// least [`MigrateConfig::parallel_min_bytes`] are cut by ranges across the
/// extra connections and sent on all of them at once; smaller rounds and
/// the last (paused) round go on the main connection, one request.
///
/// # Errors
/// As [`migrate`]; an extra connection's failure fails the migration.
pub fn migrate_connections<S, E>(
    guest: &Guest,
    stream: &mut S,
    extra: &mut [E],
    config: &MigrateConfig,
    on_round: impl FnMut(&RoundReport, &DirtyTracker),
) -> Result<MigrationReport, KvmError>
where
    S: Read + Write + ?Sized,
    E: Read + Write + Send,
{
    match config.bandwidth {
        Some(bps) => migrate_on(
            guest,
            &mut LimitedStream::new(stream, bps),
            extra,
            config,
            on_round,
        ),
        None => migrate_on(guest, stream, extra, config, on_round),
    }
}

fn migrate_on<S, E>(
    guest: &Guest,
    stream: &mut S,
    extra: &mut [E],
    config: &MigrateConfig,
    on_round: impl FnMut(&RoundReport, &DirtyTracker),
) -> Result<MigrationReport, KvmError>
where
    S: Read + Write + ?Sized,
    E: Read + Write + Send,
{
    let offer = if config.zero_pages {
        Extensions::ALL
    } else {
        Extensions::PAGE_HASHES
    };
    let mut sender = Sender::new().with_extensions(offer);
    sender.start(stream)?;
    let result = run(guest, stream, extra, config, &mut sender, on_round);
    // The throttle ends with the migration, whatever its outcome.
    guest.release_throttle();
    match result {
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

/// One pre-copy round's memory: across the extra connections when there
/// are some and the round is big enough, else on the main one.
fn send_round<S, E>(
    sender: &mut Sender,
    stream: &mut S,
    extra: &mut [E],
    table: &MemoryRangeTable,
    source: &GuestSource<'_>,
    parallel: bool,
) -> Result<(SendStats, u32), KvmError>
where
    S: Read + Write + ?Sized,
    E: Read + Write + Send,
{
    if parallel && !extra.is_empty() {
        let stats = sender.send_memory_parallel(extra, table, source)?;
        Ok((stats, extra.len() as u32))
    } else {
        Ok((sender.send_memory(stream, table, source)?, 1))
    }
}

fn fill_sent(rr: &mut RoundReport, stats: &SendStats, connections: u32) {
    rr.bytes_sent = stats.bytes;
    rr.payload_bytes = stats.payload_bytes;
    rr.zero_bytes = stats.zero_bytes;
    rr.connections = connections;
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
fn run<S, E>(
    guest: &Guest,
    stream: &mut S,
    extra: &mut [E],
    config: &MigrateConfig,
    sender: &mut Sender,
    mut on_round: impl FnMut(&RoundReport, &DirtyTracker),
) -> Result<MigrationReport, KvmError>
where
    S: Read + Write + ?Sized,
    E: Read + Write + Send,
{
    let source = GuestSource::new(guest);
    let mut tracker = DirtyTracker::new(guest);
    let mut table = MemoryRangeTable::new();
    let mut table2 = MemoryRangeTable::new();
    let mut report = MigrationReport {
        requested_write_rate: guest.config().writes_per_sec,
        downtime_target: config.downtime,
        ..MigrationReport::default()
    };
    match &config.vm_config {
        Some(c) => sender.send_config(stream, c)?,
        None => sender.send_config(stream, &default_config(guest))?,
    }
    for e in extra.iter_mut() {
        sender.attach(e)?;
    }
    let writes0 = guest.writes();
    let t0 = Instant::now();
    let mut conv = Converger::new(
        config.downtime,
        config.stop_below_bytes,
        config.max_rounds,
        config.timeout,
        config.auto_converge,
    );
    let mut dma = DmaWriter::start(guest, config.dma_writes_per_sec, guest.config().seed);
    // Round 0: everything, with the logs emptied just before the copy, so
    // round 1 holds exactly what changed during and after it.
    tracker.reset(guest)?;
    // Round 1's pages were dirtied from here, round 0's send included: its
    // rate is over that time, not over the gap after the send alone.
    let mut last_harvest = Instant::now();
    let _ = guest.take_ring_counts();
    table.clear();
    table.push(crate::dirty::MemoryRange {
        gpa: 0,
        length: guest.layout().mem_size,
    });
    let t = Instant::now();
    let (stats, conns) = send_round(sender, stream, extra, &table, &source, true)?;
    let mut r0 = RoundReport {
        round: 0,
        dirty_pages: guest.layout().pages(),
        ranges: 1,
        send: t.elapsed(),
        ..RoundReport::default()
    };
    fill_sent(&mut r0, &stats, conns);
    conv.record_send(r0.payload_bytes, r0.send);
    r0.bandwidth = conv.bandwidth().unwrap_or(0.0);
    r0.throttle = guest.throttles();
    on_round(&r0, &tracker);
    report.rounds.push(r0);

    let mut union = MemoryRangeTable::new();
    let mut round = 1;
    loop {
        if !config.round_gap.is_zero() {
            std::thread::sleep(config.round_gap);
        }
        let throttle = guest.throttles();
        // The harvest builds the table in the same pass over the logs.
        let h = tracker.harvest_build(guest, &mut table)?;
        let build = Duration::ZERO;
        let interval = last_harvest.elapsed();
        last_harvest = Instant::now();
        let dirty_bytes = table.total_bytes();
        let mut rr = RoundReport {
            round,
            dirty_pages: dirty_bytes / super::layout::PAGE,
            kvm_pages: h.kvm_pages,
            vmm_pages: h.vmm_pages,
            ranges: table.len() as u64,
            harvest: h.time,
            build,
            dirty_pages_per_sec: (dirty_bytes / super::layout::PAGE) as f64
                / interval.as_secs_f64().max(1e-9),
            vcpu_dirty_pages: guest.take_ring_counts().unwrap_or_default(),
            throttle,
            predicted: config
                .downtime
                .and_then(|_| conv.predict(dirty_bytes, h.time + build)),
            ..RoundReport::default()
        };
        let decision = conv.decide(round, dirty_bytes, h.time + build);
        if decision == Decision::TimedOut && config.on_timeout == TimeoutAction::Abandon {
            report.precopy = t0.elapsed();
            report.dma_writes = dma.stop();
            report.guest_writes = guest.writes().saturating_sub(writes0);
            report.rounds.push(rr);
            sender.abandon(stream)?;
            return Err(KvmError::NotConverged {
                report: std::boxed::Box::new(report),
            });
        }
        if decision != Decision::Continue {
            // The last round: pause, harvest what was dirtied since, and
            // send it with what was just harvested.
            report.converged = decision == Decision::Converged;
            report.dma_writes = dma.stop();
            let p = Instant::now();
            guest.pause();
            report.precopy = t0.elapsed();
            report.guest_writes = guest.writes().saturating_sub(writes0);
            let h2 = tracker.harvest_build(guest, &mut union)?;
            let t = Instant::now();
            union_into(&union, &table, &mut table2);
            rr.build += t.elapsed();
            rr.harvest += h2.time;
            rr.kvm_pages += h2.kvm_pages;
            rr.vmm_pages += h2.vmm_pages;
            rr.dirty_pages = table2.total_bytes() / super::layout::PAGE;
            rr.ranges = table2.len() as u64;
            rr.last = true;
            let t = Instant::now();
            let stats = sender.send_memory(stream, &table2, &source)?;
            fill_sent(&mut rr, &stats, 1);
            rr.send = t.elapsed();
            report.downtime = p.elapsed();
            conv.record_send(rr.payload_bytes, rr.send);
            rr.bandwidth = conv.bandwidth().unwrap_or(0.0);
            on_round(&rr, &tracker);
            report.rounds.push(rr);
            break;
        }
        let t = Instant::now();
        let parallel = dirty_bytes >= config.parallel_min_bytes;
        let (stats, conns) = send_round(sender, stream, extra, &table, &source, parallel)?;
        fill_sent(&mut rr, &stats, conns);
        rr.send = t.elapsed();
        conv.record_send(rr.payload_bytes, rr.send);
        rr.bandwidth = conv.bandwidth().unwrap_or(0.0);
        let rate = rr.dirty_pages_per_sec * super::layout::PAGE as f64;
        let counts = (!rr.vcpu_dirty_pages.is_empty()).then_some(&rr.vcpu_dirty_pages[..]);
        if let Some(next) = conv.throttle_step(rate, counts, &rr.throttle) {
            for (v, &p) in next.iter().enumerate() {
                guest.set_throttle(v as u32, p)?;
                report.max_throttle = report.max_throttle.max(p);
            }
        }
        // After the send: a caller's own work here (timing other builders)
        // delays the next round, never the copy.
        on_round(&rr, &tracker);
        report.rounds.push(rr);
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
