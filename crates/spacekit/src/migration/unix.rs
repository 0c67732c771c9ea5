//! A receiver on a Unix socket path: what `spacekit migrate --receive` runs.

use std::os::unix::net::UnixListener;
use std::path::Path;
use std::string::ToString;
use std::vec::Vec;

use super::error::MigrationError;
use super::receiver::{ReceiveSummary, Receiver};

/// Allocates `size` bytes of zeroed destination memory, listens on the Unix
/// socket `path`, serves one migration into that memory, and returns the
/// summary and the memory.
///
/// # Errors
/// [`MigrationError::Io`] when the memory cannot be allocated or the socket
/// cannot be bound or accepted; otherwise what [`Receiver::serve`] returns.
pub fn receive_on_unix_socket(
    path: &Path,
    size: u64,
) -> Result<(ReceiveSummary, Vec<u8>), MigrationError> {
    let io = |kind: std::io::ErrorKind, message: std::string::String| MigrationError::Io {
        kind,
        message,
    };
    let bytes = usize::try_from(size).map_err(|_| {
        io(
            std::io::ErrorKind::OutOfMemory,
            std::format!("{size} bytes cannot be mapped here"),
        )
    })?;
    let mut memory = Vec::new();
    memory.try_reserve_exact(bytes).map_err(|e| {
        io(
            std::io::ErrorKind::OutOfMemory,
            std::format!("cannot allocate {size} bytes of guest memory: {e}"),
        )
    })?;
    memory.resize(bytes, 0u8);
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path).map_err(|e| io(e.kind(), e.to_string()))?;
    let accepted = listener.accept();
    let _ = std::fs::remove_file(path);
    let (mut stream, _) = accepted.map_err(|e| io(e.kind(), e.to_string()))?;
    let summary = Receiver::new(&mut memory).serve(&mut stream)?;
    Ok((summary, memory))
}
