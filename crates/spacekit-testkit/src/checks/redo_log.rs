//! Target `redo_log`: the redo log a crash leaves beside an ext4 image
//! (`<image>.spacekit-redo`), as the next open finds it. The log's format
//! is the one documented in `crates/spacekit/src/ext4/tx/redo.rs`; this
//! check builds logs from that text alone.
//!
//! The input picks a base image (those of the `ext4` target) and then
//! either gives the log's bytes as they are, or builds a complete log:
//! version 1, 2, 3 or a newer 4, up to 8 records at offsets and lengths
//! (0 to 2,048 bytes) it picks
//! (inside the image or not), each 512-byte sector one repeated byte or
//! bytes of its own, `before` sums right or wrong, the image's UUID or
//! another; and then perhaps flips one byte, re-signing the log or not.
//!
//! * A read-only open never panics and changes neither image nor log.
//! * A read-write open never panics. When it refuses the log (another
//!   file system's, a record past the image's end, a newer version: a
//!   built version 4 log must be refused) the image and the log are as
//!   they were. Otherwise the log is gone, and for a built log
//!   that was not flipped: if it is current (every sector it covers holds
//!   its new bytes or bytes whose CRC is its `before` sum; always, for
//!   version 1) the image holds every record's bytes, applied in order,
//!   and nothing else changed; if it is stale, or was flipped and not
//!   re-signed, the image is as it was.

use std::fs;

use spacekit::crc32c;
use spacekit::ext4::{Ext4Error, Image, OpenMode};

use super::ext4::{bases, TempImage};
use super::input::Input;

const SECTOR: usize = 512;

/// One record of a built log.
pub struct Rec {
    /// Byte offset in the image.
    pub offset: u64,
    /// The new bytes.
    pub data: Vec<u8>,
    /// CRC-32C of each 512-byte sector as it was (versions 2 and later).
    pub before: Vec<u32>,
}

