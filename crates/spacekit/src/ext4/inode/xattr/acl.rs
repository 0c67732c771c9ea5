//! POSIX ACLs: the form `getxattr(2)` gives and `setxattr(2)` takes, and
//! the shorter form ext4 stores.
//!
//! The xattr form (`posix_acl_xattr_header`): `le32` version 2, then
//! 8-byte entries `le16 e_tag, le16 e_perm, le32 e_id`. The kernel gives
//! `e_id` = `ACL_UNDEFINED_ID` (`0xFFFFFFFF`) for the entries that name no
//! user or group.
//!
//! The ext4 form (`ext4_acl_header`): `le32` version 1, then per entry
//! `le16 e_tag, le16 e_perm`, followed by `le32 e_id` only for `ACL_USER`
//! and `ACL_GROUP` (the kernel's `ext4_acl_to_disk` /
//! `ext4_acl_from_disk`).

use std::vec::Vec;

use crate::ext4::error::{corrupt, invalid, Ext4Error};
use crate::ext4::raw::{le16, le32};

const XATTR_VERSION: u32 = 2;
const EXT4_VERSION: u32 = 1;
const USER_OBJ: u16 = 0x01;
const USER: u16 = 0x02;
const GROUP_OBJ: u16 = 0x04;
const GROUP: u16 = 0x08;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;
/// `e_id` of an entry that names no user or group.
const UNDEFINED_ID: u32 = u32::MAX;

/// Where [`check_order`] is in the kernel's `posix_acl_valid` walk.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    UserObj,
    Users,
    Groups,
    Other,
    Done,
}

/// The kernel's `posix_acl_valid`: `USER_OBJ`, any `USER`s, `GROUP_OBJ`,
/// any `GROUP`s, a `MASK` (required when there are named entries), then
/// `OTHER`; permissions within `rwx`.
fn check_order(entries: &[(u16, u16, u32)]) -> Result<(), &'static str> {
    let mut state = State::UserObj;
    let mut needs_mask = false;
    for &(tag, perm, _) in entries {
        if perm & !7 != 0 {
            return Err("an ACL permission outside rwx");
        }
        state = match (tag, state) {
            (USER_OBJ, State::UserObj) => State::Users,
            (USER, State::Users) => {
                needs_mask = true;
                State::Users
            }
            (GROUP_OBJ, State::Users) => State::Groups,
            (GROUP, State::Groups) => {
                needs_mask = true;
                State::Groups
            }
            (MASK, State::Groups) => State::Other,
            (OTHER, State::Other) => State::Done,
            (OTHER, State::Groups) if !needs_mask => State::Done,
            _ => return Err("ACL entries out of order, repeated, or of an unknown tag"),
        };
    }
    if state == State::Done {
        Ok(())
    } else {
        Err("an ACL without its user, group and other entries")
    }
}

/// An ACL in the xattr form turned into ext4's, after the kernel's checks.
///
/// # Errors
/// [`Ext4Error::InvalidArgument`] (`what: "value"`) for a wrong version, a
/// length that is not a header and whole entries, no entries, or entries
/// [`check_order`] refuses.
pub(crate) fn to_disk(value: &[u8]) -> Result<Vec<u8>, Ext4Error> {
    let len = value.len() as u64;
    if value.len() < 4 || le32(value, 0) != XATTR_VERSION {
        return Err(invalid("value", len, "not a version 2 POSIX ACL"));
    }
    if !(value.len() - 4).is_multiple_of(8) || value.len() == 4 {
        return Err(invalid(
            "value",
            len,
            "a POSIX ACL is a header and one or more 8-byte entries",
        ));
    }
    let entries: Vec<(u16, u16, u32)> = value[4..]
        .chunks_exact(8)
        .map(|e| (le16(e, 0), le16(e, 2), le32(e, 4)))
        .collect();
    check_order(&entries).map_err(|why| invalid("value", len, why))?;
    let mut out = Vec::with_capacity(value.len());
    out.extend_from_slice(&EXT4_VERSION.to_le_bytes());
    for (tag, perm, id) in entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        if tag == USER || tag == GROUP {
            out.extend_from_slice(&id.to_le_bytes());
        }
    }
    Ok(out)
}

