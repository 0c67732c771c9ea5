//! Damage made behind spacekit's back (flipped bitmap bits, stale
//! checksums and counts) is reported by `verify`, and refused by changes.

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;

use spacekit::ext4::{AllocRequest, Check, ChecksumKind, Ext4Error, Image};

use crate::fixtures::*;
use crate::oracles::*;

fn checks(img: &Image) -> Vec<(Check, Option<u32>)> {
    img.verify()
        .unwrap()
        .mismatches
        .iter()
        .map(|m| (m.what, m.group))
        .collect()
}

#[test]
fn damage_is_reported_by_verify() {
    require_e2fsprogs!();
    let dir = TempDir::new("damage");
    for name in ["1k", "1k-32bit", "64k", "1k-uninit_bg"] {
        let cfg = CONFIGS.iter().find(|c| c.name == name).unwrap();
        let base = mkfs(&dir, cfg);
        let img = open_ro(&base);
        let info = img.info().clone();
        let bs = info.block_size as usize;
        let g0 = img.group(0).unwrap();
        let last = info.group_count - 1;
        let gl = img.group(last).unwrap();
        let (free0, _) = img.free_extents(0).unwrap()[0];
        drop(img);
        let metadata_csum = info.checksums == ChecksumKind::MetadataCsum;
        let edit = |f: &dyn Fn(&mut Vec<u8>)| -> PathBuf {
            let p = copy(&base, &dir, "damaged.img");
            let mut b = fs::read(&p).unwrap();
            f(&mut b);
            fs::write(&p, &b).unwrap();
            p
        };

        // A free block marked in use in group 0's bitmap.
        let bit = (free0 - g0.first_block) as usize;
        let at = g0.block_bitmap as usize * bs + bit / 8;
        let p = edit(&|b| b[at] ^= 1 << (bit % 8));
        let mut img = open_rw(&p);
        let mut want = vec![(Check::GroupFreeBlocks, Some(0))];
        if metadata_csum {
            want.insert(0, (Check::BlockBitmapChecksum, Some(0)));
        }
        assert_eq!(checks(&img), want, "{name}: flipped block bit");
        if metadata_csum {
            // The damaged bitmap is refused, by an allocation that reaches
            // it and by a free, never skipped.
            let bad_bitmap = |err: Ext4Error| {
                assert!(
                    matches!(
                        err,
                        Ext4Error::BadChecksum {
                            what: "block bitmap",
                            group: Some(0)
                        }
                    ),
                    "{name}: {err}"
                )
            };
            bad_bitmap(
                img.alloc_blocks(AllocRequest {
                    goal: Some(free0 + 1),
                    len: 1,
                    align: 1,
                })
                .unwrap_err(),
            );
            bad_bitmap(img.free_blocks(free0, 1).unwrap_err());
            assert!(!img.is_dirty(), "{name}: a refused change left changes");
            // e2fsck agrees the bitmap is damaged.
            drop(img);
            let (code, text) = e2fsck(&p);
            assert_ne!(code, 0, "{name}:\n{text}");
        }

        // An inode bit.
        let at = g0.inode_bitmap as usize * bs + 20 / 8;
        let p = edit(&|b| b[at] ^= 1 << (20 % 8));
        let mut want = vec![(Check::GroupFreeInodes, Some(0))];
        if metadata_csum {
            want.insert(0, (Check::InodeBitmapChecksum, Some(0)));
        }
        assert_eq!(checks(&open_ro(&p)), want, "{name}: flipped inode bit");

        // A padding bit of the last group: past its last block (inside the
        // checksummed bytes when the group is partial) and past
        // blocks_per_group.
        let n = info.blocks_in_group(last) as usize;
        let bits: BTreeSet<usize> = [n, info.blocks_per_group as usize, bs * 8 - 1]
            .into_iter()
            .filter(|&b| b >= n && b < bs * 8)
            .collect();
        for bit in bits {
            let at = gl.block_bitmap as usize * bs + bit / 8;
            let p = edit(&|b| b[at] ^= 1 << (bit % 8));
            let mut want = Vec::new();
            if metadata_csum && bit < info.blocks_per_group as usize {
                want.push((Check::BlockBitmapChecksum, Some(last)));
            }
            want.push((Check::BlockBitmapPadding, Some(last)));
            assert_eq!(checks(&open_ro(&p)), want, "{name}: padding bit {bit}");
        }

        // A descriptor byte (group 1's free inode count).
        let desc = info.desc_size as usize;
        let at = (info.first_data_block as usize + 1) * bs + desc + 0x0E;
        let p = edit(&|b| {
            let v = u16::from_le_bytes([b[at], b[at + 1]]) - 1;
            b[at..at + 2].copy_from_slice(&v.to_le_bytes());
        });
        let got = checks(&open_ro(&p));
        if info.checksums != ChecksumKind::None {
            assert!(
                got.contains(&(Check::DescriptorChecksum, Some(1))),
                "{name}: {got:?}"
            );
        }
        assert!(
            got.contains(&(Check::GroupFreeInodes, Some(1))),
            "{name}: {got:?}"
        );
        assert!(
            got.contains(&(Check::FreeInodesCount, None)),
            "{name}: {got:?}"
        );
        if info.checksums != ChecksumKind::None {
            // Every change is refused, in any group: the image needs e2fsck.
            let before = fs::read(&p).unwrap();
            let mut img = open_rw(&p);
            for g in [0, 1] {
                let err = img.alloc_inode(Some(g), false).unwrap_err();
                assert!(
                    matches!(
                        err,
                        Ext4Error::BadChecksum {
                            what: "group descriptor",
                            group: Some(1)
                        }
                    ),
                    "{name}: {err}"
                );
            }
            assert!(!img.is_dirty(), "{name}");
            img.flush().unwrap();
            drop(img);
            assert!(fs::read(&p).unwrap() == before, "{name}: image changed");
        }

        // A superblock byte (free inodes count).
        let p = edit(&|b| b[1024 + 0x10] ^= 1);
        let got = checks(&open_ro(&p));
        if metadata_csum {
            assert_eq!(got[0], (Check::SuperblockChecksum, None), "{name}");
            let mut img = open_rw(&p);
            let err = img
                .alloc_blocks(AllocRequest {
                    goal: None,
                    len: 1,
                    align: 1,
                })
                .unwrap_err();
            assert!(
                matches!(
                    err,
                    Ext4Error::BadChecksum {
                        what: "superblock",
                        ..
                    }
                ),
                "{err}"
            );
        }
        assert!(
            got.contains(&(Check::FreeInodesCount, None)),
            "{name}: {got:?}"
        );
    }
}
