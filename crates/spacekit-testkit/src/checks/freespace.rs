//! Target `freespace`: `FreeSpaceIndex` against a scan of its bitmap. The
//! bitmap changes by ranges (set, clear, flip, whole words), the index is
//! updated for each change and `validate_index` checked; every query
//! (first fit from a goal, best fit, largest free) is compared with a
//! straightforward scan of the bits.

use spacekit::freespace::{FreeSpaceError, FreeSpaceIndex};
use spacekit::testing::validate_index;

use super::input::Input;

fn bit(words: &[u64], i: u64) -> bool {
    words[(i / 64) as usize] >> (i % 64) & 1 == 1
}

/// The maximal free runs `[s, e)` of the first `bits` bits.
fn runs(words: &[u64], bits: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < bits {
        if bit(words, i) {
            i += 1;
            continue;
        }
        let s = i;
        while i < bits && !bit(words, i) {
            i += 1;
        }
        out.push((s, i));
    }
    out
}

/// The first aligned start of `nr` bits inside the run `[s, e)` at or after
/// `from`.
fn fit_in(s: u64, e: u64, from: u64, nr: u64, align: u64, offset: u64) -> Option<u64> {
    let lo = u128::from(s.max(from));
    let (align, offset) = (u128::from(align), u128::from(offset));
    let x = (lo + offset).div_ceil(align) * align - offset;
    (x + u128::from(nr) <= u128::from(e)).then_some(x as u64)
}

fn scan_first_fit(runs: &[(u64, u64)], nr: u64, align: u64, offset: u64, goal: u64) -> Option<u64> {
    runs.iter()
        .find_map(|&(s, e)| {
            if e > goal {
                fit_in(s, e, goal, nr, align, offset)
            } else {
                None
            }
        })
        .or_else(|| {
            runs.iter()
                .find_map(|&(s, e)| fit_in(s, e, 0, nr, align, offset).filter(|&x| x < goal))
        })
}

fn class(len: u64) -> u32 {
    len.ilog2()
}

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let bits = match input.u8() % 4 {
        0 => u64::from(input.u8()),
        1 => u64::from(input.u16() % 20_000),
        _ => u64::from(input.u16() % 9_000),
    };
    let extra = usize::from(input.u8() % 3);
    let garbage = if input.bool() { !0u64 } else { 0 };
    let nwords = bits.div_ceil(64) as usize + extra;
    let mut words = vec![garbage; nwords];
    for i in 0..bits {
        words[(i / 64) as usize] &= !(1 << (i % 64));
    }
    // An initial pattern: runs of set bits.
    let mut i = 0;
    while i < bits {
        let gap = u64::from(input.u8()) * u64::from(1 + input.u8() % 16);
        let used = u64::from(input.u8() % 64);
        i += gap;
        for b in i..(i + used).min(bits) {
            words[(b / 64) as usize] |= 1 << (b % 64);
        }
        i += used.max(1);
        if input.is_empty() {
            break;
        }
    }
    if input.u8() == 0xFF {
        // A short word slice must be refused, not read past.
        let short = &words[..(bits.div_ceil(64) as usize).saturating_sub(1)];
        if bits > 0 {
            assert!(
                matches!(
                    FreeSpaceIndex::new(short, bits),
                    Err(FreeSpaceError::LengthMismatch { .. })
                ),
                "a short slice accepted"
            );
        }
    }
    let mut index = FreeSpaceIndex::new(&words, bits).expect("build");
    validate_index(&index, &words).expect("fresh index");
    let mut steps = 0;
    while !input.is_empty() && steps < 64 {
        steps += 1;
        match input.u8() % 6 {
            0 | 1 => {
                let s = input.below(bits + 2);
                let len = match input.u8() % 3 {
                    0 => u64::from(input.u8() % 8),
                    1 => u64::from(input.u8()),
                    _ => u64::from(input.u16()),
                };
                let e = s.saturating_add(len);
                let kind = input.u8() % 3;
                if e <= bits {
                    for b in s..e {
                        let w = &mut words[(b / 64) as usize];
                        match kind {
                            0 => *w |= 1 << (b % 64),
                            1 => *w &= !(1 << (b % 64)),
                            _ => *w ^= 1 << (b % 64),
                        }
                    }
                }
                let got = index.update(&words, s..e);
                if e <= bits {
                    got.unwrap_or_else(|err| panic!("update({s}..{e}): {err}"));
                } else {
                    assert!(got.is_err(), "update({s}..{e}) past {bits} accepted");
                }
                // Garbage past the end must not matter.
                if extra > 0 && input.bool() {
                    let last = words.len() - 1;
                    words[last] = !words[last];
                }
                validate_index(&index, &words)
                    .unwrap_or_else(|err| panic!("after update({s}..{e}): {err}"));
            }
            2 | 3 => {
                let nr = match input.u8() % 3 {
                    0 => u64::from(input.u8() % 16),
                    1 => u64::from(input.u16() % 5000),
                    _ => input.edgy_u64(),
                };
                let align = match input.u8() % 8 {
                    0 => u64::from(input.u8()),
                    k => 1 << (k - 1),
                };
                let offset = match input.u8() % 3 {
                    0 => 0,
                    1 => u64::from(input.u16()),
                    _ => input.edgy_u64(),
                };
                let goal = input.below(bits + 2);
                let got = index.first_fit(&words, nr, align, offset, goal);
                let what = format!(
                    "first_fit(nr {nr}, align {align}, offset {offset}, goal {goal}) of {bits}"
                );
                if nr == 0 || !align.is_power_of_two() || goal > bits {
                    assert!(got.is_err(), "{what}: {got:?}");
                } else {
                    let r = runs(&words, bits);
                    assert_eq!(
                        got,
                        Ok(scan_first_fit(&r, nr, align, offset, goal)),
                        "{what}"
                    );
                }
                let got = index.best_fit(&words, nr, align, offset);
                let what = format!("best_fit(nr {nr}, align {align}, offset {offset}) of {bits}");
                if nr == 0 || !align.is_power_of_two() {
                    assert!(got.is_err(), "{what}: {got:?}");
                } else {
                    let r = runs(&words, bits);
                    let fits: Vec<_> = r
                        .iter()
                        .filter_map(|&(s, e)| fit_in(s, e, 0, nr, align, offset).map(|x| (s, e, x)))
                        .collect();
                    let want = fits
                        .iter()
                        .min_by_key(|&&(s, e, _)| (class(e - s), s))
                        .map(|&(_, _, x)| x);
                    assert_eq!(got, Ok(want), "{what} (fitting runs {fits:?})");
                }
            }
            4 => {
                let r = runs(&words, bits);
                let want = r
                    .iter()
                    .map(|&(s, e)| (s, e - s))
                    .max_by_key(|&(s, len)| (len, std::cmp::Reverse(s)));
                assert_eq!(
                    index.largest_free(&words).unwrap(),
                    want,
                    "largest_free of {bits}"
                );
            }
            _ => {
                // Rebuild and compare with the incrementally kept index.
                let fresh = FreeSpaceIndex::new(&words, bits).expect("rebuild");
                validate_index(&fresh, &words).expect("rebuilt index");
                assert_eq!(fresh.len(), index.len());
            }
        }
    }
    validate_index(&index, &words).expect("index at the end");
}
