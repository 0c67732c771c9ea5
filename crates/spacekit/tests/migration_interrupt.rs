//! Interrupted migrations: the sender or the receiver killed with SIGKILL
//! (a child process: this test binary re-executed), or one of their
//! sockets shut down in-process, at random moments of a multi-round
//! migration over 1, 2 or 4 connections with zero pages on and off.
//!
//! After every interruption:
//!
//! * the survivor returns a typed error within a second of the
//!   interruption — or success only where the migration really completed
//!   (a sender's success needs the receiver to have taken `State`; a
//!   receiver's success needs all of memory to be the source's);
//! * the receiver's summary counts only memory requests that arrived
//!   whole: rounds go one after the other (the sender waits for every
//!   answer of a round), so the bytes it claims must be every earlier
//!   round plus some of the current round's per-connection parts — the
//!   test enumerates those sums from the same plan the sender follows — and
//!   the memory of those requests must be the source's bytes.
//!
//! `SPACEKIT_SOAK_RUNS` (default 20) sets the number of runs;
//! `SPACEKIT_SOAK_SEED` replays one (the seed is printed in every failure).
//!
//! ```text
//! SPACEKIT_SOAK_RUNS=200 cargo test -p spacekit --test migration_interrupt -- --nocapture
//! ```

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use spacekit::dirty::{MemoryRange, MemoryRangeTable};
use spacekit::migration::{Extensions, Listener, MigrationError, ReceiveSummary, Receiver, Sender};
use spacekit_testkit::rng::Rng;

const PAGE: u64 = 4096;
const PAGES: u64 = 1024;
/// Rounds before the last; the last goes on the main connection.
const ROUNDS: usize = 6;
const CHILD: &str = "SPACEKIT_MIGRATION_CHILD";
const TAG: &str = "MIG ";
/// The survivor's deadline after an interruption.
const DEADLINE: Duration = Duration::from_secs(1);

/// One migration: the source's memory and the rounds' tables (disjoint
/// page sets, so each byte is written by one request).
struct Plan {
    source: Vec<u8>,
    rounds: Vec<MemoryRangeTable>,
    n: usize,
    zero: bool,
}

