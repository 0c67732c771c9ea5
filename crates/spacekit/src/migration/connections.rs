//! Several connections per migration, in Cloud Hypervisor's scheme
//! (its "Multiple TCP Connections for Live Migrations" change):
//!
//! * the *main* connection carries the whole protocol — `Start`, `Config`,
//!   memory, `State`, `Complete` — exactly as with one connection;
//! * each *extra* connection is opened to the same listener and begins
//!   with a two-byte little-endian connection role, 1 for a pre-copy memory
//!   connection ([`MEMORY_CONNECTION_ROLE`]; Cloud Hypervisor's 2 is a
//!   post-copy fault connection, which spacekit does not serve, and 0 is
//!   invalid); then it carries only memory requests, each answered as on
//!   the main connection, and it ends with the sender closing it between
//!   requests;
//! * the receiver accepts extra connections once the main connection's
//!   `Config` is accepted and until its `State`; memory requests may arrive
//!   on every connection at once and each is written where its table says.
//!   The sender waits for every answer of a round before it sends the
//!   next round or `State`.
//!
//! Nothing is negotiated: the role bytes are Cloud Hypervisor's own, so a
//! spacekit sender's extra connections work with Cloud Hypervisor's
//! receiver and the other way round. Spacekit's extensions accepted on the
//! main connection (zero pages) hold on its extra connections too.
//!
//! spacekit's receiver holds each request's span of memory for its
//! connection alone while it writes it: two connections whose tables
//! overlap take turns, so memory is never written from two threads at once
//! (whatever a sender sends); and it refuses `State` while a memory request
//! is still in progress on an extra connection
//! ([`MigrationError::MemoryInFlight`]), so it never acknowledges a
//! migration whose memory is not whole.

use alloc::vec::Vec;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
#[cfg(unix)]
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use super::command::{Command, Extensions};
use super::error::MigrationError;
use super::inbound::{receive_memory, Target, Watched};
use super::receiver::{refuse, BufStream, Limits, ReceiveSummary, Receiver};
use super::session::{MemoryTotals, Session};
use super::wire::{read_full, Request, Response, REQUEST_BYTES};

/// The connection role that begins an extra memory connection: Cloud
/// Hypervisor's `ConnectionRole::PrecopyMemory`, sent as a little-endian
/// `u16` (see [`Sender::attach`](super::Sender::attach)).
pub const MEMORY_CONNECTION_ROLE: u16 = 1;

/// How often a thread blocked on a connection looks at the rest of the
/// migration: the read timeout [`Listener`]s give the streams they accept,
/// and how long the accept loop waits between two looks.
pub(super) const TICK: Duration = Duration::from_millis(20);

/// Where a receiver accepts a migration's extra connections: a
/// [`UnixListener`] or a [`TcpListener`] (or any transport that implements
/// it).
pub trait Listener: Send {
    /// An accepted connection.
    type Stream: Read + Write + Send;

    /// Accepts one connection if one arrives within `wait`, `None` if none
    /// does. The stream's reads should time out now and then (an error of
    /// kind `WouldBlock` or `TimedOut`), so that the thread serving it
    /// notices when the migration ends; the implementations here set a read
    /// timeout of 20 ms on what they accept (and make the listener
    /// non-blocking).
    ///
    /// # Errors
    /// The listener's I/O errors.
    fn accept_within(&mut self, wait: Duration) -> io::Result<Option<Self::Stream>>;
}

