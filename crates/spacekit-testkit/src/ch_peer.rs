//! A peer shaped like Cloud Hypervisor's migration code, written for the
//! tests from the protocol's facts (its `vm_migration::protocol` and its
//! VMM's receive and send paths), byte by byte, without spacekit's types:
//!
//! * headers are 16 bytes: `u16` command or status, 6 bytes (a `Start`'s
//!   first two are the protocol version, the rest ignored; a response's are
//!   zero), `u64` payload length; all little-endian;
//! * commands: Invalid 0, Start 1, Config 2, State 3, Memory 4, Complete 5,
//!   Abandon 6, MemoryFd 7, CompletePaused 8, PageFault 9; statuses:
//!   Invalid 0, Ok 1, Error 2;
//! * the receiver is a state machine: `Start` (version 0 only, else an
//!   error answer), then `Config`, then `Memory`..., then `State`, then
//!   `Complete` or `CompletePaused`; `Abandon` in any state; any other
//!   command in a state is answered with an error and ends the migration,
//!   without reading its payload; a command value it does not know (above
//!   9) fails the header read, and it drops the connection without any
//!   answer;
//! * the sender sends `Start` (version 0, other bytes zero), `Config`,
//!   memory tables (skipping empty ones; large ones partitioned into chunks
//!   of at most a given number of bytes, ranges taken from the end of the
//!   table and split there), `State`, then `Complete`, and checks only each
//!   answer's status.
//!
//! * extra connections (its multi-connection migration): an extra
//!   connection to the receiver's listener begins with a `u16` connection
//!   role (1: pre-copy memory; 2: post-copy faults; 0 invalid), then
//!   carries only `Memory` requests, each answered, until the sender closes
//!   it between two requests; the receiver writes them into guest memory
//!   concurrently with the main connection.
//!
//! Used by `tests/ch_peer.rs` and by the CLI's migrate tests.

use std::io::{Read, Write};

/// How a Cloud Hypervisor-shaped receiver ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChEnd {
    /// `Complete` (`paused: false`) or `CompletePaused` acknowledged.
    Completed { paused: bool },
    /// `Abandon` acknowledged.
    Abandoned,
    /// A request refused with an error answer (the state and command).
    Refused { state: &'static str, command: u16 },
    /// The connection dropped without an answer: a header or payload could
    /// not be read, or the command value is unknown.
    Dropped(String),
}

/// What a Cloud Hypervisor-shaped receiver received.
#[derive(Clone, Debug, Default)]
pub struct ChReceived {
    /// The `Config` payload.
    pub config: Option<Vec<u8>>,
    /// The `State` payload.
    pub state: Option<Vec<u8>>,
    /// `Memory` requests.
    pub memory_requests: u64,
    /// Every request header, as received (command, its 6 bytes, length).
    pub headers: Vec<(u16, [u8; 6], u64)>,
}

fn answer<S: Write>(s: &mut S, status: u16) -> Result<(), String> {
    let mut b = [0u8; 16];
    b[..2].copy_from_slice(&status.to_le_bytes());
    s.write_all(&b).map_err(|e| e.to_string())?;
    s.flush().map_err(|e| e.to_string())
}

fn u64_at(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().unwrap())
}

