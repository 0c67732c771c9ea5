//! Timing: medians of repeated samples, operations sampled round-robin so
//! drift on a noisy machine hits every variant alike.
//!
//! An [`Op`] is either a plain operation, run in calibrated batches so that
//! one sample lasts about [`Timer::sample`], or an operation with an untimed
//! per-sample setup ([`Op::with_setup`]): each sample then runs the setup,
//! starts the clock, runs the operation once and stops the clock (for work
//! that consumes its input, like freeing a range that must first be
//! allocated again).

use std::time::{Duration, Instant};

/// Median-of-samples timer.
#[derive(Clone, Copy, Debug)]
pub struct Timer {
    /// Target duration of one sample.
    pub sample: Duration,
    /// Number of samples.
    pub samples: usize,
    /// Stop sampling after this long per operation (keeping at least 3
    /// samples).
    pub budget: Duration,
}

/// What one call of an [`Op`]'s closure is asked to do.
enum Step {
    /// The untimed preparation of one sample.
    Setup,
    /// The timed operation, this many times.
    Run(usize),
}

/// One operation to time (see the module docs).
pub struct Op<'a> {
    f: Box<dyn FnMut(Step) + 'a>,
    setup: bool,
}

impl<'a> Op<'a> {
    /// An operation timed in batches: one dynamic call runs it `n` times, so
    /// the indirection is paid once per batch, not once per operation.
    pub fn new(mut f: impl FnMut() + 'a) -> Op<'a> {
        Op {
            f: Box::new(move |step| {
                if let Step::Run(n) = step {
                    for _ in 0..n {
                        f();
                    }
                }
            }),
            setup: false,
        }
    }

    /// An operation on `state` that needs an untimed `setup` before every
    /// timed call (one call per sample).
    pub fn with_setup<S: 'a>(
        mut state: S,
        mut setup: impl FnMut(&mut S) + 'a,
        mut run: impl FnMut(&mut S) + 'a,
    ) -> Op<'a> {
        Op {
            f: Box::new(move |step| match step {
                Step::Setup => setup(&mut state),
                Step::Run(n) => {
                    for _ in 0..n {
                        run(&mut state);
                    }
                }
            }),
            setup: true,
        }
    }

    /// One sample of `n` calls, in nanoseconds per call.
    fn sample(&mut self, n: usize) -> f64 {
        if self.setup {
            (self.f)(Step::Setup);
        }
        let t = Instant::now();
        (self.f)(Step::Run(n));
        t.elapsed().as_nanos() as f64 / n as f64
    }
}

/// Shorthand for [`Op::new`].
pub fn batch<'a>(f: impl FnMut() + 'a) -> Op<'a> {
    Op::new(f)
}

impl Timer {
    /// Median nanoseconds per call of `f`.
    pub fn median_ns(&self, f: impl FnMut()) -> f64 {
        self.medians(&mut [Op::new(f)])[0]
    }

    /// Median nanoseconds per call of `f` and of `g`, sampled alternately so
    /// that drift on a noisy machine hits both alike (for ratios between an
    /// operation and a physical limit). One call per sample.
    pub fn median_pair(&self, mut f: impl FnMut(), mut g: impl FnMut()) -> (f64, f64) {
        f();
        g();
        let started = Instant::now();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..self.samples {
            let t = Instant::now();
            f();
            a.push(t.elapsed().as_nanos() as f64);
            let t = Instant::now();
            g();
            b.push(t.elapsed().as_nanos() as f64);
            if a.len() >= 3 && started.elapsed() > self.budget * 2 {
                break;
            }
        }
        (median(&mut a), median(&mut b))
    }

    /// Calls per sample so one sample lasts about `self.sample`: one warm-up
    /// call, then batches doubling until one takes at least a tenth of the
    /// target (so a cold first call cannot skew the estimate). An operation
    /// with a setup runs once per sample.
    fn calibrate(&self, op: &mut Op<'_>) -> usize {
        op.sample(1);
        if op.setup {
            return 1;
        }
        let floor = self.sample / 10;
        let mut n = 1usize;
        loop {
            let t = Instant::now();
            (op.f)(Step::Run(n));
            let took = t.elapsed();
            if took >= floor || n >= 1 << 24 {
                let per_call = took.as_nanos().max(1) as f64 / n as f64;
                return ((self.sample.as_nanos() as f64 / per_call) as usize).clamp(1, 1 << 24);
            }
            n *= 2;
        }
    }

