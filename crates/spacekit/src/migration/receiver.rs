//! [`Receiver`]: the destination side of the migration stream.

use alloc::vec::Vec;
use std::io::{Read, Write};

use super::command::{
    accept_padding, offered, version_supported, Command, Extensions, ReceiveState, Status,
};
use super::error::MigrationError;
use super::source::page_count;
use super::wire::{
    check_range, decode_range, read_full, split_header, write_all, Request, Response, REQUEST_BYTES,
};
use crate::crc32c;
use crate::dirty::WIRE_RANGE_BYTES;

/// The largest memory table a [`Receiver`] ever accepts by default: 1 GiB
/// (64 Mi ranges).
pub const MAX_TABLE_BYTES: u64 = 1 << 30;

/// The largest `Config` or `State` payload a [`Receiver`] accepts by
/// default: 256 MiB.
pub const MAX_PAYLOAD_BYTES: u64 = 256 << 20;

/// How much of a refused request's payload a [`Receiver`] reads and
/// discards by default before it answers with the error: 256 MiB.
pub const DRAIN_LIMIT_BYTES: u64 = 256 << 20;

/// What a [`Receiver`] received on one connection, up to
/// [`Command::Complete`] or [`Command::CompletePaused`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReceiveSummary {
    /// Requests served, `Start` and `Complete` included.
    pub requests: u64,
    /// The protocol version the sender's `Start` carried.
    pub version: u16,
    /// The spacekit extensions accepted in the answer to `Start` (none for
    /// a plain Cloud Hypervisor sender).
    pub extensions: Extensions,
    /// Bytes of the `Config` payload.
    pub config_bytes: u64,
    /// Bytes of the `State` payload.
    pub state_bytes: u64,
    /// [`Command::Memory`] requests.
    pub memory_requests: u64,
    /// Ranges in all memory tables.
    pub ranges: u64,
    /// Guest memory bytes received (the ranges' contents).
    pub bytes: u64,
    /// [`Command::PageHashes`] requests.
    pub page_hash_requests: u64,
    /// The migration ended with [`Command::CompletePaused`]: the source VM
    /// was paused, so the destination stays paused.
    pub paused: bool,
}

/// What the serve loop does after a request.
enum Flow {
    Continue,
    Complete,
    Abandoned,
}

/// The destination side of Cloud Hypervisor's migration stream: Cloud
/// Hypervisor's `Vmm::vm_receive_migration` and its state machine, with
/// guest memory in a caller's slice and the `Config` and `State` payloads
/// handed to the caller; plus spacekit's negotiated
/// [`Command::PageHashes`].
///
/// Guest memory is the slice given to [`Receiver::new`]: guest-physical
/// address `gpa` is byte `gpa` of the slice, so a range is accepted only if
/// it lies inside `0..memory.len()`.
///
/// [`Receiver::serve`] answers every request with a 16-byte [`Response`]:
/// [`Status::Ok`] (length 0; for page hashes, followed by them), or
/// [`Status::Error`] for a request it refuses — after reading and
/// discarding what is left of that request's payload, so a peer that writes
/// its whole request before it reads the answer reads the error rather than
/// a broken pipe — after which it returns the typed error and serves
/// nothing more on that stream. (Cloud Hypervisor's own receiver drops the
/// connection without an answer on an unknown command; spacekit answers.)
///
/// ```
/// use std::os::unix::net::UnixStream;
/// use spacekit::dirty::{MemoryRange, MemoryRangeTable};
/// use spacekit::migration::{Receiver, Sender};
///
/// let source = vec![7u8; 64 * 1024];
/// let (mut tx, mut rx) = UnixStream::pair()?;
/// let dest = std::thread::spawn(move || {
///     let mut memory = vec![0u8; 64 * 1024];
///     let mut receiver = Receiver::new(&mut memory);
///     let summary = receiver.serve(&mut rx);
///     let config = receiver.vm_config().map(<[u8]>::to_vec);
///     (summary, config, memory)
/// });
/// let mut table = MemoryRangeTable::new();
/// table.push(MemoryRange { gpa: 0, length: 64 * 1024 });
/// let mut sender = Sender::new();
/// sender.start(&mut tx)?;
/// sender.send_config(&mut tx, br#"{"memory":65536}"#)?;
/// sender.send_memory(&mut tx, &table, &source)?;
/// sender.send_state(&mut tx, b"{}")?;
/// sender.complete(&mut tx)?;
/// let (summary, config, memory) = dest.join().unwrap();
/// assert_eq!(summary?.bytes, 64 * 1024);
/// assert_eq!(config.as_deref(), Some(&br#"{"memory":65536}"#[..]));
/// assert_eq!(memory, source);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Receiver<'m> {
    memory: &'m mut [u8],
    /// The current request's table, reused across requests.
    table: Vec<u8>,
    max_table_bytes: u64,
    max_payload_bytes: u64,
    drain_limit: u64,
    extensions: Extensions,
    vm_config: Option<Vec<u8>>,
    vm_state: Option<Vec<u8>>,
}

