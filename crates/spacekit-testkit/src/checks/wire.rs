//! Target `migration_wire`: Cloud Hypervisor's migration wire format. The
//! request and response headers round-trip; a `Receiver` serves an
//! arbitrary byte stream into guest memory, and a model of the protocol
//! written from its documentation predicts, byte for byte, what it answers,
//! what it writes into memory, which payloads it keeps, and whether it
//! succeeds. (`session.rs` feeds the same model structured sessions.)

use std::io::{self, Read, Write};

use spacekit::crc32c;
use spacekit::migration::{Extensions, Receiver, Request, Response, Status, REQUEST_BYTES};

use super::input::Input;

/// The test's end of the connection: the sender's bytes to read, the
/// receiver's answers collected.
pub struct Duplex<'a> {
    pub input: &'a [u8],
    pub output: Vec<u8>,
}

impl Read for Duplex<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.input.len());
        buf[..n].copy_from_slice(&self.input[..n]);
        self.input = &self.input[n..];
        Ok(n)
    }
}

impl Write for Duplex<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

pub fn response(status: u16, length: u64) -> [u8; 16] {
    let mut r = [0u8; 16];
    r[..2].copy_from_slice(&status.to_le_bytes());
    r[8..].copy_from_slice(&length.to_le_bytes());
    r
}

pub struct Outcome {
    pub ok: bool,
    pub paused: bool,
    pub output: Vec<u8>,
    pub memory_requests: u64,
    pub ranges: u64,
    pub bytes: u64,
    pub config: Option<Vec<u8>>,
    pub state: Option<Vec<u8>>,
    pub extensions: u16,
}

/// The receiver's settings the model follows.
pub struct Params {
    /// The memory table cap.
    pub max_table: u64,
    /// The Config/State payload cap.
    pub max_payload: u64,
    /// The extensions the receiver accepts (bits).
    pub extensions: u16,
    /// The caller's handler refuses a payload whose first byte is this.
    pub refuse_first_byte: Option<u8>,
}

impl Params {
    /// A default receiver over `mem_len` bytes.
    pub fn default_for(mem_len: usize) -> Params {
        Params {
            max_table: Receiver::default_max_table_bytes(mem_len as u64),
            max_payload: spacekit::migration::MAX_PAYLOAD_BYTES,
            extensions: 1,
            refuse_first_byte: None,
        }
    }
}

fn u64_at(s: &[u8]) -> u64 {
    u64::from_le_bytes(s[..8].try_into().expect("8 bytes"))
}

/// The protocol, as the module documentation states it: Cloud Hypervisor's
/// receiver state machine (Established, Started, Configured,
/// StateReceived), its version check, spacekit's negotiated page hashes.
/// A refused request ends with one error answer (what the receiver drains
/// first has no visible effect here).
pub fn model(mut s: &[u8], mem: &mut [u8], p: &Params) -> Outcome {
    let mut out = Outcome {
        ok: false,
        paused: false,
        output: Vec::new(),
        memory_requests: 0,
        ranges: 0,
        bytes: 0,
        config: None,
        state: None,
        extensions: 0,
    };
    let ok = response(1, 0);
    let err = response(2, 0);
    // 0 Established, 1 Started, 2 Configured, 3 StateReceived.
    let mut st = 0;
    loop {
        if s.len() < 16 {
            out.output.extend_from_slice(&err);
            return out;
        }
        let cmd = u16::from_le_bytes([s[0], s[1]]);
        let hdr: [u8; 6] = s[2..8].try_into().expect("6 bytes");
        let len = u64_at(&s[8..16]);
        s = &s[16..];
        let refuse = |mut out: Outcome| {
            out.output.extend_from_slice(&err);
            out
        };
        match (cmd, st) {
            (6, _) => {
                if len != 0 {
                    return refuse(out);
                }
                out.output.extend_from_slice(&ok);
                return out; // Abandoned: an error after the ok.
            }
            (7 | 9, _) => return refuse(out),
            (1, 0) => {
                let version = u16::from_le_bytes([hdr[0], hdr[1]]);
                if len != 0 || version != 0 {
                    return refuse(out);
                }
                let offered = if hdr[2..4] == *b"SK" {
                    u16::from_le_bytes([hdr[4], hdr[5]]) & 1
                } else {
                    0
                };
                let accepted = offered & p.extensions;
                out.extensions = accepted;
                let mut answer = ok;
                if accepted != 0 {
                    answer[2..4].copy_from_slice(b"SK");
                    answer[4..6].copy_from_slice(&accepted.to_le_bytes());
                }
                out.output.extend_from_slice(&answer);
                st = 1;
            }
            (_, 0) => return refuse(out),
            (2, 1) | (3, 2) => {
                if len > p.max_payload || (s.len() as u64) < len {
                    return refuse(out);
                }
                let (payload, rest) = s.split_at(len as usize);
                s = rest;
                if p.refuse_first_byte.is_some() && payload.first() == p.refuse_first_byte.as_ref()
                {
                    return refuse(out);
                }
                if cmd == 2 {
                    out.config = Some(payload.to_vec());
                    st = 2;
                } else {
                    out.state = Some(payload.to_vec());
                    st = 3;
                }
                out.output.extend_from_slice(&ok);
            }
            (4, 2) => {
                if !len.is_multiple_of(16) || len > p.max_table || (s.len() as u64) < len {
                    return refuse(out);
                }
                let (table, rest) = s.split_at(len as usize);
                s = rest;
                let ranges: Vec<(u64, u64)> = table
                    .chunks_exact(16)
                    .map(|c| (u64_at(&c[..8]), u64_at(&c[8..])))
                    .collect();
                if ranges
                    .iter()
                    .any(|&(g, l)| g.checked_add(l).is_none_or(|e| e > mem.len() as u64))
                {
                    return refuse(out);
                }
                for (g, l) in ranges {
                    let n = (l as usize).min(s.len());
                    mem[g as usize..g as usize + n].copy_from_slice(&s[..n]);
                    s = &s[n..];
                    if n < l as usize {
                        return refuse(out);
                    }
                    out.ranges += 1;
                    out.bytes += l;
                }
                out.memory_requests += 1;
                out.output.extend_from_slice(&ok);
            }
            (0x5348, 2 | 3) => {
                if out.extensions & 1 == 0 || len != 8 || s.len() < 8 {
                    return refuse(out);
                }
                let ps = u64_at(s);
                s = &s[8..];
                if ps == 0 {
                    return refuse(out);
                }
                let pages = (mem.len() as u64).div_ceil(ps);
                out.output.extend_from_slice(&response(1, pages * 4));
                let ps = usize::try_from(ps).unwrap_or(usize::MAX);
                for page in mem.chunks(ps) {
                    out.output
                        .extend_from_slice(&crc32c::checksum(page).to_le_bytes());
                }
            }
            (5 | 8, 3) => {
                if len != 0 {
                    return refuse(out);
                }
                out.output.extend_from_slice(&ok);
                out.ok = true;
                out.paused = cmd == 8;
                return out;
            }
            _ => return refuse(out),
        }
    }
}

