//! The words a dirty scan reads: one bitmap, or the OR of two.

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

    /// Bit 63 of the word before `i` (0 before the first word): the bit a
    /// scan starting at word `i` carries in.
    #[inline(always)]
    fn carry_in(self, i: usize) -> u64 {
        if i == 0 {
            0
        } else {
            self.word(i - 1) >> 63
        }
    }

    /// Word `j` and its edge mask `w ^ (w << 1 | carry_in(j))`: the bits
    /// where the bitmap changes value.
    #[inline(always)]
    fn edges(self, j: usize) -> (u64, u64) {
        let w = self.word(j);
        (w, w ^ ((w << 1) | self.carry_in(j)))
    }
}
