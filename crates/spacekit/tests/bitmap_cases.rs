//! Deterministic bitmap cases: exhaustive small maps across word boundaries,
//! the edge cases of the kernel's lib/test_bitmap.c, agreement with the kernel
//! ports in `baselines`, and bad input. Every query runs at every SIMD level
//! this machine has (`Level::available()`, the portable scalar loops first).

use std::ops::{Bound, Range};

use baselines::find_bit::{
    find_last_bit, find_last_bit_range, find_next_bit, find_next_zero_bit, find_nth_bit,
    for_each_set_bitrange,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit::arch::Level;
use spacekit::bitmap::{
    load_le_bytes, store_le_bytes, BitView, BitViewMut, Bitmap, BitmapError, Bits, BitsMut,
};
use spacekit::testing::{level_of, AtLevel};

use spacekit_testkit::bits::*;

// ---------------------------------------------------------------------------
// Model helpers
// ---------------------------------------------------------------------------

/// Mask of the valid bits of the last word of a `len`-bit map.
fn last_mask(len: usize) -> u64 {
    if len.is_multiple_of(64) {
        !0
    } else {
        !0 >> (64 - len % 64)
    }
}

/// Searches from every start, iterators and runs from `starts`, whole-map
/// queries. `what` goes into failure messages.
fn check_full<B: Bits + ?Sized>(b: &B, m: &[bool], starts: &[usize], what: &str) {
    let len = m.len();
    assert_eq!(b.bit_len(), len, "{what}");
    for s in 0..=len + 1 {
        assert_eq!(
            b.find_next_set(s),
            m_next(m, s, true),
            "{what}: next_set({s})"
        );
        assert_eq!(
            b.find_next_clear(s),
            m_next(m, s, false),
            "{what}: next_clear({s})"
        );
        assert_eq!(
            b.find_prev_set(s),
            m_prev(m, s, true),
            "{what}: prev_set({s})"
        );
        assert_eq!(
            b.find_prev_clear(s),
            m_prev(m, s, false),
            "{what}: prev_clear({s})"
        );
        assert_eq!(b.get(s), m.get(s).copied(), "{what}: get({s})");
    }
    check_summary(b, m, starts, what);
}

/// Whole-map queries plus iterators and runs from `starts`.
fn check_summary<B: Bits + ?Sized>(b: &B, m: &[bool], starts: &[usize], what: &str) {
    let len = m.len();
    assert_eq!(b.count_ones(), m_count(m), "{what}: count_ones");
    assert_eq!(b.first_set(), m_next(m, 0, true), "{what}: first_set");
    assert_eq!(b.first_clear(), m_next(m, 0, false), "{what}: first_clear");
    let last = |v: bool| (0..len).rev().find(|&i| m[i] == v);
    assert_eq!(b.last_set(), last(true), "{what}: last_set");
    assert_eq!(b.last_clear(), last(false), "{what}: last_clear");
    for &s in starts {
        assert_eq!(
            b.set_runs(s).collect::<Vec<_>>(),
            m_runs(m, s, true),
            "{what}: set_runs({s})"
        );
        assert_eq!(
            b.clear_runs(s).collect::<Vec<_>>(),
            m_runs(m, s, false),
            "{what}: clear_runs({s})"
        );
        assert_eq!(
            b.iter_ones(s).collect::<Vec<_>>(),
            m_positions(m, s, true),
            "{what}: iter_ones({s})"
        );
        assert_eq!(
            b.iter_zeros(s).collect::<Vec<_>>(),
            m_positions(m, s, false),
            "{what}: iter_zeros({s})"
        );
    }
    let ones = m_positions(m, 0, true);
    for n in [
        0,
        1,
        ones.len().saturating_sub(1),
        ones.len(),
        ones.len() + 1,
    ] {
        assert_eq!(b.nth_set(n), ones.get(n).copied(), "{what}: nth_set({n})");
    }
}

/// Runs `f` on `b` at every level this machine has; `f`'s first argument
/// prefixes a failure message with the level.
fn each_level<B: Bits + ?Sized>(b: &B, f: impl Fn(&dyn Fn(&str) -> String, &dyn BitsDyn)) {
    for level in Level::available() {
        f(&|w| format!("{level} {w}"), &Dyn(&AtLevel(b, level)));
    }
}

/// Object-safe adapter so `each_level` can hand the same closure every level.
trait BitsDyn {
    fn full(&self, m: &[bool], starts: &[usize], what: &str);
    fn summary(&self, m: &[bool], starts: &[usize], what: &str);
    fn first_set_in(&self, r: Range<usize>) -> Result<Option<usize>, BitmapError>;
    fn last_set_in(&self, r: Range<usize>) -> Result<Option<usize>, BitmapError>;
    fn first_clear_in(&self, r: Range<usize>) -> Result<Option<usize>, BitmapError>;
    fn last_clear_in(&self, r: Range<usize>) -> Result<Option<usize>, BitmapError>;
}

struct Dyn<'a, B: ?Sized>(&'a B);

