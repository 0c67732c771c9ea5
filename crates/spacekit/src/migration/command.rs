//! The commands and statuses of Cloud Hypervisor's migration stream, its
//! protocol version, and spacekit's negotiated extensions.

/// What a [`Request`](super::Request) asks for: Cloud Hypervisor's
/// `vm_migration::protocol::Command` (1 to 9; 0 is its `Invalid`, which no
/// peer sends), plus two spacekit extensions ([`Command::PageHashes`],
/// [`Command::SparseMemory`]) numbered outside Cloud Hypervisor's range and
/// only ever sent after both sides agreed on them ([`Extensions`]).
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Command {
    /// Begins a migration (no payload). The first two bytes of the
    /// request's `command_headers` carry the sender's protocol version
    /// ([`PROTOCOL_VERSION`]); spacekit also offers its [`Extensions`] in the
    /// next four bytes, which Cloud Hypervisor ignores.
    Start = 1,
    /// The VM's configuration: an opaque payload the VMM supplies (Cloud
    /// Hypervisor sends its `VmMigrationConfig` as JSON). Sent once, after
    /// `Start` and before any `Memory`.
    Config = 2,
    /// The VM's device and vCPU state: an opaque payload the VMM supplies
    /// (Cloud Hypervisor sends its snapshot as JSON). Sent once, after the
    /// last `Memory`.
    State = 3,
    /// A memory table, then the contents of each of its ranges.
    Memory = 4,
    /// Ends a migration successfully; the destination VM runs (no payload).
    Complete = 5,
    /// Ends a migration unsuccessfully (no payload); accepted at any time.
    Abandon = 6,
    /// Guest memory file descriptors over a Unix socket (Cloud Hypervisor's
    /// local migration). [`Receiver`](super::Receiver) refuses it.
    MemoryFd = 7,
    /// Ends a migration successfully, leaving the destination VM paused
    /// (Cloud Hypervisor sends it when the source VM was paused).
    CompletePaused = 8,
    /// Post-copy: asks the peer for one page range's contents (payload: one
    /// 16-byte range). Cloud Hypervisor sends it on a separate fault
    /// connection; spacekit does not serve post-copy and
    /// [`Receiver`](super::Receiver) refuses it.
    PageFault = 9,
    /// **spacekit's own extension, not part of Cloud Hypervisor's
    /// protocol** (value `0x5348`, "SH"), sent only when the receiver
    /// accepted [`Extensions::PAGE_HASHES`] in its answer to `Start`: the
    /// payload is a little-endian `u64` page size; the receiver answers
    /// [`Status::Ok`] with `length = 4 * pages` followed by the standard
    /// CRC-32C ([`crate::crc32c::checksum`]) of each page of its memory,
    /// each a little-endian `u32`, so the sender can compare source and
    /// destination memory page by page. A Cloud Hypervisor receiver does not
    /// know the value and drops the connection without an answer, which is
    /// why it is negotiated first.
    PageHashes = 0x5348,
    /// **spacekit's own extension, not part of Cloud Hypervisor's
    /// protocol** (value `0x535a`, "SZ"), sent instead of
    /// [`Command::Memory`] only when the receiver accepted
    /// [`Extensions::ZERO_PAGES`] in its answer to `Start`: a memory request
    /// whose all-zero pages travel without payload. The header and table are
    /// `Memory`'s (`length` is the table's byte length, a multiple of 16;
    /// the table's 16-byte `{gpa, length}` entries follow). The contents
    /// that follow are cut into *pages*: each range, in table order, into
    /// 4096-byte pieces from its `gpa` (its last piece may be shorter).
    /// The pages, counted across ranges in table order, form groups of 64
    /// (the last group may be shorter). Each group is a little-endian `u64`
    /// *zero mask* — bit `i` set: page `i` of the group is all zero bytes
    /// and is not sent; bits at or above the group's page count are 0 —
    /// then the bytes of each page of the group whose bit is clear, in
    /// order. The receiver writes zeros to the pages whose bit is set (it
    /// may not assume its memory is zero) and the received bytes to the
    /// others, and answers as for `Memory`. A table with no contents (no
    /// ranges, or only empty ones) has no groups.
    SparseMemory = 0x535a,
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

/// Where a [`Receiver`](super::Receiver) is in the protocol: Cloud Hypervisor's
/// `ReceiveMigrationState` (without its memory-fd state, which spacekit
/// does not serve).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReceiveState {
    /// Connected; waiting for `Start`.
    Established,
    /// `Start` accepted; waiting for `Config`.
    Started,
    /// `Config` accepted; `Memory` (and the negotiated extensions' requests)
    /// until `State`.
    Configured,
    /// `State` accepted; waiting for `Complete` or `CompletePaused`.
    StateReceived,
}

/// The protocol version spacekit sends in `Start`: Cloud Hypervisor's
/// `CURRENT_PROTOCOL_VERSION`, 0 (a zero version field is its legacy `v0`).
pub const PROTOCOL_VERSION: u16 = 0;

