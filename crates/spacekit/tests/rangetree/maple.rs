//! Range tree: the maple tree's dup and fork scenarios (check_forking,
//! check_dup, full trees of each height), dups modified independently, and
//! `dup_map` / `dup_filter_map` changing the value type.

use crate::checks::{check, validate};
use crate::model::{Model, MAX};
use crate::random::{build, mutate, random_layout};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use spacekit::rangetree::{RangeTree, INNER_SLOTS, LEAF_SLOTS};

/// check_forking: 135 ranges, dup, every entry of the copy replaced through
/// get_mut; the source keeps the old values.
#[test]
fn forking_replaces_values_in_the_copy_only() {
    let mut src = RangeTree::new();
    let mut m = Model::new();
    for i in 0..135u64 {
        src.insert_range(i * 10, i * 10 + 5, i).unwrap();
        m.insert(i * 10, i * 10 + 5, i).unwrap();
        check(&src, &m, "build");
    }
    let mut copy = src.dup();
    check(&copy, &m, "dup");
    assert_eq!(copy.height(), src.height());
    assert!(copy == src);
    for i in 0..135u64 {
        // Through an index inside the entry, not only its first.
        let v = copy.get_mut(i * 10 + i % 6).expect("entry in the copy");
        assert_eq!(*v, i);
        *v = i + 1000;
        validate(&copy, "after get_mut");
    }
    let new = m.filter_map(|v| Some(v + 1000));
    check(&copy, &new, "copy after replacing every value");
    check(&src, &m, "source after the copy changed");
    assert!(copy != src);
    for i in 0..135u64 {
        assert_eq!(src.get(i * 10 + 5), Some(&i));
        assert_eq!(copy.get(i * 10 + 5), Some(&(i + 1000)));
        assert_eq!(copy.get(i * 10 + 6), None);
    }
}

#[test]
fn single_entries_dup() {
    for (f, l) in [(0u64, 0u64), (MAX, MAX), (0, MAX), (7, 7)] {
        let mut t = RangeTree::new();
        t.insert_range(f, l, format!("[{f}, {l}]")).unwrap();
        let m = Model::from_entries(&[(f, l, format!("[{f}, {l}]"))]);
        check(&t, &m, "single");
        assert_eq!(t.height(), 1);
        let mut d = t.dup();
        check(&d, &m, "single dup");
        assert_eq!(d.height(), 1);
        assert!(d == t);
        assert_eq!(d.erase(l), Some(format!("[{f}, {l}]")));
        check(&d, &Model::new(), "dup emptied");
        check(&t, &m, "source after the dup was emptied");
    }
}

/// Full trees of height 1..=4 by bulk load (exactly
/// `LEAF_SLOTS * INNER_SLOTS^(h-1)` entries, so exactly `h` levels), one
/// entry more (at least one level more), and the same entries by inserts;
/// each dup'd and compared entry by entry and by height.
#[test]
fn full_trees_of_each_height_dup() {
    let mut rng = SmallRng::seed_from_u64(0x0f_0011);
    for h in 1..=4usize {
        let n = LEAF_SLOTS * INNER_SLOTS.pow(h as u32 - 1);
        let ents: Vec<(u64, u64, u64)> = (0..n as u64 + 1).map(|i| (i * 3, i * 3 + 1, i)).collect();
        let (full, more) = (&ents[..n], &ents[..]);
        let m = Model::from_entries(full);

        let bulk = RangeTree::from_sorted(full.iter().copied()).unwrap();
        check(&bulk, &m, &format!("bulk h={h}"));
        assert_eq!(
            bulk.height(),
            h,
            "{n} entries loaded in bulk fill exactly {h} levels"
        );
        let d = bulk.dup();
        check(&d, &m, &format!("bulk dup h={h}"));
        assert_eq!(d.height(), h);
        assert!(d == bulk);

        let over = RangeTree::from_sorted(more.iter().copied()).unwrap();
        check(
            &over,
            &Model::from_entries(more),
            &format!("bulk h={h} plus one"),
        );
        assert!(
            over.height() > h,
            "{} entries cannot fit in {h} levels",
            n + 1
        );
        assert!(over != bulk);

        for how in 1..4 {
            let t = build(&mut rng, full, how);
            check(&t, &m, &format!("built h={h} how={how}"));
            let d = t.dup();
            check(&d, &m, &format!("built dup h={h} how={how}"));
            assert_eq!(d.height(), t.height());
            assert!(d == t);
            assert!(d == bulk, "equal entries, different shapes");
        }
    }
}