impl<B: Bits + ?Sized> BitsDyn for Dyn<'_, B> {
    fn full(&self, m: &[bool], starts: &[usize], what: &str) {
        check_full(self.0, m, starts, what);
    }
    fn summary(&self, m: &[bool], starts: &[usize], what: &str) {
        check_summary(self.0, m, starts, what);
    }
    fn first_set_in(&self, r: Range<usize>) -> Result<Option<usize>, BitmapError> {
        self.0.find_first_set_in(r)
    }
    fn last_set_in(&self, r: Range<usize>) -> Result<Option<usize>, BitmapError> {
        self.0.find_last_set_in(r)
    }
    fn first_clear_in(&self, r: Range<usize>) -> Result<Option<usize>, BitmapError> {
        self.0.find_first_clear_in(r)
    }
    fn last_clear_in(&self, r: Range<usize>) -> Result<Option<usize>, BitmapError> {
        self.0.find_last_clear_in(r)
    }
}

// ---------------------------------------------------------------------------
// Exhaustive small cases across word boundaries
// ---------------------------------------------------------------------------

const LENS: &[usize] = &[
    0, 1, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257,
];

#[test]
fn forced_levels_are_really_those_levels() {
    let map = Bitmap::new(10);
    for level in Level::available() {
        assert_eq!(level_of(&AtLevel(&map, level)), level);
        assert_eq!(level_of(&AtLevel(map.view(), level)), level);
    }
    assert_eq!(level_of(&AtLevel(&map, Level::scalar())).name(), "scalar");
    // Without the hook, every bitmap type runs at the detected level.
    assert_eq!(level_of(&map), Level::detect());
    assert_eq!(level_of(&map.view()), Level::detect());
    assert_eq!(level_of(map.as_words()), Level::detect());
}

#[test]
fn every_single_set_and_single_clear_bit() {
    for &len in LENS {
        // Empty and full maps too.
        for fill in [false, true] {
            let m = vec![fill; len];
            let map = bitmap_of(&m);
            each_level(&map, |w, b| {
                b.full(
                    &m,
                    &[0, len / 2, len],
                    &w(&format!("len={len} fill={fill}")),
                )
            });
        }
        for pos in 0..len {
            for background in [false, true] {
                let mut m = vec![background; len];
                m[pos] = !background;
                let map = bitmap_of(&m);
                let starts = [0, pos.saturating_sub(1), pos, pos + 1, len];
                each_level(&map, |w, b| {
                    b.full(
                        &m,
                        &starts,
                        &w(&format!("len={len} pos={pos} background={background}")),
                    )
                });
            }
        }
    }
}

#[test]
fn short_patterns_between_pads() {
    // As memchr's tests do: a short pattern with 0..=130 filler bits on each
    // side, so the pattern lands at every offset of a word and straddles
    // boundaries; the filler is the opposite of the pattern's "needle".
    let patterns: &[&[bool]] = &[
        &[true],
        &[true, true],
        &[true, false, true],
        &[true, false, false, true, true],
        &[true; 9],
    ];
    for pat in patterns {
        for invert in [false, true] {
            let pat: Vec<bool> = pat.iter().map(|&b| b ^ invert).collect();
            let filler = invert;
            for left in 0..=130 {
                for right in 0..=130 {
                    let mut m = vec![filler; left];
                    m.extend_from_slice(&pat);
                    m.extend(std::iter::repeat_n(filler, right));
                    let map = bitmap_of(&m);
                    let len = m.len();
                    let plen = pat.len();
                    each_level(&map, |w, b| {
                        let what = w(&format!("left={left} pat={pat:?} right={right}"));
                        b.summary(&m, &[0, left, left + 1, left + plen], &what);
                        // Range searches bounded to the pattern and around it.
                        for r in [left..left + plen, 0..left, left + plen..len, 1..len] {
                            if r.start > r.end {
                                continue;
                            }
                            let fwd = |v: bool| r.clone().find(|&i| m[i] == v);
                            let bwd = |v: bool| r.clone().rev().find(|&i| m[i] == v);
                            assert_eq!(b.first_set_in(r.clone()), Ok(fwd(true)), "{what} {r:?}");
                            assert_eq!(b.last_set_in(r.clone()), Ok(bwd(true)), "{what} {r:?}");
                            assert_eq!(b.first_clear_in(r.clone()), Ok(fwd(false)), "{what} {r:?}");
                            assert_eq!(b.last_clear_in(r.clone()), Ok(bwd(false)), "{what} {r:?}");
                        }
                    });
                }
            }
        }
    }
}

type Probe = (
    [Option<usize>; 3],
    [Option<usize>; 3],
    Option<usize>,
    Result<Option<usize>, BitmapError>,
    Vec<Range<usize>>,
);