/// Polls a non-blocking `accept` until `wait` has passed.
fn accept_polling<S>(
    wait: Duration,
    mut accept: impl FnMut() -> io::Result<S>,
) -> io::Result<Option<S>> {
    let deadline = Instant::now() + wait;
    loop {
        match accept() {
            Ok(s) => return Ok(Some(s)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let now = Instant::now();
                if now >= deadline {
                    return Ok(None);
                }
                std::thread::sleep((deadline - now).min(Duration::from_millis(2)));
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                ) => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(unix)]
impl Listener for UnixListener {
    type Stream = UnixStream;

    fn accept_within(&mut self, wait: Duration) -> io::Result<Option<UnixStream>> {
        self.set_nonblocking(true)?;
        let s = accept_polling(wait, || self.accept().map(|(s, _)| s))?;
        if let Some(s) = &s {
            s.set_nonblocking(false)?;
            s.set_read_timeout(Some(TICK))?;
        }
        Ok(s)
    }
}

impl Listener for TcpListener {
    type Stream = TcpStream;

    fn accept_within(&mut self, wait: Duration) -> io::Result<Option<TcpStream>> {
        self.set_nonblocking(true)?;
        let s = accept_polling(wait, || self.accept().map(|(s, _)| s))?;
        if let Some(s) = &s {
            s.set_nonblocking(false)?;
            s.set_read_timeout(Some(TICK))?;
            s.set_nodelay(true)?;
        }
        Ok(s)
    }
}

impl Receiver<'_> {
    /// Serves one migration on the `main` connection, as
    /// [`Receiver::serve`] does, while accepting extra memory connections
    /// on `listener` (Cloud Hypervisor's multi-connection scheme, see
    /// below) and writing the memory they carry in parallel, one thread per
    /// connection. Returns when the main connection completes or fails,
    /// after every extra connection's thread has stopped.
    ///
    /// Give `main` a read timeout (say 20 ms): the main thread then notices
    /// an extra connection's failure while the main connection is quiet
    /// (otherwise it does at the main connection's next request, or when
    /// the sender gives up), and the idle timeout
    /// ([`Receiver::with_idle_timeout`]) applies to it.
    ///
    /// **Extra connections**: each begins with the two-byte role
    /// [`MEMORY_CONNECTION_ROLE`] (others are closed at once: post-copy
    /// fault connections are not served), then carries only `Memory` (or,
    /// with [`Extensions::ZERO_PAGES`] accepted on the main connection,
    /// `SparseMemory`) requests, between the main connection's `Config` and
    /// `State`, and ends with the sender closing it between two requests.
    /// At most [`Receiver::with_max_connections`] are served.
    ///
    /// # Errors
    /// What [`Receiver::serve_with`] returns, and
    /// [`MigrationError::Connection`] (answered on the main connection as
    /// an error) when an extra connection failed: a bad table, a stream
    /// that ended in a request, a request other than memory, memory before
    /// `Config` or after `State` ([`MigrationError::MemoryClosed`]); and
    /// [`MigrationError::MemoryInFlight`] for a `State` that arrives while
    /// a memory request is in progress on an extra connection. The
    /// summary ([`Receiver::summary`]) counts memory requests that arrived
    /// whole on every connection.
    ///
    /// ```
    /// use std::os::unix::net::{UnixListener, UnixStream};
    /// use spacekit::dirty::{MemoryRange, MemoryRangeTable};
    /// use spacekit::migration::{Receiver, Sender};
    ///
    /// let dir = std::env::temp_dir().join(format!("sk-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let path = dir.join("migrate.sock");
    /// let _ = std::fs::remove_file(&path);
    /// let mut listener = UnixListener::bind(&path)?;
    /// let source: Vec<u8> = (0..1 << 20).map(|i| (i / 4096) as u8).collect();
    ///
    /// let dest = std::thread::spawn(move || {
    ///     let mut memory = vec![0u8; 1 << 20];
    ///     let (mut main, _) = listener.accept()?;
    ///     main.set_read_timeout(Some(std::time::Duration::from_millis(20)))?;
    ///     let summary = Receiver::new(&mut memory).serve_connections(&mut main, &mut listener)?;
    ///     Ok::<_, Box<dyn std::error::Error + Send + Sync>>((summary, memory))
    /// });
    ///
    /// let mut main = UnixStream::connect(&path)?;
    /// let mut sender = Sender::new();
    /// sender.start(&mut main)?;
    /// sender.send_config(&mut main, b"{}")?;
    /// // Extra connections: connect, announce the memory role.
    /// let mut extra = Vec::new();
    /// for _ in 0..3 {
    ///     let mut s = UnixStream::connect(&path)?;
    ///     sender.attach(&mut s)?;
    ///     extra.push(s);
    /// }
    /// let mut all = MemoryRangeTable::new();
    /// all.push(MemoryRange { gpa: 0, length: 1 << 20 });
    /// // A round split over the three extra connections, in parallel...
    /// let stats = sender.send_memory_parallel(&mut extra, &all, &source)?;
    /// assert_eq!(stats.bytes, 1 << 20);
    /// // ...and the last (paused) round on the main connection.
    /// let mut last = MemoryRangeTable::new();
    /// last.push(MemoryRange { gpa: 4096, length: 4096 });
    /// sender.send_memory(&mut main, &last, &source)?;
    /// drop(extra);
    /// sender.send_state(&mut main, b"{}")?;
    /// sender.complete(&mut main)?;
    /// let (summary, memory) = dest.join().unwrap().map_err(|e| e.to_string())?;
    /// assert_eq!(summary.bytes, (1 << 20) + 4096);
    /// assert_eq!(summary.extra_connections, 3);
    /// assert_eq!(memory, source);
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn serve_connections<S, L>(
        &mut self,
        main: &mut S,
        listener: &mut L,
    ) -> Result<ReceiveSummary, MigrationError>
    where
        S: Read + Write + Send + ?Sized,
        L: Listener,
    {
        self.serve_connections_with(main, listener, |_, _| Ok(()))
    }

    /// [`Receiver::serve_connections`] with a handler of the `Config` and
    /// `State` payloads, as [`Receiver::serve_with`].
    ///
    /// # Errors
    /// As [`Receiver::serve_connections`].
    pub fn serve_connections_with<S, L, F>(
        &mut self,
        main: &mut S,
        listener: &mut L,
        mut on_payload: F,
    ) -> Result<ReceiveSummary, MigrationError>
    where
        S: Read + Write + Send + ?Sized,
        L: Listener,
        F: FnMut(Command, &[u8]) -> Result<(), alloc::string::String>,
    {
        let (memory, limits, state) = self.parts();
        let limits = *limits;
        let session = Session::new();
        let target = Target::new(memory, &session);
        let (res, accepted) = std::thread::scope(|scope| {
            let target = &target;
            let acceptor = scope.spawn(move || {
                let mut accepted = 0usize;
                while !target.session().ended() {
                    match listener.accept_within(TICK) {
                        Ok(Some(stream)) if accepted < limits.max_connections => {
                            accepted += 1;
                            let index = accepted;
                            scope.spawn(move || serve_extra(index, stream, target, &limits));
                        }
                        // Past the limit: closed at once.
                        Ok(Some(_)) | Ok(None) => {}
                        Err(e) => {
                            target.session().fail(0, MigrationError::io(&e));
                            break;
                        }
                    }
                }
                accepted
            });
            let mut watched = Watched::new(main, Some(&session), true, limits.idle_timeout);
            let res = state.run(&mut watched, &limits, target, &mut on_payload);
            session.end();
            let accepted = acceptor.join().unwrap_or(0);
            (res, accepted)
        });
        self.record_extra_connections(accepted as u64);
        res.map(|mut s| {
            s.extra_connections = accepted as u64;
            s
        })
    }
}

/// Serves extra connection `index` until the sender closes it between two
/// requests, the migration ends, or it fails (recorded in the session).
fn serve_extra<S: Read + Write>(index: usize, mut stream: S, target: &Target<'_>, limits: &Limits) {
    let session = target.session();
    let mut watched = Watched::new(&mut stream, Some(session), false, limits.idle_timeout);
    let mut role = [0u8; 2];
    if read_full(&mut watched, &mut role, "connection role").is_err()
        || u16::from_le_bytes(role) != MEMORY_CONNECTION_ROLE
    {
        // A fault connection, an unknown role or a connection that closed
        // at once: not part of this migration's memory.
        return;
    }
    let mut s = BufStream::new(&mut watched);
    let mut table = Vec::new();
    loop {
        let mut header = [0u8; REQUEST_BYTES];
        let first = loop {
            match s.read(&mut header[..1]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => break r,
            }
        };
        match first {
            // The sender closed the connection between two requests.
            Ok(0) => return,
            Ok(_) => {}
            Err(e) => {
                if !session.ended() {
                    session.fail(index, MigrationError::io(&e));
                }
                return;
            }
        }
        let res = session.begin_request().and_then(|ext| {
            let r = serve_request(&mut s, &mut header, ext, target, &mut table, limits);
            session.end_request(r.as_ref().ok());
            r
        });
        let res = res.and_then(|_| {
            Response::ok().write_to(&mut s)?;
            s.flush().map_err(|e| MigrationError::io(&e))
        });
        if let Err(e) = res {
            if !session.ended() && e != MigrationError::Stopped {
                session.fail(index, e.clone());
            }
            let _ = refuse(&mut s, e, 0, 0);
            return;
        }
    }
}

/// Reads the rest of a request whose first byte is in `header` and
/// receives its memory.
fn serve_request<S: Read + ?Sized>(
    s: &mut S,
    header: &mut [u8; REQUEST_BYTES],
    ext: Extensions,
    target: &Target<'_>,
    table: &mut Vec<u8>,
    limits: &Limits,
) -> Result<MemoryTotals, MigrationError> {
    read_full(s, &mut header[1..], "request header")?;
    let req = Request::from_bytes(header)?;
    let sparse = match req.command {
        Command::Memory => false,
        Command::SparseMemory if ext.contains(Extensions::ZERO_PAGES) => true,
        Command::SparseMemory => {
            return Err(MigrationError::NotNegotiated {
                command: req.command,
            })
        }
        command => return Err(MigrationError::NotOnExtraConnection { command }),
    };
    let mut payload = 0;
    receive_memory(
        s,
        target,
        table,
        req.length,
        limits.max_table_bytes,
        sparse,
        &mut payload,
    )
}
