//! The interface between the dirty scanner and its per-level kernels: the
//! words a scan reads ([`Words`]), the kernels' word-parallel pieces
//! ([`Kernel`]) and a piece of scanner work to run compiled for a level
//! ([`Job`]).

use crate::arch::Level;

/// The bitmap words a scan reads: one bitmap, or the OR of two.
///
/// # Safety
/// [`Words::parts`] must return a first slice of exactly [`Words::len`]
/// words and, if any, a second slice of the same length; the vector kernels
/// load from both without bounds checks.
pub(crate) unsafe trait Words: Copy + Send + Sync {
    /// Number of words.
    fn len(self) -> usize;
    /// Word `i` (`i < len`): the OR of the parts' words `i`.
    fn word(self, i: usize) -> u64;
    /// First index in `[from, end)` whose word differs from `x`.
    fn skip(self, from: usize, end: usize, x: u64, level: Level) -> Option<usize>;
    /// The slices whose OR the words are: one bitmap, or two of equal length.
    fn parts(&self) -> (&[u64], Option<&[u64]>);
}

/// The word-parallel pieces of the scan, one implementation per level.
pub(crate) trait Kernel {
    /// Stage 1 over words `[i, i + n)` (`n <= 64`), `carry` the bit below
    /// word `i`: bit `t` of the result is set when word `i + t` has edges.
    /// Also returns the carry out (bit 63 of the last word).
    fn marks<W: Words>(src: W, i: usize, n: usize, carry: u64) -> (u64, u64);

    /// Stage 2 for one word: writes the positions of the set bits of edge
    /// mask `e` (possibly 0), each plus `pos` (the word's first bit), to
    /// `buf[k..]` in ascending order and returns `k` plus their number.
    /// `buf[k..k + 64]` must exist; slots past the returned index may be
    /// overwritten with garbage. `dense`: most words of the batch have edges
    /// (so more edges per word are likely).
    fn expand(pos: u64, e: u64, buf: &mut [u64], k: usize, dense: bool) -> usize;

    /// Number of edges in words `[from, end)` (no terminal edge).
    #[cfg_attr(not(feature = "rayon"), allow(dead_code))]
    fn count_edges<W: Words>(src: W, from: usize, end: usize) -> usize;
}

/// A piece of scanner work to run compiled for one level (see [`run`]).
pub(crate) trait Job {
    /// What the job returns.
    type Output;
    /// Runs the job with kernel `K`. Implementations are
    /// `#[inline(always)]`, so the whole job is compiled inside the level's
    /// entry point, with its target features.
    fn run<K: Kernel>(self) -> Self::Output;
}