/// Searches for the `needle` polarity around `pos`.
fn probe<B: Bits + ?Sized>(b: &B, needle: bool, pos: usize, len: usize) -> Probe {
    let next = |s| {
        if needle {
            b.find_next_set(s)
        } else {
            b.find_next_clear(s)
        }
    };
    let prev = |s| {
        if needle {
            b.find_prev_set(s)
        } else {
            b.find_prev_clear(s)
        }
    };
    (
        [0, pos / 2, pos].map(next),
        [len - 1, pos, pos + (len - pos) / 2].map(prev),
        if needle { b.last_set() } else { b.last_clear() },
        if needle {
            b.find_last_set_in(pos / 3..)
        } else {
            b.find_last_clear_in(pos / 3..)
        },
        if needle {
            b.set_runs(0).collect()
        } else {
            b.clear_runs(0).collect()
        },
    )
}

#[test]
fn single_bit_in_long_maps_every_position() {
    // Long enough that the 16-word SIMD blocks run, at every offset.
    for len in [1024, 1088, 1151, 2048, 2600] {
        for background in [false, true] {
            let mut m = vec![background; len];
            let mut map = bitmap_of(&m);
            for pos in 0..len {
                m[pos] = !background;
                map.flip(pos).unwrap();
                let needle = !background;
                for level in Level::available() {
                    let (next, prev, last, last_in, runs) =
                        probe(&AtLevel(&map, level), needle, pos, len);
                    let what = format!("len={len} pos={pos} background={background} {level}");
                    assert_eq!(next, [Some(pos); 3], "{what}: next");
                    let want_prev =
                        [len - 1, pos, pos + (len - pos) / 2].map(|s| m_prev(&m, s, needle));
                    assert_eq!(prev, want_prev, "{what}: prev");
                    assert_eq!(last, Some(pos), "{what}: last");
                    assert_eq!(last_in, Ok(Some(pos)), "{what}: last_in");
                    assert_eq!(runs, m_runs(&m, 0, needle), "{what}: runs");
                    assert_eq!(runs.len(), 1, "{what}: runs");
                }
                // A few more full queries, ones and zeros, at every level.
                for level in Level::available() {
                    let b = AtLevel(&map, level);
                    assert_eq!(b.iter_ones(0).count(), m_count(&m), "len={len} pos={pos}");
                    assert_eq!(
                        b.iter_zeros(pos).count(),
                        m_positions(&m, pos, false).len(),
                        "len={len} pos={pos} {level}"
                    );
                }
                m[pos] = background;
                map.flip(pos).unwrap();
            }
            assert_eq!(map, bitmap_of(&vec![background; len]));
        }
    }
}

// ---------------------------------------------------------------------------
// lib/test_bitmap.c
// ---------------------------------------------------------------------------

#[test]
fn test_bitmap_c_clear_79_19_on_full_1024() {
    let mut map = Bitmap::new_set(1024);
    map.clear_range(79..79 + 19).unwrap();
    for i in 0..1024 {
        let want = !(79..98).contains(&i);
        assert_eq!(map.get(i), Some(want), "bit {i}");
    }
    assert_eq!(map.count_ones(), 1024 - 19);
    assert_eq!(map.set_runs(0).collect::<Vec<_>>(), [0..79, 98..1024]);
    let mut clear = map.clear_runs(0);
    assert_eq!(clear.next(), Some(79..98));
    assert_eq!(clear.next(), None);
    for level in Level::available() {
        assert_eq!(AtLevel(&map, level).find_next_clear(0), Some(79), "{level}");
        assert_eq!(AtLevel(&map, level).find_next_set(79), Some(98), "{level}");
    }
    assert_eq!(map.find_prev_set(97), Some(78));
    assert_eq!(map.find_last_clear_in(..), Ok(Some(97)));
    // Setting it back gives the full map again.
    map.set_range(79..=97).unwrap();
    assert_eq!(map, Bitmap::new_set(1024));
}

#[test]
fn test_bitmap_c_find_nth_bit() {
    let bits = [10usize, 20, 30, 40, 50, 60, 80, 123];
    let mut words = [0u64; 3];
    for &b in &bits {
        words[b / 64] |= 1 << (b % 64);
    }
    for len in [192, 191] {
        let map = Bitmap::from_words(words.to_vec(), len).unwrap();
        let view = BitView::new(&words, len).unwrap();
        for (n, &b) in bits.iter().enumerate() {
            assert_eq!(map.nth_set(n), Some(b), "len={len} n={n}");
            for level in Level::available() {
                assert_eq!(AtLevel(&map, level).nth_set(n), Some(b), "{level}");
            }
            assert_eq!(view.nth_set(n), Some(b));
            assert_eq!(find_nth_bit(&words, len, n), b);
        }
        assert_eq!(map.nth_set(8), None, "len={len}");
        assert_eq!(view.nth_set(8), None);
        assert!(find_nth_bit(&words, len, 8) >= len);
        assert_eq!(map.nth_set(usize::MAX), None);
    }
    // Every length from 0 to 192: the n-th bit exists iff it is below len.
    for len in 0..=192 {
        let view = BitView::new(&words, len).unwrap();
        let inside: Vec<usize> = bits.iter().copied().filter(|&b| b < len).collect();
        for n in 0..=bits.len() {
            assert_eq!(view.nth_set(n), inside.get(n).copied(), "len={len} n={n}");
        }
    }
    // With bit 191 also set, the 8th bit exists at 192 bits but not at 191.
    let mut w2 = words;
    w2[2] |= 1 << 63;
    assert_eq!(BitView::new(&w2, 192).unwrap().nth_set(8), Some(191));
    assert_eq!(BitView::new(&w2, 191).unwrap().nth_set(8), None);
}

