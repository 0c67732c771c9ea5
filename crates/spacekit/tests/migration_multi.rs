//! Several connections per migration and zero pages: round trips over 1, 2
//! and 4 connections on Unix sockets and TCP loopback, with zero-page
//! skipping on and off; the zero-page savings; Cloud Hypervisor-shaped
//! peers on extra connections both ways; and hostile extra connections and
//! sparse requests, each refused with a typed error and a summary that
//! counts only whole requests.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use spacekit::dirty::{MemoryRange, MemoryRangeTable};
use spacekit::migration::{
    Command, Extensions, Listener, MigrationError, ReceiveSummary, Receiver, Request, Response,
    SendStats, Sender, Status,
};
use spacekit_testkit::ch_peer::{
    ch_receive, ch_receive_extra, ch_send_control, ch_send_extra, ChEnd,
};
use spacekit_testkit::rng::Rng;

const PAGE: u64 = 4096;

fn table_of(ranges: &[(u64, u64)]) -> MemoryRangeTable {
    let mut t = MemoryRangeTable::new();
    for &(gpa, length) in ranges {
        t.push(MemoryRange { gpa, length });
    }
    t
}

/// Memory of `pages` pages where about `zero_pct` percent are all zero and
/// the others hold random bytes (a few of them a single non-zero byte at a
/// random place, the hardest case for the zero test).
fn memory(rng: &mut Rng, pages: usize, zero_pct: u64) -> Vec<u8> {
    let mut m = vec![0u8; pages * PAGE as usize];
    for p in m.chunks_mut(PAGE as usize) {
        match rng.below(100) {
            x if x < zero_pct => {}
            x if x < zero_pct + 3 => p[rng.below(PAGE) as usize] = 1 + rng.below(255) as u8,
            _ => rng.fill(p),
        }
    }
    m
}

/// Page-aligned dirty runs in `mem`, rewritten (some to zeros), ascending.
fn dirty(rng: &mut Rng, mem: &mut [u8], runs: usize) -> MemoryRangeTable {
    let pages = mem.len() as u64 / PAGE;
    let mut d = vec![false; pages as usize];
    for _ in 0..runs {
        let p = rng.below(pages);
        for q in p..(p + 1 + rng.below(12)).min(pages) {
            d[q as usize] = true;
            let page = &mut mem[(q * PAGE) as usize..((q + 1) * PAGE) as usize];
            if rng.below(3) == 0 {
                page.fill(0);
            } else {
                page[rng.below(PAGE) as usize] ^= 0x5a;
            }
        }
    }
    let mut t = MemoryRangeTable::new();
    let mut q = 0;
    while q < pages as usize {
        if d[q] {
            let s = q;
            while q < pages as usize && d[q] {
                q += 1;
            }
            t.push(MemoryRange {
                gpa: s as u64 * PAGE,
                length: (q - s) as u64 * PAGE,
            });
        } else {
            q += 1;
        }
    }
    t
}

/// A fresh socket path.
fn sock(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sk-multi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    let _ = std::fs::remove_file(&p);
    p
}

/// How the sender side reaches the receiver.
trait Transport: Send + 'static {
    type Stream: Read + Write + Send + 'static;
    type Listener: Listener<Stream = Self::Stream> + 'static;
    fn listen(name: &str) -> (Self::Listener, Box<dyn Fn() -> Self::Stream + Send + Sync>);
    fn accept(l: &Self::Listener) -> Self::Stream;
}

struct Unix;
impl Transport for Unix {
    type Stream = UnixStream;
    type Listener = UnixListener;
    fn listen(name: &str) -> (UnixListener, Box<dyn Fn() -> UnixStream + Send + Sync>) {
        let p = sock(name);
        let l = UnixListener::bind(&p).unwrap();
        // A sender that waits this long for an answer has lost step with
        // the receiver: the test fails instead of hanging.
        (
            l,
            Box::new(move || {
                let s = UnixStream::connect(&p).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                s
            }),
        )
    }
    fn accept(l: &UnixListener) -> UnixStream {
        let s = l.accept().unwrap().0;
        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        s
    }
}

struct Tcp;
impl Transport for Tcp {
    type Stream = TcpStream;
    type Listener = TcpListener;
    fn listen(_: &str) -> (TcpListener, Box<dyn Fn() -> TcpStream + Send + Sync>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        (
            l,
            Box::new(move || {
                let s = TcpStream::connect(a).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                s
            }),
        )
    }
    fn accept(l: &TcpListener) -> TcpStream {
        let s = l.accept().unwrap().0;
        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        s
    }
}

