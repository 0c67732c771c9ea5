//! How the one-pass parallel table build shares its work without waiting
//! for a thread that starts late: chunks of the log claimed from both
//! ends ([`Claims`]), and help offered to the pool's threads that the
//! caller withdraws if no thread has taken it by the time it is done
//! ([`Offer`], `with_helpers`).
//!
//! The calling thread takes chunks from the front and scans them straight
//! into the table; the pool's other threads take chunks from the back,
//! each into a buffer of its own that is copied in after. A second thread
//! that starts late (idle cores are slow to wake in a virtual machine: a
//! parked worker of a 2-vCPU guest took up to several milliseconds) or
//! never (busy with other work) takes fewer chunks or none, and the
//! calling thread does the rest with no copy, instead of scanning a fixed
//! half and then waiting for, or doing, the other. Nor does the calling
//! thread wait for a pool thread to start before it begins: it scans from
//! its first instruction, and the helpers it offered work to join when
//! they can (a call from outside rayon's pool would otherwise wait for a
//! parked worker to wake just to start the join).
//!
//! [`Claims`] is one atomic word, the unclaimed chunks `lo..hi` packed as
//! `lo << 32 | hi`: a claim is one compare-and-swap that moves one end, so
//! every chunk goes to exactly one claimer, the front's claims are
//! `0..lo` and the back's `lo..chunks` when none is left. [`Offer`] is one
//! atomic word too: open, taken, done or withdrawn, so a helper either
//! takes the offer before the caller withdraws it (and the caller waits
//! until it is done) or never touches the caller's data.
//! `tests/loom_dirty.rs` model-checks both (under `--cfg loom` the atomics
//! are loom's).

use super::sync::{AtomicU64, Ordering};

/// The unclaimed chunks of a log, claimed from either end. See the
/// [module docs](self).
#[doc(hidden)]
#[derive(Debug)]
pub struct Claims {
    /// `lo << 32 | hi`: chunks `lo..hi` are unclaimed.
    state: AtomicU64,
}

impl Claims {
    /// `chunks` unclaimed chunks, `0..chunks` (at most `u32::MAX`).
    pub fn new(chunks: usize) -> Claims {
        let hi = u32::try_from(chunks).expect("at most u32::MAX chunks");
        Claims {
            state: AtomicU64::new(u64::from(hi)),
        }
    }

    /// Claims the lowest unclaimed chunk, if any is left.
    pub fn front(&self) -> Option<usize> {
        self.claim(|lo, hi| (lo + 1, hi, lo))
    }

    /// Claims the highest unclaimed chunk, if any is left.
    pub fn back(&self) -> Option<usize> {
        self.claim(|lo, hi| (lo, hi - 1, hi - 1))
    }

    /// Chunks claimed from the front so far: once none is left, the front
    /// holds `0..taken_from_front()` and the back the rest.
    pub fn taken_from_front(&self) -> usize {
        (self.state.load(Ordering::Relaxed) >> 32) as usize
    }

    /// One claim: `step(lo, hi)` gives the new ends and the chunk claimed,
    /// for `lo < hi`.
    fn claim(&self, step: impl Fn(u32, u32) -> (u32, u32, u32)) -> Option<usize> {
        // Relaxed: the claims only need to be exclusive, which the single
        // word's modification order gives; what a claimer writes reaches
        // the joining thread through the join itself.
        let mut cur = self.state.load(Ordering::Relaxed);
        loop {
            let (lo, hi) = ((cur >> 32) as u32, cur as u32);
            if lo >= hi {
                return None;
            }
            let (lo, hi, chunk) = step(lo, hi);
            let new = (u64::from(lo) << 32) | u64::from(hi);
            match self
                .state
                .compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(chunk as usize),
                Err(seen) => cur = seen,
            }
        }
    }
}

/// An offer of work to one helper thread. See the [module docs](self).
#[doc(hidden)]
#[derive(Debug)]
pub struct Offer {
    state: AtomicU64,
}

