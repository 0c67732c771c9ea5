//! Range tree operation sequences (proptest) against the model, on a tiny and
//! a full-width key space, with dups applied and modified independently.

use crate::checks::{check, check_range, mixed, tree_alloc, tree_find, validate};
use crate::model::{brute_find, Model, MAX};
use crate::sorted;
use proptest::prelude::*;
use spacekit::rangetree::RangeTree;
use std::ops::Bound;

#[derive(Clone, Copy, Debug)]
enum DupKind {
    Dup,
    Clone,
    Map,
    /// `dup_filter_map` keeping values not divisible by the modulus (1 drops
    /// everything).
    FilterMap(u64),
    FromSorted,
}

#[derive(Clone, Debug)]
enum Op {
    Insert {
        t: usize,
        first: u64,
        last: u64,
    },
    Store {
        t: usize,
        first: u64,
        last: u64,
    },
    Remove {
        t: usize,
        first: u64,
        last: u64,
    },
    Erase {
        t: usize,
        index: u64,
    },
    Get {
        t: usize,
        index: u64,
    },
    GetMut {
        t: usize,
        index: u64,
    },
    Find {
        t: usize,
        size: u64,
        align: Option<u64>,
        window: (u64, u64),
        rev: bool,
    },
    Alloc {
        t: usize,
        size: u64,
        window: (u64, u64),
        rev: bool,
    },
    Gaps {
        t: usize,
        window: (u64, u64),
    },
    Range {
        t: usize,
        start: Bound<u64>,
        end: Bound<u64>,
        pattern: u64,
    },
    Iter {
        t: usize,
        pattern: u64,
    },
    Dup {
        src: usize,
        dst: usize,
        kind: DupKind,
    },
    Clear {
        t: usize,
    },
    /// `count` ranges of `len` indices every `stride` from `base`, inserted
    /// or stored one by one: enough entries for three levels.
    Fill {
        t: usize,
        base: u64,
        count: u64,
        stride: u64,
        len: u64,
        store: bool,
    },
}

/// At most this many trees live at once: the first, and copies made by dups.
const POOL: usize = 3;

fn map_value(v: u64) -> u64 {
    v.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5555
}

