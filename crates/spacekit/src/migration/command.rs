//! The commands and statuses of Cloud Hypervisor's migration stream.

/// What a [`Request`](super::Request) asks for: Cloud Hypervisor's
/// `vm_migration::protocol::Command`, plus one spacekit extension
/// ([`Command::PageHashes`]) numbered outside Cloud Hypervisor's range.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Command {
    /// Begins a migration (no payload).
    Start = 1,
    /// The VM's configuration (Cloud Hypervisor's JSON; not handled by
    /// [`Receiver`](super::Receiver)).
    Config = 2,
    /// The VM's device state (not handled by [`Receiver`](super::Receiver)).
    State = 3,
    /// A memory table, then the contents of each of its ranges.
    Memory = 4,
    /// Ends a migration successfully (no payload).
    Complete = 5,
    /// Ends a migration unsuccessfully (no payload).
    Abandon = 6,
    /// Guest memory file descriptors over a Unix socket (local migration; not
    /// handled by [`Receiver`](super::Receiver)).
    MemoryFd = 7,
    /// Ends a migration, leaving the destination VM paused (not handled by
    /// [`Receiver`](super::Receiver)).
    CompletePaused = 8,
    /// **spacekit's own extension, not part of Cloud Hypervisor's
    /// protocol** (value `0x5348`, "SH"): the payload is a little-endian
    /// `u64` page size; the receiver answers [`Status::Ok`] with `length =
    /// 4 * pages` followed by the standard CRC-32C
    /// ([`crate::crc32c::checksum`]) of each page of its memory, each a
    /// little-endian `u32`, so the sender can compare source and destination
    /// memory page by page. A Cloud Hypervisor receiver answers it with an
    /// error response.
    PageHashes = 0x5348,
}

impl Command {
    /// The command's value on the wire.
    pub fn value(self) -> u16 {
        self as u16
    }
}

/// A [`Response`](super::Response)'s status: Cloud Hypervisor's
/// `vm_migration::protocol::Status`.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Not a valid status (the value of an all-zero header).
    Invalid = 0,
    /// The request succeeded.
    Ok = 1,
    /// The request failed.
    Error = 2,
}

impl Status {
    /// The status's value on the wire.
    pub fn value(self) -> u16 {
        self as u16
    }
}