fn plan(seed: u64, n: usize, zero: bool) -> Plan {
    let mut rng = Rng(seed | 1);
    let mut source = vec![0u8; (PAGES * PAGE) as usize];
    for p in source.chunks_mut(PAGE as usize) {
        if rng.below(2) == 0 {
            rng.fill(p);
        }
    }
    let mut pages: Vec<u64> = (0..PAGES).collect();
    for i in (1..pages.len()).rev() {
        pages.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let first = (PAGES * 2 / 5) as usize;
    let rest = (pages.len() - first).div_ceil(ROUNDS);
    let mut cuts = vec![&pages[..first]];
    cuts.extend(pages[first..].chunks(rest));
    let rounds = cuts
        .into_iter()
        .map(|c| {
            let mut c = c.to_vec();
            c.sort_unstable();
            let mut t = MemoryRangeTable::new();
            for p in c {
                t.push_merging(
                    MemoryRange {
                        gpa: p * PAGE,
                        length: PAGE,
                    },
                    0,
                );
            }
            t
        })
        .collect();
    Plan {
        source,
        rounds,
        n,
        zero,
    }
}

impl Plan {
    /// The per-connection requests of round `k`: the parallel rounds cut as
    /// the sender cuts them, the last one whole.
    fn parts(&self, k: usize) -> Vec<MemoryRangeTable> {
        let t = &self.rounds[k];
        if k + 1 == self.rounds.len() {
            return vec![t.clone()];
        }
        let per = t
            .total_bytes()
            .div_ceil(self.n as u64)
            .next_multiple_of(PAGE);
        t.partition(per)
    }

    /// Every byte count a receiver may claim, with the requests that make
    /// it up: all rounds before `k`, then any subset of round `k`'s parts.
    fn claimable(&self) -> Vec<(u64, Vec<MemoryRangeTable>)> {
        let mut out = Vec::new();
        let mut done = Vec::new();
        let mut base = 0;
        for k in 0..self.rounds.len() {
            let parts = self.parts(k);
            for mask in 0u32..1 << parts.len() {
                let mut reqs = done.clone();
                let mut sum = base;
                for (i, p) in parts.iter().enumerate() {
                    if mask & 1 << i != 0 {
                        sum += p.total_bytes();
                        reqs.push(p.clone());
                    }
                }
                out.push((sum, reqs));
            }
            base += self.rounds[k].total_bytes();
            done.extend(parts);
        }
        out.push((base, done));
        out
    }

    fn total(&self) -> u64 {
        PAGES * PAGE
    }
}

/// The sender's side of a plan on `main` and `extra` streams.
fn send<S: Read + Write + Send>(
    plan: &Plan,
    main: &mut S,
    mut extra: Vec<S>,
) -> Result<(), MigrationError> {
    let ext = if plan.zero {
        Extensions::ALL
    } else {
        Extensions::PAGE_HASHES
    };
    let mut sender = Sender::with_buffer_size(64 * 1024).with_extensions(ext);
    sender.start(main)?;
    sender.send_config(main, b"{}")?;
    for s in &mut extra {
        sender.attach(s)?;
    }
    for round in &plan.rounds[..ROUNDS] {
        if extra.is_empty() {
            sender.send_memory_parallel(&mut [&mut *main], round, &plan.source)?;
        } else {
            sender.send_memory_parallel(&mut extra, round, &plan.source)?;
        }
        thread::sleep(Duration::from_millis(2));
    }
    sender.send_memory(main, &plan.rounds[ROUNDS], &plan.source)?;
    drop(extra);
    sender.send_state(main, b"{}")?;
    sender.complete(main)
}

/// The receiver's side: serves one migration from `listener` into fresh
/// memory; `on_state` runs when `State` arrives, before it is answered.
fn receive<L: Listener>(
    listener: &mut L,
    on_state: impl FnMut(),
) -> (
    Result<ReceiveSummary, MigrationError>,
    ReceiveSummary,
    Vec<u8>,
) {
    let mut memory = vec![0xeeu8; (PAGES * PAGE) as usize];
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut main = loop {
        match listener.accept_within(Duration::from_millis(20)) {
            Ok(Some(s)) => break s,
            _ if Instant::now() > deadline => {
                let e = MigrationError::Stopped;
                return (Err(e), ReceiveSummary::default(), memory);
            }
            _ => {}
        }
    };
    let mut on_state = on_state;
    let mut r = Receiver::new(&mut memory);
    let res = r.serve_connections_with(&mut main, listener, |c, _| {
        if c == spacekit::migration::Command::State {
            on_state();
        }
        Ok(())
    });
    let summary = r.summary();
    (res, summary, memory)
}

/// Checks what a receiver that survived (or completed) holds.
fn check_receiver(
    plan: &Plan,
    res: &Result<ReceiveSummary, MigrationError>,
    summary: &ReceiveSummary,
    memory: &[u8],
) -> Result<(), String> {
    // Parts of a round have about equal sizes, so several sets of whole
    // requests may add up to the claim: one of them must be in memory.
    let whole = |reqs: &[MemoryRangeTable]| {
        reqs.iter().flat_map(|t| t.ranges()).all(|r| {
            let (a, b) = (r.gpa as usize, (r.gpa + r.length) as usize);
            memory[a..b] == plan.source[a..b]
        })
    };
    let claims = plan.claimable();
    let matching: Vec<_> = claims.iter().filter(|(b, _)| *b == summary.bytes).collect();
    if matching.is_empty() {
        return Err(format!(
            "the receiver claims {} bytes, not a sum of whole requests ({res:?})",
            summary.bytes
        ));
    }
    if !matching.iter().any(|(_, reqs)| whole(reqs)) {
        return Err(format!(
            "the receiver claims {} bytes that are not all in its memory",
            summary.bytes
        ));
    }
    if res.is_ok() && (summary.bytes != plan.total() || memory != plan.source.as_slice()) {
        return Err(format!(
            "success with {} of {} bytes",
            summary.bytes,
            plan.total()
        ));
    }
    Ok(())
}

fn sock(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sk-interrupt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(tag);
    let _ = std::fs::remove_file(&p);
    p
}

fn connect_all(path: &Path, n: usize) -> (UnixStream, Vec<UnixStream>) {
    let main = UnixStream::connect(path).unwrap();
    let extra = if n > 1 {
        (0..n).map(|_| UnixStream::connect(path).unwrap()).collect()
    } else {
        Vec::new()
    };
    (main, extra)
}

/// The child's side of a run: `send` or `recv`, the socket, the plan's
/// parameters, from the environment.
fn child(spec: &str) {
    let f: Vec<&str> = spec.split(':').collect();
    let (role, path, seed, n, zero) = (
        f[0],
        Path::new(f[1]),
        f[2].parse().unwrap(),
        f[3].parse().unwrap(),
        f[4] == "1",
    );
    let plan = plan(seed, n, zero);
    let out = |s: &str| {
        let mut o = std::io::stdout().lock();
        writeln!(o, "{TAG}{s}").unwrap();
        o.flush().unwrap();
    };
    if role == "send" {
        let (mut main, extra) = connect_all(path, n);
        out("START");
        let r = send(&plan, &mut main, extra);
        out(&format!("END {r:?}"));
    } else {
        let mut l = UnixListener::bind(path).unwrap();
        out("READY");
        let (r, _, _) = receive(&mut l, || out("STATE"));
        out(&format!("END {:?}", r.map(|_| ())));
    }
}

#[test]
#[ignore = "the child of interrupted_migrations"]
fn interrupt_child() {
    if let Ok(spec) = std::env::var(CHILD) {
        child(&spec);
    }
}

/// Spawns this binary as a child running `spec`; returns it and a channel
/// of its tagged lines.
fn spawn_child(spec: &str) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(["--exact", "interrupt_child", "--ignored", "--nocapture"])
        .env(CHILD, spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(l) = line.strip_prefix(TAG) {
                let _ = tx.send(l.to_string());
            }
        }
    });
    (child, rx)
}

