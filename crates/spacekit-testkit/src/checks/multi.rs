//! Target `migration_multi`: spacekit's zero-page stream and extra memory
//! connections.
//!
//! * **Sparse requests against a model**: a session that negotiates zero
//!   pages, then fuzzed `Memory` and `SparseMemory` requests (tables with
//!   any ranges, masks with any bits, contents cut anywhere), then `State`
//!   and `Complete`. A model of the sparse format written from its
//!   documentation (pages of 4096 bytes from each range's start, groups of
//!   64 pages across ranges, a `u64` zero mask per group, bits past the
//!   group refused) predicts the answers, the memory, and the summary —
//!   which, also after a failure, counts exactly the requests that arrived
//!   whole.
//! * **The sender's sparse form**: fuzzed memory (with zero pages) and a
//!   fuzzed table go through `Sender::send_memory` into a receiver; the
//!   ranges arrive, and the zero bytes reported are the table's all-zero
//!   pages.
//! * **Extra connections**: up to four in-memory extra connections carry
//!   fuzzed memory requests (each in its own slice of memory, now and then
//!   a hostile one: a bad role, a non-memory command, a cut request) while
//!   the main connection waits between `Config` and `State`. The migration
//!   succeeds exactly when every extra connection was well formed, memory
//!   is then what the requests wrote, and a failed migration's summary
//!   counts only whole requests.

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use spacekit::dirty::{MemoryRange, MemoryRangeTable};
use spacekit::migration::{Extensions, Listener, MigrationError, Receiver, Sender};

use super::input::Input;
use super::wire::{response, Duplex};

const PAGE: u64 = 4096;

fn req(out: &mut Vec<u8>, command: u16, headers: [u8; 6], length: u64) {
    out.extend_from_slice(&command.to_le_bytes());
    out.extend_from_slice(&headers);
    out.extend_from_slice(&length.to_le_bytes());
}

fn start_and_config(out: &mut Vec<u8>) {
    req(out, 1, [0, 0, b'S', b'K', 2, 0], 0);
    req(out, 2, [0; 6], 2);
    out.extend_from_slice(b"{}");
}

fn end(out: &mut Vec<u8>) {
    req(out, 3, [0; 6], 0);
    req(out, 5, [0; 6], 0);
}

/// One fuzzed memory request with ranges inside `[lo, hi)` (now and then
/// anywhere): its bytes (now and then cut short), and whether a range
/// strays outside `[lo, hi)`.
fn memory_request(input: &mut Input, lo: u64, hi: u64, sparse_ok: bool) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let sparse = sparse_ok && input.bool();
    let n = input.below(4);
    let mut ranges = Vec::new();
    let mut stray = false;
    for _ in 0..n {
        let (gpa, len) = if input.below(32) == 0 {
            (input.below(hi + 2 * PAGE), input.below(3 * PAGE))
        } else {
            let gpa = lo + input.below((hi - lo).max(1));
            (gpa, input.below((hi - gpa).min(300 * 1024) + 1))
        };
        stray |= len > 0 && (gpa < lo || gpa.saturating_add(len) > hi);
        ranges.push((gpa, len));
    }
    req(&mut out, if sparse { 0x535a } else { 4 }, [0; 6], n * 16);
    for &(g, l) in &ranges {
        out.extend_from_slice(&g.to_le_bytes());
        out.extend_from_slice(&l.to_le_bytes());
    }
    let fill = input.u8();
    let pages: u64 = ranges.iter().map(|r| r.1.div_ceil(PAGE)).sum();
    let (mut page_no, mut mask) = (0u64, 0u64);
    for &(_, l) in &ranges {
        let mut at = 0;
        while at < l {
            let k = (l - at).min(PAGE);
            if sparse && page_no.is_multiple_of(64) {
                let in_group = (pages - page_no).min(64);
                mask = input.u64();
                if input.below(16) != 0 && in_group < 64 {
                    mask &= (1u64 << in_group) - 1;
                }
                out.extend_from_slice(&mask.to_le_bytes());
            }
            if !sparse || mask & (1 << (page_no % 64)) == 0 {
                out.extend((0..k).map(|i| fill.wrapping_add(i as u8)));
            }
            at += k;
            page_no += 1;
        }
    }
    if input.below(24) == 0 {
        let cut = 1 + input.below(out.len() as u64) as usize;
        out.truncate(cut);
    }
    (out, stray)
}

