//! `MemoryRangeTable`: the ranges a migration pass copies, and their wire
//! format.

use alloc::vec::Vec;

use super::builder::{Scan, Source};
use super::error::DirtyError;
use super::memory_range::MemoryRange;
use super::opts::ScanOpts;
use super::scan::{self, Words};

/// Whether `next` starts at most `gap` bytes after `last` ends.
#[inline]
fn joinable(last: &MemoryRange, next: &MemoryRange, gap: u64) -> bool {
    let end = last.end();
    next.gpa >= end && next.gpa - end <= gap
}

/// Edges per word (two per range) from which the parallel scan pays.
///
/// The parallel scan reads the bitmap twice (a counting pass sizes each
/// block's share of the table, then the blocks write their ranges), the
/// serial scan once. Reading is bound by memory bandwidth, which a second
/// thread does not raise on a small machine (2 cores, AMD EPYC Zen 3: 8.2
/// GB/s on one thread, 8.0 on two), so what the threads share is the
/// per-range work, about 4.5 ns a range on one thread, against the extra
/// read, about 0.7 ns a word: on two threads the split saves
/// `4.5 / 2 * ranges` for `0.7 * words`, a break-even near 0.3 ranges a
/// word. The threshold sits at one range a word (a 5% random log has 2.9,
/// a 1% one 0.63, a 0.1% one 0.064), so that a second thread that is busy
/// with other work, or memory shared with other programs, does not turn
/// the parallel scan into a loss.
#[cfg(feature = "rayon")]
const PAR_MIN_EDGES_PER_WORD: usize = 2;

/// Threads the pool needs before a scan that expands with a compress
/// instruction is split (see [`split_of`]).
#[cfg(feature = "rayon")]
const PAR_MIN_THREADS_COMPRESS: usize = 4;

/// Edges per word at or below which the parallel table build runs the
/// one-pass split on any log of [`ONE_PASS_MIN_WORDS`], as a fraction
/// `1 / ONE_PASS_WORDS_PER_EDGE`: a quarter edge a word (a 0.1% random log
/// has 0.13, a 1% one 1.3; a clean or a fully dirty log none).
///
/// There the table is small next to the log (at 0.1%, 1 byte of table per
/// 8 of bitmap), so the log is scanned once, in chunks the threads claim
/// (the calling thread's into the table, the others' into buffers), and
/// joining the buffers copies little; the threads together
/// read the log at the two-thread memory bandwidth. Denser logs write
/// larger tables (a quarter of the log's size at this threshold, as large
/// as the log from one edge a word), and copying the later parts costs
/// more of what the second thread saves, unless the log is large or one
/// thread's scan slow (see [`ONE_PASS_EDGES_PER_WORD`]).
#[cfg(feature = "rayon")]
const ONE_PASS_WORDS_PER_EDGE: usize = 4;

/// Ranges per task when the one-pass split's later parts are copied into
/// the table by all threads (1 MiB; parts under two chunks are copied by
/// one).
#[cfg(feature = "rayon")]
const JOIN_CHUNK: usize = 1 << 16;

/// Words a sparse log needs before the one-pass split runs (a 16 MiB log,
/// a 512 GiB guest's with 4 KiB pages).
///
/// The calling thread starts scanning at once and a pool thread joins when
/// it wakes ([`with_helpers`](super::claim::with_helpers)), so a second
/// thread that is slow to start costs little. Measured on an AMD EPYC Zen
/// 4 VM with two threads, after 100 ms of other work on one (the pool
/// idle), best/median of 20 against one thread: at 0.1% dirty a 32 MiB log
/// took 1.46/1.56 ms against 2.13/2.21, a 16 MiB one 0.74/0.89 against
/// 1.07/1.13, an 8 MiB one 0.41/0.50 against 0.54/0.58, a 4 MiB one no
/// better (0.24/0.30 against 0.27/0.28); a clean 16 MiB log 0.43/0.52
/// against 0.46/0.57, a clean 8 MiB one slower (0.26/0.34 against
/// 0.21/0.31). Before the pool threads were offered the work instead of
/// joined, a 32 MiB log lost 0.2-0.6 ms against one thread after a stretch
/// of other work.
#[cfg(feature = "rayon")]
const ONE_PASS_MIN_WORDS: usize = 2 << 20;

/// Words a log needs before the one-pass split runs up to
/// [`ONE_PASS_EDGES_PER_WORD`] at a level that does not compress (a 64 MiB
/// log), where its later chunks' copy is larger.
#[cfg(feature = "rayon")]
const ONE_PASS_DENSE_MIN_WORDS: usize = 8 << 20;

/// Edges per word at or below which the one-pass split also runs on a log
/// of [`ONE_PASS_BIG_WORDS`], and on any log of [`ONE_PASS_DENSE_MIN_WORDS`]
/// at a level that does not expand words with one compress (below AVX-512):
/// two edges a word, about 1.6% dirty at random.
///
/// Measured on an AMD EPYC Zen 4 VM with two threads, medians against one
/// thread: at AVX-512 a 256 MiB log gained 1.1x-1.2x from 0.5% to 1.5%
/// dirty and a 384 MiB one 1.2x at 0.3%-2% (even at 3%), while a 128 MiB
/// log gained nothing at 0.5%-1.5% (the copy of the later parts eats the
/// second thread's share there); at AVX2, where one thread scans dense
/// logs more slowly, a 128 MiB log gained 1.2x at 1% and a 384 MiB one
/// 1.4x at 1% and 1.3x at 2%-3%, more than the counting split.
#[cfg(feature = "rayon")]
const ONE_PASS_EDGES_PER_WORD: usize = 2;

