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
/// instruction is split (see [`par_pays`]).
#[cfg(feature = "rayon")]
const PAR_MIN_THREADS_COMPRESS: usize = 4;

/// Whether the parallel scan of `src` pays: more than one thread in rayon's
/// pool, and a sample of the bitmap's edges at least
/// [`PAR_MIN_EDGES_PER_WORD`] a word. Below that the scan runs on one
/// thread (the same result, sooner).
///
/// Where the scan expands words with one compress instruction
/// ([`scan::compresses`]: AVX-512) one thread writes the table near
/// memory speed, and on an AMD EPYC Zen 4 with two threads the split lost
/// at every density from 1% to 50% (0.79x-0.96x: the sizing pass reads
/// the log once more and the two threads share the memory bus). There the
/// scan runs on one thread unless the pool has at least
/// [`PAR_MIN_THREADS_COMPRESS`] threads (not measured here: this machine
/// has two).
#[cfg(feature = "rayon")]
fn par_pays<W: Words>(src: W, opts: ScanOpts) -> bool {
    let threads = rayon::current_num_threads();
    if threads < 2 || (threads < PAR_MIN_THREADS_COMPRESS && scan::compresses(opts.level())) {
        return false;
    }
    let (edges, words) = scan::sample_edges(src, opts.level());
    edges >= PAR_MIN_EDGES_PER_WORD * words
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
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryRangeTable {
    data: Vec<MemoryRange>,
}

impl MemoryRangeTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
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
        if parallel
            && src.len() >= 2 * opts.block()
            && (opts.force_parallel() || par_pays(src, opts))
        {
            self.extend_par(src, shift, base, opts);
            return;
        }
        let _ = parallel;
        scan::extend_ranges(src, opts.level(), &mut self.data, shift, base);
    }

    /// The parallel scan: count edges per block, size each block's share of
    /// the output from the prefix sums, then let every block write its ranges
    /// in place.
    #[cfg(feature = "rayon")]
    fn extend_par<W: Words>(&mut self, src: W, shift: u32, base: u64, opts: ScanOpts) {
        use core::mem::MaybeUninit;
        use rayon::prelude::*;

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
            }
        }
        let written: usize = parts
            .into_par_iter()
            .map(|(b, out)| {
                scan::write_block(src, b * bw, ((b + 1) * bw).min(n), out, shift, base, be)
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
    /// `gap_bytes` after that range's end.
    #[inline]
    pub fn push_merging(&mut self, r: MemoryRange, gap_bytes: u64) {
        if let Some(last) = self.data.last_mut() {
            if joinable(last, &r, gap_bytes) {
                last.length = r.end() - last.gpa;
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
        Ok(MemoryRangeTable { data })
    }
}

#[cfg(all(test, feature = "rayon"))]
mod par_tests {
    use super::*;
    use crate::arch::{Level, LevelKind};
    use crate::dirty::scan::{compresses, One};

    /// A log with `per_word` isolated set bits per word (two edges each).
    fn log(words: usize, per_word: u32) -> std::vec::Vec<u64> {
        let w = (0..per_word).fold(0u64, |w, b| w | 1 << (4 * b + 1));
        std::vec![w; words]
    }

    /// Only the AVX-512 level expands with a compress; with two threads a
    /// dense log is split at the other levels and not at that one, and a
    /// pool of [`PAR_MIN_THREADS_COMPRESS`] threads splits it there too.
    #[test]
    fn two_threads_split_a_dense_log_unless_the_level_compresses() {
        let dense = log(1 << 16, 8);
        let sparse = log(1 << 16, 0);
        for level in Level::available() {
            let c = compresses(level);
            assert_eq!(c, level.kind() == LevelKind::Avx512, "{level:?}");
            let opts = ScanOpts {
                backend: level,
                ..ScanOpts::default()
            };
            for (threads, want) in [(2, !c), (PAR_MIN_THREADS_COMPRESS, true)] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let (d, s) =
                    pool.install(|| (par_pays(One(&dense), opts), par_pays(One(&sparse), opts)));
                assert_eq!(d, want, "{level:?}, {threads} threads, dense");
                assert!(!s, "{level:?}, {threads} threads, a clean log");
            }
        }
    }
}