fn run_ops(ops: &[Op]) {
    let mut pool: Vec<(RangeTree<u64>, Model<u64>)> = vec![(RangeTree::new(), Model::new())];
    check(&pool[0].0, &pool[0].1, "new");
    let mut next = 1u64;
    for (k, op) in ops.iter().enumerate() {
        let what = format!("op {k} {op:?}");
        let n = pool.len();
        match *op {
            Op::Insert { t, first, last } => {
                let (tr, m) = &mut pool[t % n];
                assert_eq!(
                    tr.insert_range(first, last, next),
                    m.insert(first, last, next),
                    "{what}"
                );
                next += 1;
            }
            Op::Store { t, first, last } => {
                let (tr, m) = &mut pool[t % n];
                assert_eq!(
                    tr.store_range(first, last, next),
                    m.store(first, last, next),
                    "{what}"
                );
                next += 1;
            }
            Op::Remove { t, first, last } => {
                let (tr, m) = &mut pool[t % n];
                assert_eq!(
                    tr.remove_range(first, last),
                    m.remove(first, last),
                    "{what}"
                );
            }
            Op::Erase { t, index } => {
                let (tr, m) = &mut pool[t % n];
                assert_eq!(tr.erase(index), m.erase(index), "{what}");
            }
            Op::Get { t, index } => {
                let (tr, m) = &pool[t % n];
                let want = m.get_range(index);
                assert_eq!(tr.get(index).copied(), want.map(|e| e.2), "{what}: get");
                assert_eq!(
                    tr.get_range(index).map(|(f, l, v)| (f, l, *v)),
                    want,
                    "{what}: get_range"
                );
            }
            Op::GetMut { t, index } => {
                let (tr, m) = &mut pool[t % n];
                let got = tr.get_mut(index);
                assert_eq!(got.is_some(), m.get_range(index).is_some(), "{what}");
                if let Some(v) = got {
                    assert_eq!(Some(*v), m.get_range(index).map(|e| e.2), "{what}");
                    *v = next;
                    *m.get_mut(index).unwrap() = next;
                }
                next += 1;
            }
            Op::Find {
                t,
                size,
                align,
                window: (lo, hi),
                rev,
            } => {
                let (tr, m) = &pool[t % n];
                let want = m.find(size, align.unwrap_or(1), lo, hi, rev);
                if let (Ok(w), true) = (want, hi < 256) {
                    let brute = brute_find(m, size, align.unwrap_or(1), lo, hi, rev);
                    assert_eq!(w, brute, "{what}: the model's interval search");
                }
                assert_eq!(tree_find(tr, size, align, lo, hi, rev), want, "{what}");
            }
            Op::Alloc {
                t,
                size,
                window: (lo, hi),
                rev,
            } => {
                let (tr, m) = &mut pool[t % n];
                assert_eq!(
                    tree_alloc(tr, size, lo, hi, rev, next),
                    m.alloc(size, lo, hi, rev, next),
                    "{what}"
                );
                next += 1;
            }
            Op::Gaps {
                t,
                window: (lo, hi),
            } => {
                let (tr, m) = &pool[t % n];
                assert_eq!(
                    tr.gaps(lo..=hi).collect::<Vec<_>>(),
                    m.gaps(lo, hi),
                    "{what}"
                );
            }
            Op::Range {
                t,
                start,
                end,
                pattern,
            } => {
                let (tr, m) = &pool[t % n];
                check_range(tr, m, (start, end), pattern);
            }
            Op::Iter { t, pattern } => {
                let (tr, m) = &pool[t % n];
                assert_eq!(mixed(tr.iter(), pattern), m.entries(), "{what}");
            }
            Op::Dup { src, dst, kind } => {
                let (s, sm) = &pool[src % n];
                let copy = match kind {
                    DupKind::Dup => {
                        let c = s.dup();
                        assert_eq!(c.height(), s.height(), "{what}: dup height");
                        (c, sm.clone())
                    }
                    DupKind::Clone => {
                        let c = s.clone();
                        assert_eq!(c.height(), s.height(), "{what}: clone height");
                        (c, sm.clone())
                    }
                    DupKind::Map => (
                        s.dup_map(|v| map_value(*v)),
                        sm.filter_map(|v| Some(map_value(*v))),
                    ),
                    DupKind::FilterMap(md) => {
                        let f = |v: &u64| (!v.is_multiple_of(md)).then(|| map_value(*v));
                        (s.dup_filter_map(f), sm.filter_map(f))
                    }
                    DupKind::FromSorted => (
                        RangeTree::from_sorted(s.iter().map(|(f, l, v)| (f, l, *v))).unwrap(),
                        sm.clone(),
                    ),
                };
                if n < POOL {
                    pool.push(copy);
                } else {
                    pool[dst % n] = copy;
                }
            }
            Op::Clear { t } => {
                let (tr, m) = &mut pool[t % n];
                tr.clear();
                m.m.clear();
            }
            Op::Fill {
                t,
                base,
                count,
                stride,
                len,
                store,
            } => {
                let (tr, m) = &mut pool[t % n];
                for i in 0..count {
                    let Some(first) = i.checked_mul(stride).and_then(|d| base.checked_add(d))
                    else {
                        break;
                    };
                    let last = first.saturating_add(len - 1);
                    if store {
                        assert_eq!(
                            tr.store_range(first, last, next),
                            m.store(first, last, next),
                            "{what}: [{first}, {last}]"
                        );
                    } else {
                        assert_eq!(
                            tr.insert_range(first, last, next),
                            m.insert(first, last, next),
                            "{what}: [{first}, {last}]"
                        );
                    }
                    next += 1;
                    validate(tr, &format!("{what}: [{first}, {last}]"));
                }
            }
        }
        // Every tree, not only the one operated on: a copy and its source
        // must not see each other's changes.
        for (i, (tr, m)) in pool.iter().enumerate() {
            check(tr, m, &format!("{what}: tree {i}"));
        }
        for i in 0..pool.len() {
            for j in i + 1..pool.len() {
                assert_eq!(
                    pool[i].0 == pool[j].0,
                    pool[i].1 == pool[j].1,
                    "{what}: PartialEq of trees {i} and {j}"
                );
            }
        }
    }
}

