//! [`Sender`]: the source side of the migration stream.

use alloc::vec;
use alloc::vec::Vec;
use std::io::{Read, Write};

use super::command::{accepted, Command, Extensions, Status, PROTOCOL_VERSION};
use super::error::MigrationError;
use super::source::MemorySource;
use super::wire::{check_range, read_full, write_all, Request, Response, REQUEST_BYTES};
use super::zero::{is_zero, PAGES_PER_GROUP, ZERO_PAGE_BYTES};
use crate::arch::Level;
use crate::dirty::{MemoryRangeTable, WIRE_RANGE_BYTES};

/// The default bounce buffer of a [`Sender`]: 1 MiB.
pub const DEFAULT_BUFFER_BYTES: usize = 1 << 20;

/// What one [`Sender::send_memory`] (or [`Sender::send_memory_parallel`])
/// sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SendStats {
    /// Ranges in the table(s) sent (a range cut between two connections
    /// counts once per part).
    pub ranges: u64,
    /// Guest memory bytes the round covers (the ranges' lengths): what the
    /// receiver holds afterwards, [`SendStats::payload_bytes`] plus
    /// [`SendStats::zero_bytes`].
    pub bytes: u64,
    /// Guest memory bytes sent as payload (all of [`SendStats::bytes`] in
    /// the plain protocol).
    pub payload_bytes: u64,
    /// Guest memory bytes found all zero and sent without payload (only with
    /// [`Extensions::ZERO_PAGES`]).
    pub zero_bytes: u64,
    /// Bytes written to the stream(s): headers, tables, zero masks and
    /// contents.
    pub wire_bytes: u64,
    /// Memory requests sent (one per connection that carried a part).
    pub requests: u64,
}

impl SendStats {
    /// Adds `other`'s counts to `self`'s.
    fn add(&mut self, other: &SendStats) {
        self.ranges += other.ranges;
        self.bytes += other.bytes;
        self.payload_bytes += other.payload_bytes;
        self.zero_bytes += other.zero_bytes;
        self.wire_bytes += other.wire_bytes;
        self.requests += other.requests;
    }
}

/// The source side of Cloud Hypervisor's migration stream: the requests of
/// Cloud Hypervisor's `send_migration`, in its order — [`Sender::start`]
/// (protocol version [`PROTOCOL_VERSION`]), [`Sender::send_config`] with
/// the VMM's own configuration payload, one [`Sender::send_memory`] per
/// pre-copy round (or per part of a partitioned round),
/// [`Sender::send_state`] with the VMM's own state payload, then
/// [`Sender::complete`] or [`Sender::complete_paused`]; or
/// [`Sender::abandon`] — plus spacekit's [`Command::PageHashes`] where the
/// receiver accepted it.
///
/// [`Sender::start`] offers spacekit's [`Extensions`] in header bytes Cloud
/// Hypervisor ignores; [`Sender::extensions`] then says which ones the
/// receiver accepted (none for a plain Cloud Hypervisor receiver), and an
/// extension request that was not accepted is refused before anything is
/// written ([`MigrationError::NotNegotiated`]), so a plain peer never sees
/// one.
///
/// Each call writes one request, then waits for the receiver's
/// [`Response`]; any status but [`Status::Ok`] is
/// [`MigrationError::Rejected`]. Guest memory is copied out of a
/// [`MemorySource`] through a bounce buffer the sender keeps and reuses (so
/// memory a vCPU is writing is read once per round, a chunk at a time).
/// See [`Receiver`](super::Receiver) for an example.
#[derive(Debug)]
pub struct Sender {
    buf: Vec<u8>,
    /// One bounce buffer per extra connection of
    /// [`Sender::send_memory_parallel`], allocated on first use.
    lanes: Vec<Vec<u8>>,
    offer: Extensions,
    accepted: Extensions,
    level: Level,
}

impl Default for Sender {
    fn default() -> Self {
        Self::new()
    }
}

impl Sender {
    /// A sender with a [`DEFAULT_BUFFER_BYTES`] bounce buffer.
    pub fn new() -> Self {
        Self::with_buffer_size(DEFAULT_BUFFER_BYTES)
    }

    /// A sender with a bounce buffer of `bytes` bytes (at least 16).
    pub fn with_buffer_size(bytes: usize) -> Self {
        Sender {
            buf: vec![0; bytes.max(WIRE_RANGE_BYTES)],
            lanes: Vec::new(),
            offer: Extensions::PAGE_HASHES,
            accepted: Extensions::NONE,
            level: Level::detect(),
        }
    }

