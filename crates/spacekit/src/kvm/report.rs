//! A migration's report: every round's numbers, the downtime, whether it
//! converged, and the pages that differ.

use std::time::Duration;
use std::vec::Vec;

/// One round's numbers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoundReport {
    /// 0 for the full copy, then 1, 2, ...
    pub round: u32,
    /// Whether the vCPUs were paused (the last round).
    pub last: bool,
    /// Dirty pages in the table (after the OR of the logs).
    pub dirty_pages: u64,
    /// Pages KVM reported (ring entries, with repeats, in ring mode).
    pub kvm_pages: u64,
    /// Pages the VMM's log reported.
    pub vmm_pages: u64,
    /// Ranges in the table.
    pub ranges: u64,
    /// Harvest time (ioctls, ring walk, VMM log swap), with the table built
    /// in the same pass over the logs (dirty log modes).
    pub harvest: Duration,
    /// Time to build the table after the harvest: the ring's sort, or the
    /// last round's union; 0 when the harvest built it.
    pub build: Duration,
    /// Bytes of guest memory the round covers (what the receiver holds
    /// afterwards): [`RoundReport::payload_bytes`] plus
    /// [`RoundReport::zero_bytes`].
    pub bytes_sent: u64,
    /// Bytes of guest memory sent as payload.
    pub payload_bytes: u64,
    /// Bytes of all-zero pages sent without payload (with the zero-page
    /// extension).
    pub zero_bytes: u64,
    /// Connections the round went over (1: the main one).
    pub connections: u32,
    /// Time to send them and get the acknowledgement.
    pub send: Duration,
    /// Pages dirtied per second in this round: its dirty pages over the
    /// time since the previous harvest (0 for round 0).
    pub dirty_pages_per_sec: f64,
    /// Pages each vCPU's dirty ring reported this round (with repeats;
    /// vCPU order). Empty with a dirty log, which does not say which vCPU
    /// wrote a page.
    pub vcpu_dirty_pages: Vec<u64>,
    /// Each vCPU's throttle during this round, in percent of its time
    /// (vCPU order; all 0 without auto-converge).
    pub throttle: Vec<u32>,
    /// The link's bandwidth estimate after this round's send, bytes/s.
    pub bandwidth: f64,
    /// What sending this round's dirty bytes was predicted to take when it
    /// was decided (with a downtime target).
    pub predicted: Option<Duration>,
}

/// A whole migration's numbers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MigrationReport {
    /// Every round, round 0 first.
    pub rounds: Vec<RoundReport>,
    /// From the pause to the last round's acknowledgement.
    pub downtime: Duration,
    /// Whether the pages were compared: the receiver accepted spacekit's
    /// page-hash extension (a plain Cloud Hypervisor receiver does not).
    pub pages_checked: bool,
    /// Pages whose CRC-32C differs between source and destination (must be
    /// empty; empty too when `pages_checked` is false).
    pub differing_pages: Vec<u64>,
    /// Guest writes during pre-copy (all vCPUs).
    pub guest_writes: u64,
    /// Host (DMA) writes during pre-copy.
    pub dma_writes: u64,
    /// Pre-copy wall time (round 0 start to the pause).
    pub precopy: Duration,
    /// The guest's target write rate (its `writes_per_sec`; 0 = unpaced).
    pub requested_write_rate: u64,
    /// The downtime target, if there was one.
    pub downtime_target: Option<Duration>,
    /// Whether the last round was sent because it fit the target (or fell
    /// below the size threshold); false when the timeout or the last
    /// allowed round forced it.
    pub converged: bool,
    /// The highest throttle any vCPU reached, in percent.
    pub max_throttle: u32,
}

impl MigrationReport {
    /// The guest's write rate during pre-copy, in writes per second.
    pub fn guest_write_rate(&self) -> f64 {
        self.guest_writes as f64 / self.precopy.as_secs_f64().max(1e-9)
    }

    /// Whether a paced guest reached at least 90% of its target write rate
    /// during pre-copy (always true when unpaced). A guest whose every
    /// write to a logged page exits to KVM may not reach it.
    pub fn rate_reached(&self) -> bool {
        self.guest_write_rate() >= 0.9 * self.requested_write_rate as f64
    }

