//! Target `bitmap`: every bitmap query against a `Vec<bool>` model at every
//! SIMD level this machine has (`AtLevel`, scalar first), over a word slice
//! whose bits past the length hold garbage that must neither be read nor
//! written; updates (set/clear/flip of bits and ranges, fill) go through a
//! `BitViewMut`, at a level that rotates. A `SummaryBitmap` takes the same
//! updates through its own methods; after each, its levels validate and its
//! summary-driven searches (`find_next_clear`, `find_clear_area`, `alloc`)
//! agree with the model.

use spacekit::arch::Level;
use spacekit::bitmap::{BitView, BitViewMut, Bitmap, Bits, BitsMut, SummaryBitmap};
use spacekit::testing::{AtLevel, Validate};

use super::input::Input;

fn range(input: &mut Input, len: usize) -> (usize, usize) {
    let s = input.below(len as u64 + 3) as usize;
    let e = if input.u8() < 16 {
        input.below(len as u64 + 3) as usize
    } else {
        (s + input.below((len - s.min(len)) as u64 + 2) as usize).min(len + 2)
    };
    (s, e)
}

fn ok_range(s: usize, e: usize, len: usize) -> bool {
    s <= e && e <= len
}

/// The model's first-fit of `nr > 0` clear bits from `start`, with
/// `(p + offset) % align == 0`.
fn area(m: &[bool], start: usize, nr: usize, align: usize, offset: usize) -> Option<usize> {
    (start..m.len())
        .filter(|&p| (p as u128 + offset as u128).is_multiple_of(align as u128))
        .find(|&p| p + nr <= m.len() && m[p..p + nr].iter().all(|&b| !b))
}

fn runs(m: &[bool], from: usize, value: bool) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut i = from;
    while i < m.len() {
        if m[i] != value {
            i += 1;
            continue;
        }
        let s = i;
        while i < m.len() && m[i] == value {
            i += 1;
        }
        out.push(s..i);
    }
    out
}

