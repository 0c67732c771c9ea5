//! The shared state of a multi-connection receiver
//! (`spacekit::migration::session::Session`, one mutex and one condition
//! variable) model-checked with loom: under `--cfg loom` the session's
//! `Mutex` and `Condvar` are loom's, so every model below runs the
//! library's own `claim`, `begin_request`, `end_request`, `close_memory`
//! and `end` over every interleaving.
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p spacekit --release --test migration_loom
//! ```
//!
//! What is proved:
//!
//! * two connections whose spans overlap never hold them at once (the
//!   bytes they write are a loom `UnsafeCell`, whose race detector would
//!   fail the model), and disjoint spans do not wait for each other;
//! * `State`'s close of memory and a request starting on an extra
//!   connection: either the request starts first and the close fails
//!   while it is in progress (or sees its memory counted once it ended),
//!   or the close wins and the request is refused — never a close that
//!   succeeds with a request in progress or uncounted;
//! * a connection waiting for a span is woken by the end of the migration
//!   (no hang), and a failure is seen by the close.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;
use spacekit::migration::session::{MemoryTotals, Session};
use spacekit::migration::{Extensions, MigrationError};

#[test]
fn overlapping_spans_take_turns() {
    loom::model(|| {
        let s = Arc::new(Session::new());
        let cell = Arc::new(UnsafeCell::new(0u32));
        let spans = [(0u64, 8u64), (4, 12)];
        let hs: Vec<_> = spans
            .into_iter()
            .map(|(a, b)| {
                let (s, cell) = (s.clone(), cell.clone());
                thread::spawn(move || {
                    let _c = s.claim(a, b).unwrap();
                    // SAFETY: loom checks that no other access overlaps.
                    cell.with_mut(|p| unsafe { *p += 1 });
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        // SAFETY: both threads joined.
        assert_eq!(cell.with(|p| unsafe { *p }), 2);
    });
}

#[test]
fn disjoint_spans_hold_together() {
    loom::model(|| {
        let s = Arc::new(Session::new());
        let a = s.claim(0, 8).unwrap();
        let s2 = s.clone();
        // Would deadlock (loom reports it) if a disjoint span waited.
        let h = thread::spawn(move || drop(s2.claim(8, 16).unwrap()));
        h.join().unwrap();
        drop(a);
    });
}

#[test]
fn close_of_memory_against_a_starting_request() {
    loom::model(|| {
        let s = Arc::new(Session::new());
        s.open_memory(Extensions::ZERO_PAGES);
        let s2 = s.clone();
        let worker = thread::spawn(move || match s2.begin_request() {
            Ok(ext) => {
                assert_eq!(ext, Extensions::ZERO_PAGES);
                let t = MemoryTotals {
                    requests: 1,
                    ranges: 1,
                    bytes: 4096,
                    zero_bytes: 0,
                };
                s2.end_request(Some(&t));
                true
            }
            Err(e) => {
                assert_eq!(e, MigrationError::MemoryClosed);
                false
            }
        });
        let closed = s.close_memory();
        let at_close = s.totals();
        let started = worker.join().unwrap();
        match closed {
            Ok(()) => assert!(
                !started || at_close.requests == 1,
                "closed with a request in progress or uncounted"
            ),
            Err(e) => {
                assert_eq!(e, MigrationError::MemoryInFlight { requests: 1 });
                assert!(started);
            }
        }
    });
}

#[test]
fn the_end_wakes_a_waiting_claim() {
    loom::model(|| {
        let s = Arc::new(Session::new());
        let held = s.claim(0, 8).unwrap();
        let s2 = s.clone();
        let waiter = thread::spawn(move || s2.claim(4, 6).map(drop));
        s.end();
        let r = waiter.join().unwrap();
        assert_eq!(r, Err(MigrationError::Stopped));
        drop(held);
    });
}

#[test]
fn a_failure_fails_the_close() {
    loom::model(|| {
        let s = Arc::new(Session::new());
        s.open_memory(Extensions::NONE);
        let s2 = s.clone();
        let h = thread::spawn(move || s2.fail(1, MigrationError::Stopped));
        let closed = s.close_memory();
        h.join().unwrap();
        if let Err(e) = closed {
            assert!(matches!(e, MigrationError::Connection { index: 1, .. }));
        }
        assert!(s.failure().is_some());
        assert!(s.close_memory().is_err());
    });
}
