//! FreeSpaceIndex against a plain bitmap scan, under proptest: after every
//! set/clear/flip of a range, first fit (from a goal, wrapping, aligned on
//! absolute numbers) equals the bitmap engine's `find_clear_area` scan, the
//! best fit is a valid fit in the smallest size class that has one, the
//! largest free run is the longest clear run, and `validate_index` holds;
//! a `CheckedBitmap` owning an index over the same bits (the bytes' bits
//! past them stay clear and unindexed) gives the same answers.

use proptest::prelude::*;
use spacekit::bitmap::{Bitmap, Bits, BitsMut};
use spacekit::checked_bitmap::CheckedBitmap;
use spacekit::freespace::{FreeSpaceError, FreeSpaceIndex};
use spacekit::testing::{validate_index, Validate};

/// First fit by scanning the bitmap: from the goal, then from 0 (below
/// the goal), with the alignment and offset.
fn scan_first(map: &Bitmap, nr: u64, align: u64, off: u64, goal: u64) -> Option<u64> {
    let align_us = align as usize;
    // find_clear_area aligns `index + offset`; only the offset modulo the
    // alignment matters.
    let off = (off % align) as usize;
    let hit = map
        .find_clear_area(goal as usize, nr as usize, align_us, off)
        .unwrap();
    if let Some(x) = hit {
        return Some(x as u64);
    }
    map.find_clear_area(0, nr as usize, align_us, off)
        .unwrap()
        .map(|x| x as u64)
        .filter(|&x| x < goal)
}

fn runs(map: &Bitmap) -> Vec<(u64, u64)> {
    map.clear_runs(0)
        .map(|r| (r.start as u64, r.end as u64))
        .collect()
}

fn fit(s: u64, e: u64, nr: u64, align: u64, off: u64) -> Option<u64> {
    let x = (s + off).div_ceil(align) * align - off;
    (x + nr <= e).then_some(x)
}

#[derive(Clone, Debug)]
enum Op {
    Set(u64, u64),
    Clear(u64, u64),
    Flip(u64, u64),
}

fn op(bits: u64) -> impl Strategy<Value = Op> {
    (0..3u8, 0..bits, 1..bits.min(9000) + 1).prop_map(move |(k, a, len)| {
        let b = (a + len).min(bits);
        match k {
            0 => Op::Set(a, b),
            1 => Op::Clear(a, b),
            _ => Op::Flip(a, b),
        }
    })
}

/// A query: nr, log2 of the alignment, offset, goal.
type Query = (u64, u32, u64, u64);