/// What the model says a request does: `Some((ranges, bytes, zero_bytes,
/// consumed))` when it is whole and valid (memory written), `None` when it
/// is refused (memory possibly partly written: the model writes what it
/// can, as the receiver does).
fn model_request(s: &[u8], mem: &mut [u8], sparse_ok: bool) -> Option<(u64, u64, u64, usize)> {
    if s.len() < 16 {
        return None;
    }
    let cmd = u16::from_le_bytes([s[0], s[1]]);
    let len = u64::from_le_bytes(s[8..16].try_into().expect("8"));
    let sparse = match cmd {
        4 => false,
        0x535a if sparse_ok => true,
        _ => return None,
    };
    let max_table = Receiver::default_max_table_bytes(mem.len() as u64);
    if !len.is_multiple_of(16) || len > max_table || ((s.len() - 16) as u64) < len {
        return None;
    }
    let mut pos = 16 + len as usize;
    let ranges: Vec<(u64, u64)> = s[16..pos]
        .chunks_exact(16)
        .map(|c| {
            (
                u64::from_le_bytes(c[..8].try_into().expect("8")),
                u64::from_le_bytes(c[8..].try_into().expect("8")),
            )
        })
        .collect();
    if ranges
        .iter()
        .any(|&(g, l)| g.checked_add(l).is_none_or(|e| e > mem.len() as u64))
    {
        return None;
    }
    let (mut bytes, mut zero) = (0, 0);
    let pages: u64 = ranges.iter().map(|r| r.1.div_ceil(PAGE)).sum();
    let mut p = 0u64;
    let mut mask = 0u64;
    for &(g, l) in &ranges {
        let mut at = 0;
        while at < l {
            let k = (l - at).min(PAGE) as usize;
            let dst = &mut mem[(g + at) as usize..(g + at) as usize + k];
            if sparse {
                if p.is_multiple_of(64) {
                    if s.len() < pos + 8 {
                        return None;
                    }
                    mask = u64::from_le_bytes(s[pos..pos + 8].try_into().expect("8"));
                    pos += 8;
                    let in_group = (pages - p).min(64);
                    if in_group < 64 && mask >> in_group != 0 {
                        return None;
                    }
                }
                if mask & (1 << (p % 64)) != 0 {
                    dst.fill(0);
                    zero += k as u64;
                    at += k as u64;
                    p += 1;
                    continue;
                }
            }
            let n = k.min(s.len() - pos);
            dst[..n].copy_from_slice(&s[pos..pos + n]);
            pos += n;
            if n < k {
                return None;
            }
            at += k as u64;
            p += 1;
        }
        bytes += l;
    }
    Some((ranges.len() as u64, bytes, zero, pos))
}

/// Sparse and plain requests on the main connection, against the model.
fn check_main(input: &mut Input) {
    let mem_len = (1 + input.below(96)) * 1024;
    let fill = input.u8();
    let mut stream = Vec::new();
    start_and_config(&mut stream);
    let mut want = vec![fill; mem_len as usize];
    let mut answers = Vec::new();
    let mut ok = response(1, 0);
    answers.extend_from_slice(&{
        ok[2..4].copy_from_slice(b"SK");
        ok[4..6].copy_from_slice(&2u16.to_le_bytes());
        ok
    });
    answers.extend_from_slice(&response(1, 0));
    let (mut requests, mut bytes, mut zero_bytes) = (0, 0, 0);
    let mut failed = false;
    let n = input.below(6);
    for _ in 0..n {
        let (r, _) = memory_request(input, 0, mem_len, true);
        stream.extend_from_slice(&r);
        match model_request(&r, &mut want, true) {
            Some((_, b, z, used)) if used == r.len() => {
                requests += 1;
                bytes += b;
                zero_bytes += z;
                answers.extend_from_slice(&response(1, 0));
            }
            _ => {
                failed = true;
                answers.extend_from_slice(&response(2, 0));
                break;
            }
        }
    }
    if !failed {
        end(&mut stream);
        answers.extend_from_slice(&response(1, 0));
        answers.extend_from_slice(&response(1, 0));
    }
    let mut memory = vec![fill; mem_len as usize];
    let mut rx = Receiver::new(&mut memory);
    let mut duplex = Duplex {
        input: &stream,
        output: Vec::new(),
    };
    let got = rx.serve(&mut duplex);
    let summary = rx.summary();
    assert_eq!(got.is_ok(), !failed, "{got:?}");
    assert_eq!(
        (summary.memory_requests, summary.bytes, summary.zero_bytes),
        (requests, bytes, zero_bytes),
        "only whole requests are counted"
    );
    assert_eq!(duplex.output, answers, "the receiver's answers");
    assert!(memory == want, "memory differs from the model");
}

