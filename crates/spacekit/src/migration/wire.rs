//! The 16-byte request and response headers of Cloud Hypervisor's migration
//! stream (`vm_migration::protocol::{Request, Response}`), and the helpers
//! that read and write them.

use std::io::{self, Read, Write};

use super::command::{Command, Status};
use super::error::MigrationError;
use crate::dirty::{MemoryRange, WIRE_RANGE_BYTES};

/// Bytes in a [`Request`] header on the wire.
pub const REQUEST_BYTES: usize = 16;

/// Bytes in a [`Response`] header on the wire.
pub const RESPONSE_BYTES: usize = 16;

impl TryFrom<u16> for Command {
    type Error = MigrationError;

    /// # Errors
    /// [`MigrationError::UnknownCommand`] for any value but the commands'.
    fn try_from(value: u16) -> Result<Self, MigrationError> {
        Ok(match value {
            1 => Command::Start,
            2 => Command::Config,
            3 => Command::State,
            4 => Command::Memory,
            5 => Command::Complete,
            6 => Command::Abandon,
            7 => Command::MemoryFd,
            8 => Command::CompletePaused,
            9 => Command::PageFault,
            0x5348 => Command::PageHashes,
            0x535a => Command::SparseMemory,
            _ => return Err(MigrationError::UnknownCommand { value }),
        })
    }
}

impl TryFrom<u16> for Status {
    type Error = MigrationError;

    /// # Errors
    /// [`MigrationError::UnknownStatus`] for any value but 0, 1 and 2.
    fn try_from(value: u16) -> Result<Self, MigrationError> {
        Ok(match value {
            0 => Status::Invalid,
            1 => Status::Ok,
            2 => Status::Error,
            _ => return Err(MigrationError::UnknownStatus { value }),
        })
    }
}

/// A request header: Cloud Hypervisor's `vm_migration::protocol::Request`.
///
/// On the wire, 16 bytes: `command` as a `u16`, 6 bytes of
/// `command_headers` (zero except in `Start`, whose first two bytes are the
/// protocol version and whose next four offer spacekit's
/// [`Extensions`](super::command::Extensions)), then `length` as a `u64`, the number
/// of payload bytes that follow the header. Cloud
/// Hypervisor writes the `#[repr(C)]` struct in native byte order; spacekit
/// always uses little-endian, which is the same bytes on little-endian hosts
/// (x86_64, and aarch64 as Linux runs it).
///
/// ```
/// use spacekit::migration::{Command, Request};
///
/// let req = Request::new(Command::Memory, 32);
/// let bytes = req.to_bytes();
/// assert_eq!(bytes[..2], [4, 0]);
/// assert_eq!(bytes[8..], 32u64.to_le_bytes());
/// assert_eq!(Request::from_bytes(&bytes)?, req);
/// # Ok::<(), spacekit::migration::MigrationError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Request {
    /// What the request asks for.
    pub command: Command,
    /// The six bytes after the command (Cloud Hypervisor's
    /// `command_headers`): zero but in `Start`.
    pub command_headers: [u8; 6],
    /// Payload bytes that follow the header.
    pub length: u64,
}

impl Request {
    /// A request for `command` with `length` bytes of payload and zero
    /// `command_headers`.
    pub fn new(command: Command, length: u64) -> Self {
        Request {
            command,
            command_headers: [0; 6],
            length,
        }
    }

    /// A `Start` request carrying protocol `version` in its first two
    /// header bytes, as Cloud Hypervisor's `Request::start` does, and
    /// offering `offer` in the next four (all zero for
    /// [`Extensions::NONE`](super::command::Extensions::NONE): exactly Cloud
    /// Hypervisor's bytes).
    pub fn start(version: u16, offer: super::command::Extensions) -> Self {
        Request {
            command: Command::Start,
            command_headers: super::command::start_headers(version, offer),
            length: 0,
        }
    }

