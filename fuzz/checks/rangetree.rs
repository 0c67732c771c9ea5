//! Target `rangetree`: `RangeTree` operation sequences against a
//! `BTreeMap` model (`first -> (last, value)`), with `validate()` after
//! each operation and the whole contents compared.

use std::collections::BTreeMap;

use spacekit::__testing::Validate;
use spacekit::rangetree::{RangeTree, RangeTreeError};

use super::input::Input;

type Model = BTreeMap<u64, (u64, u32)>;

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

fn overlapping(m: &Model, lo: u64, hi: u64) -> Vec<(u64, u64, u32)> {
    let mut out: Vec<_> = m
        .range(..=hi)
        .rev()
        .take_while(|(_, (l, _))| *l >= lo)
        .map(|(&f, &(l, v))| (f, l, v))
        .collect();
    out.reverse();
    out
}

fn punch(m: &mut Model, lo: u64, hi: u64) -> usize {
    let hit = overlapping(m, lo, hi);
    for &(f, l, v) in &hit {
        m.remove(&f);
        if f < lo {
            m.insert(f, (lo - 1, v));
        }
        if l > hi {
            m.insert(hi + 1, (l, v));
        }
    }
    hit.len()
}

fn gaps(m: &Model, lo: u64, hi: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut next = u128::from(lo);
    for (f, l, _) in overlapping(m, lo, hi) {
        if u128::from(f) > next {
            out.push((next as u64, f - 1));
        }
        next = u128::from(l) + 1;
    }
    if next <= u128::from(hi) {
        out.push((next as u64, hi));
    }
    out
}

fn model_find(
    m: &Model,
    size: u64,
    align: u64,
    lo: u64,
    hi: u64,
    rev: bool,
) -> Result<Option<u64>, RangeTreeError> {
    if lo > hi {
        return Err(RangeTreeError::InvalidRange {
            first: lo,
            last: hi,
        });
    }
    if size == 0 {
        return Err(RangeTreeError::ZeroSize);
    }
    if !align.is_power_of_two() {
        return Err(RangeTreeError::BadAlignment { align });
    }
    if hi - lo < size - 1 {
        return Err(RangeTreeError::WindowTooSmall {
            size,
            first: lo,
            last: hi,
        });
    }
    let (size, align) = (u128::from(size), u128::from(align));
    let fit = |&(a, b): &(u64, u64)| -> Option<u64> {
        let (a, b) = (u128::from(a), u128::from(b));
        if rev {
            let top = (b + 1).checked_sub(size)?;
            let s = top / align * align;
            (s >= a).then_some(s as u64)
        } else {
            let s = a.div_ceil(align) * align;
            (s + size - 1 <= b).then_some(s as u64)
        }
    };
    let g = gaps(m, lo, hi);
    Ok(if rev {
        g.iter().rev().find_map(fit)
    } else {
        g.iter().find_map(fit)
    })
}

fn contents(t: &RangeTree<u32>) -> Vec<(u64, u64, u32)> {
    t.iter().map(|(f, l, &v)| (f, l, v)).collect()
}

fn model_contents(m: &Model) -> Vec<(u64, u64, u32)> {
    m.iter().map(|(&f, &(l, v))| (f, l, v)).collect()
}

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let mut tree: RangeTree<u32> = RangeTree::new();
    let mut model = Model::new();
    let mut steps = 0u32;
    while !input.is_empty() && steps < 400 {
        steps += 1;
        let op = input.u8() % 12;
        let value = steps;
        match op {
            0..=2 => {
                let (f, l) = span(&mut input);
                let got = tree.insert_range(f, l, value);
                let want = if f > l {
                    Err(RangeTreeError::InvalidRange { first: f, last: l })
                } else if let Some(&(of, ol, _)) = overlapping(&model, f, l).first() {
                    Err(RangeTreeError::Occupied {
                        first: of,
                        last: ol,
                    })
                } else {
                    model.insert(f, (l, value));
                    Ok(())
                };
                assert_eq!(got, want, "insert_range({f}, {l})");
            }
            3 => {
                let (f, l) = span(&mut input);
                let got = tree.store_range(f, l, value);
                let want = if f > l {
                    Err(RangeTreeError::InvalidRange { first: f, last: l })
                } else {
                    punch(&mut model, f, l);
                    model.insert(f, (l, value));
                    Ok(())
                };
                assert_eq!(got, want, "store_range({f}, {l})");
            }
            4 | 5 => {
                let (f, l) = span(&mut input);
                let got = tree.remove_range(f, l);
                let want = if f > l {
                    Err(RangeTreeError::InvalidRange { first: f, last: l })
                } else {
                    Ok(punch(&mut model, f, l))
                };
                assert_eq!(got, want, "remove_range({f}, {l})");
            }
            6 => {
                let i = index(&mut input);
                let want = overlapping(&model, i, i).first().map(|&(f, _, v)| (f, v));
                if let Some((f, _)) = want {
                    model.remove(&f);
                }
                assert_eq!(tree.erase(i), want.map(|(_, v)| v), "erase({i})");
            }
            7 => {
                let i = index(&mut input);
                let want = overlapping(&model, i, i).first().copied();
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
                let want = model_find(&model, size, align, lo, hi, rev);
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
                            model.insert(s, (s + (size - 1), value));
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
                    overlapping(&model, lo, hi)
                } else {
                    Vec::new()
                };
                assert_eq!(got, want, "range({lo}..={hi})");
                let got: Vec<_> = tree.gaps(lo..=hi).collect();
                let want = if lo <= hi {
                    gaps(&model, lo, hi)
                } else {
                    Vec::new()
                };
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
            model_contents(&model),
            "contents after step {steps} (op {op})"
        );
    }
    assert_eq!(
        contents(&tree),
        model_contents(&model),
        "contents at the end"
    );
    let back: Vec<_> = tree.iter().rev().map(|(f, l, &v)| (f, l, v)).collect();
    let mut fwd = model_contents(&model);
    fwd.reverse();
    assert_eq!(back, fwd, "reverse iteration");
}
