//! The receiving side of one memory request (`Memory` or spacekit's
//! `SparseMemory`), on any connection: guest memory shared by the
//! connections of a migration through claims of disjoint spans, and the
//! reads that wait for the next byte without hanging when the migration
//! ends elsewhere.

use alloc::vec::Vec;
use core::marker::PhantomData;
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use super::error::MigrationError;
use super::session::{Claim, MemoryTotals, Session};
use super::wire::{check_range, decode_range, read_full};
use super::zero::{PAGES_PER_GROUP, ZERO_PAGE_BYTES};
use crate::dirty::WIRE_RANGE_BYTES;

/// Guest memory as the connections of one migration write it: byte `gpa`
/// is guest-physical address `gpa`; a thread reaches bytes only through a
/// [`Held`] span, and the [`Session`] never lets two held spans overlap.
pub(super) struct Target<'a> {
    ptr: *mut u8,
    len: usize,
    session: &'a Session,
    /// The memory is borrowed exclusively for `'a`: nothing else reads or
    /// writes it while the target exists.
    _memory: PhantomData<&'a mut [u8]>,
}

// SAFETY: a `Target` is the exclusive borrow of a `[u8]` (which is `Send`
// and `Sync`) split between threads: every access goes through a `Held`
// span, and the session's claims keep the spans of different holders
// disjoint, so two threads never touch the same byte at once.
unsafe impl Send for Target<'_> {}
// SAFETY: as for `Send`: shared references only hand out disjoint spans.
unsafe impl Sync for Target<'_> {}

impl<'a> Target<'a> {
    /// `memory` shared under `session`'s claims.
    pub(super) fn new(memory: &'a mut [u8], session: &'a Session) -> Self {
        Target {
            ptr: memory.as_mut_ptr(),
            len: memory.len(),
            session,
            _memory: PhantomData,
        }
    }

    /// Bytes of guest memory.
    pub(super) fn size(&self) -> u64 {
        self.len as u64
    }

    /// The session whose claims guard the memory.
    pub(super) fn session(&self) -> &'a Session {
        self.session
    }

    /// Holds `[start, end)` (inside memory) for this thread alone, waiting
    /// while another holds an overlapping span.
    ///
    /// # Errors
    /// [`MigrationError::Stopped`] when the migration ends while waiting.
    ///
    /// # Panics
    /// When the span is not inside memory (callers validate it first).
    pub(super) fn hold(&self, start: u64, end: u64) -> Result<Held<'_>, MigrationError> {
        assert!(
            start <= end && end <= self.len as u64,
            "span outside memory"
        );
        Ok(Held {
            ptr: self.ptr,
            claim: self.session.claim(start, end)?,
        })
    }
}

/// A span of guest memory held by one thread (see [`Target::hold`]).
pub(super) struct Held<'t> {
    ptr: *mut u8,
    claim: Claim<'t>,
}

impl Held<'_> {
    /// The `len` bytes at `gpa`, inside the held span.
    ///
    /// # Panics
    /// When they are not inside it.
    pub(super) fn bytes(&mut self, gpa: u64, len: u64) -> &mut [u8] {
        let end = gpa.checked_add(len).expect("span overflows");
        assert!(
            gpa >= self.claim.start && end <= self.claim.end,
            "bytes outside the held span"
        );
        // SAFETY: `[gpa, end)` lies in the held span, which `Target::hold`
        // checked lies inside the memory `ptr` points to (valid and borrowed
        // exclusively for the target's lifetime, which outlives this
        // `Held`); the session lets no other live claim overlap the span,
        // so no other thread accesses these bytes while the claim lives;
        // and the slice borrows `self` mutably, so this thread holds at most
        // one slice of the span at a time.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.add(gpa as usize), len as usize) }
    }
}

/// A stream whose reads that time out (a read timeout set on the socket)
/// are retried until data arrives, unless the migration has ended (or,
/// on the main connection, an extra connection failed) or nothing has
/// arrived for `idle` — so a thread blocked on one connection notices what
/// happens on the others. Without a session, a timeout is returned as is.
pub(super) struct Watched<'s, S: ?Sized> {
    inner: &'s mut S,
    session: Option<&'s Session>,
    main: bool,
    idle: Option<Duration>,
}

impl<'s, S: Read + Write + ?Sized> Watched<'s, S> {
    /// Watches `inner`'s reads for `session` (`main`: the main connection).
    pub(super) fn new(
        inner: &'s mut S,
        session: Option<&'s Session>,
        main: bool,
        idle: Option<Duration>,
    ) -> Self {
        Watched {
            inner,
            session,
            main,
            idle,
        }
    }
}

