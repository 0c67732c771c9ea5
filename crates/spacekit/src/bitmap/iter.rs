//! Iterators over set bits, clear bits and runs.

use core::iter::FusedIterator;
use core::ops::Range;

use super::arch::Backend;
use super::find::next_in;
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
            let next = self.be.first_diff(self.words, self.wi + 1, self.flip);
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

/// Walks maximal runs of one polarity as half-open ranges.
#[derive(Clone, Debug)]
struct RunWalk<'a> {
    words: &'a [u64],
    nbits: usize,
    pos: usize,
    clear: bool,
    be: Backend,
}

impl RunWalk<'_> {
    #[inline]
    fn next_run(&mut self) -> Option<Range<usize>> {
        let s = next_in(self.words, self.pos, self.nbits, self.clear, self.be);
        let Some(s) = s else {
            self.pos = self.nbits;
            return None;
        };
        let e = next_in(self.words, s, self.nbits, !self.clear, self.be).unwrap_or(self.nbits);
        self.pos = e;
        Some(s..e)
    }
}

/// Maximal runs of set bits. Made by `Bits::set_runs`.
#[derive(Clone, Debug)]
pub struct SetRuns<'a>(RunWalk<'a>);

impl<'a> SetRuns<'a> {
    pub(crate) fn new(words: &'a [u64], nbits: usize, from: usize, be: Backend) -> Self {
        SetRuns(RunWalk {
            words,
            nbits,
            pos: from,
            clear: false,
            be,
        })
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
pub struct ClearRuns<'a>(RunWalk<'a>);

impl<'a> ClearRuns<'a> {
    pub(crate) fn new(words: &'a [u64], nbits: usize, from: usize, be: Backend) -> Self {
        ClearRuns(RunWalk {
            words,
            nbits,
            pos: from,
            clear: true,
            be,
        })
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
