//! [`MigrationError`]: what went wrong on a migration stream.

use std::fmt;
use std::io;
use std::string::{String, ToString};

use super::command::{Command, ReceiveState, Status};

/// What went wrong on a migration stream, on either side.
///
/// The receiver answers every request it refuses with an error
/// [`Response`](super::Response) (best effort: the stream may be gone),
/// after reading and discarding what is left of the request's payload (up
/// to [`Receiver::drain_limit`](super::Receiver::drain_limit)), and then
/// returns one of these; the sender returns one when its own checks
/// refuse a call (nothing written), when the receiver answers with an error,
/// or when the stream fails.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MigrationError {
    /// A request header whose command is none of [`Command`]'s values.
    UnknownCommand {
        /// The command field as received.
        value: u16,
    },
    /// A response header whose status is none of [`Status`]'s values.
    UnknownStatus {
        /// The status field as received.
        value: u16,
    },
    /// A memory request whose table length is not a multiple of 16 bytes
    /// (one [`MemoryRange`](crate::dirty::MemoryRange) on the wire).
    BadTableLength {
        /// The table length in bytes, from the request header.
        len: u64,
    },
    /// A memory request whose table is longer than the receiver accepts
    /// (see [`Receiver::max_table_bytes`](super::Receiver::max_table_bytes)):
    /// refused before anything is allocated.
    TableTooLarge {
        /// The table length in bytes, from the request header.
        len: u64,
        /// The largest table length accepted.
        max: u64,
    },
    /// A range that does not lie inside guest memory (`gpa + length` past
    /// the memory's size).
    RangeOutsideMemory {
        /// Index of the range in its table.
        index: usize,
        /// Its guest-physical address.
        gpa: u64,
        /// Its length in bytes.
        length: u64,
        /// The size of guest memory in bytes.
        memory_size: u64,
    },
    /// A range whose end (`gpa + length`) passes 2^64.
    RangeOverflow {
        /// Index of the range in its table.
        index: usize,
    },
    /// The stream ended (or reported [`io::ErrorKind::UnexpectedEof`])
    /// before a whole item arrived.
    Truncated {
        /// What was being read: `"request header"`, `"memory table"`,
        /// `"memory contents"`, ...
        what: &'static str,
        /// Bytes the item needed.
        expected: u64,
        /// Bytes that arrived before the end.
        got: u64,
    },
    /// Any other I/O error of the stream.
    Io {
        /// The error's kind.
        kind: io::ErrorKind,
        /// The error's message.
        message: String,
    },
    /// The receiver answered a request with a status other than
    /// [`Status::Ok`].
    Rejected {
        /// The status it answered with.
        status: Status,
        /// The request it refused.
        command: Command,
    },
    /// The sender abandoned the migration ([`Command::Abandon`]); the
    /// receiver acknowledged it.
    Abandoned,
    /// A request whose `length` does not fit its command: not 0 for
    /// [`Command::Start`], [`Command::Complete`],
    /// [`Command::CompletePaused`] and [`Command::Abandon`], not 8 for
    /// [`Command::PageHashes`].
    UnexpectedPayload {
        /// The request's command.
        command: Command,
        /// Its `length` field.
        length: u64,
        /// The length the command takes.
        expected: u64,
    },
    /// A response whose `length` does not fit the request it answers (not 0,
    /// or for [`Command::PageHashes`] not a multiple of 4).
    BadResponseLength {
        /// The request answered.
        command: Command,
        /// The response's `length` field.
        length: u64,
    },
    /// A command this receiver knows but does not serve: memory file
    /// descriptors ([`Command::MemoryFd`], Cloud Hypervisor's local
    /// migration) and post-copy page faults ([`Command::PageFault`]).
    Unsupported {
        /// The command.
        command: Command,
    },
    /// A request other than [`Command::Start`] (or `Abandon`) before the
    /// migration started.
    NotStarted {
        /// The command.
        command: Command,
    },
    /// A `Start` carrying a protocol version the receiver does not support
    /// (see [`version_supported`](super::version_supported)): refused, as
    /// Cloud Hypervisor's receiver refuses it.
    UnsupportedVersion {
        /// The version in the request.
        version: u16,
    },
    /// A request the protocol does not allow in the receiver's state, as
    /// Cloud Hypervisor's receiver state machine refuses it: `Memory`
    /// before `Config` or after `State`, `Complete` before `State`, a
    /// second `Start` or `Config`, ...
    OutOfOrder {
        /// The request's command.
        command: Command,
        /// The receiver's state when it arrived.
        state: ReceiveState,
    },
    /// A spacekit extension request ([`Command::PageHashes`]) on a stream
    /// where the receiver did not accept that extension in its answer to
    /// `Start`. The sender returns it before writing anything; the receiver
    /// refuses such a request.
    NotNegotiated {
        /// The extension's command.
        command: Command,
    },
    /// A `Config` or `State` payload longer than the receiver accepts (see
    /// [`Receiver::max_payload_bytes`](super::Receiver::max_payload_bytes)).
    PayloadTooLarge {
        /// The request's command.
        command: Command,
        /// The payload length from the request header.
        len: u64,
        /// The largest payload accepted.
        max: u64,
    },
    /// The receiver's caller refused a `Config` or `State` payload (the
    /// handler given to [`Receiver::serve_with`](super::Receiver::serve_with)
    /// returned an error).
    PayloadRefused {
        /// The request's command.
        command: Command,
        /// The handler's reason.
        reason: String,
    },
    /// A page size of 0 for page hashes.
    BadPageSize {
        /// The page size given.
        page_size: u64,
    },
    /// Two page-hash lists of different lengths (source and destination
    /// memory of different sizes).
    PageCountMismatch {
        /// Pages in the first list.
        local: usize,
        /// Pages in the second list.
        remote: usize,
    },
    /// A [`Command::SparseMemory`] zero mask with bits set at or above its
    /// group's page count.
    BadZeroMask {
        /// The mask as received.
        mask: u64,
        /// Pages in its group.
        pages: u32,
    },
    /// [`Sender::send_memory_parallel`](super::Sender::send_memory_parallel)
    /// was given no stream.
    NoConnections,
    /// A request other than `Memory` (or a negotiated `SparseMemory`) on an
    /// extra memory connection, which carries nothing else (as in Cloud
    /// Hypervisor's multi-connection migration).
    NotOnExtraConnection {
        /// The request's command.
        command: Command,
    },
    /// A memory request on an extra connection before the main connection
    /// accepted `Config`, or after it accepted `State`.
    MemoryClosed,
    /// `State` arrived on the main connection while memory requests were
    /// still in progress on extra connections: the sender did not wait for
    /// their answers, so the memory is not known to be whole.
    MemoryInFlight {
        /// Requests in progress.
        requests: usize,
    },
    /// An extra memory connection failed; the migration fails with it.
    Connection {
        /// The connection's number, from 1 in the order accepted.
        index: usize,
        /// What went wrong on it.
        error: std::boxed::Box<MigrationError>,
    },
    /// The migration ended on its main connection (completed or failed)
    /// while an extra connection was still in use.
    Stopped,
}