/// Words from which a log takes the one-pass split up to
/// [`ONE_PASS_EDGES_PER_WORD`] at every level: a 256 MiB log (an 8 TiB
/// guest's with 4 KiB pages).
#[cfg(feature = "rayon")]
const ONE_PASS_BIG_WORDS: usize = 32 << 20;

/// How a parallel table build runs.
#[cfg(feature = "rayon")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Split {
    /// On one thread, as the serial build.
    Serial,
    /// Count each block's edges, then let every block fill its share of
    /// the table ([`MemoryRangeTable::extend_counted`]).
    Count,
    /// One part per thread, each scanned once into its own buffer, joined
    /// after ([`MemoryRangeTable::extend_one_pass`]).
    OnePass,
}

/// How the parallel scan of `src` runs: on one thread when rayon's pool
/// has one; else from a sample of the bitmap's edges, on a log of at least
/// [`ONE_PASS_MIN_WORDS`] the one-pass split at or below a quarter edge a
/// word (one edge per [`ONE_PASS_WORDS_PER_EDGE`] words), and from
/// [`ONE_PASS_DENSE_MIN_WORDS`] at or below [`ONE_PASS_EDGES_PER_WORD`]
/// where the level does not compress or the log has
/// [`ONE_PASS_BIG_WORDS`]; then the counting split at or above
/// [`PAR_MIN_EDGES_PER_WORD`]; one thread otherwise (and on smaller logs
/// below the counting split).
///
/// Where the scan expands words with one compress instruction
/// ([`scan::compresses`]: AVX-512) one thread writes the table near
/// memory speed, and on an AMD EPYC Zen 4 with two threads the counting
/// split lost at every density from 1% to 50% (0.79x-0.96x: the sizing
/// pass reads the log once more and the two threads share the memory
/// bus). There dense logs run on one thread unless the pool has at least
/// [`PAR_MIN_THREADS_COMPRESS`] threads (not measured here: this machine
/// has two).
#[cfg(feature = "rayon")]
fn split_of<W: Words>(src: W, opts: ScanOpts) -> Split {
    if opts.force_parallel() {
        return if opts.one_pass() {
            Split::OnePass
        } else {
            Split::Count
        };
    }
    let threads = rayon::current_num_threads();
    if threads < 2 {
        return Split::Serial;
    }
    let (edges, words) = scan::sample_edges(src, opts.level());
    let n = src.len();
    let one_pass = (n >= ONE_PASS_MIN_WORDS && edges * ONE_PASS_WORDS_PER_EDGE <= words)
        || (n >= ONE_PASS_DENSE_MIN_WORDS
            && edges <= ONE_PASS_EDGES_PER_WORD * words
            && (n >= ONE_PASS_BIG_WORDS || !scan::compresses(opts.level())));
    if one_pass {
        Split::OnePass
    } else if edges >= PAR_MIN_EDGES_PER_WORD * words
        && (threads >= PAR_MIN_THREADS_COMPRESS || !scan::compresses(opts.level()))
    {
        Split::Count
    } else {
        Split::Serial
    }
}

/// Chunks per thread of the one-pass split: enough that a thread that
/// starts late, or is taken by other work, leaves little for the others
/// to wait on (a 384 MiB log is 16 chunks of 24 MiB on two threads, each
/// about 1.7 ms of scanning at 0.1% dirty), few enough that the seams and
/// the join's bookkeeping cost nothing measurable.
#[cfg(feature = "rayon")]
const CHUNKS_PER_THREAD: usize = 8;

/// Joins the ranges `v` that a part's scan wrote (from the part's first
/// word) to the run `open` that was still open where the part begins,
/// and returns the run open at the part's end. `part_open` is the part's
/// own open run. A run open at a seam goes on in the part: its end is the
/// end of the part's first range when one ended there (the part's scan
/// began it at the seam); else the whole part is inside it, and the
/// part's open run is that placeholder.
#[cfg(feature = "rayon")]
fn seam(
    v: &mut [MemoryRange],
    open: Option<u64>,
    part_open: Option<u64>,
    shift: u32,
    base: u64,
) -> Option<u64> {
    match (open, v.first_mut()) {
        (Some(s), Some(first)) => {
            let gpa = base + (s << shift);
            first.length = first.end() - gpa;
            first.gpa = gpa;
            part_open
        }
        (Some(_), None) => open,
        (None, _) => part_open,
    }
}

/// Bytes per range on the wire: `gpa` then `length`, little-endian `u64`s.
pub const WIRE_RANGE_BYTES: usize = 16;

