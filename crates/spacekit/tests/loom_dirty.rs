//! `DirtyBitmap`'s atomics model-checked with loom.
//!
//! Under `--cfg loom` the bitmap's words are `loom::sync::atomic::AtomicU64`
//! (`src/dirty/sync.rs`), so every model below runs the library's own
//! `mark`, `reset_range`, `harvest_into`, `take` and `is_dirty` over every
//! interleaving (and every value a relaxed load may return). The models are
//! small enough to search exhaustively, without a preemption bound (about
//! 72,500 executions, ~10 s in release; `LOOM_MAX_PREEMPTIONS=2` bounds
//! them for a quicker run). Run with (a target directory of its own, as
//! `--cfg loom` rebuilds everything)
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p spacekit --release --test loom_dirty
//! ```
//!
//! The library needs loom as a dependency under `cfg(loom)` (not only a
//! dev-dependency): its `src/dirty/sync.rs` imports it.
//!
//! What is proved, on bitmaps of one, two and nine words (nine: one
//! 8-word chunk of the harvest's batched loads and a remainder word):
//!
//! * a mark that happens before a harvest starts is in that harvest;
//! * a mark concurrent with a harvest is in exactly one of that harvest and
//!   the next (it is never lost, never returned twice);
//! * `reset_range` clears only its own pages, and a mark made after it
//!   survives it; a mark it races with is either kept or cleared;
//! * the harvest's acquire pairs with the mark's release: data written
//!   before a mark is visible to whoever harvests (or `is_dirty`s) it,
//!   checked by loom's `UnsafeCell` race detector;
//! * the same for the one-pass harvest (`harvest_or_into_table`, which
//!   loads each word plainly and swaps only a word seen dirty, then builds
//!   the table from the words it took), whose table is always the ranges of
//!   exactly the words it took;
//! * a deliberately broken harvest (a load, then a store of 0, instead of a
//!   swap) fails the first model with a lost mark: the
//!   `broken_harvest_loses_a_mark` test expects that failure.
//!
//! * the one-pass parallel table build's chunk claims
//!   (`spacekit::dirty::claim::Claims`, one atomic word, claimed from the
//!   front by the calling thread and from the back by the others): every
//!   chunk goes to exactly one claimer (each claimer writes its chunks'
//!   loom `UnsafeCell`s, so a chunk claimed twice would be a race), the
//!   front holds a prefix and the back the rest, and both a back that took
//!   chunks and one that took none are explored;
//! * the offer of that work to a pool thread (`spacekit::dirty::claim::
//!   Offer`): a helper that takes it is waited for before the owner
//!   touches the data it wrote, and one that finds it withdrawn never
//!   touches the data (both through a loom `UnsafeCell`); both outcomes
//!   are explored.
//!
//! Every model asserts afterwards that the interleavings it is about were
//! actually explored (a harvest that saw the mark, one that did not), so no
//! model passes vacuously.
#![cfg(loom)]

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::AtomicUsize as StdAtomicUsize;
use std::sync::atomic::Ordering::Relaxed as StdRelaxed;

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;
use spacekit::dirty::{DirtyBitmap, Geometry, MemoryRangeTable};

const PAGE: u64 = 4096;

/// A harvest under test: the bitmap's words into `out`, clearing them.
type Harvest = fn(&DirtyBitmap, &mut [u64]);

/// The library's harvest.
fn harvest_into(log: &DirtyBitmap, out: &mut [u64]) {
    log.harvest_into(out).unwrap();
}

/// The library's one-pass harvest (`harvest_or_into_table`, with a clean
/// KVM log), its taken words written back densely; the table it builds
/// must be the ranges of exactly those words.
fn one_pass(log: &DirtyBitmap, out: &mut [u64]) {
    let kvm = vec![0u64; log.words()];
    let mut table = MemoryRangeTable::new();
    let mut taken = Vec::new();
    let counts = log
        .harvest_or_into_table(&kvm, log.geometry(), &mut table, Some(&mut taken))
        .unwrap();
    out.fill(0);
    for &(i, w) in &taken {
        out[i] = w;
    }
    assert_eq!(counts.words, taken.len());
    let want: Vec<_> = log.geometry().ranges(out).unwrap().collect();
    assert_eq!(
        table.ranges(),
        want,
        "the table is not the taken words' ranges"
    );
}

/// The library's harvest, through `take`.
fn take(log: &DirtyBitmap, out: &mut [u64]) {
    out.copy_from_slice(&log.take());
}

