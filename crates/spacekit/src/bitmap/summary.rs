//! The summary levels of a [`SummaryBitmap`](super::SummaryBitmap): bit `j`
//! of level 1 says word `j` of the bitmap has a clear bit, bit `j` of level
//! `k + 1` says word `j` of level `k` is non-zero, up to a level of one
//! word. The first clear bit at or after any position is then a few loads
//! away (one word per level up, one per level down: 5 levels for 2^28 bits),
//! as in rcore's `bitmap-allocator` (a 16-way cascade) or a van Emde Boas
//! layout of summary words; a change to one word of the bitmap touches the
//! levels only when that word becomes full or stops being full.

use alloc::vec;
use alloc::vec::Vec;

use super::word::{last_word_mask, words_for};

/// The levels over a bitmap of `nbits` bits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Summary {
    /// `levels[0]` summarises the bitmap's words, `levels[k + 1]` the words
    /// of `levels[k]`; the last has one word.
    levels: Vec<Vec<u64>>,
    /// Words of the bitmap.
    nwords: usize,
    /// The mask of bits that count in the bitmap's last word.
    last_mask: u64,
}

/// Whether bitmap word `w` (masked to the bits that count) has a clear bit.
#[inline(always)]
fn has_clear(w: u64, mask: u64) -> bool {
    !w & mask != 0
}

impl Summary {
    /// The levels of `words` (the first `words_for(nbits)` count).
    pub(crate) fn build(words: &[u64], nbits: usize) -> Summary {
        let nwords = words_for(nbits);
        let last_mask = if nwords == 0 {
            0
        } else {
            last_word_mask(nbits)
        };
        let mut levels = Vec::new();
        let mut below = nwords;
        loop {
            let n = words_for(below).max(1);
            levels.push(vec![0u64; n]);
            if n == 1 {
                break;
            }
            below = n;
        }
        let mut s = Summary {
            levels,
            nwords,
            last_mask,
        };
        for (j, &w) in words[..nwords].iter().enumerate() {
            if has_clear(w, s.mask(j)) {
                s.levels[0][j / 64] |= 1 << (j % 64);
            }
        }
        for k in 1..s.levels.len() {
            let (lower, upper) = s.levels.split_at_mut(k);
            for (j, &w) in lower[k - 1].iter().enumerate() {
                if w != 0 {
                    upper[0][j / 64] |= 1 << (j % 64);
                }
            }
        }
        s
    }

    /// The mask of bits that count in bitmap word `j`.
    #[inline(always)]
    fn mask(&self, j: usize) -> u64 {
        if j + 1 == self.nwords {
            self.last_mask
        } else {
            !0
        }
    }

    /// Records that bitmap word `j` now holds `w`: O(1) unless the word
    /// became full or stopped being full.
    #[inline]
    pub(crate) fn note(&mut self, j: usize, w: u64) {
        let free = has_clear(w, self.mask(j));
        let mut i = j;
        let mut set = free;
        for level in &mut self.levels {
            let word = &mut level[i / 64];
            let was = *word;
            let bit = 1u64 << (i % 64);
            *word = if set { was | bit } else { was & !bit };
            // The level above changes only if this word went from zero to
            // non-zero or back.
            if (was == 0) == (*word == 0) {
                return;
            }
            set = *word != 0;
            i /= 64;
        }
    }

    /// The first bitmap word at or after `j` that has a clear bit.
    #[inline]
    pub(crate) fn next_free_word(&self, j: usize) -> Option<usize> {
        if j >= self.nwords {
            return None;
        }
        // Up: the first level whose word, from the position, has a bit.
        let mut k = 0;
        let mut i = j;
        let found = loop {
            let level = &self.levels[k];
            let wi = i / 64;
            if wi >= level.len() {
                return None;
            }
            let w = level[wi] & (!0u64 << (i % 64));
            if w != 0 {
                break wi * 64 + w.trailing_zeros() as usize;
            }
            if k + 1 == self.levels.len() {
                return None;
            }
            k += 1;
            i = wi + 1;
        };
        // Down: the first set bit of each word below.
        let mut i = found;
        while k > 0 {
            k -= 1;
            let w = self.levels[k][i];
            debug_assert!(w != 0, "a summary bit over an empty word");
            i = i * 64 + w.trailing_zeros() as usize;
        }
        Some(i)
    }

    /// Checks every level against `words`; `Err` names the first word that
    /// differs.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn validate(
        &self,
        words: &[u64],
        nbits: usize,
    ) -> Result<(), alloc::string::String> {
        let fresh = Summary::build(words, nbits);
        for (k, (a, b)) in self.levels.iter().zip(&fresh.levels).enumerate() {
            if let Some(i) = a.iter().zip(b).position(|(x, y)| x != y) {
                return Err(alloc::format!(
                    "summary level {k} word {i}: {:#x}, the bitmap says {:#x}",
                    a[i],
                    b[i]
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive_next(words: &[u64], nbits: usize, j: usize) -> Option<usize> {
        (j..words_for(nbits)).find(|&i| {
            let m = if i + 1 == words_for(nbits) {
                last_word_mask(nbits)
            } else {
                !0
            };
            !words[i] & m != 0
        })
    }

    #[test]
    fn next_free_word_matches_a_scan_as_words_fill_and_empty() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for nbits in [1, 63, 64, 65, 4095, 4096, 4097, 64 * 64 * 64 + 5] {
            let nw = words_for(nbits);
            let mut words = vec![!0u64; nw];
            let mut s = Summary::build(&words, nbits);
            assert_eq!(s.next_free_word(0), naive_next(&words, nbits, 0));
            for _ in 0..2000 {
                let j = (rnd() % nw as u64) as usize;
                words[j] = match rnd() % 4 {
                    0 => 0,
                    1 => rnd(),
                    _ => !0,
                };
                s.note(j, words[j]);
                s.validate(&words, nbits).unwrap();
                let from = (rnd() % (nw as u64 + 1)) as usize;
                assert_eq!(
                    s.next_free_word(from),
                    naive_next(&words, nbits, from),
                    "{nbits} bits from word {from}"
                );
            }
        }
    }

    #[test]
    fn the_last_word_counts_only_its_bits() {
        // 65 bits, all set but the 63 past the end: no clear bit.
        let words = [!0u64, 1];
        let s = Summary::build(&words, 65);
        assert_eq!(s.next_free_word(0), None);
        let s = Summary::build(&words, 66);
        assert_eq!(s.next_free_word(0), Some(1));
        let s = Summary::build(&[], 0);
        assert_eq!(s.next_free_word(0), None);
    }
}
