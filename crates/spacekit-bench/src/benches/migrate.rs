//! `bench migrate`: a pre-copy live migration of a real KVM guest
//! (`spacekit::kvm`), and every round's table built three ways from the same
//! harvested logs.
//!
//! The guest runs the `uniform` workload on one vCPU, unpaced (4 GiB; 256
//! MiB with `--quick`), with a host thread writing 1,000 packets a second
//! into guest memory through vm-memory (the VMM's log). The memory goes over
//! a Unix socket in Cloud Hypervisor's format to a receiver thread that
//! writes it into its own guest-sized buffer; after the paused last round
//! the destination's CRC-32C of every page is compared with the source's.
//!
//! Each round's two logs (KVM's and the VMM's, from the tracker after the
//! round is sent) are copied, and after the migration (so the timing
//! neither makes the next round larger nor competes with the guest) each
//! variant re-runs the round's harvest plus table on them: the VMM log is
//! swapped to zero, ORed with KVM's log, and the ranges built:
//! * `spacekit`: `DirtyBitmap::harvest_or_into_table`, the three in one
//!   pass over the words, keeping the words it took, into a reused table;
//! * `seed`: Cloud Hypervisor after seed 004: vm-memory's own
//!   `AtomicBitmap::get_and_reset` (a `SeqCst` `fetch_and(0)` on every word,
//!   into a new `Vec`), the `zip` with KVM's words ORed, straight into the
//!   seed's set-bit iterator and coalesce (`baselines::dirty_log::seed_words`);
//! * `before`: the same harvest, the OR collected into a new `Vec` (Cloud
//!   Hypervisor before the seed), then the per-bit loop
//!   (`baselines::dirty_log::before`).
//!
//! Before every sample, untimed and the same for each variant, the
//! variant's VMM log is set to the round's VMM words (through its own
//! marking call), 64 MiB are streamed to evict the logs from every cache
//! level (the previous round's send streams the guest's memory through
//! them), and KVM's buffer is written (as `KVM_GET_DIRTY_LOG` writes it just
//! before the harvest). Every sample's table must equal
//! `Scan::new(kvm).or(vmm)`'s and its harvest return exactly the VMM words;
//! the median of 21 round-robin samples per variant (5 with `--quick`) is
//! kept. Without `/dev/kvm` the benchmark prints why and returns no rows.
//!
//! Then round 0 alone, of fresh guests, over one connection and over two
//! (`migrate_conn`): an `idle` guest with 10% of its memory filled, with
//! zero-page skipping (the default; the 1.5x bar) and without, and a
//! `uniform` guest, whose busy vCPU takes one of a small machine's cores
//! from the streams (printed and noted).
//!
//! JSON rows: `case` = `round`, `variant` (`spacekit`, `seed`, `before`),
//! `round`, `dirty_pages`, `kvm_pages`, `vmm_pages`, `ranges`, `last`,
//! `median_ns` (harvest plus table); and one `case` = `migration` row
//! (`variant` `spacekit`) with `downtime_ns`, `guest_writes_per_sec`,
//! `dirty_pages_per_sec`, `differing_pages`, `rounds`; and `case` =
//! `round0` rows (`1 connection`, `2 connections`) with `workload`,
//! `fill_percent`, `zero_pages`, `connections`, `bytes`, `send_ns`.

use std::num::NonZeroUsize;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use baselines::dirty_log;
use spacekit::dirty::{DirtyBitmap, Geometry, MemoryRangeTable, Scan};
use spacekit::kvm::{self, DirtyMode, Guest, GuestConfig, MigrateConfig, RoundReport, Workload};
use spacekit::migration::Receiver;
use vm_memory::bitmap::AtomicBitmap;

use crate::chart::{Chart, XAxis};
use crate::context::{BenchError, Ctx, Mode};
use crate::harness::membw::read_xor;
use crate::harness::{fmt_ns, fmt_ratio, progress, Bars, Report, Row, Table};

const NAME: &str = "migrate";

/// Bytes streamed between samples to evict the logs from every cache level
/// (twice the 32 MiB last-level cache of the machines this runs on).
const EVICT_BYTES: usize = 64 << 20;

struct RoundTimes {
    round: u32,
    dirty_pages: u64,
    ranges: u64,
    harvest: Duration,
    spacekit: f64,
    seed: f64,
    before: f64,
    bytes_sent: u64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError(format!("migrate: {e}"))
}

