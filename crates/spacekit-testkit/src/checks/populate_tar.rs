//! Target `populate_tar`: any bytes as a tar stream (plain, gzip or zstd
//! by their magic) populated into a fresh in-memory image (the 1 KiB
//! metadata_csum base image of the `ext4` target, on a `MemDevice`).
//!
//! * never a panic;
//! * success: the finished image is verify-clean and passes `validate()`,
//!   also when opened again from its bytes;
//! * failure (a typed `Ext4Error`): after the populate is dropped every
//!   block the base image uses holds its bytes as before (file data goes
//!   straight to free blocks, which stay free: only those may differ),
//!   the image still passes `validate()` and a second populate from an
//!   empty archive succeeds.

use std::sync::OnceLock;

use spacekit::ext4::{Image, MemDevice, OpenMode, Populate, PopulateOptions, BG_INODE_UNINIT};
use spacekit::testing::Validate;

use super::ext4::{expand, IMAGES};

/// The base image, expanded once.
fn base() -> &'static [u8] {
    static BASE: OnceLock<Vec<u8>> = OnceLock::new();
    BASE.get_or_init(|| expand(IMAGES[0].1))
}

/// The byte ranges of the base image a failed populate may change: its
/// free blocks, and the inode-table blocks whose every slot is past its
/// group's used inodes (write-behind may send new inodes there early; see
/// `Image::set_cache_budget`).
fn free_ranges() -> &'static [(usize, usize)] {
    static FREE: OnceLock<Vec<(usize, usize)>> = OnceLock::new();
    FREE.get_or_init(|| {
        let img = Image::open_on(
            Box::new(MemDevice::new(base().to_vec())),
            OpenMode::ReadOnly,
        )
        .expect("the base image opens");
        let bs = img.info().block_size as usize;
        let mut out = Vec::new();
        let per_block = bs / img.info().inode_size as usize;
        let ipg = img.info().inodes_per_group as usize;
        for g in 0..img.info().group_count {
            for (first, last) in img.free_extents(g).expect("free extents") {
                out.push((first as usize * bs, (last as usize + 1) * bs));
            }
            let d = img.group(g).expect("group");
            let used = if d.flags & BG_INODE_UNINIT != 0 {
                0
            } else {
                ipg - d.itable_unused as usize
            };
            let table = d.inode_table as usize;
            for b in used.div_ceil(per_block)..ipg / per_block {
                out.push(((table + b) * bs, (table + b + 1) * bs));
            }
        }
        out
    })
}

/// `bytes` with the base image's free blocks zeroed.
fn used_only(mut bytes: Vec<u8>) -> Vec<u8> {
    for &(a, b) in free_ranges() {
        bytes[a..b].fill(0);
    }
    bytes
}

/// Every byte of `img`'s device.
fn bytes_of(img: &Image) -> Vec<u8> {
    let dev = img.device();
    let mut out = vec![0u8; dev.len().expect("device length") as usize];
    dev.read_at(0, &mut out).expect("read the device");
    out
}

pub fn run(data: &[u8]) {
    let base = base();
    let mut img = Image::open_on(Box::new(MemDevice::new(base.to_vec())), OpenMode::ReadWrite)
        .expect("the base image opens read-write");
    let mut pop = Populate::new(&mut img, "/", PopulateOptions::default()).expect("populate /");
    let added = pop.add_tar(data);
    let outcome = match added {
        Ok(()) => pop.finish().map(|_| ()),
        Err(e) => {
            assert!(
                pop.failed(),
                "add_tar failed ({e}) but the populate is not marked failed"
            );
            drop(pop);
            Err(e)
        }
    };
    match outcome {
        Ok(()) => {
            img.validate().expect("validate after a populate");
            let r = img.verify().expect("verify after a populate");
            assert!(r.is_clean(), "verify after a populate: {:#?}", r.mismatches);
            let again =
                Image::open_on(Box::new(MemDevice::new(bytes_of(&img))), OpenMode::ReadOnly)
                    .expect("the populated image opens again");
            let r = again.verify().expect("verify after reopening");
            assert!(r.is_clean(), "verify after reopening: {:#?}", r.mismatches);
        }
        Err(e) => {
            let _ = e.to_string();
            assert!(
                used_only(bytes_of(&img)) == used_only(base.to_vec()),
                "a failed populate ({e}) changed a block the image uses"
            );
            img.validate().expect("validate after a failed populate");
            let mut pop = Populate::new(&mut img, "/", PopulateOptions::default())
                .expect("populate again after a failure");
            pop.add_tar(&[0u8; 1024][..]).expect("an empty archive");
            pop.finish().expect("finish an empty populate");
        }
    }
}