/// An ordered table of memory ranges, as Cloud Hypervisor's
/// `vm_migration::protocol::MemoryRangeTable`.
///
/// ```
/// use spacekit::dirty::{Geometry, MemoryRange, MemoryRangeTable, Scan};
///
/// // Pages 0-1 and 4 dirty; merging gaps of up to 2 clean pages joins them.
/// let scan = Scan::new(&[0b1_0011], Geometry::new(0, 4096)?)?.merge_gap(2);
/// let table = MemoryRangeTable::from_scan(scan);
/// assert_eq!(table.ranges(), [MemoryRange { gpa: 0, length: 5 * 4096 }]);
/// let wire = table.to_bytes();
/// assert_eq!(MemoryRangeTable::from_bytes(&wire)?, table);
/// # Ok::<(), spacekit::dirty::DirtyError>(())
/// ```
///
/// A table keeps its memory when cleared, so one table reused pass after
/// pass allocates only while it grows. A table built by the one-pass
/// parallel split also keeps the buffers of the chunks its other threads
/// scanned (about half of its ranges with two threads, when both ran
/// throughout; at most all chunks but the first), so the next parallel
/// build fills pages already mapped. Each keeps the capacity of the
/// largest chunk it held until the table is dropped.
#[derive(Default)]
pub struct MemoryRangeTable {
    data: Vec<MemoryRange>,
    /// The one-pass split's buffers, one per chunk, empty between builds
    /// (see [`MemoryRangeTable::extend_one_pass`]).
    #[cfg(feature = "rayon")]
    parts: Vec<Vec<MemoryRange>>,
}

impl Clone for MemoryRangeTable {
    /// The same ranges; the clone keeps no part buffers.
    fn clone(&self) -> Self {
        MemoryRangeTable::of(self.data.clone())
    }
}

impl PartialEq for MemoryRangeTable {
    /// Tables are equal when their ranges are.
    fn eq(&self, other: &Self) -> bool {
        self.data == other.data
    }
}

impl Eq for MemoryRangeTable {}

impl core::fmt::Debug for MemoryRangeTable {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MemoryRangeTable")
            .field("data", &self.data)
            .finish()
    }
}