/// Whether a [`Receiver`](super::Receiver) accepts a `Start` carrying
/// `version`: Cloud Hypervisor's receiver accepts its current version and
/// the one before (`supported_protocol_versions`), which for version 0 is 0
/// alone; anything else is answered with an error.
pub fn version_supported(version: u16) -> bool {
    (PROTOCOL_VERSION.saturating_sub(1)..=PROTOCOL_VERSION).contains(&version)
}

/// spacekit's extensions to Cloud Hypervisor's protocol, as a set of bits.
///
/// They are negotiated in header bytes Cloud Hypervisor leaves zero and
/// ignores, so a plain Cloud Hypervisor peer never sees an extension:
///
/// * the sender's `Start` request carries `b"SK"` and the offered bits
///   (little-endian `u16`) in `command_headers[2..6]` (Cloud Hypervisor reads
///   only the version in bytes 0..2 and ignores the rest);
/// * a spacekit receiver answers that `Start` with `b"SK"` and the accepted
///   bits (offered and supported) in the response's `padding[0..4]`; Cloud
///   Hypervisor's receiver answers with zero padding, which means none.
///
/// A spacekit receiver that is not offered anything answers with zero
/// padding too, exactly as Cloud Hypervisor does, and refuses an extension
/// request that was not negotiated.
///
/// ```
/// use spacekit::migration::Extensions;
///
/// let ext = Extensions::PAGE_HASHES;
/// assert!(ext.contains(Extensions::PAGE_HASHES));
/// assert!(Extensions::NONE.is_empty());
/// assert_eq!(Extensions::from_bits(0xffff), Extensions::ALL);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Extensions(u16);

impl Extensions {
    /// No extension: Cloud Hypervisor's plain protocol.
    pub const NONE: Extensions = Extensions(0);
    /// [`Command::PageHashes`]: the destination's CRC-32C of every page.
    pub const PAGE_HASHES: Extensions = Extensions(1);
    /// [`Command::SparseMemory`]: all-zero 4 KiB pages are sent as bits of
    /// a mask, without their bytes.
    pub const ZERO_PAGES: Extensions = Extensions(2);
    /// Every extension this version of spacekit knows.
    pub const ALL: Extensions = Extensions(3);

    /// The set of `bits`, keeping only the extensions spacekit knows.
    pub fn from_bits(bits: u16) -> Extensions {
        Extensions(bits & Self::ALL.0)
    }

    /// The bits on the wire.
    pub fn bits(self) -> u16 {
        self.0
    }

    /// Whether every extension of `other` is in `self`.
    pub fn contains(self, other: Extensions) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The extensions in both sets.
    pub fn intersection(self, other: Extensions) -> Extensions {
        Extensions(self.0 & other.0)
    }

    /// The extensions in either set.
    pub fn union(self, other: Extensions) -> Extensions {
        Extensions(self.0 | other.0)
    }

    /// The extensions of `self` that are not in `other`.
    pub fn difference(self, other: Extensions) -> Extensions {
        Extensions(self.0 & !other.0)
    }
}

/// The marker of spacekit's extension bytes in `Start`'s `command_headers`
/// and in its answer's padding.
pub(crate) const EXTENSION_MAGIC: [u8; 2] = *b"SK";

/// `command_headers` of a `Start` request: the version, then the offered
/// extensions (none: all zero after the version, as Cloud Hypervisor sends).
pub(crate) fn start_headers(version: u16, offer: Extensions) -> [u8; 6] {
    let mut h = [0u8; 6];
    h[..2].copy_from_slice(&version.to_le_bytes());
    if !offer.is_empty() {
        h[2..4].copy_from_slice(&EXTENSION_MAGIC);
        h[4..6].copy_from_slice(&offer.bits().to_le_bytes());
    }
    h
}

/// The extensions offered in a `Start` request's `command_headers`.
pub(crate) fn offered(headers: &[u8; 6]) -> Extensions {
    if headers[2..4] == EXTENSION_MAGIC {
        Extensions::from_bits(u16::from_le_bytes([headers[4], headers[5]]))
    } else {
        Extensions::NONE
    }
}

/// The padding of the answer to `Start` that accepts `accepted` (all zero
/// for none, as Cloud Hypervisor answers).
pub(crate) fn accept_padding(accepted: Extensions) -> [u8; 6] {
    let mut p = [0u8; 6];
    if !accepted.is_empty() {
        p[..2].copy_from_slice(&EXTENSION_MAGIC);
        p[2..4].copy_from_slice(&accepted.bits().to_le_bytes());
    }
    p
}

/// The extensions a receiver accepted, from the padding of its answer to
/// `Start`.
pub(crate) fn accepted(padding: &[u8; 6]) -> Extensions {
    if padding[..2] == EXTENSION_MAGIC {
        Extensions::from_bits(u16::from_le_bytes([padding[2], padding[3]]))
    } else {
        Extensions::NONE
    }
}