fn wait_line(rx: &std::sync::mpsc::Receiver<String>, want: &str) -> Result<(), String> {
    loop {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(l) if l == want => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(format!("waiting for {want}: {e}")),
        }
    }
}

/// A random delay into the migration: often early, sometimes late.
fn delay(rng: &mut Rng) -> Duration {
    Duration::from_micros(match rng.below(4) {
        0 => rng.below(2_000),
        _ => rng.below(40_000),
    })
}

/// Kills the sending child; the receiver (here) must fail in time or
/// have really completed.
fn kill_sender(rng: &mut Rng, seed: u64, n: usize, zero: bool) -> Result<&'static str, String> {
    let plan = plan(seed, n, zero);
    let path = sock("kill-sender");
    let mut l = UnixListener::bind(&path).unwrap();
    let (mut child, rx) = spawn_child(&format!(
        "send:{}:{seed}:{n}:{}",
        path.display(),
        zero as u8
    ));
    let recv = thread::spawn(move || {
        let r = receive(&mut l, || {});
        (r, Instant::now())
    });
    wait_line(&rx, "START")?;
    thread::sleep(delay(rng));
    let _ = child.kill();
    let killed = Instant::now();
    let _ = child.wait();
    let ((res, summary, memory), at) = recv.join().unwrap();
    if res.is_err() && at.saturating_duration_since(killed) > DEADLINE {
        return Err(format!("the receiver took {:?} to fail", at - killed));
    }
    check_receiver(&plan, &res, &summary, &memory)?;
    Ok(if res.is_ok() { "completed" } else { "failed" })
}