impl MemoryRangeTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// A table of `data`'s ranges.
    fn of(data: Vec<MemoryRange>) -> Self {
        MemoryRangeTable {
            data,
            #[cfg(feature = "rayon")]
            parts: Vec::new(),
        }
    }

    /// A new table of `scan`'s ranges: [`MemoryRangeTable::extend_from`] on
    /// an empty table.
    pub fn from_scan(scan: Scan<'_>) -> Self {
        let mut t = Self::new();
        t.extend_from(scan);
        t
    }

    /// Appends the ranges of `scan` (a bitmap, or the OR of two, serial or
    /// parallel, with gaps of up to `merge_gap` pages joined; see [`Scan`]),
    /// reusing the table's allocation: call [`MemoryRangeTable::clear`]
    /// first to refill it. A first range that continues the table's last one
    /// (within the scan's `merge_gap` pages) is joined to it, so a log
    /// appended in slices gives the same table as the whole log.
    ///
    /// Cloud Hypervisor's `MemoryRangeTable::from_dirty_bitmap` (which takes
    /// the start address and page size too; its memory manager's
    /// `dirty_log` passes 4096), without its step per dirty page or the
    /// silent truncation of two logs of different lengths that `dirty_log`'s
    /// `zip` of KVM's and the VMM's bitmaps does before calling it.
    ///
    /// ```
    /// use spacekit::dirty::{Geometry, MemoryRange, MemoryRangeTable, Scan};
    ///
    /// let g = Geometry::new(0, 4096)?;
    /// let log = [1u64 << 63, 0b1];
    /// let mut table = MemoryRangeTable::new();
    /// // The log in two slices; the run across the seam is one range.
    /// table.extend_from(Scan::new(&log[..1], g)?);
    /// table.extend_from(Scan::new(&log[1..], g.with_base(64 * 4096))?.parallel(true));
    /// assert_eq!(table.ranges(), [MemoryRange { gpa: 63 * 4096, length: 2 * 4096 }]);
    /// # Ok::<(), spacekit::dirty::DirtyError>(())
    /// ```
    pub fn extend_from(&mut self, scan: Scan<'_>) {
        let shift = scan.geometry.page_shift();
        let base = scan.geometry.base();
        let gap = if scan.merge_gap > u64::MAX >> shift {
            u64::MAX
        } else {
            scan.merge_gap << shift
        };
        let old = self.data.len();
        match scan.src {
            Source::One(src) => self.extend_words(src, shift, base, scan.opts, scan.parallel),
            Source::Or(src) => self.extend_words(src, shift, base, scan.opts, scan.parallel),
        }
        // Join across the old/new seam, and gaps of up to `merge_gap` pages.
        let seam = old.saturating_sub(1);
        let joins_seam =
            old > 0 && old < self.data.len() && joinable(&self.data[old - 1], &self.data[old], gap);
        if gap > 0 || joins_seam {
            self.merge_from(seam, gap);
        }
    }

    /// Appends ranges with `fill` (which pushes them in ascending order to
    /// the table's vector) and joins the first new range to the table's last
    /// one when they touch, as [`MemoryRangeTable::extend_from`] does at its
    /// seam. The one-pass harvest's way into a table.
    pub(super) fn extend_with<R>(&mut self, fill: impl FnOnce(&mut Vec<MemoryRange>) -> R) -> R {
        let old = self.data.len();
        let r = fill(&mut self.data);
        if old > 0 && old < self.data.len() && joinable(&self.data[old - 1], &self.data[old], 0) {
            self.merge_from(old - 1, 0);
        }
        r
    }

    /// Appends the maximal runs of `src` as ranges (no gap merging).
    fn extend_words<W: Words>(
        &mut self,
        src: W,
        shift: u32,
        base: u64,
        opts: ScanOpts,
        parallel: bool,
    ) {
        #[cfg(feature = "rayon")]
        if parallel && src.len() >= 2 * opts.block() {
            match split_of(src, opts) {
                Split::Count if opts.force_parallel() || super::gate::COUNTED.admit() => {
                    return self.extend_counted(src, shift, base, opts)
                }
                // Unless recent one-pass builds lost to one thread (see
                // `gate.rs`).
                Split::OnePass if opts.force_parallel() || super::gate::ONE_PASS.admit() => {
                    return self.extend_one_pass(src, shift, base, opts)
                }
                Split::Count | Split::OnePass | Split::Serial => {}
            }
        }
        let _ = parallel;
        scan::extend_ranges(src, opts.level(), &mut self.data, shift, base);
    }

    /// The one-pass split: the log cut into [`CHUNKS_PER_THREAD`] chunks
    /// per thread (at least [`ScanOpts::block`] words each), claimed from
    /// both ends ([`Claims`](super::claim::Claims)): this thread takes
    /// chunks from the front and scans them straight into the table, the
    /// pool's other threads take them from the back, each into a buffer of
    /// its own ([`scan::extend_part`]); then the back's buffers are
    /// appended in order, a run that crosses a seam joined into one range.
    /// A thread that starts late takes fewer chunks, and one that never
    /// starts none: then this thread scans the whole log into the table,
    /// as the serial build does. The buffers stay with the table, empty,
    /// for its next build. Whether the build paid goes to
    /// [`gate::ONE_PASS`](super::gate::ONE_PASS), which runs the next ones
    /// on one thread after a loss.
    #[cfg(feature = "rayon")]
    fn extend_one_pass<W: Words>(&mut self, src: W, shift: u32, base: u64, opts: ScanOpts) {
        use std::sync::{Mutex, PoisonError};
        use std::time::Instant;

        use super::claim::{with_helpers, Claims};
        use super::gate::Rate;

        let n = src.len();
        let level = opts.level();
        let threads = rayon::current_num_threads().max(2);
        let chunks = (CHUNKS_PER_THREAD * threads).clamp(2, (n / opts.block()).max(2));
        let cut = |c: usize| n * c / chunks;
        let claims = Claims::new(chunks);
        // One buffer per chunk, kept from the last build (empty), each
        // with the open run its scan ended with.
        let mut bufs = core::mem::take(&mut self.parts);
        bufs.resize_with(chunks, Vec::new);
        let slots: Vec<Mutex<(Vec<MemoryRange>, Option<u64>)>> =
            bufs.into_iter().map(|v| Mutex::new((v, None))).collect();
        let data = &mut self.data;
        // Each chunk's scan timed against its work (words and ranges), by
        // whichever thread: what one unhindered thread would have taken
        // (see `gate.rs`).
        let rate = Rate::new();
        let timed = |c: usize, f: &mut dyn FnMut() -> usize| {
            let t = Instant::now();
            let ranges = f();
            rate.note(t.elapsed(), cut(c + 1) - cut(c), ranges);
        };
        let back = || {
            while let Some(c) = claims.back() {
                // Each slot is claimed once: the lock is never contended,
                // and never poisoned but by a panic that `with_helpers`
                // raises again.
                let mut slot = slots[c].lock().unwrap_or_else(PoisonError::into_inner);
                let (v, part_open) = &mut *slot;
                v.clear();
                timed(c, &mut || {
                    *part_open = scan::extend_part(src, cut(c), cut(c + 1), level, v, shift, base);
                    v.len()
                });
            }
        };
        let start = Instant::now();
        let (front_open, own) = with_helpers(threads - 1, &back, || {
            let mut open = None;
            while let Some(c) = claims.front() {
                debug_assert_eq!(src.carry_in(cut(c)) != 0, open.is_some());
                let at = data.len();
                let mut part_open = None;
                timed(c, &mut || {
                    part_open =
                        scan::extend_part(src, cut(c), cut(c + 1), level, data, shift, base);
                    data.len() - at
                });
                open = seam(&mut data[at..], open, part_open, shift, base);
            }
            (open, start.elapsed())
        });
        let joined = start.elapsed();
        let first_back = claims.taken_from_front();
        let mut slots: Vec<(Vec<MemoryRange>, Option<u64>)> = slots
            .into_iter()
            .map(|m| m.into_inner().unwrap_or_else(PoisonError::into_inner))
            .collect();
        let mut open = front_open;
        for (c, (v, part_open)) in slots.iter_mut().enumerate().skip(first_back) {
            debug_assert_eq!(src.carry_in(cut(c)) != 0, open.is_some());
            open = seam(v, open, *part_open, shift, base);
        }
        let mut bufs: Vec<Vec<MemoryRange>> = slots.into_iter().map(|(v, _)| v).collect();
        self.append_parts(&mut bufs[first_back..]);
        self.parts = bufs;
        if let Some(s) = open {
            self.data
                .push(super::memory_range::range_of(s, n as u64 * 64, shift, base));
        }
        // Whether the helpers paid (the join included), for the next
        // builds' choice; a build forced by a test does not count.
        if !opts.force_parallel() {
            super::gate::ONE_PASS.record(rate.alone(), own, joined, start.elapsed());
        }
    }

    /// Appends the one-pass split's later parts in order and empties them.
    /// Large parts are copied by all threads at once, [`JOIN_CHUNK`]
    /// ranges per task: one thread copies about 10 GB/s, and at 1% of a
    /// 384 MiB log the later part is 254 MB, a quarter of the build's time.
    #[cfg(feature = "rayon")]
    fn append_parts(&mut self, bufs: &mut [Vec<MemoryRange>]) {
        use rayon::prelude::*;

        let total: usize = bufs.iter().map(Vec::len).sum();
        if total < 2 * JOIN_CHUNK {
            for v in bufs.iter_mut() {
                self.data.extend_from_slice(v);
                v.clear();
            }
            return;
        }
        let old = self.data.len();
        self.data.reserve(total);
        let mut rest = &mut self.data.spare_capacity_mut()[..total];
        let mut jobs = Vec::with_capacity(total.div_ceil(JOIN_CHUNK) + bufs.len());
        for v in bufs.iter() {
            let (head, tail) = rest.split_at_mut(v.len());
            rest = tail;
            jobs.extend(v.chunks(JOIN_CHUNK).zip(head.chunks_mut(JOIN_CHUNK)));
        }
        jobs.into_par_iter().for_each(|(from, to)| {
            debug_assert_eq!(from.len(), to.len());
            // SAFETY: `to` is `from.len()` slots of the table's spare
            // capacity (the chunks pair up slot for slot), no other task
            // writes them, and `from` is a buffer the table owns, apart
            // from `to`; `MemoryRange` is `Copy`.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    from.as_ptr(),
                    to.as_mut_ptr().cast::<MemoryRange>(),
                    from.len(),
                )
            };
        });
        // SAFETY: every slot `old..old + total` was written above, in
        // capacity that `reserve` made.
        unsafe { self.data.set_len(old + total) };
        for v in bufs.iter_mut() {
            v.clear();
        }
    }

    /// The parallel scan: count edges per block, size each block's share of
    /// the output from the prefix sums, then let every block write its ranges
    /// in place.
    #[cfg(feature = "rayon")]
    fn extend_counted<W: Words>(&mut self, src: W, shift: u32, base: u64, opts: ScanOpts) {
        use core::mem::MaybeUninit;
        use rayon::prelude::*;
        use std::time::Instant;

        let start = Instant::now();
        // Each block's second pass, which is what one thread's scan does,
        // timed against its work (see `gate.rs`).
        let rate = super::gate::Rate::new();
        let n = src.len();
        let bw = opts.block();
        let nblocks = n.div_ceil(bw);
        let be = opts.level();
        let counts: Vec<usize> = (0..nblocks)
            .into_par_iter()
            .map(|b| scan::count_edges(src, b * bw, ((b + 1) * bw).min(n), be))
            .collect();
        // off[b]: global index of block b's first edge. Even indices are
        // starts; the range of start edge g is number g / 2.
        let mut off = Vec::with_capacity(nblocks + 1);
        let mut total = 0usize;
        for c in &counts {
            off.push(total);
            total += c;
        }
        let terminal = usize::from(src.word(n - 1) >> 63 == 1);
        off.push(total + terminal);
        let nr = (total + terminal) / 2;
        let old = self.data.len();
        self.data.reserve(nr);
        let mut rest: &mut [MaybeUninit<MemoryRange>] = &mut self.data.spare_capacity_mut()[..nr];
        let mut parts = Vec::with_capacity(nblocks);
        for b in 0..nblocks {
            let starts = off[b + 1].div_ceil(2) - off[b].div_ceil(2);
            let (head, tail) = rest.split_at_mut(starts);
            rest = tail;
            if !head.is_empty() {
                parts.push((b, head));
            } else {
                // No second pass; one thread would still read it.
                rate.untimed(((b + 1) * bw).min(n) - b * bw);
            }
        }
        let written: usize = parts
            .into_par_iter()
            .map(|(b, out)| {
                let (t, ranges) = (Instant::now(), out.len());
                let w = scan::write_block(src, b * bw, ((b + 1) * bw).min(n), out, shift, base, be);
                rate.note(t.elapsed(), ((b + 1) * bw).min(n) - b * bw, ranges);
                w
            })
            .sum();
        // Each block fills exactly its share (the bitmap is immutable while
        // borrowed, so both passes see the same edges); anything else is a
        // bug, and stopping is better than exposing uninitialised ranges.
        assert_eq!(written, nr, "parallel dirty scan: edge counts disagree");
        // SAFETY: `reserve(nr)` made room for `nr` ranges past `old`, the
        // blocks' disjoint slices cover exactly those `nr` slots, and every
        // block initialised its whole slice (checked just above).
        unsafe { self.data.set_len(old + nr) };
        // Whether the split paid, for the next builds' choice (rayon's
        // join gives no wait of its own to judge); a build forced by a
        // test does not count.
        if !opts.force_parallel() {
            let total = start.elapsed();
            super::gate::COUNTED.record(rate.alone(), total, total, total);
        }
    }

    /// Joins ranges from index `from` on that lie at most `gap` bytes apart.
    fn merge_from(&mut self, from: usize, gap: u64) {
        let d = &mut self.data;
        if from >= d.len() {
            return;
        }
        let mut w = from;
        for r in from + 1..d.len() {
            let cur = d[r];
            if joinable(&d[w], &cur, gap) {
                d[w].length = cur.end() - d[w].gpa;
            } else {
                w += 1;
                d[w] = cur;
            }
        }
        d.truncate(w + 1);
    }

    /// Appends `r`, joining it to the last range when it starts at most
    /// `gap_bytes` after that range's end, or overlaps it or lies at most
    /// `gap_bytes` before it (the join is the smallest range holding both).
    /// Only the last range is looked at: ranges pushed in ascending order
    /// of `gpa` give a sorted table of disjoint ranges; one that lies wholly
    /// below the last (more than `gap_bytes` before it) is appended as it
    /// is, after it.
    #[inline]
    pub fn push_merging(&mut self, r: MemoryRange, gap_bytes: u64) {
        if let Some(last) = self.data.last_mut() {
            if joinable(last, &r, gap_bytes) {
                last.length = r.end() - last.gpa;
                return;
            }
            let (lo, hi) = if r.gpa <= last.gpa {
                (r, *last)
            } else {
                (*last, r)
            };
            // `hi` starts inside `lo` or at most `gap_bytes` past its end.
            if hi.gpa.saturating_sub(lo.end()) <= gap_bytes {
                let end = lo.end().max(hi.end());
                *last = MemoryRange {
                    gpa: lo.gpa,
                    length: end - lo.gpa,
                };
                return;
            }
        }
        self.data.push(r);
    }

    /// Appends `r` as it is.
    pub fn push(&mut self, r: MemoryRange) {
        self.data.push(r);
    }

    /// Removes every range, keeping the allocation.
    pub fn clear(&mut self) {
        self.data.clear();
    }

    /// The ranges.
    pub fn ranges(&self) -> &[MemoryRange] {
        &self.data
    }

    /// Number of ranges.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether there are no ranges.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Total bytes covered.
    pub fn total_bytes(&self) -> u64 {
        self.data.iter().map(|r| r.length).sum()
    }

    /// Splits the table, in ascending order, into tables of at most
    /// `max_bytes` bytes each, cutting ranges where needed (Cloud
    /// Hypervisor's `partition`). `max_bytes == 0` yields the whole table
    /// as one part.
    pub fn partition(&self, max_bytes: u64) -> Vec<MemoryRangeTable> {
        if max_bytes == 0 {
            return alloc::vec![self.clone()];
        }
        let mut parts = Vec::new();
        let mut cur = MemoryRangeTable::new();
        let mut room = max_bytes;
        for r in &self.data {
            let mut r = *r;
            while r.length > 0 {
                let take = r.length.min(room);
                cur.data.push(MemoryRange {
                    gpa: r.gpa,
                    length: take,
                });
                r.gpa += take;
                r.length -= take;
                room -= take;
                if room == 0 {
                    parts.push(core::mem::take(&mut cur));
                    room = max_bytes;
                }
            }
        }
        if !cur.is_empty() {
            parts.push(cur);
        }
        parts
    }

    /// The wire format: each range as `gpa` then `length`, little-endian
    /// `u64`s (byte-compatible with Cloud Hypervisor's `#[repr(C)]` table).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.data.len() * WIRE_RANGE_BYTES);
        for r in &self.data {
            out.extend_from_slice(&r.gpa.to_le_bytes());
            out.extend_from_slice(&r.length.to_le_bytes());
        }
        out
    }

    /// Parses the wire format.
    ///
    /// # Errors
    /// [`DirtyError::BadWireLength`] unless the length is a multiple of 16;
    /// [`DirtyError::RangeOverflow`] for a range whose end passes 2^64.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DirtyError> {
        if !bytes.len().is_multiple_of(WIRE_RANGE_BYTES) {
            return Err(DirtyError::BadWireLength { len: bytes.len() });
        }
        let mut data = Vec::with_capacity(bytes.len() / WIRE_RANGE_BYTES);
        for (index, c) in bytes.chunks_exact(WIRE_RANGE_BYTES).enumerate() {
            let mut g = [0u8; 8];
            let mut l = [0u8; 8];
            g.copy_from_slice(&c[..8]);
            l.copy_from_slice(&c[8..]);
            let r = MemoryRange {
                gpa: u64::from_le_bytes(g),
                length: u64::from_le_bytes(l),
            };
            if r.gpa.checked_add(r.length).is_none() {
                return Err(DirtyError::RangeOverflow { index });
            }
            data.push(r);
        }
        Ok(MemoryRangeTable::of(data))
    }
}