/// The deliberately broken harvest: each word read, then zeroed by a
/// separate store. A mark landing between the two is wiped without ever
/// being returned. (Acquire and release, so that the only bug is the
/// missing read-modify-write.)
fn broken_harvest(log: &DirtyBitmap, out: &mut [u64]) {
    for (o, w) in out.iter_mut().zip(log.loom_words()) {
        let v = w.load(Ordering::Acquire);
        if v != 0 {
            w.store(0, Ordering::Release);
        }
        *o = v;
    }
}

/// A clean log of `words` 64-page words at address 0.
fn log_of(words: u64) -> Arc<DirtyBitmap> {
    let geometry = Geometry::new(0, PAGE).unwrap();
    Arc::new(DirtyBitmap::new(geometry, words * 64 * PAGE).unwrap())
}

fn mark(log: &DirtyBitmap, first: u64, pages: u64) {
    log.mark(first * PAGE, pages * PAGE).unwrap();
}

fn has(words: &[u64], page: u64) -> bool {
    words[(page / 64) as usize] >> (page % 64) & 1 == 1
}

fn harvested(log: &DirtyBitmap, harvest: Harvest) -> Vec<u64> {
    let mut out = vec![0u64; log.words()];
    harvest(log, &mut out);
    out
}

/// Page `page`, marked once, is in exactly one of two harvests.
fn exactly_once(page: u64, h1: &[u64], h2: &[u64]) {
    not_lost(page, h1, h2);
    not_twice(page, h1, h2, None);
}

/// Page `page`, marked, is in at least one of two harvests.
fn not_lost(page: u64, h1: &[u64], h2: &[u64]) {
    assert!(
        has(h1, page) || has(h2, page),
        "lost mark: page {page} was marked but is in neither harvest \
         (first {h1:x?}, second {h2:x?})"
    );
}

/// Page `page`, marked once, is not in both harvests: a panic, or with
/// `count` a count (see `broken_harvest_loses_a_mark`).
fn not_twice(page: u64, h1: &[u64], h2: &[u64], count: Option<&StdAtomicUsize>) {
    if has(h1, page) && has(h2, page) {
        match count {
            Some(c) => {
                c.fetch_add(1, StdRelaxed);
            }
            None => panic!(
                "page {page} marked once but harvested twice \
                 (first {h1:x?}, second {h2:x?})"
            ),
        }
    }
}

/// The bitmap is clean after the final harvest (nothing left behind).
fn assert_clean(log: &DirtyBitmap) {
    assert!(
        log.take().iter().all(|&w| w == 0),
        "marks left behind after the final harvest"
    );
}

/// Counts of the interleavings a model went through, to show it is not
/// vacuous.
struct Seen {
    executions: StdAtomicUsize,
    /// The harvest started after the first mark was published.
    after_publish: StdAtomicUsize,
    /// The concurrent mark came too late for the first harvest.
    deferred: StdAtomicUsize,
    /// The concurrent mark made it into the first harvest.
    caught: StdAtomicUsize,
}

impl Seen {
    fn report(&self, what: &str) {
        let (e, p, d, c) = (
            self.executions.load(StdRelaxed),
            self.after_publish.load(StdRelaxed),
            self.deferred.load(StdRelaxed),
            self.caught.load(StdRelaxed),
        );
        println!(
            "{what}: {e} executions; harvest after publish {p}, \
             concurrent mark deferred {d}, caught {c}"
        );
        assert!(
            p > 0 && p < e && d > 0 && c > 0,
            "{what}: the model did not explore both sides of the race"
        );
    }
}

