//! Random range trees (SmallRng) shared by the scenario, large and gap tests:
//! layouts, builds in every order, points, windows, sizes, alignments and
//! mutations applied to a tree and the model together.

use crate::checks::{tree_alloc, validate};
use crate::model::{Model, MAX};
use crate::sorted;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::Rng;
use spacekit::rangetree::RangeTree;

/// A sorted layout of up to `n` entries, value = position: mostly short
/// entries and short gaps (many adjacent), some long gaps and entries, a few
/// huge ones; sometimes starting at 0, sometimes ending at u64::MAX.
pub fn random_layout(rng: &mut SmallRng, n: usize) -> Vec<(u64, u64, u64)> {
    let mut out = Vec::new();
    let mut pos: u128 = match rng.random_range(0..3) {
        0 => 0,
        1 => u128::from(rng.random_range(0..100u64)),
        _ => u128::from(rng.random::<u64>() >> rng.random_range(1..40)),
    };
    for i in 0..n {
        let gap: u128 = match rng.random_range(0..20) {
            0..=7 => 0,
            8..=15 => u128::from(rng.random_range(1..=8u64)),
            16..=18 => u128::from(rng.random_range(9..=5000u64)),
            _ => u128::from(rng.random::<u64>() >> rng.random_range(8..40)),
        };
        let len: u128 = match rng.random_range(0..10) {
            0..=7 => u128::from(rng.random_range(1..=8u64)),
            8 => u128::from(rng.random_range(9..=1000u64)),
            _ => u128::from(rng.random::<u64>() >> rng.random_range(10..40)),
        };
        let first = pos + gap;
        let last = first + len - 1;
        if last > u128::from(MAX) {
            break;
        }
        out.push((first as u64, last as u64, i as u64));
        pos = last + 1;
    }
    if rng.random_bool(0.3) {
        if let Some(&(_, l, v)) = out.last() {
            if l < MAX {
                let first = if rng.random_bool(0.5) {
                    l + 1
                } else {
                    MAX - (MAX - l) / 2
                };
                out.push((first, MAX, v + 1));
            }
        }
    }
    out
}

/// Builds a tree from a sorted layout, by bulk load or by inserts in
/// shuffled, ascending or descending order.
pub fn build(rng: &mut SmallRng, layout: &[(u64, u64, u64)], how: usize) -> RangeTree<u64> {
    let t = match how % 4 {
        0 => RangeTree::from_sorted(layout.iter().copied()).unwrap(),
        1 => {
            let mut order = layout.to_vec();
            order.shuffle(rng);
            let mut t = RangeTree::new();
            for (f, l, v) in order {
                t.insert_range(f, l, v).unwrap();
            }
            t
        }
        2 => {
            let mut t = RangeTree::new();
            for &(f, l, v) in layout {
                t.insert_range(f, l, v).unwrap();
            }
            t
        }
        _ => {
            let mut t = RangeTree::new();
            for &(f, l, v) in layout.iter().rev() {
                t.insert_range(f, l, v).unwrap();
            }
            t
        }
    };
    validate(&t, "build");
    t
}

/// A point near an entry's bounds (or anywhere, now and then).
pub fn point(rng: &mut SmallRng, ents: &[(u64, u64, u64)]) -> u64 {
    if ents.is_empty() || rng.random_bool(0.1) {
        return match rng.random_range(0..3) {
            0 => rng.random(),
            1 => rng.random_range(0..64),
            _ => MAX - rng.random_range(0..64),
        };
    }
    let (f, l, _) = ents[rng.random_range(0..ents.len())];
    let base = match rng.random_range(0..3) {
        0 => f,
        1 => l,
        _ => rng.random_range(f..=l),
    };
    let d = rng.random_range(0..4u64);
    if rng.random_bool(0.5) {
        base.saturating_add(d)
    } else {
        base.saturating_sub(d)
    }
}

pub fn random_window(rng: &mut SmallRng, ents: &[(u64, u64, u64)]) -> (u64, u64) {
    match rng.random_range(0..8) {
        0 => (0, MAX),
        1 => (point(rng, ents), MAX),
        2 => (0, point(rng, ents)),
        3 | 4 => {
            let a = point(rng, ents);
            (a, a.saturating_add(rng.random_range(0..200)))
        }
        _ => sorted((point(rng, ents), point(rng, ents))),
    }
}

pub fn random_size(rng: &mut SmallRng, gaps: &[(u64, u64)]) -> u64 {
    match rng.random_range(0..10) {
        0..=3 => rng.random_range(1..=4),
        4..=6 if !gaps.is_empty() => {
            let (a, b) = gaps[rng.random_range(0..gaps.len())];
            let len = (b - a).saturating_add(1);
            match rng.random_range(0..3) {
                0 => len,
                1 => len.saturating_add(1),
                _ => (len - 1).max(1),
            }
        }
        7 => rng.random::<u64>() >> rng.random_range(0..64),
        8 => MAX - rng.random_range(0..3),
        _ => 1 << rng.random_range(0..64),
    }
}

pub fn random_align(rng: &mut SmallRng) -> u64 {
    match rng.random_range(0..10) {
        0..=3 => 1,
        4..=7 => 1 << rng.random_range(1..12),
        8 => 1 << rng.random_range(12..64),
        _ => 1 << 63,
    }
}

/// One random mutation (insert, store, remove, erase, get_mut or alloc)
/// near the points of `ents`, applied to the tree and the model, results
/// compared.
pub fn mutate(
    rng: &mut SmallRng,
    t: &mut RangeTree<u64>,
    m: &mut Model<u64>,
    ents: &[(u64, u64, u64)],
    next: &mut u64,
) {
    let a = point(rng, ents);
    let len = match rng.random_range(0..10) {
        0..=6 => rng.random_range(0..8),
        7 | 8 => rng.random_range(8..2000),
        _ => rng.random(),
    };
    let b = a.saturating_add(len);
    let v = *next;
    *next += 1;
    let what = format!("mutation at [{a}, {b}]");
    match rng.random_range(0..7) {
        0 | 1 => assert_eq!(t.insert_range(a, b, v), m.insert(a, b, v), "insert {what}"),
        2 => assert_eq!(t.store_range(a, b, v), m.store(a, b, v), "store {what}"),
        3 => assert_eq!(t.remove_range(a, b), m.remove(a, b), "remove {what}"),
        4 => assert_eq!(t.erase(a), m.erase(a), "erase {what}"),
        5 => {
            let got = t.get_mut(a).map(|x| {
                let old = *x;
                *x = v;
                old
            });
            let want = m.get_mut(a).map(|x| std::mem::replace(x, v));
            assert_eq!(got, want, "get_mut {what}");
        }
        _ => {
            let size = rng.random_range(1..=16);
            let rev = rng.random_bool(0.5);
            assert_eq!(
                tree_alloc(t, size, a, b, rev, v),
                m.alloc(size, a, b, rev, v),
                "alloc size {size} rev {rev} {what}"
            );
        }
    }
    validate(t, &what);
}