    /// The protocol version in the first two header bytes (meaningful in a
    /// `Start` request; Cloud Hypervisor's `sender_protocol_version`).
    pub fn version(&self) -> u16 {
        u16::from_le_bytes([self.command_headers[0], self.command_headers[1]])
    }

    /// The 16 bytes on the wire.
    pub fn to_bytes(&self) -> [u8; REQUEST_BYTES] {
        let mut b = header(self.command.value(), self.length);
        b[2..8].copy_from_slice(&self.command_headers);
        b
    }

    /// Parses 16 bytes from the wire.
    ///
    /// # Errors
    /// [`MigrationError::UnknownCommand`].
    pub fn from_bytes(bytes: &[u8; REQUEST_BYTES]) -> Result<Self, MigrationError> {
        let (command, length) = split_header(bytes);
        Ok(Request {
            command: Command::try_from(command)?,
            command_headers: six(bytes),
            length,
        })
    }

    /// Reads and parses a header from `stream` (Cloud Hypervisor's
    /// `Request::read_from`).
    ///
    /// # Errors
    /// [`MigrationError::Truncated`] when the stream ends first,
    /// [`MigrationError::Io`], [`MigrationError::UnknownCommand`].
    pub fn read_from<R: Read + ?Sized>(stream: &mut R) -> Result<Self, MigrationError> {
        let mut bytes = [0u8; REQUEST_BYTES];
        read_full(stream, &mut bytes, "request header")?;
        Request::from_bytes(&bytes)
    }

    /// Writes the header to `stream` (Cloud Hypervisor's
    /// `Request::write_to`).
    ///
    /// # Errors
    /// [`MigrationError::Io`].
    pub fn write_to<W: Write + ?Sized>(&self, stream: &mut W) -> Result<(), MigrationError> {
        write_all(stream, &self.to_bytes())
    }
}

/// A response header: Cloud Hypervisor's `vm_migration::protocol::Response`.
///
/// On the wire, 16 bytes: `status` as a `u16`, 6 bytes of `padding` (zero,
/// except that a spacekit receiver accepts extensions in its answer to a
/// `Start` that offered them: see [`Extensions`](super::command::Extensions)), then
/// `length` as a `u64`, the payload bytes that follow (0 except for
/// [`Command::PageHashes`]). Little-endian, as [`Request`].
///
/// ```
/// use spacekit::migration::{Response, Status};
///
/// let bytes = Response::ok().to_bytes();
/// assert_eq!(bytes, [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
/// assert_eq!(Response::from_bytes(&bytes)?.status, Status::Ok);
/// # Ok::<(), spacekit::migration::MigrationError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Response {
    /// Whether the request succeeded.
    pub status: Status,
    /// The six bytes after the status: zero but in a spacekit receiver's
    /// answer to a `Start` that offered extensions.
    pub padding: [u8; 6],
    /// Payload bytes that follow the header.
    pub length: u64,
}

impl Response {
    /// A response with `status`, zero padding and `length` bytes of payload.
    pub fn new(status: Status, length: u64) -> Self {
        Response {
            status,
            padding: [0; 6],
            length,
        }
    }

    /// [`Status::Ok`], no payload.
    pub fn ok() -> Self {
        Response::new(Status::Ok, 0)
    }

    /// [`Status::Error`], no payload.
    pub fn error() -> Self {
        Response::new(Status::Error, 0)
    }

    /// The 16 bytes on the wire.
    pub fn to_bytes(&self) -> [u8; RESPONSE_BYTES] {
        let mut b = header(self.status.value(), self.length);
        b[2..8].copy_from_slice(&self.padding);
        b
    }

    /// Parses 16 bytes from the wire.
    ///
    /// # Errors
    /// [`MigrationError::UnknownStatus`].
    pub fn from_bytes(bytes: &[u8; RESPONSE_BYTES]) -> Result<Self, MigrationError> {
        let (status, length) = split_header(bytes);
        Ok(Response {
            status: Status::try_from(status)?,
            padding: six(bytes),
            length,
        })
    }

