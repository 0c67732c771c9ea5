//! Unit tests against brute force over the bitmap.

use alloc::vec::Vec;

use crate::bitmap::{Bitmap, Bits, BitsMut};
use crate::test_rng::Rng;

use super::{aligned_fit, FreeSpaceIndex, LEAF_BITS};

/// Maximal clear runs of the first `bits` bits.
fn runs(map: &Bitmap) -> Vec<(u64, u64)> {
    map.clear_runs(0)
        .map(|r| (r.start as u64, r.end as u64))
        .collect()
}

fn naive_first(map: &Bitmap, nr: u64, align: u64, off: u64, goal: u64) -> Option<u64> {
    let fits: Vec<u64> = runs(map)
        .into_iter()
        .flat_map(|(s, e)| {
            // Every aligned start in the run that fits.
            let mut v = Vec::new();
            let mut x = aligned_fit(s, e, nr, align, off);
            while let Some(a) = x {
                v.push(a);
                x = aligned_fit(a + 1, e, nr, align, off);
            }
            v
        })
        .collect();
    fits.iter()
        .copied()
        .find(|&x| x >= goal)
        .or_else(|| fits.first().copied())
}

fn random_map(r: &mut Rng, bits: usize) -> Bitmap {
    let mut map = Bitmap::new(bits);
    let density = r.below(100);
    let mut i = 0;
    while i < bits {
        let cap = if r.below(4) == 0 { 3000 } else { 40 };
        let len = 1 + r.below(cap) as usize;
        let end = (i + len).min(bits);
        if r.below(100) < density {
            map.set_range(i..end).unwrap();
        }
        i = end;
    }
    map
}

#[test]
fn queries_match_brute_force() {
    let mut r = Rng(0xF5EE_D00D);
    for round in 0..400 {
        let bits = [1, 63, 64, 100, 4095, 4096, 4097, 8192, 12000, 40000][r.below(10) as usize]
            + r.below(3) as usize;
        let mut map = random_map(&mut r, bits);
        let mut index = FreeSpaceIndex::new(map.as_words(), bits as u64).unwrap();
        index.validate(map.as_words()).unwrap();
        for step in 0..20 {
            let cap = if r.below(3) == 0 { 5000 } else { 70 };
            let nr = 1 + r.below(cap);
            let align = 1 << r.below(8);
            let off = r.below(1000);
            let goal = r.below(bits as u64 + 1);
            let want = naive_first(&map, nr, align, off, goal);
            let got = index
                .first_fit(map.as_words(), nr, align, off, goal)
                .unwrap();
            assert_eq!(
                got, want,
                "round {round} step {step}: nr {nr} align {align} off {off} goal {goal}"
            );
            // Best fit: a valid fit in the smallest size class that has one.
            let best = index.best_fit(map.as_words(), nr, align, off).unwrap();
            let classes: Vec<(u32, u64, u64)> = runs(&map)
                .into_iter()
                .filter_map(|(s, e)| {
                    aligned_fit(s, e, nr, align, off).map(|x| ((e - s).ilog2(), s, x))
                })
                .collect();
            let want_best = classes.iter().min_by_key(|c| (c.0, c.1)).map(|c| c.2);
            assert_eq!(best, want_best, "round {round} best nr {nr} align {align}");
            let largest = runs(&map)
                .into_iter()
                .map(|(s, e)| (e - s, s))
                .max_by_key(|&(l, s)| (l, u64::MAX - s));
            assert_eq!(
                index.largest_free(map.as_words()).unwrap(),
                largest.map(|(l, s)| (s, l))
            );
            // Change a random range and update.
            let a = r.below(bits as u64) as usize;
            let cap = if r.below(4) == 0 { 9000 } else { 100 };
            let b = (a + 1 + r.below(cap) as usize).min(bits);
            match r.below(3) {
                0 => map.set_range(a..b).unwrap(),
                1 => map.clear_range(a..b).unwrap(),
                _ => map.flip_range(a..b).unwrap(),
            }
            index.update(map.as_words(), a as u64..b as u64).unwrap();
            index.validate(map.as_words()).unwrap();
        }
    }
}

#[test]
fn memory_is_within_an_eighth_of_the_bitmap() {
    for bits in [LEAF_BITS, 3 * LEAF_BITS + 1, 65528, 524288, 1 << 22] {
        let map = Bitmap::new(bits as usize);
        let index = FreeSpaceIndex::new(map.as_words(), bits).unwrap();
        assert!(
            index.memory_bytes() as u64 * 8 <= bits / 8 * 8 / 8 * 8,
            "{bits}: {}",
            index.memory_bytes()
        );
    }
}