impl<S: Read + Write + ?Sized> Read for Watched<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let since = Instant::now();
        loop {
            match self.inner.read(buf) {
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    let Some(session) = self.session else {
                        return Err(e);
                    };
                    if session.ended() {
                        return Err(io::Error::new(
                            io::ErrorKind::ConnectionAborted,
                            "the migration ended",
                        ));
                    }
                    if self.main && session.failure().is_some() {
                        return Err(io::Error::other("an extra connection failed"));
                    }
                    if let Some(idle) = self.idle.filter(|&d| since.elapsed() >= d) {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            std::format!("nothing arrived for {} ms", idle.as_millis()),
                        ));
                    }
                }
                r => return r,
            }
        }
    }
}

impl<S: Read + Write + ?Sized> Write for Watched<'_, S> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.inner.write(data)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Receives one memory request's table and contents into `target`. `len`
/// is the table's length from the header; `payload` is set to the payload
/// bytes known to follow once the table is read (what a refusal drains: the
/// contents too for `Memory`, the table only for `SparseMemory`, whose
/// length depends on its masks).
///
/// The table is validated whole (length a multiple of 16 and at most
/// `max_table_bytes`, every range inside memory) before the span it covers
/// is held and any byte of memory is written. The totals are returned only
/// when the whole request arrived.
///
/// # Errors
/// [`MigrationError::BadTableLength`], [`MigrationError::TableTooLarge`],
/// [`MigrationError::RangeOverflow`], [`MigrationError::RangeOutsideMemory`],
/// [`MigrationError::BadZeroMask`], [`MigrationError::Truncated`],
/// [`MigrationError::Io`], [`MigrationError::Stopped`].
pub(super) fn receive_memory<S: Read + ?Sized>(
    stream: &mut S,
    target: &Target<'_>,
    table: &mut Vec<u8>,
    len: u64,
    max_table_bytes: u64,
    sparse: bool,
    payload: &mut u64,
) -> Result<MemoryTotals, MigrationError> {
    if !len.is_multiple_of(WIRE_RANGE_BYTES as u64) {
        return Err(MigrationError::BadTableLength { len });
    }
    if len > max_table_bytes {
        return Err(MigrationError::TableTooLarge {
            len,
            max: max_table_bytes,
        });
    }
    // Read as it arrives: the buffer grows with the bytes received, not
    // with the length claimed.
    table.clear();
    let res = (&mut *stream).take(len).read_to_end(table);
    let got = table.len() as u64;
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
    let ranges = || table.chunks_exact(WIRE_RANGE_BYTES).map(decode_range);
    if !sparse {
        *payload = ranges().fold(len, |sum, r| sum.saturating_add(r.length));
    }
    let memory_size = target.size();
    let (mut lo, mut hi) = (u64::MAX, 0);
    let mut totals = MemoryTotals {
        requests: 1,
        ..MemoryTotals::default()
    };
    for (index, r) in ranges().enumerate() {
        check_range(index, r, memory_size)?;
        if r.length > 0 {
            lo = lo.min(r.gpa);
            hi = hi.max(r.gpa + r.length);
        }
        totals.ranges += 1;
        totals.bytes += r.length;
    }
    let mut held = target.hold(lo.min(hi), hi)?;
    if !sparse {
        for r in ranges() {
            read_full(stream, held.bytes(r.gpa, r.length), "memory contents")?;
        }
        return Ok(totals);
    }
    let mut pages_left: u64 = ranges()
        .map(|r| r.length.div_ceil(ZERO_PAGE_BYTES as u64))
        .sum();
    let (mut mask, mut in_group) = (0u64, 0usize);
    for r in ranges() {
        let (mut at, end) = (r.gpa, r.gpa + r.length);
        while at < end {
            if in_group == 0 {
                let mut b = [0u8; 8];
                read_full(stream, &mut b, "zero mask")?;
                mask = u64::from_le_bytes(b);
                let pages = pages_left.min(PAGES_PER_GROUP as u64) as u32;
                if pages < 64 && mask >> pages != 0 {
                    return Err(MigrationError::BadZeroMask { mask, pages });
                }
            }
            let page = ZERO_PAGE_BYTES as u64;
            if mask & (1 << in_group) != 0 {
                let n = (end - at).min(page);
                let dst = held.bytes(at, n);
                // Only where the page is not zero already: a fresh
                // receiver's untouched memory reads as zeros without being
                // allocated, and stays unallocated.
                if !super::zero::is_zero(crate::arch::Level::detect(), dst) {
                    dst.fill(0);
                }
                totals.zero_bytes += n;
                at += n;
                pages_left -= 1;
                in_group = (in_group + 1) % PAGES_PER_GROUP;
                continue;
            }
            // The run of pages with contents from here, in this group and
            // this range: one read for all of them, not one per page.
            let run = ((!mask >> in_group).trailing_ones() as usize)
                .min(PAGES_PER_GROUP - in_group)
                .min((end - at).div_ceil(page) as usize);
            let n = (end - at).min(run as u64 * page);
            read_full(stream, held.bytes(at, n), "memory contents")?;
            at += n;
            pages_left -= run as u64;
            in_group = (in_group + run) % PAGES_PER_GROUP;
        }
    }
    Ok(totals)
}
