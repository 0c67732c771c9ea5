//! The one-pass harvest: a VMM's atomic log taken (each dirty word swapped
//! to zero), ORed with a hypervisor's log (KVM's) and turned into ranges,
//! all in one pass over the words.
//!
//! The two-step way reads every word of the VMM log to take it
//! ([`DirtyBitmap::harvest_into`](super::DirtyBitmap::harvest_into)),
//! writes the taken words to a buffer, then reads that buffer and KVM's log
//! again to build the table ([`Scan::or`](super::Scan::or)). Here each batch
//! of 64 words (eight cache lines of each log) is:
//!
//! 0. tested: the log's words with plain (`Relaxed`) loads ORed together,
//!    KVM's nonzero words found a vector at a time
//!    ([`generic::nonzero_words`]); a batch where both
//!    are zero and no run is open is skipped, nothing written (not even the
//!    log's lines, which stay clean in the cache);
//! 1. taken: when the plain loads saw any dirty word, each log word seen
//!    dirty is swapped to zero (`swap(0, Acquire)`) into a batch-sized
//!    buffer that is otherwise zero;
//! 2. emitted: each nonzero word of the OR (and a clean word after one
//!    whose top bit is set, where a run ends) writes its run starts and
//!    ends straight into the table (`generic::emit_edges`, as the table
//!    builder does) and adds its KVM word's pages to the count; the batch's
//!    complete ranges become addresses while in cache. In a migration
//!    round most words are clean, so the per-word work is on the few dirty
//!    ones; a batch where nearly every word is dirty is ORed a vector at a
//!    time and emitted as the table builder's dense batches are
//!    (`scan::emit_batch`).
//!
//! # Why a load before the swap loses nothing
//!
//! A word whose plain load reads 0 is not swapped. A `mark` is a
//! `fetch_or` on the word; it is either before the load in the word's
//! modification order (then the load reads it, as every later value
//! includes its bits: only a harvest's swap or `reset_range` clears them,
//! and this harvest is the only one running) and the word is swapped, or
//! after it, and then its bits stay in the word, untouched by this
//! harvest, for the next one. The swap itself is one read-modify-write, so
//! a mark is either in the value it returns (taken now) or after it in the
//! word (taken next time): never in between, never lost. A word read
//! nonzero may hold more bits by the time of its swap (marks that came in
//! between): they are taken now. `tests/loom_dirty.rs` checks this over
//! every interleaving, including a deliberately broken harvest that stores
//! 0 after the load instead of swapping.

use alloc::vec::Vec;

use crate::arch::{self, Job, Level, Vector};

use super::arch::generic;
use super::memory_range::{range_of, MemoryRange};
use super::scan::{emit_batch, emit_sparse, finish, One, BATCH, BATCH_ROOM};
use super::sync::{AtomicU64, Ordering};

/// How many batches ahead of the one being taken the log's lines are
/// prefetched ([`arch::prefetch`], at every level). Until the prefetch was
/// level-independent only the AVX2 build asked (the AVX-512 and scalar
/// ones did nothing); on an Intel Xeon with AVX-512, a 0.1% log of 32 MiB
/// harvested from memory then took 14.3-20.6 ms against 16.0-22.8 ms, in
/// alternating runs on a contended host.
const PREFETCH_BATCHES: usize = 4;

/// What a one-pass harvest
/// ([`DirtyBitmap::harvest_or_into_table`](super::DirtyBitmap::harvest_or_into_table))
/// took from the log and counted in the other bitmap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HarvestCounts {
    /// Words of the log taken (seen dirty and swapped to zero).
    pub words: usize,
    /// Pages the log had: the set bits of the words taken.
    pub pages: u64,
    /// Pages of the other bitmap (KVM's): its set bits.
    pub other_pages: u64,
}

/// The one-pass harvest of `words` ORed with `other` (of the same length,
/// which the caller checked) into `out`, at `level`; each word taken is
/// also pushed to `taken` (as `(index, word)`) when given.
pub(super) fn harvest_or(
    words: &[AtomicU64],
    other: &[u64],
    level: Level,
    out: &mut Vec<MemoryRange>,
    shift: u32,
    base: u64,
    taken: Option<&mut Vec<(usize, u64)>>,
) -> HarvestCounts {
    debug_assert_eq!(words.len(), other.len());
    arch::run(
        level,
        HarvestOr {
            words,
            other,
            out,
            shift,
            base,
            taken,
        },
    )
}

/// The job of [`harvest_or`].
struct HarvestOr<'a> {
    words: &'a [AtomicU64],
    other: &'a [u64],
    out: &'a mut Vec<MemoryRange>,
    shift: u32,
    base: u64,
    taken: Option<&'a mut Vec<(usize, u64)>>,
}