    /// Sets the extensions [`Sender::start`] offers ([`Extensions::NONE`]:
    /// send exactly Cloud Hypervisor's `Start`; [`Extensions::ALL`]: page
    /// hashes and zero pages). The default offers
    /// [`Extensions::PAGE_HASHES`], as before zero pages existed: offer
    /// [`Extensions::ZERO_PAGES`] to skip zero pages (a Cloud Hypervisor
    /// receiver never accepts it, so offering it is always safe).
    pub fn with_extensions(mut self, offer: Extensions) -> Self {
        self.offer = offer;
        self
    }

    /// Runs the zero-page test at `level` rather than the best one
    /// ([`Level::detect`]); for tests and benchmarks of the fallback.
    pub fn with_level(mut self, level: Level) -> Self {
        self.level = level;
        self
    }

    /// The bounce buffer's size in bytes.
    pub fn buffer_size(&self) -> usize {
        self.buf.len()
    }

    /// The extensions the receiver accepted in its answer to the last
    /// [`Sender::start`] (none before it, and none from a plain Cloud
    /// Hypervisor receiver).
    pub fn extensions(&self) -> Extensions {
        self.accepted
    }

    /// Sends [`Command::Start`] with protocol version [`PROTOCOL_VERSION`]
    /// and the offered extensions, waits for the receiver's answer, and
    /// keeps the extensions it accepted ([`Sender::extensions`]).
    ///
    /// # Errors
    /// [`MigrationError::Rejected`] (a receiver that does not support the
    /// version refuses it), [`MigrationError::BadResponseLength`],
    /// [`MigrationError::UnknownStatus`], [`MigrationError::Truncated`],
    /// [`MigrationError::Io`].
    pub fn start<S: Read + Write + ?Sized>(
        &mut self,
        stream: &mut S,
    ) -> Result<(), MigrationError> {
        self.accepted = Extensions::NONE;
        let cmd = Command::Start;
        send(
            stream,
            &Request::start(PROTOCOL_VERSION, self.offer).to_bytes(),
            cmd,
        )?;
        flush(stream, cmd)?;
        let resp = expect_ok(stream, cmd)?;
        self.accepted = accepted(&resp.padding).intersection(self.offer);
        Ok(())
    }

    /// Sends [`Command::Config`] with the VMM's configuration `payload`
    /// (opaque to spacekit; Cloud Hypervisor's receiver expects its
    /// `VmMigrationConfig` as JSON) and waits for the receiver's answer.
    /// Cloud Hypervisor's order: once, after `Start`, before any memory.
    ///
    /// # Errors
    /// As [`Sender::start`].
    pub fn send_config<S: Read + Write + ?Sized>(
        &mut self,
        stream: &mut S,
        payload: &[u8],
    ) -> Result<(), MigrationError> {
        with_payload(stream, Command::Config, payload)
    }

    /// Sends [`Command::State`] with the VMM's device and vCPU state
    /// `payload` (opaque to spacekit; Cloud Hypervisor's receiver expects
    /// its snapshot as JSON) and waits for the receiver's answer. Cloud
    /// Hypervisor's order: once, after the last memory round.
    ///
    /// # Errors
    /// As [`Sender::start`].
    pub fn send_state<S: Read + Write + ?Sized>(
        &mut self,
        stream: &mut S,
        payload: &[u8],
    ) -> Result<(), MigrationError> {
        with_payload(stream, Command::State, payload)
    }

    /// Sends [`Command::Complete`] (the destination VM is to run) and
    /// waits for the receiver's answer.
    ///
    /// # Errors
    /// As [`Sender::start`].
    pub fn complete<S: Read + Write + ?Sized>(
        &mut self,
        stream: &mut S,
    ) -> Result<(), MigrationError> {
        simple(stream, Command::Complete)
    }

    /// Sends [`Command::CompletePaused`] (the source VM was paused, so the
    /// destination stays paused) and waits for the receiver's answer.
    ///
    /// # Errors
    /// As [`Sender::start`].
    pub fn complete_paused<S: Read + Write + ?Sized>(
        &mut self,
        stream: &mut S,
    ) -> Result<(), MigrationError> {
        simple(stream, Command::CompletePaused)
    }

    /// Sends [`Command::Abandon`] and waits for the receiver's answer.
    ///
    /// # Errors
    /// As [`Sender::start`].
    pub fn abandon<S: Read + Write + ?Sized>(
        &mut self,
        stream: &mut S,
    ) -> Result<(), MigrationError> {
        simple(stream, Command::Abandon)
    }