fn check_queries(words: &[u64], m: &[bool], input: &mut Input, level: Level) {
    let len = m.len();
    let view = BitView::new(words, len).expect("view");
    let b = AtLevel(view, level);
    let at = |what: &str| format!("{what} at level {level} (len {len})");
    let pos = |v: bool| m.iter().position(|&x| x == v);
    let rpos = |v: bool| m.iter().rposition(|&x| x == v);
    assert_eq!(
        b.count_ones(),
        m.iter().filter(|&&x| x).count(),
        "{}",
        at("count_ones")
    );
    assert_eq!(b.first_set(), pos(true), "{}", at("first_set"));
    assert_eq!(b.first_clear(), pos(false), "{}", at("first_clear"));
    assert_eq!(b.last_set(), rpos(true), "{}", at("last_set"));
    assert_eq!(b.last_clear(), rpos(false), "{}", at("last_clear"));
    for _ in 0..4 {
        let i = input.below(len as u64 + 2) as usize;
        assert_eq!(b.get(i), m.get(i).copied(), "{}", at(&format!("get({i})")));
        let next = |v: bool| (i..len).find(|&k| m[k] == v);
        let prev = |v: bool| {
            if i < len {
                (0..=i).rev().find(|&k| m[k] == v)
            } else {
                None
            }
        };
        assert_eq!(
            b.find_next_set(i),
            next(true),
            "{}",
            at(&format!("find_next_set({i})"))
        );
        assert_eq!(
            b.find_next_clear(i),
            next(false),
            "{}",
            at(&format!("find_next_clear({i})"))
        );
        assert_eq!(
            b.find_prev_set(i),
            prev(true),
            "{}",
            at(&format!("find_prev_set({i})"))
        );
        assert_eq!(
            b.find_prev_clear(i),
            prev(false),
            "{}",
            at(&format!("find_prev_clear({i})"))
        );
        let n = input.below(len as u64 + 2) as usize;
        assert_eq!(
            b.nth_set(n),
            m.iter()
                .enumerate()
                .filter(|(_, &x)| x)
                .nth(n)
                .map(|(k, _)| k),
            "{}",
            at(&format!("nth_set({n})"))
        );
        let (s, e) = range(input, len);
        let w = format!("{s}..{e}");
        if ok_range(s, e, len) {
            let r = &m[s..e];
            let f = |v: bool| r.iter().position(|&x| x == v).map(|k| k + s);
            let l = |v: bool| r.iter().rposition(|&x| x == v).map(|k| k + s);
            assert_eq!(
                b.find_first_set_in(s..e),
                Ok(f(true)),
                "{}",
                at(&format!("find_first_set_in({w})"))
            );
            assert_eq!(
                b.find_first_clear_in(s..e),
                Ok(f(false)),
                "{}",
                at(&format!("find_first_clear_in({w})"))
            );
            assert_eq!(
                b.find_last_set_in(s..e),
                Ok(l(true)),
                "{}",
                at(&format!("find_last_set_in({w})"))
            );
            assert_eq!(
                b.find_last_clear_in(s..e),
                Ok(l(false)),
                "{}",
                at(&format!("find_last_clear_in({w})"))
            );
            let ones = r.iter().filter(|&&x| x).count();
            assert_eq!(
                b.count_ones_in(s..e),
                Ok(ones),
                "{}",
                at(&format!("count_ones_in({w})"))
            );
            assert_eq!(
                b.all_set_in(s..e),
                Ok(ones == r.len()),
                "{}",
                at(&format!("all_set_in({w})"))
            );
            assert_eq!(
                b.all_clear_in(s..e),
                Ok(ones == 0),
                "{}",
                at(&format!("all_clear_in({w})"))
            );
        } else {
            assert!(
                b.find_first_set_in(s..e).is_err(),
                "{}",
                at(&format!("find_first_set_in({w})"))
            );
            assert!(
                b.find_last_clear_in(s..e).is_err(),
                "{}",
                at(&format!("find_last_clear_in({w})"))
            );
            assert!(
                b.count_ones_in(s..e).is_err(),
                "{}",
                at(&format!("count_ones_in({w})"))
            );
            assert!(
                b.all_set_in(s..e).is_err(),
                "{}",
                at(&format!("all_set_in({w})"))
            );
        }
        let from = input.below(len as u64 + 2) as usize;
        let ones: Vec<usize> = b.iter_ones(from).take(300).collect();
        let want: Vec<usize> = (from..len).filter(|&k| m[k]).take(300).collect();
        assert_eq!(ones, want, "{}", at(&format!("iter_ones({from})")));
        let zeros: Vec<usize> = b.iter_zeros(from).take(300).collect();
        let want: Vec<usize> = (from..len).filter(|&k| !m[k]).take(300).collect();
        assert_eq!(zeros, want, "{}", at(&format!("iter_zeros({from})")));
        let got: Vec<_> = b.set_runs(from).take(100).collect();
        let want: Vec<_> = runs(m, from, true).into_iter().take(100).collect();
        assert_eq!(got, want, "{}", at(&format!("set_runs({from})")));
        let got: Vec<_> = b.clear_runs(from).take(100).collect();
        let want: Vec<_> = runs(m, from, false).into_iter().take(100).collect();
        assert_eq!(got, want, "{}", at(&format!("clear_runs({from})")));
        // Clear-area search, power-of-two form and mask form.
        let start = input.below(len as u64 + 2) as usize;
        let nr = match input.u8() % 4 {
            0 => input.below(4) as usize,
            1 | 2 => input.below(80) as usize,
            _ => input.below(len as u64 + 2) as usize,
        };
        let align = match input.u8() % 8 {
            0 => input.u8() as usize,
            k => 1 << (k - 1),
        };
        let offset = if input.bool() {
            input.u64() as usize
        } else {
            input.u8() as usize
        };
        let what = at(&format!(
            "find_clear_area({start}, {nr}, {align}, {offset})"
        ));
        let got = b.find_clear_area(start, nr, align, offset);
        if !align.is_power_of_two() {
            assert!(got.is_err(), "{what}: {got:?}");
        } else if nr == 0 {
            let p = got.unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(p.is_none_or(|p| p >= start && p < len), "{what}: {p:?}");
        } else {
            assert_eq!(got, Ok(area(m, start, nr, align, offset)), "{what}");
            assert_eq!(
                b.find_clear_area_mask(start, nr, align - 1, offset),
                Ok(area(m, start, nr, align, offset)),
                "{}",
                at("find_clear_area_mask")
            );
        }
    }
}

