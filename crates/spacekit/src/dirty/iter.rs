//! The streaming range iterators of [`Geometry::ranges`] and
//! [`Geometry::ranges_or`].

use alloc::vec::Vec;

use super::error::DirtyError;
use super::geometry::Geometry;
use super::memory_range::{range_of, MemoryRange};
use super::opts::ScanOpts;
use super::scan::{self, One, Or, Scanner, Words};

/// Ranges from a buffered edge scan.
#[derive(Clone, Debug)]
pub(super) struct RangeIter<W> {
    scan: Scanner<W>,
    buf: Vec<u64>,
    pos: usize,
    len: usize,
    shift: u32,
    base: u64,
}

impl<W: Words> RangeIter<W> {
    pub(super) fn new(src: W, geometry: Geometry, opts: ScanOpts) -> Result<Self, DirtyError> {
        geometry.check_span(src.len())?;
        Ok(RangeIter {
            scan: Scanner::new(src, 0, src.len(), opts.level(), true),
            buf: alloc::vec![0; scan::BUF],
            pos: 0,
            len: 0,
            shift: geometry.page_shift(),
            base: geometry.base(),
        })
    }

    #[inline]
    fn next(&mut self) -> Option<MemoryRange> {
        loop {
            if self.pos + 2 <= self.len {
                let (s, e) = (self.buf[self.pos], self.buf[self.pos + 1]);
                self.pos += 2;
                return Some(range_of(s, e, self.shift, self.base));
            }
            if self.scan.done() {
                return None;
            }
            // At most one edge (an open run's start) is left over.
            let rest = self.len - self.pos;
            if rest == 1 {
                self.buf[0] = self.buf[self.pos];
            }
            self.len = scan::fill(&mut self.scan, &mut self.buf, rest);
            self.pos = 0;
        }
    }
}

/// Iterator of [`Geometry::ranges`].
#[derive(Clone, Debug)]
pub struct DirtyRanges<'a>(pub(super) RangeIter<One<'a>>);

impl Iterator for DirtyRanges<'_> {
    type Item = MemoryRange;

    #[inline]
    fn next(&mut self) -> Option<MemoryRange> {
        self.0.next()
    }
}

impl core::iter::FusedIterator for DirtyRanges<'_> {}

/// Iterator of [`Geometry::ranges_or`].
#[derive(Clone, Debug)]
pub struct DirtyRangesOr<'a>(pub(super) RangeIter<Or<'a>>);

impl Iterator for DirtyRangesOr<'_> {
    type Item = MemoryRange;

    #[inline]
    fn next(&mut self) -> Option<MemoryRange> {
        self.0.next()
    }
}

impl core::iter::FusedIterator for DirtyRangesOr<'_> {}
