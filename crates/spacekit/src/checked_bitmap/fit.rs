//! The free-space index a [`CheckedBitmap`] may own, and the searches that
//! go through it (or, without one, scan the bitmap with the same answers).

use crate::bitmap::Bits;
use crate::freespace::{FreeSpaceError, FreeSpaceIndex};

use super::CheckedBitmap;

/// The lowest `s >= start` with `s + offset` a multiple of `align` (a power
/// of two) whose `[s, s + nr)` ends by `end`.
fn aligned_fit(start: usize, end: usize, nr: usize, align: usize, offset: usize) -> Option<usize> {
    let mask = align as u128 - 1;
    let shifted = start as u128 + offset as u128;
    let s = ((shifted + mask) & !mask) - offset as u128;
    (s + nr as u128 <= end as u128).then_some(s as usize)
}

/// Refuses a zero length and an alignment that is not a power of two, as
/// [`FreeSpaceIndex`] does.
fn check(nr: usize, align: usize) -> Result<(), FreeSpaceError> {
    if nr == 0 {
        return Err(FreeSpaceError::ZeroLength);
    }
    if !align.is_power_of_two() {
        return Err(FreeSpaceError::BadAlignment {
            align: align as u64,
        });
    }
    Ok(())
}

impl CheckedBitmap {
    /// Builds a [`FreeSpaceIndex`] over the first `len` bits (replacing any
    /// index already built), in O(n). From then on every set, clear and flip
    /// keeps it in step, and [`first_fit`](Self::first_fit),
    /// [`best_fit`](Self::best_fit) and [`largest_free`](Self::largest_free)
    /// search those `len` bits through it in O(log n). An ext4 block bitmap
    /// indexes only the group's blocks, not the padding past them.
    ///
    /// # Errors
    /// [`FreeSpaceError::OutOfRange`] if `len` is more than [`len`](Self::len)
    /// (the index keeps the one it had); [`FreeSpaceError::TooLarge`] past
    /// 2^32 - 1 bits.
    pub fn build_index(&mut self, len: usize) -> Result<(), FreeSpaceError> {
        if len > self.bits.len() {
            return Err(FreeSpaceError::OutOfRange {
                start: 0,
                end: len as u64,
                bits: self.bits.len() as u64,
            });
        }
        self.index = Some(FreeSpaceIndex::new(self.bits.as_words(), len as u64)?);
        Ok(())
    }

    /// [`build_index`](Self::build_index), by value: `CheckedBitmap::from_bytes(..)?.with_index(blocks)?`.
    ///
    /// # Errors
    /// As [`build_index`](Self::build_index).
    pub fn with_index(mut self, len: usize) -> Result<Self, FreeSpaceError> {
        self.build_index(len)?;
        Ok(self)
    }

    /// The free-space index, if one was built (read-only: only this type's
    /// updates change it).
    pub fn index(&self) -> Option<&FreeSpaceIndex> {
        self.index.as_ref()
    }

    /// Drops the index and returns it; later changes then cost only the
    /// checksum update, and searches scan.
    pub fn remove_index(&mut self) -> Option<FreeSpaceIndex> {
        self.index.take()
    }

    /// Bits the searches cover: the index's, else the whole bitmap.
    fn search_len(&self) -> usize {
        self.index
            .as_ref()
            .map_or(self.bits.len(), |ix| ix.len() as usize)
    }

    /// Brings the index (if any) in step after bits `[start, end)` changed.
    #[inline]
    pub(super) fn sync_index(&mut self, start: usize, end: usize) {
        let Some(ix) = self.index.as_mut() else {
            return;
        };
        let end = (end as u64).min(ix.len());
        let start = start as u64;
        if start < end && ix.update(self.bits.as_words(), start..end).is_err() {
            // Cannot happen: the range lies inside the index, and the words
            // are the ones it was built over. Drop it rather than keep a
            // stale one (searches then scan).
            debug_assert!(false, "free-space index update refused");
            self.index = None;
        }
    }

    /// The lowest `s >= goal` such that bits `[s, s + nr)` are clear and
    /// `s + offset` is a multiple of `align` (a power of two); failing that,
    /// the lowest such `s < goal` (the search wraps once, like ext4's
    /// allocator from a goal). The kernel's `bitmap_find_next_zero_area_off`
    /// with a goal and a wrap.
    ///
    /// Searches the bits the index covers, in O(log n) per candidate run
    /// ([`FreeSpaceIndex::first_fit`]); without an index, the whole bitmap by
    /// a scan, with the same answer.
    ///
    /// # Errors
    /// [`FreeSpaceError::ZeroLength`], [`FreeSpaceError::BadAlignment`],
    /// [`FreeSpaceError::OutOfRange`] for a goal past the bits searched.
    #[inline]
    pub fn first_fit(
        &self,
        nr: usize,
        align: usize,
        offset: usize,
        goal: usize,
    ) -> Result<Option<usize>, FreeSpaceError> {
        check(nr, align)?;
        let len = self.search_len();
        if goal > len {
            return Err(FreeSpaceError::OutOfRange {
                start: goal as u64,
                end: goal as u64,
                bits: len as u64,
            });
        }
        if let Some(ix) = &self.index {
            let words = self.bits.as_words();
            let found = ix.first_fit(words, nr as u64, align as u64, offset as u64, goal as u64)?;
            return Ok(found.map(|s| s as usize));
        }
        let fit = |r: core::ops::Range<usize>| aligned_fit(r.start, r.end, nr, align, offset);
        Ok(self.bits.clear_runs(goal).find_map(fit).or_else(|| {
            self.bits
                .clear_runs(0)
                .take_while(|r| r.start < goal)
                .find_map(fit)
                .filter(|&s| s < goal)
        }))
    }

