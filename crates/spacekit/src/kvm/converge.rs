//! Converging a pre-copy migration on a downtime target: a bandwidth
//! estimate from the rounds sent so far, the decision to pause, a timeout,
//! and auto-converge (throttling the vCPUs that dirty memory faster than the
//! link sends it). None of it needs a [`Guest`](super::Guest): a VMM with its
//! own vCPU loop feeds [`Converger`] each round's numbers and applies the
//! throttle it returns.
//!
//! The rule follows what Cloud Hypervisor's downtime target and QEMU's
//! `downtime-limit` do: once the bytes still dirty can be sent within the
//! target at the bandwidth measured so far, pause and send them. When the
//! guest dirties memory faster than half of what the link sends (QEMU's
//! auto-converge trigger) for two rounds in a row, the dirtiest vCPUs are
//! throttled, first by 20% of their time, then 10% more each round (QEMU's
//! `cpu-throttle-initial` and `cpu-throttle-increment` defaults), up to 99%.

use std::io::{Read, Write};
use std::time::{Duration, Instant};
use std::vec::Vec;

use crate::dirty::{MemoryRange, MemoryRangeTable};

/// What a migration does when it has not converged by its timeout (or its
/// last allowed round).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeoutAction {
    /// Send `Abandon`; the source keeps running and the migration fails
    /// with [`KvmError::NotConverged`](super::KvmError::NotConverged).
    Abandon,
    /// Pause anyway and send what is dirty, however long it takes (the
    /// report says the target was missed).
    Force,
}

impl core::str::FromStr for TimeoutAction {
    type Err = std::string::String;

    /// `abandon` or `force`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "abandon" => Ok(TimeoutAction::Abandon),
            "force" => Ok(TimeoutAction::Force),
            _ => Err(std::format!("`{s}`: abandon or force")),
        }
    }
}

/// Auto-converge's steps (QEMU's defaults).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AutoConverge {
    /// The first throttle, in percent of a vCPU's time.
    pub initial: u32,
    /// Added each round the migration still does not fit.
    pub increment: u32,
    /// The most a vCPU is throttled.
    pub max: u32,
    /// Throttle once the dirty rate exceeds this share of the bandwidth...
    pub trigger: f64,
    /// ...in this many rounds in a row.
    pub rounds: u32,
}

impl Default for AutoConverge {
    fn default() -> Self {
        AutoConverge {
            initial: 20,
            increment: 10,
            max: super::throttle::MAX_PERCENT,
            trigger: 0.5,
            rounds: 2,
        }
    }
}

/// What to do after a pre-copy round was harvested.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Send this round and go on.
    Continue,
    /// Pause and send the last round: it fits the target (or, without a
    /// target, fell below the size threshold).
    Converged,
    /// The timeout or the last allowed round came first.
    TimedOut,
}

/// The state of one migration's convergence: feed it every round.
#[derive(Clone, Debug)]
pub struct Converger {
    target: Option<Duration>,
    stop_below: u64,
    max_rounds: u32,
    timeout: Option<Duration>,
    auto: Option<AutoConverge>,
    started: Instant,
    /// (bytes, time) of the sends so far, newest last (the estimate keeps
    /// the last few).
    sends: Vec<(u64, Duration)>,
    hot_rounds: u32,
}

/// Sends the bandwidth estimate keeps.
const WINDOW: usize = 4;

impl Converger {
    /// A migration that pauses once the dirty bytes can be sent within
    /// `target` (or, with `None`, once a round's dirty bytes fall below
    /// `stop_below`), gives up after `max_rounds` rounds past round 0 or
    /// `timeout`, and throttles vCPUs with `auto`.
    pub fn new(
        target: Option<Duration>,
        stop_below: u64,
        max_rounds: u32,
        timeout: Option<Duration>,
        auto: Option<AutoConverge>,
    ) -> Converger {
        Converger {
            target,
            stop_below,
            max_rounds,
            timeout,
            auto,
            started: Instant::now(),
            sends: Vec::new(),
            hot_rounds: 0,
        }
    }