/// One marker thread against the harvesting main thread, on a one-word
/// log: page 1 is marked and then published through a flag, page 2 is
/// marked after. A harvest that saw the flag must hold page 1; each page is
/// in exactly one of the harvest and the next one, after the join.
///
/// `twice`: count a page harvested twice instead of panicking (only
/// `broken_harvest_loses_a_mark` does; see there why).
fn mark_vs_harvest(harvest: Harvest, seen: &'static Seen, twice: Option<&StdAtomicUsize>) {
    let log = log_of(1);
    let published = Arc::new(AtomicBool::new(false));
    let marker = {
        let (log, published) = (log.clone(), published.clone());
        thread::spawn(move || {
            mark(&log, 1, 1);
            published.store(true, Ordering::Release);
            mark(&log, 2, 1);
        })
    };
    let before = published.load(Ordering::Acquire);
    let h1 = harvested(&log, harvest);
    if before {
        assert!(
            has(&h1, 1),
            "lost mark: page 1 was marked before the harvest started but is not in it"
        );
    }
    marker.join().unwrap();
    let h2 = harvested(&log, harvest);
    not_lost(1, &h1, &h2);
    not_lost(2, &h1, &h2);
    not_twice(1, &h1, &h2, twice);
    not_twice(2, &h1, &h2, twice);
    assert_clean(&log);
    seen.executions.fetch_add(1, StdRelaxed);
    seen.after_publish
        .fetch_add(usize::from(before), StdRelaxed);
    let counter = if has(&h1, 2) {
        &seen.caught
    } else {
        &seen.deferred
    };
    counter.fetch_add(1, StdRelaxed);
}

#[test]
fn mark_before_harvest_is_never_lost() {
    static SEEN: Seen = Seen::new();
    loom::model(|| mark_vs_harvest(harvest_into, &SEEN, None));
    SEEN.report("harvest_into");
}

#[test]
fn mark_before_one_pass_harvest_is_never_lost() {
    static SEEN: Seen = Seen::new();
    loom::model(|| mark_vs_harvest(one_pass, &SEEN, None));
    SEEN.report("one-pass harvest");
}

#[test]
fn mark_before_take_is_never_lost() {
    static SEEN: Seen = Seen::new();
    loom::model(|| mark_vs_harvest(take, &SEEN, None));
    SEEN.report("take");
}

/// The broken harvest fails the same model, with a lost mark; the
/// library's harvest, run through the very same call, passes it (so the
/// check is not vacuous: it is the harvest that decides).
///
/// Run with page-harvested-twice failures counted rather than fatal: loom
/// orders a plain store only partially against a concurrent
/// read-modify-write, so for the broken harvest it also reports an
/// execution where the marker's second `fetch_or` reads past the
/// harvest's `store(0)` and the first page comes back in the next harvest,
/// which no real (totally ordered) modification order allows, and loom
/// stops at the first failure. The real failure, which this test
/// requires, is the lost mark: the marker's `fetch_or` lands between the
/// harvest's load and its store, and the store wipes it.
#[test]
fn broken_harvest_loses_a_mark() {
    static BROKEN: Seen = Seen::new();
    static BROKEN_TWICE: StdAtomicUsize = StdAtomicUsize::new(0);
    static GOOD: Seen = Seen::new();
    static GOOD_TWICE: StdAtomicUsize = StdAtomicUsize::new(0);
    let run = |harvest: Harvest, seen: &'static Seen, twice: &'static StdAtomicUsize| {
        panic::catch_unwind(AssertUnwindSafe(|| {
            loom::model(move || mark_vs_harvest(harvest, seen, Some(twice)));
        }))
    };
    let err = run(broken_harvest, &BROKEN, &BROKEN_TWICE)
        .expect_err("the broken harvest (load, then store 0) passed the loom model");
    let msg = err
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| err.downcast_ref::<&str>().copied())
        .unwrap_or("<not a string>");
    println!(
        "broken harvest failed as expected after {} executions \
         ({} with a page harvested twice): {msg}",
        BROKEN.executions.load(StdRelaxed),
        BROKEN_TWICE.load(StdRelaxed),
    );
    assert!(
        msg.starts_with("lost mark: "),
        "the broken harvest failed, but not with a lost mark: {msg}"
    );
    assert!(
        run(harvest_into, &GOOD, &GOOD_TWICE).is_ok(),
        "the library's harvest failed the model the broken one is checked by"
    );
    assert_eq!(
        GOOD_TWICE.load(StdRelaxed),
        0,
        "library harvest: a page twice"
    );
    GOOD.report("harvest_into, as the broken harvest's control");
}

/// Three threads on a two-word log: one marks pages 63..=64 (one `mark`
/// across the word boundary, two `fetch_or`s) and publishes it, another
/// marks page 5 then page 70; the main thread harvests concurrently, joins,
/// harvests again.
#[test]
fn three_threads_two_words() {
    three_threads_two_words_with(harvest_into, "three threads, two words");
}

#[test]
fn three_threads_two_words_one_pass() {
    three_threads_two_words_with(one_pass, "one-pass harvest: three threads, two words");
}