/// The re-harvested logs and reused buffers of the per-round timing, built
/// once for the guest's size.
struct Rig {
    geometry: Geometry,
    /// spacekit's VMM log (what the guest's vm-memory writes mark).
    ours: DirtyBitmap,
    /// Cloud Hypervisor's VMM log: vm-memory's own `AtomicBitmap`.
    theirs: AtomicBitmap,
    /// KVM's log as `KVM_GET_DIRTY_LOG` leaves it in the VMM's buffer.
    kvm: Vec<u64>,
    table: MemoryRangeTable,
    taken: Vec<(usize, u64)>,
    seed_out: Vec<dirty_log::MemoryRange>,
    before_out: Vec<dirty_log::MemoryRange>,
    /// Streamed between samples (see [`EVICT_BYTES`]).
    evict: Vec<u64>,
    samples: usize,
}

impl Rig {
    fn new(mem_size: u64, samples: usize) -> Result<Rig, BenchError> {
        let geometry = Geometry::new(0, 4096).map_err(err)?;
        let ours = DirtyBitmap::new(geometry, mem_size).map_err(err)?;
        let size = usize::try_from(mem_size).map_err(err)?;
        let page = NonZeroUsize::new(4096).ok_or_else(|| err("page size"))?;
        let words = ours.words();
        let mut evict = vec![0u64; EVICT_BYTES / 8];
        for (i, w) in evict.iter_mut().enumerate() {
            *w = i as u64;
        }
        Ok(Rig {
            geometry,
            ours,
            theirs: AtomicBitmap::new(size, page),
            kvm: vec![0; words],
            table: MemoryRangeTable::new(),
            taken: Vec::new(),
            seed_out: Vec::new(),
            before_out: Vec::new(),
            evict,
            samples,
        })
    }

    /// Sets the VMM log a variant harvests (`ours`: spacekit's, else
    /// vm-memory's) to `vmm`, through its own marking call, one per run of
    /// dirty pages; then evicts every cache level and writes KVM's buffer.
    /// So each sample finds the logs as a round does: the VMM log in memory
    /// (the last round's send streamed the guest's memory through the
    /// caches), KVM's log just written by the `KVM_GET_DIRTY_LOG` that
    /// starts the round. Untimed, and the same for every variant.
    fn prepare(&mut self, kvm: &[u64], vmm: &[u64], ours: bool) -> Result<(), BenchError> {
        for r in self.geometry.ranges(vmm).map_err(err)? {
            if ours {
                self.ours.mark(r.gpa, r.length).map_err(err)?;
            } else {
                self.theirs
                    .set_addr_range(r.gpa as usize, r.length as usize);
            }
        }
        std::hint::black_box(read_xor(&self.evict));
        self.kvm.copy_from_slice(kvm);
        Ok(())
    }

