//! Bad arguments (lengths, alignments, goals, block and inode numbers,
//! double frees, read-only images) are refused and change nothing.

use std::collections::BTreeSet;
use std::fs;

use spacekit::ext4::{AllocRequest, Ext4Error};

use crate::fixtures::*;

#[test]
fn bad_arguments_are_refused_and_change_nothing() {
    require_e2fsprogs!();
    let dir = TempDir::new("args");
    let path = mkfs(&dir, &K1);
    let mut img = open_rw(&path);
    let info = img.info().clone();
    let bad = |r: Result<u64, Ext4Error>, what: &str| match r {
        Err(Ext4Error::InvalidArgument { what: w, .. }) => assert_eq!(w, what),
        other => panic!("expected InvalidArgument {what}, got {other:?}"),
    };
    bad(
        img.alloc_blocks(AllocRequest {
            goal: None,
            len: 0,
            align: 1,
        }),
        "len",
    );
    bad(
        img.alloc_blocks(AllocRequest {
            goal: None,
            len: 1025,
            align: 1,
        }),
        "len",
    );
    bad(
        img.alloc_blocks(AllocRequest {
            goal: None,
            len: 1,
            align: 3,
        }),
        "align",
    );
    bad(
        img.alloc_blocks(AllocRequest {
            goal: None,
            len: 1,
            align: 0,
        }),
        "align",
    );
    bad(
        img.alloc_blocks(AllocRequest {
            goal: Some(0),
            len: 1,
            align: 1,
        }),
        "goal",
    );
    bad(
        img.alloc_blocks(AllocRequest {
            goal: Some(8192),
            len: 1,
            align: 1,
        }),
        "goal",
    );
    // A whole group: only groups without a backup or metadata have one.
    let g = block_uninit_group_without_backup(&img).unwrap();
    let first = img.group(g).unwrap().first_block;
    let whole = AllocRequest {
        goal: Some(first),
        len: 1024,
        align: 1,
    };
    assert_eq!(img.alloc_blocks(whole).unwrap(), first);
    img.free_blocks(first, 1024).unwrap();
    // Nothing has 1024 blocks aligned to 2048 (absolute block numbers: the
    // groups start at 1 + 1024 k).
    assert!(matches!(
        img.alloc_blocks(AllocRequest {
            goal: None,
            len: 1024,
            align: 2048
        }),
        Err(Ext4Error::NoSpace {
            len: 1024,
            align: 2048
        })
    ));
    img.flush().unwrap();
    assert!(!img.is_dirty());
    let snapshot = fs::read(&path).unwrap();

    let gi = img.group(0).unwrap();
    for (start, len) in [
        (1, 1),
        (gi.block_bitmap, 1),
        (gi.inode_table + 2, 3),
        (info.blocks_count - 10, 1),
    ] {
        let r = img.free_blocks(start, len);
        match r {
            Err(Ext4Error::MetadataBlock { .. }) if start != info.blocks_count - 10 => {}
            Err(Ext4Error::BlockAlreadyFree { block }) if block == start => {}
            other => panic!("free_blocks({start}, {len}): {other:?}"),
        }
    }
    assert!(matches!(
        img.free_blocks(0, 1),
        Err(Ext4Error::InvalidArgument { what: "block", .. })
    ));
    assert!(matches!(
        img.free_blocks(8000, 500),
        Err(Ext4Error::InvalidArgument { what: "len", .. })
    ));
    assert!(matches!(
        img.free_blocks(8000, 0),
        Err(Ext4Error::InvalidArgument { what: "len", .. })
    ));
    assert!(matches!(
        img.free_inode(2, true),
        Err(Ext4Error::InvalidArgument { what: "ino", .. })
    ));
    assert!(matches!(
        img.free_inode(257, false),
        Err(Ext4Error::InvalidArgument { what: "ino", .. })
    ));
    assert!(matches!(
        img.free_inode(100, false),
        Err(Ext4Error::InodeAlreadyFree { ino: 100 })
    ));
    assert!(matches!(
        img.alloc_inode(Some(8), false),
        Err(Ext4Error::InvalidArgument { what: "group", .. })
    ));
    assert!(matches!(
        img.free_extents(8),
        Err(Ext4Error::InvalidArgument { what: "group", .. })
    ));
    assert!(!img.is_dirty());
    img.flush().unwrap();
    drop(img);
    assert_eq!(fs::read(&path).unwrap(), snapshot);

    // Running out: every inode, then NoFreeInodes.
    let mut img = open_rw(&path);
    let n = img.free_inodes_count();
    let mut seen = BTreeSet::new();
    for _ in 0..n {
        assert!(seen.insert(img.alloc_inode(Some(5), false).unwrap()));
    }
    assert!(matches!(
        img.alloc_inode(None, true),
        Err(Ext4Error::NoFreeInodes)
    ));
    assert_eq!(img.free_inodes_count(), 0);
    assert_verify_clean(&img, "all inodes");
}

/// An argument refused for its length says so: the number in the message
/// is a length of bytes for a name or a symlink target, and a time before
/// 1970 is shown negative, as given.
#[test]
fn messages_name_lengths_and_times_as_such() {
    let e = |what, value| {
        spacekit::ext4::Ext4Error::InvalidArgument {
            what,
            value,
            reason: "r",
        }
        .to_string()
    };
    assert_eq!(e("name", 7), "ext4: invalid name (7 bytes): r");
    assert_eq!(e("target", 5000), "ext4: invalid target (5000 bytes): r");
    assert_eq!(
        e("secs before 1970", 2147483649),
        "ext4: invalid secs -2147483649: r"
    );
    assert_eq!(e("ino", 12), "ext4: invalid ino 12: r");
}
