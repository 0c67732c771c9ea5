//! Large range trees: 100K entries inserted in random, ascending and
//! descending order, checked against the model, erased down to the empty
//! leaf and reused.

use crate::checks::{check, check_search, validate};
use crate::model::{Model, MAX};
use crate::random::{point, random_align, random_size, random_window};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use spacekit::rangetree::RangeTree;

/// 100K entries inserted in random, ascending and descending order, checked
/// against a model (gets, gaps, gap searches), then erased in random order
/// down to the empty single leaf.
#[test]
fn large_trees_insert_and_erase_100k() {
    const N: u64 = 100_000;
    let mut rng = SmallRng::seed_from_u64(0x100_000);
    let stride = MAX / N;
    // Spread over the whole space, the last touching u64::MAX; adjacent
    // (no gaps at all); every other index free.
    let spread: Vec<_> = (0..N)
        .map(|i| {
            let f = i * stride;
            let l = if i == N - 1 { MAX } else { f + stride / 2 };
            (f, l, i)
        })
        .collect();
    let dense: Vec<_> = (0..N).map(|i| (i * 3, i * 3 + 2, i)).collect();
    let gappy: Vec<_> = (0..N).map(|i| (i * 4 + 1, i * 4 + 2, i)).collect();
    for (name, layout) in [
        ("random", &spread),
        ("ascending", &dense),
        ("descending", &gappy),
    ] {
        let mut order = layout.clone();
        match name {
            "random" => order.shuffle(&mut rng),
            "descending" => order.reverse(),
            _ => {}
        }
        let mut t = RangeTree::new();
        for (k, &(f, l, v)) in order.iter().enumerate() {
            t.insert_range(f, l, v).unwrap();
            if (k + 1) % 1000 == 0 {
                validate(&t, &format!("{name}: insert {k}"));
                assert_eq!(t.len(), k + 1, "{name}");
            }
        }
        let m = Model::from_entries(layout);
        check(&t, &m, name);

        // Lookups, gaps and searches against the model.
        for _ in 0..2000 {
            let x = point(&mut rng, layout);
            assert_eq!(
                t.get_range(x).map(|(f, l, v)| (f, l, *v)),
                m.get_range(x),
                "{name}: get_range({x})"
            );
        }
        assert_eq!(
            t.gaps(0..=MAX).collect::<Vec<_>>(),
            m.gaps(0, MAX),
            "{name}: gaps"
        );
        let gaps = m.gaps(0, MAX);
        for _ in 0..60 {
            let (lo, hi) = random_window(&mut rng, layout);
            let size = random_size(&mut rng, &gaps);
            let align = random_align(&mut rng);
            check_search(&t, &m, size, align, lo, hi);
        }
        let d = t.dup();
        assert!(d == t);
        assert_eq!(d.height(), t.height());
        drop(d);

        // Erase everything in random order through an index inside each.
        let mut idx: Vec<usize> = (0..layout.len()).collect();
        idx.shuffle(&mut rng);
        for (k, &i) in idx.iter().enumerate() {
            let (f, l, v) = layout[i];
            let at = rng.random_range(f..=l);
            assert_eq!(t.erase(at), Some(v), "{name}: erase({at})");
            if k % 7 == 0 {
                assert_eq!(t.erase(at), None, "{name}: erase({at}) again");
                assert_eq!(t.get(f), None);
            }
            if (k + 1) % 1000 == 0 {
                validate(&t, &format!("{name}: erase {k}"));
                assert_eq!(t.len(), layout.len() - k - 1, "{name}");
            }
        }
        check(&t, &Model::new(), &format!("{name}: all erased"));
        assert!(t.is_empty());
        assert_eq!(t.height(), 1, "{name}: the empty tree is a single leaf");
        assert_eq!(t.gaps(0..=MAX).collect::<Vec<_>>(), [(0, MAX)]);

        // Reuse after clear.
        let mut t = RangeTree::from_sorted(layout.iter().copied()).unwrap();
        check(&t, &m, &format!("{name}: bulk"));
        t.clear();
        check(&t, &Model::new(), &format!("{name}: cleared"));
        t.insert_range(5, 6, 7).unwrap();
        check(
            &t,
            &Model::from_entries(&[(5, 6, 7)]),
            &format!("{name}: reused"),
        );
    }
}