    /// Reads and parses a header from `stream`.
    ///
    /// # Errors
    /// [`MigrationError::Truncated`] when the stream ends first,
    /// [`MigrationError::Io`], [`MigrationError::UnknownStatus`].
    pub fn read_from<R: Read + ?Sized>(stream: &mut R) -> Result<Self, MigrationError> {
        let mut bytes = [0u8; RESPONSE_BYTES];
        read_full(stream, &mut bytes, "response header")?;
        Response::from_bytes(&bytes)
    }

    /// Writes the header to `stream`.
    ///
    /// # Errors
    /// [`MigrationError::Io`].
    pub fn write_to<W: Write + ?Sized>(&self, stream: &mut W) -> Result<(), MigrationError> {
        write_all(stream, &self.to_bytes())
    }
}

/// A 16-byte header: `first` as a little-endian `u16`, six zero bytes, then
/// `length` as a little-endian `u64`.
fn header(first: u16, length: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..2].copy_from_slice(&first.to_le_bytes());
    b[8..].copy_from_slice(&length.to_le_bytes());
    b
}

/// Bytes 2..8 of a 16-byte header.
fn six(b: &[u8; 16]) -> [u8; 6] {
    let [_, _, c0, c1, c2, c3, c4, c5, ..] = *b;
    [c0, c1, c2, c3, c4, c5]
}

/// The `u16` and `u64` fields of a 16-byte header.
pub(crate) fn split_header(b: &[u8; 16]) -> (u16, u64) {
    let [a0, a1, _, _, _, _, _, _, rest @ ..] = *b;
    (u16::from_le_bytes([a0, a1]), u64::from_le_bytes(rest))
}

/// The range in one 16-byte table entry (`gpa` then `length`, little-endian;
/// [`MemoryRangeTable::to_bytes`](crate::dirty::MemoryRangeTable::to_bytes)'s
/// layout).
pub(crate) fn decode_range(entry: &[u8]) -> MemoryRange {
    debug_assert_eq!(entry.len(), WIRE_RANGE_BYTES);
    let mut g = [0u8; 8];
    let mut l = [0u8; 8];
    g.copy_from_slice(&entry[..8]);
    l.copy_from_slice(&entry[8..16]);
    MemoryRange {
        gpa: u64::from_le_bytes(g),
        length: u64::from_le_bytes(l),
    }
}

