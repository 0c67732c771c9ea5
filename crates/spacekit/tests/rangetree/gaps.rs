//! Range tree gap search (forward, reverse, aligned) on random mutated trees
//! against the model, and allocation until a window has no space.

use crate::checks::{check, check_search, tree_alloc, tree_find};
use crate::model::{Model, E, MAX};
use crate::random::{build, mutate, random_align, random_layout, random_size, random_window};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit::rangetree::RangeTree;

/// Random trees (bulk loaded or inserted in any order), mutated between
/// rounds so the recorded gaps change everywhere; random windows, sizes and
/// alignments (1 up to 2^63) in both directions.
#[test]
fn gap_search_matches_the_model_on_random_trees() {
    let mut rng = SmallRng::seed_from_u64(0x9a9_0001);
    let mut next = 1 << 40;
    let sizes = [0usize, 1, 15, 16, 17, 161, 1000, 2000, 2000, 2000, 600, 300];
    for (tree_no, &n) in sizes.iter().enumerate() {
        let layout = random_layout(&mut rng, n);
        let mut m = Model::from_entries(&layout);
        let mut t = build(&mut rng, &layout, tree_no);
        check(&t, &m, "built");
        for round in 0..8 {
            let ents = m.entries();
            for _ in 0..40 {
                mutate(&mut rng, &mut t, &mut m, &ents, &mut next);
            }
            check(&t, &m, &format!("tree {tree_no} round {round}"));
            let ents = m.entries();
            let gaps = m.gaps(0, MAX);
            for _ in 0..40 {
                let (lo, hi) = random_window(&mut rng, &ents);
                let size = random_size(&mut rng, &gaps);
                let align = random_align(&mut rng);
                check_search(&t, &m, size, align, lo, hi);
            }
        }
    }
}

/// Allocate random sizes in both directions in a small window until it is
/// full; every allocation lands where the model says, then every size is
/// NoSpace.
#[test]
fn alloc_until_no_space() {
    let mut rng = SmallRng::seed_from_u64(0xa110_c001);
    let mut next = 1u64;
    for round in 0..40u64 {
        let (lo, hi) = match round % 4 {
            0 => (100, 400),
            1 => (MAX - 300, MAX),
            2 => (0, 300),
            _ => (1000, 1000 + rng.random_range(0..300)),
        };
        let mut t = RangeTree::new();
        let mut m = Model::new();
        for _ in 0..rng.random_range(0..40) {
            let a = rng.random_range(lo.saturating_sub(50)..=hi.saturating_add(50).min(MAX - 10));
            let b = a + rng.random_range(0..10);
            assert_eq!(t.insert_range(a, b, 0), m.insert(a, b, 0));
        }
        check(&t, &m, "setup");
        let mode = round % 3; // forward, reverse, mixed
        let mut steps = 0;
        while !m.gaps(lo, hi).is_empty() {
            steps += 1;
            assert!(steps < 5000, "the window never filled");
            let size = rng.random_range(1..=6);
            let rev = match mode {
                0 => false,
                1 => true,
                _ => rng.random_bool(0.5),
            };
            let got = tree_alloc(&mut t, size, lo, hi, rev, next);
            let want = m.alloc(size, lo, hi, rev, next);
            next += 1;
            assert_eq!(
                got, want,
                "round {round}: alloc size {size} rev {rev} in [{lo}, {hi}]"
            );
            check(&t, &m, &format!("round {round} after alloc"));
        }
        for size in 1..=3 {
            for rev in [false, true] {
                assert_eq!(
                    tree_alloc(&mut t, size, lo, hi, rev, 0),
                    Err(E::NoSpace { size })
                );
                assert_eq!(tree_find(&t, size, None, lo, hi, rev), Ok(None));
            }
        }
        check(&t, &m, "full window");
        assert_eq!(t.gaps(lo..=hi).count(), 0);
    }
}