    /// Records a send of `bytes` that took `time` (request to acknowledgement).
    pub fn record_send(&mut self, bytes: u64, time: Duration) {
        if bytes == 0 {
            return;
        }
        self.sends.push((bytes, time));
        if self.sends.len() > WINDOW {
            self.sends.remove(0);
        }
    }

    /// The link's bandwidth in bytes per second, from the last few sends
    /// (`None` before the first).
    pub fn bandwidth(&self) -> Option<f64> {
        let bytes: u64 = self.sends.iter().map(|s| s.0).sum();
        let secs: f64 = self.sends.iter().map(|s| s.1.as_secs_f64()).sum();
        (bytes > 0 && secs > 0.0).then(|| bytes as f64 / secs)
    }

    /// How long sending `dirty_bytes` would take at the estimated bandwidth,
    /// plus `overhead` (the harvest and table build the last round repeats).
    pub fn predict(&self, dirty_bytes: u64, overhead: Duration) -> Option<Duration> {
        let bw = self.bandwidth()?;
        Some(Duration::from_secs_f64(dirty_bytes as f64 / bw) + overhead)
    }

    /// The decision after round `round` (1, 2, ...) was harvested with
    /// `dirty_bytes` dirty, its harvest and build having taken `overhead`.
    pub fn decide(&self, round: u32, dirty_bytes: u64, overhead: Duration) -> Decision {
        let fits = match self.target {
            Some(t) => self.predict(dirty_bytes, overhead).is_some_and(|p| p <= t),
            None => dirty_bytes < self.stop_below,
        };
        if fits {
            Decision::Converged
        } else if round > self.max_rounds || self.timeout.is_some_and(|t| self.elapsed() >= t) {
            Decision::TimedOut
        } else {
            Decision::Continue
        }
    }

    /// Time since the migration started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Auto-converge after a round that did not fit: `dirty_rate` in bytes
    /// per second, `per_vcpu` the pages each vCPU dirtied this round when
    /// the dirty ring says (`None` with a dirty log), `current` each vCPU's
    /// throttle. Returns the new throttles when they change.
    ///
    /// Throttling starts once the dirty rate has exceeded `trigger` times
    /// the bandwidth for `rounds` rounds in a row. With per-vCPU counts it
    /// raises only the dirtiest vCPUs that together dirtied at least half
    /// the pages (and once those are at the maximum, the next ones); with a
    /// log it raises every vCPU alike.
    pub fn throttle_step(
        &mut self,
        dirty_rate: f64,
        per_vcpu: Option<&[u64]>,
        current: &[u32],
    ) -> Option<Vec<u32>> {
        let auto = self.auto?;
        let bw = self.bandwidth()?;
        if dirty_rate > auto.trigger * bw {
            self.hot_rounds += 1;
        } else {
            self.hot_rounds = 0;
        }
        if self.hot_rounds < auto.rounds || current.is_empty() {
            return None;
        }
        let raise = |p: u32| {
            if p == 0 {
                auto.initial.min(auto.max)
            } else {
                (p + auto.increment).min(auto.max)
            }
        };
        let mut next = current.to_vec();
        match per_vcpu.filter(|c| c.len() == current.len() && c.iter().any(|&n| n > 0)) {
            Some(counts) => {
                let total: u64 = counts.iter().sum();
                let mut order: Vec<usize> = (0..counts.len()).collect();
                order.sort_by(|&a, &b| counts[b].cmp(&counts[a]).then(a.cmp(&b)));
                // The dirtiest half of the pages, skipping vCPUs already at
                // the maximum (their share still counts).
                let mut covered = 0u64;
                let mut raised = false;
                for &v in &order {
                    if covered * 2 >= total && raised {
                        break;
                    }
                    covered += counts[v];
                    if next[v] < auto.max && counts[v] > 0 {
                        next[v] = raise(next[v]);
                        raised = true;
                    }
                }
            }
            None => {
                for p in &mut next {
                    *p = raise(*p);
                }
            }
        }
        (next != current).then_some(next)
    }
}

