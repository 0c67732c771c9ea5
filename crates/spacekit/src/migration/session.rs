//! What the connections of one receiving migration share: which memory
//! spans are being written (so two connections never write the same bytes
//! at once), how many memory requests are in progress on the extra
//! connections, whether memory requests are allowed, the first failure,
//! and the totals of the memory requests that completed.
//!
//! One mutex and one condition variable; loom's under `--cfg loom`
//! (`tests/migration_loom.rs` model-checks the claims and the close of
//! memory against requests starting on other connections).

#[cfg(loom)]
use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
use std::sync::{Condvar, Mutex, MutexGuard};

use alloc::boxed::Box;
use alloc::vec::Vec;

use super::command::Extensions;
use super::error::MigrationError;

/// Memory counted by a receiver: only whole requests are added.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryTotals {
    /// Memory requests (`Memory` and `SparseMemory`).
    pub requests: u64,
    /// Ranges in their tables.
    pub ranges: u64,
    /// Guest memory bytes they covered.
    pub bytes: u64,
    /// Of those, bytes written as zero pages without payload.
    pub zero_bytes: u64,
}

impl MemoryTotals {
    /// Adds `o`'s counts.
    pub(super) fn add(&mut self, o: &MemoryTotals) {
        self.requests += o.requests;
        self.ranges += o.ranges;
        self.bytes += o.bytes;
        self.zero_bytes += o.zero_bytes;
    }
}

#[derive(Debug, Default)]
struct State {
    /// Spans `[start, end)` being written or read, with their claim ids.
    claims: Vec<(u64, u64, u64)>,
    next_id: u64,
    /// Memory requests in progress on extra connections.
    busy: usize,
    /// `Config` accepted and `State` not yet: memory requests are allowed.
    memory_open: bool,
    /// The extensions accepted on the main connection.
    extensions: Extensions,
    /// The main connection finished (successfully or not).
    ended: bool,
    /// The first failure of an extra connection.
    failure: Option<MigrationError>,
    /// Whole memory requests received on extra connections.
    totals: MemoryTotals,
}

/// The shared state of one receiving migration (see the module docs).
#[doc(hidden)]
pub struct Session {
    state: Mutex<State>,
    cond: Condvar,
}

impl core::fmt::Debug for Session {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Session").finish_non_exhaustive()
    }
}

impl Default for Session {
    fn default() -> Self {
        Self::new()
    }
}

/// A claimed span; released when dropped.
#[doc(hidden)]
#[derive(Debug)]
pub struct Claim<'s> {
    session: &'s Session,
    id: u64,
    /// The span claimed.
    pub start: u64,
    /// Its end (exclusive).
    pub end: u64,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let mut st = self.session.lock();
        st.claims.retain(|c| c.2 != self.id);
        drop(st);
        self.session.cond.notify_all();
    }
}

impl Session {
    /// A session with memory closed, nothing claimed.
    pub fn new() -> Self {
        Session {
            state: Mutex::new(State::default()),
            cond: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A thread that panicked holding the lock left the state as it was
        // between two whole updates: every update is a few assignments.
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Claims `[start, end)` for this thread alone: waits while a span that
    /// overlaps it is claimed by another. An empty span is claimed at once.
    ///
    /// # Errors
    /// [`MigrationError::Stopped`] when the session ended while waiting.
    pub fn claim(&self, start: u64, end: u64) -> Result<Claim<'_>, MigrationError> {
        let mut st = self.lock();
        loop {
            if st.ended {
                return Err(MigrationError::Stopped);
            }
            let overlaps = start < end && st.claims.iter().any(|c| c.0 < end && start < c.1);
            if !overlaps {
                break;
            }
            st = match self.cond.wait(st) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
        }
        let id = st.next_id;
        st.next_id += 1;
        st.claims.push((start, end, id));
        Ok(Claim {
            session: self,
            id,
            start,
            end,
        })
    }

    /// The main connection accepted `Config` with `extensions`: memory
    /// requests may come on extra connections.
    pub fn open_memory(&self, extensions: Extensions) {
        let mut st = self.lock();
        st.memory_open = true;
        st.extensions = extensions;
    }

    /// An extra connection read the first byte of a request: counts it in
    /// progress and returns the extensions the main connection accepted.
    ///
    /// # Errors
    /// [`MigrationError::Stopped`] after [`Session::end`];
    /// [`MigrationError::MemoryClosed`] before `Config` or after `State`.
    pub fn begin_request(&self) -> Result<Extensions, MigrationError> {
        let mut st = self.lock();
        if st.ended {
            return Err(MigrationError::Stopped);
        }
        if !st.memory_open {
            return Err(MigrationError::MemoryClosed);
        }
        st.busy += 1;
        Ok(st.extensions)
    }

    /// Ends a request [`Session::begin_request`] counted; `done` holds its
    /// memory when it was received whole.
    pub fn end_request(&self, done: Option<&MemoryTotals>) {
        let mut st = self.lock();
        st.busy = st.busy.saturating_sub(1);
        if let Some(t) = done {
            st.totals.add(t);
        }
    }

    /// Records the failure of extra connection `index` (the first one is
    /// kept) and wakes every waiter.
    pub fn fail(&self, index: usize, error: MigrationError) {
        let mut st = self.lock();
        if st.failure.is_none() {
            st.failure = Some(MigrationError::Connection {
                index,
                error: Box::new(error),
            });
        }
        drop(st);
        self.cond.notify_all();
    }

    /// The first failure of an extra connection.
    pub fn failure(&self) -> Option<MigrationError> {
        self.lock().failure.clone()
    }

    /// The main connection accepted `State`: no memory request may start
    /// after this, and none may be in progress.
    ///
    /// # Errors
    /// The first failure of an extra connection;
    /// [`MigrationError::MemoryInFlight`] when a memory request is in
    /// progress on an extra connection (memory stays open).
    pub fn close_memory(&self) -> Result<(), MigrationError> {
        let mut st = self.lock();
        if let Some(e) = &st.failure {
            return Err(e.clone());
        }
        if st.busy > 0 {
            return Err(MigrationError::MemoryInFlight { requests: st.busy });
        }
        st.memory_open = false;
        Ok(())
    }

    /// The main connection finished: waiting claims and new requests fail,
    /// extra connections stop at their next read.
    pub fn end(&self) {
        self.lock().ended = true;
        self.cond.notify_all();
    }

    /// Whether [`Session::end`] was called.
    pub fn ended(&self) -> bool {
        self.lock().ended
    }

    /// The memory requests the extra connections received whole.
    pub fn totals(&self) -> MemoryTotals {
        self.lock().totals
    }
}