impl Job for HarvestOr<'_> {
    type Output = HarvestCounts;

    #[inline(always)]
    fn run<V: Vector>(self) -> HarvestCounts {
        let HarvestOr {
            words,
            other,
            out,
            shift,
            base,
            mut taken,
        } = self;
        let n = words.len().min(other.len());
        let mut counts = HarvestCounts::default();
        // The words taken from the log in the current batch, at their
        // place in it; zero elsewhere (and zeroed again after a batch that
        // took any).
        let mut took = [0u64; BATCH];
        // The start (a bit position) of the run still open at word `i`.
        let mut open: Option<u64> = None;
        let mut i = 0;
        while i < n {
            let m = BATCH.min(n - i);
            let (ws, os) = (&words[i..i + m], &other[i..i + m]);
            // The log comes from memory (the round's send streamed the
            // guest through the caches) and the per-batch work between its
            // reads hides the stream from the hardware prefetcher: ask for
            // its lines four batches ahead. KVM's log was just written.
            let ahead = words.as_ptr().wrapping_add(i + PREFETCH_BATCHES * BATCH);
            for line in 0..BATCH / 8 {
                arch::prefetch(ahead.wrapping_add(8 * line).cast::<u64>());
            }
            // Stage 0: a clean batch is only read.
            let seen = ws.iter().fold(0, |acc, w| acc | w.load(Ordering::Relaxed));
            let nonzero = generic::nonzero_words::<V, _>(One(os), 0, m);
            if seen == 0 && nonzero == 0 {
                if let Some(s) = open.take() {
                    // A run open into the batch ends at its first page.
                    out.push(range_of(s, i as u64 * 64, shift, base));
                }
                i += m;
                continue;
            }
            // Stage 1: take the log's dirty words. A batch without any
            // (KVM's pages only, the common case) skips this loop.
            let mut took_mask = 0u64;
            if seen != 0 {
                // Which words are dirty, without a branch per word (a
                // round's few dirty words would each mispredict one).
                let mut dirty = ws.iter().enumerate().fold(0u64, |acc, (j, w)| {
                    acc | u64::from(w.load(Ordering::Relaxed) != 0) << j
                });
                while dirty != 0 {
                    let j = dirty.trailing_zeros() as usize;
                    dirty &= dirty - 1;
                    // Swap only a word seen dirty (see the module docs):
                    // clean words are not written.
                    let v = ws[j].swap(0, Ordering::Acquire);
                    if v != 0 {
                        took[j] = v;
                        took_mask |= 1 << j;
                        counts.words += 1;
                        counts.pages += u64::from(v.count_ones());
                        if let Some(tk) = taken.as_deref_mut() {
                            tk.push((i + j, v));
                        }
                    }
                }
            }
            // The words that may have edges: the nonzero ones, and the
            // first when a run is open into the batch (the word after one
            // whose top bit is set joins them as the emission reaches it).
            let carry = u64::from(open.is_some());
            let mask = nonzero | took_mask | carry;
            // Stage 2: the marked words' starts and ends, into the table.
            out.reserve(BATCH_ROOM);
            let len = out.len();
            let p = out.spare_capacity_mut().as_mut_ptr().cast::<MemoryRange>();
            let flat = p.cast::<u64>();
            let mut k = 0usize;
            if let Some(s) = open {
                // SAFETY: `reserve` made room for `BATCH_ROOM` ranges past
                // `len`; slot 0 is the first range's `gpa`.
                unsafe { flat.write(s) };
                k = 1;
            }
            let marked = mask.count_ones() as usize;
            if marked * 8 > m * 7 {
                // Nearly every word has edges: the batch's OR a vector at a
                // time, then the table builder's own batch (edge masks, and
                // every word written without a mask loop).
                let mut or = [0u64; BATCH];
                for ((o, t), w) in or.iter_mut().zip(&took).zip(os) {
                    *o = t | w;
                }
                counts.other_pages += os.iter().map(|w| u64::from(w.count_ones())).sum::<u64>();
                let mut edges = [0u64; BATCH];
                let (marks, _) =
                    generic::marks_edges::<V, _>(One(&or[..m]), 0, m, carry, &mut edges);
                // SAFETY: the batch begins at slot `k <= 1`; its words add
                // at most 64 edges each plus the unconditional writes,
                // `2 * BATCH_ROOM - 1` slots in all, within what `reserve`
                // gave.
                unsafe { emit_batch::<V>(i, m, marks, &edges, flat, &mut k) };
            } else {
                // As the table builder: four unconditional edge writes per
                // word, eight once more than 5/8 of the words are marked.
                let word = |t: usize| took[t] | os[t];
                let mut pages = 0u64;
                let visit = |t: usize| pages += u64::from(os[t].count_ones());
                // SAFETY: as above.
                unsafe {
                    if marked * 8 > m * 5 {
                        emit_sparse::<V, 8>(i, m, mask, carry, None, word, visit, flat, &mut k)
                    } else {
                        emit_sparse::<V, 4>(i, m, mask, carry, None, word, visit, flat, &mut k)
                    }
                };
                counts.other_pages += pages;
            }
            let ne = k / 2;
            // SAFETY: slots `..k` hold edges, so ranges `..k / 2` had their
            // start and end written, all within the reserved room.
            unsafe { finish::<V>(p, ne, shift, base) };
            open = if k % 2 == 1 {
                // SAFETY: slot `k - 1` (an open run's start) was written.
                Some(unsafe { flat.add(k - 1).read() })
            } else {
                None
            };
            // SAFETY: ranges `len..len + ne` are initialised (above).
            unsafe { out.set_len(len + ne) };
            if seen != 0 {
                took = [0; BATCH];
            }
            i += m;
        }
        if let Some(s) = open {
            // The last run is still open at the end of the bitmap.
            out.push(range_of(s, n as u64 * 64, shift, base));
        }
        counts
    }
}
