//! What every benchmark is given ([`Ctx`], [`Mode`]) and how it fails
//! ([`BenchError`]).

use std::fmt;
use std::time::Duration;

use crate::harness::Timer;

/// How much work a run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Small sizes and few samples: a smoke run that still verifies every
    /// result (what CI runs).
    Quick,
    /// The default sizes: a few minutes in all.
    Default,
    /// The seeds' full sizes and more samples.
    Full,
}

/// Everything a benchmark needs from the command line.
#[derive(Clone, Copy, Debug)]
pub struct Ctx {
    /// How much work to do.
    pub mode: Mode,
    /// Seed of the random data (the same seed gives the same data).
    pub seed: u64,
}

impl Ctx {
    /// A timer tuned to the mode.
    pub fn timer(&self) -> Timer {
        match self.mode {
            Mode::Quick => Timer {
                sample: Duration::from_micros(100),
                samples: 5,
                budget: Duration::from_millis(150),
            },
            Mode::Default => Timer {
                sample: Duration::from_millis(2),
                samples: 15,
                budget: Duration::from_millis(1500),
            },
            Mode::Full => Timer {
                sample: Duration::from_millis(5),
                samples: 31,
                budget: Duration::from_secs(8),
            },
        }
    }
}

/// A benchmark failure: variants disagreed, or something could not be set up.
#[derive(Debug)]
pub struct BenchError(pub String);

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BenchError {}