/// Op sequences over the given key, range, size, alignment and window
/// strategies.
fn arb_ops(
    key: BoxedStrategy<u64>,
    pair: BoxedStrategy<(u64, u64)>,
    size: BoxedStrategy<u64>,
    align: BoxedStrategy<u64>,
    window: BoxedStrategy<(u64, u64)>,
    max_fill: u64,
) -> impl Strategy<Value = Vec<Op>> {
    let t = || 0usize..POOL;
    let bound = prop_oneof![
        2 => key.clone().prop_map(Bound::Included),
        2 => key.clone().prop_map(Bound::Excluded),
        1 => Just(Bound::Unbounded),
    ];
    let kind = prop_oneof![
        Just(DupKind::Dup),
        Just(DupKind::Clone),
        Just(DupKind::Map),
        (1u64..=4).prop_map(DupKind::FilterMap),
        Just(DupKind::FromSorted),
    ];
    let op = prop_oneof![
        8 => (t(), pair.clone()).prop_map(|(t, (first, last))| Op::Insert { t, first, last }),
        5 => (t(), pair.clone()).prop_map(|(t, (first, last))| Op::Store { t, first, last }),
        4 => (t(), pair).prop_map(|(t, (first, last))| Op::Remove { t, first, last }),
        3 => (t(), key.clone()).prop_map(|(t, index)| Op::Erase { t, index }),
        2 => (t(), key.clone()).prop_map(|(t, index)| Op::Get { t, index }),
        1 => (t(), key.clone()).prop_map(|(t, index)| Op::GetMut { t, index }),
        5 => (t(), size.clone(), prop::option::of(align), window.clone(), any::<bool>())
            .prop_map(|(t, size, align, window, rev)| Op::Find { t, size, align, window, rev }),
        4 => (t(), size, window.clone(), any::<bool>())
            .prop_map(|(t, size, window, rev)| Op::Alloc { t, size, window, rev }),
        1 => (t(), window.prop_map(sorted)).prop_map(|(t, window)| Op::Gaps { t, window }),
        2 => (t(), bound.clone(), bound, any::<u64>())
            .prop_map(|(t, start, end, pattern)| Op::Range { t, start, end, pattern }),
        1 => (t(), any::<u64>()).prop_map(|(t, pattern)| Op::Iter { t, pattern }),
        2 => (t(), t(), kind).prop_map(|(src, dst, kind)| Op::Dup { src, dst, kind }),
        1 => t().prop_map(|t| Op::Clear { t }),
        2 => (t(), key, 0..=max_fill, 1u64..=4, 1u64..=4, any::<bool>()).prop_map(
            |(t, base, count, stride, len, store)| Op::Fill { t, base, count, stride, len, store }
        ),
    ];
    prop::collection::vec(op, 1..60)
}

/// Keys in 0..64: collisions, adjacency and full coverage are common.
/// Windows mostly inside 0..72, some reaching u64::MAX.
fn tiny_ops() -> impl Strategy<Value = Vec<Op>> {
    let key = (0u64..64).boxed();
    let pair = prop_oneof![
        9 => (0u64..64, 0u64..64).prop_map(sorted),
        1 => (0u64..64, 0u64..64),
    ]
    .boxed();
    let size = prop_oneof![
        8 => 1u64..=8,
        2 => 9u64..=70,
        1 => Just(0u64),
        1 => Just(MAX),
    ]
    .boxed();
    let align = prop::sample::select(vec![1u64, 2, 4, 8, 16, 32, 64, 0, 3, 1 << 63]).boxed();
    let window = prop_oneof![
        6 => (0u64..72, 0u64..72).prop_map(sorted),
        1 => (0u64..72, 0u64..72),
        1 => Just((0u64, MAX)),
        1 => (0u64..72).prop_map(|a| (a, MAX)),
    ]
    .boxed();
    arb_ops(key, pair, size, align, window, 64)
}

/// Keys anywhere in u64, biased to near 0, near u64::MAX and the middle;
/// entries touching 0 and u64::MAX, windows up to the whole space.
fn large_ops() -> impl Strategy<Value = Vec<Op>> {
    let key = prop_oneof![
        3 => 0u64..48,
        3 => (MAX - 47)..=MAX,
        1 => Just(0u64),
        1 => Just(MAX),
        2 => any::<u64>(),
        1 => ((1u64 << 63) - 24)..((1u64 << 63) + 24),
    ]
    .boxed();
    let pair = prop_oneof![
        4 => (key.clone(), 0u64..8).prop_map(|(a, l)| (a, a.saturating_add(l))),
        2 => (key.clone(), key.clone()).prop_map(sorted),
        1 => (key.clone(), key.clone()),
        1 => key.clone().prop_map(|a| (a, MAX)),
        1 => key.clone().prop_map(|b| (0, b)),
    ]
    .boxed();
    let size = prop_oneof![
        4 => 1u64..=16,
        1 => Just(0u64),
        2 => any::<u64>(),
        2 => (0u64..=16).prop_map(|k| MAX - k),
        2 => (1u32..64).prop_map(|s| 1u64 << s),
        1 => (1u32..64).prop_map(|s| (1u64 << s) + 1),
    ]
    .boxed();
    let align = prop_oneof![
        3 => Just(1u64),
        4 => (0u32..64).prop_map(|s| 1u64 << s),
        1 => 0u64..=12,
        1 => any::<u64>(),
    ]
    .boxed();
    let window = prop_oneof![
        2 => Just((0u64, MAX)),
        3 => (key.clone(), key.clone()).prop_map(sorted),
        1 => (key.clone(), key.clone()),
        2 => key.clone().prop_map(|a| (a, MAX)),
        1 => key.clone().prop_map(|b| (0, b)),
        2 => (key.clone(), 0u64..64).prop_map(|(a, l)| (a, a.saturating_add(l))),
    ]
    .boxed();
    arb_ops(key, pair, size, align, window, 400)
}

proptest! {
    #![proptest_config(crate::regressions::with_cases(256))]

    #[test]
    fn ops_match_the_model_tiny_keys(ops in tiny_ops()) {
        run_ops(&ops);
    }

    #[test]
    fn ops_match_the_model_full_width_keys(ops in large_ops()) {
        run_ops(&ops);
    }
}