#[test]
fn test_bitmap_c_byte_ranges_on_0x5a_background() {
    let background = vec![0x5au8; 128];
    let base = Bitmap::from_le_bytes(&background, 1024).unwrap();
    let base_model: Vec<bool> = (0..1024).map(|i| 0x5a >> (i % 8) & 1 == 1).collect();
    assert_eq!(base.as_words(), &to_words(&base_model)[..]);
    assert_eq!(base.as_words(), &[0x5a5a_5a5a_5a5a_5a5au64; 16]);
    for start in (0..1024).step_by(8) {
        for nbits in (0..=1024 - start).step_by(8) {
            for set in [true, false] {
                let mut m = base_model.clone();
                m[start..start + nbits].fill(set);
                let want = to_words(&m);

                let mut map = base.clone();
                let mut words = base.as_words().to_vec();
                if set {
                    map.set_range(start..start + nbits).unwrap();
                    words.set_range(start..start + nbits).unwrap();
                } else {
                    map.clear_range(start..start + nbits).unwrap();
                    words.clear_range(start..start + nbits).unwrap();
                }
                assert_eq!(
                    map.as_words(),
                    &want[..],
                    "start={start} nbits={nbits} set={set}"
                );
                assert_eq!(words, want, "[u64] start={start} nbits={nbits} set={set}");
                assert_eq!(map.count_ones(), m_count(&m));
                // The byte view agrees bytewise.
                let bytes = map.to_le_bytes();
                for (i, &byte) in bytes.iter().enumerate() {
                    let inside = (start / 8..(start + nbits) / 8).contains(&i);
                    let want = match (inside, set) {
                        (false, _) => 0x5a,
                        (true, true) => 0xff,
                        (true, false) => 0x00,
                    };
                    assert_eq!(byte, want, "byte {i} start={start} nbits={nbits} set={set}");
                }
            }
        }
    }
}

#[test]
fn test_bitmap_c_for_each_over_500_bits() {
    let len = 500;
    let m: Vec<bool> = (0..len)
        .map(|i| i % 10 == 0 || (100..150).contains(&i))
        .collect();
    let mut map = Bitmap::new(len);
    for i in (0..len).step_by(10) {
        map.set(i).unwrap();
    }
    map.set_range(100..150).unwrap();
    assert_eq!(map, bitmap_of(&m));
    for start in 0..len {
        for level in Level::available() {
            let b = AtLevel(&map, level);
            let (ones, zeros, sruns, cruns): (Vec<usize>, Vec<usize>, Vec<_>, Vec<_>) = (
                b.iter_ones(start).collect(),
                b.iter_zeros(start).collect(),
                b.set_runs(start).collect(),
                b.clear_runs(start).collect(),
            );
            assert_eq!(
                ones,
                m_positions(&m, start, true),
                "ones from {start} {level}"
            );
            assert_eq!(
                zeros,
                m_positions(&m, start, false),
                "zeros from {start} {level}"
            );
            assert_eq!(
                sruns,
                m_runs(&m, start, true),
                "set runs from {start} {level}"
            );
            assert_eq!(
                cruns,
                m_runs(&m, start, false),
                "clear runs from {start} {level}"
            );
        }
    }
    // Spot values: from 105 the first set run is the tail of 100..150 plus
    // bit 150 (a multiple of 10).
    assert_eq!(map.set_runs(105).next(), Some(105..151));
    assert_eq!(map.clear_runs(105).next(), Some(151..160));
    assert_eq!(map.set_runs(0).count(), 10 + 1 + 34);
    assert_eq!(map.set_runs(499).next(), None);
}

