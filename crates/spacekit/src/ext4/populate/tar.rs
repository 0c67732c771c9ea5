//! A tar archive as a populate source ([`Populate::add_tar`]): plain, or
//! compressed with gzip or zstd (told apart by their magic numbers), read
//! as a stream with the `tar` crate (GNU, ustar and PAX headers, GNU long
//! names and link names) and added entry by entry, each file's contents
//! streamed into the image (never a whole file in memory).
//!
//! What the `tar` crate leaves to its caller is done here: PAX times with
//! fractions of a second, `SCHILY.xattr.*` attributes and the
//! `SCHILY.acl.*` text ACLs that GNU tar and star write (turned into the
//! `system.posix_acl_*` values `getxattr(2)` gives), and the three PAX
//! forms of sparse files GNU tar writes (0.0, 0.1 and 1.0) and the old GNU
//! `S` entries: only a sparse file's data pieces are read and written
//! ([`Contents::Pieces`]), so a file of terabytes with little data takes
//! the time of its data; blocks of zeros become holes in the image.

use std::boxed::Box;
use std::collections::BTreeMap;
use std::io::{self, BufReader, Read};
use std::string::{String, ToString};
use std::vec::Vec;

use ::tar::{EntryType, GnuExtSparseHeader, Header};
use ruzstd::decoding::FrameDecoder;

use crate::ext4::error::Ext4Error;
use crate::ext4::namespace::{NodeKind, Timestamp};
use crate::ext4::populate::{Contents, Entry, EntryKind, Meta, Populate};

mod acl;
mod numbers;
mod stream;

use acl::{acl_mode, acl_xattr};
use numbers::header_number;
use stream::{Gz, Zstd};

/// The first bytes of a gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
/// The first bytes of a zstd frame.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