/// An ACL as ext4 stores it, in the xattr form the kernel gives.
///
/// # Errors
/// [`Ext4Error::Corrupt`] (`field: "ext4_acl"`) for a wrong version, an
/// unknown tag or a truncated entry.
pub(crate) fn from_disk(disk: &[u8]) -> Result<Vec<u8>, Ext4Error> {
    let version = le32(disk, 0);
    if disk.len() < 4 || version != EXT4_VERSION {
        return Err(corrupt(
            "ext4_acl",
            None,
            version.into(),
            "not a version 1 ext4 ACL",
        ));
    }
    let truncated = |at: usize| corrupt("ext4_acl", None, at as u64, "a truncated entry");
    let mut out = Vec::with_capacity(disk.len() * 2);
    out.extend_from_slice(&XATTR_VERSION.to_le_bytes());
    let mut at = 4;
    while at < disk.len() {
        if at + 4 > disk.len() {
            return Err(truncated(at));
        }
        let tag = le16(disk, at);
        let perm = le16(disk, at + 2);
        let (id, len) = match tag {
            USER_OBJ | GROUP_OBJ | MASK | OTHER => (UNDEFINED_ID, 4),
            USER | GROUP if at + 8 <= disk.len() => (le32(disk, at + 4), 8),
            USER | GROUP => return Err(truncated(at)),
            _ => return Err(corrupt("ext4_acl", None, tag.into(), "an unknown tag")),
        };
        at += len;
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use spacekit_testkit::rng::Rng;

    fn xattr(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        let mut v = XATTR_VERSION.to_le_bytes().to_vec();
        for &(t, p, i) in entries {
            v.extend_from_slice(&t.to_le_bytes());
            v.extend_from_slice(&p.to_le_bytes());
            v.extend_from_slice(&i.to_le_bytes());
        }
        v
    }

    const U: u32 = UNDEFINED_ID;

    #[test]
    fn round_trips_and_shortens() {
        let minimal = xattr(&[(USER_OBJ, 6, U), (GROUP_OBJ, 4, U), (OTHER, 4, U)]);
        let d = to_disk(&minimal).unwrap();
        assert_eq!(d.len(), 4 + 3 * 4);
        assert_eq!(from_disk(&d).unwrap(), minimal);
        let full = xattr(&[
            (USER_OBJ, 7, U),
            (USER, 6, 1000),
            (USER, 4, 1001),
            (GROUP_OBJ, 5, U),
            (GROUP, 1, 50),
            (MASK, 7, U),
            (OTHER, 0, U),
        ]);
        let d = to_disk(&full).unwrap();
        assert_eq!(d.len(), 4 + 4 * 4 + 3 * 8);
        assert_eq!(from_disk(&d).unwrap(), full);
    }

    #[test]
    fn malformed_values_are_refused() {
        let three = xattr(&[(USER_OBJ, 6, U), (GROUP_OBJ, 4, U), (OTHER, 4, U)]);
        let mut v1 = three.clone();
        v1[0] = 1;
        let mut trailing = three.clone();
        trailing.push(0);
        let bad = [
            Vec::new(),
            vec![2, 0, 0, 0],
            xattr(&[(USER_OBJ, 6, U)]),
            // Version 1 is the disk form.
            v1,
            // A named user without a mask.
            xattr(&[
                (USER_OBJ, 6, U),
                (USER, 6, 5),
                (GROUP_OBJ, 4, U),
                (OTHER, 4, U),
            ]),
            // Out of order.
            xattr(&[(GROUP_OBJ, 4, U), (USER_OBJ, 6, U), (OTHER, 4, U)]),
            // Bad permission bits, an unknown tag, trailing bytes.
            xattr(&[(USER_OBJ, 8, U), (GROUP_OBJ, 4, U), (OTHER, 4, U)]),
            xattr(&[(USER_OBJ, 6, U), (0x40, 4, U), (OTHER, 4, U)]),
            trailing,
        ];
        for v in bad {
            assert!(
                matches!(to_disk(&v), Err(Ext4Error::InvalidArgument { .. })),
                "{v:?}"
            );
        }
    }

    #[test]
    fn disk_parser_never_panics() {
        let mut rng = Rng(0xac1_0001);
        for _ in 0..20_000 {
            let n = rng.below(64) as usize;
            let mut d = rng.bytes(n);
            if rng.below(2) == 0 && d.len() >= 4 {
                d[..4].copy_from_slice(&EXT4_VERSION.to_le_bytes());
                for at in (4..d.len()).step_by(4) {
                    if rng.below(2) == 0 {
                        d[at] = [1u8, 2, 4, 8, 0x10, 0x20][rng.below(6) as usize];
                        if at + 1 < d.len() {
                            d[at + 1] = 0;
                        }
                    }
                }
            }
            if let Ok(x) = from_disk(&d) {
                assert_eq!((x.len() - 4) % 8, 0);
            }
        }
    }
}
