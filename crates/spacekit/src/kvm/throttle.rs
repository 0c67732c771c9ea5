//! Throttling a guest's vCPUs: each throttled vCPU is taken out of the guest
//! once per period and kept out for its share of the period, the way a VMM
//! slows a guest that dirties memory faster than a migration link sends it
//! (QEMU calls this auto-converge: a vCPU sleeps for a percentage of each
//! 10 ms slice).
//!
//! The host kicks a throttled vCPU out of `KVM_RUN` every period with a
//! real-time signal whose handler does nothing: `KVM_RUN` returns `EINTR`,
//! and the vCPU thread sleeps for `ran * p / (100 - p)`, where `ran` is how
//! long it ran since its last sleep and `p` its throttle in percent, so it
//! runs `100 - p` percent of the time whatever the phase of the kicks (at
//! 99% it sleeps 99 times as long as it ran, as QEMU's throttle sleeps 99
//! time slices). A kick that lands while the thread is asleep or outside
//! `KVM_RUN` is lost and harmless: its run time still counts at the next.
//! A pause or a release wakes a sleeping vCPU at once, so throttling never
//! delays a pause.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use std::vec::Vec;

/// How often a throttled vCPU is kicked out of the guest.
pub const PERIOD: Duration = Duration::from_millis(10);
/// The most a vCPU is throttled, in percent of each period (as QEMU's
/// `cpu-throttle` tops out at 99).
pub const MAX_PERCENT: u32 = 99;

/// The kick signal: the first real-time signal after the ones VMMs commonly
/// take for themselves (Cloud Hypervisor kicks its vCPUs with `SIGRTMIN`).
fn kick_signal() -> libc::c_int {
    vmm_sys_util::signal::SIGRTMIN() + 3
}

extern "C" fn on_kick(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {}

/// Installs the no-op handler once per process (without one, a real-time
/// signal's default action ends the process).
fn install_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // A failure leaves the default action; `Throttle::set` then refuses
        // to kick (see `handler_ok`).
        HANDLER_OK.store(
            vmm_sys_util::signal::register_signal_handler(kick_signal(), on_kick).is_ok(),
            Ordering::Release,
        );
    });
}

static HANDLER_OK: AtomicBool = AtomicBool::new(false);

/// The throttle of every vCPU of one guest, and the thread that kicks them.
pub(crate) struct Throttle {
    percent: Vec<AtomicU32>,
    /// The vCPU threads, in vCPU order (filled once they are spawned).
    threads: Mutex<Vec<libc::pthread_t>>,
    ticker: Mutex<Option<JoinHandle<()>>>,
    stop: Arc<AtomicBool>,
    /// Bumped by every [`Throttle::wake_all`]; a sleeping vCPU wakes when
    /// it changes.
    wakes: AtomicU64,
    nap_lock: Mutex<()>,
    nap_cv: Condvar,
}

impl Throttle {
    pub(crate) fn new(vcpus: u32) -> Throttle {
        Throttle {
            percent: (0..vcpus).map(|_| AtomicU32::new(0)).collect(),
            threads: Mutex::new(Vec::new()),
            ticker: Mutex::new(None),
            stop: Arc::new(AtomicBool::new(false)),
            wakes: AtomicU64::new(0),
            nap_lock: Mutex::new(()),
            nap_cv: Condvar::new(),
        }
    }

    /// Records vCPU `i`'s thread (called by `Guest::start`, in order).
    pub(crate) fn add_thread(&self, t: libc::pthread_t) {
        self.threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(t);
    }

    /// vCPU `i`'s throttle in percent (0 when out of range).
    pub(crate) fn get(&self, i: u32) -> u32 {
        self.percent
            .get(i as usize)
            .map_or(0, |p| p.load(Ordering::Relaxed))
    }

    /// Every vCPU's throttle.
    pub(crate) fn all(&self) -> Vec<u32> {
        self.percent
            .iter()
            .map(|p| p.load(Ordering::Relaxed))
            .collect()
    }

    /// How long vCPU `i`, kicked after running `ran`, stays out of the
    /// guest: `ran * p / (100 - p)`, with `ran` counted as at most two
    /// periods (a vCPU unthrottled until now was not kicked before).
    pub(crate) fn nap_for(&self, i: u32, ran: Duration) -> Duration {
        let p = self.get(i).min(MAX_PERCENT);
        ran.min(PERIOD * 2) * p / (100 - p)
    }