#[test]
fn test_bitmap_c_tails_always_cleared() {
    for len in 0..=260usize {
        let what = format!("len={len}");
        let nw = len.div_ceil(64);
        let full_words = || {
            let mut w = vec![!0u64; nw];
            if let Some(l) = w.last_mut() {
                *l = last_mask(len);
            }
            w
        };

        // new_set
        let full = Bitmap::new_set(len);
        assert_eq!(full.as_words(), &full_words()[..], "{what}: new_set");
        assert_eq!(full.count_ones(), len, "{what}");
        assert_eq!(full.first_clear(), None, "{what}");
        assert_eq!(full.last_set(), len.checked_sub(1), "{what}");

        // set_range / flip_range / fill to the end.
        let mut map = Bitmap::new(len);
        map.set_range(len / 3..).unwrap();
        map.set_range(..len / 3).unwrap();
        assert_eq!(map, full, "{what}: set_range to the end");
        let mut map = Bitmap::new(len);
        map.flip_range(len / 2..len).unwrap();
        map.flip_range(..len / 2).unwrap();
        assert_eq!(map, full, "{what}: flip_range in two halves");
        let mut map = Bitmap::new(len);
        map.flip_range(..).unwrap();
        assert_eq!(map, full, "{what}: flip_range(..)");
        let mut map = Bitmap::new(len);
        map.fill(true);
        assert_eq!(map, full, "{what}: fill");
        if len > 0 {
            let mut map = Bitmap::new(len);
            map.set(len - 1).unwrap();
            map.flip(len - 1).unwrap();
            map.flip(len - 1).unwrap();
            assert_eq!(
                map.as_words().last(),
                Some(&(1u64 << ((len - 1) % 64))),
                "{what}"
            );
        }

        // from_words with a garbage tail.
        let map = Bitmap::from_words(vec![!0u64; nw], len).unwrap();
        assert_eq!(map, full, "{what}: from_words");
        assert_eq!(map.clone().into_words(), full_words(), "{what}: into_words");

        // load_le_bytes / from_le_bytes with garbage pad bits.
        let bytes = vec![0xffu8; len.div_ceil(8)];
        assert_eq!(Bitmap::from_le_bytes(&bytes, len).unwrap(), full, "{what}");
        let mut map = Bitmap::new(len);
        map.load_le_bytes(&bytes).unwrap();
        assert_eq!(map, full, "{what}: load_le_bytes");
        let mut w = vec![0x1234_5678_9abc_def0u64; nw];
        load_le_bytes(&bytes, len, &mut w).unwrap();
        assert_eq!(w, full_words(), "{what}: free load_le_bytes");

        // to_le_bytes never shows pad bits.
        let out = full.to_le_bytes();
        assert_eq!(out.len(), len.div_ceil(8));
        if len % 8 != 0 {
            assert_eq!(out.last(), Some(&((1u8 << (len % 8)) - 1)), "{what}");
        }
        // store_le_bytes keeps the pad bits out had.
        let mut out = vec![0u8; len.div_ceil(8)];
        if let Some(l) = out.last_mut() {
            *l = 0xa0;
        }
        Bitmap::new(len).store_le_bytes(&mut out).unwrap();
        let keep = if len % 8 == 0 {
            0
        } else {
            0xa0 & !((1u8 << (len % 8)) - 1)
        };
        if let Some(&l) = out.last() {
            assert_eq!(l, keep, "{what}: store keeps pad");
        }
        // From a view with garbage words: only the valid bits are written.
        let garbage = vec![!0u64; nw + 1];
        let mut out = vec![0u8; len.div_ceil(8)];
        store_le_bytes(&garbage, len, &mut out).unwrap();
        assert_eq!(out, full.to_le_bytes(), "{what}: store from garbage words");
    }
}

// ---------------------------------------------------------------------------
// Agreement with the kernel ports
// ---------------------------------------------------------------------------

fn random_model(rng: &mut SmallRng, len: usize) -> Vec<bool> {
    match rng.random_range(0..7) {
        0 => vec![false; len],
        1 => vec![true; len],
        2 => {
            let p = rng.random_range(0.0..=1.0);
            (0..len).map(|_| rng.random_bool(p)).collect()
        }
        3 => (0..len).map(|_| rng.random_bool(0.002)).collect(),
        4 => (0..len).map(|_| rng.random_bool(0.998)).collect(),
        _ => {
            let mut m = Vec::with_capacity(len);
            while m.len() < len {
                let max_run = if rng.random_bool(0.5) { 70 } else { 3000 };
                let run = rng.random_range(1..=max_run);
                let v = rng.random_bool(0.5);
                m.extend(std::iter::repeat_n(v, run.min(len - m.len())));
            }
            m
        }
    }
}

fn kernel(found: usize, size: usize) -> Option<usize> {
    (found < size).then_some(found)
}

fn kernel_runs(words: &[u64], size: usize) -> Vec<Range<usize>> {
    let mut v = Vec::new();
    for_each_set_bitrange(words, size, |b, e| v.push(b..e));
    v
}

