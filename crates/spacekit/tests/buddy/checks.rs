//! Shared checks for the buddy tests: a zone with a given config, snapshots of
//! everything observable, the snapshot the model predicts, and refused calls
//! changing nothing.

use crate::model::{Model, E};
use spacekit::buddy::{BuddyAllocator, BuddyConfig, PageState};
use spacekit::testing::Validate;
use std::fmt::Debug;

pub fn zone(base: u64, pages: u64, max_order: u32, section_pages: u64) -> BuddyAllocator {
    BuddyAllocator::with_config(
        base,
        pages,
        BuddyConfig {
            max_order,
            section_pages,
        },
    )
    .unwrap()
}

/// Everything observable about an allocator's state.
#[derive(Debug, PartialEq)]
pub struct Snapshot {
    blocks: Vec<(u64, u32)>,
    pages: Vec<PageState>,
    free: u64,
    per_order: Vec<u64>,
    largest: Option<u32>,
}

pub fn snapshot(b: &BuddyAllocator) -> Snapshot {
    Snapshot {
        blocks: b.free_blocks(),
        pages: (b.base()..b.base() + b.pages())
            .map(|p| b.page(p).unwrap())
            .collect(),
        free: b.free_page_count(),
        per_order: b.free_blocks_per_order().to_vec(),
        largest: b.largest_free_order(),
    }
}

/// The snapshot the model predicts.
fn expected(m: &Model) -> Snapshot {
    let blocks = m.blocks();
    let mut head = vec![None; m.pages.len()];
    let mut per_order = vec![0u64; m.max_order as usize + 1];
    for &(p, o) in &blocks {
        head[(p - m.base) as usize] = Some(o);
        per_order[o as usize] += 1;
    }
    Snapshot {
        largest: blocks.iter().map(|b| b.1).max(),
        pages: m
            .pages
            .iter()
            .zip(head)
            .map(|(p, head_of)| PageState {
                free: p.free,
                head_of,
                poisoned: p.poisoned,
                refcount: p.refs,
            })
            .collect(),
        free: m.free_count(),
        per_order,
        blocks,
    }
}

/// The allocator is valid and agrees with the model page by page.
pub fn check(b: &BuddyAllocator, m: &Model, ctx: &dyn Debug) {
    b.validate()
        .unwrap_or_else(|e| panic!("validate after {ctx:?}: {e}"));
    let (got, want) = (snapshot(b), expected(m));
    assert_eq!(got.blocks, want.blocks, "free blocks after {ctx:?}");
    assert_eq!(got, want, "state after {ctx:?}");
    let end = m.end();
    if m.base > 0 {
        let pfn = m.base - 1;
        assert_eq!(b.page(pfn), Err(E::OutOfRange { pfn, pages: 1 }));
    }
    assert_eq!(b.page(end), Err(E::OutOfRange { pfn: end, pages: 1 }));
}

/// Runs a call that must be refused, checks that nothing changed, and
/// returns the error.
#[track_caller]
pub fn refused<T: Debug>(
    b: &mut BuddyAllocator,
    f: impl FnOnce(&mut BuddyAllocator) -> Result<T, E>,
) -> E {
    let before = snapshot(b);
    let e = f(b).expect_err("call should be refused");
    assert_eq!(
        snapshot(b),
        before,
        "refused call ({e:?}) changed the state"
    );
    b.validate().unwrap();
    e
}