impl MigrationError {
    /// The typed error for an I/O error met while reading `what` after
    /// `got` of its `expected` bytes: [`MigrationError::Truncated`] for
    /// [`io::ErrorKind::UnexpectedEof`], [`MigrationError::Io`] otherwise.
    pub(crate) fn from_io(e: &io::Error, what: &'static str, expected: u64, got: u64) -> Self {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            MigrationError::Truncated {
                what,
                expected,
                got,
            }
        } else {
            MigrationError::io(e)
        }
    }

    /// [`MigrationError::Io`] for `e`.
    pub(crate) fn io(e: &io::Error) -> Self {
        MigrationError::Io {
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

impl fmt::Display for MigrationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MigrationError::UnknownCommand { value } => {
                write!(f, "unknown migration command {value:#x}")
            }
            MigrationError::UnknownStatus { value } => {
                write!(f, "unknown migration response status {value:#x}")
            }
            MigrationError::BadTableLength { len } => write!(
                f,
                "memory table of {len} bytes is not a whole number of 16-byte ranges"
            ),
            MigrationError::TableTooLarge { len, max } => write!(
                f,
                "memory table of {len} bytes is larger than the {max} bytes accepted"
            ),
            MigrationError::RangeOutsideMemory {
                index,
                gpa,
                length,
                memory_size,
            } => write!(
                f,
                "memory range {index} ({gpa:#x}+{length:#x}) lies outside guest memory of {memory_size:#x} bytes"
            ),
            MigrationError::RangeOverflow { index } => {
                write!(f, "memory range {index} ends past the 64-bit address space")
            }
            MigrationError::Truncated {
                what,
                expected,
                got,
            } => write!(
                f,
                "migration stream ended in the {what}: {got} of {expected} bytes"
            ),
            MigrationError::Io { kind, message } => {
                write!(f, "migration stream I/O error ({kind:?}): {message}")
            }
            MigrationError::Rejected { status, command } => {
                write!(f, "the receiver answered {command:?} with status {status:?}")
            }
            MigrationError::Abandoned => write!(f, "the sender abandoned the migration"),
            MigrationError::UnexpectedPayload {
                command,
                length,
                expected,
            } => write!(
                f,
                "{command:?} request with {length} bytes of payload where {expected} belong"
            ),
            MigrationError::BadResponseLength { command, length } => write!(
                f,
                "response of {length} bytes does not fit the {command:?} request"
            ),
            MigrationError::Unsupported { command } => {
                write!(f, "{command:?} requests are not supported by this receiver")
            }
            MigrationError::NotStarted { command } => {
                write!(f, "{command:?} request before the migration started")
            }
            MigrationError::UnsupportedVersion { version } => write!(
                f,
                "migration protocol version {version} is not supported (this receiver speaks {})",
                super::command::PROTOCOL_VERSION
            ),
            MigrationError::OutOfOrder { command, state } => {
                write!(f, "{command:?} request out of order (receiver state {state:?})")
            }
            MigrationError::NotNegotiated { command } => write!(
                f,
                "{command:?} is a spacekit extension the receiver did not accept"
            ),
            MigrationError::PayloadTooLarge { command, len, max } => write!(
                f,
                "{command:?} payload of {len} bytes is larger than the {max} bytes accepted"
            ),
            MigrationError::PayloadRefused { command, reason } => {
                write!(f, "{command:?} payload refused: {reason}")
            }
            MigrationError::BadPageSize { page_size } => {
                write!(f, "page size {page_size} for page hashes (must be at least 1)")
            }
            MigrationError::PageCountMismatch { local, remote } => write!(
                f,
                "page hash lists of different lengths: {local} and {remote} pages"
            ),
            MigrationError::BadZeroMask { mask, pages } => write!(
                f,
                "zero mask {mask:#x} has bits past its group of {pages} pages"
            ),
            MigrationError::NoConnections => {
                write!(f, "no connection to send memory on")
            }
            MigrationError::NotOnExtraConnection { command } => write!(
                f,
                "{command:?} request on an extra connection, which carries memory only"
            ),
            MigrationError::MemoryClosed => write!(
                f,
                "memory request on an extra connection before Config or after State"
            ),
            MigrationError::MemoryInFlight { requests } => write!(
                f,
                "State arrived with {requests} memory request(s) still in progress on extra connections"
            ),
            MigrationError::Connection { index, error } => {
                write!(f, "extra migration connection {index} failed: {error}")
            }
            MigrationError::Stopped => write!(
                f,
                "the migration ended on its main connection while this connection was in use"
            ),
        }
    }
}

impl std::error::Error for MigrationError {}