/// The serve loop's view of one request in progress.
struct Current {
    /// Bytes the stream had delivered when the header was read.
    header_end: u64,
    /// Payload bytes the request carries (for `Memory`, its table and, once
    /// the table is read, the contents of its ranges).
    payload: u64,
}

impl<'m> Receiver<'m> {
    /// A receiver writing into `memory` (guest-physical addresses
    /// `0..memory.len()`), accepting tables of up to
    /// [`Receiver::default_max_table_bytes`] bytes, payloads of up to
    /// [`MAX_PAYLOAD_BYTES`], and every spacekit extension a sender offers.
    pub fn new(memory: &'m mut [u8]) -> Self {
        let max_table_bytes = Self::default_max_table_bytes(memory.len() as u64);
        Receiver {
            memory,
            table: Vec::new(),
            max_table_bytes,
            max_payload_bytes: MAX_PAYLOAD_BYTES,
            drain_limit: DRAIN_LIMIT_BYTES,
            extensions: Extensions::ALL,
            vm_config: None,
            vm_state: None,
        }
    }

    /// The default cap on a memory table for `memory_size` bytes of memory:
    /// one 16-byte range per 4 KiB page and one more, at most
    /// [`MAX_TABLE_BYTES`]. A table of non-overlapping, non-empty,
    /// page-aligned ranges never needs more; the cap keeps a hostile length
    /// field from making the receiver allocate without bound.
    pub fn default_max_table_bytes(memory_size: u64) -> u64 {
        (memory_size / 4096 + 1)
            .saturating_mul(WIRE_RANGE_BYTES as u64)
            .min(MAX_TABLE_BYTES)
    }

    /// Sets the cap on a memory table's length in bytes (for senders that
    /// split ranges finer than 4 KiB pages). The table is read as it
    /// arrives, so a stream that ends early never makes the receiver
    /// allocate more than it sent.
    pub fn with_max_table_bytes(mut self, max: u64) -> Self {
        self.max_table_bytes = max;
        self
    }

    /// The cap on a memory table's length in bytes.
    pub fn max_table_bytes(&self) -> u64 {
        self.max_table_bytes
    }

    /// Sets the cap on a `Config` or `State` payload in bytes (read as it
    /// arrives, like the table).
    pub fn with_max_payload_bytes(mut self, max: u64) -> Self {
        self.max_payload_bytes = max;
        self
    }

    /// The cap on a `Config` or `State` payload in bytes.
    pub fn max_payload_bytes(&self) -> u64 {
        self.max_payload_bytes
    }

    /// Sets how many bytes of a refused request's remaining payload are read
    /// and discarded before the error response (0: answer at once). A
    /// payload longer than this is left unread, and the peer may then see
    /// the connection reset rather than the answer.
    pub fn with_drain_limit(mut self, bytes: u64) -> Self {
        self.drain_limit = bytes;
        self
    }

    /// How many bytes of a refused request's payload are drained.
    pub fn drain_limit(&self) -> u64 {
        self.drain_limit
    }

    /// Sets the spacekit extensions this receiver accepts when a sender
    /// offers them ([`Extensions::NONE`]: answer exactly as Cloud
    /// Hypervisor's receiver does, and refuse every extension request).
    pub fn with_extensions(mut self, extensions: Extensions) -> Self {
        self.extensions = extensions;
        self
    }

    /// Guest memory.
    pub fn memory(&self) -> &[u8] {
        self.memory
    }

    /// The `Config` payload accepted on the last stream served, if any.
    pub fn vm_config(&self) -> Option<&[u8]> {
        self.vm_config.as_deref()
    }

    /// The `State` payload accepted on the last stream served, if any.
    pub fn vm_state(&self) -> Option<&[u8]> {
        self.vm_state.as_deref()
    }

    /// Serves one migration on `stream`, keeping the `Config` and `State`
    /// payloads for [`Receiver::vm_config`] and [`Receiver::vm_state`]:
    /// [`Receiver::serve_with`] with a handler that accepts every payload.
    ///
    /// # Errors
    /// As [`Receiver::serve_with`].
    pub fn serve<S: Read + Write + ?Sized>(
        &mut self,
        stream: &mut S,
    ) -> Result<ReceiveSummary, MigrationError> {
        self.serve_with(stream, |_, _| Ok(()))
    }

