//! The migration stream end to end: a `Sender` and a `Receiver` over a Unix
//! socket pair for a multi-round pre-copy, the exact bytes on the wire, and
//! every malformed stream written by hand to a receiver (typed error, error
//! response, memory untouched where the request was refused before its
//! contents).

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::thread::{self, JoinHandle};

use spacekit::dirty::{Geometry, MemoryRange, MemoryRangeTable, Scan};
use spacekit::migration::{
    diff_pages, hash_pages, Command, Extensions, MigrationError, ReceiveState, ReceiveSummary,
    Receiver, Request, Response, Sender, Status, MAX_TABLE_BYTES,
};

const PAGE: u64 = 4096;

use spacekit_testkit::rng::Rng;

type Served = (Result<ReceiveSummary, MigrationError>, Vec<u8>);

/// A receiver serving `memory` on one end of a socket pair, in a thread;
/// returns the other end. The thread drops its end when `serve` returns.
fn spawn_receiver(mut memory: Vec<u8>) -> (UnixStream, JoinHandle<Served>) {
    let (tx, mut rx) = UnixStream::pair().unwrap();
    let handle = thread::spawn(move || {
        let res = Receiver::new(&mut memory).serve(&mut rx);
        (res, memory)
    });
    (tx, handle)
}

fn range(gpa: u64, length: u64) -> MemoryRange {
    MemoryRange { gpa, length }
}

fn table(ranges: &[(u64, u64)]) -> MemoryRangeTable {
    let mut t = MemoryRangeTable::new();
    for &(g, l) in ranges {
        t.push(range(g, l));
    }
    t
}

/// The table of the pages set in `dirty`, built the way a VMM builds it:
/// a dirty bitmap scanned into ranges.
fn table_of_pages(dirty: &[bool]) -> MemoryRangeTable {
    let mut words = vec![0u64; dirty.len().div_ceil(64)];
    for (i, _) in dirty.iter().enumerate().filter(|(_, d)| **d) {
        words[i / 64] |= 1 << (i % 64);
    }
    MemoryRangeTable::from_scan(Scan::new(&words, Geometry::new(0, PAGE).unwrap()).unwrap())
}

/// Writes random bytes over random stretches of `mem` and marks their pages
/// in `dirty`.
fn mutate(rng: &mut Rng, mem: &mut [u8], dirty: &mut [bool], writes: usize) {
    for _ in 0..writes {
        let at = rng.below(mem.len() as u64) as usize;
        let len = (1 + rng.below(3 * PAGE)) as usize;
        let end = (at + len).min(mem.len());
        rng.fill(&mut mem[at..end]);
        dirty[at / PAGE as usize..=(end - 1) / PAGE as usize].fill(true);
    }
}

/// A multi-round pre-copy: round 0 sends all of memory, each later round
/// the pages dirtied since (random writes, some sent as several partitioned
/// requests, plus redundant random ranges); after the final round the page
/// hashes of both sides agree, and after `Complete` the destination holds
/// the source's bytes.
#[test]
fn precopy_rounds_then_hashes_and_complete() {
    const SIZE: usize = 4 << 20;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut source = rng.bytes(SIZE);
    let (mut tx, dest) = spawn_receiver(vec![0u8; SIZE]);
    // An odd bounce buffer size, so ranges straddle buffer refills.
    let mut sender = Sender::with_buffer_size(100_003);
    sender.start(&mut tx).unwrap();
    assert_eq!(sender.extensions(), Extensions::PAGE_HASHES);
    sender
        .send_config(&mut tx, b"{\"memory\":4194304}")
        .unwrap();

    let mut requests = 2u64;
    let mut memory_requests = 0u64;
    let mut ranges = 0u64;
    let mut bytes = 0u64;

    // Round 0: the whole of memory.
    let stats = sender
        .send_memory(&mut tx, &table(&[(0, SIZE as u64)]), &source)
        .unwrap();
    assert_eq!((stats.ranges, stats.bytes), (1, SIZE as u64));
    assert_eq!(stats.wire_bytes, 16 + 16 + SIZE as u64);
    requests += 1;
    memory_requests += 1;
    ranges += 1;
    bytes += SIZE as u64;

    let pages = SIZE / PAGE as usize;
    for round in 1..=8 {
        let mut dirty = vec![false; pages];
        mutate(&mut rng, &mut source, &mut dirty, 5 + round * 7);
        let mut t = table_of_pages(&dirty);
        assert!(!t.is_empty());
        // Redundant byte-granular ranges (even overlapping ones) are harmless.
        for _ in 0..rng.below(4) {
            let g = rng.below(SIZE as u64);
            t.push(range(g, rng.below(SIZE as u64 - g + 1).min(50_000)));
        }
        // Some rounds go as several requests, as Cloud Hypervisor partitions.
        let parts = if round % 2 == 0 {
            t.partition(64 * 1024 + 17)
        } else {
            vec![t.clone()]
        };
        for part in &parts {
            let s = sender.send_memory(&mut tx, part, &source).unwrap();
            assert_eq!(s.bytes, part.total_bytes());
            assert_eq!(s.ranges, part.len() as u64);
            requests += 1;
            memory_requests += 1;
            ranges += part.len() as u64;
            bytes += part.total_bytes();
        }
    }

    // A round that leaves some dirty pages out: the page hashes show exactly
    // which ones.
    let mut dirty = vec![false; pages];
    mutate(&mut rng, &mut source, &mut dirty, 40);
    let dirty_pages: Vec<u64> = (0..pages as u64).filter(|p| dirty[*p as usize]).collect();
    assert!(dirty_pages.len() >= 3);
    let held_back: Vec<u64> = dirty_pages.iter().copied().step_by(3).collect();
    let mut sent = dirty.clone();
    for p in &held_back {
        sent[*p as usize] = false;
    }
    let t = table_of_pages(&sent);
    sender.send_memory(&mut tx, &t, &source).unwrap();
    requests += 1;
    memory_requests += 1;
    ranges += t.len() as u64;
    bytes += t.total_bytes();

    let remote = sender.page_hashes(&mut tx, PAGE).unwrap();
    requests += 1;
    let local = hash_pages(&source, PAGE).unwrap();
    assert_eq!(remote.len(), pages);
    assert_eq!(diff_pages(&local, &remote).unwrap(), held_back);

    // The final round: the pages held back.
    let mut last = vec![false; pages];
    for p in &held_back {
        last[*p as usize] = true;
    }
    let t = table_of_pages(&last);
    sender.send_memory(&mut tx, &t, &source).unwrap();
    requests += 1;
    memory_requests += 1;
    ranges += t.len() as u64;
    bytes += t.total_bytes();

    // Source and destination agree page by page, at two page sizes.
    for ps in [PAGE, 2 * 1024 * 1024] {
        let remote = sender.page_hashes(&mut tx, ps).unwrap();
        requests += 1;
        assert_eq!(remote, hash_pages(&source, ps).unwrap());
        assert_eq!(
            diff_pages(&hash_pages(&source, ps).unwrap(), &remote),
            Ok(vec![])
        );
    }

    sender.send_state(&mut tx, b"{}").unwrap();
    sender.complete(&mut tx).unwrap();
    requests += 2;
    let (res, memory) = dest.join().unwrap();
    let summary = res.unwrap();
    assert_eq!(summary.requests, requests);
    assert_eq!((summary.config_bytes, summary.state_bytes), (18, 2));
    assert!(!summary.paused);
    assert_eq!(summary.memory_requests, memory_requests);
    assert_eq!(summary.ranges, ranges);
    assert_eq!(summary.bytes, bytes);
    assert_eq!(summary.page_hash_requests, 3);
    assert!(
        memory == source,
        "destination memory differs from the source"
    );
}

