//! The edge scanner behind every dirty-range path.
//!
//! A run of dirty pages starts where a bit differs from the one below it and
//! ends where the next bit differs again. For word `w` with `c` the bit below
//! it (bit 63 of the previous word), the *edges* of the word are
//! `w ^ (w << 1 | c)`: each set bit is a position where the bitmap changes
//! value. Over the whole bitmap the edges alternate start, end, start, end, so
//! ranges are consecutive pairs of edge positions, plus an end at the last bit
//! when the final run is still open.
//!
//! The scan runs in two stages per batch of 64 words, neither with a
//! data-dependent branch per word (on random bitmaps such branches mispredict
//! about half the time, which costs more than the work itself):
//!
//! 1. *mark*: compute every word's edge mask (four words per AVX2 step) and
//!    set bit `t` of a 64-bit mark when word `t` of the batch has edges;
//! 2. *expand*: for each marked word, write its first four (eight in dense
//!    batches) edge positions unconditionally (a mask with fewer edges writes
//!    garbage that the next word overwrites) and advance the edge count by the
//!    mask's popcount; only words with more edges than that loop.
//!
//! In a dense stretch (the previous batch had edges in more than 7/8 of
//! its words) stage 1 is skipped: every word of the batch is expanded, a
//! word without edges writing only garbage past the count, and the words
//! with edges are counted to decide whether the next batch is dense too.
//!
//! A batch without edges is part of a uniform stretch (all clean, or all dirty
//! inside a run); the rest of the stretch is skipped with the bitmap engine's
//! SIMD search, so clean and fully dirty bitmaps scan at memory speed.
//!
//! The table builder (`RangeScan`) keeps stage 1 (which also keeps each
//! word's edge mask, so stage 2 does not read the bitmap again) and
//! replaces stage 2 and the pairing: the table is seen as a flat array of
//! `u64`, and each marked word writes its edges in order straight into it
//! (`generic::emit_edges`). Edges alternate start, end, so edge `k` lands
//! in range `k / 2`'s `gpa` or `length`; a batch's complete ranges become
//! addresses in place. In a sparse stretch (the previous batch had edges
//! in at most one word of [`SPARSE_PART`]) stage 1 shrinks to a test of
//! which words are nonzero, and only those words (and a word after one
//! whose top bit is set) get edge masks, one at a time; at AVX-512, up to
//! [`GATHER`] sparse batches put their marked words in one list first and
//! one loop emits them, so the loop's exit (which follows how many words
//! are marked) mispredicts once a list, not once a batch. The parallel scan
//! sizes each block's
//! share of the output first with `count_edges`, a branch-free popcount of
//! the edge masks, and `sample_edges` tells the table whether that extra
//! read pays.
//!
//! This file holds the level-independent algorithm. The word-parallel pieces
//! (stage 1, stage 2, the edge count) are in `arch/generic.rs`, written once
//! over `crate::arch::Vector`, and every entry point below hands its work to
//! `crate::arch::run` as a `Job`, which matches the `Level` once and runs
//! the whole job compiled for it.

use crate::arch::{self, Job, Level, Vector};

use super::arch::generic;
pub(crate) use super::arch::Words;
use super::error::DirtyError;
use super::memory_range::MemoryRange;

/// Edge positions buffered before they are paired into ranges.
pub(crate) const BUF: usize = 1024;

/// Words per batch.
pub(super) const BATCH: usize = 64;

/// After a batch without edges ending before word `i`: the first word of
/// `[i, end)` that differs from the stretch (every bit equal to `carry`),
/// found at SIMD speed, or `end`. The carry is unchanged across it.
#[inline(always)]
fn past_uniform<W: Words>(src: W, i: usize, end: usize, carry: u64, level: Level) -> usize {
    src.skip(i, end, carry.wrapping_neg(), level).unwrap_or(end)
}

/// One bitmap.
#[derive(Clone, Copy, Debug)]
pub(crate) struct One<'a>(pub(crate) &'a [u64]);

// SAFETY: `parts` returns the one slice, whose length `len` reports.
unsafe impl Words for One<'_> {
    #[inline(always)]
    fn len(self) -> usize {
        self.0.len()
    }
    #[inline(always)]
    fn word(self, i: usize) -> u64 {
        self.0[i]
    }
    #[inline(always)]
    fn skip(self, from: usize, end: usize, x: u64, level: Level) -> Option<usize> {
        crate::bitmap::skip_words(self.0, from, end, x, level)
    }
    #[inline(always)]
    fn parts(&self) -> (&[u64], Option<&[u64]>) {
        (self.0, None)
    }
}

/// The OR of two bitmaps of equal length, never materialised.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Or<'a>(&'a [u64], &'a [u64]);

impl<'a> Or<'a> {
    /// Checks the lengths agree.
    pub(crate) fn new(a: &'a [u64], b: &'a [u64]) -> Result<Self, DirtyError> {
        if a.len() != b.len() {
            return Err(DirtyError::LengthMismatch {
                expected: a.len(),
                found: b.len(),
            });
        }
        Ok(Or(a, b))
    }
}

// SAFETY: `Or::new` (the only constructor) checked that both slices have the
// same length, which `len` reports.
unsafe impl Words for Or<'_> {
    #[inline(always)]
    fn len(self) -> usize {
        self.0.len()
    }
    #[inline(always)]
    fn word(self, i: usize) -> u64 {
        self.0[i] | self.1[i]
    }
    #[inline(always)]
    fn skip(self, from: usize, end: usize, x: u64, _level: Level) -> Option<usize> {
        let (a, b) = (self.0.get(from..end)?, self.1.get(from..end)?);
        // Eight words per test: a loop the compiler vectorises (with AVX2
        // inside the AVX2 instantiation of the scanner).
        let mut i = from;
        for (x8, y8) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
            let mut d = 0;
            for j in 0..8 {
                d |= (x8[j] | y8[j]) ^ x;
            }
            if d != 0 {
                break;
            }
            i += 8;
        }
        (i..end).find(|&j| self.word(j) != x)
    }
    #[inline(always)]
    fn parts(&self) -> (&[u64], Option<&[u64]>) {
        (self.0, Some(self.1))
    }
}

/// A resumable scan over words `[i, end)`, knowing the bit below word `i`.
#[derive(Clone, Debug)]
pub(crate) struct Scanner<W> {
    src: W,
    i: usize,
    end: usize,
    /// Bit 63 of the word before `i` (0 before the first word).
    carry: u64,
    level: Level,
    /// Whether the closing edge at `end` (for a run still open there) is
    /// still to be considered; only full scans add it.
    terminal: bool,
    /// The current batch: bit `t` set when word `mbase + t` has edges not
    /// expanded yet.
    mask: u64,
    mbase: usize,
    /// Whether the current batch is dense (most words have edges).
    dense: bool,
}