/// Fills `buf` from `stream`, retrying interrupted reads.
///
/// # Errors
/// [`MigrationError::Truncated`] (with the bytes that did arrive) when the
/// stream ends or reports [`io::ErrorKind::UnexpectedEof`] first;
/// [`MigrationError::Io`] for other errors.
pub(crate) fn read_full<R: Read + ?Sized>(
    stream: &mut R,
    buf: &mut [u8],
    what: &'static str,
) -> Result<(), MigrationError> {
    let expected = buf.len() as u64;
    let mut got = 0usize;
    while got < buf.len() {
        match stream.read(&mut buf[got..]) {
            Ok(0) => {
                return Err(MigrationError::Truncated {
                    what,
                    expected,
                    got: got as u64,
                })
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(MigrationError::from_io(&e, what, expected, got as u64)),
        }
    }
    Ok(())
}

/// Checks that range `index` of a table, `[gpa, gpa + length)`, lies
/// inside memory of `memory_size` bytes (what both the sender and the
/// receiver check before any byte of memory moves).
///
/// # Errors
/// [`MigrationError::RangeOverflow`] or [`MigrationError::RangeOutsideMemory`].
pub(crate) fn check_range(
    index: usize,
    r: MemoryRange,
    memory_size: u64,
) -> Result<(), MigrationError> {
    let end = r
        .gpa
        .checked_add(r.length)
        .ok_or(MigrationError::RangeOverflow { index })?;
    if end > memory_size {
        return Err(MigrationError::RangeOutsideMemory {
            index,
            gpa: r.gpa,
            length: r.length,
            memory_size,
        });
    }
    Ok(())
}

/// Writes all of `bytes` to `stream`.
///
/// # Errors
/// [`MigrationError::Io`].
pub(crate) fn write_all<W: Write + ?Sized>(
    stream: &mut W,
    bytes: &[u8],
) -> Result<(), MigrationError> {
    stream.write_all(bytes).map_err(|e| MigrationError::io(&e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dirty::MemoryRangeTable;

    const COMMANDS: [Command; 11] = [
        Command::Start,
        Command::Config,
        Command::State,
        Command::Memory,
        Command::Complete,
        Command::Abandon,
        Command::MemoryFd,
        Command::CompletePaused,
        Command::PageFault,
        Command::PageHashes,
        Command::SparseMemory,
    ];

    #[test]
    fn command_values_are_cloud_hypervisors() {
        let values: Vec<u16> = COMMANDS.iter().map(|c| c.value()).collect();
        assert_eq!(values, [1, 2, 3, 4, 5, 6, 7, 8, 9, 0x5348, 0x535a]);
        assert_eq!(Status::Invalid.value(), 0);
        assert_eq!(Status::Ok.value(), 1);
        assert_eq!(Status::Error.value(), 2);
    }

    #[test]
    fn request_round_trip() {
        for c in COMMANDS {
            for len in [0, 1, 8, 16, 0x1234_5678_9abc_def0, u64::MAX] {
                let r = Request::new(c, len);
                let b = r.to_bytes();
                assert_eq!(b[..2], c.value().to_le_bytes());
                assert_eq!(b[2..8], [0; 6], "command_headers are zero");
                assert_eq!(b[8..], len.to_le_bytes());
                assert_eq!(Request::from_bytes(&b), Ok(r));
                // Non-zero command_headers are kept, not interpreted.
                let mut h = b;
                h[2..8].copy_from_slice(&[0xff; 6]);
                let got = Request::from_bytes(&h).unwrap();
                assert_eq!((got.command, got.length), (c, len));
                assert_eq!(got.command_headers, [0xff; 6]);
                assert_eq!(got.to_bytes(), h);
            }
        }
    }

    #[test]
    fn response_round_trip() {
        for s in [Status::Invalid, Status::Ok, Status::Error] {
            for len in [0, 4, u64::MAX] {
                let r = Response::new(s, len);
                let b = r.to_bytes();
                assert_eq!(b[..2], s.value().to_le_bytes());
                assert_eq!(b[2..8], [0; 6]);
                assert_eq!(b[8..], len.to_le_bytes());
                assert_eq!(Response::from_bytes(&b), Ok(r));
                let mut h = b;
                h[2..8].copy_from_slice(&[0xa5; 6]);
                let got = Response::from_bytes(&h).unwrap();
                assert_eq!((got.status, got.length, got.padding), (s, len, [0xa5; 6]));
                assert_eq!(got.to_bytes(), h);
            }
        }
        assert_eq!(Response::ok(), Response::new(Status::Ok, 0));
        assert_eq!(Response::error(), Response::new(Status::Error, 0));
    }

    #[test]
    fn unknown_values_are_typed_errors() {
        let known = |v: u16| (1..=9).contains(&v) || v == 0x5348 || v == 0x535a;
        for v in (0..=u16::MAX).filter(|v| !known(*v)) {
            let b = header(v, 0);
            assert_eq!(
                Request::from_bytes(&b),
                Err(MigrationError::UnknownCommand { value: v })
            );
        }
        for v in 3..=u16::MAX {
            assert_eq!(
                Response::from_bytes(&header(v, 7)),
                Err(MigrationError::UnknownStatus { value: v })
            );
        }
    }

    #[test]
    fn start_carries_the_version_and_the_offer() {
        use crate::migration::Extensions;
        // Cloud Hypervisor's Start: version 0, all six bytes zero.
        let plain = Request::start(0, Extensions::NONE).to_bytes();
        assert_eq!(plain, [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let r = Request::start(0x0102, Extensions::PAGE_HASHES);
        let b = r.to_bytes();
        assert_eq!(b[..8], [1, 0, 2, 1, b'S', b'K', 1, 0]);
        let back = Request::from_bytes(&b).unwrap();
        assert_eq!(back.version(), 0x0102);
        assert_eq!(
            crate::migration::command::offered(&back.command_headers),
            Extensions::PAGE_HASHES
        );
        // Unknown bits are dropped; no marker, no offer.
        assert_eq!(
            crate::migration::command::offered(&[0, 0, b'S', b'K', 0xff, 0xff]),
            Extensions::ALL
        );
        assert_eq!(
            crate::migration::command::offered(&[0, 0, 0, 0, 1, 0]),
            Extensions::NONE
        );
        let p = crate::migration::command::accept_padding(Extensions::PAGE_HASHES);
        assert_eq!(p, [b'S', b'K', 1, 0, 0, 0]);
        assert_eq!(
            crate::migration::command::accepted(&p),
            Extensions::PAGE_HASHES
        );
        assert_eq!(
            crate::migration::command::accept_padding(Extensions::NONE),
            [0; 6]
        );
        assert_eq!(
            crate::migration::command::accepted(&[0; 6]),
            Extensions::NONE
        );
    }

    #[test]
    fn header_layout_is_little_endian() {
        let b = Request::new(Command::PageHashes, 0x0102_0304_0506_0708).to_bytes();
        assert_eq!(b, [0x48, 0x53, 0, 0, 0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1]);
    }

    #[test]
    fn decode_range_matches_table_to_bytes() {
        let mut t = MemoryRangeTable::new();
        t.push(MemoryRange {
            gpa: 0x1122_3344_5566_7788,
            length: 0x99,
        });
        t.push(MemoryRange {
            gpa: 0,
            length: u64::MAX,
        });
        let b = t.to_bytes();
        let got: Vec<MemoryRange> = b.chunks_exact(WIRE_RANGE_BYTES).map(decode_range).collect();
        assert_eq!(got, t.ranges());
    }

    #[test]
    fn read_and_write_headers() {
        let mut buf = Vec::new();
        Request::new(Command::Memory, 48)
            .write_to(&mut buf)
            .unwrap();
        Response::error().write_to(&mut buf).unwrap();
        let mut r = &buf[..];
        assert_eq!(
            Request::read_from(&mut r),
            Ok(Request::new(Command::Memory, 48))
        );
        assert_eq!(Response::read_from(&mut r), Ok(Response::error()));
        assert_eq!(
            Request::read_from(&mut r),
            Err(MigrationError::Truncated {
                what: "request header",
                expected: 16,
                got: 0
            })
        );
        let mut cut = &buf[..10];
        assert_eq!(
            Request::read_from(&mut cut),
            Err(MigrationError::Truncated {
                what: "request header",
                expected: 16,
                got: 10
            })
        );
    }

    /// A reader that fails with `kind` after `ok` bytes.
    struct Failing {
        ok: usize,
        kind: io::ErrorKind,
    }

    impl Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.ok == 0 {
                return Err(io::Error::new(self.kind, "test failure"));
            }
            let n = buf.len().min(self.ok).min(3);
            buf[..n].fill(0);
            self.ok -= n;
            Ok(n)
        }
    }

    #[test]
    fn io_errors_are_typed() {
        let mut r = Failing {
            ok: 5,
            kind: io::ErrorKind::UnexpectedEof,
        };
        assert_eq!(
            Response::read_from(&mut r),
            Err(MigrationError::Truncated {
                what: "response header",
                expected: 16,
                got: 5
            })
        );
        let mut r = Failing {
            ok: 2,
            kind: io::ErrorKind::ConnectionReset,
        };
        match Response::read_from(&mut r) {
            Err(MigrationError::Io { kind, .. }) => {
                assert_eq!(kind, io::ErrorKind::ConnectionReset)
            }
            other => panic!("expected Io, got {other:?}"),
        }
    }
}