    /// Times each variant's harvest plus table on one round's logs
    /// (`samples` round-robin samples each, the medians), checking after
    /// every sample, untimed, that its table is the expected one and that
    /// it took exactly the VMM log's words.
    fn time_round(&mut self, kvm: &[u64], vmm: &[u64]) -> Result<(f64, f64, f64), BenchError> {
        let want: Vec<(u64, u64)> = MemoryRangeTable::from_scan(
            Scan::new(kvm, self.geometry)
                .and_then(|s| s.or(vmm))
                .map_err(err)?,
        )
        .ranges()
        .iter()
        .map(|r| (r.gpa, r.length))
        .collect();
        let want_taken: Vec<(usize, u64)> = vmm
            .iter()
            .enumerate()
            .filter(|(_, &w)| w != 0)
            .map(|(i, &w)| (i, w))
            .collect();
        let differs = |name: &str, got: Vec<(u64, u64)>| {
            BenchError(format!(
                "migrate: the {name} table ({} ranges) differs from the expected one ({} ranges)",
                got.len(),
                want.len()
            ))
        };
        let (mut s, mut d, mut b) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..self.samples {
            // spacekit: the one-pass harvest, keeping the taken words.
            self.prepare(kvm, vmm, true)?;
            let t = Instant::now();
            self.table.clear();
            self.ours
                .harvest_or_into_table(
                    &self.kvm,
                    self.geometry,
                    &mut self.table,
                    Some(&mut self.taken),
                )
                .map_err(err)?;
            s.push(t.elapsed().as_nanos() as f64);
            let got: Vec<(u64, u64)> = self
                .table
                .ranges()
                .iter()
                .map(|r| (r.gpa, r.length))
                .collect();
            if got != want {
                return Err(differs("spacekit", got));
            }
            if self.taken != want_taken {
                return Err(err("spacekit took other words than the VMM log held"));
            }

            // seed: Cloud Hypervisor after seed 004: vm-memory's
            // `get_and_reset` (a new Vec), the zip with KVM's words ORed,
            // straight into the seed's iterator.
            self.prepare(kvm, vmm, false)?;
            let t = Instant::now();
            let taken = self.theirs.get_and_reset();
            dirty_log::seed_words(
                self.kvm.iter().zip(taken.iter()).map(|(x, y)| x | y),
                0,
                4096,
                &mut self.seed_out,
            );
            d.push(t.elapsed().as_nanos() as f64);
            let got: Vec<(u64, u64)> = self.seed_out.iter().map(|r| (r.gpa, r.length)).collect();
            if got != want {
                return Err(differs("seed", got));
            }
            if taken != vmm {
                return Err(err(
                    "vm-memory's get_and_reset returned other words than the VMM log held",
                ));
            }
            drop(taken);

            // before: the same harvest, the OR collected into a new Vec
            // (Cloud Hypervisor before the seed), then the per-bit loop.
            self.prepare(kvm, vmm, false)?;
            let t = Instant::now();
            let taken = self.theirs.get_and_reset();
            let or: Vec<u64> = self
                .kvm
                .iter()
                .zip(taken.iter())
                .map(|(x, y)| x | y)
                .collect();
            dirty_log::before(&or, 0, 4096, &mut self.before_out);
            b.push(t.elapsed().as_nanos() as f64);
            let got: Vec<(u64, u64)> = self.before_out.iter().map(|r| (r.gpa, r.length)).collect();
            if got != want {
                return Err(differs("before", got));
            }
            drop((taken, or));
        }
        // Every sample harvested what `prepare` set: both logs are clean.
        if self.ours.take().iter().any(|&w| w != 0)
            || self.theirs.get_and_reset().iter().any(|&w| w != 0)
        {
            return Err(err("a VMM log is not clean after its harvest"));
        }
        Ok((median(s), median(d), median(b)))
    }
}

