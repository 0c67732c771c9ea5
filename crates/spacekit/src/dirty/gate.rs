//! When the parallel table builds step aside (the one-pass split and, with
//! its own [`COUNTED`] gate, the counting split): a helper thread
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

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
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

/// What a range costs a scan against a word of the log, for [`Rate`]: on
/// the Zen 4 here one thread reads a clean 32 MiB log in 1.18 ms (0.28 ns
/// a word) and spends about 4.2 ns more per range at 0.1% dirty, so 15;
/// twice that, so that an error leans towards judging a build paid.
pub(crate) const RANGE_WORDS: u64 = 32;

/// What one unhindered thread would take for a build's chunks: each
/// chunk's time against its work (`words + RANGE_WORDS * ranges`, so a
/// dense chunk weighs more than a clean one), and the cheapest per unit of
/// work (a chunk whose thread the host slowed only costs more) applied to
/// the whole.
#[derive(Debug)]
pub(crate) struct Rate {
    /// The cheapest chunk's picoseconds per unit of work.
    cheapest: AtomicU64,
    /// The chunks' work so far.
    work: AtomicU64,
}

impl Rate {
    /// No chunk yet.
    pub(crate) fn new() -> Rate {
        Rate {
            cheapest: AtomicU64::new(u64::MAX),
            work: AtomicU64::new(0),
        }
    }

    /// A chunk of `words` words that wrote `ranges` ranges took `took`.
    pub(crate) fn note(&self, took: Duration, words: usize, ranges: usize) {
        let work = (words as u64).saturating_add(RANGE_WORDS.saturating_mul(ranges as u64));
        let ps = took.as_nanos().saturating_mul(1000) / u128::from(work.max(1));
        self.cheapest
            .fetch_min(u64::try_from(ps).unwrap_or(u64::MAX), Ordering::Relaxed);
        self.work.fetch_add(work, Ordering::Relaxed);
    }

    /// Adds `words` words of work no chunk timed (blocks a build skipped
    /// that one thread would still read).
    pub(crate) fn untimed(&self, words: usize) {
        self.work.fetch_add(words as u64, Ordering::Relaxed);
    }

    /// The whole work at the cheapest chunk's rate (zero before any chunk).
    pub(crate) fn alone(&self) -> Duration {
        let (ps, work) = (
            self.cheapest.load(Ordering::Relaxed),
            self.work.load(Ordering::Relaxed),
        );
        if work == 0 {
            return Duration::ZERO;
        }
        let ns = u128::from(ps) * u128::from(work) / 1000;
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }
}

/// The process's gate for the one-pass split.
pub(crate) static ONE_PASS: Gate = Gate::new();

/// The process's gate for the counting split (dense logs, where the level
/// does not expand words with one compress or the pool is large).
pub(crate) static COUNTED: Gate = Gate::new();

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
    /// have taken ([`Rate::alone`]: the cheapest chunk's rate, by
    /// whichever thread, since the host may have slowed either). It lost
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

    /// Builds still to run on one thread.
    pub(crate) fn skip(&self) -> u32 {
        self.skip.load(Ordering::Relaxed)
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

    #[test]
    fn one_thread_is_judged_by_the_cheapest_chunk_per_unit_of_work() {
        let r = Rate::new();
        assert_eq!(r.alone(), Duration::ZERO);
        // A clean chunk of 1,000 words in 1 us; a dense one (1,000 words,
        // 100 ranges: 4,200 units) in 4.2 us; one slowed by the host.
        r.note(Duration::from_micros(1), 1000, 0);
        r.note(Duration::from_nanos(4200), 1000, 100);
        r.note(Duration::from_micros(50), 1000, 0);
        // 6,200 units at 1 ns.
        assert_eq!(r.alone(), Duration::from_nanos(6200));
        // A skipped clean block one thread would still read.
        r.untimed(800);
        assert_eq!(r.alone(), Duration::from_nanos(7000));
    }
}