/// The union of two tables of sorted, disjoint ranges (as a harvest builds
/// them) into `out`: sorted, with overlapping and touching ranges merged.
pub fn union_into(a: &MemoryRangeTable, b: &MemoryRangeTable, out: &mut MemoryRangeTable) {
    out.clear();
    let (mut i, mut j) = (a.ranges().iter().peekable(), b.ranges().iter().peekable());
    let mut cur: Option<MemoryRange> = None;
    loop {
        let next = match (i.peek(), j.peek()) {
            (Some(x), Some(y)) if x.gpa <= y.gpa => i.next(),
            (Some(_), Some(_)) => j.next(),
            (Some(_), None) => i.next(),
            (None, Some(_)) => j.next(),
            (None, None) => None,
        };
        let Some(&r) = next else { break };
        match &mut cur {
            Some(c) if r.gpa <= c.gpa + c.length => {
                let end = (c.gpa + c.length).max(r.gpa + r.length);
                c.length = end - c.gpa;
            }
            _ => {
                if let Some(c) = cur.take() {
                    out.push(c);
                }
                cur = Some(r);
            }
        }
    }
    if let Some(c) = cur {
        out.push(c);
    }
}

/// A stream whose writes are held to a bandwidth, like a link of that speed
/// (QEMU's `max-bandwidth`): a token bucket refilled at `bytes_per_sec`,
/// holding at most 2 ms of it (64 KiB at least), so a pause between rounds
/// does not become a burst. Reads pass through.
pub struct LimitedStream<'a, S: ?Sized> {
    inner: &'a mut S,
    rate: f64,
    cap: f64,
    tokens: f64,
    at: Instant,
}

impl<'a, S: ?Sized> LimitedStream<'a, S> {
    /// `inner`, held to `bytes_per_sec` (at least 1).
    pub fn new(inner: &'a mut S, bytes_per_sec: u64) -> Self {
        let rate = bytes_per_sec.max(1) as f64;
        let cap = (rate * 0.002).max(65536.0);
        LimitedStream {
            inner,
            rate,
            cap,
            tokens: cap,
            at: Instant::now(),
        }
    }
}