/// check_dup: every size 0..1000 built by inserts (one insert more per step,
/// ascending and scattered), dup'd and compared; the copy then loses an
/// entry and the source must not.
#[test]
fn dup_every_size_below_1000() {
    for scattered in [false, true] {
        let mut t = RangeTree::new();
        let mut m = Model::new();
        for n in 0..=1000u64 {
            let what = format!("n={n} scattered={scattered}");
            let mut d = t.dup();
            check(&d, &m, &what);
            assert_eq!(d.height(), t.height(), "{what}");
            if let Some((&f, &(_, v))) = m.m.iter().next() {
                assert_eq!(d.erase(f), Some(v), "{what}");
                validate(&d, &what);
                assert_eq!(d.len() + 1, t.len(), "{what}");
            }
            if n == 1000 {
                check(&t, &m, &what);
                break;
            }
            let i = if scattered { n * 7919 % 1000 } else { n };
            t.insert_range(i * 10, i * 10 + 5, i).unwrap();
            m.insert(i * 10, i * 10 + 5, i).unwrap();
            check(&t, &m, &what);
        }
    }
}

/// A dup'd tree compared entry by entry, then the copy modified (the
/// source must not change), then a fresh dup and the source modified (the
/// copy must not change).
#[test]
fn dup_is_modified_independently_both_ways() {
    let mut rng = SmallRng::seed_from_u64(0xd0b_0001);
    let mut next = 1 << 32;
    for round in 0..4 {
        let layout = random_layout(&mut rng, 2500);
        let m = Model::from_entries(&layout);
        let mut src = build(&mut rng, &layout, round);
        check(&src, &m, "source");

        let mut copy = src.dup();
        check(&copy, &m, "copy");
        assert_eq!(copy.height(), src.height());
        let mut cm = m.clone();
        for k in 0..400 {
            mutate(&mut rng, &mut copy, &mut cm, &layout, &mut next);
            if k % 50 == 0 {
                check(&copy, &cm, "copy after mutations");
                check(&src, &m, "source while the copy changes");
            }
        }
        check(&copy, &cm, "copy after mutations");
        check(&src, &m, "source while the copy changes");

        let copy2 = src.dup();
        let mut sm = m.clone();
        for k in 0..400 {
            mutate(&mut rng, &mut src, &mut sm, &layout, &mut next);
            if k % 50 == 0 {
                check(&src, &sm, "source after mutations");
                check(&copy2, &m, "copy while the source changes");
            }
        }
        check(&src, &sm, "source after mutations");
        check(&copy2, &m, "copy while the source changes");
        check(&copy, &cm, "the first copy, untouched since");
        drop(src);
        check(&copy2, &m, "copy after the source is dropped");
    }
}

#[test]
fn dup_map_and_filter_map_change_the_value_type() {
    let mut rng = SmallRng::seed_from_u64(0xd0b_0002);
    for n in [0usize, 1, 16, 17, 300, 3000] {
        let layout = random_layout(&mut rng, n);
        let m = Model::from_entries(&layout);
        let t = build(&mut rng, &layout, n);
        let s = t.dup_map(|v| format!("v{v}"));
        check(
            &s,
            &m.filter_map(|v| Some(format!("v{v}"))),
            "dup_map to String",
        );
        let odd = t.dup_filter_map(|v| (v % 2 == 1).then(|| format!("o{v}")));
        check(
            &odd,
            &m.filter_map(|v| (v % 2 == 1).then(|| format!("o{v}"))),
            "dup_filter_map odd",
        );
        let none: RangeTree<u8> = t.dup_filter_map(|_| None);
        check(&none, &Model::new(), "dup_filter_map dropping everything");
        let all = t.dup_filter_map(|v| Some(*v));
        check(&all, &m, "dup_filter_map keeping everything");
        assert!(all == t);
        check(&t, &m, "source after the maps");
    }
}
