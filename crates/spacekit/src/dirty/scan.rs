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
//! A batch without edges is part of a uniform stretch (all clean, or all dirty
//! inside a run); the rest of the stretch is skipped with the bitmap engine's
//! SIMD search, so clean and fully dirty bitmaps scan at memory speed.
//!
//! The parallel scan sizes each block's share of the output first with
//! `count_edges`, a branch-free popcount of the edge masks.

use crate::bitmap::Backend;

use super::DirtyError;

/// Edge positions buffered before they are paired into ranges.
pub(crate) const BUF: usize = 1024;

/// Words per batch.
const BATCH: usize = 64;

/// The bitmap words a scan reads: one bitmap, or the OR of two.
pub(crate) trait Words: Copy + Send + Sync {
    /// Number of words.
    fn len(self) -> usize;
    /// Word `i` (`i < len`).
    fn word(self, i: usize) -> u64;
    /// First index in `[from, end)` whose word differs from `x`.
    fn skip(self, from: usize, end: usize, x: u64, be: Backend) -> Option<usize>;
    /// Words `i..i + 4` as one vector.
    ///
    /// # Safety
    /// `i + 4 <= self.len()`, and AVX2 must be available: call only from
    /// `#[target_feature(enable = "avx2")]` code, into which this inlines.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load4(self, i: usize) -> core::arch::x86_64::__m256i;
}

/// One bitmap.
#[derive(Clone, Copy, Debug)]
pub(crate) struct One<'a>(pub(crate) &'a [u64]);