/// A spacekit receiver serving connections on a thread: its result, its
/// summary (also after failure) and memory.
type Dest = thread::JoinHandle<(
    Result<ReceiveSummary, MigrationError>,
    ReceiveSummary,
    Vec<u8>,
)>;

fn spawn_receiver<T: Transport>(
    mut l: T::Listener,
    size: usize,
    fill: u8,
    ext: Extensions,
) -> Dest {
    thread::spawn(move || {
        let mut memory = vec![fill; size];
        let mut main = T::accept(&l);
        let mut r = Receiver::new(&mut memory).with_extensions(ext);
        let res = r.serve_connections(&mut main, &mut l);
        let summary = r.summary();
        (res, summary, memory)
    })
}

/// A whole migration over `n` connections: round 0 and two dirty rounds
/// split over `n` extra connections (or on the main one for `n == 1`), the
/// last round on the main connection. Returns the per-round stats.
fn migrate<T: Transport>(name: &str, n: usize, zero: bool) -> Vec<SendStats> {
    let mut rng = Rng(0x6d75_6c74 ^ n as u64 ^ (zero as u64) << 8);
    let pages = 1024;
    let mut source = memory(&mut rng, pages, 50);
    let ext = if zero {
        Extensions::ALL
    } else {
        Extensions::PAGE_HASHES
    };
    let (l, connect) = T::listen(name);
    let dest = spawn_receiver::<T>(l, source.len(), 0xa5, Extensions::ALL);
    let mut main = connect();
    let mut sender = Sender::with_buffer_size(64 * 1024).with_extensions(ext);
    sender.start(&mut main).unwrap();
    assert_eq!(sender.extensions(), ext);
    sender.send_config(&mut main, b"{}").unwrap();
    let mut extra: Vec<T::Stream> = (0..if n > 1 { n } else { 0 })
        .map(|_| {
            let mut s = connect();
            sender.attach(&mut s).unwrap();
            s
        })
        .collect();
    let mut stats = Vec::new();
    let mut round = table_of(&[(0, source.len() as u64)]);
    for r in 0..3 {
        let st = if extra.is_empty() {
            sender.send_memory_parallel(&mut [&mut main], &round, &source)
        } else {
            sender.send_memory_parallel(&mut extra, &round, &source)
        }
        .unwrap();
        assert_eq!(st.bytes, round.total_bytes());
        assert!(st.requests as usize <= n, "round {r}: {st:?}");
        stats.push(st);
        round = dirty(&mut rng, &mut source, 40);
    }
    let last = sender.send_memory(&mut main, &round, &source).unwrap();
    stats.push(last);
    drop(extra);
    assert_eq!(sender.page_hashes(&mut main, PAGE).unwrap().len(), pages);
    sender.send_state(&mut main, b"{}").unwrap();
    sender.complete(&mut main).unwrap();
    let (res, summary, memory) = dest.join().unwrap();
    let s = res.unwrap();
    assert_eq!(s, summary);
    assert!(memory == source, "{n} connections, zero pages {zero}");
    let sent: u64 = stats.iter().map(|s| s.bytes).sum();
    assert_eq!(s.bytes, sent);
    assert_eq!(
        s.zero_bytes,
        stats.iter().map(|s| s.zero_bytes).sum::<u64>()
    );
    assert_eq!(s.extra_connections as usize, if n > 1 { n } else { 0 });
    assert_eq!(
        s.memory_requests,
        stats.iter().map(|s| s.requests).sum::<u64>()
    );
    for st in &stats {
        assert_eq!(st.payload_bytes + st.zero_bytes, st.bytes);
        if !zero {
            assert_eq!(st.zero_bytes, 0);
        }
    }
    if zero {
        assert!(
            stats[0].zero_bytes >= source.len() as u64 / 3,
            "{:?}",
            stats[0]
        );
    }
    stats
}

#[test]
fn round_trips_over_unix_sockets() {
    for n in [1, 2, 4] {
        for zero in [false, true] {
            migrate::<Unix>(&format!("u{n}{zero}"), n, zero);
        }
    }
}

