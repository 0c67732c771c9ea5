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
//! **spacekit's extension** ([`Extensions`]): one request outside Cloud
//! Hypervisor's numbering, [`Command::PageHashes`] (`0x5348`), which asks
//! the receiver for the CRC-32C of each page of its memory so the sender can
//! check after the final round that destination and source agree
//! ([`hash_pages`], [`diff_pages`]). It is offered in `Start` header bytes
//! Cloud Hypervisor ignores and used only when the receiver accepted it in
//! the padding of its answer, which Cloud Hypervisor leaves zero: against a
//! plain Cloud Hypervisor peer the sender speaks the plain protocol and the
//! page check is not available ([`MigrationError::NotNegotiated`]).

mod command;
mod error;
mod receiver;
mod sender;
mod source;
#[cfg(unix)]
mod unix;
mod wire;

pub use command::{version_supported, Command, Extensions, ReceiveState, Status, PROTOCOL_VERSION};
pub use error::MigrationError;
pub use receiver::{
    ReceiveSummary, Receiver, DRAIN_LIMIT_BYTES, MAX_PAYLOAD_BYTES, MAX_TABLE_BYTES,
};
pub use sender::{SendStats, Sender, DEFAULT_BUFFER_BYTES};
pub use source::{diff_pages, hash_pages, MemorySource};
#[cfg(unix)]
pub use unix::receive_on_unix_socket;
pub use wire::{Request, Response, REQUEST_BYTES, RESPONSE_BYTES};