impl<W: Words> Scanner<W> {
    /// A scan of words `[from, end)`. `terminal`: add an end edge at bit
    /// `64 * end` if the last run is still open there.
    pub(crate) fn new(src: W, from: usize, end: usize, level: Level, terminal: bool) -> Self {
        let carry = src.carry_in(from);
        Scanner {
            src,
            i: from,
            end,
            carry,
            level,
            terminal,
            mask: 0,
            mbase: 0,
            dense: false,
        }
    }

    /// Appends edge positions to `buf[k..]` until fewer than 65 slots remain
    /// or the scan ends; returns the new `k`. `buf.len()` must be `BUF`.
    /// `V`: the vector type of the level the caller is compiled for.
    #[inline(always)]
    fn fill_with<V: Vector>(&mut self, buf: &mut [u64], k: usize) -> usize {
        let mut k = k;
        let src = self.src;
        loop {
            // Expand the marked words while the buffer has room for a whole
            // word's edges (and the terminal edge).
            let mut mask = self.mask;
            while mask != 0 {
                if k + 65 > BUF {
                    self.mask = mask;
                    return k;
                }
                let j = self.mbase + mask.trailing_zeros() as usize;
                mask &= mask - 1;
                let (_, e) = src.edges(j);
                k = generic::expand::<V>(j as u64 * 64, e, buf, k, self.dense);
            }
            self.mask = 0;
            if self.i >= self.end {
                if self.terminal {
                    self.terminal = false;
                    if self.carry != 0 {
                        buf[k] = self.end as u64 * 64;
                        k += 1;
                    }
                }
                return k;
            }
            let n = BATCH.min(self.end - self.i);
            if self.dense && n == BATCH {
                // Dense stretch: stage 1 would mark nearly every word, so
                // expand every word of the batch instead (a word without
                // edges writes only garbage past `k`), counting the words
                // with edges to decide whether the next batch is dense.
                let end = self.i + n;
                let mut j = self.i;
                let mut below = self.carry;
                let mut marked = 0usize;
                while j < end {
                    if k + 65 > BUF {
                        // The rest of the batch goes through stage 2's
                        // mask loop, every word marked.
                        self.mbase = j;
                        self.mask = u64::MAX >> (64 - (end - j));
                        break;
                    }
                    let w = src.word(j);
                    let e = w ^ ((w << 1) | below);
                    marked += usize::from(e != 0);
                    k = generic::expand::<V>(j as u64 * 64, e, buf, k, true);
                    below = w >> 63;
                    j += 1;
                }
                self.i = end;
                self.carry = src.word(end - 1) >> 63;
                if j == end {
                    self.dense = marked * 8 > n * 7;
                }
                continue;
            }
            let (m, carry) = generic::marks::<V, _>(src, self.i, n, self.carry);
            self.mbase = self.i;
            self.mask = m;
            // Dense when more than 7/8 of the batch's words have edges.
            self.dense = m.count_ones() as usize * 8 > n * 7;
            self.i += n;
            self.carry = carry;
            if m == 0 {
                self.i = past_uniform(src, self.i, self.end, carry, self.level);
            }
        }
    }

    /// Whether the scan has reached its end (and added any terminal edge).
    pub(crate) fn done(&self) -> bool {
        self.i >= self.end && !self.terminal && self.mask == 0
    }
}

/// Runs `Scanner::fill` compiled for `s`'s level (see `arch::run`).
#[inline]
pub(crate) fn fill<W: Words>(s: &mut Scanner<W>, buf: &mut [u64], k: usize) -> usize {
    let level = s.level;
    arch::run(level, Fill { s, buf, k })
}

/// The job of [`fill`].
struct Fill<'s, 'b, W> {
    s: &'s mut Scanner<W>,
    buf: &'b mut [u64],
    k: usize,
}

impl<W: Words> Job for Fill<'_, '_, W> {
    type Output = usize;
    #[inline(always)]
    fn run<V: Vector>(self) -> usize {
        self.s.fill_with::<V>(self.buf, self.k)
    }
}

/// Number of edges in words `[from, end)` (no terminal edge), for the
/// parallel scan's sizing pass: a branch-free popcount of the edge masks.
/// Counted in batches of [`BATCH`] words; a batch without edges hands the
/// rest of its uniform stretch to the SIMD skip, as the serial scan does, so
/// clean and fully dirty stretches are only read.
#[cfg(feature = "rayon")]
pub(crate) fn count_edges<W: Words>(src: W, from: usize, end: usize, level: Level) -> usize {
    arch::run(
        level,
        CountEdges {
            src,
            from,
            end,
            level,
        },
    )
}

/// Whether the table builder at `level` expands each word with one compress
/// instruction ([`Vector::COMPRESS`]).
#[cfg(feature = "rayon")]
pub(crate) fn compresses(level: Level) -> bool {
    struct Compress;
    impl Job for Compress {
        type Output = bool;
        #[inline(always)]
        fn run<V: Vector>(self) -> bool {
            V::COMPRESS
        }
    }
    arch::run(level, Compress)
}

/// Words per sample of [`sample_edges`].
#[cfg(feature = "rayon")]
const SAMPLE_WORDS: usize = 64;

/// Samples of [`sample_edges`].
#[cfg(feature = "rayon")]
const SAMPLES: usize = 32;

/// The edges of `SAMPLES` stretches of `SAMPLE_WORDS` words spread evenly
/// over `src` (which holds at least that many words), and the number of
/// words they cover: the parallel scan's estimate of its output, at the
/// cost of reading 16 KiB.
#[cfg(feature = "rayon")]
pub(crate) fn sample_edges<W: Words>(src: W, level: Level) -> (usize, usize) {
    let n = src.len();
    if n < SAMPLES * SAMPLE_WORDS {
        return (count_edges(src, 0, n, level), n);
    }
    let stride = n / SAMPLES;
    let edges = (0..SAMPLES)
        .map(|k| {
            let from = k * stride;
            count_edges(src, from, from + SAMPLE_WORDS, level)
        })
        .sum();
    (edges, SAMPLES * SAMPLE_WORDS)
}

/// The job of [`count_edges`].
#[cfg(feature = "rayon")]
struct CountEdges<W> {
    src: W,
    from: usize,
    end: usize,
    level: Level,
}

#[cfg(feature = "rayon")]
impl<W: Words> Job for CountEdges<W> {
    type Output = usize;
    #[inline(always)]
    fn run<V: Vector>(self) -> usize {
        let CountEdges {
            src,
            from,
            end,
            level,
        } = self;
        let (mut i, mut n) = (from, 0);
        while i < end {
            let c = (i + BATCH).min(end);
            let e = generic::count_edges::<V, _>(src, i, c);
            n += e;
            i = c;
            if e == 0 && i < end {
                // Words `..i` up to the last edge are uniform: the rest of
                // the stretch (words equal to the last one) has no edges.
                let x = (src.word(i - 1) >> 63).wrapping_neg();
                i = src.skip(i, end, x, level).unwrap_or(end);
            }
        }
        n
    }
}