/// The sender's sparse form, through a receiver.
fn check_sender(input: &mut Input) {
    let pages = 1 + input.below(40);
    let mut source = vec![0u8; (pages * PAGE) as usize];
    for p in source.chunks_mut(PAGE as usize) {
        match input.below(4) {
            0 => {}
            1 => {
                let at = input.below(PAGE) as usize;
                p[at] = input.u8() | 1;
            }
            _ => p.fill(input.u8()),
        }
    }
    let mut table = MemoryRangeTable::new();
    for _ in 0..input.below(5) {
        let gpa = input.below(pages * PAGE);
        let length = input.below(pages * PAGE - gpa + 1);
        table.push(MemoryRange { gpa, length });
    }
    let sparse = input.bool();
    let mut answer = response(1, 0);
    if sparse {
        answer[2..4].copy_from_slice(b"SK");
        answer[4..6].copy_from_slice(&2u16.to_le_bytes());
    }
    let answers = [answer, response(1, 0), response(1, 0)].concat();
    let mut out = Duplex {
        input: &answers,
        output: Vec::new(),
    };
    let mut sender =
        Sender::with_buffer_size(input.below(70_000) as usize).with_extensions(Extensions::ALL);
    sender.start(&mut out).expect("start");
    sender.send_config(&mut out, b"{}").expect("config");
    let st = sender
        .send_memory(&mut out, &table, &source)
        .expect("memory");
    let zero: u64 = table
        .ranges()
        .iter()
        .flat_map(|r| {
            let s = &source;
            (0..r.length.div_ceil(PAGE)).map(move |i| {
                let a = (r.gpa + i * PAGE) as usize;
                let b = (r.gpa + ((i + 1) * PAGE).min(r.length)) as usize;
                if s[a..b].iter().all(|&x| x == 0) {
                    (b - a) as u64
                } else {
                    0
                }
            })
        })
        .sum();
    assert_eq!(st.zero_bytes, if sparse { zero } else { 0 }, "zero bytes");
    assert_eq!(st.payload_bytes + st.zero_bytes, st.bytes);
    let mut stream = out.output;
    end(&mut stream);
    let mut memory = vec![0xeeu8; source.len()];
    let mut d = Duplex {
        input: &stream,
        output: Vec::new(),
    };
    let got = Receiver::new(&mut memory)
        .serve(&mut d)
        .expect("the sender's stream");
    assert_eq!((got.bytes, got.zero_bytes), (st.bytes, st.zero_bytes));
    for r in table.ranges() {
        let (a, b) = (r.gpa as usize, (r.gpa + r.length) as usize);
        // Overlapping ranges: the later one wins, with the same bytes.
        assert!(memory[a..b] == source[a..b], "range {a}..{b}");
    }
}

