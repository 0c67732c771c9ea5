//! The bitmap engine's test hooks, re-exported from `spacekit::__testing`
//! (hidden, not part of the stable API): run a bitmap's queries at a chosen
//! SIMD level, and count the restarts of a clear-area search.

use super::area;
pub use super::area::AreaStats;
use super::{check_align, sealed, BitmapError, Bits, BitsMut};
use crate::arch::Level;

/// Runs every query of the wrapped bitmap at `level` (one of
/// [`Level::available`], or [`Level::scalar`] for the portable loops),
/// whatever the wrapped bitmap would choose. Tests run the same assertions
/// through each level; benchmarks time the scalar fallback.
///
/// ```
/// use spacekit::__testing::AtLevel;
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

impl<B> sealed::Sealed for AtLevel<B> {}
impl<B: Bits> Bits for AtLevel<B> {
    fn words(&self) -> &[u64] {
        self.0.words()
    }
    fn bit_len(&self) -> usize {
        self.0.bit_len()
    }
    fn level(&self) -> Level {
        self.1
    }
}
impl<B: BitsMut> BitsMut for AtLevel<B> {
    fn words_mut_internal(&mut self) -> &mut [u64] {
        self.0.words_mut_internal()
    }
}

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
        bits.level(),
        &mut stats,
    );
    Ok((p, stats))
}