    /// A best fit by size class: among the free runs that can hold `nr` bits
    /// aligned as in [`first_fit`](Self::first_fit), those of the smallest
    /// power-of-two size class, and of those the lowest; returns the aligned
    /// start in it. Within a factor of two of the exact best fit.
    ///
    /// O(log n) per size class through the index
    /// ([`FreeSpaceIndex::best_fit`]); without one, a scan of the whole
    /// bitmap with the same answer.
    ///
    /// # Errors
    /// [`FreeSpaceError::ZeroLength`], [`FreeSpaceError::BadAlignment`].
    pub fn best_fit(
        &self,
        nr: usize,
        align: usize,
        offset: usize,
    ) -> Result<Option<usize>, FreeSpaceError> {
        check(nr, align)?;
        if let Some(ix) = &self.index {
            let words = self.bits.as_words();
            let found = ix.best_fit(words, nr as u64, align as u64, offset as u64)?;
            return Ok(found.map(|s| s as usize));
        }
        Ok(self
            .bits
            .clear_runs(0)
            .filter_map(|r| {
                let s = aligned_fit(r.start, r.end, nr, align, offset)?;
                Some(((r.end - r.start).ilog2(), s))
            })
            // The first of the smallest class is the lowest.
            .min_by_key(|&(class, _)| class)
            .map(|(_, s)| s))
    }

    /// The longest free run as `(start, length)` (the lowest of equals), or
    /// `None` if no bit is clear. O(log n) through the index (over the bits
    /// it covers); without one, a scan of the whole bitmap.
    pub fn largest_free(&self) -> Option<(usize, usize)> {
        if let Some(ix) = &self.index {
            // The index was built over these very words.
            let (s, n) = ix
                .largest_free(self.bits.as_words())
                .expect("the index covers the bitmap's words")?;
            return Some((s as usize, n as usize));
        }
        let mut best: Option<(usize, usize)> = None;
        for r in self.bits.clear_runs(0) {
            if best.is_none_or(|(_, n)| r.len() > n) {
                best = Some((r.start, r.len()));
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use crate::test_rng::Rng;

    use super::*;

    /// Queries with and without the index agree, over a random bitmap
    /// changed at random; the index stays valid after every change.
    #[test]
    fn index_and_scan_agree() {
        let mut r = Rng(0x0C4E_C4ED);
        for bits in [1usize, 63, 64, 200, 4096, 4097, 9000] {
            let bytes: Vec<u8> = (0..bits.div_ceil(8)).map(|_| r.next() as u8).collect();
            let bits = bytes.len() * 8;
            let plain = CheckedBitmap::from_bytes(&bytes, 7, bytes.len()).unwrap();
            let mut indexed = plain.clone().with_index(bits).unwrap();
            let mut plain = plain;
            for step in 0..60 {
                let a = r.below(bits as u64) as usize;
                let b = (a + r.below(300) as usize + 1).min(bits);
                match step % 3 {
                    0 => {
                        assert_eq!(plain.set_range(a..b), indexed.set_range(a..b));
                    }
                    1 => {
                        assert_eq!(plain.clear_range(a..b), indexed.clear_range(a..b));
                    }
                    _ => {
                        assert_eq!(plain.flip(a), indexed.flip(a));
                    }
                }
                let ix = indexed.index().unwrap();
                ix.validate(indexed.bitmap().as_words()).unwrap();
                assert_eq!(plain, indexed);
                assert_eq!(plain.largest_free(), indexed.largest_free());
                for (nr, align, off) in [(1, 1, 0), (5, 4, 3), (40, 32, 0), (300, 1, 0)] {
                    let goal = r.below(bits as u64 + 1) as usize;
                    assert_eq!(
                        plain.first_fit(nr, align, off, goal),
                        indexed.first_fit(nr, align, off, goal),
                        "bits {bits} nr {nr} align {align} off {off} goal {goal}"
                    );
                    assert_eq!(
                        plain.best_fit(nr, align, off),
                        indexed.best_fit(nr, align, off)
                    );
                }
            }
        }
    }

    #[test]
    fn index_over_a_prefix_ignores_the_rest() {
        // 128 bits, the index over the first 100: bits 100.. are never found.
        let mut m = CheckedBitmap::from_bytes(&[0xFF; 16], 1, 16)
            .unwrap()
            .with_index(100)
            .unwrap();
        m.clear_range(90..128).unwrap();
        assert_eq!(m.largest_free(), Some((90, 10)));
        assert_eq!(m.first_fit(11, 1, 0, 0), Ok(None));
        assert_eq!(m.first_fit(10, 1, 0, 95), Ok(Some(90)));
        assert_eq!(
            m.first_fit(1, 1, 0, 101),
            Err(FreeSpaceError::OutOfRange {
                start: 101,
                end: 101,
                bits: 100
            })
        );
        assert_eq!(
            m.build_index(129),
            Err(FreeSpaceError::OutOfRange {
                start: 0,
                end: 129,
                bits: 128
            })
        );
        assert_eq!(m.index().map(FreeSpaceIndex::len), Some(100));
        // Without the index the whole bitmap is searched.
        assert!(m.remove_index().is_some());
        assert_eq!(m.largest_free(), Some((90, 38)));
        assert_eq!(m.first_fit(0, 1, 0, 0), Err(FreeSpaceError::ZeroLength));
        assert_eq!(
            m.best_fit(1, 3, 0),
            Err(FreeSpaceError::BadAlignment { align: 3 })
        );
    }
}
