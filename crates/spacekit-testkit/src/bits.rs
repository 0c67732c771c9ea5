//! The naive `Vec<bool>` model shared by the bitmap test files.

use std::ops::Range;

use spacekit::bitmap::Bitmap;

/// Words holding `m` (bits past its length clear).
pub fn to_words(m: &[bool]) -> Vec<u64> {
    let mut w = vec![0u64; m.len().div_ceil(64)];
    for (i, _) in m.iter().enumerate().filter(|(_, &b)| b) {
        w[i / 64] |= 1 << (i % 64);
    }
    w
}

/// An owned bitmap equal to `m`.
pub fn bitmap_of(m: &[bool]) -> Bitmap {
    Bitmap::from_words(to_words(m), m.len()).unwrap()
}

/// First position `>= from` holding `v`.
pub fn m_next(m: &[bool], from: usize, v: bool) -> Option<usize> {
    (from..m.len()).find(|&i| m[i] == v)
}

/// Last position `<= at` holding `v`; `None` past the end.
pub fn m_prev(m: &[bool], at: usize, v: bool) -> Option<usize> {
    if at >= m.len() {
        return None;
    }
    (0..=at).rev().find(|&i| m[i] == v)
}

/// Maximal runs of `v` at or after `from`.
pub fn m_runs(m: &[bool], from: usize, v: bool) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut i = from;
    while i < m.len() {
        if m[i] == v {
            let s = i;
            while i < m.len() && m[i] == v {
                i += 1;
            }
            out.push(s..i);
        } else {
            i += 1;
        }
    }
    out
}

/// Positions holding `v` at or after `from`.
pub fn m_positions(m: &[bool], from: usize, v: bool) -> Vec<usize> {
    (from..m.len()).filter(|&i| m[i] == v).collect()
}

/// Number of set positions.
pub fn m_count(m: &[bool]) -> usize {
    m.iter().filter(|&&b| b).count()
}