    /// Pages dirtied per second during pre-copy (the rounds after round 0,
    /// pages in their tables over the pre-copy time).
    pub fn dirty_page_rate(&self) -> f64 {
        let pages: u64 = self
            .rounds
            .iter()
            .filter(|r| r.round > 0 && !r.last)
            .map(|r| r.dirty_pages)
            .sum();
        pages as f64 / self.precopy.as_secs_f64().max(1e-9)
    }
}

impl core::fmt::Display for MigrationReport {
    /// One line per round (dirty pages, ranges, KVM and VMM pages, harvest,
    /// table build, bytes sent, send time), then the downtime, the rates and
    /// the pages that differ.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        writeln!(
            f,
            "{:<12} {:>11} {:>9} {:>9} {:>8} {:>11} {:>11} {:>11} {:>11} {:>10} {:>9}",
            "round",
            "dirty pages",
            "ranges",
            "kvm",
            "vmm",
            "harvest",
            "build",
            "sent",
            "send",
            "pages/s",
            "throttle"
        )?;
        for r in &self.rounds {
            let round = std::format!("{}{}", r.round, if r.last { " (paused)" } else { "" });
            let mib = std::format!("{:.1} MiB", r.bytes_sent as f64 / f64::from(1 << 20));
            let throttle = r.throttle.iter().max().copied().unwrap_or(0);
            writeln!(
                f,
                "{round:<12} {:>11} {:>9} {:>9} {:>8} {:>11.1?} {:>11.1?} {mib:>11} {:>11.1?} \
                 {:>10.0} {:>8}%",
                r.dirty_pages,
                r.ranges,
                r.kvm_pages,
                r.vmm_pages,
                r.harvest,
                r.build,
                r.send,
                r.dirty_pages_per_sec,
                throttle
            )?;
        }
        // No paused round: the migration was abandoned (`on_timeout`
        // Abandon) before the guest stopped.
        let abandoned = !self.rounds.iter().any(|r| r.last);
        if abandoned {
            write!(
                f,
                "abandoned before the pause: no downtime, the guest kept running"
            )?;
        } else {
            write!(
                f,
                "downtime {:.2?} (pause to the last round's acknowledgement)",
                self.downtime
            )?;
        }
        writeln!(
            f,
            "; the guest made {:.0} writes/s ({:.0} dirty pages/s) over {:.2?} of pre-copy; {} \
             host DMA writes",
            self.guest_write_rate(),
            self.dirty_page_rate(),
            self.precopy,
            self.dma_writes
        )?;
        match self.downtime_target {
            Some(t) if abandoned => writeln!(
                f,
                "did NOT converge on the {t:.0?} downtime target and was abandoned at the \
                 timeout or the last allowed round (vCPUs throttled up to {}%)",
                self.max_throttle
            )?,
            None if abandoned => writeln!(
                f,
                "abandoned at the timeout or the last allowed round (the dirty bytes never \
                 fell below the threshold)"
            )?,
            Some(t) if self.converged => writeln!(
                f,
                "converged on the {t:.0?} downtime target (vCPUs throttled up to {}%)",
                self.max_throttle
            )?,
            Some(t) => writeln!(
                f,
                "did NOT converge on the {t:.0?} downtime target: the timeout or the last \
                 allowed round forced the pause (vCPUs throttled up to {}%)",
                self.max_throttle
            )?,
            None if !self.converged => writeln!(
                f,
                "the last allowed round forced the pause (the dirty bytes never fell below \
                 the threshold)"
            )?,
            None => {}
        }
        if !self.rate_reached() {
            // With auto-converge the throttle slows the vCPUs on purpose.
            let why = if self.max_throttle > 0 {
                "the vCPUs were throttled (auto-converge) or could not write faster on this host"
            } else {
                "its vCPUs could not write faster on this host"
            };
            writeln!(
                f,
                "the guest made {:.0} writes/s, short of the {} asked ({:.0}%): {why}; the \
                 migration ran at the rate reached",
                self.guest_write_rate(),
                self.requested_write_rate,
                100.0 * self.guest_write_rate() / self.requested_write_rate as f64
            )?;
        }
        if abandoned {
            write!(f, "pages not compared: the migration was abandoned")
        } else if self.pages_checked {
            write!(
                f,
                "{} pages differ between source and destination",
                self.differing_pages.len()
            )
        } else {
            write!(
                f,
                "pages not compared: the receiver did not accept spacekit's page-hash check \
                 (a plain Cloud Hypervisor peer)"
            )
        }
    }
}