/// The summary bitmap's searches against the model, at positions derived
/// from `step` (no input consumed), and one `alloc` that is undone.
fn check_summary(sb: &mut SummaryBitmap, m: &[bool], step: usize) {
    let len = m.len();
    if let Err(e) = sb.validate() {
        panic!("summary levels after step {step}: {e}");
    }
    let probes = [0, 1, 63, 64, len / 2, len.saturating_sub(1), len, len + 1]
        .into_iter()
        .chain((0..4).map(|k| (step * 7919 + k * 104_729) % (len + 2)));
    for i in probes {
        let want = (i..len).find(|&k| !m[k]);
        assert_eq!(
            sb.find_next_clear(i),
            want,
            "summary find_next_clear({i}) of {len}"
        );
        for (nr, align) in [(1, 1), (1, 8), (2, 1), (3, 4), (65, 1), (64, 64), (0, 16)] {
            // An empty request: whatever the plain bitmap answers.
            let want = if nr == 0 {
                sb.as_bitmap().find_clear_area(i, nr, align, 0)
            } else {
                Ok(area(m, i, nr, align, 0))
            };
            assert_eq!(
                sb.find_clear_area(i, nr, align, 0),
                want,
                "summary find_clear_area({i}, {nr}, {align}) of {len}"
            );
        }
    }
    let want = area(m, 0, 1, 1, 0);
    assert_eq!(sb.alloc(1, 1), Ok(want), "summary alloc(1, 1)");
    if let Some(p) = want {
        assert_eq!(sb.clear(p), Ok(true));
    }
}

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let len = match input.u8() % 4 {
        0 => input.below(130) as usize,
        1 => input.below(1100) as usize,
        _ => input.below(5000) as usize,
    };
    let extra = input.below(3) as usize;
    let tail = input.u64();
    let nwords = len.div_ceil(64) + extra;
    let mut words = vec![tail; nwords];
    let mut m = vec![false; len];
    // Initial contents from the input, a byte per 8 bits.
    let init = input.bytes(len.div_ceil(8));
    for (i, v) in m.iter_mut().enumerate() {
        *v = init.get(i / 8).is_some_and(|b| b >> (i % 8) & 1 == 1);
        let w = &mut words[i / 64];
        if *v {
            *w |= 1 << (i % 64);
        } else {
            *w &= !(1 << (i % 64));
        }
    }
    let mut sb = SummaryBitmap::from_bitmap(
        Bitmap::from_words(words[..len.div_ceil(64)].to_vec(), len).expect("bitmap"),
    );
    let levels: Vec<Level> = Level::available().collect();
    let outside = |words: &[u64]| -> Vec<u64> {
        // The bits past the length, word by word.
        words
            .iter()
            .enumerate()
            .map(|(wi, &w)| {
                let lo = wi * 64;
                let keep = if lo >= len {
                    !0
                } else if lo + 64 <= len {
                    0
                } else {
                    !0u64 << (len - lo)
                };
                w & keep
            })
            .collect()
    };
    let before = outside(&words);
    let mut step = 0usize;
    while !input.is_empty() && step < 32 {
        let level = levels[step % levels.len()];
        step += 1;
        {
            let mut v = AtLevel(BitViewMut::new(&mut words, len).expect("view"), level);
            match input.u8() % 8 {
                0..=2 => {
                    let i = input.below(len as u64 + 2) as usize;
                    let k = input.u8() % 3;
                    let got = match k {
                        0 => v.set(i),
                        1 => v.clear(i),
                        _ => v.flip(i),
                    };
                    if i < len {
                        assert_eq!(got, Ok(m[i]), "bit op {k} at {i}");
                        m[i] = match k {
                            0 => true,
                            1 => false,
                            _ => !m[i],
                        };
                    } else {
                        assert!(got.is_err(), "bit op {k} at {i} of {len}");
                    }
                }
                3..=5 => {
                    let (s, e) = range(&mut input, len);
                    let k = input.u8() % 3;
                    let got = match k {
                        0 => v.set_range(s..e),
                        1 => v.clear_range(s..e),
                        _ => v.flip_range(s..e),
                    };
                    if ok_range(s, e, len) {
                        assert_eq!(got, Ok(()), "range op {k} {s}..{e}");
                        for x in &mut m[s..e] {
                            *x = match k {
                                0 => true,
                                1 => false,
                                _ => !*x,
                            };
                        }
                    } else {
                        assert!(got.is_err(), "range op {k} {s}..{e} of {len}");
                    }
                }
                6 => {
                    let value = input.bool();
                    v.fill(value);
                    m.iter_mut().for_each(|x| *x = value);
                }
                _ => {}
            }
        }
        assert_eq!(outside(&words), before, "bits past the length changed");
        // The summary bitmap follows the model through its own updates.
        for (i, &v) in m.iter().enumerate() {
            if sb.get(i) != Some(v) {
                let got = if v { sb.set(i) } else { sb.clear(i) };
                assert_eq!(got, Ok(!v));
            }
        }
        if step.is_multiple_of(3) {
            // Whole-range updates too: every bit rewritten by ranges.
            let mut i = 0;
            while i < len {
                let v = m[i];
                let e = (i..len).find(|&k| m[k] != v).unwrap_or(len);
                let got = if v {
                    sb.set_range(i..e)
                } else {
                    sb.clear_range(i..e)
                };
                assert_eq!(got, Ok(()));
                i = e;
            }
        }
        check_summary(&mut sb, &m, step);
        // The same queries (the same input bytes) at every level.
        let mut after = input.clone();
        for &level in &levels {
            let mut replay = input.clone();
            check_queries(&words, &m, &mut replay, level);
            after = replay;
        }
        input = after;
    }
}