impl Populate<'_> {
    /// Adds every entry of the tar archive `r` reads, as [`Populate::add`]
    /// would one at a time, in archive order. A gzip or zstd stream (by
    /// its magic number) is decompressed first; anything else is read as
    /// a tar archive.
    ///
    /// Like GNU tar extracting, leading `/` and `./` are dropped from
    /// names and `//` is read as `/`; the entry `./` (or `.`, or `/`)
    /// gives its mode, owner, times and xattrs to the populate's
    /// directory. Entries: directories, regular and sparse files, hard
    /// links, symbolic links, character and block devices and FIFOs;
    /// owners and permission bits (setuid, setgid, sticky) from the
    /// header, times from the PAX `mtime`/`atime`/`ctime` records to the
    /// nanosecond (else the header's seconds; atime and ctime default to
    /// the mtime), extended attributes from `SCHILY.xattr.NAME`, POSIX
    /// ACLs from `SCHILY.acl.access` and `SCHILY.acl.default` when no
    /// `system.posix_acl_*` attribute came with them (user and group
    /// names in them are looked up in `/etc/passwd` and `/etc/group`).
    /// As tar extracting on Linux: an access ACL sets the permission bits
    /// (owner from `user::`, group from `mask::`, others from `other::`),
    /// and a symlink's are 0777. A PAX global header's `uid`, `gid`,
    /// times and `SCHILY.*` records hold for every later entry that does
    /// not set its own; GNU volume labels are skipped. Header times may be
    /// negative (GNU's base-256 numbers). An empty stream is an error, as
    /// it is to GNU tar (an empty archive is its end-of-archive blocks).
    ///
    /// # Errors
    /// [`Ext4Error::BadSource`] for a damaged or truncated archive, a
    /// name with a `..` component, an entry type that cannot be made (a
    /// GNU multi-volume continuation) or a record that does not parse;
    /// [`Ext4Error::Io`] when reading `r` fails;
    /// [`Ext4Error::PopulateNoSpace`] when the image runs out of blocks or
    /// inodes (after the rest of the archive was counted); as
    /// [`Populate::add`]. After an error the populate is rolled back (the
    /// image is as before [`Populate::new`]).
    pub fn add_tar(&mut self, r: impl Read) -> Result<(), Ext4Error> {
        let r = self.walk_tar(r);
        if r.is_err() {
            // The source failed between entries: roll back as `add` does
            // when an entry fails.
            self.fail(false);
        }
        r
    }

    /// [`Populate::add_tar`] without the rollback.
    fn walk_tar(&mut self, mut r: impl Read) -> Result<(), Ext4Error> {
        let mut head = [0u8; 4];
        let n = read_up_to(&mut r, &mut head).map_err(source_err(""))?;
        if n == 0 {
            // As GNU tar: an empty stream is not an archive (an empty
            // archive is its end-of-archive blocks), so that a producer
            // that failed before writing anything is not taken for one.
            return Err(bad("", "an empty stream, not a tar archive"));
        }
        let src = io::Cursor::new(head).take(n as u64).chain(r);
        let compressed = head[..n].starts_with(&GZIP_MAGIC) || head[..n].starts_with(&ZSTD_MAGIC);
        let mut stream: Box<dyn Read + '_> = if head[..n].starts_with(&GZIP_MAGIC) {
            Box::new(Gz::new(BufReader::new(src)))
        } else if head[..n].starts_with(&ZSTD_MAGIC) {
            Box::new(Zstd {
                src: BufReader::new(src),
                dec: FrameDecoder::new(),
                live: false,
            })
        } else {
            Box::new(src)
        };
        let mut room = false;
        // Extension members that describe the next entry.
        let (mut long_name, mut long_link, mut pax_raw) = (None, None, None);
        // What PAX global headers make of every later entry, before its
        // own records.
        let mut defaults = Pax::default();
        loop {
            let mut h = Header::new_old();
            if !read_block(&mut stream, h.as_mut_bytes(), "")? {
                break;
            }
            if h.as_bytes().iter().all(|&b| b == 0) {
                // The end-of-archive blocks.
                break;
            }
            let name = String::from_utf8_lossy(long_name.as_deref().unwrap_or(&h.path_bytes()))
                .into_owned();
            check_sum(&h, &name)?;
            let et = h.entry_type();
            let field = |_| bad(&name, "a header field that does not parse");
            let stored = h.entry_size().map_err(field)?;
            if let b'x' | b'g' | b'L' | b'K' = et.as_byte() {
                if stored > MAX_META {
                    return Err(bad(&name, "an extension member over 16 MiB"));
                }
                let mut body = Vec::new();
                (&mut stream)
                    .take(stored)
                    .read_to_end(&mut body)
                    .map_err(source_err(&name))?;
                if body.len() as u64 != stored {
                    return Err(bad(&name, "the archive ends inside an entry"));
                }
                skip(&mut stream, padding(stored), &name)?;
                let slot = match et.as_byte() {
                    b'x' => &mut pax_raw,
                    b'L' => &mut long_name,
                    b'K' => &mut long_link,
                    // A PAX global header: its records hold for every
                    // later entry (a later one replaces a key's value, an
                    // empty value removes it), under the entry's own.
                    _ => {
                        for (k, v) in pax_records(&body, &name)? {
                            match k.strip_prefix(b"SCHILY.xattr.") {
                                // An empty value removes a global xattr
                                // (an entry's own may be empty).
                                Some(x) if v.is_empty() => {
                                    defaults.xattrs.remove(&*String::from_utf8_lossy(x));
                                }
                                _ if GLOBAL_KEYS.contains(&k) || k.starts_with(b"SCHILY.") => {
                                    defaults.take(k, v, &name)?;
                                }
                                _ => {}
                            }
                        }
                        continue;
                    }
                };
                if slot.is_some() {
                    return Err(bad(
                        &name,
                        "two extension members of one kind for one entry",
                    ));
                }
                if et.as_byte() != b'x' {
                    while body.last() == Some(&0) {
                        body.pop();
                    }
                }
                *slot = Some(body);
                continue;
            }
            let mut pax = defaults.clone();
            if let Some(raw) = pax_raw.take() {
                for (k, v) in pax_records(&raw, &name)? {
                    pax.take(k, v, &name)?;
                }
            }
            let raw_path = pax
                .sparse_name
                .take()
                .or(pax.path.take())
                .or(long_name.take())
                .unwrap_or_else(|| h.path_bytes().into_owned());
            let link = pax
                .linkpath
                .take()
                .or(long_link.take())
                .or_else(|| h.link_name_bytes().map(|l| l.into_owned()))
                .unwrap_or_default();
            let name = String::from_utf8_lossy(&raw_path).into_owned();
            let path = normalize(&raw_path, &name)?;
            let mut meta = meta_of(&h, &mut pax, &name)?;
            if et == EntryType::Symlink {
                // Linux gives every symlink 0777 (symlink(2) takes no
                // mode), as tar extracting it gets.
                meta.perm = 0o777;
            }
            let size = pax.size.unwrap_or(stored);
            if et.is_gnu_sparse() {
                pax.old_gnu_sparse(&h, &mut stream, &name)?;
            }
            let need_link = || match link.is_empty() {
                true => Err(bad(&name, "a link without a target")),
                false => Ok(link.clone()),
            };
            let (major, minor) = match (h.device_major(), h.device_minor()) {
                (Ok(Some(major)), Ok(Some(minor))) => (major, minor),
                _ => (u32::MAX, u32::MAX),
            };
            let mut data = (&mut stream).take(size);
            let kind = match et {
                EntryType::Directory => EntryKind::Dir,
                // `D`: a GNU dump directory (its listing is not needed).
                _ if et.as_byte() == b'D' => EntryKind::Dir,
                // Before ustar, a directory was a regular entry whose name
                // ends with `/`.
                EntryType::Regular if raw_path.ends_with(b"/") => EntryKind::Dir,
                EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
                    match pax.sparse(&mut data, size, &name)? {
                        Some((pieces, real)) => EntryKind::File(Contents::Pieces {
                            reader: &mut data,
                            pieces,
                            size: real,
                        }),
                        None => EntryKind::File(Contents::Reader {
                            reader: &mut data,
                            size,
                        }),
                    }
                }
                EntryType::Link => EntryKind::HardLink(normalize(&need_link()?, &name)?),
                EntryType::Symlink => EntryKind::Symlink(need_link()?),
                EntryType::Char | EntryType::Block if major == u32::MAX => {
                    return Err(bad(&name, "a device without a readable number"))
                }
                EntryType::Char => EntryKind::Node(NodeKind::Char { major, minor }),
                EntryType::Block => EntryKind::Node(NodeKind::Block { major, minor }),
                EntryType::Fifo => EntryKind::Node(NodeKind::Fifo),
                // `V`: a GNU volume label.
                _ if et.as_byte() == b'V' => {
                    skip(&mut stream, padded(size, size, &name)?, &name)?;
                    continue;
                }
                other => {
                    return Err(Ext4Error::BadSource {
                        entry: name,
                        reason: std::format!(
                            "entry type {:?} cannot be made",
                            char::from(other.as_byte())
                        )
                        .into(),
                    })
                }
            };
            match self.add(Entry { path, kind, meta }) {
                Ok(()) => {}
                Err(Ext4Error::NoSpace { .. } | Ext4Error::NoFreeInodes) => room = true,
                // The contents ended early: name the entry.
                Err(Ext4Error::BadSource { entry, reason }) if entry.is_empty() => {
                    return Err(Ext4Error::BadSource {
                        entry: name,
                        reason,
                    })
                }
                Err(e) => return Err(e),
            }
            // What the entry did not read (all of it after a failure for
            // lack of room), then the padding.
            let rest = data.limit();
            skip(&mut stream, padded(rest, size, &name)?, &name)?;
        }
        if compressed {
            // gzip's CRC and length, and zstd's content checksum, come
            // after the data they cover: the stream is read to its end so
            // that a damaged or cut archive is refused, not taken with
            // wrong bytes (as `gzip -d` fails a tar extraction).
            io::copy(&mut stream, &mut io::sink())
                .map_err(source_err("(the compressed stream, checked to its end)"))?;
        }
        if long_name.is_some() || long_link.is_some() || pax_raw.is_some() {
            return Err(bad("", "an extension member without its entry"));
        }
        if room {
            return Err(self.shortfall());
        }
        Ok(())
    }
}