/// Serves one migration into `memory` as Cloud Hypervisor's receiver does.
pub fn ch_receive<S: Read + Write>(s: &mut S, memory: &mut [u8]) -> (ChEnd, ChReceived) {
    let mut got = ChReceived::default();
    let mut state = "Established";
    loop {
        let mut h = [0u8; 16];
        if let Err(e) = s.read_exact(&mut h) {
            return (ChEnd::Dropped(format!("reading a request: {e}")), got);
        }
        let command = u16::from_le_bytes([h[0], h[1]]);
        let headers: [u8; 6] = h[2..8].try_into().unwrap();
        let length = u64_at(&h[8..]);
        got.headers.push((command, headers, length));
        if command > 9 {
            return (ChEnd::Dropped(format!("unknown command {command:#x}")), got);
        }
        let refuse = |s: &mut S, got: ChReceived| {
            let _ = answer(s, 2);
            (ChEnd::Refused { state, command }, got)
        };
        if command == 6 {
            let _ = answer(s, 1);
            return (ChEnd::Abandoned, got);
        }
        let next = match (state, command) {
            ("Established", 1) => {
                let version = u16::from_le_bytes([headers[0], headers[1]]);
                if version != 0 {
                    return refuse(s, got);
                }
                "Started"
            }
            ("Started", 2) | ("Configured", 3) => {
                let mut payload = vec![0u8; length as usize];
                if let Err(e) = s.read_exact(&mut payload) {
                    return (ChEnd::Dropped(format!("reading a payload: {e}")), got);
                }
                if command == 2 {
                    got.config = Some(payload);
                    "Configured"
                } else {
                    got.state = Some(payload);
                    "StateReceived"
                }
            }
            ("Configured", 4) => {
                if !length.is_multiple_of(16) {
                    return refuse(s, got);
                }
                let mut table = vec![0u8; length as usize];
                if let Err(e) = s.read_exact(&mut table) {
                    return (ChEnd::Dropped(format!("reading a table: {e}")), got);
                }
                for e in table.chunks_exact(16) {
                    let (gpa, len) = (u64_at(&e[..8]), u64_at(&e[8..]));
                    let end = gpa
                        .checked_add(len)
                        .filter(|&end| end <= memory.len() as u64);
                    let Some(end) = end else {
                        return refuse(s, got);
                    };
                    if let Err(e) = s.read_exact(&mut memory[gpa as usize..end as usize]) {
                        return (ChEnd::Dropped(format!("reading memory: {e}")), got);
                    }
                }
                got.memory_requests += 1;
                "Configured"
            }
            ("StateReceived", 5 | 8) => {
                let _ = answer(s, 1);
                return (
                    ChEnd::Completed {
                        paused: command == 8,
                    },
                    got,
                );
            }
            _ => return refuse(s, got),
        };
        if let Err(e) = answer(s, 1) {
            return (ChEnd::Dropped(format!("answering: {e}")), got);
        }
        state = next;
    }
}

/// Cloud Hypervisor's partition of a table into chunks of at most `chunk`
/// bytes: ranges are taken from the end of the table; one that does not fit
/// is split, its upper part going into the chunk and its lower part back to
/// the table.
pub fn ch_partition(table: &[(u64, u64)], chunk: u64) -> Vec<Vec<(u64, u64)>> {
    let mut rest: Vec<(u64, u64)> = table.to_vec();
    let mut out = Vec::new();
    loop {
        let mut part = Vec::new();
        let mut size = 0u64;
        while size < chunk {
            let Some((gpa, len)) = rest.pop() else { break };
            if size + len > chunk {
                let stays = size + len - chunk;
                rest.push((gpa, stays));
                part.push((gpa + stays, len - stays));
                size = chunk;
            } else {
                part.push((gpa, len));
                size += len;
            }
        }
        if part.is_empty() {
            return out;
        }
        out.push(part);
    }
}

fn request<S: Write>(s: &mut S, command: u16, length: u64) -> Result<(), String> {
    let mut b = [0u8; 16];
    b[..2].copy_from_slice(&command.to_le_bytes());
    b[8..].copy_from_slice(&length.to_le_bytes());
    s.write_all(&b)
        .map_err(|e| format!("writing command {command}: {e}"))
}

fn expect_ok<S: Read>(s: &mut S, what: &str) -> Result<(), String> {
    let mut b = [0u8; 16];
    s.read_exact(&mut b)
        .map_err(|e| format!("reading the answer to {what}: {e}"))?;
    match u16::from_le_bytes([b[0], b[1]]) {
        1 => Ok(()),
        st => Err(format!("{what} answered with status {st}")),
    }
}

/// Sends a migration as Cloud Hypervisor's sender does: `Start`, `Config`,
/// each round's table (partitioned into chunks of at most `chunk` bytes,
/// empty ones skipped) with the contents from `source`, `State`, then
/// `Complete` (or `CompletePaused` when `paused`).
pub fn ch_send<S: Read + Write>(
    s: &mut S,
    source: &[u8],
    rounds: &[Vec<(u64, u64)>],
    config: &[u8],
    state: &[u8],
    chunk: u64,
    paused: bool,
) -> Result<(), String> {
    request(s, 1, 0)?;
    expect_ok(s, "Start")?;
    request(s, 2, config.len() as u64)?;
    s.write_all(config).map_err(|e| e.to_string())?;
    expect_ok(s, "Config")?;
    for round in rounds {
        for part in ch_partition(round, chunk) {
            if part.is_empty() {
                continue;
            }
            request(s, 4, part.len() as u64 * 16)?;
            let mut table = Vec::new();
            for (gpa, len) in &part {
                table.extend_from_slice(&gpa.to_le_bytes());
                table.extend_from_slice(&len.to_le_bytes());
            }
            s.write_all(&table).map_err(|e| e.to_string())?;
            for (gpa, len) in &part {
                s.write_all(&source[*gpa as usize..(*gpa + *len) as usize])
                    .map_err(|e| e.to_string())?;
            }
            expect_ok(s, "Memory")?;
        }
    }
    request(s, 3, state.len() as u64)?;
    s.write_all(state).map_err(|e| e.to_string())?;
    expect_ok(s, "State")?;
    request(s, if paused { 8 } else { 5 }, 0)?;
    expect_ok(s, "Complete")
}