/// Memory whose size is not a multiple of the page size: the last page's
/// hash covers the bytes that exist, on both sides; the default sender.
#[test]
fn partial_last_page_and_default_sender() {
    const SIZE: usize = 3 * 4096 + 1000;
    let mut rng = Rng(42);
    let source = rng.bytes(SIZE);
    let (mut tx, dest) = spawn_receiver(vec![0xee; SIZE]);
    let mut sender = Sender::new();
    sender.start(&mut tx).unwrap();
    sender.send_config(&mut tx, b"").unwrap();
    // Out of order and byte-granular ranges covering everything.
    let t = table(&[(5000, SIZE as u64 - 5000), (0, 17), (17, 4983), (0, 0)]);
    sender.send_memory(&mut tx, &t, &source).unwrap();
    // An empty round is a valid request.
    let s = sender
        .send_memory(&mut tx, &MemoryRangeTable::new(), &source)
        .unwrap();
    assert_eq!((s.ranges, s.bytes, s.wire_bytes), (0, 0, 16));
    for ps in [1u64, 1000, 4096, SIZE as u64, 1 << 40] {
        let remote = sender.page_hashes(&mut tx, ps).unwrap();
        assert_eq!(remote.len() as u64, (SIZE as u64).div_ceil(ps));
        assert_eq!(remote, hash_pages(&source, ps).unwrap(), "page size {ps}");
    }
    sender.send_state(&mut tx, b"").unwrap();
    sender.complete_paused(&mut tx).unwrap();
    let (res, memory) = dest.join().unwrap();
    let summary = res.unwrap();
    assert_eq!(summary.memory_requests, 2);
    assert!(summary.paused);
    assert!(memory == source);
}

/// A stream that reads from canned bytes and records what is written.
struct Canned {
    input: io::Cursor<Vec<u8>>,
    output: Vec<u8>,
}

impl Canned {
    fn new(input: Vec<u8>) -> Self {
        Canned {
            input: io::Cursor::new(input),
            output: Vec::new(),
        }
    }
}

impl Read for Canned {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.input.read(buf)
    }
}