    /// Sends one pre-copy round: a [`Command::Memory`] request with `table`
    /// (as [`MemoryRangeTable::to_bytes`] lays it out), then the contents of
    /// each range in table order, read from `source`; then waits for the
    /// receiver's answer.
    ///
    /// The table is checked against `source.size()` first: a range that
    /// overflows or passes the end of memory is refused before anything is
    /// written to the stream. An empty table is sent as a request with no
    /// ranges (Cloud Hypervisor's sender skips empty rounds instead).
    ///
    /// When the receiver accepted [`Extensions::ZERO_PAGES`], the request is
    /// spacekit's [`Command::SparseMemory`] instead: each 4 KiB page is
    /// tested as it is copied out of `source` (a SIMD test at the level
    /// [`Level::detect`] found), and the all-zero ones are sent as a bit
    /// without their bytes ([`SendStats::zero_bytes`]). A plain Cloud
    /// Hypervisor receiver never accepts it, so it always gets `Memory`.
    ///
    /// # Errors
    /// [`MigrationError::RangeOverflow`] and
    /// [`MigrationError::RangeOutsideMemory`] (nothing written); then as
    /// [`Sender::start`].
    pub fn send_memory<S, M>(
        &mut self,
        stream: &mut S,
        table: &MemoryRangeTable,
        source: &M,
    ) -> Result<SendStats, MigrationError>
    where
        S: Read + Write + ?Sized,
        M: MemorySource + ?Sized,
    {
        check_table(table, source.size())?;
        let sparse = self.accepted.contains(Extensions::ZERO_PAGES);
        send_table(stream, table, source, &mut self.buf, sparse, self.level)
    }

    /// Makes `stream`, a new connection to the receiver's listener, an
    /// extra memory connection of this migration: writes the two-byte
    /// connection role [`MEMORY_CONNECTION_ROLE`] that Cloud Hypervisor's
    /// receiver (and spacekit's [`Receiver::serve_connections`]) expect
    /// first. Then pass it to [`Sender::send_memory_parallel`].
    ///
    /// [`MEMORY_CONNECTION_ROLE`]: super::connections::MEMORY_CONNECTION_ROLE
    /// [`Receiver::serve_connections`]: super::receiver::Receiver::serve_connections
    ///
    /// # Errors
    /// [`MigrationError::Io`].
    pub fn attach<S: Write + ?Sized>(&mut self, stream: &mut S) -> Result<(), MigrationError> {
        write_all(
            stream,
            &super::connections::MEMORY_CONNECTION_ROLE.to_le_bytes(),
        )?;
        stream.flush().map_err(|e| MigrationError::io(&e))
    }

