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

/// The permission bits an access ACL in the xattr form gives its file,
/// as the kernel sets them when the ACL is set (`posix_acl_update_mode`):
/// the owner's from `USER_OBJ`, the group's from `MASK` (from `GROUP_OBJ`
/// when there is no mask), the others' from `OTHER`; and whether the ACL
/// says no more than those bits (its three base entries only), so that
/// the kernel keeps no ACL at all (`posix_acl_equiv_mode`). `None` when an
/// entry is missing or the value does not parse.
pub(crate) fn access_mode(value: &[u8]) -> Option<(u16, bool)> {
    let body = value.strip_prefix(&XATTR_VERSION.to_le_bytes())?;
    if !body.len().is_multiple_of(8) {
        return None;
    }
    let (mut owner, mut group, mut mask, mut other) = (None, None, None, None);
    let mut named = false;
    for e in body.chunks_exact(8) {
        let perm = le16(e, 2) & 7;
        match le16(e, 0) {
            USER_OBJ => owner = Some(perm),
            GROUP_OBJ => group = Some(perm),
            MASK => mask = Some(perm),
            OTHER => other = Some(perm),
            _ => named = true,
        }
    }
    let bits = owner? << 6 | mask.or(group)? << 3 | other?;
    Some((bits, !named && mask.is_none()))
}

/// An access ACL in the xattr form with its base entries set from
/// permission bits `perm`, as the kernel rewrites it on `chmod`
/// (`posix_acl_chmod`): `USER_OBJ` from the owner's bits, `MASK` (or
/// `GROUP_OBJ` when there is no mask) from the group's, `OTHER` from the
/// others'. Named entries keep theirs.
pub(crate) fn with_mode(value: &[u8], perm: u16) -> Vec<u8> {
    let mut out = value.to_vec();
    let has_mask = value
        .get(4..)
        .unwrap_or_default()
        .chunks_exact(8)
        .any(|e| le16(e, 0) == MASK);
    for e in out.get_mut(4..).unwrap_or_default().chunks_exact_mut(8) {
        let bits = match le16(e, 0) {
            USER_OBJ => perm >> 6 & 7,
            MASK => perm >> 3 & 7,
            GROUP_OBJ if !has_mask => perm >> 3 & 7,
            OTHER => perm & 7,
            _ => continue,
        };
        e[2..4].copy_from_slice(&bits.to_le_bytes());
    }
    out
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

    /// The mode an ACL gives, whether it says more than the mode, and
    /// chmod's rewrite of it (the kernel's `posix_acl_update_mode` and
    /// `posix_acl_chmod`).
    #[test]
    fn the_mode_an_acl_gives_and_chmod_gives_it() {
        let minimal = xattr(&[(USER_OBJ, 7, U), (GROUP_OBJ, 5, U), (OTHER, 4, U)]);
        assert_eq!(access_mode(&minimal), Some((0o754, true)));
        let full = xattr(&[
            (USER_OBJ, 6, U),
            (USER, 7, 1000),
            (GROUP_OBJ, 4, U),
            (MASK, 7, U),
            (OTHER, 0, U),
        ]);
        // The group's bits are the mask's.
        assert_eq!(access_mode(&full), Some((0o670, false)));
        assert_eq!(
            access_mode(&xattr(&[(USER_OBJ, 7, U), (OTHER, 4, U)])),
            None
        );
        assert_eq!(access_mode(b"\x01\0\0\0"), None);

        let c = with_mode(&full, 0o751);
        assert_eq!(access_mode(&c), Some((0o751, false)));
        // The named user and the owning group keep theirs.
        assert_eq!(
            c,
            xattr(&[
                (USER_OBJ, 7, U),
                (USER, 7, 1000),
                (GROUP_OBJ, 4, U),
                (MASK, 5, U),
                (OTHER, 1, U),
            ])
        );
        assert_eq!(
            access_mode(&with_mode(&minimal, 0o640)),
            Some((0o640, true))
        );
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