/// [`generic::emit_edges`] for each word `i + t` whose bit `t` is set in
/// `mask`, in order.
///
/// # Safety
/// As [`generic::emit_edges`], for every marked word: `out` valid for writes
/// of slots `..*k + 2 * BATCH_ROOM - 1` when the batch began.
#[inline(always)]
unsafe fn emit_marked<V: Vector, const U: usize>(
    i: usize,
    mut mask: u64,
    edges: &[u64; BATCH],
    out: *mut u64,
    k: &mut usize,
) {
    while mask != 0 {
        let t = mask.trailing_zeros() as usize;
        mask &= mask - 1;
        // SAFETY: the caller's guarantee; a word adds at most 64 edges, 64
        // words at most.
        unsafe { emit_word::<V, U>((i + t) as u64 * 64, edges[t], out, k) };
    }
}

/// One word's edges at slot `*k`: [`Vector::expand`] where it is one
/// compress ([`Vector::COMPRESS`]), else [`generic::emit_edges`] with `U`
/// unconditional writes.
///
/// # Safety
/// `out` valid for writes of slots `..*k + max(U, 64)`.
#[inline(always)]
unsafe fn emit_word<V: Vector, const U: usize>(pos: u64, e: u64, out: *mut u64, k: &mut usize) {
    if V::COMPRESS {
        // SAFETY: the caller's guarantee covers 64 slots from `*k`.
        let s = unsafe { core::slice::from_raw_parts_mut(out.add(*k), 64) };
        V::expand(pos, e, s, U >= 8);
        *k += e.count_ones() as usize;
    } else {
        // SAFETY: as above.
        unsafe { generic::emit_edges::<U>(pos, e, out, k) };
    }
}

/// Stage 2 of a sparse batch of `n` words from word `first`, each word
/// read by `word(t)` (`t` its place in the batch) and its edge mask made
/// there: [`emit_word`] (one compress at AVX-512, which took 4-5% off a
/// 0.1% log's scan on a Zen 4; else `U` unconditional writes) for each word
/// whose bit is set in `mask` and for each word after one whose top bit is
/// set (a run ends at its first page, or goes on through it), calling
/// `visit(t)` for each. `mask` must cover every nonzero word, and word 0
/// when `carry` (the bit below word `first`) is set. With `below` `None`,
/// the loop adds each word after a top bit as it reads the word. With
/// `Some(b)`, bit `t` of `b` is the bit below word `first + t` (bit 0:
/// `carry`) and the caller's `mask` already covers the words after top
/// bits: then the next word to visit never waits on a load, and a word's
/// edges need only its own. The table builder's
/// sparse batches, and the one-pass harvest's (which reads the OR of two
/// logs and counts KVM's pages as it visits).
///
/// # Safety
/// As [`emit_batch`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) unsafe fn emit_sparse<V: Vector, const U: usize>(
    first: usize,
    n: usize,
    mut mask: u64,
    carry: u64,
    below: Option<u64>,
    word: impl Fn(usize) -> u64,
    mut visit: impl FnMut(usize),
    out: *mut u64,
    k: &mut usize,
) {
    while mask != 0 {
        let t = mask.trailing_zeros() as usize;
        mask &= mask - 1;
        visit(t);
        let w = word(t);
        let below = match below {
            Some(b) => (b >> t) & 1,
            None => {
                if w >> 63 != 0 && t + 1 < n {
                    mask |= 1 << (t + 1);
                }
                if t == 0 {
                    carry
                } else {
                    word(t - 1) >> 63
                }
            }
        };
        // SAFETY: the caller's guarantee; a word adds at most 64 edges, 64
        // words at most.
        unsafe { emit_word::<V, U>((first + t) as u64 * 64, w ^ ((w << 1) | below), out, k) };
    }
}

/// Stage 2 of the table builder for one batch of `n` words from word
/// `first`: `edges[t]` is word `first + t`'s edge mask and bit `t` of `m`
/// is set when it is nonzero. The unconditional writes per word follow how
/// many words have edges: four in sparse batches, eight once more than 5/8
/// of the words have edges (about 2% dirty), and in dense batches (more
/// than 7/8) every word writes [`DENSE_WRITES`], with no mask loop.
///
/// # Safety
/// `out` must be valid for writes of slots `..*k + 2 * BATCH_ROOM - 1`.
#[inline(always)]
pub(super) unsafe fn emit_batch<V: Vector>(
    first: usize,
    n: usize,
    m: u64,
    edges: &[u64; BATCH],
    out: *mut u64,
    k: &mut usize,
) {
    let marked = m.count_ones() as usize;
    // SAFETY: at most 64 edges per word, 64 words: within
    // `2 * BATCH_ROOM - 1` slots of where the batch began.
    unsafe {
        if marked * 8 > n * 7 {
            for (t, &e) in edges[..n].iter().enumerate() {
                emit_word::<V, DENSE_WRITES>((first + t) as u64 * 64, e, out, k);
            }
        } else if marked * 8 > n * 5 {
            emit_marked::<V, 8>(first, m, edges, out, k);
        } else {
            emit_marked::<V, 4>(first, m, edges, out, k);
        }
    }
}

/// Ranges a batch of the table builder may write into: its edges (at most
/// 64 per word, two per range), the open run carried in, and the
/// unconditional writes past the last edge (at most 64 slots, as a word
/// with more edges than [`DENSE_WRITES`] writes only its own).
pub(super) const BATCH_ROOM: usize = BATCH * 32 + 8 + 1;

/// Edges (slots) a round of [`RangeScan::emit_into`] gathers before it
/// converts them (8 KiB: the round stays in the first-level cache).
const ROUND_SLOTS: usize = 1024;
/// Calls of [`RangeScan::batch`] per round of [`RangeScan::emit_into`], at
/// most (each one batch, or up to [`GATHER`] sparse ones).
const ROUND_BATCHES: usize = 8;
/// Ranges a round may write into: a batch begins below [`ROUND_SLOTS`] and
/// needs `2 * BATCH_ROOM - 1` slots from there.
const ROUND_ROOM: usize = ROUND_SLOTS / 2 + BATCH_ROOM;

/// Unconditional edge writes per word in a dense stretch.
const DENSE_WRITES: usize = 10;

/// The table builder's scan over words `[i, end)`: stage 1 as the edge
/// scanner's (keeping the edge masks), then each marked word writes its
/// edges straight into the table ([`generic::emit_edges`]) as raw bit
/// positions,
/// and the batch's complete ranges are converted to addresses in place
/// ([`finish`]) while they are still in the L1 cache. No edge buffer, no
/// pairing pass.
#[derive(Clone, Debug)]
pub(crate) struct RangeScan<W> {
    src: W,
    i: usize,
    end: usize,
    /// Bit 63 of the word before `i` (0 before the first word).
    carry: u64,
    level: Level,
    /// The last batch had at most one word in [`SPARSE_PART`] with edges,
    /// so the next one is tested for its nonzero words first (see
    /// [`RangeScan::batch`]).
    sparse: bool,
}

