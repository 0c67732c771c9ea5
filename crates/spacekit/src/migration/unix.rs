//! A receiver on a Unix socket path: what `spacekit migrate --receive` runs.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::string::ToString;
use std::vec::Vec;

use super::error::MigrationError;
use super::receiver::{ReceiveSummary, Receiver};

/// Allocates `size` bytes of zeroed destination memory, listens on the Unix
/// socket `path`, serves one migration into that memory, and returns the
/// summary and the memory.
///
/// Only a stale socket at `path` (one nothing listens on any more: a
/// connection to it is refused) is replaced. Any other file there is left
/// alone and refused, and so is a socket something still accepts on (that
/// listener sees one connection that closes at once). A connection that
/// closes before its first byte (such a check, by another receiver
/// started on the same path) is not a migration: the receiver goes on
/// listening.
///
/// # Errors
/// [`MigrationError::Io`] when the memory cannot be allocated, when `path`
/// is taken ([`ErrorKind::AlreadyExists`] for a file that is not a socket,
/// [`ErrorKind::AddrInUse`] for a live socket), or when the socket cannot be
/// bound or accepted; otherwise what [`Receiver::serve`] returns.
pub fn receive_on_unix_socket(
    path: &Path,
    size: u64,
) -> Result<(ReceiveSummary, Vec<u8>), MigrationError> {
    let io = |kind: std::io::ErrorKind, message: std::string::String| MigrationError::Io {
        kind,
        message,
    };
    remove_stale_socket(path)?;
    let mut memory = allocate(size)?;
    let listener = UnixListener::bind(path).map_err(|e| io(e.kind(), e.to_string()))?;
    let accepted = accept_migration(&listener);
    let _ = std::fs::remove_file(path);
    let mut stream = accepted.map_err(|e| io(e.kind(), e.to_string()))?;
    let summary = Receiver::new(&mut memory).serve(&mut stream)?;
    Ok((summary, memory))
}

/// A connection that sent at least one byte (read here, and given back
/// first): the next one accepted on `listener` that does not close
/// before its first byte. A peer that connects only to see whether a
/// receiver listens (as [`remove_stale_socket`] does) closes at once.
fn accept_migration(listener: &UnixListener) -> std::io::Result<Primed> {
    loop {
        let (mut s, _) = listener.accept()?;
        let mut first = [0u8; 1];
        loop {
            match s.read(&mut first) {
                Ok(0) => break,
                Ok(_) => {
                    return Ok(Primed {
                        first: Some(first[0]),
                        stream: s,
                    })
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// A stream whose first byte was already read: it comes first.
struct Primed {
    first: Option<u8>,
    stream: UnixStream,
}

impl Read for Primed {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        match (self.first, buf.first_mut()) {
            (Some(b), Some(slot)) => {
                *slot = b;
                self.first = None;
                Ok(1)
            }
            _ => self.stream.read(buf),
        }
    }
}

impl Write for Primed {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.stream.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

/// [`receive_on_unix_socket`] with extra memory connections: serves the
/// first connection to `path` as the main one, and up to `max_connections`
/// more as extra memory connections ([`Receiver::serve_connections`], Cloud
/// Hypervisor's multi-connection scheme), each on its own thread. The
/// socket stays bound (so the sender can connect its extra connections)
/// until the migration ends, then is removed. Every connection gets a
/// 20 ms read timeout, so a failure on one is noticed on all.
///
/// # Errors
/// As [`receive_on_unix_socket`], then what
/// [`Receiver::serve_connections`] returns.
pub fn receive_connections_on_unix_socket(
    path: &Path,
    size: u64,
    max_connections: usize,
) -> Result<(ReceiveSummary, Vec<u8>), MigrationError> {
    let io = |e: std::io::Error| MigrationError::Io {
        kind: e.kind(),
        message: e.to_string(),
    };
    remove_stale_socket(path)?;
    let mut memory = allocate(size)?;
    let mut listener = UnixListener::bind(path).map_err(io)?;
    let res = accept_migration(&listener)
        .map_err(io)
        .and_then(|mut main| {
            main.stream
                .set_read_timeout(Some(super::connections::TICK))
                .map_err(io)?;
            Receiver::new(&mut memory)
                .with_max_connections(max_connections)
                .serve_connections(&mut main, &mut listener)
        });
    let _ = std::fs::remove_file(path);
    Ok((res?, memory))
}

/// `size` bytes of zeroed guest memory.
fn allocate(size: u64) -> Result<Vec<u8>, MigrationError> {
    let io = |kind: ErrorKind, message: std::string::String| MigrationError::Io { kind, message };
    let bytes = usize::try_from(size).map_err(|_| {
        io(
            ErrorKind::OutOfMemory,
            std::format!("{size} bytes cannot be mapped here"),
        )
    })?;
    let mut memory = Vec::new();
    memory.try_reserve_exact(bytes).map_err(|e| {
        io(
            ErrorKind::OutOfMemory,
            std::format!("cannot allocate {size} bytes of guest memory: {e}"),
        )
    })?;
    memory.resize(bytes, 0u8);
    Ok(memory)
}

/// Removes `path` if it is a stale Unix socket; does nothing if nothing is
/// there; refuses anything else.
fn remove_stale_socket(path: &Path) -> Result<(), MigrationError> {
    let shown = path.display();
    let io = |kind: ErrorKind, message: std::string::String| MigrationError::Io { kind, message };
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(e.kind(), std::format!("{shown}: {e}"))),
    };
    if !meta.file_type().is_socket() {
        return Err(io(
            ErrorKind::AlreadyExists,
            std::format!("{shown} exists and is not a socket: refusing to replace it"),
        ));
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(io(
            ErrorKind::AddrInUse,
            std::format!("{shown}: a receiver is already listening there"),
        )),
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
            std::fs::remove_file(path).map_err(|e| {
                io(
                    e.kind(),
                    std::format!("remove the stale socket {shown}: {e}"),
                )
            })
        }
        Err(e) => Err(io(e.kind(), std::format!("{shown}: {e}"))),
    }
}
