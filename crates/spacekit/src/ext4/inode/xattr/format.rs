//! The two on-disk homes of extended attributes, as plain functions over
//! bytes: the area after `i_extra_isize` inside a large inode, and the
//! external block `i_file_acl` names. No I/O: [`super`] reads and writes
//! the bytes through the image.
//!
//! # The entry table
//!
//! Both homes hold a table of 16-byte entries, each followed by its name
//! (not NUL-terminated) and padded to a multiple of 4:
//!
//! | offset | field          | meaning                                        |
//! |--------|----------------|------------------------------------------------|
//! | 0      | `e_name_len`   | bytes of the name after its prefix            |
//! | 1      | `e_name_index` | the prefix (`1` = `user.`, see [`split_name`]) |
//! | 2      | `e_value_offs` | where the value starts (see below)             |
//! | 4      | `e_value_inum` | a value inode (`ea_inode`); 0 here             |
//! | 8      | `e_value_size` | the value's length in bytes                    |
//! | 12     | `e_hash`       | [`entry_hash`] (0 in an inode)                 |
//!
//! The table ends with four zero bytes. Values are packed from the end of
//! the home downwards, each padded with zeros to a multiple of 4; an empty
//! value has offset 0.
//!
//! * In an inode, the home starts at `128 + i_extra_isize` with the magic
//!   `0xEA020000` and runs to the end of the inode; the entries follow the
//!   magic and value offsets count from the first entry. The kernel and
//!   e2fsprogs store `e_hash` 0 there (e2fsck accepts 0 or the right hash).
//!   An inode whose list becomes empty has its magic cleared.
//! * In a block, a 32-byte header comes first: `h_magic` 0xEA020000,
//!   `h_refcount` (inodes sharing the block), `h_blocks` 1, `h_hash`
//!   ([`block_hash`]), `h_checksum` ([`block_checksum`]) and 12 reserved
//!   zero bytes. The entries follow the header, sorted by name index, then
//!   name length, then name bytes (the kernel's lookup in a block stops at
//!   the first entry that sorts after the name), and value offsets count
//!   from the start of the block.

use std::vec;
use std::vec::Vec;

use crate::crc32c;

use crate::ext4::error::{corrupt, Ext4Error};
use crate::ext4::raw::{le16, le32, put16, put32};

/// `h_magic` of a block, and the magic before an inode's entries.
pub(crate) const MAGIC: u32 = 0xEA02_0000;
/// Bytes of a block's header.
pub(crate) const HEADER_LEN: usize = 32;
/// Bytes of an entry before its name.
const ENTRY_LEN: usize = 16;
/// The size of the original inode: the extra fields follow.
const GOOD_OLD_INODE_SIZE: usize = 128;
/// Header fields.
const H_REFCOUNT: usize = 4;
const H_BLOCKS: usize = 8;
const H_HASH: usize = 12;
const H_CHECKSUM: usize = 16;

/// One attribute as stored: its name index, the name after the prefix,
/// and the value's bytes as on disk (an ACL in ext4's own form).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Attr {
    pub(crate) index: u8,
    pub(crate) name: Vec<u8>,
    pub(crate) value: Vec<u8>,
    /// A value in an inode of its own (`ea_inode`): that inode and the
    /// value's length (`value` is empty then). Read, never written.
    pub(crate) in_inode: Option<(u32, u32)>,
}

impl Attr {
    /// Whether this is the attribute `(index, name)`.
    pub(crate) fn is(&self, index: u8, name: &[u8]) -> bool {
        self.index == index && self.name == name
    }

    /// The order of entries in a block: index, name length, name bytes.
    fn block_key(&self) -> (u8, usize, &[u8]) {
        (self.index, self.name.len(), &self.name)
    }
}

/// A name prefix and its index; `exact` prefixes are whole names (the
/// POSIX ACLs and rich ACLs), the others take a non-empty suffix.
struct Prefix {
    index: u8,
    prefix: &'static str,
    exact: bool,
}