fn three_threads_two_words_with(harvest: Harvest, what: &'static str) {
    static SEEN_H: Seen = Seen::new();
    static SEEN_O: Seen = Seen::new();
    let seen: &'static Seen = if what.starts_with("one-pass") {
        &SEEN_O
    } else {
        &SEEN_H
    };
    loom::model(move || {
        let log = log_of(2);
        let published = Arc::new(AtomicBool::new(false));
        let a = {
            let (log, published) = (log.clone(), published.clone());
            thread::spawn(move || {
                mark(&log, 63, 2);
                published.store(true, Ordering::Release);
            })
        };
        let b = {
            let log = log.clone();
            thread::spawn(move || {
                mark(&log, 5, 1);
                mark(&log, 70, 1);
            })
        };
        let before = published.load(Ordering::Acquire);
        let h1 = harvested(&log, harvest);
        if before {
            assert!(
                has(&h1, 63) && has(&h1, 64),
                "lost mark: pages 63..=64 were marked before the harvest started \
                 but are not in it ({h1:#x?})"
            );
        }
        a.join().unwrap();
        b.join().unwrap();
        let h2 = harvested(&log, harvest);
        for p in [5, 63, 64, 70] {
            exactly_once(p, &h1, &h2);
        }
        assert_clean(&log);
        seen.executions.fetch_add(1, StdRelaxed);
        seen.after_publish
            .fetch_add(usize::from(before), StdRelaxed);
        let counter = if has(&h1, 70) {
            &seen.caught
        } else {
            &seen.deferred
        };
        counter.fetch_add(1, StdRelaxed);
    });
    seen.report(what);
}

/// Nine words: the harvest checks words 0..8 with one batch of relaxed
/// loads (skipping the batch when all are zero) and word 8 alone. The
/// marker marks page 449 (word 7, inside the batch), publishes, then marks
/// page 515 (word 8).
#[test]
fn batched_loads_nine_words() {
    static SEEN: Seen = Seen::new();
    nine_words(harvest_into, &SEEN, "nine words");
}

/// The one-pass harvest on the same nine words (one batch of its 64-word
/// test, shorter than a batch).
#[test]
fn one_pass_nine_words() {
    static SEEN: Seen = Seen::new();
    nine_words(one_pass, &SEEN, "one-pass harvest: nine words");
}

fn nine_words(harvest: Harvest, seen: &'static Seen, what: &str) {
    loom::model(move || {
        let log = log_of(9);
        let published = Arc::new(AtomicBool::new(false));
        let marker = {
            let (log, published) = (log.clone(), published.clone());
            thread::spawn(move || {
                mark(&log, 449, 1);
                published.store(true, Ordering::Release);
                mark(&log, 515, 1);
            })
        };
        let before = published.load(Ordering::Acquire);
        let h1 = harvested(&log, harvest);
        if before {
            assert!(
                has(&h1, 449),
                "lost mark: page 449 was marked before the harvest started but is not in it"
            );
        }
        marker.join().unwrap();
        let h2 = harvested(&log, harvest);
        exactly_once(449, &h1, &h2);
        exactly_once(515, &h1, &h2);
        assert_clean(&log);
        seen.executions.fetch_add(1, StdRelaxed);
        seen.after_publish
            .fetch_add(usize::from(before), StdRelaxed);
        let counter = if has(&h1, 515) {
            &seen.caught
        } else {
            &seen.deferred
        };
        counter.fetch_add(1, StdRelaxed);
    });
    seen.report(what);
}