/// Runs the benchmark.
pub fn run(ctx: &Ctx) -> Result<Report, BenchError> {
    let mut report = Report::default();
    if let Err(e) = kvm::available() {
        report.note(format!("migrate: skipped: {e}"));
        return Ok(report);
    }
    let mem_size: u64 = match ctx.mode {
        Mode::Quick => 256 << 20,
        _ => 4 << 30,
    };
    progress(
        NAME,
        &format!(
            "starting a {} MiB guest (uniform workload, 1 vCPU)",
            mem_size >> 20
        ),
    );
    let guest = Guest::start(GuestConfig {
        mem_size,
        vcpus: 1,
        workload: Workload::Uniform,
        seed: ctx.seed,
        dirty: DirtyMode::Log,
        ..GuestConfig::default()
    })
    .map_err(|e| BenchError(format!("migrate: {e}")))?;
    let (mut a, mut b) = UnixStream::pair().map_err(|e| BenchError(e.to_string()))?;
    let size = usize::try_from(mem_size).map_err(|e| BenchError(e.to_string()))?;
    let receiver = std::thread::spawn(move || {
        let mut memory = vec![0u8; size];
        Receiver::new(&mut memory).serve(&mut b)
    });
    let config = MigrateConfig {
        max_rounds: 6,
        stop_below_bytes: 1 << 20,
        dma_writes_per_sec: 1000,
        round_gap: Duration::from_millis(50),
        ..MigrateConfig::default()
    };
    // Each round's logs are copied as the round leaves them (two buffers of
    // one bit per page: 256 KiB for 4 GiB) and timed after the migration,
    // so the timing neither delays the next round (which would make it
    // larger) nor competes with the guest's vCPU for the CPU.
    let mut saved: Vec<(RoundReport, Vec<u64>, Vec<u64>)> = Vec::new();
    let result = kvm::migrate(&guest, &mut a, &config, |r, tracker| {
        if r.round > 0 {
            saved.push((
                r.clone(),
                tracker.kvm_log().to_vec(),
                tracker.vmm_log().to_vec(),
            ));
        }
        progress(
            NAME,
            &format!(
                "round {} sent: {} dirty pages, {} ranges",
                r.round, r.dirty_pages, r.ranges
            ),
        );
    });
    let mig = result.map_err(|e| BenchError(format!("migrate: {e}")))?;
    let summary = receiver
        .join()
        .map_err(|_| BenchError("migrate: receiver panicked".into()))?
        .map_err(|e| BenchError(format!("migrate: receiver: {e}")))?;
    guest
        .stop()
        .map_err(|e| BenchError(format!("migrate: {e}")))?;

    let samples = match ctx.mode {
        Mode::Quick => 5,
        Mode::Default => 21,
        Mode::Full => 51,
    };
    let mut rig = Rig::new(mem_size, samples)?;
    let mut rounds: Vec<RoundTimes> = Vec::new();
    for (r, kvm_log, vmm_log) in &saved {
        progress(
            NAME,
            &format!(
                "timing round {}'s harvest + table ({samples} samples per variant)",
                r.round
            ),
        );
        let (s, d, b) = rig.time_round(kvm_log, vmm_log)?;
        rounds.push(RoundTimes {
            round: r.round,
            dirty_pages: r.dirty_pages,
            ranges: r.ranges,
            harvest: r.harvest,
            spacekit: s,
            seed: d,
            before: b,
            bytes_sent: r.bytes_sent,
        });
    }

    let mut table = Table::new(
        &format!(
            "pre-copy migration of a {} MiB guest (uniform, 1 vCPU, unpaced; host DMA 1000/s): \
             per round, the VMM log's harvest plus the table, re-run on the round's logs \
             (VMM log from memory, KVM's just written; medians of {samples})",
            mem_size >> 20
        ),
        &[
            "round",
            "dirty pages",
            "kvm",
            "vmm",
            "ranges",
            "harvest",
            "before",
            "seed",
            "spacekit",
            "seed/spk",
            "before/spk",
            "sent",
            "send",
        ],
    );
    let mut bars = Bars::new(NAME);
    for (t, r) in rounds.iter().zip(mig.rounds.iter().skip(1)) {
        for (v, ns) in [
            ("spacekit", t.spacekit),
            ("seed", t.seed),
            ("before", t.before),
        ] {
            report.push(
                Row::new("round", v)
                    .field("round", t.round)
                    .field("dirty_pages", t.dirty_pages)
                    .field("kvm_pages", r.kvm_pages)
                    .field("vmm_pages", r.vmm_pages)
                    .field("ranges", t.ranges)
                    .field("last", r.last)
                    .field("median_ns", ns),
            );
        }
        table.row(vec![
            format!("{}{}", t.round, if r.last { " (paused)" } else { "" }),
            t.dirty_pages.to_string(),
            r.kvm_pages.to_string(),
            r.vmm_pages.to_string(),
            t.ranges.to_string(),
            fmt_ns(t.harvest.as_nanos() as f64),
            fmt_ns(t.before),
            fmt_ns(t.seed),
            fmt_ns(t.spacekit),
            fmt_ratio(t.seed, t.spacekit),
            fmt_ratio(t.before, t.spacekit),
            format!("{:.1} MiB", t.bytes_sent as f64 / (1 << 20) as f64),
            fmt_ns(r.send.as_nanos() as f64),
        ]);
        if t.dirty_pages > 1000 {
            let ratio = t.seed / t.spacekit;
            bars.check(
                ratio >= 2.0,
                format!(
                    "round {}: {} dirty pages: harvest + table: spacekit {} vs seed {} = {ratio:.1}x (bar: >= 2x)",
                    t.round,
                    t.dirty_pages,
                    fmt_ns(t.spacekit),
                    fmt_ns(t.seed)
                ),
            );
        }
    }
    let r0 = &mig.rounds[0];
    table.row(vec![
        "0 (all)".into(),
        r0.dirty_pages.to_string(),
        "-".into(),
        "-".into(),
        "1".into(),
        "-".into(),
        "-".into(),
        "-".into(),
        "-".into(),
        "-".into(),
        "-".into(),
        format!("{:.1} MiB", r0.bytes_sent as f64 / (1 << 20) as f64),
        fmt_ns(r0.send.as_nanos() as f64),
    ]);
    report.table(table);
    bars.check(
        mig.differing_pages.is_empty(),
        format!(
            "{} differing pages after the last round (bar: 0); receiver got {} bytes in {} memory requests",
            mig.differing_pages.len(),
            summary.bytes,
            summary.memory_requests
        ),
    );
    let last = mig.rounds.last().map(|r| r.send).unwrap_or_default();
    let note = format!(
        "downtime {} (pause, harvest, build, send of {} pages, acknowledgement; the send alone {}); \
         guest wrote {:.0} pages/s during pre-copy ({} writes), dirtying {:.0} distinct pages/s per round; \
         host DMA writes: {}",
        fmt_ns(mig.downtime.as_nanos() as f64),
        mig.rounds.last().map(|r| r.dirty_pages).unwrap_or(0),
        fmt_ns(last.as_nanos() as f64),
        mig.guest_write_rate(),
        mig.guest_writes,
        mig.dirty_page_rate(),
        mig.dma_writes,
    );
    report.note(note);
    report.push(
        Row::new("migration", "spacekit")
            .field("guest_bytes", mem_size)
            .field("downtime_ns", mig.downtime.as_nanos() as f64)
            .field("guest_writes_per_sec", mig.guest_write_rate())
            .field("dirty_pages_per_sec", mig.dirty_page_rate())
            .field("differing_pages", mig.differing_pages.len() as u64)
            .field("rounds", mig.rounds.len() as u64),
    );
    let chart = Chart::new(
        "migrate: each round's harvest plus table, on the same logs",
        "round",
        "ns per harvest + table",
        XAxis::Linear,
        true,
    )
    .from_rows(
        report
            .rows
            .iter()
            .filter(|r| r.str("case") == Some("round")),
        "round",
        "median_ns",
    );
    report.chart(chart);
    connections(ctx, mem_size, &mut report, &mut bars)?;
    report.bars(bars);
    Ok(report)
}

