//! A process's address space from `/proc/PID/maps` text, in a
//! [`RangeTree`] (feature `std`).
//!
//! Each line is `start-end perms offset dev inode [path]`: hexadecimal start
//! (inclusive) and end (exclusive) addresses, permissions such as `r-xp`,
//! hexadecimal file offset, device `major:minor` in hex, decimal inode, and
//! an optional path that may contain spaces. Blank lines are skipped; any
//! other malformed line, or two mappings that overlap, is a [`MapsError`]
//! naming the line(s). Every mapping is stored as the inclusive range
//! `[start, end - 1]`.
//!
//! ```
//! use spacekit::rangetree::maps::ProcMaps;
//!
//! let maps = ProcMaps::parse(
//!     "00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon\n\
//!      7ffd4c3e0000-7ffd4c401000 rw-p 00000000 00:00 0   [stack]\n",
//! )?;
//! assert_eq!(maps.tree.len(), 2);
//! assert_eq!(maps.stack, Some(0x7ffd_4c3e_0000));
//! let m = maps.tree.get(0x400123).unwrap();
//! assert_eq!(maps.path(m), "/usr/bin/dbus-daemon");
//! # Ok::<(), spacekit::rangetree::maps::MapsError>(())
//! ```

use core::fmt;
use std::string::{String, ToString};
use std::vec::Vec;

use super::{RangeTree, RangeTreeError};

/// One line of a maps file. The path is an index into [`ProcMaps::paths`]
/// (like the kernel's `vm_file` pointer), so copying a mapping is a plain
/// copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `r`/`-`, `w`/`-`, `x`/`-`, `p`/`s`.
    pub perms: [u8; 4],
    /// File offset.
    pub offset: u64,
    /// Device (major, minor).
    pub dev: (u32, u32),
    /// Inode number.
    pub inode: u64,
    /// Index into [`ProcMaps::paths`], if the line names a path.
    pub path: Option<u32>,
    /// 1-based line number in the text.
    pub line: usize,
}

/// A parsed maps file.
#[derive(Debug)]
pub struct ProcMaps {
    /// The mappings, keyed by `[start, end - 1]`.
    pub tree: RangeTree<Mapping>,
    /// Every distinct path, in first-seen order.
    pub paths: Vec<String>,
    /// The `[stack]` mapping's start, if there is one.
    pub stack: Option<u64>,
}

/// What is wrong with a maps file.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MapsError {
    /// Fewer than the five fields before the path.
    Fields {
        /// 1-based line number.
        line: usize,
        /// Fields found.
        found: usize,
    },
    /// A field that does not parse.
    Field {
        /// 1-based line number.
        line: usize,
        /// Which field: `address range`, `permissions`, `offset`, `device`,
        /// `inode`.
        what: &'static str,
        /// The field's text.
        text: String,
    },
    /// An address range whose end is not above its start.
    EmptyRange {
        /// 1-based line number.
        line: usize,
    },
    /// Two mappings that overlap.
    Overlap {
        /// 1-based line number of the later line.
        line: usize,
        /// Its range, `[start, end)`.
        range: (u64, u64),
        /// The earlier line it overlaps.
        other: usize,
        /// The earlier line's range, `[start, end)`.
        other_range: (u64, u64),
    },
    /// More than 2^32 distinct paths.
    TooManyPaths {
        /// 1-based line number.
        line: usize,
    },
}

impl fmt::Display for MapsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapsError::Fields { line, found } => write!(
                f,
                "line {line}: expected `start-end perms offset dev inode [path]`, found {found} field{}",
                if *found == 1 { "" } else { "s" }
            ),
            MapsError::Field { line, what, text } => write!(f, "line {line}: bad {what} {text:?}"),
            MapsError::EmptyRange { line } => {
                write!(f, "line {line}: bad address range: the end is not above the start")
            }
            MapsError::Overlap {
                line,
                range,
                other,
                other_range,
            } => write!(
                f,
                "line {line}: {:#x}-{:#x} overlaps line {other} ({:#x}-{:#x})",
                range.0, range.1, other_range.0, other_range.1
            ),
            MapsError::TooManyPaths { line } => write!(f, "line {line}: too many paths"),
        }
    }
}

impl std::error::Error for MapsError {}