/// Most specific first, so `system.posix_acl_access` is not read as
/// `system.` + `posix_acl_access`.
const PREFIXES: [Prefix; 8] = [
    Prefix {
        index: 2,
        prefix: "system.posix_acl_access",
        exact: true,
    },
    Prefix {
        index: 3,
        prefix: "system.posix_acl_default",
        exact: true,
    },
    Prefix {
        index: 8,
        prefix: "system.richacl",
        exact: true,
    },
    Prefix {
        index: 1,
        prefix: "user.",
        exact: false,
    },
    Prefix {
        index: 4,
        prefix: "trusted.",
        exact: false,
    },
    Prefix {
        index: 6,
        prefix: "security.",
        exact: false,
    },
    Prefix {
        index: 7,
        prefix: "system.",
        exact: false,
    },
    Prefix {
        index: 10,
        prefix: "gnu.",
        exact: false,
    },
];

/// Name index of the POSIX access ACL.
pub(crate) const INDEX_ACL_ACCESS: u8 = 2;
/// Name index of the POSIX default ACL.
pub(crate) const INDEX_ACL_DEFAULT: u8 = 3;
/// Name index of `system.` (inline data's `system.data`).
pub(crate) const INDEX_SYSTEM: u8 = 7;
/// Name index of `system.richacl`.
pub(crate) const INDEX_RICHACL: u8 = 8;

/// A full name (`user.comment`) as its index and the stored suffix
/// (`comment`), as the kernel's `xattr_resolve_name` splits it: an exact
/// name takes no suffix, a prefix needs one. `None` for a name in no
/// namespace ext4 knows.
pub(crate) fn split_name(full: &str) -> Option<(u8, &[u8])> {
    for p in &PREFIXES {
        if let Some(rest) = full.strip_prefix(p.prefix) {
            match (p.exact, rest.is_empty()) {
                (true, true) => return Some((p.index, &[])),
                // `system.posix_acl_accessX` is a `system.` name.
                (true, false) => continue,
                (false, false) => return Some((p.index, rest.as_bytes())),
                (false, true) => return None,
            }
        }
    }
    None
}

/// The full name of a stored attribute, `None` for an index with no
/// prefix (the kernel lists no such attribute either). A name that is not
/// UTF-8 is converted lossily.
pub(crate) fn full_name(index: u8, name: &[u8]) -> Option<std::string::String> {
    let p = PREFIXES.iter().find(|p| p.index == index)?;
    let mut s = std::string::String::from(p.prefix);
    s.push_str(&std::string::String::from_utf8_lossy(name));
    Some(s)
}

fn pad4(n: usize) -> usize {
    n.div_ceil(4) * 4
}

/// Bytes an entry with a name of `name_len` takes in the table.
fn entry_size(name_len: usize) -> usize {
    pad4(ENTRY_LEN + name_len)
}

/// Bytes `attrs` take: their entries, the four-byte end mark, and their
/// padded values.
pub(crate) fn space_needed(attrs: &[Attr]) -> usize {
    attrs
        .iter()
        .map(|a| entry_size(a.name.len()) + pad4(a.value.len()))
        .sum::<usize>()
        + 4
}

/// e2fsprogs' `ext2fs_ext_attr_hash_entry` (the kernel's
/// `ext4_xattr_hash_entry`): the name's bytes (unsigned) rotated in 5 bits
/// at a time, then the value's little-endian 32-bit words (zero-padded)
/// 16 bits at a time.
pub(crate) fn entry_hash(name: &[u8], value: &[u8]) -> u32 {
    let mut hash = 0u32;
    for &b in name {
        hash = hash.rotate_left(5) ^ u32::from(b);
    }
    for w in value.chunks(4) {
        let mut word = [0u8; 4];
        word[..w.len()].copy_from_slice(w);
        hash = hash.rotate_left(16) ^ u32::from_le_bytes(word);
    }
    hash
}

/// e2fsprogs' `ext2fs_ext_attr_block_rehash` (the kernel's
/// `ext4_xattr_rehash`): the entries' hashes rotated in 16 bits at a time;
/// 0 when any entry's hash is 0.
pub(crate) fn block_hash(hashes: &[u32]) -> u32 {
    let mut hash = 0u32;
    for &h in hashes {
        if h == 0 {
            return 0;
        }
        hash = hash.rotate_left(16) ^ h;
    }
    hash
}

