//! `bench migrate`'s connections table: round 0 (the whole memory) of a
//! fresh guest sent over one connection and over two, in the same run.
//!
//! Each run starts its own guest, a receiver thread listening on a Unix
//! socket ([`receive_connections_on_unix_socket`], which accepts the extra
//! connections in parallel), connects the main stream and, for two
//! connections, two extra streams that carry round 0 cut by ranges
//! ([`kvm::migrate_connections`]). A [`Setup`] says which guest (its
//! workload and how much of its memory the loader fills) and whether the
//! zero-page extension is offered. The runs alternate (1, 2, 1, 2) and
//! each count keeps its faster run; every run must end with 0 differing
//! pages (the source's page hashes against the receiver's) and round 0
//! must cover the whole guest before its time counts.

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use spacekit::kvm::{self, DirtyMode, Guest, GuestConfig, MigrateConfig, Workload};
use spacekit::migration::receive_connections_on_unix_socket;

use crate::context::{BenchError, Ctx};

/// What a connections run migrates, and how.
#[derive(Clone, Copy, Debug)]
pub(super) struct Setup {
    /// The guest's workload.
    pub workload: Workload,
    /// Percent of guest memory the loader fills with non-zero bytes.
    pub fill_percent: u8,
    /// Offer the zero-page extension (`spacekit migrate`'s default).
    pub zero_pages: bool,
}

/// How long [`connect`] waits for a live receiver to listen.
const LISTEN_WAIT: Duration = Duration::from_secs(120);

/// One run's round 0.
#[derive(Clone, Copy, Debug)]
pub(super) struct Round0 {
    /// Connections round 0 went over (as the migration reported it).
    pub connections: u32,
    /// Bytes of guest memory round 0 covered.
    pub bytes: u64,
    /// Time to send them and get the acknowledgement.
    pub send: Duration,
}

impl Round0 {
    /// Bytes per second.
    pub fn rate(&self) -> f64 {
        self.bytes as f64 / self.send.as_secs_f64().max(1e-9)
    }
}

/// Runs round 0 over 1 and over 2 connections, alternating, twice each;
/// returns the faster run of each count, in that order.
pub(super) fn run(ctx: &Ctx, mem_size: u64, setup: Setup) -> Result<[Round0; 2], BenchError> {
    let mut best: [Option<Round0>; 2] = [None, None];
    for (k, extra) in [0usize, 2, 0, 2].into_iter().enumerate() {
        crate::harness::progress(
            "migrate",
            &format!(
                "round 0 over {} connection(s), {setup:?}, run {} of 2",
                extra.max(1),
                k / 2 + 1
            ),
        );
        let r = one(ctx, mem_size, extra, k, setup)?;
        let slot = &mut best[usize::from(extra > 0)];
        if slot.is_none_or(|b| r.send < b.send) {
            *slot = Some(r);
        }
    }
    match best {
        [Some(a), Some(b)] => Ok([a, b]),
        _ => Err(BenchError("migrate: a connections run is missing".into())),
    }
}

/// One migration of a fresh guest that stops after round 0 (the next
/// round is the paused last one), with `extra` extra connections.
fn one(
    ctx: &Ctx,
    mem_size: u64,
    extra: usize,
    k: usize,
    setup: Setup,
) -> Result<Round0, BenchError> {
    let err = |e: &dyn std::fmt::Display| BenchError(format!("migrate (connections): {e}"));
    let guest = Guest::start(GuestConfig {
        mem_size,
        vcpus: 1,
        workload: setup.workload,
        fill_percent: setup.fill_percent,
        seed: ctx.seed ^ k as u64,
        dirty: DirtyMode::Log,
        ..GuestConfig::default()
    })
    .map_err(|e| err(&e))?;
    static RUN: AtomicUsize = AtomicUsize::new(0);
    let path = std::env::temp_dir().join(format!(
        "spacekit-bench-conn-{}-{}.sock",
        std::process::id(),
        RUN.fetch_add(1, Ordering::Relaxed)
    ));
    let listen = path.clone();
    let receiver =
        std::thread::spawn(move || receive_connections_on_unix_socket(&listen, mem_size, 8));
    let streams = connect(&path, &receiver).and_then(|main| {
        let extras = (0..extra)
            .map(|_| connect(&path, &receiver))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((main, extras))
    });
    let (mut main, mut extras) = match streams {
        Ok(s) => s,
        Err(e) => {
            // A receiver that failed before listening says why.
            if receiver.is_finished() {
                if let Ok(Err(r)) = receiver.join() {
                    return Err(err(&format!("the receiver failed: {r}")));
                }
            }
            return Err(e);
        }
    };
    let config = MigrateConfig {
        // Round 0, then straight to the paused last round.
        max_rounds: 1,
        stop_below_bytes: u64::MAX,
        zero_pages: setup.zero_pages,
        ..MigrateConfig::default()
    };
    let result = kvm::migrate_connections(&guest, &mut main, &mut extras, &config, |_, _| {});
    drop(extras);
    drop(main);
    let received = receiver.join().map_err(|_| err(&"the receiver panicked"))?;
    guest.stop().map_err(|e| err(&e))?;
    let report = result.map_err(|e| err(&e))?;
    received.map_err(|e| err(&e))?;
    if !report.differing_pages.is_empty() {
        return Err(err(&format!(
            "{} pages differ after the migration over {} connection(s)",
            report.differing_pages.len(),
            extra.max(1)
        )));
    }
    let r0 = report
        .rounds
        .first()
        .ok_or_else(|| err(&"no round 0 in the report"))?;
    if r0.bytes_sent != mem_size {
        return Err(err(&format!(
            "round 0 covered {} bytes of a {mem_size}-byte guest",
            r0.bytes_sent
        )));
    }
    Ok(Round0 {
        connections: r0.connections,
        bytes: r0.bytes_sent,
        send: r0.send,
    })
}

/// Connects to the receiver's socket, waiting while the receiver thread
/// lives (it zeroes the whole guest-sized buffer before it listens, which
/// takes seconds for 4 GiB on a busy host), up to [`LISTEN_WAIT`].
fn connect<T>(path: &Path, receiver: &JoinHandle<T>) -> Result<UnixStream, BenchError> {
    let t = Instant::now();
    loop {
        match UnixStream::connect(path) {
            Ok(s) => return Ok(s),
            Err(e) if receiver.is_finished() || t.elapsed() > LISTEN_WAIT => {
                return Err(BenchError(format!(
                    "migrate (connections): connect to {}: {e}",
                    path.display()
                )))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}