/// How far ahead of a batch the table builder asks for the bitmap's words:
/// 12 batches (6 KiB). A sparse batch does too little work between its
/// loads for the hardware prefetcher to stay ahead across 4 KiB pages; on
/// a 0.1% log read from memory (an Intel Xeon with AVX-512, nested, 32 MiB
/// on huge pages) this took the one-thread build from 6.1 to 4.7 ms.
/// Distances of 1 to 24 batches were tried; 8 to 16 were best.
const PREFETCH_AHEAD: usize = 12 * BATCH;

/// Asks for the lines of words `i..i + BATCH` of every part of `src`
/// ([`arch::prefetch`], at every level; a hint, so `i` may lie past the
/// end).
#[inline(always)]
fn prefetch_batch<W: Words>(src: W, i: usize) {
    let (a, b) = src.parts();
    for part in [Some(a), b].into_iter().flatten() {
        // Only computed (wrapping), never dereferenced here.
        let ahead = part.as_ptr().wrapping_add(i);
        for line in 0..BATCH / 8 {
            arch::prefetch(ahead.wrapping_add(8 * line));
        }
    }
}

/// A batch with at most one nonzero word in this many is emitted from its
/// nonzero words alone (a 0.1% random log has about one in sixteen).
const SPARSE_PART: usize = 8;

/// Sparse batches gathered into one emission loop
/// ([`RangeScan::gathered`]).
const GATHER: usize = 4;

impl<W: Words> RangeScan<W> {
    /// A scan of words `[from, end)`.
    pub(crate) fn new(src: W, from: usize, end: usize, level: Level) -> Self {
        let carry = src.carry_in(from);
        RangeScan {
            src,
            i: from,
            end,
            carry,
            level,
            sparse: true,
        }
    }

    /// One batch (and, after a batch without edges, the rest of its uniform
    /// stretch): appends its edges to slots `*k..` of `out`, the table seen
    /// as a flat array of `u64` (see [`generic::emit_edges`]), as raw bit
    /// positions.
    ///
    /// # Safety
    /// `out` must be valid for writes of slots `..*k + 2 * BATCH_ROOM - 1`.
    #[inline(always)]
    unsafe fn batch<V: Vector>(&mut self, out: *mut u64, k: &mut usize) {
        if V::COMPRESS && self.sparse && self.end - self.i >= GATHER * BATCH {
            // SAFETY: the caller's guarantee. (It asks for each batch's
            // lines ahead itself.)
            if unsafe { self.gathered::<V>(out, k) } {
                return;
            }
        }
        let src = self.src;
        let n = BATCH.min(self.end - self.i);
        prefetch_batch(src, self.i + PREFETCH_AHEAD);
        if self.sparse {
            // After a sparse batch, find this one's nonzero words first:
            // if few, only they (and a word after one whose top bit is
            // set, where a run ends) get edge masks, computed one by one.
            // At one lane per step (scalar) the emission follows the top
            // bits itself: a second test of every word cost more there (a
            // 0.1% log's build took 10.4 ms against 8.7) than the wait on
            // each marked word's load. Vector levels mark the words after
            // top bits up front (2.95 to 2.4 ms at AVX-512, from cache).
            let follow = V::LANES == 1;
            let (nonzero, top) = if follow {
                (generic::nonzero_words::<V, _>(src, self.i, n), 0)
            } else {
                generic::nonzero_and_top_words::<V, _>(src, self.i, n)
            };
            if nonzero.count_ones() as usize * SPARSE_PART <= n {
                let carry = src.word(self.i + n - 1) >> 63;
                // A run open into the batch ends in (or goes through) its
                // first word; one open past a word's top bit, in (or
                // through) the next word.
                let live = u64::MAX >> (64 - n);
                let below = (top << 1) | self.carry;
                let mask = nonzero | (below & live);
                let first = self.i;
                // SAFETY: the caller's guarantee.
                unsafe {
                    emit_sparse::<V, 4>(
                        first,
                        n,
                        mask,
                        self.carry,
                        (!follow).then_some(below),
                        |t| src.word(first + t),
                        |_| {},
                        out,
                        k,
                    )
                };
                self.i += n;
                self.carry = carry;
                if mask == 0 {
                    self.i = past_uniform(src, self.i, self.end, carry, self.level);
                }
                return;
            }
        }
        let mut edges = [0u64; BATCH];
        let (m, carry) = generic::marks_edges::<V, _>(src, self.i, n, self.carry, &mut edges);
        self.sparse = m.count_ones() as usize * SPARSE_PART <= n;
        // SAFETY: the caller's guarantee.
        unsafe { emit_batch::<V>(self.i, n, m, &edges, out, k) };
        self.i += n;
        self.carry = carry;
        if m == 0 {
            self.i = past_uniform(src, self.i, self.end, carry, self.level);
        }
    }