// Not under `--cfg loom`: the one-pass split's atomics are loom's there,
// usable only inside `loom::model`.
#[cfg(all(test, feature = "rayon", not(loom)))]
mod par_tests {
    use super::*;
    use crate::arch::{Level, LevelKind};
    use crate::dirty::scan::{compresses, One};

    /// A log of `words` words, every `every`-th with `per_word` isolated
    /// set bits (two edges each).
    fn log(words: usize, every: usize, per_word: u32) -> std::vec::Vec<u64> {
        let w = (0..per_word).fold(0u64, |w, b| w | 1 << (4 * b + 1));
        (0..words)
            .map(|i| if i % every == 0 { w } else { 0 })
            .collect()
    }

    /// With two threads a clean or sparse log of at least
    /// [`ONE_PASS_MIN_WORDS`] takes the one-pass split at every level (a
    /// smaller one runs on one thread); one of about an edge a word takes
    /// it from [`ONE_PASS_DENSE_MIN_WORDS`] where the level does not
    /// compress and from
    /// [`ONE_PASS_BIG_WORDS`] at every level, and runs on one thread
    /// below; a dense log takes the counting split except where the level
    /// expands with a compress (AVX-512 alone); a pool of
    /// [`PAR_MIN_THREADS_COMPRESS`] threads splits it there too. One
    /// thread never splits.
    #[test]
    fn the_split_follows_the_density_the_size_the_level_and_the_threads() {
        let words = 1 << 16;
        let dense = log(words, 1, 8);
        let middle = log(words, 2, 1);
        let middle_small = log(ONE_PASS_MIN_WORDS, 2, 1);
        let middle_min = log(ONE_PASS_DENSE_MIN_WORDS, 2, 1);
        let middle_big = log(ONE_PASS_BIG_WORDS, 2, 1);
        let small_sparse = log(words, 64, 1);
        let sparse = log(ONE_PASS_MIN_WORDS, 64, 1);
        let clean = std::vec![0u64; ONE_PASS_MIN_WORDS];
        for level in Level::available() {
            let c = compresses(level);
            assert_eq!(c, level.kind() == LevelKind::Avx512, "{level:?}");
            let opts = ScanOpts {
                backend: level,
                ..ScanOpts::default()
            };
            let dense_split = |threads| {
                if c && threads < PAR_MIN_THREADS_COMPRESS {
                    Split::Serial
                } else {
                    Split::Count
                }
            };
            let middle_min_split = if c { Split::Serial } else { Split::OnePass };
            for threads in [1, 2, PAR_MIN_THREADS_COMPRESS] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let got = pool.install(|| {
                    [
                        &dense,
                        &middle,
                        &middle_small,
                        &middle_min,
                        &middle_big,
                        &small_sparse,
                        &sparse,
                        &clean,
                    ]
                    .map(|l| split_of(One(l), opts))
                });
                let want = if threads == 1 {
                    [Split::Serial; 8]
                } else {
                    [
                        dense_split(threads),
                        Split::Serial,
                        Split::Serial,
                        middle_min_split,
                        Split::OnePass,
                        Split::Serial,
                        Split::OnePass,
                        Split::OnePass,
                    ]
                };
                assert_eq!(
                    got, want,
                    "{level:?}, {threads} threads: dense, middle (small, 16 MiB, 64 MiB, 256 MiB), \
                     small sparse, sparse, clean"
                );
            }
        }
    }

    /// A sparse log of the one-pass split's size runs on one thread while
    /// the gate pauses the split, and split once it opens: the same table
    /// either way (the split leaves a buffer per chunk with the table).
    /// The gate is the process's: no other unit test runs an unforced
    /// one-pass build.
    #[test]
    fn a_paused_gate_runs_the_one_pass_build_on_one_thread() {
        use super::super::gate::ONE_PASS;
        use super::super::geometry::Geometry;
        let sparse = log(ONE_PASS_MIN_WORDS, 64, 1);
        let g = Geometry::new(1 << 32, 4096).unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let want = MemoryRangeTable::from_scan(Scan::new(&sparse, g).unwrap());
        assert_eq!(want.len(), ONE_PASS_MIN_WORDS / 64);
        let scan = Scan::new(&sparse, g).unwrap().parallel(true);
        ONE_PASS.set(2);
        for k in 0..2 {
            let mut t = MemoryRangeTable::new();
            pool.install(|| t.extend_from(scan));
            assert_eq!(t, want, "paused, build {k}");
            assert!(t.parts.is_empty(), "paused, build {k}: one thread");
        }
        let mut t = MemoryRangeTable::new();
        pool.install(|| t.extend_from(scan));
        assert_eq!(t, want, "open");
        assert_eq!(t.parts.len(), 2 * CHUNKS_PER_THREAD, "open: split");
    }

    /// A dense log at a level that counts (no compress) asks the counting
    /// split's gate before each build: two builds on a gate paused for two
    /// use it up, each giving the serial build's table. No other unit test
    /// runs an unforced counting build.
    #[test]
    fn the_counting_split_asks_its_gate() {
        use super::super::gate::COUNTED;
        use super::super::geometry::Geometry;
        let Some(level) = Level::available().find(|&l| !compresses(l)) else {
            std::eprintln!("skipping: every level here compresses");
            return;
        };
        let dense = log(1 << 16, 1, 8);
        let g = Geometry::new(1 << 32, 4096).unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let opts = ScanOpts {
            backend: level,
            ..ScanOpts::default()
        };
        assert_eq!(pool.install(|| split_of(One(&dense), opts)), Split::Count);
        let want = MemoryRangeTable::from_scan(Scan::new(&dense, g).unwrap());
        let mut scan = Scan::new(&dense, g).unwrap().parallel(true);
        scan.opts = opts;
        COUNTED.set(2);
        for k in 0..3 {
            let mut t = MemoryRangeTable::new();
            pool.install(|| t.extend_from(scan));
            assert_eq!(t, want, "build {k}");
            if k == 1 {
                assert_eq!(COUNTED.skip(), 0, "two builds asked the gate");
            }
        }
    }

    /// The one-pass split forced at `level`, in blocks of 64 words.
    fn one_pass_at(level: Level) -> ScanOpts {
        ScanOpts {
            backend: level,
            block_words: 64,
            force_parallel: true,
            one_pass: true,
        }
    }

    /// The one-pass split on a pool of four threads, into one table again
    /// and again (its kept buffers reused), after ranges already there:
    /// runs that cross one seam, that cover whole parts, that end on a
    /// seam or at the end of the log, and parts without ranges, each
    /// against a serial build of the same log.
    #[test]
    fn the_one_pass_split_joins_runs_across_parts_on_four_threads() {
        use super::super::geometry::Geometry;
        let words = 4096;
        let mut logs: std::vec::Vec<std::vec::Vec<u64>> = std::vec::Vec::new();
        // One run from the middle of part 0 to the middle of part 3.
        let mut l = std::vec![0u64; words];
        l[500..3500].fill(!0);
        logs.push(l);
        // A run ending exactly on the seam at word 1024, and one through
        // the end of the log; part 1 and 2 without ranges.
        let mut l = std::vec![0u64; words];
        l[1000..1024].fill(!0);
        l[3900..].fill(!0);
        logs.push(l);
        // Every word dirty: one range from four parts.
        logs.push(std::vec![!0u64; words]);
        // Sparse bits everywhere, some at word edges.
        logs.push(
            (0..words as u64)
                .map(|i| (1 << (i % 64)) | if i % 7 == 0 { 1 << 63 } else { 0 })
                .collect(),
        );
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(4)
            .build()
            .unwrap();
        let g = Geometry::new(1 << 32, 4096).unwrap();
        for level in Level::available() {
            let forced = one_pass_at(level);
            let mut table = MemoryRangeTable::new();
            for round in 0..3 {
                for (k, log) in logs.iter().enumerate() {
                    let mut want = MemoryRangeTable::new();
                    want.push(MemoryRange {
                        gpa: 0,
                        length: 4096,
                    });
                    want.extend_from(Scan::new(log, g).unwrap());
                    table.clear();
                    table.push(MemoryRange {
                        gpa: 0,
                        length: 4096,
                    });
                    let mut scan = Scan::new(log, g).unwrap().parallel(true);
                    scan.opts = forced;
                    pool.install(|| table.extend_from(scan));
                    assert_eq!(table, want, "{level:?}, round {round}, log {k}");
                    assert!(
                        table.parts.iter().all(|v| v.is_empty()),
                        "kept buffers are empty between builds"
                    );
                }
            }
            assert_eq!(
                table.parts.len(),
                4 * CHUNKS_PER_THREAD,
                "{level:?}: four threads, a kept buffer per chunk"
            );
        }
    }

    /// With the pool's other thread busy for the whole build, the calling
    /// thread claims every chunk and scans the log straight into the
    /// table: the same table as a serial build, and no chunk's buffer ever
    /// used (none was given capacity).
    #[test]
    fn a_busy_pool_leaves_the_whole_log_to_the_caller() {
        use super::super::geometry::Geometry;
        use std::sync::atomic::{AtomicBool, Ordering};

        let words = 8192;
        let log: std::vec::Vec<u64> = (0..words as u64)
            .map(|i| {
                if i % 5 == 0 {
                    0xF0F0 << (i % 40)
                } else {
                    (i % 3) << 62
                }
            })
            .collect();
        let g = Geometry::new(1 << 32, 4096).unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for level in Level::available() {
            let forced = one_pass_at(level);
            let want = MemoryRangeTable::from_scan(Scan::new(&log, g).unwrap());
            let mut table = MemoryRangeTable::new();
            let (busy, done) = (AtomicBool::new(false), AtomicBool::new(false));
            pool.install(|| {
                rayon::join(
                    || {
                        // Build only once the other thread holds the task
                        // below, so it cannot take a chunk.
                        while !busy.load(Ordering::Acquire) {
                            std::hint::spin_loop();
                        }
                        let mut scan = Scan::new(&log, g).unwrap().parallel(true);
                        scan.opts = forced;
                        table.extend_from(scan);
                        done.store(true, Ordering::Release);
                    },
                    || {
                        busy.store(true, Ordering::Release);
                        while !done.load(Ordering::Acquire) {
                            std::hint::spin_loop();
                        }
                    },
                )
            });
            assert_eq!(table, want, "{level:?}");
            assert_eq!(table.parts.len(), 2 * CHUNKS_PER_THREAD, "{level:?}");
            assert!(
                table.parts.iter().all(|v| v.capacity() == 0),
                "{level:?}: a chunk went to a buffer while the other thread was busy"
            );
        }
    }

    /// Later parts large enough to be copied into the table by all
    /// threads ([`JOIN_CHUNK`] ranges per task), on pools of two and four
    /// threads, with runs across the seams and ranges already in the
    /// table: the same table as a serial build.
    #[test]
    fn large_parts_are_joined_by_every_thread() {
        use super::super::geometry::Geometry;
        let words = 16 * 1024;
        // 32 ranges a word, and all-dirty stretches over each seam of two
        // and of four parts.
        let mut log = std::vec![0x5555_5555_5555_5555u64; words];
        for seam in [words / 4, words / 2, 3 * words / 4] {
            log[seam - 3..seam + 5].fill(!0);
        }
        let g = Geometry::new(1 << 32, 4096).unwrap();
        let mut want = MemoryRangeTable::new();
        want.push(MemoryRange {
            gpa: 0,
            length: 4096,
        });
        want.extend_from(Scan::new(&log, g).unwrap());
        assert!(want.len() > 4 * JOIN_CHUNK, "{}", want.len());
        for threads in [2, 4] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            for level in Level::available() {
                let mut table = MemoryRangeTable::new();
                for round in 0..2 {
                    table.clear();
                    table.push(MemoryRange {
                        gpa: 0,
                        length: 4096,
                    });
                    let mut scan = Scan::new(&log, g).unwrap().parallel(true);
                    scan.opts = ScanOpts {
                        backend: level,
                        block_words: 64,
                        force_parallel: true,
                        one_pass: true,
                    };
                    pool.install(|| table.extend_from(scan));
                    assert!(
                        table == want,
                        "{threads} threads, {level:?}, round {round}: {} ranges, want {}, first difference at {:?}",
                        table.len(),
                        want.len(),
                        table.ranges().iter().zip(want.ranges()).position(|(a, b)| a != b)
                    );
                    assert!(table.parts.iter().all(|v| v.is_empty()));
                }
            }
        }
    }
}