/// An in-memory connection: reads its bytes (optionally only once `gate`
/// is open, timing out meanwhile as a socket with a read timeout does),
/// counts its answers, and tells `done` when dropped.
struct Conn {
    input: Vec<u8>,
    pos: usize,
    gate: Option<Arc<AtomicBool>>,
    answers: Arc<AtomicUsize>,
    done: Option<Arc<AtomicUsize>>,
    /// The main connection: `wait` extra connections must be done before
    /// the bytes from `barrier` on are read.
    barrier: Option<(usize, usize)>,
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let blocked = self
            .gate
            .as_ref()
            .is_some_and(|g| !g.load(Ordering::SeqCst))
            || self.barrier.is_some_and(|(at, wait)| {
                self.pos >= at && self.done.as_ref().map_or(0, |d| d.load(Ordering::SeqCst)) < wait
            });
        if blocked {
            std::thread::sleep(Duration::from_micros(200));
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let end = match self.barrier {
            Some((at, _)) if self.pos < at => at,
            _ => self.input.len(),
        };
        let n = buf.len().min(end - self.pos);
        buf[..n].copy_from_slice(&self.input[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.answers.fetch_add(buf.len(), Ordering::SeqCst);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if self.barrier.is_none() {
            if let Some(d) = &self.done {
                d.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

/// Hands out the extra connections, one per call.
struct Conns(Vec<Conn>);

impl Listener for Conns {
    type Stream = Conn;
    fn accept_within(&mut self, wait: Duration) -> io::Result<Option<Conn>> {
        match self.0.pop() {
            Some(c) => Ok(Some(c)),
            None => {
                std::thread::sleep(wait.min(Duration::from_millis(1)));
                Ok(None)
            }
        }
    }
}

/// Extra connections with fuzzed memory requests.
fn check_extra(input: &mut Input) {
    let k = 1 + input.below(4) as usize;
    let mem_len = k as u64 * (1 + input.below(16)) * PAGE;
    let slice = mem_len / k as u64;
    let fill = input.u8();
    let mut want = vec![fill; mem_len as usize];
    let config_acked = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let mut conns = Vec::new();
    let mut all_ok = true;
    // A range outside its connection's slice may overlap another
    // connection's: the order they land in is then not the model's.
    let mut stray = false;
    // Every claimable byte count: each connection's prefix of whole requests.
    let mut prefixes: Vec<Vec<u64>> = Vec::new();
    for i in 0..k as u64 {
        let mut bytes = Vec::new();
        let role: u16 = if input.below(32) == 0 { input.u16() } else { 1 };
        bytes.extend_from_slice(&role.to_le_bytes());
        let mut sums = vec![0u64];
        let mut conn_ok = role == 1;
        for _ in 0..input.below(4) {
            if input.below(32) == 0 {
                let c = match input.u16() {
                    4 | 0x535a => 3,
                    c => c,
                };
                req(&mut bytes, c, [0; 6], 0);
                conn_ok = false;
                break;
            }
            let (r, s) = memory_request(input, i * slice, (i + 1) * slice, true);
            stray |= s;
            bytes.extend_from_slice(&r);
            let mut scratch = want.clone();
            match model_request(&r, &mut scratch, true) {
                Some((_, b, _, used)) if used == r.len() && conn_ok => {
                    want = scratch;
                    sums.push(sums.last().copied().unwrap_or(0) + b);
                }
                _ => {
                    conn_ok = false;
                    break;
                }
            }
        }
        // A role other than memory: the connection is closed, no failure.
        if role != 1 {
            conn_ok = true;
            sums.truncate(1);
        }
        all_ok &= conn_ok;
        prefixes.push(sums);
        conns.push(Conn {
            input: bytes,
            pos: 0,
            gate: Some(config_acked.clone()),
            answers: Arc::new(AtomicUsize::new(0)),
            done: Some(done.clone()),
            barrier: None,
        });
    }
    let mut main_bytes = Vec::new();
    start_and_config(&mut main_bytes);
    let barrier = main_bytes.len();
    end(&mut main_bytes);
    let main_answers = Arc::new(AtomicUsize::new(0));
    let mut main = Conn {
        input: main_bytes,
        pos: 0,
        gate: None,
        answers: main_answers.clone(),
        done: Some(done.clone()),
        barrier: Some((barrier, k)),
    };
    let mut memory = vec![fill; mem_len as usize];
    let mut listener = Conns(conns);
    // The gate opens once Config is answered (the second answer).
    let watcher = {
        let (a, g) = (main_answers.clone(), config_acked.clone());
        std::thread::spawn(move || {
            for _ in 0..20_000 {
                if a.load(Ordering::SeqCst) >= 32 {
                    g.store(true, Ordering::SeqCst);
                    return;
                }
                std::thread::sleep(Duration::from_micros(100));
            }
            g.store(true, Ordering::SeqCst);
        })
    };
    let mut rx = Receiver::new(&mut memory);
    let got = rx.serve_connections(&mut main, &mut listener);
    let summary = rx.summary();
    let _ = watcher.join();
    assert_eq!(got.is_ok(), all_ok, "{got:?}");
    if let Err(e) = &got {
        assert!(
            matches!(e, MigrationError::Connection { .. }),
            "an extra connection's failure: {e:?}"
        );
    }
    // The bytes claimed are a sum of whole-request prefixes, one per
    // connection.
    let mut sums = vec![0u64];
    for p in &prefixes {
        sums = sums
            .iter()
            .flat_map(|s| p.iter().map(move |q| s + q))
            .collect();
    }
    assert!(
        sums.contains(&summary.bytes),
        "claims {} bytes, not whole requests",
        summary.bytes
    );
    if all_ok {
        assert_eq!(
            summary.bytes,
            prefixes.iter().map(|p| p[p.len() - 1]).sum::<u64>()
        );
        assert!(stray || memory == want, "memory differs from the model");
    }
    let _ = Extensions::ALL;
}

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    match input.below(3) {
        0 => check_main(&mut input),
        1 => check_sender(&mut input),
        _ => check_extra(&mut input),
    }
}