    /// Up to [`GATHER`] whole sparse batches at once (levels whose expand
    /// is one compress, [`Vector::COMPRESS`]: AVX-512; at least `GATHER`
    /// batches left): each batch's marked words (its nonzero
    /// words and the words after top bits, as in [`RangeScan::batch`]) go
    /// into one list of word places, written without a loop
    /// ([`emit_word`] with the batch's place as `pos`), and one loop over
    /// the list emits them. The loop's exit, the one branch that follows
    /// how many words a batch marks, then mispredicts once per list, not
    /// once per batch. Stops at the first batch that is not sparse (left to
    /// [`RangeScan::batch`]) or has no marked word (its uniform stretch is
    /// skipped). A batch that is not sparse clears `self.sparse`, so the
    /// next call tests it once, for its edge masks. Returns `false` when
    /// the first batch is not sparse (nothing else done).
    ///
    /// # Safety
    /// As [`RangeScan::batch`]: `out` valid for writes of slots
    /// `..*k + 2 * BATCH_ROOM - 1`. A sparse batch has at most
    /// `BATCH / SPARSE_PART` nonzero words (64 edges each at most) and one
    /// more zero word marked than that (after each top bit, and word 0 for
    /// a run carried in; one edge each), so `GATHER` of them write at most
    /// `GATHER * (8 * 64 + 9)` edges, and the last word is given 64 slots
    /// from its first ([`emit_word`]'s contract).
    #[inline(always)]
    unsafe fn gathered<V: Vector>(&mut self, out: *mut u64, k: &mut usize) -> bool {
        const {
            let part = BATCH / SPARSE_PART;
            assert!(GATHER * (part * 64 + part + 1) + 64 < 2 * BATCH_ROOM)
        };
        let src = self.src;
        let first = self.i;
        // Word places (from `first`) of the marked words, in order.
        let mut list = core::mem::MaybeUninit::<[u64; GATHER * BATCH]>::uninit();
        let listp = list.as_mut_ptr().cast::<u64>();
        let mut len = 0;
        // Bit `t` of `below[g]`: the bit below word `first + 64g + t`.
        let mut below = [0u64; GATHER];
        let mut skip = false;
        let mut g = 0;
        while g < GATHER {
            prefetch_batch(src, self.i + PREFETCH_AHEAD);
            let (nonzero, top) = generic::nonzero_and_top_words::<V, _>(src, self.i, BATCH);
            if nonzero.count_ones() as usize * SPARSE_PART > BATCH {
                // `batch` scans it next, for its edge masks.
                self.sparse = false;
                break;
            }
            let b = (top << 1) | self.carry;
            let mask = nonzero | b;
            below[g] = b;
            // SAFETY: `len` is at most `64g` (a batch marks at most 64
            // words), so 64 slots from it end by `64 * GATHER`, within
            // `list`.
            unsafe {
                emit_word::<V, 4>((g * BATCH) as u64, mask, listp, &mut len);
            }
            self.carry = src.word(self.i + BATCH - 1) >> 63;
            self.i += BATCH;
            g += 1;
            if mask == 0 {
                skip = true;
                break;
            }
        }
        if g == 0 {
            return false;
        }
        for j in 0..len {
            // SAFETY: slots `..len` were written.
            let t = unsafe { listp.add(j).read() } as usize;
            let w = src.word(first + t);
            let b = (below[t / BATCH] >> (t % BATCH)) & 1;
            // SAFETY: the caller's guarantee; see the bound above.
            unsafe { emit_word::<V, 4>((first + t) as u64 * 64, w ^ ((w << 1) | b), out, k) };
        }
        if skip {
            self.i = past_uniform(src, self.i, self.end, self.carry, self.level);
        }
        true
    }

    /// Whether every word has been scanned.
    fn done(&self) -> bool {
        self.i >= self.end
    }

    /// Runs the scan to its end, appending each complete range to `out`
    /// (converted by `shift` and `base`). `open`: the start of a run still
    /// open at the scan's first word, if any. Batches go in rounds of up to
    /// [`ROUND_BATCHES`] (or [`ROUND_SLOTS`] edges), each round's ranges
    /// converted at its end. Calls `flush` with `out` after every round (it
    /// may drain `out`). Once `out` holds [`STREAM_FROM`] ranges, at levels
    /// with streaming stores the rest goes through [`RangeScan::stream_into`].
    /// Returns the start of the run still open at the end, if any.
    #[inline(always)]
    fn emit_into<V: Vector>(
        &mut self,
        out: &mut alloc::vec::Vec<MemoryRange>,
        shift: u32,
        base: u64,
        mut open: Option<u64>,
        mut flush: impl FnMut(&mut alloc::vec::Vec<MemoryRange>),
    ) -> Option<u64> {
        while !self.done() {
            if V::STREAMS && out.len() >= STREAM_FROM {
                return self.stream_into::<V>(out, shift, base, open, flush);
            }
            out.reserve(ROUND_ROOM);
            let len = out.len();
            let p = out.spare_capacity_mut().as_mut_ptr().cast::<MemoryRange>();
            // SAFETY: `reserve` made room for `ROUND_ROOM` ranges at `p`.
            let ne = unsafe { self.round::<V>(p, &mut open, shift, base) };
            // SAFETY: the round initialised ranges `len..len + ne`.
            unsafe { out.set_len(len + ne) };
            flush(out);
        }
        open
    }

    /// One round into the ranges at `p`: batches until it holds
    /// [`ROUND_SLOTS`] edges (or has [`ROUND_BATCHES`] batches), then one
    /// conversion (at 1% dirty a batch has about 80 edges, and reserving,
    /// converting and updating the length once per batch cost 6% of the
    /// build). `open` is the run open before the round (its start goes in
    /// slot 0) and after it. Returns how many ranges it completed at `p`.
    ///
    /// # Safety
    /// `p` must be valid for writes of [`ROUND_ROOM`] ranges.
    #[inline(always)]
    unsafe fn round<V: Vector>(
        &mut self,
        p: *mut MemoryRange,
        open: &mut Option<u64>,
        shift: u32,
        base: u64,
    ) -> usize {
        let flat = p.cast::<u64>();
        let mut k = 0;
        if let Some(s) = *open {
            // SAFETY: the caller's room; slot 0 is the first range's `gpa`.
            unsafe { flat.write(s) };
            k = 1;
        }
        for _ in 0..ROUND_BATCHES {
            // SAFETY: the batch begins at slot `k < ROUND_SLOTS`; the room
            // it needs is `2 * BATCH_ROOM - 1` slots past that, within the
            // `2 * ROUND_ROOM` of the caller's room.
            unsafe { self.batch::<V>(flat, &mut k) };
            if self.done() || k >= ROUND_SLOTS {
                break;
            }
        }
        let ne = k / 2;
        // SAFETY: slots `..k` hold edges, so ranges `..k / 2` had their
        // start and end written and are initialised; all lie within the
        // caller's room.
        unsafe { finish::<V>(p, ne, shift, base) };
        *open = if k % 2 == 1 {
            // SAFETY: slot `k - 1` (an open run's start) was written.
            Some(unsafe { flat.add(k - 1).read() })
        } else {
            None
        };
        ne
    }

    /// The rest of [`RangeScan::emit_into`] for a large table: rounds go
    /// into a staging buffer (the part a round touches stays in the
    /// first-level cache), and every [`STREAM_BATCH`] ranges its whole
    /// 64-byte lines are appended to `out` with streaming stores
    /// ([`Vector::stream_lines`]), so the table's lines are not read from
    /// memory before they are written (an ordinary store reads its line
    /// first, and may first have to write back a dirty line it evicts).
    /// Where `out`'s buffer is off a range's size (16 bytes) no line holds
    /// whole ranges, and [`append_lines`] copies instead. The stores are
    /// fenced ([`Vector::store_fence`]) before anything reads or moves
    /// `out`: before a `reserve` that reallocates, and at the end, before
    /// `flush` is called, once (no caller that drains `out` in its `flush`
    /// lets it grow this large: see `BLOCK_FLUSH`).
    #[inline(always)]
    fn stream_into<V: Vector>(
        &mut self,
        out: &mut alloc::vec::Vec<MemoryRange>,
        shift: u32,
        base: u64,
        mut open: Option<u64>,
        mut flush: impl FnMut(&mut alloc::vec::Vec<MemoryRange>),
    ) -> Option<u64> {
        let mut stage: alloc::vec::Vec<MemoryRange> =
            alloc::vec::Vec::with_capacity(STREAM_BATCH + ROUND_ROOM);
        let at = stage.as_mut_ptr();
        // Ranges converted and waiting at `stage[..held]` (length 0 all
        // along: the capacity is used as raw room).
        let mut held = 0;
        while !self.done() {
            // SAFETY: `held < STREAM_BATCH` here, so `ROUND_ROOM` ranges
            // from `held` lie within the capacity.
            held += unsafe { self.round::<V>(at.add(held), &mut open, shift, base) };
            if held >= STREAM_BATCH {
                // SAFETY: ranges `..held` of the stage are initialised.
                held = unsafe { append_lines::<V>(out, at, held) };
            }
        }
        // The streamed lines are ordered before any other access to `out`
        // (the `reserve` below may move them).
        V::store_fence();
        // SAFETY: `reserve` makes room for `held` ranges past the length;
        // ranges `..held` of the stage are initialised, and the stage is
        // apart from `out`.
        unsafe {
            out.reserve(held);
            let len = out.len();
            core::ptr::copy_nonoverlapping(at, out.as_mut_ptr().add(len), held);
            out.set_len(len + held);
        }
        flush(out);
        open
    }
}