/// The offer is open: no helper has taken it, the owner has not withdrawn.
const OPEN: u64 = 0;
/// A helper took the offer and is working.
const TAKEN: u64 = 1;
/// The helper that took the offer has finished.
const DONE: u64 = 2;
/// The owner withdrew the offer before any helper took it.
const WITHDRAWN: u64 = 3;

impl Offer {
    /// An open offer.
    pub fn new() -> Offer {
        Offer {
            state: AtomicU64::new(OPEN),
        }
    }

    /// A helper takes the offer: `true` if it was still open (the helper
    /// then works and calls [`Offer::finish`]); `false` if the owner
    /// withdrew it (the helper must not touch the owner's data).
    pub fn take(&self) -> bool {
        self.state
            .compare_exchange(OPEN, TAKEN, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// The helper that took the offer is done with the owner's data.
    pub fn finish(&self) {
        self.state.store(DONE, Ordering::Release);
    }

    /// The owner withdraws the offer: `true` if no helper had taken it
    /// (none ever will); `false` if one had, and the owner must wait for
    /// [`Offer::is_done`] before it lets its data go.
    pub fn withdraw(&self) -> bool {
        self.state
            .compare_exchange(OPEN, WITHDRAWN, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Whether the helper that took the offer has finished; its writes to
    /// the owner's data are visible to the owner once this returns `true`.
    pub fn is_done(&self) -> bool {
        self.state.load(Ordering::Acquire) == DONE
    }
}

impl Default for Offer {
    fn default() -> Offer {
        Offer::new()
    }
}

/// Runs `main` on this thread while `helpers` jobs on rayon's pool each
/// run `work` if a pool thread takes them before `main` returns; returns
/// `main`'s result once every helper that started has finished (helpers
/// that had not started are withdrawn and never call `work`). `work` must
/// be safe to run beside `main` and return once there is nothing left to
/// do, and neither `work` nor `main` may wait for the other or for rayon
/// jobs (the owner waits only for helpers already running, which is what
/// keeps this free of deadlock on any pool, one thread included). A panic
/// in a helper is raised again here, once every helper has settled.
pub(crate) fn with_helpers<R>(
    helpers: usize,
    work: &(dyn Fn() + Sync),
    main: impl FnOnce() -> R,
) -> R {
    use alloc::boxed::Box;
    use alloc::sync::Arc;
    use alloc::vec::Vec;
    use std::sync::Mutex;

    type Panic = Box<dyn core::any::Any + Send>;
    /// One helper's offer, and the panic its `work` raised, if any.
    struct Shared {
        offer: Offer,
        panic: Mutex<Option<Panic>>,
    }
    /// `work` with its lifetime erased, for a `'static` job.
    struct Work(*const (dyn Fn() + Sync + 'static));
    // SAFETY: `work` is `Sync`, so calling it from another thread is
    // sound; the pointer is only dereferenced by a helper that took its
    // offer, and the owner does not return (so `work` stays alive) until
    // that helper has finished.
    unsafe impl Send for Work {}
    /// Withdraws every offer or waits for its helper, also when `main`
    /// unwinds, so that no helper outlives `work`.
    struct Settle(Vec<Arc<Shared>>);
    impl Drop for Settle {
        fn drop(&mut self) {
            // Every offer withdrawn first, so that no helper takes one
            // while the owner waits for another.
            let taken: Vec<&Arc<Shared>> = self.0.iter().filter(|s| !s.offer.withdraw()).collect();
            for s in taken {
                while !s.offer.is_done() {
                    std::thread::yield_now();
                }
            }
        }
    }

    // SAFETY: only the lifetime bound of the trait object changes; see
    // `Work` for why the pointer never outlives `work`.
    let ptr = unsafe {
        core::mem::transmute::<*const (dyn Fn() + Sync + '_), *const (dyn Fn() + Sync + 'static)>(
            work,
        )
    };
    // Each offer is in `settle` before its job exists, so that an unwind
    // from here on settles every job spawned.
    let mut settle = Settle(Vec::with_capacity(helpers));
    for _ in 0..helpers {
        let shared = Arc::new(Shared {
            offer: Offer::new(),
            panic: Mutex::new(None),
        });
        settle.0.push(shared.clone());
        let w = Work(ptr);
        rayon::spawn(move || {
            // The whole `Work` (which is `Send`), not its pointer field
            // alone (which is not), is what the closure captures.
            let w = w;
            if shared.offer.take() {
                // SAFETY: the offer was taken, so the owner waits for
                // `finish` before `work` can go away.
                let r =
                    std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| unsafe { (*w.0)() }));
                if let Err(p) = r {
                    *shared
                        .panic
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(p);
                }
                shared.offer.finish();
            }
        });
    }
    let r = main();
    let shared = settle.0.clone();
    // Withdraws every offer not taken, waits for every helper that took
    // one.
    drop(settle);
    for s in shared {
        let p = s
            .panic
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(p) = p {
            std::panic::resume_unwind(p);
        }
    }
    r
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_front_and_the_back_meet_without_overlap() {
        let c = Claims::new(5);
        assert_eq!(c.front(), Some(0));
        assert_eq!(c.back(), Some(4));
        assert_eq!(c.back(), Some(3));
        assert_eq!(c.front(), Some(1));
        assert_eq!(c.front(), Some(2));
        assert_eq!(c.front(), None);
        assert_eq!(c.back(), None);
        assert_eq!(c.taken_from_front(), 3);
        let none = Claims::new(0);
        assert_eq!(
            (none.front(), none.back(), none.taken_from_front()),
            (None, None, 0)
        );
    }

    /// With the pool's other thread busy until `with_helpers` returns, the
    /// offer is withdrawn, never run, and the call does not wait for it
    /// (waiting would never end: the busy thread waits for the return).
    #[test]
    fn an_offer_no_thread_takes_is_withdrawn() {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let (busy, returned, ran) = (
            AtomicBool::new(false),
            AtomicBool::new(false),
            AtomicUsize::new(0),
        );
        let r = pool.install(|| {
            rayon::join(
                || {
                    while !busy.load(Ordering::Acquire) {
                        std::hint::spin_loop();
                    }
                    let work = || {
                        ran.fetch_add(1, Ordering::Relaxed);
                    };
                    let r = with_helpers(1, &work, || 42);
                    returned.store(true, Ordering::Release);
                    r
                },
                || {
                    busy.store(true, Ordering::Release);
                    // Busy until the call returns, or 5 s: a call that
                    // waited for its offer would only return after that.
                    let t0 = std::time::Instant::now();
                    while !returned.load(Ordering::Acquire) {
                        if t0.elapsed() > std::time::Duration::from_secs(5) {
                            return true;
                        }
                        std::hint::spin_loop();
                    }
                    false
                },
            )
        });
        assert_eq!(r.0, 42);
        assert!(!r.1, "the call waited for an offer no thread could take");
        assert_eq!(ran.load(Ordering::Relaxed), 0, "a withdrawn offer ran");
    }

    /// A helper that takes its offer is waited for (its work is visible
    /// after the return), and a panic in it is raised in the caller.
    #[test]
    fn a_taken_offer_is_waited_for_and_its_panic_raised() {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for panics in [false, true] {
            let (started, count) = (AtomicBool::new(false), AtomicUsize::new(0));
            let work = || {
                started.store(true, Ordering::Release);
                std::thread::sleep(std::time::Duration::from_millis(20));
                count.fetch_add(1, Ordering::Relaxed);
                assert!(!panics, "a helper's panic");
            };
            let r = pool.install(|| {
                std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| {
                    with_helpers(1, &work, || {
                        // Only return once the helper has taken the offer.
                        while !started.load(Ordering::Acquire) {
                            std::hint::spin_loop();
                        }
                    })
                }))
            });
            assert_eq!(
                count.load(Ordering::Relaxed),
                1,
                "returned before the helper finished"
            );
            assert_eq!(
                r.is_err(),
                panics,
                "the helper's panic is raised in the caller"
            );
        }
    }
}
