//! Range tree value ownership: every entry holds exactly one reference to its
//! value through splits, truncation, removal, dups, clear and drop.

use crate::checks::{check, validate};
use crate::model::Model;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit::rangetree::RangeTree;
use std::rc::Rc;

/// Every entry holds exactly one reference to its value: splits clone,
/// truncation does not, removal, erase, overwrite, clear and drop release.
#[test]
fn values_are_released_exactly_once() {
    let token = Rc::new(());
    let mut rng = SmallRng::seed_from_u64(0x0d20_0001);
    let mut t: RangeTree<Rc<()>> = RangeTree::new();
    let mut m: Model<Rc<()>> = Model::new();
    let count = |t: &RangeTree<Rc<()>>, m: &Model<Rc<()>>| 1 + t.len() + m.len();
    for k in 0..3000 {
        let a = rng.random_range(0..600u64);
        let b = a + rng.random_range(0..30);
        let what = format!("step {k} [{a}, {b}]");
        match k % 6 {
            0 | 1 => assert_eq!(
                t.insert_range(a, b, token.clone()),
                m.insert(a, b, token.clone()),
                "{what}"
            ),
            2 => assert_eq!(
                t.store_range(a, b, token.clone()),
                m.store(a, b, token.clone()),
                "{what}"
            ),
            3 => assert_eq!(t.remove_range(a, b), m.remove(a, b), "{what}"),
            4 => assert_eq!(t.erase(a).is_some(), m.erase(a).is_some(), "{what}"),
            _ => {
                let size = rng.random_range(1..8);
                let got = t.alloc_range(size, a..=b, token.clone());
                assert_eq!(got, m.alloc(size, a, b, false, token.clone()), "{what}");
            }
        }
        if k % 10 == 0 {
            check(&t, &m, &what);
        } else {
            validate(&t, &what);
        }
        assert_eq!(Rc::strong_count(&token), count(&t, &m), "{what}");
    }
    let d = t.dup();
    assert_eq!(Rc::strong_count(&token), count(&t, &m) + d.len());
    let mut k = 0;
    let half = t.dup_filter_map(|v| {
        k += 1;
        (k % 2 == 0).then(|| v.clone())
    });
    assert_eq!(half.len(), t.len() / 2);
    assert_eq!(
        Rc::strong_count(&token),
        count(&t, &m) + d.len() + half.len()
    );
    drop(d);
    drop(half);
    assert_eq!(Rc::strong_count(&token), count(&t, &m));
    let mapped = t.dup_map(|_| 0u8);
    assert_eq!(Rc::strong_count(&token), count(&t, &m));
    drop(mapped);
    let n = t.len();
    t.clear();
    assert_eq!(Rc::strong_count(&token), 1 + m.len());
    check(&t, &Model::new(), "cleared");
    let t2 = RangeTree::from_sorted(m.entries()).unwrap();
    assert_eq!(t2.len(), n);
    assert_eq!(Rc::strong_count(&token), 1 + 2 * n);
    drop(t2);
    m.m.clear();
    assert_eq!(Rc::strong_count(&token), 1);
}
