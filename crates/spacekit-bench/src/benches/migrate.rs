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
//! Each round, after it is sent (outside the downtime), the table is built
//! from the round's two logs (KVM's and the VMM's) by:
//! * `spacekit`: `MemoryRangeTable::extend_from(Scan::new(kvm).or(vmm))`
//!   into a reused table (the OR is never built);
//! * `seed`: Cloud Hypervisor after seed 004: the OR of the two logs into a
//!   reused buffer (Cloud Hypervisor collects it into a fresh `Vec`), then
//!   the seed's set-bit iterator and coalesce (`baselines::dirty_log::seed`);
//! * `before`: the same OR, then the per-bit loop (`baselines::dirty_log::before`).
//!
//! All three must give the same ranges; each is timed round-robin, 5 to
//! 101 times (more for small rounds), and the median kept. Without `/dev/kvm` the benchmark prints why and
//! returns no rows.
//!
//! JSON rows: `case` = `round`, `variant` (`spacekit`, `seed`, `before`),
//! `round`, `dirty_pages`, `ranges`, `median_ns` (table build); and one
//! `case` = `migration` row (`variant` `spacekit`) with `downtime_ns`,
//! `guest_writes_per_sec`, `dirty_pages_per_sec`, `differing_pages`,
//! `rounds`.

use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use baselines::dirty_log;
use spacekit::dirty::{Geometry, MemoryRangeTable, Scan};
use spacekit::kvm::{self, DirtyMode, Guest, GuestConfig, MigrateConfig, Workload};
use spacekit::migration::Receiver;

use crate::chart::{Chart, XAxis};
use crate::context::{BenchError, Ctx, Mode};
use crate::harness::{fmt_ns, fmt_ratio, progress, Bars, Report, Row, Table};

const NAME: &str = "migrate";

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

/// Times the three builders on one round's logs (round-robin, medians) and
/// checks they agree.
fn time_round(kvm_log: &[u64], vmm_log: &[u64]) -> Result<(f64, f64, f64), BenchError> {
    let geometry = Geometry::new(0, 4096).map_err(|e| BenchError(e.to_string()))?;
    let mut table = MemoryRangeTable::new();
    let mut or = vec![0u64; kvm_log.len()];
    let mut seed_out = Vec::new();
    let mut before_out = Vec::new();
    let (mut s, mut d, mut b) = (Vec::new(), Vec::new(), Vec::new());
    // Samples: at least 5, more for small rounds (up to 101, about 3 ms of
    // the slowest builder), so a round of a few microseconds is not one
    // noisy sample.
    let t = Instant::now();
    for ((o, &x), &y) in or.iter_mut().zip(kvm_log).zip(vmm_log) {
        *o = x | y;
    }
    dirty_log::before(&or, 0, 4096, &mut before_out);
    let one = t.elapsed().as_nanos().max(1) as u64;
    let samples = (3_000_000 / one).clamp(5, 101) | 1;
    for _ in 0..samples {
        let t = Instant::now();
        table.clear();
        let scan = Scan::new(kvm_log, geometry)
            .and_then(|sc| sc.or(vmm_log))
            .map_err(|e| BenchError(e.to_string()))?;
        table.extend_from(scan);
        s.push(t.elapsed().as_nanos() as f64);

        let t = Instant::now();
        for ((o, &x), &y) in or.iter_mut().zip(kvm_log).zip(vmm_log) {
            *o = x | y;
        }
        dirty_log::seed(&or, 0, 4096, &mut seed_out);
        d.push(t.elapsed().as_nanos() as f64);

        let t = Instant::now();
        for ((o, &x), &y) in or.iter_mut().zip(kvm_log).zip(vmm_log) {
            *o = x | y;
        }
        dirty_log::before(&or, 0, 4096, &mut before_out);
        b.push(t.elapsed().as_nanos() as f64);
    }
    let ours: Vec<(u64, u64)> = table.ranges().iter().map(|r| (r.gpa, r.length)).collect();
    for (name, theirs) in [("seed", &seed_out), ("before", &before_out)] {
        let theirs: Vec<(u64, u64)> = theirs.iter().map(|r| (r.gpa, r.length)).collect();
        if theirs != ours {
            return Err(BenchError(format!(
                "migrate: the {name} port's table ({} ranges) differs from spacekit's ({} ranges)",
                theirs.len(),
                ours.len()
            )));
        }
    }
    Ok((median(s), median(d), median(b)))
}

/// Runs the benchmark.
pub fn run(ctx: &Ctx) -> Result<Report, BenchError> {
    let mut report = Report::default();
    if let Err(e) = kvm::available() {
        println!("migrate: skipped: {e}");
        report.note(format!("skipped: {e}"));
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
    let mut rounds: Vec<RoundTimes> = Vec::new();
    let mut failure = None;
    let result = kvm::migrate(&guest, &mut a, &config, |r, tracker| {
        if r.round == 0 || failure.is_some() {
            progress(NAME, &format!("round {} sent", r.round));
            return;
        }
        match time_round(tracker.kvm_log(), tracker.vmm_log()) {
            Ok((s, d, b)) => rounds.push(RoundTimes {
                round: r.round,
                dirty_pages: r.dirty_pages,
                ranges: r.ranges,
                harvest: r.harvest,
                spacekit: s,
                seed: d,
                before: b,
                bytes_sent: r.bytes_sent,
            }),
            Err(e) => failure = Some(e),
        }
        progress(
            NAME,
            &format!(
                "round {}: {} dirty pages, {} ranges",
                r.round, r.dirty_pages, r.ranges
            ),
        );
    });
    if let Some(e) = failure {
        return Err(e);
    }
    let mig = result.map_err(|e| BenchError(format!("migrate: {e}")))?;
    let summary = receiver
        .join()
        .map_err(|_| BenchError("migrate: receiver panicked".into()))?
        .map_err(|e| BenchError(format!("migrate: receiver: {e}")))?;
    guest
        .stop()
        .map_err(|e| BenchError(format!("migrate: {e}")))?;

    let mut table = Table::new(
        &format!(
            "pre-copy migration of a {} MiB guest (uniform, 1 vCPU, unpaced; host DMA 1000/s): \
             per-round table build from the same harvested logs",
            mem_size >> 20
        ),
        &[
            "round",
            "dirty pages",
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
                    .field("ranges", t.ranges)
                    .field("last", r.last)
                    .field("median_ns", ns),
            );
        }
        table.row(vec![
            format!("{}{}", t.round, if r.last { " (paused)" } else { "" }),
            t.dirty_pages.to_string(),
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
                    "round {}: {} dirty pages: spacekit {} vs seed {} = {ratio:.1}x (bar: >= 2x)",
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
    println!("  {note}");
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
        "migrate: each round's table build from the same logs",
        "round",
        "ns per table build",
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
    report.bars(bars);
    Ok(report)
}
