//! Target `rangetree`: `RangeTree` operation sequences against a
//! `BTreeMap` model (`first -> (last, value)`), with `validate()` after
//! each operation and the whole contents compared.

use spacekit::rangetree::{RangeTree, RangeTreeError};
use spacekit::testing::Validate;

use super::input::Input;
use crate::rangetree_model::Model;

/// An index: mostly in a small universe (so ranges collide), sometimes at
/// the edges of u64.
fn index(input: &mut Input) -> u64 {
    match input.u8() % 8 {
        0 => u64::MAX - u64::from(input.u8()),
        1 => input.edgy_u64(),
        _ => u64::from(input.u16() % 2048),
    }
}

fn span(input: &mut Input) -> (u64, u64) {
    let first = index(input);
    let len = match input.u8() % 4 {
        0 => 0,
        1 => u64::from(input.u8()),
        2 => u64::from(input.u16()),
        _ => input.edgy_u64(),
    };
    // Sometimes inverted on purpose.
    if input.u8() == 0xFF {
        return (first, first.wrapping_sub(len.wrapping_add(1)));
    }
    (first, first.saturating_add(len))
}

fn contents(t: &RangeTree<u32>) -> Vec<(u64, u64, u32)> {
    t.iter().map(|(f, l, &v)| (f, l, v)).collect()
}

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let mut tree: RangeTree<u32> = RangeTree::new();
    let mut model: Model<u32> = Model::new();
    let mut steps = 0u32;
    while !input.is_empty() && steps < 400 {
        steps += 1;
        let op = input.u8() % 12;
        let value = steps;
        match op {
            0..=2 => {
                let (f, l) = span(&mut input);
                let got = tree.insert_range(f, l, value);
                let want = model.insert(f, l, value);
                assert_eq!(got, want, "insert_range({f}, {l})");
            }
            3 => {
                let (f, l) = span(&mut input);
                let got = tree.store_range(f, l, value);
                let want = model.store(f, l, value);
                assert_eq!(got, want, "store_range({f}, {l})");
            }
            4 | 5 => {
                let (f, l) = span(&mut input);
                let got = tree.remove_range(f, l);
                let want = model.remove(f, l);
                assert_eq!(got, want, "remove_range({f}, {l})");
            }
            6 => {
                let i = index(&mut input);
                assert_eq!(tree.erase(i), model.erase(i), "erase({i})");
            }
            7 => {
                let i = index(&mut input);
                let want = model.get_range(i);
                assert_eq!(
                    tree.get_range(i).map(|(f, l, &v)| (f, l, v)),
                    want,
                    "get_range({i})"
                );
                assert_eq!(tree.get(i).copied(), want.map(|w| w.2), "get({i})");
            }
            8 | 9 => {
                let size = match input.u8() % 3 {
                    0 => u64::from(input.u8()),
                    1 => u64::from(input.u16()),
                    _ => input.edgy_u64(),
                };
                let align = match input.u8() % 8 {
                    0 => input.edgy_u64(),
                    k => 1u64 << (k * 2),
                };
                let (lo, hi) = span(&mut input);
                let rev = input.bool();
                let want = model.find(size, align, lo, hi, rev);
                let got = if rev {
                    tree.find_gap_rev_aligned(size, align, lo..=hi)
                } else {
                    tree.find_gap_aligned(size, align, lo..=hi)
                };
                assert_eq!(
                    got, want,
                    "find_gap(size {size}, align {align}, {lo}..={hi}, rev {rev})"
                );
                if align == 1 && input.bool() {
                    let got = if rev {
                        tree.alloc_range_rev(size, lo..=hi, value)
                    } else {
                        tree.alloc_range(size, lo..=hi, value)
                    };
                    let want = want.and_then(|s| match s {
                        None => Err(RangeTreeError::NoSpace { size }),
                        Some(s) => {
                            model.insert(s, s + (size - 1), value).unwrap();
                            Ok(s)
                        }
                    });
                    assert_eq!(
                        got, want,
                        "alloc_range(size {size}, {lo}..={hi}, rev {rev})"
                    );
                }
            }
            10 => {
                let (lo, hi) = span(&mut input);
                let got: Vec<_> = tree.range(lo..=hi).map(|(f, l, &v)| (f, l, v)).collect();
                let want = if lo <= hi {
                    model.overlapping(lo, hi)
                } else {
                    Vec::new()
                };
                assert_eq!(got, want, "range({lo}..={hi})");
                let got: Vec<_> = tree.gaps(lo..=hi).collect();
                let want = model.gaps(lo, hi);
                assert_eq!(got, want, "gaps({lo}..={hi})");
            }
            _ => {
                let copy = tree.dup();
                copy.validate().expect("dup validates");
                assert_eq!(contents(&copy), contents(&tree), "dup");
                if input.bool() {
                    tree = copy;
                }
            }
        }
        if let Err(e) = tree.validate() {
            panic!("validate after step {steps} (op {op}): {e}");
        }
        assert_eq!(tree.len(), model.len(), "len after step {steps}");
        assert_eq!(
            contents(&tree),
            model.entries(),
            "contents after step {steps} (op {op})"
        );
    }
    assert_eq!(contents(&tree), model.entries(), "contents at the end");
    let back: Vec<_> = tree.iter().rev().map(|(f, l, &v)| (f, l, v)).collect();
    let mut fwd = model.entries();
    fwd.reverse();
    assert_eq!(back, fwd, "reverse iteration");
}