/// The most bytes one PAX header or long name may have (they are held in
/// memory).
const MAX_META: u64 = 16 << 20;

/// The PAX keys a global header sets for every later entry, with
/// `SCHILY.*` (xattrs, ACLs): the owner and the times. A file's own
/// name, link, size and sparse map are never global.
const GLOBAL_KEYS: [&[u8]; 5] = [b"uid", b"gid", b"atime", b"mtime", b"ctime"];

/// Bytes after `size` bytes of data up to the next 512-byte block.
fn padding(size: u64) -> u64 {
    (512 - size % 512) % 512
}

/// `n` bytes and the padding after an entry of `size`: an error when the
/// sum passes 64 bits (a size no archive can hold).
fn padded(n: u64, size: u64, name: &str) -> Result<u64, Ext4Error> {
    n.checked_add(padding(size))
        .ok_or_else(|| bad(name, "an entry size past what an archive holds"))
}

/// Reads one 512-byte block: false at the end of the stream before it,
/// an error when it ends inside.
fn read_block(r: &mut impl Read, b: &mut [u8; 512], name: &str) -> Result<bool, Ext4Error> {
    let n = read_up_to(r, b).map_err(source_err(name))?;
    match n {
        0 => Ok(false),
        512 => Ok(true),
        _ => Err(bad(name, "the archive ends inside a header")),
    }
}