impl Write for Canned {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn responses(list: &[Response]) -> Vec<u8> {
    list.iter().flat_map(|r| r.to_bytes()).collect()
}

/// A spacekit receiver's answer to a `Start` offering page hashes.
fn sk_ok() -> Response {
    let mut r = Response::ok();
    r.padding = [b'S', b'K', 1, 0, 0, 0];
    r
}

/// A sender that negotiated page hashes (against a canned answer).
fn negotiated(sender: Sender) -> Sender {
    let mut sender = sender;
    sender
        .start(&mut Canned::new(responses(&[sk_ok()])))
        .unwrap();
    sender
}

/// The sender's bytes are Cloud Hypervisor's layout: the header, the table
/// exactly as `MemoryRangeTable::to_bytes` writes it, then the contents.
#[test]
fn sender_wire_bytes_are_the_documented_layout() {
    let mut rng = Rng(7);
    let source = rng.bytes(64 * 1024);
    let t = table(&[(4096, 100), (0, 3), (60_000, 5536)]);
    let mut s = Canned::new(responses(&[
        sk_ok(),
        Response::ok(),
        Response::ok(),
        Response::ok(),
        Response::ok(),
        Response::ok(),
        Response::ok(),
    ]));
    // A 16-byte buffer: the table and contents go 16 bytes at a time.
    let mut sender = Sender::with_buffer_size(1);
    assert_eq!(sender.buffer_size(), 16);
    sender.start(&mut s).unwrap();
    assert_eq!(sender.extensions(), Extensions::PAGE_HASHES);
    sender.send_config(&mut s, b"cfg").unwrap();
    sender.send_memory(&mut s, &t, &source).unwrap();
    sender.send_state(&mut s, b"st").unwrap();
    sender.abandon(&mut s).unwrap();
    sender.complete(&mut s).unwrap();
    sender.complete_paused(&mut s).unwrap();

    let mut want = Vec::new();
    // Start: version 0, then spacekit's offer in bytes Cloud Hypervisor ignores.
    want.extend_from_slice(&[1, 0, 0, 0, b'S', b'K', 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    want.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0]);
    want.extend_from_slice(b"cfg");
    want.extend_from_slice(&[4, 0, 0, 0, 0, 0, 0, 0, 48, 0, 0, 0, 0, 0, 0, 0]);
    want.extend_from_slice(&t.to_bytes());
    want.extend_from_slice(&source[4096..4196]);
    want.extend_from_slice(&source[0..3]);
    want.extend_from_slice(&source[60_000..65_536]);
    want.extend_from_slice(&[3, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0]);
    want.extend_from_slice(b"st");
    want.extend_from_slice(&Request::new(Command::Abandon, 0).to_bytes());
    want.extend_from_slice(&Request::new(Command::Complete, 0).to_bytes());
    want.extend_from_slice(&[8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(s.output, want);

    // Offering nothing: exactly Cloud Hypervisor's Start.
    let mut s = Canned::new(responses(&[sk_ok()]));
    let mut plain = Sender::new().with_extensions(Extensions::NONE);
    plain.start(&mut s).unwrap();
    assert_eq!(s.output, [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        plain.extensions(),
        Extensions::NONE,
        "accepted but not offered"
    );

    // Page hashes: the request carries the page size.
    let hashes = [0xdead_beefu32, 7];
    let mut input = Response::new(Status::Ok, 8).to_bytes().to_vec();
    input.extend(hashes.iter().flat_map(|h| h.to_le_bytes()));
    let mut s = Canned::new(input);
    assert_eq!(sender.page_hashes(&mut s, 4096).unwrap(), hashes);
    let mut want = Request::new(Command::PageHashes, 8).to_bytes().to_vec();
    want.extend_from_slice(&4096u64.to_le_bytes());
    assert_eq!(s.output, want);
}

/// Bad answers from the receiver: an error or invalid status is
/// `Rejected`, an unknown one `UnknownStatus`, a length that does not fit
/// `BadResponseLength`, a cut answer `Truncated`.
#[test]
fn sender_checks_the_answers() {
    let mut sender = negotiated(Sender::new());
    let src = vec![0u8; 4096];
    let t = table(&[(0, 4096)]);
    let cases: Vec<(Vec<u8>, MigrationError)> = vec![
        (
            responses(&[Response::error()]),
            MigrationError::Rejected {
                status: Status::Error,
                command: Command::Memory,
            },
        ),
        (
            vec![0; 16],
            MigrationError::Rejected {
                status: Status::Invalid,
                command: Command::Memory,
            },
        ),
        (
            {
                let mut b = Response::ok().to_bytes();
                b[0] = 3;
                b.to_vec()
            },
            MigrationError::UnknownStatus { value: 3 },
        ),
        (
            responses(&[Response::new(Status::Ok, 4)]),
            MigrationError::BadResponseLength {
                command: Command::Memory,
                length: 4,
            },
        ),
        (
            Response::ok().to_bytes()[..9].to_vec(),
            MigrationError::Truncated {
                what: "response header",
                expected: 16,
                got: 9,
            },
        ),
    ];
    for (input, want) in cases {
        let mut s = Canned::new(input);
        assert_eq!(sender.send_memory(&mut s, &t, &src), Err(want));
    }
    let mut s = Canned::new(responses(&[Response::error()]));
    assert_eq!(
        sender.start(&mut s),
        Err(MigrationError::Rejected {
            status: Status::Error,
            command: Command::Start
        })
    );
    // Page hashes: not a whole number of u32s, and a cut list.
    let mut sender = negotiated(sender);
    let mut s = Canned::new(responses(&[Response::new(Status::Ok, 6)]));
    assert_eq!(
        sender.page_hashes(&mut s, 4096),
        Err(MigrationError::BadResponseLength {
            command: Command::PageHashes,
            length: 6
        })
    );
    let mut input = responses(&[Response::new(Status::Ok, 12)]);
    input.extend_from_slice(&[1, 2, 3, 4, 5]);
    let mut s = Canned::new(input);
    assert_eq!(
        sender.page_hashes(&mut s, 4096),
        Err(MigrationError::Truncated {
            what: "page hashes",
            expected: 12,
            got: 5
        })
    );
    let mut s = Canned::new(responses(&[Response::error()]));
    assert_eq!(
        sender.page_hashes(&mut s, 4096),
        Err(MigrationError::Rejected {
            status: Status::Error,
            command: Command::PageHashes
        })
    );
}

/// A table outside the source (or overflowing), and a page size of 0, are
/// refused before a byte is written.
#[test]
fn sender_refuses_bad_tables_before_writing() {
    let (mut tx, mut rx) = UnixStream::pair().unwrap();
    let src = vec![1u8; 10_000];
    let mut sender = Sender::new();
    assert_eq!(
        sender.send_memory(&mut tx, &table(&[(0, 4096), (8192, 1809)]), &src),
        Err(MigrationError::RangeOutsideMemory {
            index: 1,
            gpa: 8192,
            length: 1809,
            memory_size: 10_000
        })
    );
    assert_eq!(
        sender.send_memory(&mut tx, &table(&[(10_001, 0)]), &src),
        Err(MigrationError::RangeOutsideMemory {
            index: 0,
            gpa: 10_001,
            length: 0,
            memory_size: 10_000
        })
    );
    assert_eq!(
        sender.send_memory(&mut tx, &table(&[(0, 1), (2, 3), (u64::MAX, 1)]), &src[..]),
        Err(MigrationError::RangeOverflow { index: 2 })
    );
    // Page hashes: not negotiated (no Start yet), then a page size of 0.
    assert_eq!(
        sender.page_hashes(&mut tx, 4096),
        Err(MigrationError::NotNegotiated {
            command: Command::PageHashes
        })
    );
    let mut sender = negotiated(sender);
    assert_eq!(
        sender.page_hashes(&mut tx, 0),
        Err(MigrationError::BadPageSize { page_size: 0 })
    );
    tx.shutdown(Shutdown::Write).unwrap();
    let mut got = Vec::new();
    rx.read_to_end(&mut got).unwrap();
    assert!(got.is_empty(), "{} bytes written", got.len());
}

/// A real receiver refusing a request makes the sender return `Rejected`,
/// whether the sender sees the error response after its writes or after a
/// write fails because the receiver hung up.
#[test]
fn receiver_refusal_is_rejected_at_the_sender() {
    // Memory before Start.
    let (mut tx, dest) = spawn_receiver(vec![0; 8192]);
    let src = vec![3u8; 8192];
    let mut sender = Sender::new();
    assert_eq!(
        sender.send_memory(&mut tx, &table(&[(0, 8192)]), &src),
        Err(MigrationError::Rejected {
            status: Status::Error,
            command: Command::Memory
        })
    );
    let (res, memory) = dest.join().unwrap();
    assert_eq!(
        res,
        Err(MigrationError::NotStarted {
            command: Command::Memory
        })
    );
    assert!(memory.iter().all(|b| *b == 0));

    // A destination smaller than the source: refused after the table, while
    // 16 MiB of contents are still to be written.
    const BIG: usize = 16 << 20;
    let (mut tx, dest) = spawn_receiver(vec![0; 4096]);
    let src = vec![5u8; BIG];
    sender.start(&mut tx).unwrap();
    sender.send_config(&mut tx, b"{}").unwrap();
    assert_eq!(
        sender.send_memory(&mut tx, &table(&[(0, BIG as u64)]), &src),
        Err(MigrationError::Rejected {
            status: Status::Error,
            command: Command::Memory
        })
    );
    let (res, memory) = dest.join().unwrap();
    assert_eq!(
        res,
        Err(MigrationError::RangeOutsideMemory {
            index: 0,
            gpa: 0,
            length: BIG as u64,
            memory_size: 4096
        })
    );
    assert!(memory.iter().all(|b| *b == 0));
}

/// `Abandon` is acknowledged; the receiver returns `Abandoned`.
#[test]
fn abandon() {
    let (mut tx, dest) = spawn_receiver(vec![0; 4096]);
    let mut sender = Sender::new();
    sender.start(&mut tx).unwrap();
    sender.abandon(&mut tx).unwrap();
    let (res, _) = dest.join().unwrap();
    assert_eq!(res, Err(MigrationError::Abandoned));
}

// ---------------------------------------------------------------------------
// Malformed streams, written byte by byte.

const MEM: usize = 64 * 1024;

/// The destination memory every malformed case starts from.
fn initial_memory() -> Vec<u8> {
    Rng(0x5eed).bytes(MEM)
}

/// The outcome of feeding `input` to a receiver over `MEM` bytes of memory
/// (or `max_table` as its cap): its result, its memory afterwards and the
/// responses it wrote.
struct Outcome {
    result: Result<ReceiveSummary, MigrationError>,
    memory: Vec<u8>,
    responses: Vec<Response>,
    trailing: usize,
}

fn feed_with(input: &[u8], max_table: Option<u64>) -> Outcome {
    let (mut tx, mut rx) = UnixStream::pair().unwrap();
    let dest = thread::spawn(move || {
        let mut memory = initial_memory();
        let mut r = Receiver::new(&mut memory);
        if let Some(m) = max_table {
            r = r.with_max_table_bytes(m);
        }
        let res = r.serve(&mut rx);
        (res, memory)
    });
    // The receiver may hang up before reading everything: a failed write
    // is part of the case, not of the test.
    let _ = tx.write_all(input);
    let _ = tx.shutdown(Shutdown::Write);
    let (result, memory) = dest.join().unwrap();
    let mut out = Vec::new();
    // A receiver that hangs up with input unread resets the connection
    // (after the bytes it wrote have been read).
    if let Err(e) = tx.read_to_end(&mut out) {
        assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{e}");
    }
    let responses = out
        .chunks_exact(16)
        .map(|c| Response::from_bytes(c.try_into().unwrap()).unwrap())
        .collect();
    Outcome {
        result,
        memory,
        responses,
        trailing: out.len() % 16,
    }
}

fn feed(input: &[u8]) -> Outcome {
    feed_with(input, None)
}

fn req(command: u16, length: u64) -> Vec<u8> {
    let mut b = vec![0u8; 16];
    b[..2].copy_from_slice(&command.to_le_bytes());
    b[8..].copy_from_slice(&length.to_le_bytes());
    b
}

fn start() -> Vec<u8> {
    req(1, 0)
}

fn entries(ranges: &[(u64, u64)]) -> Vec<u8> {
    let mut b = Vec::new();
    for &(g, l) in ranges {
        b.extend_from_slice(&g.to_le_bytes());
        b.extend_from_slice(&l.to_le_bytes());
    }
    b
}

/// A Memory request: header, table, then `contents` bytes of filler.
fn memory_req(ranges: &[(u64, u64)], contents: usize) -> Vec<u8> {
    let mut b = req(4, (ranges.len() * 16) as u64);
    b.extend(entries(ranges));
    b.extend((0..contents).map(|i| (i * 31 + 1) as u8));
    b
}

fn cat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

/// Checks a refused stream: the error, one Ok per request accepted before
/// it, then one Error response, and memory untouched.
#[track_caller]
fn refused(input: &[u8], oks: usize, want: MigrationError) {
    refused_with(input, None, oks, want);
}

#[track_caller]
fn refused_with(input: &[u8], max_table: Option<u64>, oks: usize, want: MigrationError) {
    let o = feed_with(input, max_table);
    assert_eq!(o.result, Err(want));
    let mut expected = vec![Status::Ok; oks];
    expected.push(Status::Error);
    let got: Vec<Status> = o.responses.iter().map(|r| r.status).collect();
    assert_eq!(got, expected);
    assert!(o.responses.iter().all(|r| r.length == 0));
    assert_eq!(o.trailing, 0);
    assert!(o.memory == initial_memory(), "memory changed");
}

/// A `Start` offering spacekit's page hashes.
fn start_sk() -> Vec<u8> {
    let mut b = start();
    b[4..8].copy_from_slice(&[b'S', b'K', 1, 0]);
    b
}

/// A `Config` request with a two-byte payload.
fn config() -> Vec<u8> {
    cat(&[req(2, 2), b"{}".to_vec()])
}

/// A `State` request with a two-byte payload.
fn state() -> Vec<u8> {
    cat(&[req(3, 2), b"{}".to_vec()])
}

#[test]
fn well_formed_raw_stream_is_served() {
    let o = feed(&cat(&[
        start(),
        config(),
        memory_req(&[(100, 4), (0, 2)], 6),
        state(),
        req(5, 0),
    ]));
    let s = o.result.unwrap();
    assert_eq!(
        (s.requests, s.memory_requests, s.ranges, s.bytes),
        (5, 1, 2, 6)
    );
    assert_eq!((s.version, s.extensions), (0, Extensions::NONE));
    assert_eq!(o.responses, [Response::ok(); 5]);
    let mut want = initial_memory();
    want[100..104].copy_from_slice(&[1, 32, 63, 94]);
    want[0..2].copy_from_slice(&[125, 156]);
    assert!(o.memory == want);
}

#[test]
fn unknown_command() {
    refused(
        &cat(&[start(), req(10, 0)]),
        1,
        MigrationError::UnknownCommand { value: 10 },
    );
    refused(
        &cat(&[start(), req(0, 0)]),
        1,
        MigrationError::UnknownCommand { value: 0 },
    );
    refused(
        &req(0xffff, 32),
        0,
        MigrationError::UnknownCommand { value: 0xffff },
    );
}

#[test]
fn table_length_not_a_multiple_of_16() {
    for len in [1u64, 8, 15, 24, 33] {
        let mut input = cat(&[start(), config(), req(4, len)]);
        input.extend(vec![0u8; len as usize]);
        input.extend(vec![0xabu8; 64]);
        refused(&input, 2, MigrationError::BadTableLength { len });
    }
}

#[test]
fn range_outside_memory() {
    let m = MEM as u64;
    // The first range is valid and its contents follow: the whole table is
    // checked before any of them is written.
    refused(
        &cat(&[
            start(),
            config(),
            memory_req(&[(0, 4096), (m - 10, 11)], 4096 + 11),
        ]),
        2,
        MigrationError::RangeOutsideMemory {
            index: 1,
            gpa: m - 10,
            length: 11,
            memory_size: m,
        },
    );
    refused(
        &cat(&[
            start(),
            config(),
            memory_req(&[(0, 0), (0, 1), (m + 1, 0)], 1),
        ]),
        2,
        MigrationError::RangeOutsideMemory {
            index: 2,
            gpa: m + 1,
            length: 0,
            memory_size: m,
        },
    );
    // After an accepted round.
    let o = feed(&cat(&[
        start(),
        config(),
        memory_req(&[(0, 8)], 8),
        memory_req(&[(m, 1)], 1),
    ]));
    assert_eq!(
        o.result,
        Err(MigrationError::RangeOutsideMemory {
            index: 0,
            gpa: m,
            length: 1,
            memory_size: m
        })
    );
    assert_eq!(
        o.responses,
        [
            Response::ok(),
            Response::ok(),
            Response::ok(),
            Response::error()
        ]
    );
    assert!(o.memory[8..] == initial_memory()[8..]);
    // Exactly to the end is inside.
    let o = feed(&cat(&[
        start(),
        config(),
        memory_req(&[(m - 3, 3), (m, 0)], 3),
        state(),
        req(5, 0),
    ]));
    assert_eq!(o.result.unwrap().bytes, 3);
}

#[test]
fn range_overflow() {
    refused(
        &cat(&[
            start(),
            config(),
            memory_req(&[(0, 16), (u64::MAX - 5, 10)], 16),
        ]),
        2,
        MigrationError::RangeOverflow { index: 1 },
    );
    refused(
        &cat(&[start(), config(), memory_req(&[(1, u64::MAX)], 0)]),
        2,
        MigrationError::RangeOverflow { index: 0 },
    );
}

#[test]
fn truncated_header() {
    let mut input = start();
    input.extend_from_slice(&req(4, 16)[..10]);
    refused(
        &input,
        1,
        MigrationError::Truncated {
            what: "request header",
            expected: 16,
            got: 10,
        },
    );
    // A clean end between requests, without Complete.
    refused(
        &start(),
        1,
        MigrationError::Truncated {
            what: "request header",
            expected: 16,
            got: 0,
        },
    );
}

#[test]
fn truncated_table() {
    let mut input = cat(&[start(), config(), memory_req(&[(0, 4), (8, 4)], 8)]);
    input.truncate(16 + 18 + 16 + 20);
    refused(
        &input,
        2,
        MigrationError::Truncated {
            what: "memory table",
            expected: 32,
            got: 20,
        },
    );
    // A large claimed table (within the cap) that never comes.
    let mut input = cat(&[start(), config(), req(4, 1 << 30)]);
    input.extend(entries(&[(0, 1), (1, 1)]));
    refused_with(
        &input,
        Some(1 << 30),
        2,
        MigrationError::Truncated {
            what: "memory table",
            expected: 1 << 30,
            got: 32,
        },
    );
}

/// A stream cut in a request's contents: the ranges before the cut (and the
/// start of the one it hit) are written, nothing else.
#[test]
fn truncated_contents() {
    let mem = memory_req(&[(0, 4096), (8192, 4096)], 4096 + 100);
    let contents = mem[16 + 32..].to_vec();
    let o = feed(&cat(&[start(), config(), mem]));
    assert_eq!(
        o.result,
        Err(MigrationError::Truncated {
            what: "memory contents",
            expected: 4096,
            got: 100,
        })
    );
    assert_eq!(
        o.responses,
        [Response::ok(), Response::ok(), Response::error()]
    );
    let mut want = initial_memory();
    want[..4096].copy_from_slice(&contents[..4096]);
    want[8192..8292].copy_from_slice(&contents[4096..]);
    assert!(o.memory == want);
}

#[test]
fn huge_table_length() {
    let cap = Receiver::default_max_table_bytes(MEM as u64);
    assert_eq!(cap, (MEM as u64 / 4096 + 1) * 16);
    assert_eq!(Receiver::default_max_table_bytes(u64::MAX), MAX_TABLE_BYTES);
    for len in [cap + 16, 1 << 40, u64::MAX - 15] {
        refused(
            &cat(&[start(), config(), req(4, len), vec![0; 64]]),
            2,
            MigrationError::TableTooLarge { len, max: cap },
        );
    }
    // At the cap is accepted.
    let ranges: Vec<(u64, u64)> = (0..cap / 16).map(|i| (i, 1)).collect();
    let o = feed(&cat(&[
        start(),
        config(),
        memory_req(&ranges, ranges.len()),
        state(),
        req(5, 0),
    ]));
    assert_eq!(o.result.unwrap().ranges, cap / 16);
    // A lowered cap.
    refused_with(
        &cat(&[start(), config(), memory_req(&[(0, 1), (1, 1)], 2)]),
        Some(16),
        2,
        MigrationError::TableTooLarge { len: 32, max: 16 },
    );
}

#[test]
fn payload_lengths_that_do_not_fit_the_command() {
    let cases = [
        (Command::Start, 4, 0),
        (Command::Complete, 1, 0),
        (Command::CompletePaused, 3, 0),
        (Command::Abandon, 16, 0),
        (Command::PageHashes, 7, 8),
        (Command::PageHashes, 0, 8),
    ];
    for (command, length, expected) in cases {
        let pre = match command {
            Command::Start => vec![],
            Command::Complete | Command::CompletePaused => cat(&[start(), config(), state()]),
            _ => cat(&[start_sk(), config()]),
        };
        let mut input = cat(&[pre.clone(), req(command.value(), length)]);
        input.extend(vec![0u8; length as usize]);
        refused(
            &input,
            pre.len() / 16,
            MigrationError::UnexpectedPayload {
                command,
                length,
                expected,
            },
        );
    }
}

#[test]
fn requests_before_start_and_unsupported_commands() {
    refused(
        &memory_req(&[(0, 8)], 8),
        0,
        MigrationError::NotStarted {
            command: Command::Memory,
        },
    );
    refused(
        &req(5, 0),
        0,
        MigrationError::NotStarted {
            command: Command::Complete,
        },
    );
    refused(
        &config(),
        0,
        MigrationError::NotStarted {
            command: Command::Config,
        },
    );
    let mut ph = req(0x5348, 8);
    ph.extend_from_slice(&4096u64.to_le_bytes());
    refused(
        &ph,
        0,
        MigrationError::NotStarted {
            command: Command::PageHashes,
        },
    );
    // Known by name, not served: refused at any point.
    for command in [Command::MemoryFd, Command::PageFault] {
        for pre in [vec![], start(), cat(&[start(), config()])] {
            refused(
                &cat(&[pre.clone(), req(command.value(), 16), vec![0; 16]]),
                pre.len() / 16,
                MigrationError::Unsupported { command },
            );
        }
    }
}

/// Cloud Hypervisor's order, as its receiver state machine enforces it:
/// Memory, State and Complete before Config; Complete before State; Memory
/// after State; a second Start or Config.
#[test]
fn requests_out_of_order() {
    use ReceiveState::{Configured, Started, StateReceived};
    let cases: Vec<(Vec<u8>, Vec<u8>, Command, ReceiveState)> = vec![
        (start(), memory_req(&[(0, 8)], 8), Command::Memory, Started),
        (start(), state(), Command::State, Started),
        (start(), req(5, 0), Command::Complete, Started),
        (start(), req(8, 0), Command::CompletePaused, Started),
        (start(), start(), Command::Start, Started),
        (
            cat(&[start(), config()]),
            config(),
            Command::Config,
            Configured,
        ),
        (
            cat(&[start(), config()]),
            req(5, 0),
            Command::Complete,
            Configured,
        ),
        (
            cat(&[start(), config()]),
            start(),
            Command::Start,
            Configured,
        ),
        (
            cat(&[start(), config(), state()]),
            memory_req(&[(0, 8)], 8),
            Command::Memory,
            StateReceived,
        ),
        (
            cat(&[start(), config(), state()]),
            state(),
            Command::State,
            StateReceived,
        ),
        (
            cat(&[start_sk()]),
            cat(&[req(0x5348, 8), 4096u64.to_le_bytes().to_vec()]),
            Command::PageHashes,
            Started,
        ),
    ];
    for (pre, bad, command, state) in cases {
        refused(
            &cat(&[pre.clone(), bad]),
            pre.len() / 16,
            MigrationError::OutOfOrder { command, state },
        );
    }
}

/// Cloud Hypervisor's receiver refuses a `Start` whose version it does not
/// support (its `sender_protocol_version`); the bytes after the version are
/// ignored (a plain receiver) or carry spacekit's offer.
#[test]
fn start_version_is_checked() {
    for version in [1u16, 2, 0x100, 0xffff] {
        let mut s = start();
        s[2..4].copy_from_slice(&version.to_le_bytes());
        refused(&s, 0, MigrationError::UnsupportedVersion { version });
    }
    // Version 0 with junk in the bytes Cloud Hypervisor ignores.
    let mut s = start();
    s[4..8].copy_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd]);
    let o = feed(&cat(&[s, config(), state(), req(8, 0)]));
    let summary = o.result.unwrap();
    assert_eq!(summary.extensions, Extensions::NONE);
    assert!(summary.paused);
    assert_eq!(o.responses, [Response::ok(); 4]);
}

/// Negotiation: a receiver answers an offer with the extensions it accepts
/// in the padding, a plain `Start` with zero padding; an extension request
/// that was not negotiated is refused.
#[test]
fn extensions_are_negotiated() {
    let mut ph = req(0x5348, 8);
    ph.extend_from_slice(&4096u64.to_le_bytes());
    // Offered and accepted.
    let (mut tx, mut rx) = UnixStream::pair().unwrap();
    let dest = thread::spawn(move || {
        let mut memory = initial_memory();
        Receiver::new(&mut memory).serve(&mut rx)
    });
    tx.write_all(&cat(&[
        start_sk(),
        config(),
        ph.clone(),
        state(),
        req(5, 0),
    ]))
    .unwrap();
    let summary = dest.join().unwrap().unwrap();
    assert_eq!(summary.extensions, Extensions::PAGE_HASHES);
    assert_eq!(summary.page_hash_requests, 1);
    let mut first = [0u8; 16];
    tx.read_exact(&mut first).unwrap();
    assert_eq!(first, sk_ok().to_bytes());
    // Not offered: the answer is Cloud Hypervisor's, and the request is refused.
    refused(
        &cat(&[start(), config(), ph.clone()]),
        2,
        MigrationError::NotNegotiated {
            command: Command::PageHashes,
        },
    );
    let o = feed(&cat(&[start(), config()]));
    assert_eq!(o.responses[..2], [Response::ok(), Response::ok()]);
    // Offered to a receiver that accepts none: zero padding, refused.
    let (mut tx, mut rx) = UnixStream::pair().unwrap();
    let dest = thread::spawn(move || {
        let mut memory = initial_memory();
        Receiver::new(&mut memory)
            .with_extensions(Extensions::NONE)
            .serve(&mut rx)
    });
    tx.write_all(&cat(&[start_sk(), config(), ph])).unwrap();
    tx.shutdown(Shutdown::Write).unwrap();
    assert_eq!(
        dest.join().unwrap(),
        Err(MigrationError::NotNegotiated {
            command: Command::PageHashes
        })
    );
    let mut out = Vec::new();
    tx.read_to_end(&mut out).unwrap();
    assert_eq!(
        out,
        responses(&[Response::ok(), Response::ok(), Response::error()])
    );
    // A spacekit sender against that receiver: nothing negotiated, and the
    // page check refused before a byte is written.
    let (mut tx, dest) = {
        let (tx, mut rx) = UnixStream::pair().unwrap();
        let h = thread::spawn(move || {
            let mut memory = vec![0u8; 4096];
            Receiver::new(&mut memory)
                .with_extensions(Extensions::NONE)
                .serve(&mut rx)
        });
        (tx, h)
    };
    let mut sender = Sender::new();
    sender.start(&mut tx).unwrap();
    assert_eq!(sender.extensions(), Extensions::NONE);
    sender.send_config(&mut tx, b"{}").unwrap();
    assert_eq!(
        sender.page_hashes(&mut tx, 4096),
        Err(MigrationError::NotNegotiated {
            command: Command::PageHashes
        })
    );
    sender.send_state(&mut tx, b"{}").unwrap();
    sender.complete(&mut tx).unwrap();
    assert_eq!(dest.join().unwrap().unwrap().page_hash_requests, 0);
}

/// `Config` and `State` payloads reach the caller's handler, which can
/// refuse them; an oversized one is refused before it is read.
#[test]
fn config_and_state_are_handed_to_the_caller() {
    let (mut tx, mut rx) = UnixStream::pair().unwrap();
    let dest = thread::spawn(move || {
        let mut memory = vec![0u8; 8192];
        let mut seen = Vec::new();
        let mut r = Receiver::new(&mut memory);
        let res = r.serve_with(&mut rx, |command, payload| {
            seen.push((command, payload.to_vec()));
            Ok(())
        });
        let kept = (
            r.vm_config().map(<[u8]>::to_vec),
            r.vm_state().map(<[u8]>::to_vec),
        );
        (res, seen, kept)
    });
    let mut sender = Sender::new();
    sender.start(&mut tx).unwrap();
    sender.send_config(&mut tx, b"{\"cpus\":2}").unwrap();
    sender
        .send_memory(&mut tx, &table(&[(0, 8192)]), &vec![9u8; 8192])
        .unwrap();
    let big_state = vec![b's'; 300_000];
    sender.send_state(&mut tx, &big_state).unwrap();
    sender.complete(&mut tx).unwrap();
    let (res, seen, kept) = dest.join().unwrap();
    let summary = res.unwrap();
    assert_eq!((summary.config_bytes, summary.state_bytes), (10, 300_000));
    assert_eq!(
        seen,
        [
            (Command::Config, b"{\"cpus\":2}".to_vec()),
            (Command::State, big_state.clone())
        ]
    );
    assert_eq!(kept, (Some(b"{\"cpus\":2}".to_vec()), Some(big_state)));

    // The handler refuses the configuration: the sender reads the error.
    let (mut tx, mut rx) = UnixStream::pair().unwrap();
    let dest = thread::spawn(move || {
        let mut memory = vec![0u8; 4096];
        let mut r = Receiver::new(&mut memory);
        let res = r.serve_with(&mut rx, |_, _| Err("wrong CPU model".to_string()));
        (res, r.vm_config().is_none())
    });
    let mut sender = Sender::new();
    sender.start(&mut tx).unwrap();
    assert_eq!(
        sender.send_config(&mut tx, b"{}"),
        Err(MigrationError::Rejected {
            status: Status::Error,
            command: Command::Config
        })
    );
    assert_eq!(
        dest.join().unwrap(),
        (
            Err(MigrationError::PayloadRefused {
                command: Command::Config,
                reason: "wrong CPU model".into()
            }),
            true
        )
    );

    // A payload over the cap.
    let (mut tx, mut rx) = UnixStream::pair().unwrap();
    let dest = thread::spawn(move || {
        let mut memory = vec![0u8; 4096];
        Receiver::new(&mut memory)
            .with_max_payload_bytes(100)
            .serve(&mut rx)
    });
    let mut sender = Sender::new();
    sender.start(&mut tx).unwrap();
    assert_eq!(
        sender.send_config(&mut tx, &[b'x'; 101]),
        Err(MigrationError::Rejected {
            status: Status::Error,
            command: Command::Config
        })
    );
    assert_eq!(
        dest.join().unwrap(),
        Err(MigrationError::PayloadTooLarge {
            command: Command::Config,
            len: 101,
            max: 100
        })
    );
}

/// A refused request's payload is read before the error response, so a
/// peer that writes its whole request (several MiB, more than a socket
/// buffer holds) and then reads the answer gets the error, not a broken
/// pipe or a reset connection.
#[test]
fn refused_payloads_are_drained_before_the_error() {
    const BIG: usize = 8 << 20;
    let cases: Vec<(Vec<u8>, u16, MigrationError)> = vec![
        (
            start(),
            7,
            MigrationError::Unsupported {
                command: Command::MemoryFd,
            },
        ),
        (
            start(),
            9,
            MigrationError::Unsupported {
                command: Command::PageFault,
            },
        ),
        (
            start(),
            0x1234,
            MigrationError::UnknownCommand { value: 0x1234 },
        ),
        (
            start(),
            4,
            MigrationError::OutOfOrder {
                command: Command::Memory,
                state: ReceiveState::Started,
            },
        ),
    ];
    for (pre, command, want) in cases {
        let (mut tx, mut rx) = UnixStream::pair().unwrap();
        let dest = thread::spawn(move || {
            let mut memory = vec![0u8; 4096];
            Receiver::new(&mut memory).serve(&mut rx)
        });
        tx.write_all(&pre).unwrap();
        let mut ok = [0u8; 16];
        tx.read_exact(&mut ok).unwrap();
        // The whole request, as a peer writes it before reading the answer.
        let mut request = req(command, BIG as u64);
        request.extend(vec![0x5a; BIG]);
        tx.write_all(&request)
            .unwrap_or_else(|e| panic!("command {command:#x}: the receiver hung up early: {e}"));
        let mut answer = [0u8; 16];
        tx.read_exact(&mut answer).unwrap();
        assert_eq!(Response::from_bytes(&answer).unwrap(), Response::error());
        assert_eq!(dest.join().unwrap(), Err(want));
    }
    // Memory refused after its table: the contents are drained too.
    let (mut tx, mut rx) = UnixStream::pair().unwrap();
    let dest = thread::spawn(move || {
        let mut memory = vec![0u8; 4096];
        Receiver::new(&mut memory).serve(&mut rx)
    });
    tx.write_all(&cat(&[start(), config()])).unwrap();
    tx.write_all(&memory_req(&[(0, BIG as u64)], BIG)).unwrap();
    let mut answers = [0u8; 48];
    tx.read_exact(&mut answers).unwrap();
    assert_eq!(
        answers[32..],
        Response::error().to_bytes(),
        "the last answer is the error"
    );
    assert!(matches!(
        dest.join().unwrap(),
        Err(MigrationError::RangeOutsideMemory { .. })
    ));
}

#[test]
fn page_hashes_raw() {
    let pre = || cat(&[start_sk(), config()]);
    // Page size 0.
    let mut input = cat(&[pre(), req(0x5348, 8)]);
    input.extend_from_slice(&0u64.to_le_bytes());
    refused(&input, 2, MigrationError::BadPageSize { page_size: 0 });
    // Page size cut short.
    let mut input = cat(&[pre(), req(0x5348, 8)]);
    input.extend_from_slice(&[0, 16, 0]);
    refused(
        &input,
        2,
        MigrationError::Truncated {
            what: "page size",
            expected: 8,
            got: 3,
        },
    );
    // A valid request: Ok with 4 bytes per page, then the hashes; also
    // after State.
    let mut ph = req(0x5348, 8);
    ph.extend_from_slice(&16384u64.to_le_bytes());
    let input = cat(&[pre(), ph.clone(), state(), ph, req(5, 0)]);
    let (mut tx, mut rx) = UnixStream::pair().unwrap();
    let dest = thread::spawn(move || {
        let mut memory = initial_memory();
        Receiver::new(&mut memory).serve(&mut rx)
    });
    tx.write_all(&input).unwrap();
    let summary = dest.join().unwrap().unwrap();
    assert_eq!(summary.page_hash_requests, 2);
    let mut out = Vec::new();
    tx.read_to_end(&mut out).unwrap();
    let want = hash_pages(&initial_memory(), 16384).unwrap();
    assert_eq!(want.len(), 4);
    let hashes: Vec<u8> = want.iter().flat_map(|h| h.to_le_bytes()).collect();
    let mut expected = responses(&[sk_ok(), Response::ok(), Response::new(Status::Ok, 16)]);
    expected.extend(&hashes);
    expected.extend(responses(&[Response::ok(), Response::new(Status::Ok, 16)]));
    expected.extend(&hashes);
    expected.extend(Response::ok().to_bytes());
    assert_eq!(out, expected);
    for (i, h) in want.iter().enumerate() {
        let page = &initial_memory()[i * 16384..(i + 1) * 16384];
        assert_eq!(*h, spacekit::crc32c::checksum(page));
    }
}

#[test]
fn errors_display() {
    let e = MigrationError::RangeOutsideMemory {
        index: 1,
        gpa: 0x1000,
        length: 0x20,
        memory_size: 0x1000,
    };
    assert_eq!(
        e.to_string(),
        "memory range 1 (0x1000+0x20) lies outside guest memory of 0x1000 bytes"
    );
    let boxed: Box<dyn std::error::Error> = Box::new(MigrationError::Abandoned);
    assert_eq!(boxed.to_string(), "the sender abandoned the migration");
}

/// `receive_on_unix_socket` replaces a stale socket at its path, but never
/// another file: a regular file there is refused and left as it was.
#[test]
fn unix_receiver_replaces_only_a_stale_socket() {
    use spacekit::migration::receive_on_unix_socket;
    use std::os::unix::net::UnixListener;
    let dir = std::env::temp_dir().join(format!("spacekit-listen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A regular file.
    let file = dir.join("precious.txt");
    std::fs::write(&file, b"keep me").unwrap();
    let path = file.clone();
    let refusal = thread::spawn(move || receive_on_unix_socket(&path, 4096));
    let t = std::time::Instant::now();
    while !refusal.is_finished() && t.elapsed() < std::time::Duration::from_secs(5) {
        thread::sleep(std::time::Duration::from_millis(5));
    }
    if !refusal.is_finished() {
        // It replaced the file with a socket and waits: let it go, then fail.
        drop(UnixStream::connect(&file));
        let _ = refusal.join();
        panic!("the receiver replaced the regular file with a socket");
    }
    match refusal.join().unwrap() {
        Err(MigrationError::Io { kind, message }) => {
            assert_eq!(kind, io::ErrorKind::AlreadyExists, "{message}");
            assert!(message.contains("not a socket"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
    // A directory.
    let sub = dir.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    assert!(receive_on_unix_socket(&sub, 4096).is_err());
    assert!(sub.is_dir());
    // A stale socket (its listener gone) is replaced, and served.
    let sock = dir.join("rx.sock");
    drop(UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let path = sock.clone();
    let dest = thread::spawn(move || receive_on_unix_socket(&path, 8192));
    let mut tx = loop {
        // Until the receiver has replaced the stale socket and listens.
        if let Ok(s) = UnixStream::connect(&sock) {
            break s;
        }
        thread::sleep(std::time::Duration::from_millis(5));
    };
    let src = vec![0x42u8; 8192];
    let mut sender = Sender::new();
    sender.start(&mut tx).unwrap();
    sender.send_config(&mut tx, b"{}").unwrap();
    sender
        .send_memory(&mut tx, &table(&[(0, 8192)]), &src)
        .unwrap();
    sender.send_state(&mut tx, b"{}").unwrap();
    sender.complete(&mut tx).unwrap();
    let (summary, memory) = dest.join().unwrap().unwrap();
    assert_eq!(summary.bytes, 8192);
    assert!(memory == src);
    let _ = std::fs::remove_dir_all(&dir);
}
