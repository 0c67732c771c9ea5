//! Unit tests: random operation sequences against a per-index model, with
//! `validate()` after every step (the integration tests add proptest and
//! the maple tree's scenarios).

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use crate::test_rng::Rng;
use crate::testing::Validate;

use super::{RangeTree, RangeTreeError};

/// Model: first -> (last, value).
type Model = BTreeMap<u64, (u64, u32)>;

fn entries(t: &RangeTree<u32>) -> Vec<(u64, u64, u32)> {
    t.iter().map(|(a, b, v)| (a, b, *v)).collect()
}

fn model_entries(m: &Model) -> Vec<(u64, u64, u32)> {
    m.iter().map(|(&a, &(b, v))| (a, b, v)).collect()
}

fn model_punch(m: &mut Model, first: u64, last: u64) -> usize {
    let hit: Vec<(u64, u64, u32)> = m
        .iter()
        .filter(|(&a, &(b, _))| a <= last && b >= first)
        .map(|(&a, &(b, v))| (a, b, v))
        .collect();
    for &(a, b, v) in &hit {
        m.remove(&a);
        if a < first {
            m.insert(a, (first - 1, v));
        }
        if b > last {
            m.insert(last + 1, (b, v));
        }
    }
    hit.len()
}

fn model_gap(m: &Model, size: u64, align: u64, lo: u64, hi: u64, rev: bool) -> Option<u64> {
    let mut free = Vec::new();
    let mut next = Some(0u64);
    for (&a, &(b, _)) in m {
        if let Some(n) = next {
            if a > n {
                free.push((n, a - 1));
            }
        }
        next = b.checked_add(1);
    }
    if let Some(n) = next {
        free.push((n, u64::MAX));
    }
    let fits = |(g0, g1): (u64, u64)| -> Option<(u64, u64)> {
        let (a, b) = (g0.max(lo), g1.min(hi));
        (a <= b && b - a >= size - 1).then_some((a, b))
    };
    let mask = align - 1;
    let cands = free.into_iter().filter_map(fits);
    if rev {
        cands
            .filter_map(|(a, b)| {
                let s = (b - (size - 1)) & !mask;
                (s >= a).then_some(s)
            })
            .max()
    } else {
        cands
            .filter_map(|(a, b)| {
                let s = a.checked_add(mask)? & !mask;
                (s <= b && b - s >= size - 1).then_some(s)
            })
            .min()
    }
}

fn run(seed: u64, space: u64, steps: usize) {
    let mut r = Rng(seed);
    let mut t: RangeTree<u32> = RangeTree::new();
    let mut m = Model::new();
    for step in 0..steps {
        let a = r.below(space);
        let b = (a + r.below(space / 8 + 1)).min(space - 1);
        let v = step as u32;
        match r.below(10) {
            0..=3 => {
                let want = m
                    .iter()
                    .find(|(&x, &(y, _))| x <= b && y >= a)
                    .map(|(&x, &(y, _))| RangeTreeError::Occupied { first: x, last: y });
                let got = t.insert_range(a, b, v).err();
                assert_eq!(got, want, "insert [{a}, {b}]");
                if want.is_none() {
                    m.insert(a, (b, v));
                }
            }
            4 => {
                t.store_range(a, b, v).unwrap();
                model_punch(&mut m, a, b);
                m.insert(a, (b, v));
            }
            5 => {
                assert_eq!(t.remove_range(a, b).unwrap(), model_punch(&mut m, a, b));
            }
            6 | 7 => {
                let want = m
                    .range(..=a)
                    .next_back()
                    .filter(|(_, &(y, _))| y >= a)
                    .map(|(&x, _)| x);
                let got = t.erase(a);
                assert_eq!(got, want.map(|x| m[&x].1));
                if let Some(x) = want {
                    m.remove(&x);
                }
            }
            _ => {
                let size = 1 + r.below(space / 4);
                let align = 1 << r.below(4);
                for rev in [false, true] {
                    let want = model_gap(&m, size, align, a, space - 1, rev);
                    let got = if rev {
                        t.find_gap_rev_aligned(size, align, a..=space - 1)
                    } else {
                        t.find_gap_aligned(size, align, a..=space - 1)
                    };
                    match got {
                        Ok(g) => assert_eq!(g, want, "gap {size} align {align} from {a} rev {rev}"),
                        Err(e) => assert!(space - a < size, "{e:?}"),
                    }
                }
            }
        }
        t.validate().unwrap_or_else(|e| panic!("step {step}: {e}"));
        assert_eq!(entries(&t), model_entries(&m), "step {step}");
        assert_eq!(t.len(), m.len());
        if step % 97 == 0 {
            let d = t.dup();
            d.validate().unwrap();
            assert_eq!(entries(&d), entries(&t));
            let rev: Vec<_> = t.iter().rev().map(|(a, _, _)| a).collect();
            assert!(rev.iter().eq(m.keys().rev()));
        }
    }
}

#[test]
fn random_ops_tiny_space() {
    for seed in 1..40 {
        run(seed * 0x9E37_79B9, 64, 400);
    }
}

#[test]
fn random_ops_wide_space() {
    for seed in 1..6 {
        run(seed * 0x2545_F491, 1 << 20, 6000);
    }
}

#[test]
fn ascending_descending_and_bulk() {
    for n in [0u64, 1, 15, 16, 17, 160, 161, 1600, 5000] {
        let up: RangeTree<u32> =
            RangeTree::from_sorted((0..n).map(|i| (i * 4, i * 4 + 2, i as u32))).unwrap();
        up.validate().unwrap();
        let mut a = RangeTree::new();
        let mut d = RangeTree::new();
        for i in 0..n {
            a.insert_range(i * 4, i * 4 + 2, i as u32).unwrap();
            let j = n - 1 - i;
            d.insert_range(j * 4, j * 4 + 2, j as u32).unwrap();
            a.validate().unwrap();
            d.validate().unwrap();
        }
        assert_eq!(entries(&a), entries(&up));
        assert_eq!(entries(&d), entries(&up));
        for i in 0..n {
            assert_eq!(a.erase(i * 4 + 1), Some(i as u32));
            a.validate().unwrap();
        }
        assert!(a.is_empty());
        assert_eq!(a.height(), 1);
    }
}