/// Reads and drops `n` bytes.
fn skip(r: &mut impl Read, n: u64, name: &str) -> Result<(), Ext4Error> {
    let got = io::copy(&mut r.take(n), &mut io::sink()).map_err(source_err(name))?;
    if got != n {
        return Err(bad(name, "the archive ends inside an entry"));
    }
    Ok(())
}

/// Checks a header's checksum: the sum of its bytes with the checksum
/// field read as spaces, unsigned (or signed, as some old tars wrote it).
fn check_sum(h: &Header, name: &str) -> Result<(), Ext4Error> {
    let b = h.as_bytes();
    let blank = |i: usize| if (148..156).contains(&i) { b' ' } else { b[i] };
    let unsigned: u32 = (0..512).map(|i| u32::from(blank(i))).sum();
    let signed: i32 = (0..512).map(|i| i32::from(blank(i) as i8)).sum();
    match h.cksum() {
        Ok(c) if c == unsigned || i64::from(c) == i64::from(signed) => Ok(()),
        Ok(_) => Err(bad(name, "a header checksum mismatch")),
        Err(_) => Err(bad(name, "a header checksum that does not parse")),
    }
}

/// One PAX record: key and value.
type Record<'a> = (&'a [u8], &'a [u8]);

/// The `(key, value)` records of a PAX header (`LEN key=value\n`, LEN
/// counting the whole record; values may hold any byte).
fn pax_records<'a>(mut raw: &'a [u8], name: &str) -> Result<Vec<Record<'a>>, Ext4Error> {
    let err = || bad(name, "a malformed PAX record");
    let mut out = Vec::new();
    while !raw.iter().all(|&b| b == 0) {
        let sp = raw.iter().position(|&b| b == b' ').ok_or_else(err)?;
        let len: usize = std::str::from_utf8(&raw[..sp])
            .ok()
            .filter(|d| d.bytes().all(|c| c.is_ascii_digit()))
            .and_then(|d| d.parse().ok())
            .ok_or_else(err)?;
        if len <= sp + 1 || len > raw.len() || raw[len - 1] != b'\n' {
            return Err(err());
        }
        let rec = &raw[sp + 1..len - 1];
        let eq = rec.iter().position(|&b| b == b'=').ok_or_else(err)?;
        out.push((&rec[..eq], &rec[eq + 1..]));
        raw = &raw[len..];
    }
    Ok(out)
}

/// Drops leading `/` and `.` components and empty ones (`//`), refuses
/// `..`: the path under the populate's directory (empty for `./`).
fn normalize(raw: &[u8], name: &str) -> Result<Vec<u8>, Ext4Error> {
    let mut out = Vec::with_capacity(raw.len());
    for c in raw.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return Err(bad(name, "a name with a .. component")),
            _ => {
                if !out.is_empty() {
                    out.push(b'/');
                }
                out.extend_from_slice(c);
            }
        }
    }
    Ok(out)
}

/// A [`Ext4Error::BadSource`] for entry `name`.
fn bad(name: &str, reason: &'static str) -> Ext4Error {
    Ext4Error::BadSource {
        entry: name.to_string(),
        reason: reason.into(),
    }
}