/// Kills the receiving child; the sender (here) must fail in time, or
/// succeed only after the receiver took `State`.
fn kill_receiver(rng: &mut Rng, seed: u64, n: usize, zero: bool) -> Result<&'static str, String> {
    let plan = plan(seed, n, zero);
    let path = sock("kill-receiver");
    let (mut child, rx) = spawn_child(&format!(
        "recv:{}:{seed}:{n}:{}",
        path.display(),
        zero as u8
    ));
    wait_line(&rx, "READY")?;
    let (mut main, extra) = connect_all(&path, n);
    let sender = thread::spawn(move || {
        let r = send(&plan, &mut main, extra);
        (r, Instant::now())
    });
    thread::sleep(delay(rng));
    let _ = child.kill();
    let killed = Instant::now();
    let _ = child.wait();
    let (res, at) = sender.join().unwrap();
    let lines: Vec<String> = rx.try_iter().collect();
    match res {
        Ok(()) if lines.iter().any(|l| l == "STATE") => Ok("completed"),
        Ok(()) => Err(format!(
            "the sender succeeded but the receiver never took State: {lines:?}"
        )),
        Err(_) if at.saturating_duration_since(killed) > DEADLINE => {
            Err(format!("the sender took {:?} to fail", at - killed))
        }
        Err(_) => Ok("failed"),
    }
}

/// Something that can be shut down from another thread.
trait Shut: Send {
    fn shut(&self);
}
impl Shut for UnixStream {
    fn shut(&self) {
        let _ = self.shutdown(Shutdown::Both);
    }
}
impl Shut for TcpStream {
    fn shut(&self) {
        let _ = self.shutdown(Shutdown::Both);
    }
}

type Sockets = Arc<Mutex<Vec<Box<dyn Shut>>>>;

/// A listener that keeps a handle on every stream it accepts.
struct Recording<L> {
    inner: L,
    seen: Sockets,
}

trait CloneStream: Sized {
    fn clone_box(&self) -> Box<dyn Shut>;
}
impl CloneStream for UnixStream {
    fn clone_box(&self) -> Box<dyn Shut> {
        Box::new(self.try_clone().unwrap())
    }
}
impl CloneStream for TcpStream {
    fn clone_box(&self) -> Box<dyn Shut> {
        Box::new(self.try_clone().unwrap())
    }
}

impl<L: Listener> Listener for Recording<L>
where
    L::Stream: CloneStream,
{
    type Stream = L::Stream;
    fn accept_within(&mut self, wait: Duration) -> std::io::Result<Option<L::Stream>> {
        let s = self.inner.accept_within(wait)?;
        if let Some(s) = &s {
            self.seen.lock().unwrap().push(s.clone_box());
        }
        Ok(s)
    }
}