/// Bytes of a [`MemoryRange`].
const RANGE_BYTES: usize = core::mem::size_of::<MemoryRange>();

/// Bytes of a cache line, the unit of [`Vector::stream_lines`].
const LINE_BYTES: usize = 64;

/// Ranges of the table from which the builder streams its stores (see
/// [`RangeScan::stream_into`]): 16 MiB, past a server's share of its
/// last-level cache. A table that stays in the cache is better written
/// with ordinary stores: streaming a 0.1% table (4 MiB, rewritten each
/// round) from 256 KiB on made its build 15% slower on an
/// Intel Xeon with AVX-512, nested, while from 16 MiB the 1% and 5% builds
/// (42 and 200 MB) went from 9.4 to 6.9 ms and from 36 to 21 ms. Unit
/// tests stream from 16 Ki ranges, to reach the streaming path on small
/// logs.
#[cfg(not(test))]
pub(super) const STREAM_FROM: usize = 1 << 20;
#[cfg(test)]
pub(super) const STREAM_FROM: usize = 16 << 10;

/// Ranges [`RangeScan::stream_into`] gathers before it appends them (4
/// KiB): a round at 0.1% dirty completes about 30.
const STREAM_BATCH: usize = 256;

/// Appends the first `held` ranges at `stage` to `out`: ordinary stores up
/// to `out`'s next line boundary, then as many whole lines as there are
/// with [`Vector::stream_lines`]; moves the rest (less than a line) to the
/// front of the stage and returns how many they are.
///
/// # Safety
/// Ranges `..held` at `stage` are initialised and apart from `out`.
#[inline(always)]
unsafe fn append_lines<V: Vector>(
    out: &mut alloc::vec::Vec<MemoryRange>,
    stage: *mut MemoryRange,
    held: usize,
) -> usize {
    if out.capacity() - out.len() < held {
        // `reserve` will move the lines streamed so far: they must be
        // visible to its copy.
        V::store_fence();
    }
    out.reserve(held);
    let len = out.len();
    let dst = out.as_mut_ptr().wrapping_add(len);
    let per_line = LINE_BYTES / RANGE_BYTES;
    // A buffer moved by `reserve` to an address off a range's size (an
    // allocator may align it to 8 bytes only) has no line of whole ranges:
    // then all go with ordinary stores.
    let (lead, lines) = if (dst as usize).is_multiple_of(RANGE_BYTES) {
        let lead = ((LINE_BYTES - dst as usize % LINE_BYTES) % LINE_BYTES / RANGE_BYTES).min(held);
        (lead, (held - lead) / per_line * per_line)
    } else {
        (held, 0)
    };
    // SAFETY: `reserve` made room for `held` ranges at `dst`; the caller
    // guarantees `..held` initialised at `stage`, apart from `out`.
    // With `lines > 0`, `dst + lead` is on a line: `dst` is on a range's
    // size, and `lead` ranges reach the next boundary. `lines` ranges are
    // whole lines of words (a multiple of 8), and the rest, fewer than a
    // line's, move to the front (`ptr::copy`: they may overlap only when
    // `held` is small).
    unsafe {
        core::ptr::copy_nonoverlapping(stage, dst, lead);
        if lines > 0 {
            let words = core::slice::from_raw_parts(stage.add(lead).cast::<u64>(), 2 * lines);
            V::stream_lines(words, dst.add(lead).cast::<u64>());
        }
        out.set_len(len + lead + lines);
        let done = lead + lines;
        core::ptr::copy(stage.add(done), stage, held - done);
        held - done
    }
}

/// Converts ranges `..n` at `p` from raw bit positions (start in `gpa`, end
/// in `length`) to addresses and lengths in bytes ([`Vector::pairs_to_ranges`]).
///
/// # Safety
/// `p` must be valid for reads and writes of `n` initialised ranges.
#[inline(always)]
pub(super) unsafe fn finish<V: Vector>(p: *mut MemoryRange, n: usize, shift: u32, base: u64) {
    // SAFETY: the caller guarantees `n` initialised ranges at `p`; a range
    // is two `u64`s (`#[repr(C)]`).
    let pairs = unsafe { core::slice::from_raw_parts_mut(p.cast::<u64>(), 2 * n) };
    V::pairs_to_ranges(pairs, shift, base);
}

/// The serial table builder: appends one range per maximal run of `src` to
/// `out`. The scan, the stores into the table and their conversion all run
/// inside one function compiled for the level (see `arch::run`).
pub(crate) fn extend_ranges<W: Words>(
    src: W,
    level: Level,
    out: &mut alloc::vec::Vec<MemoryRange>,
    shift: u32,
    base: u64,
) {
    let n = src.len();
    if let Some(start) = extend_part(src, 0, n, level, out, shift, base) {
        // The last run is still open at the end of the bitmap.
        out.push(super::memory_range::range_of(
            start,
            n as u64 * 64,
            shift,
            base,
        ));
    }
}

/// Appends to `out` the ranges of words `[lo, hi)` of `src` in one pass,
/// as the serial builder does over the whole bitmap: one part of the
/// one-pass parallel split. A run open at `lo` (bit 63 of word `lo - 1`
/// set) is scanned from a placeholder start at bit `64 * lo`, so if it
/// ends inside the part, the first range appended is the rest of an
/// earlier part's run, beginning at word `lo`'s first page. Returns the
/// start (a bit position) of the run still open at `hi`, if any, which may
/// be that placeholder; the caller joins the parts' runs across their
/// seams.
#[allow(clippy::too_many_arguments)]
pub(crate) fn extend_part<W: Words>(
    src: W,
    lo: usize,
    hi: usize,
    level: Level,
    out: &mut alloc::vec::Vec<MemoryRange>,
    shift: u32,
    base: u64,
) -> Option<u64> {
    arch::run(
        level,
        ExtendPart {
            src,
            lo,
            hi,
            level,
            out,
            shift,
            base,
        },
    )
}

