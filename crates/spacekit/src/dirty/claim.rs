//! Chunks of a log claimed from both ends: how the one-pass parallel table
//! build shares its work without waiting for a thread that starts late.
//!
//! The calling thread takes chunks from the front and scans them straight
//! into the table; the pool's other threads take chunks from the back,
//! each into a buffer of its own that is copied in after. A second thread
//! that starts late (idle cores are slow to wake in a virtual machine: a
//! parked worker of a 2-vCPU guest took up to several milliseconds) or
//! never (busy with other work) takes fewer chunks or none, and the
//! calling thread does the rest with no copy, instead of scanning a fixed
//! half and then waiting for, or doing, the other.
//!
//! The state is one atomic word, the unclaimed chunks `lo..hi` packed as
//! `lo << 32 | hi`: a claim is one compare-and-swap that moves one end, so
//! every chunk goes to exactly one claimer, the front's claims are
//! `0..lo` and the back's `lo..chunks` when none is left.
//! `tests/loom_dirty.rs` model-checks it (under `--cfg loom` the atomic is
//! loom's).

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
}
