//! Iterators over set bits, clear bits and runs.

use core::iter::FusedIterator;
use core::ops::Range;

use super::arch::Backend;
use super::find::{inv, skip_fwd};
use super::word::{first_word_mask, last_word_mask, words_for};

/// Walks the bits of one polarity: `flip = 0` for set bits, `!0` for clear ones.
#[derive(Clone, Debug)]
struct BitWalk<'a> {
    words: &'a [u64],
    nbits: usize,
    flip: u64,
    wi: usize,
    cur: u64,
    be: Backend,
}

impl<'a> BitWalk<'a> {
    fn new(words: &'a [u64], nbits: usize, from: usize, flip: u64, be: Backend) -> Self {
        let words = &words[..words_for(nbits)];
        let mut walk = BitWalk {
            words,
            nbits,
            flip,
            wi: words.len(),
            cur: 0,
            be,
        };
        if from < nbits {
            walk.wi = from / 64;
            walk.cur = walk.load(walk.wi) & first_word_mask(from);
        }
        walk
    }

    /// Word `wi` in the walked polarity, with bits past the end cleared.
    #[inline(always)]
    fn load(&self, wi: usize) -> u64 {
        let w = self.words[wi] ^ self.flip;
        if wi + 1 == self.words.len() {
            w & last_word_mask(self.nbits)
        } else {
            w
        }
    }

    #[inline]
    fn next_bit(&mut self) -> Option<usize> {
        while self.cur == 0 {
            let next = skip_fwd(
                self.words,
                self.wi + 1,
                self.words.len(),
                self.flip,
                self.be,
            );
            match next {
                Some(wi) => {
                    self.wi = wi;
                    self.cur = self.load(wi);
                }
                None => {
                    self.wi = self.words.len();
                    return None;
                }
            }
        }
        let b = self.cur.trailing_zeros() as usize;
        self.cur &= self.cur - 1;
        Some(self.wi * 64 + b)
    }
}

/// Positions of set bits, in increasing order. Made by `Bits::iter_ones`.
#[derive(Clone, Debug)]
pub struct Ones<'a>(BitWalk<'a>);

impl<'a> Ones<'a> {
    pub(crate) fn new(words: &'a [u64], nbits: usize, from: usize, be: Backend) -> Self {
        Ones(BitWalk::new(words, nbits, from, 0, be))
    }
}

impl Iterator for Ones<'_> {
    type Item = usize;
    #[inline]
    fn next(&mut self) -> Option<usize> {
        self.0.next_bit()
    }
}
impl FusedIterator for Ones<'_> {}

/// Positions of clear bits, in increasing order. Made by `Bits::iter_zeros`.
#[derive(Clone, Debug)]
pub struct Zeros<'a>(BitWalk<'a>);

impl<'a> Zeros<'a> {
    pub(crate) fn new(words: &'a [u64], nbits: usize, from: usize, be: Backend) -> Self {
        Zeros(BitWalk::new(words, nbits, from, !0, be))
    }
}

impl Iterator for Zeros<'_> {
    type Item = usize;
    #[inline]
    fn next(&mut self) -> Option<usize> {
        self.0.next_bit()
    }
}
impl FusedIterator for Zeros<'_> {}

/// Walks maximal runs of set bits (`CLEAR == false`) or clear bits as
/// half-open ranges. It keeps the current word, so finding where a run ends
/// and where the next one starts costs one `trailing_zeros` each when both lie
/// in the same word; long stretches are skipped like every other search.
#[derive(Clone, Debug)]
struct RunWalk<'a, const CLEAR: bool> {
    words: &'a [u64],
    nbits: usize,
    wi: usize,
    /// Word `wi` in the walked polarity, keeping only bits not yet reported.
    cur: u64,
    be: Backend,
}

impl<'a, const CLEAR: bool> RunWalk<'a, CLEAR> {
    fn new(words: &'a [u64], nbits: usize, from: usize, be: Backend) -> Self {
        let words = &words[..words_for(nbits)];
        let mut walk = RunWalk {
            words,
            nbits,
            wi: words.len(),
            cur: 0,
            be,
        };
        if from < nbits {
            walk.wi = from / 64;
            walk.cur = walk.load(walk.wi) & first_word_mask(from);
        }
        walk
    }

    /// Word `wi` in the walked polarity, bits past the end cleared.
    #[inline(always)]
    fn load(&self, wi: usize) -> u64 {
        let w = self.words[wi] ^ inv(CLEAR);
        if wi + 1 == self.words.len() {
            w & last_word_mask(self.nbits)
        } else {
            w
        }
    }

    #[inline(always)]
    fn next_run(&mut self) -> Option<Range<usize>> {
        let x = inv(CLEAR);
        while self.cur == 0 {
            match skip_fwd(self.words, self.wi + 1, self.words.len(), x, self.be) {
                Some(wi) => {
                    self.wi = wi;
                    self.cur = self.load(wi);
                }
                None => {
                    self.wi = self.words.len();
                    return None;
                }
            }
        }
        let s_bit = self.cur.trailing_zeros();
        let start = self.wi * 64 + s_bit as usize;
        // The run ends at the first bit of the other polarity after `start`.
        let other = !self.cur & (!0u64 << s_bit);
        if other != 0 {
            let e_bit = other.trailing_zeros();
            self.cur &= !0u64 << e_bit;
            return Some(start..(self.wi * 64 + e_bit as usize).min(self.nbits));
        }
        // The run reaches the end of the word: skip words fully in it.
        match skip_fwd(self.words, self.wi + 1, self.words.len(), !x, self.be) {
            Some(wi) => {
                self.wi = wi;
                // Word `wi` is not entirely in the run (and `load` clears the
                // tail), so it holds a bit of the other polarity: e_bit < 64.
                let w = self.load(wi);
                let e_bit = (!w).trailing_zeros();
                self.cur = w & (!0u64 << e_bit);
                Some(start..(wi * 64 + e_bit as usize).min(self.nbits))
            }
            None => {
                self.wi = self.words.len();
                self.cur = 0;
                Some(start..self.nbits)
            }
        }
    }
}

/// Maximal runs of set bits. Made by `Bits::set_runs`.
#[derive(Clone, Debug)]
pub struct SetRuns<'a>(RunWalk<'a, false>);

impl<'a> SetRuns<'a> {
    pub(crate) fn new(words: &'a [u64], nbits: usize, from: usize, be: Backend) -> Self {
        SetRuns(RunWalk::new(words, nbits, from, be))
    }
}

impl Iterator for SetRuns<'_> {
    type Item = Range<usize>;
    #[inline]
    fn next(&mut self) -> Option<Range<usize>> {
        self.0.next_run()
    }
}
impl FusedIterator for SetRuns<'_> {}

/// Maximal runs of clear bits. Made by `Bits::clear_runs`.
#[derive(Clone, Debug)]
pub struct ClearRuns<'a>(RunWalk<'a, true>);

impl<'a> ClearRuns<'a> {
    pub(crate) fn new(words: &'a [u64], nbits: usize, from: usize, be: Backend) -> Self {
        ClearRuns(RunWalk::new(words, nbits, from, be))
    }
}

impl Iterator for ClearRuns<'_> {
    type Item = Range<usize>;
    #[inline]
    fn next(&mut self) -> Option<Range<usize>> {
        self.0.next_run()
    }
}
impl FusedIterator for ClearRuns<'_> {}