fn case() -> impl Strategy<Value = (u64, Vec<Op>, Vec<Query>)> {
    prop_oneof![
        Just(1u64),
        1..200u64,
        4000..4200u64,
        8100..8300u64,
        20000..70000u64
    ]
    .prop_flat_map(|bits| {
        (
            Just(bits),
            prop::collection::vec(op(bits), 1..40),
            prop::collection::vec((1..300u64, 0..9u32, 0..100_000u64, 0..=bits), 1..8),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn index_agrees_with_a_bitmap_scan((bits, ops, queries) in case()) {
        let mut map = Bitmap::new(bits as usize);
        let mut index = FreeSpaceIndex::new(map.as_words(), bits).unwrap();
        let zeros = vec![0u8; bits.div_ceil(8) as usize];
        let mut checked = CheckedBitmap::from_bytes(&zeros, 0, zeros.len())
            .unwrap()
            .with_index(bits as usize)
            .unwrap();
        for o in ops {
            let (a, b) = match o {
                Op::Set(a, b) => { map.set_range(a as usize..b as usize).unwrap(); (a, b) }
                Op::Clear(a, b) => { map.clear_range(a as usize..b as usize).unwrap(); (a, b) }
                Op::Flip(a, b) => { map.flip_range(a as usize..b as usize).unwrap(); (a, b) }
            };
            let r = a as usize..b as usize;
            match o {
                Op::Set(..) => { checked.set_range(r).unwrap(); }
                Op::Clear(..) => { checked.clear_range(r).unwrap(); }
                Op::Flip(..) => { checked.flip_range(r).unwrap(); }
            }
            index.update(map.as_words(), a..b).unwrap();
            prop_assert!(validate_index(&index, map.as_words()).is_ok());
            prop_assert!(checked.validate().is_ok());
            prop_assert_eq!(checked.index(), Some(&index));
            for &(nr, align_log, off, goal) in &queries {
                let align = 1u64 << align_log;
                let w = map.as_words();
                prop_assert_eq!(
                    index.first_fit(w, nr, align, off, goal).unwrap(),
                    scan_first(&map, nr, align, off, goal),
                    "first fit nr {} align {} off {} goal {}", nr, align, off, goal
                );
                let best = index.best_fit(w, nr, align, off).unwrap();
                let want = runs(&map)
                    .into_iter()
                    .filter_map(|(s, e)| fit(s, e, nr, align, off).map(|x| ((e - s).ilog2(), s, x)))
                    .min()
                    .map(|c| c.2);
                prop_assert_eq!(best, want, "best fit nr {} align {}", nr, align);
                let (n, a, o, g) = (nr as usize, align as usize, off as usize, goal as usize);
                prop_assert_eq!(
                    checked.first_fit(n, a, o, g).unwrap(),
                    scan_first(&map, nr, align, off, goal).map(|x| x as usize)
                );
                prop_assert_eq!(checked.best_fit(n, a, o).unwrap(), want.map(|x| x as usize));
            }
            let longest = runs(&map).into_iter().map(|(s, e)| (e - s, std::cmp::Reverse(s))).max();
            prop_assert_eq!(index.largest_free(map.as_words()).unwrap(), longest.map(|(l, s)| (s.0, l)));
            prop_assert_eq!(
                checked.largest_free(),
                longest.map(|(l, s)| (s.0 as usize, l as usize))
            );
        }
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let map = Bitmap::new(10_000);
    let w = map.as_words();
    let index = FreeSpaceIndex::new(w, 10_000).unwrap();
    assert_eq!(
        index.first_fit(w, 0, 1, 0, 0),
        Err(FreeSpaceError::ZeroLength)
    );
    assert_eq!(
        index.first_fit(w, 5, 3, 0, 0),
        Err(FreeSpaceError::BadAlignment { align: 3 })
    );
    assert_eq!(
        index.first_fit(w, 5, 1, 0, 10_001),
        Err(FreeSpaceError::OutOfRange {
            start: 10_001,
            end: 10_001,
            bits: 10_000
        })
    );
    assert_eq!(
        index.first_fit(&w[..10], 5, 1, 0, 0),
        Err(FreeSpaceError::LengthMismatch {
            words: 10,
            bits: 10_000
        })
    );
    // A wrong slice is an error, never "nothing free".
    assert_eq!(
        index.largest_free(&w[..10]),
        Err(FreeSpaceError::LengthMismatch {
            words: 10,
            bits: 10_000
        })
    );
    assert!(index.largest_free(w).unwrap().is_some());
    let mut index2 = index.clone();
    assert_eq!(
        index2.update(w, 9_000..10_001),
        Err(FreeSpaceError::OutOfRange {
            start: 9_000,
            end: 10_001,
            bits: 10_000
        })
    );
    assert_eq!(index2, index);
    assert_eq!(
        FreeSpaceIndex::new(w, 1 << 40).err(),
        Some(FreeSpaceError::TooLarge { bits: 1 << 40 })
    );
    // A request larger than the bitmap simply does not fit.
    assert_eq!(index.first_fit(w, 10_001, 1, 0, 0), Ok(None));
    assert_eq!(index.first_fit(w, 10_000, 1, 0, 0), Ok(Some(0)));
}