    /// Serves one migration on `stream` until [`Command::Complete`] or
    /// [`Command::CompletePaused`], and returns what it received.
    /// `on_payload` is handed each `Config` and `State` payload (with its
    /// command) as it arrives, before it is acknowledged: an `Err(reason)`
    /// refuses it ([`MigrationError::PayloadRefused`]), so a VMM can check a
    /// configuration before memory flows.
    ///
    /// The order accepted is Cloud Hypervisor's: `Start` (its protocol
    /// version checked), `Config`, any number of `Memory`, `State`, then
    /// `Complete` or `CompletePaused`; `Abandon` at any time;
    /// [`Command::PageHashes`] after `Config`, only if negotiated. Each
    /// memory table is validated whole — length a multiple of 16 and at most
    /// [`Receiver::max_table_bytes`], every range inside memory and none
    /// overflowing — before any byte of memory is written; then each range's
    /// contents are read straight into guest memory, in table order (ranges
    /// may overlap; the later one wins, as in Cloud Hypervisor).
    ///
    /// # Errors
    /// On any refused request the receiver reads and discards the rest of
    /// its payload (up to [`Receiver::drain_limit`]; not after the stream
    /// failed), writes an error [`Response`] (best effort), then returns:
    /// [`MigrationError::UnknownCommand`], [`MigrationError::NotStarted`],
    /// [`MigrationError::UnsupportedVersion`],
    /// [`MigrationError::OutOfOrder`], [`MigrationError::Unsupported`]
    /// (`MemoryFd`, `PageFault`), [`MigrationError::NotNegotiated`],
    /// [`MigrationError::UnexpectedPayload`],
    /// [`MigrationError::PayloadTooLarge`],
    /// [`MigrationError::PayloadRefused`],
    /// [`MigrationError::BadTableLength`], [`MigrationError::TableTooLarge`],
    /// [`MigrationError::RangeOverflow`],
    /// [`MigrationError::RangeOutsideMemory`],
    /// [`MigrationError::BadPageSize`]; for a stream that ends early,
    /// [`MigrationError::Truncated`] (a clean end between requests, without
    /// `Complete`, is `Truncated` in the `"request header"` with `got: 0`);
    /// [`MigrationError::Io`]. [`MigrationError::Abandoned`] after
    /// acknowledging an `Abandon`.
    ///
    /// Memory is written only inside `0..memory.len()` and only after the
    /// whole table of the request passed validation; but a stream that fails
    /// in the middle of a request's contents leaves the ranges before the
    /// failure (and part of the one it hit) written, as Cloud Hypervisor's
    /// receiver does. A failed migration's memory is to be discarded.
    pub fn serve_with<S, F>(
        &mut self,
        stream: &mut S,
        mut on_payload: F,
    ) -> Result<ReceiveSummary, MigrationError>
    where
        S: Read + Write + ?Sized,
        F: FnMut(Command, &[u8]) -> Result<(), alloc::string::String>,
    {
        let mut summary = ReceiveSummary::default();
        let mut state = ReceiveState::Established;
        self.vm_config = None;
        self.vm_state = None;
        // Reads go through one buffer, so a table of many small ranges costs
        // a few large reads instead of a system call per range (a range at
        // least as large as the buffer is read straight into memory).
        let mut buffered = BufStream::new(stream);
        let stream = &mut buffered;
        loop {
            let mut header = [0u8; REQUEST_BYTES];
            if let Err(e) = read_full(stream, &mut header, "request header") {
                return Err(refuse(stream, e, 0, self.drain_limit));
            }
            let mut cur = Current {
                header_end: stream.consumed,
                payload: split_header(&header).1,
            };
            summary.requests += 1;
            let step = Request::from_bytes(&header).and_then(|req| {
                self.handle(
                    stream,
                    req,
                    &mut state,
                    &mut cur,
                    &mut summary,
                    &mut on_payload,
                )
            });
            match step {
                Ok(Flow::Continue) => {}
                Ok(Flow::Complete) => return Ok(summary),
                Ok(Flow::Abandoned) => return Err(MigrationError::Abandoned),
                Err(e) => {
                    let left = cur.payload.saturating_sub(stream.consumed - cur.header_end);
                    return Err(refuse(stream, e, left, self.drain_limit));
                }
            }
        }
    }

