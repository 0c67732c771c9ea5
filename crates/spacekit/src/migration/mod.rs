//! Cloud Hypervisor's live-migration protocol: the sender and receiver of
//! a pre-copy migration over any `Read + Write` stream (a `UnixStream` or
//! `TcpStream` in practice), with the VMM's own configuration and state
//! carried as opaque payloads.
//!
//! **Cloud Hypervisor's protocol** (`vm_migration::protocol`, checked
//! against its current code):
//!
//! * every request is a 16-byte [`Request`] header — `command: u16`
//!   ([`Command`]: Start 1, Config 2, State 3, Memory 4, Complete 5, Abandon
//!   6, MemoryFd 7, CompletePaused 8, PageFault 9), 6 bytes of
//!   `command_headers`, `length: u64` — then `length` payload bytes; every
//!   request is answered by a 16-byte [`Response`] — `status: u16`
//!   ([`Status`]: Invalid 0, Ok 1, Error 2), 6 bytes of padding,
//!   `length: u64`;
//! * `Start`'s first two `command_headers` bytes carry the sender's
//!   protocol version ([`PROTOCOL_VERSION`], 0); a receiver refuses a
//!   version it does not support ([`version_supported`]);
//! * the order is `Start`, `Config` (the VM configuration), `Memory` per
//!   pre-copy round, `State` (the VM's device state), then `Complete` (or
//!   `CompletePaused` when the source VM was paused); `Abandon` ends it at
//!   any time. Cloud Hypervisor's receiver refuses `Memory` before `Config`,
//!   and `Complete` before `State`;
//! * a `Memory` request's payload is a
//!   [`MemoryRangeTable`](crate::dirty::MemoryRangeTable) as packed 16-byte
//!   `{gpa: u64, length: u64}` entries (`length` in the header is the
//!   table's byte length, a multiple of 16), then the contents of each range
//!   in table order.
//!
//! Every integer is little-endian. Cloud Hypervisor writes its `#[repr(C)]`
//! structs in native byte order, so the two agree on little-endian hosts
//! (x86_64, aarch64 as Linux runs it); spacekit never uses big-endian.
//!
//! [`Sender`] writes the requests, `Config` and `State` payloads supplied by
//! the caller, memory from any [`MemorySource`]; [`Receiver`] follows Cloud
//! Hypervisor's receiver state machine into a `&mut [u8]` whose offsets are
//! guest-physical addresses, validating each table whole before writing a
//! byte of memory, and hands the `Config` and `State` payloads to its
//! caller. It refuses `MemoryFd` and `PageFault` (no local or post-copy
//! migration), and drains the payload of every request it refuses before
//! answering with the error.
//!
//! **spacekit's extensions** ([`Extensions`]): two requests outside
//! Cloud Hypervisor's numbering, each offered in `Start` header bytes Cloud
//! Hypervisor ignores and used only when the receiver accepted it in the
//! padding of its answer, which Cloud Hypervisor leaves zero — so against a
//! plain Cloud Hypervisor peer the sender speaks the plain protocol:
//!
//! * [`Command::PageHashes`] (`0x5348`, [`Extensions::PAGE_HASHES`]) asks
//!   the receiver for the CRC-32C of each page of its memory so the sender
//!   can check after the final round that destination and source agree
//!   ([`hash_pages`], [`diff_pages`]); not negotiated, the page check is not
//!   available ([`MigrationError::NotNegotiated`]);
//! * [`Command::SparseMemory`] (`0x535a`, [`Extensions::ZERO_PAGES`]) is a
//!   `Memory` request whose all-zero 4 KiB pages travel as one bit of a
//!   per-64-pages zero mask instead of 4096 bytes (the layout is on
//!   [`Command::SparseMemory`]); [`Sender::send_memory`] tests each page as
//!   it copies it out (a SIMD test at the level `crate::arch` detected)
//!   and [`SendStats`] reports the bytes sent as payload and the bytes
//!   skipped as zero. The receiver writes the zeros (it never assumes its
//!   memory is zero).
//!
//! **Several connections** ([`Sender::attach`],
//! [`Sender::send_memory_parallel`], [`Receiver::serve_connections`],
//! [`Listener`]): Cloud Hypervisor's own scheme, so nothing is negotiated —
//! extra connections to the receiver's listener begin with a two-byte
//! connection role ([`MEMORY_CONNECTION_ROLE`]) and then carry only memory
//! requests, in parallel with each other and the main connection, which
//! keeps `Start`, `Config`, `State` and `Complete`. A round is cut into
//! parts of about equal bytes, one request per connection; the last round
//! (the VM paused) goes on the main connection. The receiver writes each
//! request where its table says, on one thread per connection, never two
//! at once on the same bytes, and refuses `State` while memory is still in
//! progress elsewhere. Extensions accepted on the main connection hold on
//! its extra connections.
//!
//! **Interruptions**: a peer that dies or a connection that closes ends
//! the migration with a typed error on the survivor (a stream that ends or
//! fails: [`MigrationError::Truncated`], [`MigrationError::Io`]; an extra
//! connection's failure: [`MigrationError::Connection`]), never with
//! success, and [`Receiver::summary`] counts only memory requests that
//! arrived whole.

mod command;
mod connections;
mod error;
mod inbound;
mod receiver;
mod sender;
#[doc(hidden)]
pub mod session;
mod source;
#[cfg(unix)]
mod unix;
mod wire;
pub(crate) mod zero;

pub use command::{version_supported, Command, Extensions, ReceiveState, Status, PROTOCOL_VERSION};
pub use connections::{Listener, MEMORY_CONNECTION_ROLE};
pub use error::MigrationError;
pub use receiver::{
    ReceiveSummary, Receiver, DRAIN_LIMIT_BYTES, MAX_EXTRA_CONNECTIONS, MAX_PAYLOAD_BYTES,
    MAX_TABLE_BYTES,
};
pub use sender::{SendStats, Sender, DEFAULT_BUFFER_BYTES};
pub use source::{diff_pages, hash_pages, MemorySource};
#[cfg(unix)]
pub use unix::{receive_connections_on_unix_socket, receive_on_unix_socket};
pub use wire::{Request, Response, REQUEST_BYTES, RESPONSE_BYTES};
