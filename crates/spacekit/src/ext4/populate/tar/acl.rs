//! POSIX ACLs in the text form tar archives carry (`SCHILY.acl.access`
//! and `SCHILY.acl.default`, as GNU tar and star write them) turned into
//! the binary value of `system.posix_acl_access` / `_default` that
//! `getxattr(2)` gives.

use std::vec::Vec;

/// POSIX ACL entry tags, as in the kernel's `posix_acl_xattr.h`.
const ACL_USER_OBJ: u16 = 0x01;
const ACL_USER: u16 = 0x02;
const ACL_GROUP_OBJ: u16 = 0x04;
const ACL_GROUP: u16 = 0x08;
const ACL_MASK: u16 = 0x10;
const ACL_OTHER: u16 = 0x20;
/// The id of an entry without a qualifier.
const ACL_UNDEFINED_ID: u32 = u32::MAX;

/// A text ACL (`user::rw-,user:1000:r--,…`, entries split by `,` or
/// newlines, names or numbers, star's `user:name:r--:1000` form too) as
/// the value of `system.posix_acl_access` or `_default` that
/// `getxattr(2)` gives: version 2, then `(tag, perm, id)` entries sorted
/// by tag and id.
pub(super) fn acl_xattr(text: &[u8]) -> Result<Vec<u8>, &'static str> {
    let text = std::str::from_utf8(text).map_err(|_| "an ACL that is not UTF-8")?;
    let mut entries = Vec::new();
    for e in text.split([',', '\n']) {
        let e = e.split('#').next().unwrap_or("").trim();
        if e.is_empty() {
            continue;
        }
        let f: Vec<&str> = e.split(':').collect();
        if f.len() < 3 || f.len() > 4 {
            return Err("an ACL entry that is not tag:qualifier:perms");
        }
        let mut perm = 0u16;
        for c in f[2].chars() {
            perm |= match c {
                'r' => 4,
                'w' => 2,
                'x' => 1,
                '-' => 0,
                _ => return Err("ACL permissions other than r, w, x and -"),
            };
        }
        let (obj, named, db) = match f[0] {
            "user" | "u" => (ACL_USER_OBJ, ACL_USER, "/etc/passwd"),
            "group" | "g" => (ACL_GROUP_OBJ, ACL_GROUP, "/etc/group"),
            "mask" | "m" => (ACL_MASK, 0, ""),
            "other" | "o" => (ACL_OTHER, 0, ""),
            _ => return Err("an ACL entry tag other than user, group, mask and other"),
        };
        let entry = match (f[1], f.get(3)) {
            ("", _) => (obj, ACL_UNDEFINED_ID, perm),
            (_, _) if named == 0 => return Err("a mask or other ACL entry with a qualifier"),
            (_, Some(id)) => (
                named,
                id.parse().map_err(|_| "an ACL id that is not a number")?,
                perm,
            ),
            (q, None) => match q.parse() {
                Ok(id) => (named, id, perm),
                Err(_) => (
                    named,
                    id_by_name(db, q).ok_or("an ACL names an unknown user or group")?,
                    perm,
                ),
            },
        };
        entries.push(entry);
    }
    entries.sort_unstable();
    if entries
        .windows(2)
        .any(|w| w[0].0 == w[1].0 && w[0].1 == w[1].1)
    {
        return Err("an ACL with the same entry twice");
    }
    let mut out = Vec::with_capacity(4 + 8 * entries.len());
    out.extend_from_slice(&2u32.to_le_bytes());
    for (tag, id, perm) in entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    Ok(out)
}

/// The permission bits an access ACL value (as [`acl_xattr`] makes it)
/// gives the file, as the kernel sets them when the ACL is set; `None`
/// when an entry is missing or the value does not parse.
pub(super) fn acl_mode(value: &[u8]) -> Option<u16> {
    crate::ext4::inode::xattr::access_mode(value).map(|(bits, _)| bits)
}

/// The number of user or group `name` in `db` (`/etc/passwd` or
/// `/etc/group`: `name:x:id:…` lines).
fn id_by_name(db: &str, name: &str) -> Option<u32> {
    let text = std::fs::read_to_string(db).ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == name).then_some(())?;
        f.nth(1)?.parse().ok()
    })
}