    /// Serves one request whose header was read.
    fn handle<S, F>(
        &mut self,
        stream: &mut S,
        req: Request,
        state: &mut ReceiveState,
        cur: &mut Current,
        summary: &mut ReceiveSummary,
        on_payload: &mut F,
    ) -> Result<Flow, MigrationError>
    where
        S: Read + Write + ?Sized,
        F: FnMut(Command, &[u8]) -> Result<(), alloc::string::String>,
    {
        use ReceiveState::{Configured, Established, Started, StateReceived};
        let command = req.command;
        let out_of_order = |state: ReceiveState| MigrationError::OutOfOrder { command, state };
        let mut padding = [0u8; 6];
        let flow = match (command, *state) {
            (Command::Abandon, _) => {
                expect_length(req, 0)?;
                Flow::Abandoned
            }
            (Command::MemoryFd | Command::PageFault, _) => {
                return Err(MigrationError::Unsupported { command })
            }
            (Command::Start, Established) => {
                expect_length(req, 0)?;
                let version = req.version();
                if !version_supported(version) {
                    return Err(MigrationError::UnsupportedVersion { version });
                }
                let accepted = offered(&req.command_headers).intersection(self.extensions);
                padding = accept_padding(accepted);
                summary.version = version;
                summary.extensions = accepted;
                *state = Started;
                Flow::Continue
            }
            (_, Established) => return Err(MigrationError::NotStarted { command }),
            (Command::Config, Started) => {
                let payload = self.read_payload(stream, req)?;
                on_payload(command, &payload)
                    .map_err(|reason| MigrationError::PayloadRefused { command, reason })?;
                summary.config_bytes = payload.len() as u64;
                self.vm_config = Some(payload);
                *state = Configured;
                Flow::Continue
            }
            (Command::Memory, Configured) => {
                self.receive_memory(stream, req.length, cur, summary)?;
                summary.memory_requests += 1;
                Flow::Continue
            }
            (Command::State, Configured) => {
                let payload = self.read_payload(stream, req)?;
                on_payload(command, &payload)
                    .map_err(|reason| MigrationError::PayloadRefused { command, reason })?;
                summary.state_bytes = payload.len() as u64;
                self.vm_state = Some(payload);
                *state = StateReceived;
                Flow::Continue
            }
            (Command::PageHashes, Configured | StateReceived) => {
                if !summary.extensions.contains(Extensions::PAGE_HASHES) {
                    return Err(MigrationError::NotNegotiated { command });
                }
                expect_length(req, 8)?;
                self.send_page_hashes(stream)?;
                summary.page_hash_requests += 1;
                return Ok(Flow::Continue);
            }
            (Command::Complete | Command::CompletePaused, StateReceived) => {
                expect_length(req, 0)?;
                summary.paused = command == Command::CompletePaused;
                Flow::Complete
            }
            (_, s) => return Err(out_of_order(s)),
        };
        let mut resp = Response::ok();
        resp.padding = padding;
        resp.write_to(stream)?;
        stream.flush().map_err(|e| MigrationError::io(&e))?;
        Ok(flow)
    }

    /// Reads a `Config` or `State` payload as it arrives (the buffer grows
    /// with the bytes received, not with the length claimed).
    fn read_payload<S: Read + ?Sized>(
        &self,
        stream: &mut S,
        req: Request,
    ) -> Result<Vec<u8>, MigrationError> {
        let len = req.length;
        if len > self.max_payload_bytes {
            return Err(MigrationError::PayloadTooLarge {
                command: req.command,
                len,
                max: self.max_payload_bytes,
            });
        }
        let what = if req.command == Command::Config {
            "config payload"
        } else {
            "state payload"
        };
        let mut payload = Vec::new();
        let res = (&mut *stream).take(len).read_to_end(&mut payload);
        let got = payload.len() as u64;
        if let Err(e) = res {
            return Err(MigrationError::from_io(&e, what, len, got));
        }
        if got < len {
            return Err(MigrationError::Truncated {
                what,
                expected: len,
                got,
            });
        }
        Ok(payload)
    }

