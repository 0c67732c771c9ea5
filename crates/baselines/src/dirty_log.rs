//! Cloud Hypervisor's dirty bitmap to `MemoryRangeTable` conversion, before
//! and after seed 004.
//!
//! * [`before`]: the original per-bit loop. Every bit of every word is
//!   examined; a dirty page extends the open range or opens one, a clean page
//!   closes it.
//! * [`seed`]: the seed's rewrite. A bit-position iterator walks the words and
//!   yields the index of each set bit (skipping zero words, but one step per
//!   dirty page); each position becomes a one-page range, adjacent ranges are
//!   coalesced (the seed used itertools' `coalesce`; [`Coalesce`] is the same
//!   adapter), and each result is mapped to a memory range.
//!
//! Both write into a caller's `Vec` that is cleared first, so benchmarks can
//! reuse (and pre-fault) the output buffer.

/// A guest memory range, laid out as Cloud Hypervisor's
/// `#[repr(C)] struct MemoryRange { gpa: u64, length: u64 }`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryRange {
    /// Guest-physical address of the first byte.
    pub gpa: u64,
    /// Length in bytes.
    pub length: u64,
}

/// The pre-seed conversion: one step per bit.
pub fn before(bitmap: &[u64], start_addr: u64, page_size: u64, out: &mut Vec<MemoryRange>) {
    out.clear();
    let mut open: Option<MemoryRange> = None;
    for (i, &word) in bitmap.iter().enumerate() {
        for j in 0..64u64 {
            let dirty = (word >> j) & 1 != 0;
            let offset = (i as u64 * 64 + j) * page_size;
            if dirty {
                match open.as_mut() {
                    Some(r) => r.length += page_size,
                    None => {
                        open = Some(MemoryRange {
                            gpa: start_addr + offset,
                            length: page_size,
                        })
                    }
                }
            } else if let Some(r) = open.take() {
                out.push(r);
            }
        }
    }
    if let Some(r) = open {
        out.push(r);
    }
}

/// The seed's bit-position iterator: the index of every set bit of a stream
/// of words, in order.
#[derive(Clone, Debug)]
pub struct BitposIterator<I> {
    words: I,
    /// Bits of the current word not yet yielded.
    cur: u64,
    /// Index of the current word (`None` before the first).
    idx: Option<u64>,
}

impl<I: Iterator<Item = u64>> BitposIterator<I> {
    /// Positions of the set bits in `words`.
    pub fn new(words: I) -> Self {
        BitposIterator {
            words,
            cur: 0,
            idx: None,
        }
    }
}

impl<I: Iterator<Item = u64>> Iterator for BitposIterator<I> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        while self.cur == 0 {
            self.cur = self.words.next()?;
            self.idx = Some(self.idx.map_or(0, |i| i + 1));
        }
        let bit = u64::from(self.cur.trailing_zeros());
        self.cur &= self.cur - 1;
        Some(self.idx.unwrap_or(0) * 64 + bit)
    }
}

/// Itertools-style `coalesce`: `f(prev, next)` returns `Ok(merged)` to join
/// two neighbours or `Err((prev, next))` to emit `prev` and go on from
/// `next`.
#[derive(Clone, Debug)]
pub struct Coalesce<I: Iterator, F> {
    iter: I,
    last: Option<I::Item>,
    f: F,
}

impl<I, F> Iterator for Coalesce<I, F>
where
    I: Iterator,
    F: FnMut(I::Item, I::Item) -> Result<I::Item, (I::Item, I::Item)>,
{
    type Item = I::Item;

    fn next(&mut self) -> Option<I::Item> {
        let mut last = match self.last.take() {
            Some(l) => l,
            None => self.iter.next()?,
        };
        for next in self.iter.by_ref() {
            match (self.f)(last, next) {
                Ok(joined) => last = joined,
                Err((done, next)) => {
                    self.last = Some(next);
                    return Some(done);
                }
            }
        }
        Some(last)
    }
}

/// Wraps `iter` in [`Coalesce`].
pub fn coalesce<I, F>(iter: I, f: F) -> Coalesce<I, F>
where
    I: Iterator,
    F: FnMut(I::Item, I::Item) -> Result<I::Item, (I::Item, I::Item)>,
{
    Coalesce {
        iter,
        last: None,
        f,
    }
}

/// The seed's conversion: set-bit positions, one-page ranges, coalesce,
/// map to memory ranges.
pub fn seed(bitmap: &[u64], start_addr: u64, page_size: u64, out: &mut Vec<MemoryRange>) {
    seed_words(bitmap.iter().copied(), start_addr, page_size, out);
}

/// [`seed`] over any iterator of words: after the seed, Cloud
/// Hypervisor's `MemoryRangeTable::from_dirty_bitmap` takes anything that
/// iterates over `u64`s, and its memory manager's `dirty_log` passes the
/// `zip` of KVM's log and the VMM's `get_and_reset()` words, ORed, without
/// collecting them (the seed's last commit).
pub fn seed_words(
    words: impl IntoIterator<Item = u64>,
    start_addr: u64,
    page_size: u64,
    out: &mut Vec<MemoryRange>,
) {
    out.clear();
    let pages = BitposIterator::new(words.into_iter()).map(|p| p..p + 1);
    let runs = coalesce(pages, |a, b| {
        if a.end == b.start {
            Ok(a.start..b.end)
        } else {
            Err((a, b))
        }
    });
    out.extend(runs.map(|r| MemoryRange {
        gpa: start_addr + r.start * page_size,
        length: (r.end - r.start) * page_size,
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_agree_on_small_cases() {
        let cases: [&[u64]; 5] = [
            &[],
            &[0, 0],
            &[!0, !0],
            &[0b1011, 1 << 63, 1, 0, 1 << 63],
            &[0x8000_0000_0000_0001, 0xF0F0],
        ];
        let want: [&[(u64, u64)]; 5] = [
            &[],
            &[],
            &[(0, 128)],
            &[(0, 2), (3, 1), (127, 2), (319, 1)],
            &[(0, 1), (63, 1), (68, 4), (76, 4)],
        ];
        for (bm, w) in cases.iter().zip(want) {
            let w: Vec<MemoryRange> = w
                .iter()
                .map(|&(p, n)| MemoryRange {
                    gpa: 0x1000 + p * 4096,
                    length: n * 4096,
                })
                .collect();
            let (mut a, mut b) = (vec![], vec![]);
            before(bm, 0x1000, 4096, &mut a);
            seed(bm, 0x1000, 4096, &mut b);
            assert_eq!(a, w, "before {bm:x?}");
            assert_eq!(b, w, "seed {bm:x?}");
        }
    }
}
