//! Buddy: the canonical free-block form the model relies on, checked
//! exhaustively against repeated buddy merging and against the allocator.

use crate::checks::zone;
use crate::model::{canonical_blocks, merge_fixpoint};
use spacekit::testing::Validate;

/// Greedy decomposition of free runs == repeated merging, for every free
/// subset of small spans at every base alignment and max order; and the
/// allocator, fed the free pages one at a time, ends in the same blocks.
#[test]
fn canonical_form_is_the_merge_fixpoint() {
    for base in 0..12u64 {
        for pages in 1..=10usize {
            for max_order in 0..=4 {
                for mask in 0u32..1 << pages {
                    let free: Vec<bool> = (0..pages).map(|i| mask >> i & 1 == 1).collect();
                    let want = merge_fixpoint(base, &free, max_order);
                    assert_eq!(
                        canonical_blocks(base, &free, max_order),
                        want,
                        "base {base} free {free:?} max_order {max_order}"
                    );
                    if pages <= 8 && max_order <= 3 {
                        // Fed page by page from the top: each free merges.
                        let mut b = zone(base, pages as u64, max_order, 16);
                        for i in (0..pages).rev().filter(|&i| free[i]) {
                            b.add_range(base + i as u64, 1).unwrap();
                        }
                        b.validate().unwrap();
                        assert_eq!(b.free_blocks(), want, "base {base} free {free:?}");
                    }
                }
            }
        }
    }
}