/// The metadata_csum checksum of xattr block `block_nr` (e2fsprogs'
/// `ext2fs_ext_attr_block_csum`, the kernel's `ext4_xattr_block_csum`):
/// raw CRC-32C from the file system's seed over `le64(block_nr)` and then
/// the whole block with `h_checksum` read as zero.
pub(crate) fn block_checksum(seed: u32, block_nr: u64, block: &[u8]) -> u32 {
    let crc = crc32c::raw(seed, &block_nr.to_le_bytes());
    let crc = crc32c::raw(crc, block.get(..H_CHECKSUM).unwrap_or(block));
    let crc = crc32c::raw(crc, &[0; 4]);
    crc32c::raw(crc, block.get(H_CHECKSUM + 4..).unwrap_or(&[]))
}

/// The stored `h_checksum` of a block.
pub(crate) fn stored_block_checksum(block: &[u8]) -> u32 {
    le32(block, H_CHECKSUM)
}

/// Reads the entry table of `buf` starting at `first`, values at
/// `value_base + e_value_offs`, everything before `end`. Checked like the
/// kernel's `check_xattrs`: every entry and name inside the home, the end
/// mark present, each value inside the home and after the end mark.
fn parse_entries(
    buf: &[u8],
    first: usize,
    value_base: usize,
    end: usize,
) -> Result<Vec<Attr>, Ext4Error> {
    let end = end.min(buf.len());
    let bad = |field, v: usize, why| corrupt(field, None, v as u64, why);
    let mut raw = Vec::new();
    let mut at = first;
    loop {
        if at + 4 > end {
            return Err(bad(
                "e_name_len",
                at,
                "the xattr entries run past their home",
            ));
        }
        if le32(buf, at) == 0 {
            break;
        }
        if at + ENTRY_LEN > end {
            return Err(bad("e_name_len", at, "an xattr entry runs past its home"));
        }
        let name_len = usize::from(buf[at]);
        let next = at + entry_size(name_len);
        if next > end {
            return Err(bad(
                "e_name_len",
                name_len,
                "an xattr name runs past its home",
            ));
        }
        let index = buf[at + 1];
        if index == 0 {
            return Err(bad(
                "e_name_index",
                0,
                "an xattr entry without a name index",
            ));
        }
        raw.push((at, index, name_len));
        at = next;
    }
    let table_end = at + 4;
    let mut out = Vec::with_capacity(raw.len());
    for (at, index, name_len) in raw {
        let offs = usize::from(le16(buf, at + 2));
        let size = le32(buf, at + 8) as usize;
        let inum = le32(buf, at + 4);
        let name = buf[at + ENTRY_LEN..at + ENTRY_LEN + name_len].to_vec();
        if inum != 0 {
            // The value is the contents of inode `inum` (read by the
            // caller, which has the image).
            out.push(Attr {
                index,
                name,
                value: Vec::new(),
                in_inode: Some((inum, size as u32)),
            });
            continue;
        }
        let value = if size == 0 {
            Vec::new()
        } else {
            let start = value_base + offs;
            if start < table_end || start.checked_add(size).is_none_or(|e| e > end) {
                return Err(bad(
                    "e_value_offs",
                    offs,
                    "an xattr value lies outside its home or over the entries",
                ));
            }
            buf[start..start + size].to_vec()
        };
        out.push(Attr {
            index,
            name,
            value,
            in_inode: None,
        });
    }
    Ok(out)
}

/// Writes `attrs` as an entry table at `first` of `buf` (zeroed up to
/// `end` first), values packed down from `end` at offsets from
/// `value_base`; each entry's hash when `hash`, else 0. Returns the hashes,
/// or `None` (nothing written) when they do not fit.
fn write_entries(
    buf: &mut [u8],
    first: usize,
    value_base: usize,
    end: usize,
    attrs: &[Attr],
    hash: bool,
) -> Option<Vec<u32>> {
    if end > buf.len() || first > end || space_needed(attrs) > end - first {
        return None;
    }
    buf[first..end].fill(0);
    let mut at = first;
    let mut vend = end;
    let mut hashes = Vec::with_capacity(attrs.len());
    for a in attrs {
        let name_len = u8::try_from(a.name.len()).ok()?;
        let size = u32::try_from(a.value.len()).ok()?;
        let offs = if a.value.is_empty() {
            0
        } else {
            vend -= pad4(a.value.len());
            buf[vend..vend + a.value.len()].copy_from_slice(&a.value);
            u16::try_from(vend - value_base).ok()?
        };
        let h = if hash {
            entry_hash(&a.name, &a.value)
        } else {
            0
        };
        buf[at] = name_len;
        buf[at + 1] = a.index;
        put16(buf, at + 2, offs);
        put32(buf, at + 4, 0);
        put32(buf, at + 8, size);
        put32(buf, at + 12, h);
        buf[at + ENTRY_LEN..at + ENTRY_LEN + a.name.len()].copy_from_slice(&a.name);
        at += entry_size(a.name.len());
        hashes.push(h);
    }
    Some(hashes)
}

