//! Target `migration_wire`: Cloud Hypervisor's migration wire format. The
//! request and response headers round-trip; a `Receiver` serves an
//! arbitrary byte stream into guest memory, and a model of the protocol
//! written from its documentation predicts, byte for byte, what it answers,
//! what it writes into memory, and whether it succeeds.

use std::io::{self, Read, Write};

use spacekit::crc32c;
use spacekit::migration::{Receiver, Request, Response, Status, REQUEST_BYTES};

use super::input::Input;

/// The test's end of the connection: the sender's bytes to read, the
/// receiver's answers collected.
struct Duplex<'a> {
    input: &'a [u8],
    output: Vec<u8>,
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

fn response(status: u16, length: u64) -> [u8; 16] {
    let mut r = [0u8; 16];
    r[..2].copy_from_slice(&status.to_le_bytes());
    r[8..].copy_from_slice(&length.to_le_bytes());
    r
}

struct Outcome {
    ok: bool,
    output: Vec<u8>,
    memory_requests: u64,
    ranges: u64,
    bytes: u64,
}

/// The protocol, as the module documentation states it.
fn model(mut s: &[u8], mem: &mut [u8], max_table: u64) -> Outcome {
    let mut out = Outcome {
        ok: false,
        output: Vec::new(),
        memory_requests: 0,
        ranges: 0,
        bytes: 0,
    };
    let ok = response(1, 0);
    let err = response(2, 0);
    let mut started = false;
    loop {
        if s.len() < 16 {
            out.output.extend_from_slice(&err);
            return out;
        }
        let cmd = u16::from_le_bytes([s[0], s[1]]);
        let len = u64::from_le_bytes(s[8..16].try_into().expect("8 bytes"));
        s = &s[16..];
        let refuse = |out: &mut Outcome| out.output.extend_from_slice(&err);
        match cmd {
            1 | 5 | 6 if len != 0 => return refuse_ret(out, &err),
            1 => {
                started = true;
                out.output.extend_from_slice(&ok);
            }
            6 => {
                out.output.extend_from_slice(&ok);
                return out; // Abandoned: an error after the ok.
            }
            2 | 3 | 7 | 8 => return refuse_ret(out, &err),
            4 | 5 | 0x5348 if !started => return refuse_ret(out, &err),
            5 => {
                out.output.extend_from_slice(&ok);
                out.ok = true;
                return out;
            }
            4 => {
                if len % 16 != 0 || len > max_table || (s.len() as u64) < len {
                    refuse(&mut out);
                    return out;
                }
                let (table, rest) = s.split_at(len as usize);
                s = rest;
                let ranges: Vec<(u64, u64)> = table
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
                    refuse(&mut out);
                    return out;
                }
                for (g, l) in ranges {
                    let n = (l as usize).min(s.len());
                    mem[g as usize..g as usize + n].copy_from_slice(&s[..n]);
                    s = &s[n..];
                    if n < l as usize {
                        refuse(&mut out);
                        return out;
                    }
                    out.ranges += 1;
                    out.bytes += l;
                }
                out.memory_requests += 1;
                out.output.extend_from_slice(&ok);
            }
            0x5348 => {
                if len != 8 || s.len() < 8 {
                    refuse(&mut out);
                    return out;
                }
                let ps = u64::from_le_bytes(s[..8].try_into().expect("8"));
                s = &s[8..];
                if ps == 0 {
                    refuse(&mut out);
                    return out;
                }
                let pages = (mem.len() as u64).div_ceil(ps);
                out.output.extend_from_slice(&response(1, pages * 4));
                let ps = usize::try_from(ps).unwrap_or(usize::MAX);
                for page in mem.chunks(ps) {
                    out.output
                        .extend_from_slice(&crc32c::checksum(page).to_le_bytes());
                }
            }
            _ => return refuse_ret(out, &err),
        }
    }
}

fn refuse_ret(mut out: Outcome, err: &[u8; 16]) -> Outcome {
    out.output.extend_from_slice(err);
    out
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
        assert_eq!(again[..2], h[..2], "command");
        assert_eq!(again[8..], h[8..], "length");
        assert_eq!(Request::from_bytes(&again), Ok(req), "request round trip");
    }
    match Response::from_bytes(&h) {
        Ok(resp) => {
            let again = resp.to_bytes();
            assert_eq!(
                (again[..2].to_vec(), again[8..].to_vec()),
                (h[..2].to_vec(), h[8..].to_vec())
            );
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
    let mut expect = memory.clone();
    let mut rx = Receiver::new(&mut memory);
    if let Some(m) = max_table {
        rx = rx.with_max_table_bytes(m);
    }
    let cap = rx.max_table_bytes();
    let mut duplex = Duplex {
        input: stream,
        output: Vec::new(),
    };
    let got = rx.serve(&mut duplex);
    let want = model(stream, &mut expect, cap);
    assert_eq!(duplex.output, want.output, "the receiver's answers");
    match got {
        Ok(summary) => {
            assert!(want.ok, "served ok where the model refused");
            assert_eq!(
                (summary.memory_requests, summary.ranges, summary.bytes),
                (want.memory_requests, want.ranges, want.bytes),
                "summary"
            );
        }
        Err(e) => {
            let _ = e.to_string();
            assert!(!want.ok, "refused a stream the model accepts: {e}");
        }
    }
    assert!(memory == expect, "guest memory differs from the model");
}