/// An error reading the archive: [`Ext4Error::Io`] when the source itself
/// failed, else (a damaged header, compressed stream or a short archive)
/// [`Ext4Error::BadSource`].
fn source_err(name: &str) -> impl FnOnce(io::Error) -> Ext4Error + '_ {
    move |e| match e.kind() {
        io::ErrorKind::Other
        | io::ErrorKind::InvalidData
        | io::ErrorKind::InvalidInput
        | io::ErrorKind::UnexpectedEof => Ext4Error::BadSource {
            entry: name.to_string(),
            reason: e.to_string().into(),
        },
        _ => Ext4Error::Io {
            context: "read the tar archive".into(),
            source: e,
        },
    }
}

/// Reads until `buf` is full or the stream ends; the bytes read.
fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// A sparse file's data pieces `(offset, length)` and its size.
type SparseMap = (Vec<(u64, u64)>, u64);

/// What an entry's PAX records say beyond what the `tar` crate reads.
#[derive(Clone, Default)]
struct Pax {
    atime: Option<Timestamp>,
    mtime: Option<Timestamp>,
    ctime: Option<Timestamp>,
    path: Option<Vec<u8>>,
    linkpath: Option<Vec<u8>>,
    size: Option<u64>,
    uid: Option<u64>,
    gid: Option<u64>,
    /// By name: a record repeated replaces the value.
    xattrs: BTreeMap<String, Vec<u8>>,
    acl_access: Option<Vec<u8>>,
    acl_default: Option<Vec<u8>>,
    /// `GNU.sparse.major` and `.minor`.
    sparse_version: (Option<u64>, Option<u64>),
    /// `GNU.sparse.name`: the file's real name.
    sparse_name: Option<Vec<u8>>,
    /// `GNU.sparse.realsize` (1.0) or `GNU.sparse.size` (0.0, 0.1).
    sparse_size: Option<u64>,
    /// The map of 0.1 (`GNU.sparse.map`) or 0.0 (`GNU.sparse.offset` and
    /// `GNU.sparse.numbytes` pairs).
    sparse_map: Option<Vec<u64>>,
}