fn agree<B: Bits + ?Sized>(b: &B, words: &[u64], len: usize, rng: &mut SmallRng, what: &str) {
    let start = rng.random_range(0..len + 10);
    assert_eq!(
        b.find_next_set(start),
        kernel(find_next_bit(words, len, start), len),
        "{what}: find_next_bit from {start}"
    );
    assert_eq!(
        b.find_next_clear(start),
        kernel(find_next_zero_bit(words, len, start), len),
        "{what}: find_next_zero_bit from {start}"
    );
    assert_eq!(
        b.last_set(),
        kernel(find_last_bit(words, len), len),
        "{what}: find_last_bit"
    );
    let (x, y) = (rng.random_range(0..=len), rng.random_range(0..=len));
    let (s, e) = (x.min(y), x.max(y));
    assert_eq!(
        b.find_last_set_in(s..e),
        Ok(kernel(find_last_bit_range(words, e, s), e)),
        "{what}: find_last_bit_range [{s}, {e})"
    );
    let count = b.count_ones();
    for n in [
        rng.random_range(0..count + 2),
        count.saturating_sub(1),
        count,
    ] {
        assert_eq!(
            b.nth_set(n),
            kernel(find_nth_bit(words, len, n), len),
            "{what}: find_nth_bit({n})"
        );
    }
    assert_eq!(
        b.set_runs(0).collect::<Vec<_>>(),
        kernel_runs(words, len),
        "{what}: for_each_set_bitrange"
    );
}