/// The job of [`extend_part`].
struct ExtendPart<'o, W> {
    src: W,
    lo: usize,
    hi: usize,
    level: Level,
    out: &'o mut alloc::vec::Vec<MemoryRange>,
    shift: u32,
    base: u64,
}

impl<W: Words> Job for ExtendPart<'_, W> {
    type Output = Option<u64>;
    #[inline(always)]
    fn run<V: Vector>(self) -> Option<u64> {
        let ExtendPart {
            src,
            lo,
            hi,
            level,
            out,
            shift,
            base,
        } = self;
        let mut s = RangeScan::new(src, lo, hi, level);
        let open = (s.carry != 0).then_some(lo as u64 * 64);
        s.emit_into::<V>(out, shift, base, open, |_| {})
    }
}

/// The end (a bit position) of a run still open at word `hi`: the first
/// clean page at or after it, or the end of the bitmap.
#[cfg(feature = "rayon")]
fn run_end<W: Words>(src: W, hi: usize, level: Level) -> u64 {
    let n = src.len();
    match src.skip(hi, n, !0, level) {
        Some(j) => j as u64 * 64 + u64::from((!src.word(j)).trailing_zeros()),
        None => n as u64 * 64,
    }
}

/// Ranges a parallel block gathers before copying them to its share of the
/// table.
#[cfg(feature = "rayon")]
const BLOCK_FLUSH: usize = 2048;

// A parallel block's buffer, drained by its `flush` at [`BLOCK_FLUSH`],
// never reaches the streaming builder (whose `flush` comes only at its end).
#[cfg(feature = "rayon")]
const _: () = assert!(BLOCK_FLUSH + ROUND_ROOM < STREAM_FROM);

/// Writes the ranges that start in words `[lo, hi)` of `src` into `out`, in
/// order, and returns how many it wrote (the parallel table builder's second
/// pass). A run open at `lo` belongs to an earlier block; a run still open at
/// `hi` is followed past the block to its end. The ranges are gathered in a
/// small buffer and copied into `out` (whose length is exact: nothing may be
/// written past it).
#[cfg(feature = "rayon")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_block<W: Words>(
    src: W,
    lo: usize,
    hi: usize,
    out: &mut [core::mem::MaybeUninit<MemoryRange>],
    shift: u32,
    base: u64,
    level: Level,
) -> usize {
    arch::run(
        level,
        WriteBlock {
            src,
            lo,
            hi,
            out,
            shift,
            base,
            level,
        },
    )
}

/// The job of [`write_block`].
#[cfg(feature = "rayon")]
struct WriteBlock<'o, W> {
    src: W,
    lo: usize,
    hi: usize,
    out: &'o mut [core::mem::MaybeUninit<MemoryRange>],
    shift: u32,
    base: u64,
    level: Level,
}

#[cfg(feature = "rayon")]
impl<W: Words> Job for WriteBlock<'_, W> {
    type Output = usize;
    #[inline(always)]
    fn run<V: Vector>(self) -> usize {
        let WriteBlock {
            src,
            lo,
            hi,
            out,
            shift,
            base,
            level,
        } = self;
        let mut s = RangeScan::new(src, lo, hi, level);
        // A run open at `lo` is an earlier block's: it is scanned with a
        // placeholder start, and its range (the first complete one) dropped.
        let carried = s.carry != 0;
        let mut skip = usize::from(carried);
        let mut buf = alloc::vec::Vec::with_capacity(BLOCK_FLUSH + ROUND_ROOM);
        let mut w = 0;
        let mut put = |buf: &mut alloc::vec::Vec<MemoryRange>| {
            let from = skip.min(buf.len());
            skip -= from;
            for r in &buf[from..] {
                if let Some(slot) = out.get_mut(w) {
                    slot.write(*r);
                }
                w += 1;
            }
            buf.clear();
        };
        let open = s.emit_into::<V>(
            &mut buf,
            shift,
            base,
            carried.then_some(lo as u64 * 64),
            |b| {
                if b.len() >= BLOCK_FLUSH {
                    put(b)
                }
            },
        );
        put(&mut buf);
        if let Some(start) = open {
            // The last run starts here (unless it is the placeholder, which
            // no real start can equal: bit `64 * lo` would be an end) and is
            // still open at `hi`: it ends at the first clean page after the
            // block, or at the end of the bitmap.
            if !(carried && start == lo as u64 * 64) {
                let end = run_end(src, hi, level);
                buf.push(super::memory_range::range_of(start, end, shift, base));
                put(&mut buf);
            }
        }
        w
    }
}

#[cfg(test)]
mod tests {
    //! The scanner's entry points at every level against a bit-at-a-time
    //! model, on one bitmap and on the OR of two.
    use super::*;
    use crate::dirty::MemoryRange;
    use crate::test_rng::Rng;
    use alloc::vec::Vec;

    /// `n` words of alternating runs, each 1..=2 * `mean` bits long.
    fn random_words(rng: &mut Rng, n: usize, mean: u64) -> Vec<u64> {
        let mut w = alloc::vec![0u64; n];
        let (mut i, mut v) = (0usize, rng.below(2) == 1);
        while i < 64 * n {
            let len = 1 + rng.below(2 * mean) as usize;
            for b in i..(i + len).min(64 * n) {
                if v {
                    w[b / 64] |= 1 << (b % 64);
                }
            }
            i += len;
            v = !v;
        }
        w
    }

    /// Maximal runs of set bits, as pages from 0 with 1-byte pages.
    fn model(w: &[u64]) -> Vec<MemoryRange> {
        let mut out: Vec<MemoryRange> = Vec::new();
        for b in 0..64 * w.len() as u64 {
            if w[(b / 64) as usize] >> (b % 64) & 1 == 1 {
                match out.last_mut() {
                    Some(r) if r.end() == b => r.length += 1,
                    _ => out.push(MemoryRange { gpa: b, length: 1 }),
                }
            }
        }
        out
    }

    /// The ranges through `fill`, from a scanner over all words.
    fn via_fill<W: Words>(src: W, level: Level) -> Vec<MemoryRange> {
        let mut s = Scanner::new(src, 0, src.len(), level, true);
        let mut buf = alloc::vec![0u64; BUF];
        let mut edges = Vec::new();
        let mut k = 0;
        loop {
            k = fill(&mut s, &mut buf, k);
            edges.extend_from_slice(&buf[..k]);
            k = 0;
            if s.done() {
                break;
            }
        }
        edges
            .chunks_exact(2)
            .map(|p| super::super::memory_range::range_of(p[0], p[1], 0, 0))
            .collect()
    }