/// `reset_range` against marks and a harvest, on one word. Before the
/// threads start, pages 3 and 4 are marked. Thread R resets page 3 and
/// publishes that it did; thread M marks page 2 and, if it saw the reset,
/// marks page 3 again; the main thread harvests concurrently, joins,
/// harvests again.
///
/// Documented semantics checked: the reset never clears another page of
/// its word (4 and 2 are each harvested exactly once); a mark made after
/// the reset survives it (page 3 is harvested at least once then); the
/// reset discards page 3's earlier mark unless a harvest took it first (at
/// most once without the new mark).
#[test]
fn reset_range_clears_only_its_pages() {
    static EXECUTIONS: StdAtomicUsize = StdAtomicUsize::new(0);
    static REMARKED: StdAtomicUsize = StdAtomicUsize::new(0);
    static DISCARDED: StdAtomicUsize = StdAtomicUsize::new(0);
    loom::model(|| {
        let log = log_of(1);
        mark(&log, 3, 1);
        mark(&log, 4, 1);
        let reset = Arc::new(AtomicBool::new(false));
        let r = {
            let (log, reset) = (log.clone(), reset.clone());
            thread::spawn(move || {
                log.reset_range(3 * PAGE, PAGE).unwrap();
                reset.store(true, Ordering::Release);
            })
        };
        let m = {
            let (log, reset) = (log.clone(), reset.clone());
            thread::spawn(move || {
                mark(&log, 2, 1);
                let after = reset.load(Ordering::Acquire);
                if after {
                    mark(&log, 3, 1);
                }
                after
            })
        };
        let h1 = harvested(&log, take);
        r.join().unwrap();
        let remarked = m.join().unwrap();
        let h2 = harvested(&log, take);
        exactly_once(4, &h1, &h2);
        exactly_once(2, &h1, &h2);
        let threes = usize::from(has(&h1, 3)) + usize::from(has(&h2, 3));
        if remarked {
            assert!(
                threes >= 1,
                "lost mark: page 3 was marked after the reset but is in neither harvest"
            );
        } else {
            assert!(threes <= 1, "page 3 harvested twice without a new mark");
        }
        assert_clean(&log);
        EXECUTIONS.fetch_add(1, StdRelaxed);
        REMARKED.fetch_add(usize::from(remarked), StdRelaxed);
        DISCARDED.fetch_add(usize::from(threes == 0), StdRelaxed);
    });
    let (e, r, d) = (
        EXECUTIONS.load(StdRelaxed),
        REMARKED.load(StdRelaxed),
        DISCARDED.load(StdRelaxed),
    );
    println!("reset_range: {e} executions; re-marked after the reset {r}, mark discarded {d}");
    assert!(
        r > 0 && r < e && d > 0,
        "reset_range: the model did not explore both sides"
    );
}

/// Release/acquire: a writer stores to a page (a loom `UnsafeCell`, whose
/// accesses loom checks for races) and then marks it; the main thread
/// reads the page only if `is_dirty` or a harvest says it is dirty. loom
/// reports a causality violation if a dirty bit could be seen without the
/// store it publishes.
#[test]
fn harvest_acquires_what_mark_releases() {
    static EXECUTIONS: StdAtomicUsize = StdAtomicUsize::new(0);
    static READ: StdAtomicUsize = StdAtomicUsize::new(0);
    loom::model(|| {
        let log = log_of(1);
        let page = Arc::new(UnsafeCell::new(0u64));
        let writer = {
            let (log, page) = (log.clone(), page.clone());
            thread::spawn(move || {
                // SAFETY: a loom cell; loom checks this write against every
                // read for a happens-before edge.
                page.with_mut(|p| unsafe { *p = 42 });
                mark(&log, 7, 1);
            })
        };
        let mut reads = 0;
        if log.is_dirty(7 * PAGE).unwrap() {
            // SAFETY: as above; the Acquire of `is_dirty` orders this read
            // after the write, which loom checks.
            assert_eq!(page.with(|p| unsafe { *p }), 42);
            reads += 1;
        }
        let h = harvested(&log, harvest_into);
        if has(&h, 7) {
            // SAFETY: as above, through the harvest's Acquire swap.
            assert_eq!(page.with(|p| unsafe { *p }), 42);
            reads += 1;
        }
        writer.join().unwrap();
        EXECUTIONS.fetch_add(1, StdRelaxed);
        READ.fetch_add(reads, StdRelaxed);
    });
    let (e, r) = (EXECUTIONS.load(StdRelaxed), READ.load(StdRelaxed));
    println!("publication: {e} executions, {r} reads through a dirty bit");
    assert!(r > 0, "no execution read the page through a dirty bit");
}

impl Seen {
    const fn new() -> Seen {
        Seen {
            executions: StdAtomicUsize::new(0),
            after_publish: StdAtomicUsize::new(0),
            deferred: StdAtomicUsize::new(0),
            caught: StdAtomicUsize::new(0),
        }
    }
}