/// Shuts one socket down in-process (on the sender's or the receiver's
/// side, over Unix sockets or TCP): whoever fails must fail in time, and a
/// success must be a real one.
fn close_socket(
    rng: &mut Rng,
    seed: u64,
    n: usize,
    zero: bool,
    tcp: bool,
) -> Result<&'static str, String> {
    let plan = Arc::new(plan(seed, n, zero));
    let receiver_side: Sockets = Arc::new(Mutex::new(Vec::new()));
    let sender_side: Sockets = Arc::new(Mutex::new(Vec::new()));
    let state_seen = Arc::new(Mutex::new(false));
    let (recv, send_thread) = if tcp {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        let mut rl = Recording {
            inner: l,
            seen: receiver_side.clone(),
        };
        let st = state_seen.clone();
        let recv = thread::spawn(move || {
            let r = receive(&mut rl, || *st.lock().unwrap() = true);
            (r, Instant::now())
        });
        let mut main = TcpStream::connect(a).unwrap();
        let extra: Vec<TcpStream> = (0..if n > 1 { n } else { 0 })
            .map(|_| TcpStream::connect(a).unwrap())
            .collect();
        let mut ss = sender_side.lock().unwrap();
        ss.push(main.clone_box());
        ss.extend(extra.iter().map(|s| s.clone_box()));
        drop(ss);
        let p = plan.clone();
        let send_thread = thread::spawn(move || (send(&p, &mut main, extra), Instant::now()));
        (recv, send_thread)
    } else {
        let path = sock("close");
        let l = UnixListener::bind(&path).unwrap();
        let mut rl = Recording {
            inner: l,
            seen: receiver_side.clone(),
        };
        let st = state_seen.clone();
        let recv = thread::spawn(move || {
            let r = receive(&mut rl, || *st.lock().unwrap() = true);
            (r, Instant::now())
        });
        let (mut main, extra) = connect_all(&path, n);
        let mut ss = sender_side.lock().unwrap();
        ss.push(main.clone_box());
        ss.extend(extra.iter().map(|s| s.clone_box()));
        drop(ss);
        let p = plan.clone();
        let send_thread = thread::spawn(move || (send(&p, &mut main, extra), Instant::now()));
        (recv, send_thread)
    };
    thread::sleep(delay(rng));
    let side = if rng.below(2) == 0 {
        &receiver_side
    } else {
        &sender_side
    };
    let closed = {
        let socks = side.lock().unwrap();
        if !socks.is_empty() {
            socks[rng.below(socks.len() as u64) as usize].shut();
        }
        Instant::now()
    };
    // The handles kept for the shutdown must not keep a connection open
    // that its owner closes.
    receiver_side.lock().unwrap().clear();
    sender_side.lock().unwrap().clear();
    let (sres, sat) = send_thread.join().unwrap();
    let ((rres, summary, memory), rat) = recv.join().unwrap();
    for (who, ok, at) in [
        ("sender", sres.is_ok(), sat),
        ("receiver", rres.is_ok(), rat),
    ] {
        if !ok && at.saturating_duration_since(closed) > DEADLINE {
            return Err(format!("the {who} took {:?} to fail", at - closed));
        }
    }
    check_receiver(&plan, &rres, &summary, &memory)?;
    if sres.is_ok() && (rres.is_err() || !*state_seen.lock().unwrap()) {
        return Err(format!(
            "the sender succeeded, the receiver did not: {rres:?}"
        ));
    }
    Ok(match (sres.is_ok(), rres.is_ok()) {
        (true, true) => "completed",
        (false, true) => "receiver completed",
        _ => "failed",
    })
}

#[test]
fn interrupted_migrations() {
    let runs: u64 = std::env::var("SPACEKIT_SOAK_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let seed: u64 = std::env::var("SPACEKIT_SOAK_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    let mut rng = Rng(seed | 1);
    let mut outcomes = std::collections::BTreeMap::<String, u64>::new();
    let mut seen = BTreeSet::new();
    for i in 0..runs {
        let run_seed = rng.next();
        let n = [1, 2, 4][(i % 3) as usize];
        let zero = (i / 3) % 2 == 1;
        let mode = (i / 6) % 4;
        let mut r = Rng(run_seed);
        let res = match mode {
            0 => kill_sender(&mut r, run_seed, n, zero),
            1 => kill_receiver(&mut r, run_seed, n, zero),
            2 => close_socket(&mut r, run_seed, n, zero, false),
            _ => close_socket(&mut r, run_seed, n, zero, true),
        };
        let what = ["kill sender", "kill receiver", "close unix", "close tcp"][mode as usize];
        match res {
            Ok(o) => *outcomes.entry(format!("{what}: {o}")).or_default() += 1,
            Err(e) => panic!(
                "run {i} ({what}, {n} connections, zero pages {zero}) failed: {e} \
                 (SPACEKIT_SOAK_SEED={seed})"
            ),
        }
        seen.insert((n, zero, mode));
    }
    eprintln!("{runs} interrupted migrations (seed {seed}): {outcomes:?}");
    assert!(
        outcomes.keys().any(|k| k.ends_with("failed")),
        "no run was interrupted: {outcomes:?}"
    );
}
