//! When the one-pass parallel table build steps aside: a helper thread
//! pays only if the build ends sooner than one thread alone would have
//! finished it. On a guest whose host runs its virtual CPUs on fewer cores
//! than it has (two vCPUs getting about one core's time here, at times),
//! the helper's vCPU can be descheduled while it holds a chunk, and the
//! caller, which must not return while a helper reads its bitmap, waits
//! for the host to run it again: a 32 MiB log at 0.1% dirty took 3.3 ms
//! that way against 2.3 ms on one thread. Or the calling thread is the one
//! slowed, and the build ends with its chunks.
//!
//! [`Gate`] keeps the verdict of recent builds: after one that lost (see
//! [`Gate::record`]), the next builds run on one thread, one after the
//! first loss, then 2, 4, … up to [`MAX_SKIP`] after losses in a row; a
//! build that paid halves the count again. So a machine that keeps losing
//! runs one thread but for one probe in [`MAX_SKIP`] builds, and one whose
//! second core comes back finds out within a few builds. The state is two
//! relaxed atomics: it only steers a choice between two ways of computing
//! the same table, never what the table holds.

use core::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Most one-thread builds in a row after parallel builds that lost.
pub(crate) const MAX_SKIP: u32 = 64;

/// The verdict of recent parallel builds. See the [module docs](self).
#[derive(Debug)]
pub(crate) struct Gate {
    /// Builds still to run on one thread.
    skip: AtomicU32,
    /// What the next loss sets `skip` to, halved by each build that paid.
    penalty: AtomicU32,
}

/// The process's gate for the one-pass split.
pub(crate) static ONE_PASS: Gate = Gate::new();

impl Gate {
    /// A gate that admits the next build.
    pub(crate) const fn new() -> Gate {
        Gate {
            skip: AtomicU32::new(0),
            penalty: AtomicU32::new(0),
        }
    }

    /// Whether the next build may run in parallel (else it runs on one
    /// thread, and counts towards the end of the pause).
    pub(crate) fn admit(&self) -> bool {
        self.skip
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| s.checked_sub(1))
            .is_err()
    }

    /// Records a parallel build that took `total`: the calling thread
    /// scanned its last chunk at `own`, the helpers were done at `joined`,
    /// and then their parts were joined; `alone` is what one thread would
    /// have taken, its quickest chunk's time times the number of chunks
    /// (by whichever thread: the host may have slowed either). It lost
    /// when `total` is more than `alone` and a sixteenth (what a helper
    /// that never started costs stays below that), or when the wait for
    /// the helpers was more than a quarter of `total`.
    pub(crate) fn record(&self, alone: Duration, own: Duration, joined: Duration, total: Duration) {
        let waited = joined.saturating_sub(own);
        let lost = total * 16 > alone * 17 || waited * 4 > total;
        let p = self.penalty.load(Ordering::Relaxed);
        if lost {
            let p = p.saturating_mul(2).clamp(1, MAX_SKIP);
            self.penalty.store(p, Ordering::Relaxed);
            self.skip.store(p, Ordering::Relaxed);
        } else {
            self.penalty.store(p / 2, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
impl Gate {
    /// Sets the pause: `skip` builds on one thread, no penalty kept.
    pub(crate) fn set(&self, skip: u32) {
        self.penalty.store(0, Ordering::Relaxed);
        self.skip.store(skip, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Admitted builds until the gate closes; how many it then skips.
    fn skipped(g: &Gate) -> u32 {
        let mut n = 0;
        while !g.admit() {
            n += 1;
        }
        n
    }

    #[test]
    fn losses_pause_the_split_longer_each_time_and_wins_shorten_it() {
        let g = Gate::new();
        let lose = |g: &Gate| g.record(MS * 2, MS * 3, MS * 3, MS * 3);
        let pay = |g: &Gate| g.record(MS * 2, MS, MS, MS + MS / 10);
        // Paid: done in 1.1 ms where one thread takes 2.
        pay(&g);
        assert_eq!(skipped(&g), 0);
        // Lost: 3 ms where one thread takes 2.
        lose(&g);
        assert_eq!(skipped(&g), 1);
        lose(&g);
        assert_eq!(skipped(&g), 2);
        lose(&g);
        assert_eq!(skipped(&g), 4);
        // A wait of half the build loses even when it beat one thread.
        g.record(MS * 4, MS, MS * 2, MS * 2);
        assert_eq!(skipped(&g), 8);
        for _ in 0..10 {
            lose(&g);
        }
        assert_eq!(skipped(&g), MAX_SKIP);
        // A helper that never started costs next to nothing: no pause.
        g.record(MS * 2, MS * 2, MS * 2, MS * 2 + MS / 100);
        assert_eq!(skipped(&g), 0);
        // Builds that paid halve the next pause.
        pay(&g);
        pay(&g);
        assert_eq!(skipped(&g), 0, "no loss since");
        lose(&g);
        // Three builds paid since the pause of 64: 32, 16, 8; the loss
        // doubles the last.
        assert_eq!(skipped(&g), MAX_SKIP / 4);
    }
}