/// Where the in-inode home of inode bytes `raw` lies: the magic's offset
/// (`128 + i_extra_isize`), or `None` when the inode has no room for one
/// (128-byte inodes, an `i_extra_isize` below 4, not a multiple of 4, or
/// leaving no room for the magic and an end mark).
pub(crate) fn ibody_start(raw: &[u8]) -> Option<usize> {
    if raw.len() <= GOOD_OLD_INODE_SIZE {
        return None;
    }
    let extra = usize::from(le16(raw, GOOD_OLD_INODE_SIZE));
    let start = GOOD_OLD_INODE_SIZE + extra;
    (extra >= 4 && extra.is_multiple_of(4) && start + 8 <= raw.len()).then_some(start)
}

/// The attributes inside inode bytes `raw`, in their order (empty without
/// a home or without the magic).
///
/// # Errors
/// [`Ext4Error::Corrupt`] for a damaged table; [`Ext4Error::Unsupported`]
/// for a value in an inode of its own.
pub(crate) fn parse_ibody(raw: &[u8]) -> Result<Vec<Attr>, Ext4Error> {
    match ibody_start(raw) {
        Some(start) if le32(raw, start) == MAGIC => {
            parse_entries(raw, start + 4, start + 4, raw.len())
        }
        _ => Ok(Vec::new()),
    }
}

/// The bytes of the in-inode home (from the magic to the end of the inode)
/// holding `attrs`, or `None` when there is no home or they do not fit.
/// An empty list gives zeros (no magic), as the kernel leaves it.
pub(crate) fn build_ibody(raw: &[u8], attrs: &[Attr]) -> Option<Vec<u8>> {
    let start = ibody_start(raw)?;
    let mut home = vec![0u8; raw.len() - start];
    if attrs.is_empty() {
        return Some(home);
    }
    let end = home.len();
    put32(&mut home, 0, MAGIC);
    write_entries(&mut home, 4, 4, end, attrs, false)?;
    Some(home)
}

/// An xattr block as read: its reference count and attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    pub(crate) refcount: u32,
    pub(crate) attrs: Vec<Attr>,
}

/// Reads an xattr block (its checksum is the caller's to check).
///
/// # Errors
/// [`Ext4Error::Corrupt`] for a bad magic, `h_blocks` other than 1, or a
/// damaged table; [`Ext4Error::Unsupported`] for a value in an inode of
/// its own.
pub(crate) fn parse_block(block: &[u8]) -> Result<Block, Ext4Error> {
    let magic = le32(block, 0);
    if magic != MAGIC || block.len() < HEADER_LEN + 4 {
        return Err(corrupt(
            "h_magic",
            None,
            magic.into(),
            "not an extended-attribute block",
        ));
    }
    let blocks = le32(block, H_BLOCKS);
    if blocks != 1 {
        return Err(corrupt(
            "h_blocks",
            None,
            blocks.into(),
            "an xattr block must say 1",
        ));
    }
    Ok(Block {
        refcount: le32(block, H_REFCOUNT),
        attrs: parse_entries(block, HEADER_LEN, 0, block.len())?,
    })
}

/// Sorts attributes into a block's order.
pub(crate) fn sort_for_block(attrs: &mut [Attr]) {
    attrs.sort_by(|a, b| a.block_key().cmp(&b.block_key()));
}

/// A block of `block_size` bytes holding `attrs` (in the order given:
/// [`sort_for_block`] first) with `refcount`, its hashes and, with `seed`
/// (metadata_csum), its checksum for block number `block_nr`. `None` when
/// they do not fit.
pub(crate) fn build_block(
    block_size: usize,
    attrs: &[Attr],
    refcount: u32,
    block_nr: u64,
    seed: Option<u32>,
) -> Option<Vec<u8>> {
    let mut b = vec![0u8; block_size];
    put32(&mut b, 0, MAGIC);
    put32(&mut b, H_REFCOUNT, refcount);
    put32(&mut b, H_BLOCKS, 1);
    let hashes = write_entries(&mut b, HEADER_LEN, 0, block_size, attrs, true)?;
    put32(&mut b, H_HASH, block_hash(&hashes));
    sign_block(&mut b, block_nr, seed);
    Some(b)
}