/// The chunk claims of the one-pass parallel table build: a front and a
/// back claimer over three chunks, each claiming until none is left.
#[test]
fn chunk_claims_are_exclusive_and_meet() {
    use spacekit::dirty::claim::Claims;

    const CHUNKS: usize = 3;
    static EXECUTIONS: StdAtomicUsize = StdAtomicUsize::new(0);
    static BACK_TOOK_SOME: StdAtomicUsize = StdAtomicUsize::new(0);
    static BACK_TOOK_NONE: StdAtomicUsize = StdAtomicUsize::new(0);
    loom::model(|| {
        let claims = Arc::new(Claims::new(CHUNKS));
        let cells: Arc<Vec<UnsafeCell<u32>>> =
            Arc::new((0..CHUNKS).map(|_| UnsafeCell::new(0)).collect());
        let back = {
            let (claims, cells) = (claims.clone(), cells.clone());
            thread::spawn(move || {
                let mut took = Vec::new();
                while let Some(c) = claims.back() {
                    // SAFETY: the claim makes this thread the chunk's only
                    // writer; loom's race detector checks exactly that.
                    cells[c].with_mut(|p| unsafe { *p += 1 });
                    took.push(c);
                }
                took
            })
        };
        let mut front = Vec::new();
        while let Some(c) = claims.front() {
            // SAFETY: as above.
            cells[c].with_mut(|p| unsafe { *p += 1 });
            front.push(c);
        }
        let back = back.join().unwrap();
        let lo = claims.taken_from_front();
        assert_eq!(
            front,
            (0..lo).collect::<Vec<_>>(),
            "the front holds a prefix"
        );
        assert_eq!(
            back,
            (lo..CHUNKS).rev().collect::<Vec<_>>(),
            "the back the rest"
        );
        for cell in cells.iter() {
            // SAFETY: both claimers have finished (joined above).
            assert_eq!(cell.with(|p| unsafe { *p }), 1, "each chunk claimed once");
        }
        EXECUTIONS.fetch_add(1, StdRelaxed);
        if back.is_empty() {
            BACK_TOOK_NONE.fetch_add(1, StdRelaxed);
        } else {
            BACK_TOOK_SOME.fetch_add(1, StdRelaxed);
        }
    });
    let (e, some, none) = (
        EXECUTIONS.load(StdRelaxed),
        BACK_TOOK_SOME.load(StdRelaxed),
        BACK_TOOK_NONE.load(StdRelaxed),
    );
    println!("chunk claims: {e} executions, the back took chunks in {some}, none in {none}");
    assert!(
        some > 0 && none > 0,
        "both a busy and an idle back explored"
    );
}

/// An offer of work and its helper: the helper writes the owner's data
/// only after taking the offer; the owner withdraws it, or waits for the
/// helper to finish, before it reads and writes the data itself.
#[test]
fn an_offer_is_withdrawn_or_waited_for() {
    use spacekit::dirty::claim::Offer;

    static EXECUTIONS: StdAtomicUsize = StdAtomicUsize::new(0);
    static TAKEN: StdAtomicUsize = StdAtomicUsize::new(0);
    static WITHDRAWN: StdAtomicUsize = StdAtomicUsize::new(0);
    loom::model(|| {
        let offer = Arc::new(Offer::new());
        let data = Arc::new(UnsafeCell::new(0u32));
        let helper = {
            let (offer, data) = (offer.clone(), data.clone());
            thread::spawn(move || {
                if offer.take() {
                    // SAFETY: the offer is taken: the owner does not touch
                    // the data until `finish`; loom checks exactly that.
                    data.with_mut(|p| unsafe { *p += 1 });
                    offer.finish();
                }
            })
        };
        let withdrawn = offer.withdraw();
        if !withdrawn {
            while !offer.is_done() {
                thread::yield_now();
            }
        }
        // SAFETY: withdrawn (the helper never touches the data) or done
        // (the helper is finished with it); loom checks both.
        let seen = data.with_mut(|p| unsafe {
            let v = *p;
            *p = 10;
            v
        });
        assert_eq!(
            seen,
            u32::from(!withdrawn),
            "the helper's write is seen iff it took the offer"
        );
        helper.join().unwrap();
        EXECUTIONS.fetch_add(1, StdRelaxed);
        if withdrawn {
            WITHDRAWN.fetch_add(1, StdRelaxed);
        } else {
            TAKEN.fetch_add(1, StdRelaxed);
        }
    });
    let (e, t, w) = (
        EXECUTIONS.load(StdRelaxed),
        TAKEN.load(StdRelaxed),
        WITHDRAWN.load(StdRelaxed),
    );
    println!("offer: {e} executions, taken in {t}, withdrawn in {w}");
    assert!(
        t > 0 && w > 0,
        "both a taken and a withdrawn offer explored"
    );
}