impl Words for One<'_> {
    #[inline(always)]
    fn len(self) -> usize {
        self.0.len()
    }
    #[inline(always)]
    fn word(self, i: usize) -> u64 {
        self.0[i]
    }
    #[inline(always)]
    fn skip(self, from: usize, end: usize, x: u64, be: Backend) -> Option<usize> {
        crate::bitmap::skip_words(self.0, from, end, x, be)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load4(self, i: usize) -> core::arch::x86_64::__m256i {
        use core::arch::x86_64::*;
        debug_assert!(i + 4 <= self.0.len());
        // SAFETY: the caller guarantees `i + 4 <= len` and AVX2; the load is
        // unaligned.
        unsafe { _mm256_loadu_si256(self.0.as_ptr().add(i).cast()) }
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

impl Words for Or<'_> {
    #[inline(always)]
    fn len(self) -> usize {
        self.0.len()
    }
    #[inline(always)]
    fn word(self, i: usize) -> u64 {
        self.0[i] | self.1[i]
    }
    #[inline(always)]
    fn skip(self, from: usize, end: usize, x: u64, _be: Backend) -> Option<usize> {
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
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load4(self, i: usize) -> core::arch::x86_64::__m256i {
        use core::arch::x86_64::*;
        debug_assert!(i + 4 <= self.0.len() && self.0.len() == self.1.len());
        // SAFETY: the caller guarantees `i + 4 <= len` (both slices have that
        // length, checked by `Or::new`) and AVX2; the loads are unaligned.
        unsafe {
            _mm256_or_si256(
                _mm256_loadu_si256(self.0.as_ptr().add(i).cast()),
                _mm256_loadu_si256(self.1.as_ptr().add(i).cast()),
            )
        }
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
    be: Backend,
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
    pub(crate) fn new(src: W, from: usize, end: usize, be: Backend, terminal: bool) -> Self {
        let carry = if from == 0 {
            0
        } else {
            src.word(from - 1) >> 63
        };
        Scanner {
            src,
            i: from,
            end,
            carry,
            be,
            terminal,
            mask: 0,
            mbase: 0,
            dense: false,
        }
    }

    /// Appends edge positions to `buf[k..]` until fewer than 65 slots remain
    /// or the scan ends; returns the new `k`. `buf.len()` must be `BUF`.
    /// `AVX`: the caller runs with AVX2, POPCNT and BMI1.
    #[inline(always)]
    fn fill<const AVX: bool>(&mut self, buf: &mut [u64], k: usize) -> usize {
        let mut k = k;
        let src = self.src;
        loop {
            // Expand the marked words while the buffer has room for a whole
            // word's edges (and the terminal edge). Dense batches write
            // eight positions unconditionally, sparse ones four, so that
            // the "more edges than that" branch stays rare in both.
            let mut mask = self.mask;
            while mask != 0 {
                if k + 65 > BUF {
                    self.mask = mask;
                    return k;
                }
                let j = self.mbase + mask.trailing_zeros() as usize;
                mask &= mask - 1;
                let w = src.word(j);
                let below = if j == 0 { 0 } else { src.word(j - 1) >> 63 };
                let e = w ^ ((w << 1) | below);
                let p = j as u64 * 64;
                k = if self.dense {
                    expand::<8>(p, e, buf, k)
                } else {
                    expand::<4>(p, e, buf, k)
                };
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
            let (m, carry) = marks::<W, AVX>(src, self.i, n, self.carry);
            self.mbase = self.i;
            self.mask = m;
            // Dense when more than 7/8 of the batch's words have edges.
            self.dense = m.count_ones() as usize * 8 > n * 7;
            self.i += n;
            self.carry = carry;
            if m == 0 {
                // A batch without edges: the rest of its uniform stretch
                // goes by at SIMD speed, with the carry unchanged.
                let x = carry.wrapping_neg();
                self.i = src.skip(self.i, self.end, x, self.be).unwrap_or(self.end);
            }
        }
    }

    /// Whether the scan has reached its end (and added any terminal edge).
    pub(crate) fn done(&self) -> bool {
        self.i >= self.end && !self.terminal && self.mask == 0
    }
}

/// Stage 1 over words `[i, i + n)` (`n <= 64`), `carry` the bit below word
/// `i`: bit `t` of the result is set when word `i + t` has edges. Also
/// returns the carry out (bit 63 of the last word).
#[inline(always)]
fn marks<W: Words, const AVX: bool>(src: W, i: usize, n: usize, carry: u64) -> (u64, u64) {
    let end = i + n;
    let mut j = i;
    let mut m = 0u64;
    let mut carry = carry;
    #[cfg(target_arch = "x86_64")]
    if AVX && n >= 5 {
        // The vector loop reads the word below each lane, so it starts at
        // word 1 at the earliest.
        if j == 0 {
            m = mark_word(src.word(0), carry);
            j = 1;
        }
        // SAFETY: `AVX` is only set by callers compiled with AVX2 and
        // POPCNT, which the CPU was checked to have; `1 <= j`, `j + 4 <= end
        // <= src.len()` (as `n >= 5`) and `end - i <= 64`.
        (m, j) = unsafe { marks_avx(src, i, j, end, m) };
        carry = src.word(j - 1) >> 63;
    }
    while j < end {
        let w = src.word(j);
        m |= mark_word(w, carry) << (j - i);
        carry = w >> 63;
        j += 1;
    }
    (m, carry)
}

/// 1 if word `w` (with `carry` the bit below it) has an edge, else 0.
#[inline(always)]
fn mark_word(w: u64, carry: u64) -> u64 {
    u64::from(w ^ ((w << 1) | carry) != 0)
}

/// The AVX2 stage 1 over words `j..` in steps of four while a whole step
/// fits before `end`, or-ing marks into `m` (bit `t` for word `i + t`);
/// returns the marks and the first word not done. The word below each lane
/// comes from rotating the current vector and taking the previous vector's
/// top lane, so each step loads once.
///
/// # Safety
/// AVX2 must be available; `i <= j`, `1 <= j`, `end <= src.len()` and
/// `end - i <= 64`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn marks_avx<W: Words>(
    src: W,
    i: usize,
    mut j: usize,
    end: usize,
    mut m: u64,
) -> (u64, usize) {
    use core::arch::x86_64::*;
    // SAFETY: the caller guarantees AVX2 and that words `j - 1 .. end`
    // exist; every step's load is of words `j..j + 4` with `j + 4 <= end`.
    unsafe {
        // Lane 3 of `rot` is the word below the next step's lane 0.
        let mut rot = _mm256_set1_epi64x(src.word(j - 1) as i64);
        while j + 4 <= end {
            let v = src.load4(j);
            // [v3, v0, v1, v2], then lane 0 from the previous vector's v3.
            let r = _mm256_permute4x64_epi64(v, 0b10_01_00_11);
            let below = _mm256_blend_epi32(r, rot, 0b0000_0011);
            rot = r;
            let e = _mm256_xor_si256(
                v,
                _mm256_or_si256(_mm256_slli_epi64(v, 1), _mm256_srli_epi64(below, 63)),
            );
            let zero = _mm256_cmpeq_epi64(e, _mm256_setzero_si256());
            let bits = (_mm256_movemask_pd(_mm256_castsi256_pd(zero)) as u32 ^ 0xF) as u64;
            m |= bits << (j - i);
            j += 4;
        }
        (m, j)
    }
}

/// Stage 2: writes the edge positions of mask `e` (word at bit `pos`) to
/// `buf[k..]`; needs 64 slots of room.
#[inline(always)]
fn expand<const U: usize>(pos: u64, mut e: u64, buf: &mut [u64], k: usize) -> usize {
    let n = e.count_ones() as usize;
    let s = &mut buf[k..k + 64];
    // `U` unconditional writes; a mask with fewer edges writes position
    // `pos + 64`, garbage past the live count that later words overwrite.
    for slot in &mut s[..U] {
        *slot = pos + u64::from(e.trailing_zeros());
        e &= e.wrapping_sub(1);
    }
    if n > U {
        let mut j = U;
        while e != 0 {
            s[j] = pos + u64::from(e.trailing_zeros());
            e &= e - 1;
            j += 1;
        }
    }
    k + n
}

/// Runs `Scanner::fill` compiled for the CPU `be` stands for: with AVX2,
/// POPCNT and BMI1 when `be` is the AVX2 backend and the CPU has BMI1,
/// portable otherwise.
#[inline]
pub(crate) fn fill<W: Words>(s: &mut Scanner<W>, buf: &mut [u64], k: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    if s.be.is_avx2() && has_bmi1() {
        // SAFETY: an AVX2 `Backend` is only built after AVX2 and POPCNT were
        // detected on this CPU (or are compile-time target features), and
        // BMI1 was just checked.
        return unsafe { fill_x86(s, buf, k) };
    }
    s.fill::<false>(buf, k)
}

/// Whether the CPU has BMI1 (`tzcnt`, `blsr`); std caches the answer.
#[cfg(target_arch = "x86_64")]
#[inline]
fn has_bmi1() -> bool {
    #[cfg(feature = "std")]
    {
        std::is_x86_feature_detected!("bmi1")
    }
    #[cfg(not(feature = "std"))]
    {
        cfg!(target_feature = "bmi1")
    }
}

/// # Safety
/// The CPU must support AVX2, POPCNT and BMI1.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt,bmi1")]
unsafe fn fill_x86<W: Words>(s: &mut Scanner<W>, buf: &mut [u64], k: usize) -> usize {
    s.fill::<true>(buf, k)
}

/// Number of edges in words `[from, end)` (no terminal edge): one popcount
/// per word, no branches, so the parallel scan's sizing pass costs little
/// more than reading the block.
#[cfg(feature = "rayon")]
pub(crate) fn count_edges<W: Words>(src: W, from: usize, end: usize, be: Backend) -> usize {
    #[cfg(target_arch = "x86_64")]
    if be.is_avx2() {
        // SAFETY: the AVX2 backend proves POPCNT.
        return unsafe { count_edges_x86(src, from, end) };
    }
    let _ = be;
    count_edges_impl(src, from, end)
}

/// AVX2 edge count: each step forms four words' edge masks as in
/// [`marks_avx`] and counts their bits with a nibble lookup (`vpshufb`)
/// summed by `vpsadbw`.
///
/// # Safety
/// The CPU must support AVX2 and POPCNT.
#[cfg(all(feature = "rayon", target_arch = "x86_64"))]
#[target_feature(enable = "avx2,popcnt")]
unsafe fn count_edges_x86<W: Words>(src: W, from: usize, end: usize) -> usize {
    // Short blocks stay scalar; the first block's first word (no word below
    // it) is counted on its own.
    if end < from + 8 {
        return count_edges_impl(src, from, end);
    }
    let head = usize::from(from == 0);
    // SAFETY: the caller guarantees AVX2 and POPCNT; `1 <= from + head <=
    // end <= src.len()`.
    count_edges_impl(src, from, from + head)
        + unsafe { count_edges_x86_body(src, from + head, end) }
}

/// # Safety
/// AVX2 and POPCNT; `1 <= from <= end <= src.len()`.
#[cfg(all(feature = "rayon", target_arch = "x86_64"))]
#[target_feature(enable = "avx2,popcnt")]
unsafe fn count_edges_x86_body<W: Words>(src: W, from: usize, end: usize) -> usize {
    use core::arch::x86_64::*;
    let mut j = from;
    let lut = _mm256_setr_epi8(
        0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3,
        3, 4,
    );
    let low = _mm256_set1_epi8(0x0f);
    let zero = _mm256_setzero_si256();
    let mut acc = zero;
    let mut rot = _mm256_set1_epi64x(src.word(j - 1) as i64);
    while j + 4 <= end {
        // SAFETY: AVX2 is enabled here and `j + 4 <= end <= src.len()`.
        let v = unsafe { src.load4(j) };
        let r = _mm256_permute4x64_epi64(v, 0b10_01_00_11);
        let below = _mm256_blend_epi32(r, rot, 0b0000_0011);
        rot = r;
        let e = _mm256_xor_si256(
            v,
            _mm256_or_si256(_mm256_slli_epi64(v, 1), _mm256_srli_epi64(below, 63)),
        );
        let lo = _mm256_and_si256(e, low);
        let hi = _mm256_and_si256(_mm256_srli_epi16(e, 4), low);
        let cnt = _mm256_add_epi8(_mm256_shuffle_epi8(lut, lo), _mm256_shuffle_epi8(lut, hi));
        acc = _mm256_add_epi64(acc, _mm256_sad_epu8(cnt, zero));
        j += 4;
    }
    let mut lanes = [0u64; 4];
    // SAFETY: `lanes` is 32 bytes; unaligned store.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), acc) };
    let n: u64 = lanes.iter().sum();
    n as usize + count_edges_impl(src, j, end)
}

#[cfg(feature = "rayon")]
#[inline(always)]
fn count_edges_impl<W: Words>(src: W, from: usize, end: usize) -> usize {
    let mut carry = if from == 0 {
        0
    } else {
        src.word(from - 1) >> 63
    };
    let mut n = 0usize;
    for j in from..end {
        let w = src.word(j);
        n += (w ^ ((w << 1) | carry)).count_ones() as usize;
        carry = w >> 63;
    }
    n
}

/// The serial table builder: appends one range per maximal run of `src` to
/// `out`. The scan, the pairing of edges and the stores into the table all
/// run inside one function compiled for the CPU (see [`fill`]).
pub(crate) fn extend_ranges<W: Words>(
    src: W,
    be: Backend,
    out: &mut alloc::vec::Vec<super::MemoryRange>,
    shift: u32,
    base: u64,
) {
    #[cfg(target_arch = "x86_64")]
    if be.is_avx2() && has_bmi1() {
        // SAFETY: as in `fill`: the AVX2 backend proves AVX2 and POPCNT,
        // and BMI1 was just checked.
        unsafe { extend_ranges_x86(src, be, out, shift, base) };
        return;
    }
    extend_ranges_impl::<W, false>(src, be, out, shift, base);
}

/// # Safety
/// The CPU must support AVX2, POPCNT and BMI1.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt,bmi1")]
unsafe fn extend_ranges_x86<W: Words>(
    src: W,
    be: Backend,
    out: &mut alloc::vec::Vec<super::MemoryRange>,
    shift: u32,
    base: u64,
) {
    extend_ranges_impl::<W, true>(src, be, out, shift, base);
}

#[inline(always)]
fn extend_ranges_impl<W: Words, const AVX: bool>(
    src: W,
    be: Backend,
    out: &mut alloc::vec::Vec<super::MemoryRange>,
    shift: u32,
    base: u64,
) {
    let mut buf = [0u64; BUF];
    let mut s = Scanner::new(src, 0, src.len(), be, true);
    let mut k = 0;
    loop {
        k = s.fill::<AVX>(&mut buf, k);
        let n = k / 2;
        out.reserve(n);
        let len = out.len();
        let spare = &mut out.spare_capacity_mut()[..n];
        for (slot, p) in spare.iter_mut().zip(buf[..2 * n].chunks_exact(2)) {
            slot.write(super::range_of(p[0], p[1], shift, base));
        }
        // SAFETY: `reserve(n)` made room for `n` more ranges and the loop
        // above initialised exactly those `n` slots.
        unsafe { out.set_len(len + n) };
        // An open run's start waits for its end in the next batch.
        if k % 2 == 1 {
            buf[0] = buf[k - 1];
        }
        k %= 2;
        if s.done() {
            break;
        }
    }
}