#[test]
fn round_trips_over_tcp_loopback() {
    for n in [1, 2, 4] {
        for zero in [false, true] {
            migrate::<Tcp>("", n, zero);
        }
    }
}

/// A 90%-zero memory sends at most 15% of its bytes as payload; the
/// receiver's memory starts as garbage, so the zeros are written.
#[test]
fn zero_pages_are_skipped() {
    let mut rng = Rng(0x5a45_524f);
    let source = memory(&mut rng, 4096, 90);
    let (l, connect) = Unix::listen("zero");
    let dest = spawn_receiver::<Unix>(l, source.len(), 0xee, Extensions::ALL);
    let mut main = connect();
    let mut sender = Sender::new().with_extensions(Extensions::ALL);
    sender.start(&mut main).unwrap();
    assert!(sender.extensions().contains(Extensions::ZERO_PAGES));
    sender.send_config(&mut main, b"{}").unwrap();
    let st = sender
        .send_memory(&mut main, &table_of(&[(0, source.len() as u64)]), &source)
        .unwrap();
    sender.send_state(&mut main, b"{}").unwrap();
    sender.complete(&mut main).unwrap();
    let (res, _, memory) = dest.join().unwrap();
    let s = res.unwrap();
    assert!(memory == source);
    assert_eq!(st.bytes, source.len() as u64);
    assert!(
        st.payload_bytes * 100 <= 15 * st.bytes && st.wire_bytes * 100 <= 15 * st.bytes,
        "{st:?}"
    );
    let zero_pages = source
        .chunks(PAGE as usize)
        .filter(|p| p.iter().all(|&b| b == 0))
        .count();
    assert_eq!(st.zero_bytes, zero_pages as u64 * PAGE);
    assert_eq!(s.zero_bytes, st.zero_bytes);
}

/// Ranges that are not page multiples, at odd addresses, an empty range,
/// and a buffer smaller than a group: the pages are cut per range.
#[test]
fn sparse_requests_of_odd_ranges() {
    let mut rng = Rng(7);
    let source = memory(&mut rng, 300, 60);
    let ranges = [
        (1, 4095),
        (5000, 0),
        (5000, 9000),
        (20_000, 70_000),
        (300 * 4096 - 3, 3),
        (100_000, 300_000),
    ];
    for buf in [16, 5000, 1 << 20] {
        let (mut tx, mut rx) = UnixStream::pair().unwrap();
        tx.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let len = source.len();
        let dest = thread::spawn(move || {
            let mut memory = vec![0xeeu8; len];
            let r = Receiver::new(&mut memory).serve(&mut rx);
            (r, memory)
        });
        let mut sender = Sender::with_buffer_size(buf).with_extensions(Extensions::ALL);
        sender.start(&mut tx).unwrap();
        sender.send_config(&mut tx, b"{}").unwrap();
        let st = sender
            .send_memory(&mut tx, &table_of(&ranges), &source)
            .unwrap();
        sender.send_state(&mut tx, b"{}").unwrap();
        sender.complete(&mut tx).unwrap();
        let (r, memory) = dest.join().unwrap();
        assert_eq!(r.unwrap().bytes, st.bytes);
        for &(g, l) in &ranges {
            let (g, l) = (g as usize, l as usize);
            assert!(memory[g..g + l] == source[g..g + l], "{g} {l}");
        }
    }
}

