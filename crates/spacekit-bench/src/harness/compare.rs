//! [`Comparison`]: the path every benchmark case takes, verify -> medians ->
//! rows -> table cells.
//!
//! ```ignore
//! let m = Comparison::new(format!("get on {n} ranges"))
//!     .variant("spacekit", tree_answers, Op::new(|| { /* timed */ }))
//!     .variant("btreemap", map_answers, Op::new(|| { /* timed */ }))
//!     .run(&ctx.timer())?      // fails unless the answers are equal
//!     .per(queries as f64);    // ns per query instead of per call
//! m.rows(&mut report, |v| Row::new("get", v).field("ranges", n));
//! table.row(vec![n.to_string(), m.cell("spacekit"), m.cell("btreemap"), m.ratio_cell("btreemap", "spacekit")]);
//! ```

use std::fmt;

use super::output::{fmt_ns, fmt_ratio, Report, Row};
use super::timer::{Op, Timer};
use super::verify::{verify, verify_lists};
use crate::context::BenchError;

type Check<T> = fn(&str, &[(&str, T)]) -> Result<(), BenchError>;

/// Variants answering one question: their answers are compared, and only
/// if all agree are they timed, round-robin, in one run.
pub struct Comparison<'a, T> {
    what: String,
    check: Check<T>,
    expected: Option<T>,
    variants: Vec<(&'static str, T, Op<'a>)>,
    limits: Vec<(&'static str, Op<'a>)>,
}

impl<'a, T: PartialEq + fmt::Debug> Comparison<'a, T> {
    /// A comparison of `what` (named in the error when variants disagree).
    pub fn new(what: impl Into<String>) -> Self {
        Comparison {
            what: what.into(),
            check: verify::<T>,
            expected: None,
            variants: Vec::new(),
            limits: Vec::new(),
        }
    }

    /// The answer every variant must give (named `expected` when one does
    /// not), for a case whose variants have no other to agree with.
    pub fn expect(mut self, answer: T) -> Self {
        self.expected = Some(answer);
        self
    }

    /// Adds a reference timed round-robin with the variants that answers
    /// nothing (a physical limit, such as the memory read loop): its median
    /// is in the [`Medians`] under `name`, after the variants'.
    pub fn limit(mut self, name: &'static str, op: Op<'a>) -> Self {
        self.limits.push((name, op));
        self
    }

    /// Adds a variant: its name, its answer (computed outside the timing)
    /// and the operation to time.
    pub fn variant(mut self, name: &'static str, answer: T, op: Op<'a>) -> Self {
        self.variants.push((name, answer, op));
        self
    }

    /// Verifies that every answer equals the first (the expected one, if
    /// given), then times every operation, limits included, round-robin.
    pub fn run(self, timer: &Timer) -> Result<Medians, BenchError> {
        let mut answers = Vec::with_capacity(self.variants.len());
        let mut ops = Vec::with_capacity(self.variants.len());
        let mut names = Vec::with_capacity(self.variants.len());
        if let Some(e) = self.expected {
            answers.push(("expected", e));
        }
        for (name, answer, op) in self.variants {
            names.push(name);
            answers.push((name, answer));
            ops.push(op);
        }
        for (name, op) in self.limits {
            names.push(name);
            ops.push(op);
        }
        (self.check)(&self.what, &answers)?;
        drop(answers);
        let s = Timer::sample_all(timer, &mut ops);
        Ok(Medians {
            names,
            ns: s.medians,
            rounds: s.rounds,
            batches: s.batches,
        })
    }
}

impl<X: PartialEq + fmt::Debug> Comparison<'_, Vec<X>> {
    /// A comparison whose answers are long lists: a disagreement names the
    /// first differing entry.
    pub fn lists(what: impl Into<String>) -> Self {
        Comparison {
            what: what.into(),
            check: verify_lists::<X>,
            expected: None,
            variants: Vec::new(),
            limits: Vec::new(),
        }
    }
}

/// Median nanoseconds of each variant of one [`Comparison`].
#[derive(Clone, Debug)]
pub struct Medians {
    names: Vec<&'static str>,
    ns: Vec<f64>,
    rounds: usize,
    batches: Vec<usize>,
}