    fn check<W: Words>(src: W, want: &[MemoryRange], what: &str) {
        for level in Level::available() {
            assert_eq!(via_fill(src, level), want, "fill at {level}: {what}");
            let mut out = Vec::new();
            extend_ranges(src, level, &mut out, 0, 0);
            assert_eq!(out, want, "extend_ranges at {level}: {what}");
            #[cfg(feature = "rayon")]
            for (from, end) in [(0, src.len()), (src.len() / 3, src.len()), (1, 9)] {
                let (from, end) = (from.min(src.len()), end.min(src.len()));
                let mut carry = if from == 0 {
                    0
                } else {
                    src.word(from - 1) >> 63
                };
                let mut n = 0;
                for j in from..end {
                    let w = src.word(j);
                    n += (w ^ (w << 1 | carry)).count_ones() as usize;
                    carry = w >> 63;
                }
                let got = count_edges(src, from, end, level);
                assert_eq!(got, n, "count_edges({from}..{end}) at {level}: {what}");
            }
        }
    }

    #[test]
    fn every_level_matches_the_model() {
        crate::arch::note_skipped_levels();
        let mut rng = Rng(0x5CA2_D1E7);
        for case in 0..300 {
            let n = rng.below(300) as usize;
            let mean = [1, 3, 40, 500, 5000][case % 5];
            let a = random_words(&mut rng, n, mean);
            let b = random_words(&mut rng, n, mean);
            check(One(&a), &model(&a), &alloc::format!("one, case {case}"));
            let or: Vec<u64> = a.iter().zip(&b).map(|(x, y)| x | y).collect();
            let src = Or::new(&a, &b).unwrap();
            check(src, &model(&or), &alloc::format!("or, case {case}"));
        }
    }

    /// Sparse batches (at most one nonzero word in [`SPARSE_PART`]) whose
    /// few nonzero words are busy: up to 64 edges in one word, runs into
    /// and out of the top bit, whole words dirty.
    #[test]
    fn sparse_batches_with_busy_words_match_the_model() {
        let mut rng = Rng(0x0B5E_55ED);
        let busy = [
            0x5555_5555_5555_5555u64,
            0xAAAA_AAAA_AAAA_AAAA,
            !0,
            1 << 63,
            0x8000_0000_0000_0001,
            0x0F0F_0F0F_0F0F_0F0F,
        ];
        for case in 0..200 {
            let n = 64 + rng.below(512) as usize;
            let mut w = alloc::vec![0u64; n];
            for _ in 0..n / (2 * SPARSE_PART) {
                let i = rng.below(n as u64) as usize;
                w[i] = match rng.below(3) {
                    0 => busy[rng.below(busy.len() as u64) as usize],
                    1 => rng.below(u64::MAX) | 1 << rng.below(64),
                    _ => 1 << rng.below(64),
                };
            }
            check(
                One(&w),
                &model(&w),
                &alloc::format!("busy sparse, case {case}"),
            );
        }
    }

    /// Long stretches of sparse batches, which vector levels with a
    /// compress gather [`GATHER`] at a time ([`RangeScan::gathered`]):
    /// each batch of a stretch drawn as sparse (a few single bits, runs
    /// across the top bit into the next batch, busy words), empty (its
    /// uniform stretch is skipped mid-gather), dense (the gather stops
    /// before it) or wholly dirty, in every order, from every start
    /// within a batch.
    #[test]
    fn gathered_sparse_batches_match_the_model() {
        let mut rng = Rng(0x6A7E_E4ED);
        for case in 0..300 {
            let batches = 1 + rng.below(3 * GATHER as u64) as usize;
            let n = batches * BATCH + rng.below(BATCH as u64) as usize;
            let mut w = alloc::vec![0u64; n];
            for b in 0..batches {
                let words = &mut w[b * BATCH..(b + 1) * BATCH];
                match rng.below(7) {
                    // Sparse: single bits, some on the top bit (a run into
                    // the next word or batch) or on bit 0.
                    0..=2 => {
                        for _ in 0..rng.below(BATCH as u64 / SPARSE_PART as u64 + 1) {
                            let t = rng.below(BATCH as u64) as usize;
                            words[t] |= match rng.below(4) {
                                0 => 1 << 63,
                                1 => 1,
                                2 => !0 << rng.below(64),
                                _ => 1 << rng.below(64),
                            };
                        }
                    }
                    3 => {}
                    4 => {
                        for x in words.iter_mut() {
                            *x = rng.below(u64::MAX);
                        }
                    }
                    5 => words.fill(!0),
                    // The most edges a sparse batch has: one word in
                    // eight with 64 (`0xAAAA…` ends in a top bit, so the
                    // zero word after it is marked too); a run carried
                    // into word 0 where the batch before ends dirty.
                    _ => {
                        for t in (0..BATCH).step_by(SPARSE_PART) {
                            words[t + SPARSE_PART - 2] = 0xAAAA_AAAA_AAAA_AAAA;
                        }
                    }
                }
            }
            let want = model(&w);
            check(One(&w), &want, &alloc::format!("gathered, case {case}"));
            // The OR of two logs (the one-pass harvest's source), each
            // sparse where `w` is.
            let half: Vec<u64> = w.iter().map(|x| x & rng.below(u64::MAX)).collect();
            let or = Or::new(&w, &half).unwrap();
            check(or, &want, &alloc::format!("gathered, or, case {case}"));
            // From inside a batch, as the parallel scan's blocks and a
            // resumed harvest start.
            let from = rng.below(BATCH as u64) as usize;
            let tail = &w[from..];
            check(
                One(tail),
                &model(tail),
                &alloc::format!("gathered from {from}, case {case}"),
            );
        }
    }

    /// Tables past [`STREAM_FROM`] ranges: the rest is staged and its
    /// whole lines streamed ([`RangeScan::stream_into`]), at every level,
    /// into a table that already holds 0 to 3 ranges (each place in a
    /// line) or more than the threshold, with remainders of every size.
    #[test]
    fn large_tables_stream_their_lines_at_every_level() {
        let mut rng = Rng(0x57_4EA3);
        let filler = MemoryRange { gpa: 7, length: 9 };
        for case in 0..8 {
            // About 16 bits a run, two runs an edge pair: `n` words give
            // about `2 * n` ranges, past the threshold for every `pre`.
            let n = STREAM_FROM / 2 + 4 * STREAM_BATCH + rng.below(4096) as usize;
            let w = random_words(&mut rng, n, 16);
            let want = model(&w);
            // Past the switch (within a round of `STREAM_FROM`), several
            // batches of lines go out streamed.
            assert!(want.len() > STREAM_FROM + 4 * STREAM_BATCH, "case {case}");
            for level in Level::available() {
                for pre in [0, 1, 2, 3, STREAM_FROM + case] {
                    let mut out = alloc::vec![filler; pre];
                    extend_ranges(One(&w), level, &mut out, 0, 0);
                    assert!(out[..pre].iter().all(|r| *r == filler));
                    assert_eq!(
                        out[pre..],
                        want[..],
                        "case {case} at {level} after {pre} ranges"
                    );
                }
            }
        }
    }
}
