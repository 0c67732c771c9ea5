//! Cloud Hypervisor's live-migration stream for guest memory: the sender
//! and receiver of a pre-copy migration over any `Read + Write` stream (a
//! `UnixStream` or `TcpStream` in practice).
//!
//! The wire format is Cloud Hypervisor's `vm_migration::protocol`:
//!
//! * every request is a 16-byte [`Request`] header — `command: u16`, 6 bytes
//!   of `command_headers` (zero), `length: u64`, the payload bytes that
//!   follow — and every request is answered by a 16-byte [`Response`] —
//!   `status: u16` ([`Status`]: Invalid 0, Ok 1, Error 2), 6 bytes of
//!   padding, `length: u64`;
//! * a [`Command::Memory`] request's payload is a
//!   [`MemoryRangeTable`](crate::dirty::MemoryRangeTable) as packed 16-byte
//!   `{gpa: u64, length: u64}` entries (`length` in the header is the
//!   table's byte length, a multiple of 16), then the contents of each range
//!   in table order.
//!
//! Every integer is little-endian. Cloud Hypervisor writes its `#[repr(C)]`
//! structs in native byte order, so the two agree on little-endian hosts
//! (x86_64, aarch64 as Linux runs it); spacekit never uses big-endian.
//!
//! A migration is `Start`, one `Memory` request per pre-copy round (round 0
//! the whole of memory, each later round the pages dirtied during the one
//! before), then `Complete` — or `Abandon`. [`Sender`] writes it from any
//! [`MemorySource`]; [`Receiver`] serves it into a `&mut [u8]` whose offsets
//! are guest-physical addresses, validating each table whole before writing
//! a byte of memory. One command is spacekit's own, outside Cloud
//! Hypervisor's numbering: [`Command::PageHashes`] (`0x5348`) asks the
//! receiver for the CRC-32C of each page of its memory, so the sender can
//! check after the final round that destination and source agree
//! ([`hash_pages`], [`diff_pages`]) before it sends `Complete`.
//!
//! Configuration and device state (`Config`, `State`), memory file
//! descriptors (`MemoryFd`) and `CompletePaused` are Cloud Hypervisor's VM
//! business; the receiver refuses them ([`MigrationError::Unsupported`]).

mod command;
mod error;
mod receiver;
mod sender;
mod source;
#[cfg(unix)]
mod unix;
mod wire;

pub use command::{Command, Status};
pub use error::MigrationError;
pub use receiver::{ReceiveSummary, Receiver, MAX_TABLE_BYTES};
pub use sender::{SendStats, Sender, DEFAULT_BUFFER_BYTES};
pub use source::{diff_pages, hash_pages, MemorySource};
#[cfg(unix)]
pub use unix::receive_on_unix_socket;
pub use wire::{Request, Response, REQUEST_BYTES, RESPONSE_BYTES};