    /// Sends one pre-copy round over several connections at once: `table`
    /// is cut, in address order, into up to `streams.len()` parts of about
    /// equal bytes (4 KiB multiples, ranges split where needed), and each
    /// part goes as one memory request on its own stream, on its own
    /// thread, with its own bounce buffer; returns when every stream's
    /// answer has arrived. The streams are extra connections
    /// ([`Sender::attach`]) — Cloud Hypervisor's own sender puts all memory
    /// on them when it uses more than one connection — or the main one.
    /// Zero pages are skipped on each as in [`Sender::send_memory`] when
    /// negotiated at `Start`. An empty table sends nothing.
    ///
    /// Send the last round (the VM paused) with [`Sender::send_memory`] on
    /// the main connection: one request, the fewest round trips.
    ///
    /// # Errors
    /// [`MigrationError::NoConnections`] for no stream;
    /// [`MigrationError::RangeOverflow`] and
    /// [`MigrationError::RangeOutsideMemory`] (nothing written); otherwise
    /// the first stream's error (in stream order), once every stream's
    /// thread has finished, as [`Sender::send_memory`]. A panic of `source`
    /// on a thread is resumed on the caller's.
    pub fn send_memory_parallel<S, M>(
        &mut self,
        streams: &mut [S],
        table: &MemoryRangeTable,
        source: &M,
    ) -> Result<SendStats, MigrationError>
    where
        S: Read + Write + Send,
        M: MemorySource + Sync + ?Sized,
    {
        if streams.is_empty() {
            return Err(MigrationError::NoConnections);
        }
        check_table(table, source.size())?;
        let parts = split_even(table, streams.len());
        let lane_bytes = self.buf.len();
        while self.lanes.len() < parts.len() {
            self.lanes.push(vec![0; lane_bytes]);
        }
        let sparse = self.accepted.contains(Extensions::ZERO_PAGES);
        let level = self.level;
        let results: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = streams
                .iter_mut()
                .zip(self.lanes.iter_mut())
                .zip(parts.iter())
                .map(|((s, buf), part)| {
                    scope.spawn(move || send_table(s, part, source, buf, sparse, level))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        let mut stats = SendStats::default();
        for r in results {
            stats.add(&r?);
        }
        Ok(stats)
    }

    /// Asks the receiver for the standard CRC-32C of each `page_size`-byte
    /// page of its memory (spacekit's [`Command::PageHashes`], only when the
    /// receiver accepted [`Extensions::PAGE_HASHES`] at `Start`), to compare
    /// with [`hash_pages`](super::hash_pages) of the source through
    /// [`diff_pages`](super::diff_pages).
    ///
    /// # Errors
    /// [`MigrationError::NotNegotiated`] when the receiver did not accept
    /// the extension (a plain Cloud Hypervisor receiver; nothing written);
    /// [`MigrationError::BadPageSize`] for 0 (nothing written);
    /// [`MigrationError::BadResponseLength`] for an answer that is not a
    /// whole number of hashes; then as [`Sender::start`].
    pub fn page_hashes<S: Read + Write + ?Sized>(
        &mut self,
        stream: &mut S,
        page_size: u64,
    ) -> Result<Vec<u32>, MigrationError> {
        if !self.accepted.contains(Extensions::PAGE_HASHES) {
            return Err(MigrationError::NotNegotiated {
                command: Command::PageHashes,
            });
        }
        if page_size == 0 {
            return Err(MigrationError::BadPageSize { page_size });
        }
        let mut req = [0u8; REQUEST_BYTES + 8];
        req[..REQUEST_BYTES].copy_from_slice(&Request::new(Command::PageHashes, 8).to_bytes());
        req[REQUEST_BYTES..].copy_from_slice(&page_size.to_le_bytes());
        send(stream, &req, Command::PageHashes)?;
        flush(stream, Command::PageHashes)?;
        let resp = Response::read_from(stream)?;
        if resp.status != Status::Ok {
            return Err(MigrationError::Rejected {
                status: resp.status,
                command: Command::PageHashes,
            });
        }
        if !resp.length.is_multiple_of(4) {
            return Err(MigrationError::BadResponseLength {
                command: Command::PageHashes,
                length: resp.length,
            });
        }
        // Read as it arrives: the vector grows with the bytes received, not
        // with the length claimed.
        let mut hashes = Vec::new();
        let mut left = resp.length;
        let whole = self.buf.len() / 4 * 4;
        let chunk = &mut self.buf[..whole];
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            read_full(stream, &mut chunk[..n], "page hashes").map_err(|e| match e {
                MigrationError::Truncated { what, got, .. } => MigrationError::Truncated {
                    what,
                    expected: resp.length,
                    got: resp.length - left + got,
                },
                e => e,
            })?;
            hashes.extend(
                chunk[..n]
                    .chunks_exact(4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            );
            left -= n as u64;
        }
        Ok(hashes)
    }
}

/// Sends a request without payload and waits for an empty [`Status::Ok`].
fn simple<S: Read + Write + ?Sized>(
    stream: &mut S,
    command: Command,
) -> Result<(), MigrationError> {
    send(stream, &Request::new(command, 0).to_bytes(), command)?;
    flush(stream, command)?;
    expect_ok(stream, command).map(|_| ())
}

/// Sends a request with `payload` and waits for an empty [`Status::Ok`].
fn with_payload<S: Read + Write + ?Sized>(
    stream: &mut S,
    command: Command,
    payload: &[u8],
) -> Result<(), MigrationError> {
    let header = Request::new(command, payload.len() as u64).to_bytes();
    send(stream, &header, command)?;
    send(stream, payload, command)?;
    flush(stream, command)?;
    expect_ok(stream, command).map(|_| ())
}

/// Writes `bytes` of a `command` request. A receiver that refuses a
/// request answers with an error response and closes the stream, so a
/// write that fails because the peer is gone (broken pipe, connection reset
/// or aborted) is followed by an attempt to read that answer: an error
/// response found there is [`MigrationError::Rejected`], anything else the
/// write's own [`MigrationError::Io`].
fn send<S: Read + Write + ?Sized>(
    stream: &mut S,
    bytes: &[u8],
    command: Command,
) -> Result<(), MigrationError> {
    write_all(stream, bytes).map_err(|e| rejected_or(stream, command, e))
}

/// Flushes the stream, as [`send`] writes.
fn flush<S: Read + Write + ?Sized>(stream: &mut S, command: Command) -> Result<(), MigrationError> {
    stream
        .flush()
        .map_err(|e| rejected_or(stream, command, MigrationError::io(&e)))
}

/// [`MigrationError::Rejected`] if the receiver's answer can be read and is
/// not [`Status::Ok`]; `err` otherwise.
fn rejected_or<S: Read + ?Sized>(
    stream: &mut S,
    command: Command,
    err: MigrationError,
) -> MigrationError {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
    let peer_gone = matches!(
        err,
        MigrationError::Io {
            kind: BrokenPipe | ConnectionReset | ConnectionAborted,
            ..
        }
    );
    if !peer_gone {
        return err;
    }
    match Response::read_from(stream) {
        Ok(resp) if resp.status != Status::Ok => MigrationError::Rejected {
            status: resp.status,
            command,
        },
        _ => err,
    }
}

/// Reads the answer to `command` and requires an empty [`Status::Ok`];
/// returns it (its padding carries the extensions accepted at `Start`).
fn expect_ok<S: Read + ?Sized>(
    stream: &mut S,
    command: Command,
) -> Result<Response, MigrationError> {
    let resp = Response::read_from(stream)?;
    if resp.status != Status::Ok {
        return Err(MigrationError::Rejected {
            status: resp.status,
            command,
        });
    }
    if resp.length != 0 {
        return Err(MigrationError::BadResponseLength {
            command,
            length: resp.length,
        });
    }
    Ok(resp)
}

/// Checks every range of `table` against memory of `memory_size` bytes.
///
/// # Errors
/// [`MigrationError::RangeOverflow`], [`MigrationError::RangeOutsideMemory`].
pub(super) fn check_table(
    table: &MemoryRangeTable,
    memory_size: u64,
) -> Result<(), MigrationError> {
    for (index, r) in table.ranges().iter().enumerate() {
        check_range(index, *r, memory_size)?;
    }
    Ok(())
}

/// Sends `table` (already checked against `source`) as one `Memory`
/// request, or as one [`Command::SparseMemory`] request when `sparse`,
/// through the bounce buffer `buf`, and waits for the answer.
pub(super) fn send_table<S, M>(
    stream: &mut S,
    table: &MemoryRangeTable,
    source: &M,
    buf: &mut Vec<u8>,
    sparse: bool,
    level: Level,
) -> Result<SendStats, MigrationError>
where
    S: Read + Write + ?Sized,
    M: MemorySource + ?Sized,
{
    let table_bytes = (table.len() * WIRE_RANGE_BYTES) as u64;
    let mut stats = SendStats {
        ranges: table.len() as u64,
        bytes: table.total_bytes(),
        wire_bytes: REQUEST_BYTES as u64 + table_bytes,
        requests: 1,
        ..SendStats::default()
    };
    let cmd = if sparse {
        Command::SparseMemory
    } else {
        Command::Memory
    };
    // A sparse group (its mask and up to 64 pages) is built whole in the
    // buffer before it is written.
    let group_bytes = 8 + PAGES_PER_GROUP * ZERO_PAGE_BYTES;
    if sparse && buf.len() < group_bytes {
        buf.resize(group_bytes, 0);
    }
    // Header and table through the bounce buffer, whole entries at a time.
    buf[..REQUEST_BYTES].copy_from_slice(&Request::new(cmd, table_bytes).to_bytes());
    let mut fill = REQUEST_BYTES;
    for r in table.ranges() {
        if fill + WIRE_RANGE_BYTES > buf.len() {
            send(stream, &buf[..fill], cmd)?;
            fill = 0;
        }
        buf[fill..fill + 8].copy_from_slice(&r.gpa.to_le_bytes());
        buf[fill + 8..fill + 16].copy_from_slice(&r.length.to_le_bytes());
        fill += WIRE_RANGE_BYTES;
    }
    send(stream, &buf[..fill], cmd)?;
    if sparse {
        send_sparse_contents(stream, table, source, buf, level, &mut stats)?;
    } else {
        send_contents(stream, table, source, buf)?;
        stats.payload_bytes = stats.bytes;
    }
    stats.wire_bytes += stats.payload_bytes;
    flush(stream, cmd)?;
    expect_ok(stream, cmd)?;
    Ok(stats)
}

/// The contents of `table`'s ranges, packed a buffer at a time across
/// ranges: a table of many small ranges costs a write per buffer, not per
/// range.
fn send_contents<S, M>(
    stream: &mut S,
    table: &MemoryRangeTable,
    source: &M,
    buf: &mut [u8],
) -> Result<(), MigrationError>
where
    S: Read + Write + ?Sized,
    M: MemorySource + ?Sized,
{
    let cmd = Command::Memory;
    let mut fill = 0;
    for r in table.ranges() {
        let mut at = r.gpa;
        let end = r.gpa + r.length;
        while at < end {
            let n = (end - at).min((buf.len() - fill) as u64) as usize;
            source.copy_out(at, &mut buf[fill..fill + n]);
            fill += n;
            at += n as u64;
            if fill == buf.len() {
                send(stream, &buf[..fill], cmd)?;
                fill = 0;
            }
        }
    }
    if fill > 0 {
        send(stream, &buf[..fill], cmd)?;
    }
    Ok(())
}

/// The contents of `table`'s ranges in [`Command::SparseMemory`]'s groups:
/// the pages are copied out up to a group at a time straight into the
/// request being built, each page is tested there, and a zero page is
/// dropped (the next page moves down over it), so what is sent is exactly
/// what was tested, even while a vCPU writes the page, and a page with
/// contents is copied once. One write carries as many whole groups of 64
/// pages as the buffer holds.
fn send_sparse_contents<S, M>(
    stream: &mut S,
    table: &MemoryRangeTable,
    source: &M,
    buf: &mut [u8],
    level: Level,
    stats: &mut SendStats,
) -> Result<(), MigrationError>
where
    S: Read + Write + ?Sized,
    M: MemorySource + ?Sized,
{
    let cmd = Command::SparseMemory;
    let page_bytes = ZERO_PAGE_BYTES as u64;
    let group_bytes = 8 + PAGES_PER_GROUP * ZERO_PAGE_BYTES;
    let mut mask = 0u64;
    let mut pages = 0;
    // The group being built starts at `g0` (its mask) and its pages end at
    // `fill`; finished groups before `g0` wait while another whole group
    // fits, so one write carries as many groups as the buffer holds.
    let mut g0 = 0;
    let mut fill = 8;
    for r in table.ranges() {
        let mut at = r.gpa;
        let end = r.gpa + r.length;
        while at < end {
            // What is left of this group, within this range: copied out
            // where the group's next page goes (the buffer holds a whole
            // group after its mask).
            let room = (PAGES_PER_GROUP - pages) as u64 * page_bytes;
            let chunk = (end - at).min(room) as usize;
            let base = fill;
            source.copy_out(at, &mut buf[base..base + chunk]);
            for from in (base..base + chunk).step_by(ZERO_PAGE_BYTES) {
                let n = (base + chunk - from).min(ZERO_PAGE_BYTES);
                if is_zero(level, &buf[from..from + n]) {
                    mask |= 1 << pages;
                    stats.zero_bytes += n as u64;
                } else {
                    if from != fill {
                        buf.copy_within(from..from + n, fill);
                    }
                    fill += n;
                    stats.payload_bytes += n as u64;
                }
                pages += 1;
            }
            at += chunk as u64;
            if pages == PAGES_PER_GROUP {
                buf[g0..g0 + 8].copy_from_slice(&mask.to_le_bytes());
                stats.wire_bytes += 8;
                (mask, pages) = (0, 0);
                if buf.len() - fill < group_bytes {
                    send(stream, &buf[..fill], cmd)?;
                    fill = 0;
                }
                g0 = fill;
                fill += 8;
            }
        }
    }
    if pages > 0 {
        buf[g0..g0 + 8].copy_from_slice(&mask.to_le_bytes());
        stats.wire_bytes += 8;
    } else {
        fill = g0;
    }
    if fill > 0 {
        send(stream, &buf[..fill], cmd)?;
    }
    Ok(())
}

/// `table` cut, in address order, into at most `n` parts of about equal
/// bytes (each a multiple of 4 KiB but the last); none for an empty table.
pub(super) fn split_even(table: &MemoryRangeTable, n: usize) -> Vec<MemoryRangeTable> {
    let total = table.total_bytes();
    if total == 0 || n == 0 {
        return Vec::new();
    }
    let per = total
        .div_ceil(n as u64)
        .next_multiple_of(ZERO_PAGE_BYTES as u64);
    table.partition(per)
}