/// A request header as received: command, its 6 bytes, length.
pub type Header = (u16, [u8; 6], u64);

/// Serves one extra connection as Cloud Hypervisor's receive worker does:
/// the role (only 1, pre-copy memory, is served), then `Memory` requests
/// into `memory` until the sender closes the connection between two
/// requests. Returns the `Memory` requests served and every header seen,
/// or why it dropped the connection.
pub fn ch_receive_extra<S: Read + Write>(
    s: &mut S,
    memory: &std::sync::Mutex<Vec<u8>>,
) -> Result<(u64, Vec<Header>), String> {
    let mut role = [0u8; 2];
    s.read_exact(&mut role)
        .map_err(|e| format!("reading the role: {e}"))?;
    if u16::from_le_bytes(role) != 1 {
        return Err(format!("role {}", u16::from_le_bytes(role)));
    }
    let mut headers = Vec::new();
    let mut requests = 0;
    loop {
        let mut h = [0u8; 16];
        match s.read(&mut h[..1]) {
            Ok(0) => return Ok((requests, headers)),
            Ok(_) => {}
            Err(e) => return Err(format!("reading a request: {e}")),
        }
        s.read_exact(&mut h[1..])
            .map_err(|e| format!("reading a request: {e}"))?;
        let command = u16::from_le_bytes([h[0], h[1]]);
        let length = u64_at(&h[8..]);
        headers.push((command, h[2..8].try_into().unwrap(), length));
        if command != 4 || !length.is_multiple_of(16) {
            return Err(format!("command {command:#x} on a memory connection"));
        }
        let mut table = vec![0u8; length as usize];
        s.read_exact(&mut table)
            .map_err(|e| format!("reading a table: {e}"))?;
        for e in table.chunks_exact(16) {
            let (gpa, len) = (u64_at(&e[..8]), u64_at(&e[8..]));
            let mut data = vec![0u8; len as usize];
            s.read_exact(&mut data)
                .map_err(|e| format!("reading memory: {e}"))?;
            let mut m = memory.lock().unwrap();
            let end = gpa.checked_add(len).filter(|&e| e <= m.len() as u64);
            let Some(end) = end else {
                let _ = answer(s, 2);
                return Err("range outside memory".into());
            };
            m[gpa as usize..end as usize].copy_from_slice(&data);
        }
        requests += 1;
        answer(s, 1)?;
    }
}

/// Sends `parts` on an extra connection as Cloud Hypervisor's send worker
/// does: the role 1, then one `Memory` request per part, each waiting for
/// its answer.
pub fn ch_send_extra<S: Read + Write>(
    s: &mut S,
    source: &[u8],
    parts: &[Vec<(u64, u64)>],
) -> Result<(), String> {
    s.write_all(&1u16.to_le_bytes())
        .map_err(|e| e.to_string())?;
    for part in parts {
        request(s, 4, part.len() as u64 * 16)?;
        let mut table = Vec::new();
        for (gpa, len) in part {
            table.extend_from_slice(&gpa.to_le_bytes());
            table.extend_from_slice(&len.to_le_bytes());
        }
        s.write_all(&table).map_err(|e| e.to_string())?;
        for (gpa, len) in part {
            s.write_all(&source[*gpa as usize..(*gpa + *len) as usize])
                .map_err(|e| e.to_string())?;
        }
        expect_ok(s, "Memory")?;
    }
    Ok(())
}

/// Sends a migration's control requests as Cloud Hypervisor's sender does
/// with several connections: `Start`, `Config`, then `between` (which sends
/// the memory on extra connections), then `State` and `Complete`.
pub fn ch_send_control<S: Read + Write>(
    s: &mut S,
    config: &[u8],
    state: &[u8],
    between: impl FnOnce() -> Result<(), String>,
) -> Result<(), String> {
    request(s, 1, 0)?;
    expect_ok(s, "Start")?;
    request(s, 2, config.len() as u64)?;
    s.write_all(config).map_err(|e| e.to_string())?;
    expect_ok(s, "Config")?;
    between()?;
    request(s, 3, state.len() as u64)?;
    s.write_all(state).map_err(|e| e.to_string())?;
    expect_ok(s, "State")?;
    request(s, 5, 0)?;
    expect_ok(s, "Complete")
}