/// Sets a block's reference count, keeping its checksum.
pub(crate) fn set_refcount(block: &mut [u8], refcount: u32, block_nr: u64, seed: Option<u32>) {
    put32(block, H_REFCOUNT, refcount);
    sign_block(block, block_nr, seed);
}

fn sign_block(block: &mut [u8], block_nr: u64, seed: Option<u32>) {
    if let Some(seed) = seed {
        let c = block_checksum(seed, block_nr, block);
        put32(block, H_CHECKSUM, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spacekit_testkit::rng::Rng;

    fn attr(index: u8, name: &str, value: &[u8]) -> Attr {
        Attr {
            index,
            name: name.as_bytes().to_vec(),
            value: value.to_vec(),
            in_inode: None,
        }
    }

    #[test]
    fn names_split_and_join() {
        assert_eq!(split_name("user.a"), Some((1, &b"a"[..])));
        assert_eq!(split_name("system.posix_acl_access"), Some((2, &b""[..])));
        assert_eq!(split_name("system.posix_acl_default"), Some((3, &b""[..])));
        assert_eq!(
            split_name("system.posix_acl_accessX"),
            Some((7, &b"posix_acl_accessX"[..]))
        );
        assert_eq!(split_name("security.selinux"), Some((6, &b"selinux"[..])));
        assert_eq!(split_name("trusted.x"), Some((4, &b"x"[..])));
        assert_eq!(split_name("system.data"), Some((7, &b"data"[..])));
        assert_eq!(split_name("system.richacl"), Some((8, &b""[..])));
        assert_eq!(split_name("user."), None);
        assert_eq!(split_name("os2.x"), None);
        assert_eq!(
            full_name(2, b"").as_deref(),
            Some("system.posix_acl_access")
        );
        assert_eq!(
            full_name(6, b"selinux").as_deref(),
            Some("security.selinux")
        );
        assert_eq!(full_name(5, b"x"), None);
    }

    /// The hashes of known entries, as e2fsprogs computes them (worked by
    /// hand from the definition: name bytes rotated by 5, value words by
    /// 16).
    #[test]
    fn hashes_follow_the_definition() {
        assert_eq!(entry_hash(b"", b""), 0);
        assert_eq!(entry_hash(b"a", b""), 0x61);
        assert_eq!(entry_hash(b"ab", b""), (0x61 << 5) ^ 0x62);
        // One value word: the name's hash rotated by 16, xor the word.
        let h = entry_hash(b"a", b"\x01\x02");
        assert_eq!(h, 0x61u32.rotate_left(16) ^ 0x0201);
        assert_eq!(block_hash(&[1, 2]), (1u32 << 16) ^ 2);
        assert_eq!(block_hash(&[1, 0, 2]), 0);
    }

    #[test]
    fn blocks_round_trip_and_sign() {
        let mut attrs = vec![
            attr(1, "zz", b"value"),
            attr(1, "a", b""),
            attr(6, "selinux", b"system_u:object_r:etc_t:s0\0"),
            attr(1, "b", &[7; 100]),
        ];
        sort_for_block(&mut attrs);
        assert_eq!(attrs[0].name, b"a");
        assert_eq!(attrs[1].name, b"b");
        assert_eq!(attrs[2].name, b"zz");
        let b = build_block(1024, &attrs, 3, 77, Some(0x1234)).unwrap();
        let p = parse_block(&b).unwrap();
        assert_eq!(p.refcount, 3);
        assert_eq!(p.attrs, attrs);
        assert_eq!(stored_block_checksum(&b), block_checksum(0x1234, 77, &b));
        assert_ne!(
            block_checksum(0x1234, 78, &b),
            block_checksum(0x1234, 77, &b)
        );
        let mut c = b.clone();
        set_refcount(&mut c, 1, 77, Some(0x1234));
        assert_eq!(stored_block_checksum(&c), block_checksum(0x1234, 77, &c));
        // Too much for one block.
        assert!(build_block(1024, &[attr(1, "x", &[0; 1000])], 1, 1, None).is_none());
    }

    #[test]
    fn inode_homes_round_trip() {
        let mut raw = vec![0u8; 256];
        put16(&mut raw, 128, 32);
        assert_eq!(ibody_start(&raw), Some(160));
        let attrs = vec![attr(1, "k", b"v"), attr(4, "t", &[1; 40])];
        let home = build_ibody(&raw, &attrs).unwrap();
        raw[160..].copy_from_slice(&home);
        assert_eq!(parse_ibody(&raw).unwrap(), attrs);
        // 96 bytes of home: 92 after the magic, 20 for the entry, 4 for
        // the end mark.
        assert!(build_ibody(&raw, &[attr(1, "x", &[0; 68])]).is_some());
        assert!(build_ibody(&raw, &[attr(1, "x", &[0; 69])]).is_none());
        assert_eq!(build_ibody(&raw, &[]).unwrap(), vec![0; 96]);
        assert_eq!(ibody_start(&raw[..128]), None);
        put16(&mut raw, 128, 0);
        assert_eq!(ibody_start(&raw), None);
        put16(&mut raw, 128, 30);
        assert_eq!(ibody_start(&raw), None);
    }

    /// Arbitrary and mutated bytes never make the parsers panic; what they
    /// accept rebuilds into bytes that parse the same.
    #[test]
    fn parsers_never_panic_on_random_or_mutated_bytes() {
        let mut rng = Rng(0x5eed_0000_ea02_0001);
        let mut accepted = 0;
        for round in 0..20_000 {
            let bs = [1024usize, 4096][round % 2];
            let mut attrs: Vec<Attr> = (0..rng.below(6))
                .map(|i| {
                    let n = 1 + rng.below(20) as usize;
                    let name = rng.bytes(n).iter().map(|b| b'a' + b % 26).collect();
                    let len = rng.below(300) as usize;
                    Attr {
                        index: 1 + (i % 7) as u8,
                        name,
                        value: rng.bytes(len),
                        in_inode: None,
                    }
                })
                .collect();
            sort_for_block(&mut attrs);
            let mut block = build_block(bs, &attrs, 1, 9, Some(7)).unwrap_or_else(|| rng.bytes(bs));
            let mut inode = rng.bytes(256);
            put16(&mut inode, 128, [32u16, 4, 28, 0x7fff][round % 4]);
            if let Some(home) = build_ibody(&inode, &attrs[..attrs.len().min(2)]) {
                let s = ibody_start(&inode).unwrap();
                inode[s..].copy_from_slice(&home);
            }
            // Mutations: a few bytes of the header and the first entries,
            // or pure noise.
            for _ in 0..rng.below(6) {
                let at = rng.below(96) as usize;
                block[at] = rng.next() as u8;
                let at = 128 + rng.below(128) as usize;
                inode[at] = rng.next() as u8;
            }
            if round % 7 == 0 {
                block = rng.bytes(bs);
                put32(&mut block, 0, MAGIC);
                put32(&mut block, H_BLOCKS, 1);
            }
            // A value in an inode of its own is read, never written: only
            // tables without one go round.
            let plain = |a: &[Attr]| a.iter().all(|x| x.in_inode.is_none());
            if let Ok(p) = parse_block(&block).and_then(|p| {
                if plain(&p.attrs) {
                    Ok(p)
                } else {
                    Err(Ext4Error::ReadOnly)
                }
            }) {
                accepted += 1;
                let mut again = p.attrs.clone();
                sort_for_block(&mut again);
                if let Some(b2) = build_block(bs, &again, p.refcount, 9, None) {
                    assert_eq!(parse_block(&b2).unwrap().attrs, again);
                }
            }
            if let Ok(a) = parse_ibody(&inode).and_then(|a| {
                if plain(&a) {
                    Ok(a)
                } else {
                    Err(Ext4Error::ReadOnly)
                }
            }) {
                if let Some(home) = build_ibody(&inode, &a) {
                    let mut i2 = inode.clone();
                    let s = ibody_start(&inode).unwrap();
                    i2[s..].copy_from_slice(&home);
                    assert_eq!(parse_ibody(&i2).unwrap(), a);
                }
            }
            let _ = parse_block(&block[..rng.below(bs as u64) as usize]);
            let _ = parse_ibody(&inode[..rng.below(256) as usize]);
        }
        assert!(accepted > 1000, "only {accepted} blocks parsed");
    }
}