    /// Median nanoseconds per call of each operation. Samples are taken
    /// round-robin (one sample of every operation per round), so drift on a
    /// noisy machine affects all variants alike and their ratios stay fair;
    /// each round starts one operation further on, so none always runs
    /// right after the same other one (whose dirty cache lines, or spinning
    /// threads, it would otherwise always inherit).
    pub fn medians(&self, ops: &mut [Op<'_>]) -> Vec<f64> {
        self.sample_all(ops).medians
    }

    /// [`Timer::medians`], with how many rounds ran and each operation's
    /// calls per sample.
    pub fn sample_all(&self, ops: &mut [Op<'_>]) -> Sampled {
        let batches: Vec<usize> = ops.iter_mut().map(|op| self.calibrate(op)).collect();
        let started = Instant::now();
        let budget = self.budget * ops.len().max(1) as u32;
        let mut samples = vec![Vec::with_capacity(self.samples); ops.len()];
        let count = ops.len();
        for round in 0..self.samples {
            for j in 0..count {
                let k = (round + j) % count;
                samples[k].push(ops[k].sample(batches[k]));
            }
            if round >= 2 && started.elapsed() > budget {
                break;
            }
        }
        if std::env::var_os("SPACEKIT_TRACE").is_some() {
            eprintln!("trace: batches {batches:?} samples {samples:?}");
        }
        Sampled {
            rounds: samples.first().map_or(0, Vec::len),
            medians: samples.iter_mut().map(|v| median(v)).collect(),
            batches,
        }
    }
}

/// What [`Timer::sample_all`] measured.
#[derive(Clone, Debug)]
pub struct Sampled {
    /// Median nanoseconds per call of each operation.
    pub medians: Vec<f64>,
    /// Rounds taken (samples per operation).
    pub rounds: usize,
    /// Calls per sample of each operation.
    pub batches: Vec<usize>,
}

/// Median of `v` (sorted in place); 0 for an empty slice.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quick() -> Timer {
        Timer {
            sample: Duration::from_micros(50),
            samples: 3,
            budget: Duration::from_millis(50),
        }
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }

    #[test]
    fn medians_time_every_operation() {
        let (mut a, mut b) = (0u64, 0u64);
        let s = quick().sample_all(&mut [batch(|| a += 1), batch(|| b += 1)]);
        let m = s.medians;
        assert_eq!(m.len(), 2);
        assert_eq!(s.batches.len(), 2);
        assert_eq!(s.rounds, 3, "quick() takes 3 samples");
        assert!(m.iter().all(|&x| x > 0.0));
        assert!(
            a >= 4 && b >= 4,
            "each op ran its calibration call and 3 samples"
        );
    }

    #[test]
    fn rounds_rotate_which_operation_runs_first() {
        // Each op records the order in which ops ran; every round must
        // start one op further on.
        let order = std::cell::RefCell::new(Vec::new());
        // A budget no loaded machine reaches, so all six rounds run.
        let timer = Timer {
            samples: 6,
            budget: Duration::from_secs(600),
            ..quick()
        };
        let mut ops = [
            batch(|| order.borrow_mut().push(0)),
            batch(|| order.borrow_mut().push(1)),
            batch(|| order.borrow_mut().push(2)),
        ];
        // Calibration runs each op alone first; only the rounds count.
        let s = timer.sample_all(&mut ops);
        drop(ops);
        assert_eq!(s.rounds, 6);
        let order = order.into_inner();
        // The rounds' calls are the last 6 * 3 samples of batches[k] calls.
        let mut firsts = Vec::new();
        let mut rest = &order[order.len() - 6 * s.batches.iter().sum::<usize>()..];
        for _ in 0..6 {
            firsts.push(rest[0]);
            let take: usize = s.batches.iter().sum();
            rest = &rest[take..];
        }
        assert_eq!(firsts, [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn setup_runs_untimed_before_every_call() {
        // The state counts setups and runs; every run must follow a setup.
        let mut log = Vec::new();
        {
            let op = Op::with_setup(
                (&mut log, false),
                |(_, ready)| *ready = true,
                |(log, ready)| {
                    log.push(*ready);
                    *ready = false;
                },
            );
            let m = quick().medians(&mut [op]);
            assert!(m[0] > 0.0);
        }
        assert!(log.len() >= 4, "calibration call and 3 samples: {log:?}");
        assert!(
            log.iter().all(|&r| r),
            "a run came without its setup: {log:?}"
        );
    }
}