/// Strict hex: no sign, no prefix, no spaces.
fn hex(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

fn hex32(s: &str) -> Option<u32> {
    hex(s).and_then(|v| u32::try_from(v).ok())
}

/// The fields of one line, and its path (empty when absent).
///
/// # Errors
/// [`MapsError::Fields`], [`MapsError::Field`] or [`MapsError::EmptyRange`].
pub fn parse_line(text: &str, line: usize) -> Result<(Mapping, &str), MapsError> {
    let err = |what: &'static str, field: &str| MapsError::Field {
        line,
        what,
        text: field.to_string(),
    };
    let mut rest = text;
    let mut f = [""; 5];
    for (k, slot) in f.iter_mut().enumerate() {
        rest = rest.trim_start();
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        if end == 0 {
            return Err(MapsError::Fields { line, found: k });
        }
        *slot = &rest[..end];
        rest = &rest[end..];
    }
    let path = rest.trim_start();
    let (start, end) = f[0]
        .split_once('-')
        .and_then(|(a, b)| Some((hex(a)?, hex(b)?)))
        .ok_or_else(|| err("address range", f[0]))?;
    if end <= start {
        return Err(MapsError::EmptyRange { line });
    }
    let p = f[1].as_bytes();
    let ok = p.len() == 4
        && matches!(p[0], b'r' | b'-')
        && matches!(p[1], b'w' | b'-')
        && matches!(p[2], b'x' | b'-')
        && matches!(p[3], b'p' | b's');
    if !ok {
        return Err(err("permissions", f[1]));
    }
    let offset = hex(f[2]).ok_or_else(|| err("offset", f[2]))?;
    let dev = f[3]
        .split_once(':')
        .and_then(|(a, b)| Some((hex32(a)?, hex32(b)?)))
        .ok_or_else(|| err("device", f[3]))?;
    let inode = f[4]
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| f[4].parse::<u64>().ok())
        .flatten()
        .ok_or_else(|| err("inode", f[4]))?;
    let m = Mapping {
        start,
        end,
        perms: [p[0], p[1], p[2], p[3]],
        offset,
        dev,
        inode,
        path: None,
        line,
    };
    Ok((m, path))
}

impl ProcMaps {
    /// Parses a whole maps file.
    ///
    /// # Errors
    /// The first malformed line or overlap, as a [`MapsError`].
    pub fn parse(text: &str) -> Result<ProcMaps, MapsError> {
        let mut tree = RangeTree::new();
        let mut paths: Vec<String> = Vec::new();
        let mut stack = None;
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let raw = raw.strip_suffix('\r').unwrap_or(raw);
            if raw.trim().is_empty() {
                continue;
            }
            let (mut m, path) = parse_line(raw, line)?;
            if !path.is_empty() {
                // Consecutive lines usually name the same file.
                if paths.last().map(String::as_str) != Some(path) {
                    let id =
                        u32::try_from(paths.len()).map_err(|_| MapsError::TooManyPaths { line })?;
                    paths.push(path.to_string());
                    m.path = Some(id);
                } else {
                    m.path = Some((paths.len() - 1) as u32);
                }
                if path == "[stack]" && stack.is_none() {
                    stack = Some(m.start);
                }
            }
            match tree.insert_range(m.start, m.end - 1, m) {
                Ok(()) => {}
                Err(RangeTreeError::Occupied { first, last }) => {
                    let other = tree.get(first).map_or(0, |o: &Mapping| o.line);
                    return Err(MapsError::Overlap {
                        line,
                        range: (m.start, m.end),
                        other,
                        other_range: (first, last.wrapping_add(1)),
                    });
                }
                // insert_range refuses only overlaps and inverted ranges,
                // and the range is checked above.
                Err(_) => return Err(MapsError::EmptyRange { line }),
            }
        }
        Ok(ProcMaps { tree, paths, stack })
    }

    /// The path of `m` ("" when it has none).
    pub fn path(&self, m: &Mapping) -> &str {
        m.path.map_or("", |i| self.paths[i as usize].as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        let (m, p) = parse_line(
            "7f0000001000-7f0000003000 r-xp 00001000 08:01 1234   /usr/lib/a b.so",
            1,
        )
        .unwrap();
        assert_eq!(
            (m.start, m.end, m.offset, m.inode),
            (0x7f00_0000_1000, 0x7f00_0000_3000, 0x1000, 1234)
        );
        assert_eq!(m.dev, (8, 1));
        assert_eq!(&m.perms, b"r-xp");
        assert_eq!(p, "/usr/lib/a b.so");
        let (_, p) = parse_line("1000-2000 rw-p 00000000 00:00 0", 2).unwrap();
        assert_eq!(p, "");
        for (bad, msg) in [
            (
                "zz-10 r--p 0 00:00 0",
                "line 3: bad address range \"zz-10\"",
            ),
            ("2000-1000 r--p 0 00:00 0", "end is not above"),
            ("1000-2000 rwz 0 00:00 0", "bad permissions"),
            ("1000-2000 r--p +0 00:00 0", "bad offset"),
            ("1000-2000 r--p 0 0000 0", "bad device"),
            ("1000-2000 r--p 0 00:00 x", "bad inode"),
            ("1000-2000 r--p", "found 2 fields"),
        ] {
            let e = parse_line(bad, 3).unwrap_err().to_string();
            assert!(e.contains(msg), "{bad}: {e}");
        }
    }

    #[test]
    fn overlaps_and_paths() {
        let e = ProcMaps::parse("1000-3000 r--p 0 00:00 0 /a\n\n2000-4000 r--p 0 00:00 0\n")
            .unwrap_err();
        assert_eq!(
            e,
            MapsError::Overlap {
                line: 3,
                range: (0x2000, 0x4000),
                other: 1,
                other_range: (0x1000, 0x3000)
            }
        );
        let m = ProcMaps::parse(
            "1000-2000 r--p 0 00:00 0 /a\n2000-3000 rw-p 0 00:00 0 /a\n3000-4000 rw-p 0 00:00 0 /b\n",
        )
        .unwrap();
        assert_eq!(m.paths, ["/a", "/b"]);
        assert_eq!(m.stack, None);
        let second = m.tree.get(0x2800).unwrap();
        assert_eq!((second.line, m.path(second)), (2, "/a"));
    }
}
