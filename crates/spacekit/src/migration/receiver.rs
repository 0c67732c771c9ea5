//! [`Receiver`]: the destination side of the migration stream.

use alloc::vec::Vec;
use std::io::{Read, Write};
use std::time::Duration;

use super::command::{
    accept_padding, offered, version_supported, Command, Extensions, ReceiveState, Status,
};
use super::error::MigrationError;
use super::inbound::{receive_memory, Target, Watched};
use super::session::{MemoryTotals, Session};
use super::source::page_count;
use super::wire::{read_full, split_header, write_all, Request, Response, REQUEST_BYTES};
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

/// How many extra memory connections a [`Receiver`] accepts by default:
/// 128, Cloud Hypervisor's own bound.
pub const MAX_EXTRA_CONNECTIONS: usize = 128;

/// What a [`Receiver`] received, up to [`Command::Complete`] or
/// [`Command::CompletePaused`] — or, from [`Receiver::summary`] after a
/// failure, up to the failure: memory is counted only for requests that
/// arrived whole, so a failed migration's summary never claims memory that
/// did not arrive.
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
    /// Memory requests received whole ([`Command::Memory`] and
    /// [`Command::SparseMemory`], on every connection).
    pub memory_requests: u64,
    /// Ranges in their tables.
    pub ranges: u64,
    /// Guest memory bytes received (the ranges' contents, zero pages
    /// included).
    pub bytes: u64,
    /// Of [`ReceiveSummary::bytes`], the bytes of all-zero pages that came
    /// without payload ([`Extensions::ZERO_PAGES`]) and were written as
    /// zeros.
    pub zero_bytes: u64,
    /// Extra memory connections accepted
    /// ([`Receiver::serve_connections`]).
    pub extra_connections: u64,
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
    limits: Limits,
    main: MainState,
}

/// A receiver's settings.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub(super) max_table_bytes: u64,
    pub(super) max_payload_bytes: u64,
    pub(super) drain_limit: u64,
    pub(super) extensions: Extensions,
    pub(super) max_connections: usize,
    pub(super) idle_timeout: Option<Duration>,
}

/// What the main connection's loop keeps.
#[derive(Debug, Default)]
pub(super) struct MainState {
    /// The current request's table, reused across requests.
    table: Vec<u8>,
    vm_config: Option<Vec<u8>>,
    vm_state: Option<Vec<u8>>,
    /// The summary so far (the last one after a stream ended).
    summary: ReceiveSummary,
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
            limits: Limits {
                max_table_bytes,
                max_payload_bytes: MAX_PAYLOAD_BYTES,
                drain_limit: DRAIN_LIMIT_BYTES,
                extensions: Extensions::ALL,
                max_connections: MAX_EXTRA_CONNECTIONS,
                idle_timeout: None,
            },
            main: MainState::default(),
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
        self.limits.max_table_bytes = max;
        self
    }

    /// The cap on a memory table's length in bytes.
    pub fn max_table_bytes(&self) -> u64 {
        self.limits.max_table_bytes
    }

    /// Sets the cap on a `Config` or `State` payload in bytes (read as it
    /// arrives, like the table).
    pub fn with_max_payload_bytes(mut self, max: u64) -> Self {
        self.limits.max_payload_bytes = max;
        self
    }

    /// The cap on a `Config` or `State` payload in bytes.
    pub fn max_payload_bytes(&self) -> u64 {
        self.limits.max_payload_bytes
    }

    /// Sets how many bytes of a refused request's remaining payload are read
    /// and discarded before the error response (0: answer at once). A
    /// payload longer than this is left unread, and the peer may then see
    /// the connection reset rather than the answer.
    pub fn with_drain_limit(mut self, bytes: u64) -> Self {
        self.limits.drain_limit = bytes;
        self
    }

    /// How many bytes of a refused request's payload are drained.
    pub fn drain_limit(&self) -> u64 {
        self.limits.drain_limit
    }

    /// Sets the spacekit extensions this receiver accepts when a sender
    /// offers them ([`Extensions::NONE`]: answer exactly as Cloud
    /// Hypervisor's receiver does, and refuse every extension request).
    pub fn with_extensions(mut self, extensions: Extensions) -> Self {
        self.limits.extensions = extensions;
        self
    }

    /// Sets how many extra memory connections
    /// [`Receiver::serve_connections`] accepts (default
    /// [`MAX_EXTRA_CONNECTIONS`]); more are closed at once.
    pub fn with_max_connections(mut self, max: usize) -> Self {
        self.limits.max_connections = max;
        self
    }

    /// Sets how long [`Receiver::serve_connections`] waits for the next
    /// byte on a connection before it fails the migration
    /// ([`MigrationError::Io`] of kind `TimedOut`); `None` (the default)
    /// waits as long as the connection is open (pre-copy rounds may be far
    /// apart). It needs streams with a read timeout (the [`Listener`]s
    /// give their streams one; set one on the main stream), as does
    /// noticing an extra connection's failure while the main connection is
    /// quiet.
    ///
    /// [`Listener`]: super::Listener
    pub fn with_idle_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.limits.idle_timeout = timeout;
        self
    }

    /// Guest memory.
    pub fn memory(&self) -> &[u8] {
        self.memory
    }

    /// The `Config` payload accepted on the last stream served, if any.
    pub fn vm_config(&self) -> Option<&[u8]> {
        self.main.vm_config.as_deref()
    }

    /// The `State` payload accepted on the last stream served, if any.
    pub fn vm_state(&self) -> Option<&[u8]> {
        self.main.vm_state.as_deref()
    }

    /// What the last migration served received, also after it failed: its
    /// memory counts only requests that arrived whole (on every
    /// connection), so they never claim memory that did not arrive.
    pub fn summary(&self) -> ReceiveSummary {
        self.main.summary
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
        let session = Session::new();
        let target = Target::new(self.memory, &session);
        let mut watched = Watched::new(stream, None, true, None);
        let res = self
            .main
            .run(&mut watched, &self.limits, &target, &mut on_payload);
        session.end();
        res
    }

    /// Records the extra connections a session accepted in the summary.
    pub(super) fn record_extra_connections(&mut self, n: u64) {
        self.main.summary.extra_connections = n;
    }

    /// Splits the receiver for a session: its memory, settings and the main
    /// connection's state.
    pub(super) fn parts(&mut self) -> (&mut [u8], &Limits, &mut MainState) {
        (self.memory, &self.limits, &mut self.main)
    }
}

