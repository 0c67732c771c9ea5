//! Range tree: operation sequences against a `BTreeMap` model on a tiny and a
//! full-width key space (with dups applied and modified independently), the
//! maple tree's dup and fork scenarios, bad input, 100K-entry trees, and the
//! gap search (forward, reverse, aligned) and allocation against a brute-force
//! search over the model's free intervals.
//!
//! One test target; the files are split by concern: `checks` (tree checks
//! against the model), `random` (random trees), `ops` (proptest op sequences),
//! `maple`, `bad_input`, `extremes`, `drop`, `large` and `gaps`. The model is
//! `spacekit_testkit::rangetree_model`; the proptests persist failures next to
//! their file (`spacekit_testkit::regressions` says why).

use spacekit_testkit::rangetree_model as model;
use spacekit_testkit::regressions;

mod checks;
mod random;

mod bad_input;
mod drop;
mod extremes;
mod gaps;
mod large;
mod maple;
mod ops;

fn sorted((a, b): (u64, u64)) -> (u64, u64) {
    (a.min(b), a.max(b))
}
