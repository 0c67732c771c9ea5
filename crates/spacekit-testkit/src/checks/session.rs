//! Target `migration_session`: structured migration sessions, so the
//! receiver's later states are reached often: `Start` with a version and an
//! extension offer, `Config` and `State` payloads (some refused by the
//! caller's handler or over the payload cap), memory tables, page hashes,
//! `Complete`/`CompletePaused`/`Abandon`, refused requests with payloads
//! (`MemoryFd`, `PageFault`, unknown commands; drained up to a fuzzed
//! limit) and raw bytes, in any order. The receiver is checked against the
//! protocol model of `wire.rs`, byte for byte. The sender's side of the
//! negotiation is checked too: what `Sender::start` writes for an offer,
//! and what it concludes from any answer.

use std::io::{self, Read, Write};

use spacekit::migration::{Extensions, Sender};

use super::input::Input;
use super::wire::{check_receiver, Params};

fn req(out: &mut Vec<u8>, command: u16, headers: [u8; 6], length: u64) {
    out.extend_from_slice(&command.to_le_bytes());
    out.extend_from_slice(&headers);
    out.extend_from_slice(&length.to_le_bytes());
}

/// A canned answer for the sender, and what it writes.
struct Canned<'a> {
    input: &'a [u8],
    output: Vec<u8>,
}

impl Read for Canned<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.input.len());
        buf[..n].copy_from_slice(&self.input[..n]);
        self.input = &self.input[n..];
        Ok(n)
    }
}

impl Write for Canned<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The sender's negotiation: it offers `offer` in Start's bytes 2..6 (all
/// zero for none, Cloud Hypervisor's Start exactly) and keeps what an Ok
/// answer's padding accepts, within the offer.
fn check_sender(input: &mut Input) {
    let offer = Extensions::from_bits(input.u16());
    let mut answer = [0u8; 16];
    answer.copy_from_slice(&{
        let mut b = input.bytes(16).to_vec();
        b.resize(16, 0);
        b
    });
    let mut s = Canned {
        input: &answer,
        output: Vec::new(),
    };
    let mut sender = Sender::new().with_extensions(offer);
    let res = sender.start(&mut s);
    let mut want = [0u8; 16];
    want[0] = 1;
    if !offer.is_empty() {
        want[4..6].copy_from_slice(b"SK");
        want[6..8].copy_from_slice(&offer.bits().to_le_bytes());
    }
    assert_eq!(s.output, want, "the Start request");
    let status = u16::from_le_bytes([answer[0], answer[1]]);
    let length = u64::from_le_bytes(answer[8..].try_into().expect("8"));
    assert_eq!(res.is_ok(), status == 1 && length == 0, "{res:?}");
    let accepted = if res.is_ok() && answer[2..4] == *b"SK" {
        u16::from_le_bytes([answer[4], answer[5]]) & offer.bits()
    } else {
        0
    };
    assert_eq!(
        sender.extensions().bits(),
        accepted & Extensions::ALL.bits()
    );
}

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    check_sender(&mut input);
    let mem_len = input.below(32 * 1024 + 1) as usize;
    let fill = input.u8();
    let mut p = Params::default_for(mem_len);
    if input.bool() {
        p.extensions = 0;
    }
    if input.bool() {
        p.max_payload = input.below(2048);
    }
    if input.bool() {
        p.max_table = input.below(2048);
    }
    if input.bool() {
        p.refuse_first_byte = Some(input.u8());
    }
    let drain = if input.bool() {
        Some(input.below(4096))
    } else {
        None
    };
    let mut stream = Vec::new();
    let mut n = 0;
    while !input.is_empty() && n < 64 {
        n += 1;
        match input.below(12) {
            0 => {
                let version = if input.below(8) == 0 { input.u16() } else { 0 };
                let mut h = [0u8; 6];
                h[..2].copy_from_slice(&version.to_le_bytes());
                if input.bool() {
                    h[2..4].copy_from_slice(b"SK");
                    h[4..6].copy_from_slice(&input.u16().to_le_bytes());
                }
                req(&mut stream, 1, h, 0);
            }
            c @ (1 | 2) => {
                let len = input.below(64) as usize;
                let payload = input.bytes(len).to_vec();
                req(&mut stream, c as u16 + 1, [0; 6], payload.len() as u64);
                stream.extend_from_slice(&payload);
            }
            3 => {
                let ranges = input.below(4);
                let mut table = Vec::new();
                let mut contents = 0u64;
                for _ in 0..ranges {
                    let gpa = input.below(mem_len as u64 + 16);
                    let len = input.below(600);
                    table.extend_from_slice(&gpa.to_le_bytes());
                    table.extend_from_slice(&len.to_le_bytes());
                    contents += len;
                }
                let table_len = if input.below(16) == 0 {
                    table.len() as u64 + input.below(16)
                } else {
                    table.len() as u64
                };
                req(&mut stream, 4, [0; 6], table_len);
                stream.extend_from_slice(&table);
                let f = input.u8();
                stream.extend((0..contents).map(|i| f.wrapping_add(i as u8)));
            }
            4 => req(&mut stream, 5, [0; 6], 0),
            5 => req(&mut stream, 8, [0; 6], 0),
            6 => req(&mut stream, 6, [0; 6], input.below(2)),
            c @ (7 | 8) => {
                let command = if c == 7 { 7 } else { 9 };
                let len = if command == 9 { 16 } else { input.below(300) };
                req(&mut stream, command, [0; 6], len);
                stream.extend(std::iter::repeat_n(0xa5, len as usize));
            }
            9 => {
                let ps = input.below(70_000);
                req(&mut stream, 0x5348, [0; 6], 8);
                stream.extend_from_slice(&ps.to_le_bytes());
            }
            10 => {
                let command = input.u16();
                let len = input.below(300);
                req(&mut stream, command, [0; 6], len);
                stream.extend(std::iter::repeat_n(0x3c, len as usize));
            }
            _ => {
                let len = input.below(33) as usize;
                stream.extend_from_slice(input.bytes(len));
            }
        }
    }
    let mut memory = vec![fill; mem_len];
    check_receiver(&stream, &mut memory, &p, drain);
}
