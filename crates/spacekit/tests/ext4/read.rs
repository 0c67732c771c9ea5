//! Reading: checksums, counts and free extents equal dumpe2fs's; the
//! free-extent histogram equals e2freefrag's; the configurations make the
//! kinds of image they say.

use std::fs;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit::ext4::{AllocRequest, ChecksumKind};

use crate::fixtures::*;
use crate::oracles::*;

#[test]
fn checksums_counts_and_free_extents_match_dumpe2fs() {
    require_e2fsprogs!();
    let dir = TempDir::new("dumpe2fs");
    for cfg in CONFIGS {
        let path = mkfs(&dir, cfg);
        let img = open_ro(&path);
        let info = img.info().clone();
        assert!(
            info.group_count >= 4,
            "{}: {} groups",
            cfg.name,
            info.group_count
        );
        // Without gdt_csum or metadata_csum mkfs sets no UNINIT flags.
        let has_uninit = info.checksums != ChecksumKind::None;
        assert_eq!(
            block_uninit_group(&img).is_some(),
            has_uninit,
            "{}",
            cfg.name
        );
        assert_verify_clean(&img, cfg.name);
        check_against_dumpe2fs(&img, &path, cfg.name);
        fs::remove_file(&path).unwrap();
    }
}

#[test]
fn image_kinds_are_what_the_configs_say() {
    require_e2fsprogs!();
    let dir = TempDir::new("kinds");
    let want = [
        ("1k", 1024, 64, true, ChecksumKind::MetadataCsum),
        ("1k-32bit", 1024, 32, true, ChecksumKind::MetadataCsum),
        ("1k-noflex", 1024, 64, false, ChecksumKind::MetadataCsum),
        ("1k-uninit_bg", 1024, 64, true, ChecksumKind::GdtCsum),
        ("1k-nocsum", 1024, 64, true, ChecksumKind::None),
        (
            "4k-32bit-noflex",
            4096,
            32,
            false,
            ChecksumKind::MetadataCsum,
        ),
        ("64k", 65536, 64, true, ChecksumKind::MetadataCsum),
    ];
    for (name, bs, desc, flex, csum) in want {
        let cfg = CONFIGS.iter().find(|c| c.name == name).unwrap();
        let path = mkfs(&dir, cfg);
        let img = open_ro(&path);
        let i = img.info();
        assert_eq!(
            (i.block_size, i.desc_size, i.flex_bg, i.checksums),
            (bs, desc, flex, csum),
            "{name}"
        );
    }
    // metadata_csum_seed: the seed comes from s_checksum_seed (equal to the
    // UUID's CRC when set by mkfs, so check the field is used by changing
    // the UUID behind the seed's back: checksums must stay valid).
    let cfg = CONFIGS.iter().find(|c| c.name == "4k-seed").unwrap();
    let path = mkfs(&dir, cfg);
    let mut bytes = fs::read(&path).unwrap();
    bytes[1024 + 0x68] ^= 0xFF; // s_uuid
    let sb = &mut bytes[1024..2048];
    let c = spacekit::crc32c::raw(!0, &sb[..0x3FC]);
    sb[0x3FC..0x400].copy_from_slice(&c.to_le_bytes());
    fs::write(&path, &bytes).unwrap();
    let img = open_ro(&path);
    assert_verify_clean(&img, "4k-seed with a new UUID");
    assert_fsck_clean(&path, "4k-seed with a new UUID");
}

#[test]
fn free_histogram_matches_e2freefrag() {
    require_e2fsprogs!();
    let dir = TempDir::new("freefrag");
    let mut rng = SmallRng::seed_from_u64(7);
    for name in ["1k", "1k-32groups", "4k-journal", "64k"] {
        let cfg = CONFIGS.iter().find(|c| c.name == name).unwrap();
        let path = mkfs(&dir, cfg);
        // Fragment the free space a little first.
        let mut img = open_rw(&path);
        let blocks = img.info().blocks_count;
        for _ in 0..12 {
            let goal = rng.random_range(0..blocks);
            let len = rng.random_range(1..40);
            img.alloc_blocks(AllocRequest {
                goal: Some(goal.max(1)),
                len,
                align: 1,
            })
            .unwrap();
        }
        img.flush().unwrap();
        let h = img.free_histogram().unwrap();
        let (n, max_kb, rows) = e2freefrag(&path);
        let bs = u64::from(h.block_size);
        assert_eq!(h.extents, n, "{name}");
        assert_eq!(h.max_extent * bs / 1024, max_kb, "{name}");
        assert_eq!(h.free_blocks, img.free_blocks_count(), "{name}");
        let ours: Vec<(u64, u64, u64)> = h
            .buckets
            .iter()
            .enumerate()
            .filter(|(_, b)| b.extents > 0)
            .map(|(k, b)| ((1u64 << k) * bs, b.extents, b.blocks))
            .collect();
        assert_eq!(ours, rows, "{name}");
    }
}
