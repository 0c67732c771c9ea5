//! [`Receiver`]: the destination side of the migration stream.

use alloc::vec::Vec;
use std::io::{Read, Write};

use super::command::{Command, Status};
use super::error::MigrationError;
use super::source::page_count;
use super::wire::{check_range, decode_range, read_full, write_all, Request, Response};
use crate::crc32c;
use crate::dirty::WIRE_RANGE_BYTES;

/// The largest memory table a [`Receiver`] ever accepts by default: 1 GiB
/// (64 Mi ranges).
pub const MAX_TABLE_BYTES: u64 = 1 << 30;

/// What a [`Receiver`] received on one connection, up to
/// [`Command::Complete`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReceiveSummary {
    /// Requests served, `Start` and `Complete` included.
    pub requests: u64,
    /// [`Command::Memory`] requests.
    pub memory_requests: u64,
    /// Ranges in all memory tables.
    pub ranges: u64,
    /// Guest memory bytes received (the ranges' contents).
    pub bytes: u64,
    /// [`Command::PageHashes`] requests.
    pub page_hash_requests: u64,
}

/// What the serve loop does after a request.
enum Flow {
    Continue,
    Complete,
    Abandoned,
}

/// The destination side of Cloud Hypervisor's migration stream, for guest
/// memory: Cloud Hypervisor's `Vmm::vm_receive_migration` memory path
/// (`Start`, `Memory`..., `Complete`), plus spacekit's
/// [`Command::PageHashes`].
///
/// Guest memory is the slice given to [`Receiver::new`]: guest-physical
/// address `gpa` is byte `gpa` of the slice, so a range is accepted only if
/// it lies inside `0..memory.len()`.
///
/// [`Receiver::serve`] answers every request with a 16-byte [`Response`]:
/// [`Status::Ok`] (length 0; for page hashes, followed by them), or
/// [`Status::Error`] for a request it refuses, after which it returns the
/// typed error and serves nothing more on that stream.
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
///     let summary = Receiver::new(&mut memory).serve(&mut rx);
///     (summary, memory)
/// });
/// let mut table = MemoryRangeTable::new();
/// table.push(MemoryRange { gpa: 0, length: 64 * 1024 });
/// let mut sender = Sender::new();
/// sender.start(&mut tx)?;
/// sender.send_memory(&mut tx, &table, &source)?;
/// sender.complete(&mut tx)?;
/// let (summary, memory) = dest.join().unwrap();
/// assert_eq!(summary?.bytes, 64 * 1024);
/// assert_eq!(memory, source);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Receiver<'m> {
    memory: &'m mut [u8],
    /// The current request's table, reused across requests.
    table: Vec<u8>,
    max_table_bytes: u64,
}

impl<'m> Receiver<'m> {
    /// A receiver writing into `memory` (guest-physical addresses
    /// `0..memory.len()`), accepting tables of up to
    /// [`Receiver::default_max_table_bytes`] bytes.
    pub fn new(memory: &'m mut [u8]) -> Self {
        let max_table_bytes = Self::default_max_table_bytes(memory.len() as u64);
        Receiver {
            memory,
            table: Vec::new(),
            max_table_bytes,
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

    /// Guest memory.
    pub fn memory(&self) -> &[u8] {
        self.memory
    }

    /// Serves one migration on `stream` until [`Command::Complete`], and
    /// returns what it received.
    ///
    /// The requests accepted: [`Command::Start`] (first; a repeated `Start`
    /// is acknowledged), then any number of [`Command::Memory`] and
    /// [`Command::PageHashes`], then [`Command::Complete`];
    /// [`Command::Abandon`] at any time. Each memory table is validated whole
    /// — length a multiple of 16 and at most
    /// [`Receiver::max_table_bytes`], every range inside memory and none
    /// overflowing — before any byte of memory is written; then each range's
    /// contents are read straight into guest memory, in table order (ranges
    /// may overlap; the later one wins, as in Cloud Hypervisor).
    ///
    /// # Errors
    /// On any refused request the receiver first writes an error
    /// [`Response`] (best effort), then returns:
    /// [`MigrationError::UnknownCommand`], [`MigrationError::NotStarted`],
    /// [`MigrationError::Unsupported`] (`Config`, `State`, `MemoryFd`,
    /// `CompletePaused`), [`MigrationError::UnexpectedPayload`],
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
    pub fn serve<S: Read + Write + ?Sized>(
        &mut self,
        stream: &mut S,
    ) -> Result<ReceiveSummary, MigrationError> {
        let mut summary = ReceiveSummary::default();
        let mut started = false;
        // Reads go through one buffer, so a table of many small ranges costs
        // a few large reads instead of a system call per range (a range at
        // least as large as the buffer is read straight into memory).
        let mut buffered = BufStream::new(stream);
        let stream = &mut buffered;
        loop {
            let step = Request::read_from(stream).and_then(|req| {
                summary.requests += 1;
                self.handle(stream, req, &mut started, &mut summary)
            });
            match step {
                Ok(Flow::Continue) => {}
                Ok(Flow::Complete) => return Ok(summary),
                Ok(Flow::Abandoned) => return Err(MigrationError::Abandoned),
                Err(e) => {
                    // Best effort: the stream may be gone.
                    let _ = Response::error().write_to(stream);
                    let _ = stream.flush();
                    return Err(e);
                }
            }
        }
    }

    /// Serves one request whose header was read.
    fn handle<S: Read + Write + ?Sized>(
        &mut self,
        stream: &mut S,
        req: Request,
        started: &mut bool,
        summary: &mut ReceiveSummary,
    ) -> Result<Flow, MigrationError> {
        let flow = match req.command {
            Command::Start => {
                expect_length(req, 0)?;
                *started = true;
                Flow::Continue
            }
            Command::Abandon => {
                expect_length(req, 0)?;
                Flow::Abandoned
            }
            command @ (Command::Config
            | Command::State
            | Command::MemoryFd
            | Command::CompletePaused) => return Err(MigrationError::Unsupported { command }),
            command if !*started => return Err(MigrationError::NotStarted { command }),
            Command::Memory => {
                self.receive_memory(stream, req.length, summary)?;
                summary.memory_requests += 1;
                Flow::Continue
            }
            Command::Complete => {
                expect_length(req, 0)?;
                Flow::Complete
            }
            Command::PageHashes => {
                expect_length(req, 8)?;
                self.send_page_hashes(stream)?;
                summary.page_hash_requests += 1;
                return Ok(Flow::Continue);
            }
        };
        Response::ok().write_to(stream)?;
        stream.flush().map_err(|e| MigrationError::io(&e))?;
        Ok(flow)
    }

    /// Reads a memory request's table and contents (`len`: the table's
    /// length from the header).
    fn receive_memory<S: Read + ?Sized>(
        &mut self,
        stream: &mut S,
        len: u64,
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
}

impl<'s, S: Read + Write + ?Sized> BufStream<'s, S> {
    const CAPACITY: usize = 256 << 10;

    fn new(inner: &'s mut S) -> Self {
        BufStream {
            inner,
            buf: alloc::vec![0; Self::CAPACITY],
            pos: 0,
            filled: 0,
        }
    }
}

impl<S: Read + Write + ?Sized> Read for BufStream<'_, S> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.filled {
            if out.len() >= self.buf.len() {
                return self.inner.read(out);
            }
            self.filled = self.inner.read(&mut self.buf)?;
            self.pos = 0;
        }
        let n = out.len().min(self.filled - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
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
