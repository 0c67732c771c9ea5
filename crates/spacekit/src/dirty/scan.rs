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
//! This turns range extraction into writing out the set bits of one mask per
//! word, which is done without a data-dependent branch per word: the first
//! four edge positions are written unconditionally (a zero mask writes
//! garbage that the next word overwrites), and the running count advances by
//! the mask's popcount. Only words with more than four edges loop. Uniform
//! stretches (all clean, or all dirty inside a run) cost no per-word work:
//! four words are tested at once and longer stretches are skipped by the
//! bitmap engine's SIMD search.
//!
//! The same loop counts edges instead of writing them (`COUNT`), which is
//! how the parallel scan sizes each block's share of the output before any
//! thread writes.

use crate::bitmap::Backend;

use super::DirtyError;

/// Edge positions buffered before they are paired into ranges.
pub(crate) const BUF: usize = 1024;

/// Room a group of four words may need in the edge buffer: 64 edges each.
const GROUP_ROOM: usize = 4 * 64;

/// The bitmap words a scan reads: one bitmap, or the OR of two.
pub(crate) trait Words: Copy + Send + Sync {
    /// Number of words.
    fn len(self) -> usize;
    /// Word `i` (`i < len`).
    fn word(self, i: usize) -> u64;
    /// First index in `[from, end)` whose word differs from `x`.
    fn skip(self, from: usize, end: usize, x: u64, be: Backend) -> Option<usize>;
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
        // inside the `popcnt`/AVX2 instantiation of the scanner).
        let mut ca = a.chunks_exact(8);
        let mut cb = b.chunks_exact(8);
        let mut i = from;
        for (x8, y8) in (&mut ca).zip(&mut cb) {
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
    /// Whether the closing edge at `end` (for a run still open there) has
    /// been considered; only full scans (`terminal`) add it.
    terminal: bool,
}

impl<W: Words> Scanner<W> {
    /// A scan of words `[from, end)`. `terminal`: add an end edge at bit
    /// `64 * end` if the last run is still open there.
    pub(crate) fn new(src: W, from: usize, end: usize, be: Backend, terminal: bool) -> Self {
        let carry = if from == 0 { 0 } else { src.word(from - 1) >> 63 };
        Scanner {
            src,
            i: from,
            end,
            carry,
            be,
            terminal,
        }
    }

    /// Appends edge positions to `buf[k..]` until fewer than `GROUP_ROOM`
    /// slots remain or the scan ends; returns the new `k`. With `COUNT`,
    /// nothing is written and `k` just counts edges. `buf.len()` must be
    /// `BUF` (ignored with `COUNT`).
    #[inline(always)]
    pub(crate) fn fill<const COUNT: bool>(&mut self, buf: &mut [u64], mut k: usize) -> usize {
        let src = self.src;
        let end = self.end;
        while self.i < end {
            // Keeps room for a group's edges plus the terminal edge.
            if !COUNT && k >= BUF - GROUP_ROOM {
                return k;
            }
            let i = self.i;
            let x = self.carry.wrapping_neg();
            if i + 4 <= end {
                let w = [src.word(i), src.word(i + 1), src.word(i + 2), src.word(i + 3)];
                if (w[0] ^ x) | (w[1] ^ x) | (w[2] ^ x) | (w[3] ^ x) == 0 {
                    // Uniform stretch: the carry does not change across it.
                    self.i = src.skip(i + 4, end, x, self.be).unwrap_or(end);
                    continue;
                }
                for (j, &wv) in w.iter().enumerate() {
                    k = self.word_edges::<COUNT>(wv, (i + j) as u64 * 64, buf, k);
                }
                self.i = i + 4;
            } else {
                k = self.word_edges::<COUNT>(src.word(i), i as u64 * 64, buf, k);
                self.i = i + 1;
            }
        }
        if self.terminal {
            self.terminal = false;
            if self.carry != 0 {
                if !COUNT {
                    buf[k] = end as u64 * 64;
                }
                k += 1;
            }
        }
        k
    }

    /// Whether the scan has reached its end (and added any terminal edge).
    pub(crate) fn done(&self) -> bool {
        self.i >= self.end && !self.terminal
    }

    /// Writes (or counts) the edges of word `w` at bit position `pos`.
    #[inline(always)]
    fn word_edges<const COUNT: bool>(&mut self, w: u64, pos: u64, buf: &mut [u64], k: usize) -> usize {
        let mut e = w ^ ((w << 1) | self.carry);
        self.carry = w >> 63;
        let n = e.count_ones() as usize;
        if COUNT {
            return k + n;
        }
        let s = &mut buf[k..k + 64];
        // Four unconditional writes; a zero mask gives position `pos + 64`,
        // garbage past the live count that later words overwrite.
        for slot in &mut s[..4] {
            *slot = pos + u64::from(e.trailing_zeros());
            e &= e.wrapping_sub(1);
        }
        if n > 4 {
            let mut j = 4;
            while e != 0 {
                s[j] = pos + u64::from(e.trailing_zeros());
                e &= e - 1;
                j += 1;
            }
        }
        k + n
    }
}

/// Runs `Scanner::fill` compiled for the CPU `be` stands for: with POPCNT
/// (and AVX2 for the compiler's vector loops) when `be` is the AVX2 backend,
/// portable otherwise.
#[inline]
pub(crate) fn fill<W: Words, const COUNT: bool>(
    s: &mut Scanner<W>,
    buf: &mut [u64],
    k: usize,
) -> usize {
    #[cfg(target_arch = "x86_64")]
    if s.be.is_avx2() {
        // SAFETY: an AVX2 `Backend` is only built after AVX2 and POPCNT were
        // detected on this CPU (or are compile-time target features).
        return unsafe { fill_x86::<W, COUNT>(s, buf, k) };
    }
    s.fill::<COUNT>(buf, k)
}

/// # Safety
/// The CPU must support AVX2 and POPCNT.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt")]
unsafe fn fill_x86<W: Words, const COUNT: bool>(
    s: &mut Scanner<W>,
    buf: &mut [u64],
    k: usize,
) -> usize {
    s.fill::<COUNT>(buf, k)
}

/// Number of edges in words `[from, end)` (no terminal edge).
#[cfg(feature = "rayon")]
pub(crate) fn count_edges<W: Words>(src: W, from: usize, end: usize, be: Backend) -> usize {
    let mut s = Scanner::new(src, from, end, be, false);
    fill::<W, true>(&mut s, &mut [], 0)
}
