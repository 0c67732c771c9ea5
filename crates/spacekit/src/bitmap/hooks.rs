//! The bitmap engine's test hooks, re-exported from `spacekit::testing`
//! (feature `testing`, not part of the stable API): run a bitmap's queries at a chosen
//! SIMD level, and count the restarts of a clear-area search.

use super::area;
pub use super::area::AreaStats;
use super::{check_align, sealed, BitmapError, Bits, BitsMut, IN};
use crate::arch::Level;

/// Runs every query of the wrapped bitmap at `level` (one of
/// [`Level::available`], or [`Level::scalar`] for the portable loops),
/// whatever the wrapped bitmap would choose. Tests run the same assertions
/// through each level; benchmarks time the scalar fallback.
///
/// ```
/// use spacekit::testing::AtLevel;
/// use spacekit::arch::Level;
/// use spacekit::bitmap::{Bitmap, Bits};
///
/// let map = Bitmap::new_set(1000);
/// for level in Level::available() {
///     assert_eq!(AtLevel(&map, level).find_next_clear(0), None, "{level}");
/// }
/// ```
#[derive(Clone, Debug)]
pub struct AtLevel<B>(pub B, pub Level);

impl<B> sealed::Sealed for AtLevel<B> {
    fn level(&self, _: sealed::Internal) -> Level {
        self.1
    }
}
impl<B: Bits> Bits for AtLevel<B> {
    fn words(&self) -> &[u64] {
        self.0.words()
    }
    fn bit_len(&self) -> usize {
        self.0.bit_len()
    }
}
impl<B: BitsMut> sealed::SealedMut for AtLevel<B> {
    fn words_mut(&mut self, i: sealed::Internal) -> &mut [u64] {
        self.0.words_mut(i)
    }
}
impl<B: BitsMut> BitsMut for AtLevel<B> {}

/// [`Bits::find_clear_area`] (same arguments and errors, at `bits`' level),
/// also returning how many times the search started over from a new
/// candidate (the zero-area benchmark's "restarts").
///
/// # Errors
/// As [`Bits::find_clear_area`].
pub fn find_clear_area_stats<B: Bits + ?Sized>(
    bits: &B,
    start: usize,
    nr: usize,
    align: usize,
    offset: usize,
) -> Result<(Option<usize>, AreaStats), BitmapError> {
    let mut stats = AreaStats::default();
    let p = area::find_clear_area(
        bits.words(),
        bits.bit_len(),
        start,
        nr,
        check_align(align, offset)?,
        bits.level(IN),
        &mut stats,
    );
    Ok((p, stats))
}

/// The SIMD level `bits`' queries run at (an [`AtLevel`]'s own, else the
/// detected one).
pub fn level_of<B: Bits + ?Sized>(bits: &B) -> Level {
    bits.level(IN)
}