impl MainState {
    /// Serves one migration on the main connection `stream` into `target`
    /// (see [`Receiver::serve_with`]).
    pub(super) fn run<S, F>(
        &mut self,
        stream: &mut S,
        limits: &Limits,
        target: &Target<'_>,
        on_payload: &mut F,
    ) -> Result<ReceiveSummary, MigrationError>
    where
        S: Read + Write + ?Sized,
        F: FnMut(Command, &[u8]) -> Result<(), alloc::string::String>,
    {
        let session = target.session();
        self.summary = ReceiveSummary::default();
        let mut state = ReceiveState::Established;
        self.vm_config = None;
        self.vm_state = None;
        // Reads go through one buffer, so a table of many small ranges costs
        // a few large reads instead of a system call per range (a range at
        // least as large as the buffer is read straight into memory).
        let mut buffered = BufStream::new(stream);
        let stream = &mut buffered;
        let res = loop {
            let mut header = [0u8; REQUEST_BYTES];
            if let Err(e) = read_full(stream, &mut header, "request header") {
                break Err(refuse(stream, e, 0, limits.drain_limit));
            }
            let mut cur = Current {
                header_end: stream.consumed,
                payload: split_header(&header).1,
            };
            self.summary.requests += 1;
            let step = match session.failure() {
                Some(e) => Err(e),
                None => Request::from_bytes(&header).and_then(|req| {
                    self.handle(
                        stream, req, &mut state, &mut cur, limits, target, on_payload,
                    )
                }),
            };
            match step {
                Ok(Flow::Continue) => {}
                Ok(Flow::Complete) => break Ok(self.summary),
                Ok(Flow::Abandoned) => break Err(MigrationError::Abandoned),
                Err(e) => {
                    let left = cur.payload.saturating_sub(stream.consumed - cur.header_end);
                    break Err(refuse(stream, e, left, limits.drain_limit));
                }
            }
        };
        // An extra connection's failure is the cause of what the main
        // connection saw after it.
        let res = match (res, session.failure()) {
            (Err(_), Some(e)) => Err(e),
            (r, _) => r,
        };
        session.end();
        let extra = session.totals();
        self.summary.memory_requests += extra.requests;
        self.summary.ranges += extra.ranges;
        self.summary.bytes += extra.bytes;
        self.summary.zero_bytes += extra.zero_bytes;
        res.map(|_| self.summary)
    }