#[test]
fn kernel_ports_agree_on_random_maps() {
    let mut rng = SmallRng::seed_from_u64(0x00b1_70a9_5eed);
    for case in 0..10_000 {
        let len = rng.random_range(0..=5000);
        let m = random_model(&mut rng, len);
        let map = bitmap_of(&m);
        let words = map.as_words();
        let what = format!("case {case} len={len}");
        for level in Level::available() {
            let b = AtLevel(&map, level);
            agree(&b, words, len, &mut rng, &format!("{what} {level}"));
        }
        // Views over garbage tails: the ports clamp to `size` too.
        if case % 4 == 0 {
            let mut g = words.to_vec();
            if let Some(l) = g.last_mut() {
                *l |= !last_mask(len);
            }
            g.push(!0);
            let view = BitView::new(&g, len).unwrap();
            for level in Level::available() {
                let b = AtLevel(view, level);
                agree(
                    &b,
                    &g,
                    len,
                    &mut rng,
                    &format!("{what} garbage view {level}"),
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------

#[test]
fn index_out_of_bounds() {
    for len in [0usize, 1, 63, 64, 65, 200] {
        let mut map = Bitmap::new_set(len);
        let before = map.clone();
        for index in [len, len + 1, len + 64, usize::MAX] {
            let err = Err(BitmapError::IndexOutOfBounds { index, len });
            assert_eq!(map.set(index), err, "set len={len} index={index}");
            assert_eq!(map.clear(index), err, "clear");
            assert_eq!(map.flip(index), err, "flip");
            assert_eq!(map.get(index), None);
            assert_eq!(map.find_prev_set(index), None);
            assert_eq!(map.find_next_set(index), None);
            assert_eq!(map.iter_ones(index).next(), None);
            assert_eq!(map.set_runs(index).next(), None);
        }
        assert_eq!(map, before);
        // Views (with room past len) reject the same indices.
        let mut words = vec![0u64; len.div_ceil(64) + 1];
        let mut view = BitViewMut::new(&mut words, len).unwrap();
        assert_eq!(
            view.set(len),
            Err(BitmapError::IndexOutOfBounds { index: len, len })
        );
        assert_eq!(
            view.flip(len + 3).unwrap_err(),
            BitmapError::IndexOutOfBounds {
                index: len + 3,
                len
            }
        );
        assert!(words.iter().all(|&w| w == 0));
    }
    // [u64] of 2 words: 128 bits.
    let mut words = [0u64; 2];
    assert_eq!(
        words[..].set(128),
        Err(BitmapError::IndexOutOfBounds {
            index: 128,
            len: 128
        })
    );
    assert_eq!(words[..].set(127), Ok(false));
    assert_eq!(words, [0, 1 << 63]);
}

#[test]
fn range_out_of_bounds() {
    let len = 100;
    let m: Vec<bool> = (0..len).map(|i| i % 3 == 0).collect();
    let mut map = bitmap_of(&m);
    let before = map.clone();
    let rerr = |start, end| BitmapError::RangeOutOfBounds { start, end, len };

    macro_rules! all_range_fns {
        ($r:expr, $err:expr) => {{
            let err = $err;
            assert_eq!(map.set_range($r), Err(err.clone()), "set_range {:?}", $r);
            assert_eq!(
                map.clear_range($r),
                Err(err.clone()),
                "clear_range {:?}",
                $r
            );
            assert_eq!(map.flip_range($r), Err(err.clone()), "flip_range {:?}", $r);
            assert_eq!(map.find_first_set_in($r), Err(err.clone()));
            assert_eq!(map.find_first_clear_in($r), Err(err.clone()));
            assert_eq!(map.find_last_set_in($r), Err(err.clone()));
            assert_eq!(map.find_last_clear_in($r), Err(err.clone()));
            for level in Level::available() {
                let b = AtLevel(&map, level);
                assert_eq!(b.find_first_set_in($r), Err(err.clone()), "{level}");
                assert_eq!(b.find_last_clear_in($r), Err(err.clone()), "{level}");
            }
            assert_eq!(map.count_ones_in($r), Err(err.clone()));
            assert_eq!(map.all_set_in($r), Err(err.clone()));
            assert_eq!(map.all_clear_in($r), Err(err.clone()));
            assert_eq!(map, before, "a failing call changed the map: {:?}", $r);
        }};
    }
    // Past the end.
    all_range_fns!(0..101, rerr(0, 101));
    all_range_fns!(100..101, rerr(100, 101));
    all_range_fns!(0..=100, rerr(0, 101));
    all_range_fns!(101.., rerr(101, 100));
    all_range_fns!(..101, rerr(0, 101));
    all_range_fns!(..usize::MAX, rerr(0, usize::MAX));
    // start > end.
    #[allow(clippy::reversed_empty_ranges)]
    {
        all_range_fns!(50..40, rerr(50, 40));
        all_range_fns!(5..=3, rerr(5, 4));
    }
    // Overflowing inclusive ends and excluded starts saturate.
    all_range_fns!(..=usize::MAX, rerr(0, usize::MAX));
    all_range_fns!(10..=usize::MAX, rerr(10, usize::MAX));
    all_range_fns!(usize::MAX..=usize::MAX, rerr(usize::MAX, usize::MAX));
    all_range_fns!(
        (Bound::Excluded(usize::MAX), Bound::<usize>::Unbounded),
        rerr(usize::MAX, 100)
    );
    all_range_fns!((Bound::Excluded(100), Bound::Included(100)), rerr(101, 101));

    // The edges that are valid: empty ranges anywhere up to len, full range.
    assert_eq!(map.find_first_set_in(100..100), Ok(None));
    assert_eq!(map.find_first_set_in(100..), Ok(None));
    assert_eq!(map.count_ones_in(..), Ok(m_count(&m)));
    assert_eq!(map.count_ones_in(..=99), Ok(m_count(&m)));
    assert_eq!(map.all_set_in(7..7), Ok(true));
    assert_eq!(map.all_clear_in(7..7), Ok(true));
    assert_eq!(
        map.find_last_set_in((Bound::Excluded(0), Bound::Excluded(4))),
        Ok(Some(3))
    );
    map.set_range(100..100).unwrap();
    map.set_range((Bound::Excluded(99), Bound::<usize>::Unbounded))
        .unwrap();
    assert_eq!(map, before);

    // Empty map.
    let mut empty = Bitmap::new(0);
    assert_eq!(empty.set_range(..), Ok(()));
    assert_eq!(
        empty.set_range(0..1),
        Err(BitmapError::RangeOutOfBounds {
            start: 0,
            end: 1,
            len: 0
        })
    );
    assert_eq!(empty.find_first_set_in(..), Ok(None));
}

#[test]
fn length_too_large_and_mismatch() {
    // BitView / BitViewMut with too few words.
    let words = [0u64; 2];
    for len in [129, 200, usize::MAX] {
        assert_eq!(
            BitView::new(&words, len).unwrap_err(),
            BitmapError::LengthTooLarge { len, capacity: 128 }
        );
        let mut w = words;
        assert_eq!(
            BitViewMut::new(&mut w, len).unwrap_err(),
            BitmapError::LengthTooLarge { len, capacity: 128 }
        );
    }
    assert_eq!(
        BitView::new(&[], 1).unwrap_err(),
        BitmapError::LengthTooLarge {
            len: 1,
            capacity: 0
        }
    );
    assert!(BitView::new(&words, 128).is_ok());
    assert!(BitView::new(&words, 0).is_ok());
    assert!(BitView::new(&[], 0).is_ok());

    // from_words: counted in words.
    for (nw, len) in [
        (0usize, 1usize),
        (1, 0),
        (1, 65),
        (2, 64),
        (3, 128),
        (1, 200),
    ] {
        assert_eq!(
            Bitmap::from_words(vec![!0; nw], len),
            Err(BitmapError::LengthMismatch {
                expected: len.div_ceil(64),
                found: nw
            }),
            "from_words nw={nw} len={len}"
        );
    }

    // from_le_bytes / load_le_bytes / store_le_bytes: counted in bytes.
    for (nb, len) in [
        (0usize, 1usize),
        (1, 0),
        (1, 9),
        (2, 8),
        (14, 100),
        (12, 100),
    ] {
        let bytes = vec![0xa5u8; nb];
        let e = BitmapError::LengthMismatch {
            expected: len.div_ceil(8),
            found: nb,
        };
        let err = Err(e.clone());
        assert_eq!(
            Bitmap::from_le_bytes(&bytes, len),
            Err(e),
            "nb={nb} len={len}"
        );
        let mut map = Bitmap::new_set(len);
        assert_eq!(map.load_le_bytes(&bytes), err);
        assert_eq!(map, Bitmap::new_set(len));
        let mut out = vec![0x3cu8; nb];
        assert_eq!(map.store_le_bytes(&mut out), err);
        assert_eq!(out, vec![0x3cu8; nb], "store wrote on error");
        let mut w = vec![7u64; len.div_ceil(64)];
        assert_eq!(load_le_bytes(&bytes, len, &mut w), err);
        assert_eq!(w, vec![7u64; len.div_ceil(64)]);
        assert_eq!(store_le_bytes(&w, len, &mut out), err);
        assert_eq!(out, vec![0x3cu8; nb]);
    }
    // Free functions: word counts, and bytes are checked before words.
    assert_eq!(
        load_le_bytes(&[0u8; 1], 100, &mut [0u64; 1]),
        Err(BitmapError::LengthMismatch {
            expected: 13,
            found: 1
        })
    );
    let bytes = [0xffu8; 13];
    let mut w = vec![5u64; 1];
    assert_eq!(
        load_le_bytes(&bytes, 100, &mut w),
        Err(BitmapError::LengthMismatch {
            expected: 2,
            found: 1
        })
    );
    let mut w3 = vec![5u64; 3];
    assert_eq!(
        load_le_bytes(&bytes, 100, &mut w3),
        Err(BitmapError::LengthMismatch {
            expected: 2,
            found: 3
        })
    );
    assert_eq!(w3, [5, 5, 5]);
    let mut out = [0u8; 13];
    assert_eq!(
        store_le_bytes(&w, 100, &mut out),
        Err(BitmapError::LengthMismatch {
            expected: 2,
            found: 1
        })
    );
    assert_eq!(out, [0u8; 13]);
    // Longer word storage is fine for store.
    assert_eq!(store_le_bytes(&w3, 100, &mut out), Ok(()));
    assert_eq!(out[..12], [5, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0]);
    assert_eq!(out[12], 0);
}

#[test]
fn errors_display_and_are_std_errors() {
    let map = Bitmap::new(10);
    let mut m2 = map.clone();
    let errs = [
        m2.set(10).unwrap_err(),
        map.count_ones_in(3..11).unwrap_err(),
        map.find_clear_area(0, 1, 6, 0).unwrap_err(),
        map.find_clear_area_mask(0, 1, 6, 0).unwrap_err(),
        BitView::new(&[0u64], 65).unwrap_err(),
        Bitmap::from_words(vec![], 10).unwrap_err(),
    ];
    let mut seen = Vec::new();
    for e in &errs {
        let s = e.to_string();
        assert!(!s.is_empty(), "{e:?}");
        let dyn_err: &dyn std::error::Error = e;
        assert_eq!(dyn_err.to_string(), s);
        assert!(!seen.contains(&s), "duplicate message {s}");
        seen.push(s);
    }
    assert!(errs[0].to_string().contains("10"));
    assert!(matches!(
        errs[2],
        BitmapError::InvalidAlignment { align: 6 }
    ));
    assert!(matches!(errs[3], BitmapError::InvalidAlignMask { mask: 6 }));
    // Debug of a bitmap is printable and names its runs.
    let mut map = Bitmap::new(300);
    map.set_range(5..9).unwrap();
    let dbg = format!("{map:?}");
    assert!(dbg.contains("300") && dbg.contains("5..9"), "{dbg}");
    assert_eq!(Bitmap::default(), Bitmap::new(0));
}

/// The bit iterators' `fold` and `next` against a model on bitmaps whose
/// bits sit behind gaps of every length from 0 to 150 words (the inline
/// look-ahead, the skip loop and the last word's tail all get exercised),
/// both polarities, from many starts, at every level.
#[test]
fn iterators_fold_across_gaps_of_every_length() {
    let mut rng = SmallRng::seed_from_u64(0x17E5);
    for case in 0..200 {
        let mut positions = Vec::new();
        let mut at = rng.random_range(0..64usize);
        while positions.len() < 40 {
            positions.push(at);
            at += 1 + rng.random_range(0..64) + 64 * rng.random_range(0..=(case % 150));
        }
        let len = at + rng.random_range(0..130);
        for polarity in [true, false] {
            let mut words = vec![if polarity { 0u64 } else { !0 }; len.div_ceil(64)];
            for &p in &positions {
                words[p / 64] ^= 1 << (p % 64);
            }
            let map = Bitmap::from_words(words, len).unwrap();
            for level in Level::available() {
                let b = AtLevel(map.view(), level);
                for from in [0, 1, positions[3], positions[20] + 1, len - 1, len] {
                    let want: Vec<usize> =
                        positions.iter().copied().filter(|&p| p >= from).collect();
                    let push = |mut v: Vec<usize>, i| {
                        v.push(i);
                        v
                    };
                    let (fold, next): (Vec<usize>, Vec<usize>) = if polarity {
                        (
                            b.iter_ones(from).fold(Vec::new(), push),
                            b.iter_ones(from).collect(),
                        )
                    } else {
                        (
                            b.iter_zeros(from).fold(Vec::new(), push),
                            b.iter_zeros(from).collect(),
                        )
                    };
                    let what = format!("case {case} polarity {polarity} from {from} at {level}");
                    assert_eq!(fold, want, "fold, {what}");
                    assert_eq!(next, want, "next, {what}");
                }
            }
        }
    }
}