/// Serves `stream` with a receiver over `memory` set up as `p` says, and
/// checks answers, memory, payloads and the summary against the model.
pub fn check_receiver(stream: &[u8], memory: &mut Vec<u8>, p: &Params, drain_limit: Option<u64>) {
    let mut expect = memory.clone();
    let mut rx = Receiver::new(memory)
        .with_max_table_bytes(p.max_table)
        .with_max_payload_bytes(p.max_payload)
        .with_extensions(Extensions::from_bits(p.extensions));
    if let Some(d) = drain_limit {
        rx = rx.with_drain_limit(d);
    }
    let mut duplex = Duplex {
        input: stream,
        output: Vec::new(),
    };
    let refuse = p.refuse_first_byte;
    let got = rx.serve_with(&mut duplex, |_, payload| match (refuse, payload.first()) {
        (Some(r), Some(f)) if r == *f => Err("refused by the test".into()),
        _ => Ok(()),
    });
    let (config, state) = (
        rx.vm_config().map(<[u8]>::to_vec),
        rx.vm_state().map(<[u8]>::to_vec),
    );
    drop(rx);
    let want = model(stream, &mut expect, p);
    assert_eq!(duplex.output, want.output, "the receiver's answers");
    match got {
        Ok(summary) => {
            assert!(want.ok, "served ok where the model refused");
            assert_eq!(
                (summary.memory_requests, summary.ranges, summary.bytes),
                (want.memory_requests, want.ranges, want.bytes),
                "summary"
            );
            assert_eq!(summary.paused, want.paused, "paused");
            assert_eq!(summary.extensions.bits(), want.extensions, "extensions");
            assert_eq!((config, state), (want.config, want.state), "payloads");
        }
        Err(e) => {
            let _ = e.to_string();
            assert!(!want.ok, "refused a stream the model accepts: {e}");
        }
    }
    assert!(*memory == expect, "guest memory differs from the model");
}

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    // Headers on their own.
    let mut h = [0u8; REQUEST_BYTES];
    h.copy_from_slice(&{
        let mut b = input.bytes(16).to_vec();
        b.resize(16, 0);
        b
    });
    if let Ok(req) = Request::from_bytes(&h) {
        let again = req.to_bytes();
        assert_eq!(again, h, "request bytes, command_headers kept");
        assert_eq!(Request::from_bytes(&again), Ok(req), "request round trip");
    }
    match Response::from_bytes(&h) {
        Ok(resp) => {
            let again = resp.to_bytes();
            assert_eq!(again, h, "response bytes, padding kept");
            assert_eq!(
                Response::from_bytes(&again),
                Ok(resp),
                "response round trip"
            );
        }
        Err(_) => assert!(
            u16::from_le_bytes([h[0], h[1]]) > 2,
            "status {:?} refused",
            &h[..2]
        ),
    }
    let _ = Status::Ok;

    // The receiver against the model.
    let mem_len = input.below(64 * 1024 + 1) as usize;
    let fill = input.u8();
    let max_table = if input.bool() {
        Some(input.below(4096))
    } else {
        None
    };
    let stream = input.rest();
    let mut memory = vec![fill; mem_len];
    let mut p = Params::default_for(mem_len);
    if let Some(m) = max_table {
        p.max_table = m;
    }
    check_receiver(stream, &mut memory, &p, None);
}