    /// Serves one request whose header was read.
    #[allow(clippy::too_many_arguments)]
    fn handle<S, F>(
        &mut self,
        stream: &mut S,
        req: Request,
        state: &mut ReceiveState,
        cur: &mut Current,
        limits: &Limits,
        target: &Target<'_>,
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
                let accepted = offered(&req.command_headers).intersection(limits.extensions);
                padding = accept_padding(accepted);
                self.summary.version = version;
                self.summary.extensions = accepted;
                *state = Started;
                Flow::Continue
            }
            (_, Established) => return Err(MigrationError::NotStarted { command }),
            (Command::Config, Started) => {
                let payload = read_payload(stream, req, limits.max_payload_bytes)?;
                on_payload(command, &payload)
                    .map_err(|reason| MigrationError::PayloadRefused { command, reason })?;
                self.summary.config_bytes = payload.len() as u64;
                self.vm_config = Some(payload);
                *state = Configured;
                target.session().open_memory(self.summary.extensions);
                Flow::Continue
            }
            (Command::Memory | Command::SparseMemory, Configured) => {
                let sparse = command == Command::SparseMemory;
                if sparse && !self.summary.extensions.contains(Extensions::ZERO_PAGES) {
                    return Err(MigrationError::NotNegotiated { command });
                }
                let t = receive_memory(
                    stream,
                    target,
                    &mut self.table,
                    req.length,
                    limits.max_table_bytes,
                    sparse,
                    &mut cur.payload,
                )?;
                self.add(&t);
                Flow::Continue
            }
            (Command::State, Configured) => {
                let payload = read_payload(stream, req, limits.max_payload_bytes)?;
                target.session().close_memory()?;
                on_payload(command, &payload)
                    .map_err(|reason| MigrationError::PayloadRefused { command, reason })?;
                self.summary.state_bytes = payload.len() as u64;
                self.vm_state = Some(payload);
                *state = StateReceived;
                Flow::Continue
            }
            (Command::PageHashes, Configured | StateReceived) => {
                if !self.summary.extensions.contains(Extensions::PAGE_HASHES) {
                    return Err(MigrationError::NotNegotiated { command });
                }
                expect_length(req, 8)?;
                send_page_hashes(stream, target)?;
                self.summary.page_hash_requests += 1;
                return Ok(Flow::Continue);
            }
            (Command::Complete | Command::CompletePaused, StateReceived) => {
                expect_length(req, 0)?;
                self.summary.paused = command == Command::CompletePaused;
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

    /// Counts a memory request received whole.
    fn add(&mut self, t: &MemoryTotals) {
        self.summary.memory_requests += t.requests;
        self.summary.ranges += t.ranges;
        self.summary.bytes += t.bytes;
        self.summary.zero_bytes += t.zero_bytes;
    }
}

/// Reads a `Config` or `State` payload as it arrives (the buffer grows
/// with the bytes received, not with the length claimed).
fn read_payload<S: Read + ?Sized>(
    stream: &mut S,
    req: Request,
    max: u64,
) -> Result<Vec<u8>, MigrationError> {
    let len = req.length;
    if len > max {
        return Err(MigrationError::PayloadTooLarge {
            command: req.command,
            len,
            max,
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

/// Reads a page-hashes request's page size and answers with the hashes of
/// `target`'s memory (held whole, so no other connection writes it
/// meanwhile).
fn send_page_hashes<S: Read + Write + ?Sized>(
    stream: &mut S,
    target: &Target<'_>,
) -> Result<(), MigrationError> {
    let mut b = [0u8; 8];
    read_full(stream, &mut b, "page size")?;
    let page_size = u64::from_le_bytes(b);
    if page_size == 0 {
        return Err(MigrationError::BadPageSize { page_size });
    }
    let size = target.size();
    let mut held = target.hold(0, size)?;
    let memory: &[u8] = held.bytes(0, size);
    let pages = page_count(size, page_size);
    Response::new(Status::Ok, pages * 4).write_to(stream)?;
    // Pages of more than usize::MAX bytes: the whole memory is one page.
    let ps = usize::try_from(page_size).unwrap_or(usize::MAX);
    let mut out = Vec::with_capacity(4096 * 4);
    for chunk in memory.chunks(ps.saturating_mul(4096).max(ps)) {
        out.clear();
        for page in chunk.chunks(ps) {
            out.extend_from_slice(&crc32c::checksum(page).to_le_bytes());
        }
        write_all(stream, &out)?;
    }
    stream.flush().map_err(|e| MigrationError::io(&e))
}

/// Ends a stream on a refused request: unless the stream itself failed
/// (truncated or an I/O error), reads and discards up to `limit` of the
/// `left` payload bytes the peer is still sending, then writes the error
/// response (best effort: the stream may be gone). Returns `err`.
pub(super) fn refuse<S: Read + Write + ?Sized>(
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
pub(super) struct BufStream<'s, S: ?Sized> {
    inner: &'s mut S,
    buf: Vec<u8>,
    pos: usize,
    filled: usize,
    /// Bytes delivered to the reader so far.
    consumed: u64,
}

impl<'s, S: Read + Write + ?Sized> BufStream<'s, S> {
    const CAPACITY: usize = 256 << 10;

    pub(super) fn new(inner: &'s mut S) -> Self {
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