    /// Keeps vCPU `i` out of the guest for [`Throttle::nap_for`], or until a
    /// [`Throttle::wake_all`] or its throttle drops to 0.
    pub(crate) fn nap(&self, i: u32, ran: Duration) {
        let d = self.nap_for(i, ran);
        if d.is_zero() {
            return;
        }
        let end = Instant::now() + d;
        let gen = self.wakes.load(Ordering::Acquire);
        let mut g = self.nap_lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let now = Instant::now();
            if now >= end || self.wakes.load(Ordering::Acquire) != gen || self.get(i) == 0 {
                return;
            }
            g = self
                .nap_cv
                .wait_timeout(g, end - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Wakes every sleeping vCPU (a pause, a release, a stop).
    pub(crate) fn wake_all(&self) {
        let _g = self.nap_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.wakes.fetch_add(1, Ordering::AcqRel);
        self.nap_cv.notify_all();
    }

    /// Sets vCPU `i`'s throttle (clamped to [`MAX_PERCENT`]); starts the
    /// kicking thread the first time one is non-zero. `self_arc` is the
    /// throttle itself, shared with that thread. Returns false when the kick
    /// signal's handler could not be installed (nothing is throttled then).
    pub(crate) fn set(self_arc: &Arc<Throttle>, i: u32, percent: u32) -> bool {
        let Some(p) = self_arc.percent.get(i as usize) else {
            return true;
        };
        if percent > 0 {
            install_handler();
            if !HANDLER_OK.load(Ordering::Acquire) {
                return false;
            }
        }
        p.store(percent.min(MAX_PERCENT), Ordering::Relaxed);
        if percent > 0 {
            let mut t = self_arc.ticker.lock().unwrap_or_else(|e| e.into_inner());
            if t.is_none() && !self_arc.stop.load(Ordering::Acquire) {
                let me = Arc::clone(self_arc);
                *t = std::thread::Builder::new()
                    .name("vcpu-throttle".into())
                    .spawn(move || me.tick())
                    .ok();
            }
        }
        true
    }

    /// The kicking thread: once per period, kicks every throttled vCPU.
    fn tick(&self) {
        while !self.stop.load(Ordering::Acquire) {
            std::thread::sleep(PERIOD);
            let threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
            for (i, t) in threads.iter().enumerate() {
                if self.get(i as u32) > 0 && !self.stop.load(Ordering::Acquire) {
                    // SAFETY: `t` is a vCPU thread of this guest, not yet
                    // joined: `Guest` stops and joins this thread (`halt`)
                    // before it joins any vCPU thread, and checks `stop`
                    // under the same order. The signal has a handler.
                    unsafe { libc::pthread_kill(*t, kick_signal()) };
                }
            }
        }
    }

    /// Stops and joins the kicking thread (before the vCPU threads are
    /// joined), and zeroes every throttle.
    pub(crate) fn halt(&self) {
        self.stop.store(true, Ordering::Release);
        let t = self.ticker.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = t {
            let _ = t.join();
        }
        self.release();
    }

    /// Zeroes every throttle (the kicking thread idles) and wakes the
    /// sleeping vCPUs.
    pub(crate) fn release(&self) {
        for p in &self.percent {
            p.store(0, Ordering::Relaxed);
        }
        self.wake_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(p: u32) -> Throttle {
        let t = Throttle::new(1);
        t.percent[0].store(p, Ordering::Relaxed);
        t
    }

    #[test]
    fn a_vcpu_sleeps_its_share_of_what_it_ran() {
        let ms = Duration::from_millis;
        assert_eq!(with(0).nap_for(0, ms(5)), Duration::ZERO);
        assert_eq!(with(50).nap_for(0, ms(5)), ms(5));
        assert_eq!(with(90).nap_for(0, ms(10)), ms(90));
        assert_eq!(with(99).nap_for(0, ms(10)), ms(990));
        // A vCPU kicked for the first time after running freely for a
        // second counts two periods, not the second.
        assert_eq!(with(50).nap_for(0, ms(1000)), ms(20));
        // No such vCPU: not throttled.
        assert_eq!(with(50).nap_for(3, ms(5)), Duration::ZERO);
    }

    #[test]
    fn a_wake_ends_a_nap_at_once() {
        let t = Arc::new(with(99));
        let t2 = Arc::clone(&t);
        let start = Instant::now();
        let h = std::thread::spawn(move || t2.nap(0, Duration::from_millis(20)));
        std::thread::sleep(Duration::from_millis(50));
        t.wake_all();
        h.join().unwrap();
        // The nap was 1.98 s; the wake came after 50 ms.
        assert!(start.elapsed() < Duration::from_millis(1900));
    }
}