impl Medians {
    /// Medians given directly (for figures timed another way).
    pub fn from_pairs(pairs: &[(&'static str, f64)]) -> Medians {
        Medians {
            names: pairs.iter().map(|p| p.0).collect(),
            ns: pairs.iter().map(|p| p.1).collect(),
            rounds: 0,
            batches: Vec::new(),
        }
    }

    /// Rounds sampled (each timed every variant once).
    pub fn rounds(&self) -> usize {
        self.rounds
    }

    /// Calls per sample of `variant` (0 when not timed by a [`Comparison`]).
    pub fn batch(&self, variant: &str) -> usize {
        self.names
            .iter()
            .position(|n| *n == variant)
            .and_then(|i| self.batches.get(i).copied())
            .unwrap_or(0)
    }

    /// The variants, in the order added.
    pub fn names(&self) -> &[&'static str] {
        &self.names
    }

    /// The median of `variant`.
    ///
    /// # Panics
    /// If no variant has that name (a bug in the benchmark).
    pub fn ns(&self, variant: &str) -> f64 {
        match self.names.iter().position(|n| *n == variant) {
            Some(i) => self.ns[i],
            None => panic!("no variant {variant} in {:?}", self.names),
        }
    }

    /// Every median divided by `k` (per query when one call runs `k`).
    pub fn per(mut self, k: f64) -> Medians {
        for v in &mut self.ns {
            *v /= k;
        }
        self
    }

    /// `ns(a) / ns(b)`.
    pub fn ratio(&self, a: &str, b: &str) -> f64 {
        self.ns(a) / self.ns(b)
    }

    /// The median of `variant` formatted for a table.
    pub fn cell(&self, variant: &str) -> String {
        fmt_ns(self.ns(variant))
    }

    /// `ns(a) / ns(b)` formatted for a table (`12.3x`).
    pub fn ratio_cell(&self, a: &str, b: &str) -> String {
        fmt_ratio(self.ns(a), self.ns(b))
    }

    /// Pushes one row per variant: `row(variant)` plus `median_ns`.
    pub fn rows(&self, report: &mut Report, row: impl Fn(&str) -> Row) {
        self.rows_with(report, |v, _| row(v));
    }

    /// [`Medians::rows`] for rows with figures derived from the median
    /// (e.g. `gbps`): `row(variant, median_ns)` plus `median_ns`.
    pub fn rows_with(&self, report: &mut Report, row: impl Fn(&str, f64) -> Row) {
        for (name, &ns) in self.names.iter().zip(&self.ns) {
            report.push(row(name, ns).field("median_ns", ns));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn quick() -> Timer {
        Timer {
            sample: Duration::from_micros(20),
            samples: 3,
            budget: Duration::from_millis(20),
        }
    }

    #[test]
    fn disagreeing_answers_are_never_timed() {
        let mut ran = false;
        let r = Comparison::new("sum")
            .variant("a", 3, Op::new(|| ran = true))
            .variant("b", 4, Op::new(|| {}))
            .run(&quick());
        let e = r.unwrap_err();
        assert!(e.0.contains("a gives 3, b gives 4"), "{e}");
        assert!(!ran);
    }

    #[test]
    fn rows_and_cells_follow_the_variants() {
        let m = Comparison::lists("lists")
            .variant("a", vec![1, 2], Op::new(|| {}))
            .variant("b", vec![1, 2], Op::new(|| {}))
            .run(&quick())
            .unwrap();
        assert_eq!(m.names(), ["a", "b"]);
        let mut report = Report::default();
        m.rows(&mut report, |v| Row::new("c", v).field("n", 7));
        assert_eq!(report.rows.len(), 2);
        assert_eq!(report.rows[1].str("variant"), Some("b"));
        assert_eq!(report.rows[1].num("n"), Some(7.0));
        assert!(report.rows[0].num("median_ns").unwrap() > 0.0);
        let m = Medians::from_pairs(&[("x", 10.0), ("y", 5.0)]).per(5.0);
        assert_eq!(m.ns("x"), 2.0);
        assert_eq!(m.ratio_cell("x", "y"), "2.0x");
    }

    #[test]
    fn expected_answers_are_checked_and_limits_timed_unverified() {
        let e = Comparison::new("scan")
            .expect(None)
            .variant("a", Some(3), Op::new(|| {}))
            .run(&quick())
            .unwrap_err();
        assert!(e.0.contains("expected gives None, a gives Some(3)"), "{e}");
        let m = Comparison::new("scan")
            .expect(None::<usize>)
            .variant("a", None, Op::new(|| {}))
            .limit("membw", Op::new(|| {}))
            .run(&quick())
            .unwrap();
        assert_eq!(m.names(), ["a", "membw"]);
        assert!(m.ns("membw") > 0.0);
    }
}