/// The connections table: round 0 over one connection and over two
/// ([`super::migrate_conn`]) for three setups: an `idle` guest with 10% of
/// its memory filled, with zero-page skipping (`spacekit migrate`'s
/// default; the 1.5x bar) and without, and the main migration's `uniform`
/// guest, whose busy vCPU takes a core from the streams (reported). Rows
/// `case` = `round0`, variants `1 connection` and `2 connections`, with
/// `workload`, `fill_percent`, `zero_pages`.
fn connections(
    ctx: &Ctx,
    mem_size: u64,
    report: &mut Report,
    bars: &mut Bars,
) -> Result<(), BenchError> {
    use super::migrate_conn::Setup;
    let setups = [
        (
            "idle, 10% filled",
            Setup {
                workload: Workload::Idle,
                fill_percent: 10,
                zero_pages: true,
            },
        ),
        (
            "idle, 10% filled",
            Setup {
                workload: Workload::Idle,
                fill_percent: 10,
                zero_pages: false,
            },
        ),
        (
            "uniform",
            Setup {
                workload: Workload::Uniform,
                fill_percent: 0,
                zero_pages: true,
            },
        ),
    ];
    let mut table = Table::new(
        &format!(
            "round 0 of a fresh {} MiB guest over Unix sockets; the faster of two alternating runs each",
            mem_size >> 20
        ),
        &["guest", "zero pages", "connections", "bytes", "send", "GB/s", "vs 1"],
    );
    for (i, (guest, setup)) in setups.into_iter().enumerate() {
        let runs = super::migrate_conn::run(ctx, mem_size, setup)?;
        let [one, two] = runs;
        let ratio = two.rate() / one.rate();
        let zp = if setup.zero_pages { "skipped" } else { "sent" };
        for r in &runs {
            let variant = if r.connections == 1 {
                "1 connection".to_string()
            } else {
                format!("{} connections", r.connections)
            };
            report.push(
                Row::new("round0", &variant)
                    .field("workload", guest)
                    .field("fill_percent", setup.fill_percent)
                    .field("zero_pages", setup.zero_pages)
                    .field("connections", r.connections)
                    .field("bytes", r.bytes)
                    .field("send_ns", r.send.as_nanos() as f64),
            );
            table.row(vec![
                guest.to_string(),
                zp.to_string(),
                r.connections.to_string(),
                format!("{:.1} MiB", r.bytes as f64 / (1 << 20) as f64),
                fmt_ns(r.send.as_nanos() as f64),
                format!("{:.2}", r.rate() / 1e9),
                format!("{:.2}x", r.rate() / one.rate()),
            ]);
        }
        let line = format!(
            "round 0 of a {} MiB {guest} guest, zero pages {zp}: {} connections {} vs 1 connection {} = {ratio:.2}x faster",
            mem_size >> 20,
            two.connections,
            fmt_ns(two.send.as_nanos() as f64),
            fmt_ns(one.send.as_nanos() as f64)
        );
        // The first setup (an idle guest with `spacekit migrate`'s default,
        // zero pages skipped) carries the bar; the others are reported.
        if i == 0 {
            bars.check(ratio >= 1.5, format!("{line} (bar: >= 1.5x)"));
        } else {
            report.note(format!("{line} (reported, no bar)"));
        }
    }
    report.table(table);
    Ok(())
}