/// spacekit's sender with extra connections to a Cloud Hypervisor-shaped
/// receiver: no extension is accepted, so every request is `Memory`, and
/// the extra connections carry role 1 then `Memory` only.
#[test]
fn extra_connections_to_a_cloud_hypervisor_receiver() {
    let mut rng = Rng(0xc4);
    let source = memory(&mut rng, 512, 80);
    let path = sock("ch-recv");
    let l = UnixListener::bind(&path).unwrap();
    let shared = std::sync::Arc::new(Mutex::new(vec![0u8; source.len()]));
    let m2 = shared.clone();
    let size = source.len();
    let dest = thread::spawn(move || {
        let (mut main, _) = l.accept().unwrap();
        let main = thread::spawn(move || {
            let mut main_mem = vec![0u8; size];
            ch_receive(&mut main, &mut main_mem)
        });
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let (mut s, _) = l.accept().unwrap();
                let m = m2.clone();
                thread::spawn(move || ch_receive_extra(&mut s, &m))
            })
            .collect();
        let extra: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        let (end, got) = main.join().unwrap();
        (end, got, extra)
    });
    let mut main = UnixStream::connect(&path).unwrap();
    let mut sender = Sender::new().with_extensions(Extensions::ALL);
    sender.start(&mut main).unwrap();
    assert_eq!(sender.extensions(), Extensions::NONE);
    sender.send_config(&mut main, b"{}").unwrap();
    let mut extra: Vec<UnixStream> = (0..3)
        .map(|_| {
            let mut s = UnixStream::connect(&path).unwrap();
            sender.attach(&mut s).unwrap();
            s
        })
        .collect();
    let st = sender
        .send_memory_parallel(&mut extra, &table_of(&[(0, source.len() as u64)]), &source)
        .unwrap();
    assert_eq!((st.zero_bytes, st.requests), (0, 3));
    drop(extra);
    sender.send_state(&mut main, b"{}").unwrap();
    sender.complete(&mut main).unwrap();
    let (end, got, extra) = dest.join().unwrap();
    assert_eq!(end, ChEnd::Completed { paused: false });
    assert!(got.headers.iter().all(|(c, _, _)| (1..=9).contains(c)));
    for e in extra {
        let (requests, headers) = e.unwrap();
        assert_eq!(requests, 1);
        assert!(headers.iter().all(|(c, h, _)| *c == 4 && *h == [0; 6]));
    }
    assert!(*shared.lock().unwrap() == source);
}