impl Pax {
    /// Takes one record.
    fn take(&mut self, key: &[u8], value: &[u8], name: &str) -> Result<(), Ext4Error> {
        let number = |v: &[u8]| -> Result<u64, Ext4Error> {
            std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| bad(name, "a PAX record that is not a number"))
        };
        let time = |v: &[u8]| {
            Timestamp::parse_decimal(v)
                .ok_or_else(|| bad(name, "a PAX time that is not a decimal number"))
        };
        if value.is_empty() && !key.starts_with(b"SCHILY.xattr.") {
            // An empty value unsets a key: the entry then has the header's
            // value, not a global header's.
            match key {
                b"path" => self.path = None,
                b"linkpath" => self.linkpath = None,
                b"size" => self.size = None,
                b"uid" => self.uid = None,
                b"gid" => self.gid = None,
                b"atime" => self.atime = None,
                b"mtime" => self.mtime = None,
                b"ctime" => self.ctime = None,
                b"SCHILY.acl.access" => self.acl_access = None,
                b"SCHILY.acl.default" => self.acl_default = None,
                _ => {}
            }
            return Ok(());
        }
        match key {
            b"path" => self.path = Some(value.to_vec()),
            b"linkpath" => self.linkpath = Some(value.to_vec()),
            b"size" => self.size = Some(number(value)?),
            b"uid" => self.uid = Some(number(value)?),
            b"gid" => self.gid = Some(number(value)?),
            b"atime" => self.atime = Some(time(value)?),
            b"mtime" => self.mtime = Some(time(value)?),
            b"ctime" => self.ctime = Some(time(value)?),
            b"SCHILY.acl.access" => self.acl_access = Some(value.to_vec()),
            b"SCHILY.acl.default" => self.acl_default = Some(value.to_vec()),
            b"GNU.sparse.major" => self.sparse_version.0 = Some(number(value)?),
            b"GNU.sparse.minor" => self.sparse_version.1 = Some(number(value)?),
            b"GNU.sparse.name" => self.sparse_name = Some(value.to_vec()),
            b"GNU.sparse.realsize" | b"GNU.sparse.size" => self.sparse_size = Some(number(value)?),
            b"GNU.sparse.map" => {
                let mut map = Vec::new();
                for v in value.split(|&b| b == b',').filter(|v| !v.is_empty()) {
                    map.push(number(v)?);
                }
                self.sparse_map = Some(map);
            }
            b"GNU.sparse.offset" | b"GNU.sparse.numbytes" => {
                self.sparse_map
                    .get_or_insert_with(Vec::new)
                    .push(number(value)?);
            }
            _ => {
                if let Some(x) = key.strip_prefix(b"SCHILY.xattr.") {
                    let x = std::str::from_utf8(x)
                        .map_err(|_| bad(name, "an xattr name that is not UTF-8"))?;
                    self.xattrs.insert(x.to_string(), value.to_vec());
                }
            }
        }
        Ok(())
    }

    /// Reads the map of an old GNU sparse entry (`S`): from its header,
    /// then from the extension blocks that follow while they say more
    /// follow.
    fn old_gnu_sparse(
        &mut self,
        h: &Header,
        r: &mut impl Read,
        name: &str,
    ) -> Result<(), Ext4Error> {
        let gnu = h
            .as_gnu()
            .ok_or_else(|| bad(name, "a GNU sparse entry without a GNU header"))?;
        let field = |_| bad(name, "a sparse map field that does not parse");
        let mut flat = Vec::new();
        let mut add = |s: &::tar::GnuSparseHeader| -> Result<(), Ext4Error> {
            if !s.is_empty() {
                flat.push(s.offset().map_err(field)?);
                flat.push(s.length().map_err(field)?);
            }
            Ok(())
        };
        for s in &gnu.sparse {
            add(s)?;
        }
        let mut more = gnu.is_extended();
        while more {
            let mut ext = GnuExtSparseHeader::new();
            if !read_block(r, ext.as_mut_bytes(), name)? {
                return Err(bad(name, "the archive ends inside a sparse map"));
            }
            for s in ext.sparse() {
                add(s)?;
            }
            more = ext.is_extended();
        }
        self.sparse_size = Some(gnu.real_size().map_err(field)?);
        self.sparse_map = Some(flat);
        self.sparse_version = (None, None);
        Ok(())
    }

    /// For a PAX sparse file: its map of data pieces `(offset, length)`
    /// and its size, with the 1.0 map read off the front of `e`.
    fn sparse(
        &mut self,
        e: &mut impl Read,
        stored: u64,
        name: &str,
    ) -> Result<Option<SparseMap>, Ext4Error> {
        let flat = match (self.sparse_version, self.sparse_map.take()) {
            ((Some(1), Some(0)), None) => {
                // 1.0: decimal lines at the start of the data, padded to
                // 512 bytes: the count, then offset and length pairs.
                let mut used = 0u64;
                let mut line = || read_line(e, &mut used, name);
                let count = line()?;
                let mut flat = Vec::new();
                for _ in 0..count {
                    flat.push(line()?);
                    flat.push(line()?);
                }
                let pad = (512 - used % 512) % 512;
                let mut skip = std::vec![0u8; pad as usize];
                read_exact(e, &mut skip, name)?;
                used += pad;
                let data = stored
                    .checked_sub(used)
                    .ok_or_else(|| bad(name, "a sparse map longer than the entry"))?;
                return self.pieces(flat, data, name).map(Some);
            }
            (_, Some(flat)) => flat,
            ((None, None), None) => return Ok(None),
            _ => return Err(bad(name, "a GNU sparse format spacekit does not read")),
        };
        self.pieces(flat, stored, name).map(Some)
    }

    /// Checks a flat map (offset, length, …) against the file size and
    /// the `data` bytes stored.
    fn pieces(&self, flat: Vec<u64>, data: u64, name: &str) -> Result<SparseMap, Ext4Error> {
        let real = self
            .sparse_size
            .ok_or_else(|| bad(name, "a sparse file without its size"))?;
        if !flat.len().is_multiple_of(2) {
            return Err(bad(name, "a sparse map with an odd count"));
        }
        let (mut end, mut sum) = (0u64, 0u64);
        let mut map = Vec::with_capacity(flat.len() / 2);
        for p in flat.chunks_exact(2) {
            let stop = p[0].checked_add(p[1]);
            if p[0] < end || stop.is_none_or(|s| s > real) {
                return Err(bad(name, "a sparse map out of order or past the end"));
            }
            end = stop.unwrap_or(real);
            sum = sum.saturating_add(p[1]);
            map.push((p[0], p[1]));
        }
        if sum != data {
            return Err(bad(name, "a sparse map that disagrees with the data"));
        }
        Ok((map, real))
    }
}