impl<S: Write + ?Sized> Write for LimitedStream<'_, S> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let now = Instant::now();
        self.tokens =
            (self.tokens + now.duration_since(self.at).as_secs_f64() * self.rate).min(self.cap);
        self.at = now;
        let n = buf.len().min(self.cap as usize);
        if (n as f64) > self.tokens {
            let wait = (n as f64 - self.tokens) / self.rate;
            std::thread::sleep(Duration::from_secs_f64(wait));
            self.tokens = n as f64;
            self.at = Instant::now();
        }
        let w = self.inner.write(&buf[..n])?;
        self.tokens -= w as f64;
        Ok(w)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl<S: Read + ?Sized> Read for LimitedStream<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(r: &[(u64, u64)]) -> MemoryRangeTable {
        let mut t = MemoryRangeTable::new();
        for &(gpa, length) in r {
            t.push(MemoryRange { gpa, length });
        }
        t
    }

    #[test]
    fn union_merges_overlaps_and_neighbours() {
        let a = table(&[(0, 4096), (16384, 8192), (65536, 4096)]);
        let b = table(&[(4096, 4096), (20480, 8192), (90000, 10)]);
        let mut out = MemoryRangeTable::new();
        union_into(&a, &b, &mut out);
        let got: Vec<_> = out.ranges().iter().map(|r| (r.gpa, r.length)).collect();
        assert_eq!(
            got,
            std::vec![(0, 8192), (16384, 12288), (65536, 4096), (90000, 10)]
        );
        union_into(&a, &MemoryRangeTable::new(), &mut out);
        assert_eq!(out.ranges(), a.ranges());
    }

    #[test]
    fn pauses_when_the_dirty_bytes_fit_the_target() {
        let mut c = Converger::new(Some(Duration::from_millis(50)), 0, 30, None, None);
        // 100 MB/s.
        c.record_send(100_000_000, Duration::from_secs(1));
        assert_eq!(c.decide(1, 4_000_000, Duration::ZERO), Decision::Converged);
        assert_eq!(c.decide(1, 6_000_000, Duration::ZERO), Decision::Continue);
        // The overhead counts.
        assert_eq!(
            c.decide(1, 4_000_000, Duration::from_millis(20)),
            Decision::Continue
        );
        assert_eq!(c.decide(31, 6_000_000, Duration::ZERO), Decision::TimedOut);
        // Without a target: the size threshold.
        let c = Converger::new(None, 1 << 20, 8, None, None);
        assert_eq!(c.decide(1, 1 << 19, Duration::ZERO), Decision::Converged);
        assert_eq!(c.decide(1, 1 << 21, Duration::ZERO), Decision::Continue);
        let c = Converger::new(None, 1, 8, Some(Duration::ZERO), None);
        assert_eq!(c.decide(1, 1 << 21, Duration::ZERO), Decision::TimedOut);
    }

    #[test]
    fn the_estimate_keeps_the_last_sends() {
        let mut c = Converger::new(None, 0, 1, None, None);
        assert_eq!(c.bandwidth(), None);
        c.record_send(1000, Duration::from_secs(1));
        for _ in 0..WINDOW {
            c.record_send(4000, Duration::from_secs(1));
        }
        assert_eq!(c.bandwidth(), Some(4000.0));
    }

    #[test]
    fn throttles_the_dirtiest_vcpus_in_steps() {
        let mut c = Converger::new(
            Some(Duration::from_millis(50)),
            0,
            30,
            None,
            Some(AutoConverge::default()),
        );
        c.record_send(1000, Duration::from_secs(1));
        let counts = [10, 700, 10, 280];
        // The first hot round only counts.
        assert_eq!(c.throttle_step(900.0, Some(&counts), &[0; 4]), None);
        let t = c.throttle_step(900.0, Some(&counts), &[0; 4]).unwrap();
        assert_eq!(t, std::vec![0, 20, 0, 0]);
        let t = c.throttle_step(900.0, Some(&counts), &t).unwrap();
        assert_eq!(t, std::vec![0, 30, 0, 0]);
        // At the maximum, the next dirtiest is raised.
        let t = c
            .throttle_step(900.0, Some(&counts), &[0, 99, 0, 0])
            .unwrap();
        assert_eq!(t, std::vec![0, 99, 0, 20]);
        // A slow round resets the count.
        assert_eq!(c.throttle_step(100.0, Some(&counts), &t), None);
        assert_eq!(c.throttle_step(900.0, Some(&counts), &t), None);
        // Without counts (a dirty log): every vCPU.
        let t = c.throttle_step(900.0, None, &[0, 50]).unwrap();
        assert_eq!(t, std::vec![20, 60]);
        // Everyone at the maximum: no change.
        assert_eq!(c.throttle_step(900.0, None, &[99, 99]), None);
    }

    #[test]
    fn a_limited_stream_holds_its_rate() {
        let mut sink = std::io::sink();
        let mut s = LimitedStream::new(&mut sink, 10 << 20);
        let t = Instant::now();
        let buf = std::vec![0u8; 1 << 20];
        for _ in 0..2 {
            s.write_all(&buf).unwrap();
        }
        // 2 MiB at 10 MiB/s, less the first bucket: at least 150 ms. An
        // upper bound would be a timing assertion on a noisy machine.
        assert!(
            t.elapsed() >= Duration::from_millis(150),
            "{:?}",
            t.elapsed()
        );
    }
}