/// A Cloud Hypervisor-shaped sender with four extra connections to
/// spacekit's receiver (all memory on the extra connections).
#[test]
fn cloud_hypervisor_extra_connections_to_spacekit() {
    let mut rng = Rng(0xc5);
    let source = memory(&mut rng, 512, 30);
    let (l, connect) = Unix::listen("ch-send");
    let dest = spawn_receiver::<Unix>(l, source.len(), 0, Extensions::ALL);
    let mut main = connect();
    let chunks: Vec<Vec<(u64, u64)>> = (0..8).map(|i| vec![(i * 64 * PAGE, 64 * PAGE)]).collect();
    ch_send_control(&mut main, b"{}", b"{}", || {
        let handles: Vec<_> = chunks
            .chunks(2)
            .map(|c| {
                let c = c.to_vec();
                let src = source.clone();
                let mut s = connect();
                thread::spawn(move || ch_send_extra(&mut s, &src, &c))
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().unwrap())
    })
    .unwrap();
    let (res, _, memory) = dest.join().unwrap();
    let s = res.unwrap();
    assert_eq!(
        (s.memory_requests, s.extra_connections, s.bytes),
        (8, 4, source.len() as u64)
    );
    assert!(memory == source);
}

/// Starts a spacekit receiver and a main connection past `Config`; returns
/// them with the connect function.
fn started(
    name: &str,
    ext: Extensions,
) -> (
    Dest,
    UnixStream,
    Sender,
    Box<dyn Fn() -> UnixStream + Send + Sync>,
) {
    let (l, connect) = Unix::listen(name);
    let dest = spawn_receiver::<Unix>(l, 64 * PAGE as usize, 0, Extensions::ALL);
    let mut main = connect();
    let mut sender = Sender::new().with_extensions(ext);
    sender.start(&mut main).unwrap();
    sender.send_config(&mut main, b"{}").unwrap();
    (dest, main, sender, connect)
}

fn raw_request(command: u16, length: u64) -> Vec<u8> {
    let mut b = vec![0u8; 16];
    b[..2].copy_from_slice(&command.to_le_bytes());
    b[8..].copy_from_slice(&length.to_le_bytes());
    b
}

fn entry(gpa: u64, len: u64) -> Vec<u8> {
    let mut b = gpa.to_le_bytes().to_vec();
    b.extend_from_slice(&len.to_le_bytes());
    b
}

fn status(s: &mut UnixStream) -> Option<Status> {
    Response::read_from(s).ok().map(|r| r.status)
}

/// What the main connection gets for `State` once an extra connection
/// failed: an error answer, and the receiver's typed error.
fn fails_with(
    dest: Dest,
    mut main: UnixStream,
    mut sender: Sender,
) -> (MigrationError, ReceiveSummary) {
    let r = sender.send_state(&mut main, b"{}");
    assert!(r.is_err(), "State must be refused: {r:?}");
    let (res, summary, _) = dest.join().unwrap();
    (res.unwrap_err(), summary)
}

fn inner(e: MigrationError) -> MigrationError {
    match e {
        MigrationError::Connection { error, .. } => *error,
        e => panic!("expected a connection's error, got {e:?}"),
    }
}

#[test]
fn a_non_memory_request_on_an_extra_connection_fails_the_migration() {
    let (dest, main, sender, connect) = started("hostile-cmd", Extensions::ALL);
    let mut x = connect();
    x.write_all(&1u16.to_le_bytes()).unwrap();
    x.write_all(&raw_request(3, 0)).unwrap();
    assert_eq!(status(&mut x), Some(Status::Error));
    let (e, _) = fails_with(dest, main, sender);
    assert_eq!(
        inner(e),
        MigrationError::NotOnExtraConnection {
            command: Command::State
        }
    );
}

#[test]
fn sparse_memory_needs_the_extension() {
    let (dest, main, sender, connect) = started("hostile-sparse", Extensions::NONE);
    let mut x = connect();
    x.write_all(&1u16.to_le_bytes()).unwrap();
    x.write_all(&raw_request(0x535a, 16)).unwrap();
    x.write_all(&entry(0, PAGE)).unwrap();
    assert_eq!(status(&mut x), Some(Status::Error));
    let (e, _) = fails_with(dest, main, sender);
    assert_eq!(
        inner(e),
        MigrationError::NotNegotiated {
            command: Command::SparseMemory
        }
    );
}

#[test]
fn a_zero_mask_past_its_pages_is_refused() {
    let (dest, mut main, mut sender, _) = started("hostile-mask", Extensions::ALL);
    let mut req = raw_request(0x535a, 16);
    req.extend(entry(0, 3 * PAGE));
    req.extend(0b1000u64.to_le_bytes());
    main.write_all(&req).unwrap();
    assert_eq!(status(&mut main), Some(Status::Error));
    let (res, summary, _) = dest.join().unwrap();
    assert_eq!(res, Err(MigrationError::BadZeroMask { mask: 8, pages: 3 }));
    assert_eq!((summary.memory_requests, summary.bytes), (0, 0));
    let _ = sender.abandon(&mut main);
}

#[test]
fn memory_on_an_extra_connection_before_config_is_refused() {
    let (l, connect) = Unix::listen("hostile-early");
    let dest = spawn_receiver::<Unix>(l, 16 * PAGE as usize, 0, Extensions::ALL);
    let mut main = connect();
    let mut sender = Sender::new();
    sender.start(&mut main).unwrap();
    let mut x = connect();
    sender.attach(&mut x).unwrap();
    let e = sender.send_memory(
        &mut x,
        &table_of(&[(0, PAGE)]),
        &vec![1u8; 16 * PAGE as usize],
    );
    assert!(matches!(e, Err(MigrationError::Rejected { .. })), "{e:?}");
    assert!(sender.send_config(&mut main, b"{}").is_err());
    let (res, summary, _) = dest.join().unwrap();
    assert_eq!(inner(res.unwrap_err()), MigrationError::MemoryClosed);
    assert_eq!(summary.bytes, 0);
}

/// An extra connection that ends in the middle of its contents: the main
/// connection's `State` is refused, and the summary counts only the
/// request that arrived whole.
#[test]
fn an_extra_connection_cut_in_a_request_fails_and_is_not_counted() {
    let (dest, mut main, mut sender, connect) = started("hostile-cut", Extensions::NONE);
    let src = vec![9u8; 64 * PAGE as usize];
    sender
        .send_memory(&mut main, &table_of(&[(0, 2 * PAGE)]), &src)
        .unwrap();
    let mut x = connect();
    x.write_all(&1u16.to_le_bytes()).unwrap();
    let mut req = raw_request(4, 16);
    req.extend(entry(8 * PAGE, 4 * PAGE));
    req.extend(vec![1u8; 3 * PAGE as usize]);
    x.write_all(&req).unwrap();
    x.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(status(&mut x), Some(Status::Error));
    let (e, summary) = fails_with(dest, main, sender);
    assert!(matches!(
        inner(e),
        MigrationError::Truncated {
            what: "memory contents",
            ..
        }
    ));
    assert_eq!((summary.memory_requests, summary.bytes), (1, 2 * PAGE));
}

/// `State` while an extra connection is in the middle of a request.
#[test]
fn state_with_memory_in_flight_is_refused() {
    let (dest, main, sender, connect) = started("hostile-inflight", Extensions::NONE);
    let mut x = connect();
    x.write_all(&1u16.to_le_bytes()).unwrap();
    let mut req = raw_request(4, 16);
    req.extend(entry(0, 4 * PAGE));
    req.extend(vec![1u8; PAGE as usize]);
    x.write_all(&req).unwrap();
    thread::sleep(Duration::from_millis(100));
    let (e, _) = fails_with(dest, main, sender);
    assert!(
        matches!(
            e,
            MigrationError::MemoryInFlight { requests: 1 } | MigrationError::Connection { .. }
        ),
        "{e:?}"
    );
    drop(x);
}

/// Overlapping tables on several connections at once take turns: every
/// request lands whole (the later one wins where they overlap).
#[test]
fn overlapping_tables_on_several_connections_take_turns() {
    let (dest, mut main, mut sender, connect) = started("overlap", Extensions::ALL);
    let src = vec![0x11u8; 64 * PAGE as usize];
    let all = table_of(&[(0, 64 * PAGE)]);
    let mut extra: Vec<UnixStream> = (0..4)
        .map(|_| {
            let mut s = connect();
            sender.attach(&mut s).unwrap();
            s
        })
        .collect();
    // Each stream sends the whole memory: four overlapping requests.
    thread::scope(|sc| {
        for s in &mut extra {
            let src = &src;
            let all = &all;
            sc.spawn(move || Sender::new().send_memory(s, all, src).unwrap());
        }
    });
    drop(extra);
    sender.send_state(&mut main, b"{}").unwrap();
    sender.complete(&mut main).unwrap();
    let (res, _, memory) = dest.join().unwrap();
    assert_eq!(res.unwrap().memory_requests, 4);
    assert!(memory == src);
}

/// Connections with an unknown role or the fault role, and connections
/// past the limit, are closed without failing the migration.
#[test]
fn other_roles_and_excess_connections_are_closed() {
    let (l, connect) = Unix::listen("roles");
    let dest = thread::spawn(move || {
        let mut l = l;
        let mut memory = vec![0u8; 16 * PAGE as usize];
        let mut main = Unix::accept(&l);
        let r = Receiver::new(&mut memory)
            .with_max_connections(3)
            .serve_connections(&mut main, &mut l);
        (r, memory)
    });
    let mut main = connect();
    let mut sender = Sender::new();
    sender.start(&mut main).unwrap();
    sender.send_config(&mut main, b"{}").unwrap();
    let src = vec![3u8; 16 * PAGE as usize];
    let mut ok = connect();
    sender.attach(&mut ok).unwrap();
    sender
        .send_memory_parallel(&mut [&mut ok], &table_of(&[(0, 16 * PAGE)]), &src)
        .unwrap();
    for role in [2u16, 0, 7] {
        let mut x = connect();
        x.write_all(&role.to_le_bytes()).unwrap();
        let mut b = [0u8; 1];
        x.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(x.read(&mut b).unwrap_or(0), 0, "role {role} is closed");
    }
    sender.send_state(&mut main, b"{}").unwrap();
    sender.complete(&mut main).unwrap();
    let (r, memory) = dest.join().unwrap();
    // Three accepted (one memory connection, two closed for their role),
    // the fourth closed past the limit.
    assert_eq!(r.unwrap().extra_connections, 3);
    assert!(memory == src);
}

#[test]
fn parallel_send_checks_its_arguments() {
    let mut sender = Sender::new();
    let src = vec![0u8; 4096];
    let mut none: [UnixStream; 0] = [];
    assert_eq!(
        sender.send_memory_parallel(&mut none, &table_of(&[(0, 4096)]), &src),
        Err(MigrationError::NoConnections)
    );
    let (mut a, _b) = UnixStream::pair().unwrap();
    assert!(matches!(
        sender.send_memory_parallel(&mut [&mut a], &table_of(&[(0, 8192)]), &src),
        Err(MigrationError::RangeOutsideMemory { .. })
    ));
    // An empty table sends nothing.
    let st = sender
        .send_memory_parallel(&mut [&mut a], &MemoryRangeTable::new(), &src)
        .unwrap();
    assert_eq!(st, SendStats::default());
    // The request header is spacekit's own for the sparse form.
    assert_eq!(
        Request::new(Command::SparseMemory, 16).to_bytes()[..2],
        [0x5a, 0x53]
    );
}