    /// Reads a memory request's table and contents (`len`: the table's
    /// length from the header).
    fn receive_memory<S: Read + ?Sized>(
        &mut self,
        stream: &mut S,
        len: u64,
        cur: &mut Current,
        summary: &mut ReceiveSummary,
    ) -> Result<(), MigrationError> {
        if !len.is_multiple_of(WIRE_RANGE_BYTES as u64) {
            return Err(MigrationError::BadTableLength { len });
        }
        if len > self.max_table_bytes {
            return Err(MigrationError::TableTooLarge {
                len,
                max: self.max_table_bytes,
            });
        }
        // Read as it arrives: the buffer grows with the bytes received, not
        // with the length claimed.
        self.table.clear();
        let res = (&mut *stream).take(len).read_to_end(&mut self.table);
        let got = self.table.len() as u64;
        if let Err(e) = res {
            return Err(MigrationError::from_io(&e, "memory table", len, got));
        }
        if got < len {
            return Err(MigrationError::Truncated {
                what: "memory table",
                expected: len,
                got,
            });
        }
        // The contents follow the table: a refusal from here on drains them.
        cur.payload = self
            .table
            .chunks_exact(WIRE_RANGE_BYTES)
            .fold(len, |sum, e| sum.saturating_add(decode_range(e).length));
        let memory_size = self.memory.len() as u64;
        for (index, entry) in self.table.chunks_exact(WIRE_RANGE_BYTES).enumerate() {
            check_range(index, decode_range(entry), memory_size)?;
        }
        for entry in self.table.chunks_exact(WIRE_RANGE_BYTES) {
            let r = decode_range(entry);
            // Validated above: gpa + length <= memory.len().
            let dst = &mut self.memory[r.gpa as usize..(r.gpa + r.length) as usize];
            read_full(stream, dst, "memory contents")?;
            summary.ranges += 1;
            summary.bytes += r.length;
        }
        Ok(())
    }

    /// Reads a page-hashes request's page size and answers with the hashes.
    fn send_page_hashes<S: Read + Write + ?Sized>(
        &mut self,
        stream: &mut S,
    ) -> Result<(), MigrationError> {
        let mut b = [0u8; 8];
        read_full(stream, &mut b, "page size")?;
        let page_size = u64::from_le_bytes(b);
        if page_size == 0 {
            return Err(MigrationError::BadPageSize { page_size });
        }
        let pages = page_count(self.memory.len() as u64, page_size);
        Response::new(Status::Ok, pages * 4).write_to(stream)?;
        // Pages of more than usize::MAX bytes: the whole memory is one page.
        let ps = usize::try_from(page_size).unwrap_or(usize::MAX);
        let mut out = Vec::with_capacity(4096 * 4);
        for chunk in self.memory.chunks(ps.saturating_mul(4096).max(ps)) {
            out.clear();
            for page in chunk.chunks(ps) {
                out.extend_from_slice(&crc32c::checksum(page).to_le_bytes());
            }
            write_all(stream, &out)?;
        }
        stream.flush().map_err(|e| MigrationError::io(&e))
    }
}

/// Ends a stream on a refused request: unless the stream itself failed
/// (truncated or an I/O error), reads and discards up to `limit` of the
/// `left` payload bytes the peer is still sending, then writes the error
/// response (best effort: the stream may be gone). Returns `err`.
fn refuse<S: Read + Write + ?Sized>(
    stream: &mut S,
    err: MigrationError,
    left: u64,
    limit: u64,
) -> MigrationError {
    let stream_failed = matches!(
        err,
        MigrationError::Truncated { .. } | MigrationError::Io { .. }
    );
    if !stream_failed && left > 0 {
        let _ = std::io::copy(
            &mut (&mut *stream).take(left.min(limit)),
            &mut std::io::sink(),
        );
    }
    let _ = Response::error().write_to(stream);
    let _ = stream.flush();
    err
}

/// Checks a request's payload length against the command's.
fn expect_length(req: Request, expected: u64) -> Result<(), MigrationError> {
    if req.length == expected {
        Ok(())
    } else {
        Err(MigrationError::UnexpectedPayload {
            command: req.command,
            length: req.length,
            expected,
        })
    }
}

/// A stream whose reads are buffered and whose writes go straight through.
struct BufStream<'s, S: ?Sized> {
    inner: &'s mut S,
    buf: Vec<u8>,
    pos: usize,
    filled: usize,
    /// Bytes delivered to the reader so far.
    consumed: u64,
}

impl<'s, S: Read + Write + ?Sized> BufStream<'s, S> {
    const CAPACITY: usize = 256 << 10;

    fn new(inner: &'s mut S) -> Self {
        BufStream {
            inner,
            buf: alloc::vec![0; Self::CAPACITY],
            pos: 0,
            filled: 0,
            consumed: 0,
        }
    }
}

impl<S: Read + Write + ?Sized> Read for BufStream<'_, S> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.filled {
            if out.len() >= self.buf.len() {
                let n = self.inner.read(out)?;
                self.consumed += n as u64;
                return Ok(n);
            }
            self.filled = self.inner.read(&mut self.buf)?;
            self.pos = 0;
        }
        let n = out.len().min(self.filled - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        self.consumed += n as u64;
        Ok(n)
    }
}

impl<S: Read + Write + ?Sized> Write for BufStream<'_, S> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.inner.write(data)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