/// One decimal number ending with a newline (a 1.0 sparse map's line).
fn read_line(e: &mut impl Read, used: &mut u64, name: &str) -> Result<u64, Ext4Error> {
    let mut v = 0u64;
    for digits in 0.. {
        let mut b = [0u8; 1];
        read_exact(e, &mut b, name)?;
        *used += 1;
        match b[0] {
            b'\n' if digits > 0 => return Ok(v),
            c @ b'0'..=b'9' if digits < 20 => {
                v = v
                    .checked_mul(10)
                    .and_then(|v| v.checked_add(u64::from(c - b'0')))
                    .ok_or_else(|| bad(name, "a sparse map number too large"))?;
            }
            _ => break,
        }
    }
    Err(bad(name, "a sparse map line that is not a number"))
}

/// Fills `buf` from an entry, or names it in the error.
fn read_exact(e: &mut impl Read, buf: &mut [u8], name: &str) -> Result<(), Ext4Error> {
    e.read_exact(buf).map_err(source_err(name))
}

/// The entry's permission bits, owner, times and xattrs.
fn meta_of(h: &Header, pax: &mut Pax, name: &str) -> Result<Meta, Ext4Error> {
    let bad_field = |_| bad(name, "a header field that does not parse");
    let id = |v: u64| u32::try_from(v).map_err(|_| bad(name, "an owner past 32 bits"));
    let secs = |secs: i64| Timestamp { secs, nanos: 0 };
    // Header times as signed numbers: octal, or GNU's base-256 (the form
    // negative times take).
    let time_at = |at: usize| header_number(&h.as_bytes()[at..at + 12]);
    let mtime = match pax.mtime {
        Some(t) => t,
        None => secs(time_at(136).ok_or_else(|| bad(name, "a header mtime that does not parse"))?),
    };
    // GNU headers may carry atime and ctime (GNU tar's incremental mode).
    let gnu = |at: usize| {
        h.as_gnu()
            .and_then(|_| time_at(at))
            .filter(|&t| t != 0)
            .map(secs)
    };
    let mut xattrs: Vec<(String, Vec<u8>)> = std::mem::take(&mut pax.xattrs).into_iter().collect();
    let mut perm = (h.mode().map_err(bad_field)? & 0o7777) as u16;
    // The access ACL decides the permission bits, as the kernel makes them
    // when tar sets it (the header's may disagree: bsdtar writes the group
    // bits, not the mask).
    let mut from_acl = |v: &[u8]| {
        if let Some(m) = acl_mode(v) {
            perm = (perm & 0o7000) | m;
        }
    };
    if let Some((_, v)) = xattrs.iter().find(|(k, _)| k == "system.posix_acl_access") {
        from_acl(v);
    }
    for (text, key) in [
        (&pax.acl_access, "system.posix_acl_access"),
        (&pax.acl_default, "system.posix_acl_default"),
    ] {
        if let Some(text) = text {
            if !xattrs.iter().any(|(k, _)| k == key) {
                let v = acl_xattr(text).map_err(|why| bad(name, why))?;
                if key.ends_with("access") {
                    from_acl(&v);
                }
                // An access ACL of only the owner, group and other entries
                // is the mode itself: the kernel stores none.
                let minimal = v.len() == 4 + 3 * 8;
                if !(minimal && key.ends_with("access")) {
                    xattrs.push((key.to_string(), v));
                }
            }
        }
    }
    Ok(Meta {
        perm,
        uid: id(match pax.uid {
            Some(u) => u,
            None => h.uid().map_err(bad_field)?,
        })?,
        gid: id(match pax.gid {
            Some(g) => g,
            None => h.gid().map_err(bad_field)?,
        })?,
        atime: pax.atime.or_else(|| gnu(345)).unwrap_or(mtime),
        mtime,
        ctime: pax.ctime.or_else(|| gnu(357)).unwrap_or(mtime),
        xattrs,
    })
}
