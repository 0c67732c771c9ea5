//! Iterators over set bits, clear bits and runs.

use core::iter::FusedIterator;
use core::ops::Range;

use super::arch::{self, generic::bits_of};
use super::find::{inv, skip_fwd};
use super::word::{first_word_mask, last_word_mask, words_for};
use crate::arch::Level;

/// Words the bit iterators step through one by one before they call the
/// skip loop.
const NEAR: usize = 16;

/// A cursor over the bits of one polarity: set bits (`CLEAR == false`) or
/// clear bits. It keeps the current word, so the next bit, or the end of the
/// current run, costs one `trailing_zeros` when it lies in the same word; long
/// stretches are skipped like every other search (a few words inline, then
/// SIMD).
#[derive(Clone, Debug)]
struct Walk<'a, const CLEAR: bool> {
    words: &'a [u64],
    nbits: usize,
    wi: usize,
    /// Word `wi` in the walked polarity, keeping only bits not yet reported.
    cur: u64,
    be: Level,
}

impl<'a, const CLEAR: bool> Walk<'a, CLEAR> {
    fn new(words: &'a [u64], nbits: usize, from: usize, be: Level) -> Self {
        let words = &words[..words_for(nbits)];
        let mut walk = Walk {
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

    /// Moves to the next word holding a bit of the polarity; false at the end.
    #[inline(always)]
    fn refill(&mut self) -> bool {
        while self.cur == 0 {
            let x = inv(CLEAR);
            match skip_fwd(self.words, self.wi + 1, self.words.len(), x, self.be) {
                Some(wi) => {
                    self.wi = wi;
                    self.cur = self.load(wi);
                }
                None => {
                    self.wi = self.words.len();
                    return false;
                }
            }
        }
        true
    }

    /// [`Walk::refill`] out of line, for the bit iterators: their per-bit
    /// path stays a test, a `tzcnt` and a `blsr`.
    #[inline(never)]
    fn refill_slow(&mut self) -> bool {
        self.refill()
    }

    /// Moves on from an exhausted word (`cur == 0`) to the next one holding
    /// a bit of the polarity; false at the end. The next [`NEAR`] words are
    /// looked at one by one inline (a dense bitmap moves one word at a time,
    /// and short gaps are the common case), longer gaps go to the skip loop.
    #[inline(always)]
    fn advance(&mut self) -> bool {
        let n = self.words.len();
        let end = n.min(self.wi.saturating_add(1 + NEAR));
        let mut i = self.wi + 1;
        while i < end {
            let w = self.load(i);
            if w != 0 {
                self.wi = i;
                self.cur = w;
                return true;
            }
            i += 1;
        }
        if i >= n {
            self.wi = n;
            return false;
        }
        // Words up to `i - 1` hold nothing: skip on from `i`.
        self.wi = i - 1;
        self.refill_slow()
    }

    #[inline(always)]
    fn next_bit(&mut self) -> Option<usize> {
        if self.cur == 0 && !self.advance() {
            return None;
        }
        let b = self.cur.trailing_zeros() as usize;
        self.cur &= self.cur - 1;
        Some(self.wi * 64 + b)
    }

    /// Every remaining bit through `f` (what `fold`, `for_each`, `sum` and
    /// `count` on the bit iterators run): the current word, the words
    /// before the last through the vector fold at the walk's level, then the
    /// last word with its tail mask.
    #[inline(always)]
    fn fold_bits<B>(self, init: B, mut f: impl FnMut(B, usize) -> B) -> B {
        let n = self.words.len();
        if self.wi >= n {
            return init;
        }
        let acc = bits_of(init, self.cur, self.wi * 64, &mut f);
        let last = n - 1;
        if self.wi == last {
            return acc;
        }
        let acc = arch::fold_bits(
            self.be,
            self.words,
            self.wi + 1,
            last,
            inv(CLEAR),
            acc,
            &mut f,
        );
        bits_of(acc, self.load(last), last * 64, &mut f)
    }

    #[inline(always)]
    fn next_run(&mut self) -> Option<Range<usize>> {
        if !self.refill() {
            return None;
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
        match skip_fwd(
            self.words,
            self.wi + 1,
            self.words.len(),
            !inv(CLEAR),
            self.be,
        ) {
            Some(wi) => {
                // Word `wi` is not entirely in the run (and `load` clears the
                // tail), so it holds a bit of the other polarity: e_bit < 64.
                self.wi = wi;
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

/// Positions of set bits, in increasing order. Made by `Bits::iter_ones`.
#[derive(Clone, Debug)]
pub struct Ones<'a>(Walk<'a, false>);

impl<'a> Ones<'a> {
    pub(crate) fn new(words: &'a [u64], nbits: usize, from: usize, be: Level) -> Self {
        Ones(Walk::new(words, nbits, from, be))
    }
}

impl Iterator for Ones<'_> {
    type Item = usize;
    #[inline]
    fn next(&mut self) -> Option<usize> {
        self.0.next_bit()
    }

    #[inline]
    fn fold<B, F: FnMut(B, usize) -> B>(self, init: B, f: F) -> B {
        self.0.fold_bits(init, f)
    }
}
impl FusedIterator for Ones<'_> {}

/// Positions of clear bits, in increasing order. Made by `Bits::iter_zeros`.
#[derive(Clone, Debug)]
pub struct Zeros<'a>(Walk<'a, true>);

impl<'a> Zeros<'a> {
    pub(crate) fn new(words: &'a [u64], nbits: usize, from: usize, be: Level) -> Self {
        Zeros(Walk::new(words, nbits, from, be))
    }
}

impl Iterator for Zeros<'_> {
    type Item = usize;
    #[inline]
    fn next(&mut self) -> Option<usize> {
        self.0.next_bit()
    }

    #[inline]
    fn fold<B, F: FnMut(B, usize) -> B>(self, init: B, f: F) -> B {
        self.0.fold_bits(init, f)
    }
}
impl FusedIterator for Zeros<'_> {}

/// Maximal runs of set bits. Made by `Bits::set_runs`.
#[derive(Clone, Debug)]
pub struct SetRuns<'a>(Walk<'a, false>);

impl<'a> SetRuns<'a> {
    pub(crate) fn new(words: &'a [u64], nbits: usize, from: usize, be: Level) -> Self {
        SetRuns(Walk::new(words, nbits, from, be))
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
pub struct ClearRuns<'a>(Walk<'a, true>);

impl<'a> ClearRuns<'a> {
    pub(crate) fn new(words: &'a [u64], nbits: usize, from: usize, be: Level) -> Self {
        ClearRuns(Walk::new(words, nbits, from, be))
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