/// A complete, signed log of `version` (1 to 4) for the file system with
/// `uuid`, built from the format in the module doc of `tx/redo.rs` alone:
/// an encoder independent of spacekit's, for this check and for tests of
/// the versions spacekit no longer writes.
pub fn encode(version: u32, uuid: &[u8], recs: &[Rec]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(b"SKREDO01");
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(recs.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(uuid);
    for r in recs {
        out.extend_from_slice(&r.offset.to_le_bytes());
        out.extend_from_slice(&(r.data.len() as u32).to_le_bytes());
        if version >= 2 {
            for s in &r.before {
                out.extend_from_slice(&s.to_le_bytes());
            }
        }
        if version >= 3 {
            let sectors: Vec<&[u8]> = r.data.chunks(SECTOR).collect();
            let uniform = |s: &[u8]| s.iter().all(|&b| b == s[0]);
            let mut mask = vec![0u8; sectors.len().div_ceil(8)];
            for (i, s) in sectors.iter().enumerate() {
                if uniform(s) {
                    mask[i / 8] |= 1 << (i % 8);
                }
            }
            out.extend_from_slice(&mask);
            for s in sectors {
                if uniform(s) {
                    out.push(s[0]);
                } else {
                    out.extend_from_slice(s);
                }
            }
        } else {
            out.extend_from_slice(&r.data);
        }
    }
    sign(&mut out);
    out
}

/// Sets the total length (trailer included) and appends the trailer.
fn sign(out: &mut Vec<u8>) {
    let total = (out.len() + 8) as u64;
    out[16..24].copy_from_slice(&total.to_le_bytes());
    let crc = crc32c::checksum(out);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(b"SKOK");
}

/// Whether every sector `recs` cover holds its new bytes or bytes whose
/// CRC is its `before` sum.
fn current(image: &[u8], version: u32, recs: &[Rec]) -> bool {
    version == 1
        || recs.iter().all(|r| {
            let at = r.offset as usize;
            let now = &image[at..at + r.data.len()];
            now.chunks(SECTOR)
                .zip(r.data.chunks(SECTOR))
                .zip(&r.before)
                .all(|((now, new), &old)| now == new || crc32c::checksum(now) == old)
        })
}

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let base = &bases()[input.below(3) as usize];
    let image = base.bytes.clone();
    let len = image.len() as u64;
    // What a built, unflipped log must leave: `Some(bytes)`.
    let mut expect: Option<Vec<u8>> = None;
    // A complete log of a newer version: refused and kept.
    let mut newer = false;
    let log = if input.bool() {
        input.rest().to_vec()
    } else {
        // Version 4 stands for a newer spacekit's log (laid out as 3).
        let version = 1 + input.below(4) as u32;
        let uuid = if input.u8() < 224 {
            image[1024 + 0x68..1024 + 0x78].to_vec()
        } else {
            let mut u = input.bytes(16).to_vec();
            u.resize(16, 0);
            u
        };
        let mut recs = Vec::new();
        for _ in 0..input.below(9) {
            let n = input.below(2049) as usize;
            let offset = if input.u8() < 240 {
                input.below(len - n as u64)
            } else {
                input.edgy_u64()
            };
            let mut data = Vec::with_capacity(n);
            while data.len() < n {
                let k = (n - data.len()).min(SECTOR);
                if input.bool() {
                    data.resize(data.len() + k, input.u8());
                } else {
                    let own = input.bytes(k);
                    data.extend_from_slice(own);
                    data.resize(data.len() + k - own.len(), 0);
                }
            }
            let at = offset.min(len) as usize;
            let before = data
                .chunks(SECTOR)
                .enumerate()
                .map(|(i, s)| {
                    let a = (at + i * SECTOR).min(image.len());
                    let b = (a + s.len()).min(image.len());
                    let right = crc32c::checksum(&image[a..b]);
                    if input.u8() < 224 {
                        right
                    } else {
                        right ^ 1
                    }
                })
                .collect();
            recs.push(Rec {
                offset,
                data,
                before,
            });
        }
        let mut log = encode(version, &uuid, &recs);
        let flip = input.u8();
        let inside = recs
            .iter()
            .all(|r| r.offset.saturating_add(r.data.len() as u64) <= len);
        let ours = uuid == image[1024 + 0x68..1024 + 0x78];
        if flip < 32 {
            let at = input.below(log.len() as u64) as usize;
            log[at] ^= 1 << (flip % 8);
            if flip < 16 {
                // Re-signed: whether it still decodes is not predicted.
                log.truncate(log.len() - 8);
                sign(&mut log);
            } else {
                // Not re-signed: incomplete, so discarded.
                expect = Some(image.clone());
            }
        } else if version == 4 {
            newer = true;
        } else if inside && ours {
            let mut want = image.clone();
            if current(&image, version, &recs) {
                for r in &recs {
                    let at = r.offset as usize;
                    want[at..at + r.data.len()].copy_from_slice(&r.data);
                }
            }
            expect = Some(want);
        }
        log
    };

    let tmp = TempImage::new(&image);
    let log_path = Image::redo_log_path(&tmp.path);
    fs::write(&log_path, &log).expect("write the log");

    if let Err(e) = Image::open(&tmp.path, OpenMode::ReadOnly) {
        let _ = e.to_string();
    }
    assert!(tmp.bytes() == image, "a read-only open wrote to the image");
    assert_eq!(
        fs::read(&log_path).ok().as_deref(),
        Some(&log[..]),
        "a read-only open touched the log"
    );

    match Image::open(&tmp.path, OpenMode::ReadWrite) {
        Err(Ext4Error::RedoLogMismatch { .. }) => {
            assert!(tmp.bytes() == image, "a refused log changed the image");
            assert!(log_path.exists(), "a refused log was removed");
            assert!(expect.is_none(), "a complete log of this image was refused");
        }
        other => {
            assert!(
                !newer,
                "a log of a newer version was not refused: {other:?}"
            );
            if let Err(e) = other {
                let _ = e.to_string();
            }
            assert!(
                !log_path.exists(),
                "the log is still there after a read-write open"
            );
            if let Some(want) = expect {
                let got = tmp.bytes();
                let first = got.iter().zip(&want).position(|(a, b)| a != b);
                assert!(
                    first.is_none(),
                    "after replay the image differs at byte {first:?}"
                );
            }
        }
    }
}
