//! The free "lists": one bitmap per order, a bit per aligned block, with
//! summary levels above each bitmap for the lowest-block search.
//!
//! The kernel threads free blocks on per-order doubly linked lists through
//! `struct page`. A push then writes the old head's back link and an unlink
//! writes both neighbours': cache lines anywhere in the zone, one or two per
//! merge step. Here a free block of order `o` is one set bit in the order's
//! bitmap, and the bitmaps are laid out so that a block's bit and its
//! buddy's share one `u64` (bit 0 of each bitmap is a block number that is
//! a multiple of 64). One merge step is then: load the word, test the
//! buddy's bit, clear it. Every bitmap together is about two bits per page
//! (256 KiB for a 1M-page zone), so a merge walk stays in L1/L2.
//!
//! Above each bitmap sit summary levels, each bit saying "this word of the
//! level below may be non-zero", up to a single top word: finding the lowest
//! free block of an order is one descent (4 words for 1M pages), and a
//! per-order hint (a word at or below the lowest non-zero one) usually
//! spares even that. Summary bits are set eagerly (a word becoming non-zero
//! sets its bit, stopping at the first bit already set) and cleared lazily:
//! taking a buddy in a merge never touches the summaries; a descent clears
//! the stale bits it meets and the bits of the words it empties.
//!
//! A descent leaves every word below the one it stops at with a clear
//! summary bit, and only a descent raises the hint, so a set summary bit
//! also says that its word lies at or above the hint: a word becoming
//! non-zero whose bit is already set leaves the hint alone. Each order
//! also remembers the last word found with its bit set (forgotten by every
//! descent), so frees of nearby pages, which make one word non-zero over
//! and over, compare one index instead of loading the summary.
//!
//! Invariants (checked by `validate()`): a non-zero word has its summary
//! bit set; a summary bit never names a word past its level's end; no
//! non-zero bitmap word, and no word with its summary bit set, lies below
//! the order's hint; the remembered word is a bitmap word at or above the
//! hint with its summary bit set.

use alloc::vec::Vec;

/// Most summary levels (level 0 is the bitmap): 2^32 pages are 2^26 leaf
/// words, then 2^20, 2^14, 2^8, 2^2 and one: six levels.
pub(super) const LEVELS: usize = 8;

/// The bitmaps and summaries of one order.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct OrderMap {
    /// Block number (`pfn >> order`) of bit 0 of the bitmap: a multiple of
    /// 64, so a block's bit and its buddy's share a word.
    pub first: u64,
    /// Start of each level in [`FreeMap::words`] (level 0: the bitmap).
    pub start: [usize; LEVELS],
    /// Words in each level.
    pub len: [usize; LEVELS],
    /// The top level (a single word).
    pub top: usize,
}

/// Per-order free-block bitmaps with their counters.
#[derive(Clone, Debug)]
pub(super) struct FreeMap {
    /// Every level of every order.
    pub words: Vec<u64>,
    /// For each order, the index in `words` of the word holding absolute
    /// block number 0 (wrapping: `start[0] - first / 64`), so the word of
    /// block `k` is `off[o] + k / 64` and its bit `k % 64`.
    off: [usize; 32],
    /// Hot copies of each order's level starts: the bitmap, and the first
    /// summary level (`usize::MAX` when the bitmap is one word).
    leaf: [usize; 32],
    sum1: [usize; 32],
    /// Hot copy of each order's `first`.
    first: [u64; 32],
    /// Each order's layout (`0..=max_order`).
    pub orders: Vec<OrderMap>,
    /// The largest order.
    max: u32,
    /// For each order, an index in `words` at or below the order's lowest
    /// non-zero bitmap word (the bitmap's end when none was ever set):
    /// lowered by inserts, moved up only by a descent that finds the lowest
    /// word.
    pub hint: [usize; 32],
    /// For each order, a bitmap word (index in `words`) known to have its
    /// summary bit set and to lie at or above the hint, or `usize::MAX`:
    /// set by [`FreeMap::mark_up`], forgotten by every descent (the only
    /// code that clears summary bits or raises the hint). Frees of nearby
    /// pages insert into one word over and over; this spares them the
    /// summary load.
    pub marked: [usize; 32],
    /// Free blocks of each order (the only counters: the free page count
    /// and the non-empty orders are derived from them, so a free updates
    /// one counter per order it touches and nothing else).
    pub count: [u64; 32],
}

impl FreeMap {
    /// Empty bitmaps for the pages `[base, base + pages)`, orders
    /// `0..=max_order`.
    pub fn new(base: u64, pages: u64, max_order: u32) -> FreeMap {
        let mut words = 0usize;
        let mut orders = Vec::with_capacity(max_order as usize + 1);
        let (mut off, mut hint) = ([0usize; 32], [0usize; 32]);
        let (mut leaf, mut sum1) = ([0usize; 32], [usize::MAX; 32]);
        let mut firsts = [0u64; 32];
        for o in 0..=max_order {
            let first = (base >> o) & !63;
            let last = if pages == 0 {
                first
            } else {
                (base + (pages - 1)) >> o
            };
            let mut m = OrderMap {
                first,
                ..OrderMap::default()
            };
            let mut n = ((last - first) / 64 + 1) as usize;
            let mut l = 0;
            loop {
                m.start[l] = words;
                m.len[l] = n;
                words += n;
                if n == 1 || l + 1 == LEVELS {
                    break;
                }
                n = n.div_ceil(64);
                l += 1;
            }
            debug_assert_eq!(m.len[l], 1, "too many summary levels");
            m.top = l;
            off[o as usize] = m.start[0].wrapping_sub((first >> 6) as usize);
            hint[o as usize] = m.start[0] + m.len[0];
            leaf[o as usize] = m.start[0];
            firsts[o as usize] = first;
            if m.top > 0 {
                sum1[o as usize] = m.start[1];
            }
            orders.push(m);
        }
        FreeMap {
            words: alloc::vec![0; words],
            off,
            hint,
            marked: [usize::MAX; 32],
            leaf,
            sum1,
            first: firsts,
            orders,
            max: max_order,
            count: [0; 32],
        }
    }

    /// The smallest order at or above `order` with a free block.
    #[inline]
    pub fn first_nonempty(&self, order: u32) -> Option<u32> {
        (order..self.orders.len() as u32).find(|&o| self.count[o as usize] != 0)
    }

    /// The largest order with a free block.
    pub fn last_nonempty(&self) -> Option<u32> {
        (0..self.orders.len() as u32)
            .rev()
            .find(|&o| self.count[o as usize] != 0)
    }

    /// Pages in free blocks.
    pub fn free_pages(&self) -> u64 {
        self.count.iter().enumerate().map(|(o, &c)| c << o).sum()
    }

    /// The bitmap word (index in `words`) and bit of block number `k`
    /// (`pfn >> o`) of order `o`.
    #[inline(always)]
    fn word_of(&self, o: u32, k: u64) -> (usize, u64) {
        (
            self.off[(o & 31) as usize].wrapping_add((k >> 6) as usize),
            1 << (k & 63),
        )
    }

    /// The bitmap word (index in `words`) and bit of the block of order `o`
    /// at `pfn`.
    #[inline(always)]
    fn locate(&self, o: u32, pfn: u64) -> (usize, u64) {
        self.word_of(o, pfn >> o)
    }

    /// Puts the free block of order `order` at `pfn` (aligned, in the span,
    /// its pages not in any block) on the map, first merging it with its
    /// free buddies up to order `max` (`__free_one_page`'s loop). Each step
    /// reads one word, which holds both the block's bit and its buddy's;
    /// the buddy taken is not unlinked from anything, and the summaries are
    /// left to be cleared lazily.
    #[inline(always)]
    pub fn merge_insert(&mut self, pfn: u64, order: u32, max: u32) {
        let (mut k, mut o) = (pfn >> order, order);
        // The first step apart: for a single page its order is a constant.
        if o < max {
            let (w, b) = self.word_of(o, k ^ 1);
            let word = self.words[w];
            if word & b != 0 {
                self.words[w] = word & !b;
                self.count[(o & 31) as usize] -= 1;
                k >>= 1;
                o += 1;
            } else {
                // No merge: the block's own bit, in the same word.
                self.words[w] = word | 1 << (k & 63);
                if word == 0 {
                    self.mark_up(o, w);
                }
                self.count[(o & 31) as usize] += 1;
                return;
            }
        }
        while o < max {
            let (w, b) = self.word_of(o, k ^ 1);
            let word = self.words[w];
            if word & b == 0 {
                // The walk ends here: the block's own bit is in this word.
                self.words[w] = word | 1 << (k & 63);
                if word == 0 {
                    self.mark_up(o, w);
                }
                self.count[(o & 31) as usize] += 1;
                return;
            }
            self.words[w] = word & !b;
            self.count[(o & 31) as usize] -= 1;
            k >>= 1;
            o += 1;
        }
        let (w, b) = self.word_of(o, k);
        let word = self.words[w];
        self.words[w] = word | b;
        if word == 0 {
            self.mark_up(o, w);
        }
        self.count[(o & 31) as usize] += 1;
    }

    /// [`FreeMap::merge_insert`] of one page up to the map's largest order:
    /// the hot path of a single-page free. Each step loads one word, which
    /// holds the block's bit and its buddy's; the word of the last step
    /// takes the merged block's bit.
    ///
    /// # Safety
    /// `pfn` lies in the span the map was built for (`[base, base + pages)`
    /// of [`FreeMap::new`]). Then at every order `o` up to the largest, the
    /// block number `pfn >> o` and its buddy's lie in one word of the
    /// order's bitmap, which covers the block numbers from `(base >> o) &
    /// !63` to `(base + pages - 1) >> o`: the word index needs no bounds
    /// check. (The page must also be in no free block, as for
    /// `merge_insert`; that is the map's consistency, not memory safety.)
    #[inline(always)]
    pub unsafe fn merge_insert_page(&mut self, pfn: u64) {
        let max = self.max;
        let (mut k, mut o) = (pfn, 0u32);
        loop {
            let ou = (o & 31) as usize;
            let w = self.off[ou].wrapping_add((k >> 6) as usize);
            debug_assert!(w < self.words.len(), "page outside the span");
            // SAFETY: `k` is `pfn >> o` with `pfn` in the span and `o` at
            // most the largest order: `w` is in order `o`'s bitmap (see
            // `# Safety`).
            let word = unsafe { *self.words.get_unchecked(w) };
            let buddy = (k ^ 1) & 63;
            if o < max && (word >> buddy) & 1 != 0 {
                // Take the free buddy and climb: the block at `k >> 1`
                // covers `pfn` too.
                // SAFETY: the same word as above.
                unsafe {
                    *self.words.get_unchecked_mut(w) = word & (!1u64).rotate_left(buddy as u32)
                };
                self.count[ou] -= 1;
                k >>= 1;
                o += 1;
                continue;
            }
            // SAFETY: the same word as above.
            unsafe { *self.words.get_unchecked_mut(w) = word | 1 << (k & 63) };
            if word == 0 {
                self.mark_up(o, w);
            }
            self.count[ou] += 1;
            return;
        }
    }

    /// Whether the block of order `o` at `pfn` (aligned, in the span) is
    /// free.
    #[inline]
    pub fn contains(&self, o: u32, pfn: u64) -> bool {
        let (w, m) = self.locate(o, pfn);
        self.words[w] & m != 0
    }

    /// Puts the free block of order `o` at `pfn` (aligned, in the span,
    /// not yet present) on the map.
    #[inline(always)]
    pub fn insert(&mut self, o: u32, pfn: u64) {
        let (w, m) = self.locate(o, pfn);
        let word = self.words[w];
        self.words[w] = word | m;
        if word == 0 {
            self.mark_up(o, w);
        }
        self.count[o as usize] += 1;
    }

    /// Takes the free block of order `o` at `pfn` (present) off the map.
    #[inline]
    pub fn remove(&mut self, o: u32, pfn: u64) {
        let (w, m) = self.locate(o, pfn);
        debug_assert!(self.words[w] & m != 0, "removing a block not on the map");
        self.words[w] &= !m;
        self.uncount(o);
    }

    #[inline(always)]
    fn uncount(&mut self, o: u32) {
        self.count[o as usize] -= 1;
    }

    /// Word `w` (index in `words`) of order `o`'s bitmap became non-zero:
    /// set its summary bits, up to the first one already set, and lower the
    /// order's hint to it if it lies below.
    #[inline(always)]
    fn mark_up(&mut self, o: u32, w: usize) {
        let ou = (o & 31) as usize;
        if w == self.marked[ou] {
            return;
        }
        // Usually the bit one level up is still set (summaries are cleared
        // lazily): one load decides. A set bit also says that the word is
        // at or above the hint (no word below the hint has its bit set), so
        // the hint is left alone.
        let idx = w - self.leaf[ou];
        let p = self.sum1[ou].wrapping_add(idx >> 6);
        if self.words.get(p).is_some_and(|&s| s >> (idx & 63) & 1 != 0) {
            self.marked[ou] = w;
            return;
        }
        self.mark_up_slow(o, w);
    }

    /// [`FreeMap::mark_up`] when the summary bit is clear (or the bitmap has
    /// no summary level): the hint, then the summary levels.
    #[inline(never)]
    fn mark_up_slow(&mut self, o: u32, w: usize) {
        let ou = (o & 31) as usize;
        if w < self.hint[ou] {
            self.hint[ou] = w;
        }
        self.marked[ou] = w;
        self.mark_up_levels(o, w);
    }

    /// [`FreeMap::mark_up`] walking the summary levels.
    fn mark_up_levels(&mut self, o: u32, w: usize) {
        let m = &self.orders[o as usize];
        let mut idx = w - m.start[0];
        for l in 1..=m.top {
            let p = m.start[l] + (idx >> 6);
            let bit = 1u64 << (idx & 63);
            let word = self.words[p];
            if word & bit != 0 {
                return;
            }
            self.words[p] = word | bit;
            idx >>= 6;
        }
    }

    /// Takes the lowest free block of order `o` off the map and returns its
    /// first pfn; `None` if the order has none. The word at the order's
    /// hint, when non-zero, holds it (one load); otherwise one descent
    /// through the summaries finds it, clearing the stale bits it meets and
    /// the bits of the words it empties, and moves the hint there.
    #[inline]
    pub fn pop_first(&mut self, o: u32) -> Option<u64> {
        let ou = (o & 31) as usize;
        let h = self.hint[ou];
        if let Some(w) = self.words.get_mut(h).filter(|w| **w != 0) {
            let bit = w.trailing_zeros();
            *w &= *w - 1;
            self.count[ou] -= 1;
            // The block number: bitmap word `h - leaf` holds blocks from
            // `first + 64 * (h - leaf)`.
            let word = (h - self.leaf[ou]) as u64 + (self.first[ou] >> 6);
            let k = word << 6 | u64::from(bit);
            return Some(k << o);
        }
        self.pop_first_descend(o)
    }

    /// [`FreeMap::pop_first`] when the hint's word is empty.
    fn pop_first_descend(&mut self, o: u32) -> Option<u64> {
        let ou = (o & 31) as usize;
        // It may clear summary bits and raise the hint.
        self.marked[ou] = usize::MAX;
        let (orders, words) = (&self.orders, &mut self.words);
        let m = orders.get(ou)?;
        let mut path = [0usize; LEVELS];
        'descend: loop {
            let mut idx = 0usize;
            let mut l = m.top;
            loop {
                path[l] = idx;
                let w = words[m.start[l] + idx];
                if w == 0 {
                    if l == m.top {
                        return None;
                    }
                    // A stale summary bit: clear it and start again.
                    words[m.start[l + 1] + (idx >> 6)] &= !(1u64 << (idx & 63));
                    continue 'descend;
                }
                let child = (idx << 6) | w.trailing_zeros() as usize;
                if l == 0 {
                    let left = w & (w - 1);
                    words[m.start[0] + idx] = left;
                    // Nothing lies below this word: the hint moves here.
                    self.hint[ou] = m.start[0] + idx;
                    if left == 0 {
                        // Clear the summary bits of the words emptied.
                        for l in 1..=m.top {
                            let p = m.start[l] + path[l];
                            let left = words[p] & !(1u64 << (path[l - 1] & 63));
                            words[p] = left;
                            if left != 0 {
                                break;
                            }
                        }
                    }
                    self.count[ou] -= 1;
                    return Some((m.first + child as u64) << o);
                }
                l -= 1;
                idx = child;
            }
        }
    }

    /// Calls `f(pfn)` for every free block of order `o`, in pfn order.
    pub fn for_each(&self, o: u32, mut f: impl FnMut(u64)) {
        let m = &self.orders[o as usize];
        let leaf = &self.words[m.start[0]..m.start[0] + m.len[0]];
        for (k, &w) in leaf.iter().enumerate() {
            let mut w = w;
            while w != 0 {
                let rel = (k as u64) << 6 | u64::from(w.trailing_zeros());
                f((m.first + rel) << o);
                w &= w - 1;
            }
        }
    }

    /// Level `l` of order `o`'s map.
    #[cfg(any(test, feature = "testing"))]
    pub fn level(&self, o: u32, l: usize) -> &[u64] {
        let m = &self.orders[o as usize];
        &self.words[m.start[l]..m.start[l] + m.len[l]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;

    /// Against a sorted set: inserts, buddy takes, removes and pops, with
    /// the summary invariant checked after each, on spans of every size
    /// class (one word, several levels) and unaligned bases.
    #[test]
    fn matches_a_set() {
        let mut r = Rng(0x0F4E_E3A9);
        for &(base, pages) in &[
            (0u64, 1u64),
            (5, 63),
            (64, 64),
            (3, 4097),
            (1000, 70_000),
            (u64::MAX - 300_000, 300_000),
        ] {
            let mut f = FreeMap::new(base, pages, 3);
            let mut set = alloc::collections::BTreeSet::new();
            for _ in 0..20_000 {
                let o = r.below(4) as u32;
                let size = 1u64 << o;
                let lo = base.next_multiple_of(size);
                if lo.checked_add(size).is_none_or(|e| e > base + pages) {
                    continue;
                }
                let pfn = lo + r.below((base + pages - lo) / size) * size;
                match r.below(4) {
                    0 | 1 => {
                        if !set.contains(&(o, pfn)) {
                            f.insert(o, pfn);
                            set.insert((o, pfn));
                        }
                    }
                    2 => {
                        // Merge with free buddies up to order 3 (a buddy
                        // outside the span is never on the map), unless
                        // the block or the merged one is already there.
                        let (mut p, mut q) = (pfn, o);
                        let mut model = set.clone();
                        model.remove(&(o, pfn));
                        while q < 3 && model.remove(&(q, p ^ (1 << q))) {
                            p &= !(1 << q);
                            q += 1;
                        }
                        if !set.contains(&(o, pfn)) && model.insert((q, p)) {
                            if o == 0 && r.below(2) == 0 {
                                // SAFETY: `pfn` is in the span of `f`.
                                unsafe { f.merge_insert_page(pfn) };
                            } else {
                                f.merge_insert(pfn, o, 3);
                            }
                            set = model;
                        } else if set.remove(&(o, pfn)) {
                            f.remove(o, pfn);
                        }
                    }
                    _ => {
                        let want = set.iter().find(|b| b.0 == o).copied();
                        assert_eq!(f.pop_first(o), want.map(|b| b.1));
                        if let Some(b) = want {
                            set.remove(&b);
                        }
                    }
                }
                for o in 0..4 {
                    let mut got = Vec::new();
                    f.for_each(o, |p| got.push(p));
                    let want: Vec<u64> = set.iter().filter(|b| b.0 == o).map(|b| b.1).collect();
                    assert_eq!(got, want);
                    assert_eq!(f.count[o as usize], want.len() as u64);
                    assert_eq!(f.first_nonempty(o) == Some(o), !want.is_empty());
                    for p in &want {
                        assert!(f.contains(o, *p));
                    }
                    let m = f.orders[o as usize];
                    // Below the hint: zero words with clear summary bits;
                    // the marked word at or above it, its bit set.
                    let below = f.hint[o as usize] - m.start[0];
                    for k in 0..below.min(m.len[0]) {
                        assert_eq!(f.level(o, 0)[k], 0);
                        if m.top > 0 {
                            assert!(f.level(o, 1)[k >> 6] >> (k & 63) & 1 == 0);
                        }
                    }
                    let marked = f.marked[o as usize];
                    if marked != usize::MAX {
                        let k = marked - m.start[0];
                        assert!(k < m.len[0] && marked >= f.hint[o as usize]);
                        if m.top > 0 {
                            assert!(f.level(o, 1)[k >> 6] >> (k & 63) & 1 == 1);
                        }
                    }
                    for l in 1..=m.top {
                        let (below, above) = (f.level(o, l - 1), f.level(o, l));
                        for (k, &w) in below.iter().enumerate() {
                            if w != 0 {
                                assert!(above[k >> 6] >> (k & 63) & 1 == 1);
                            }
                        }
                    }
                }
            }
        }
    }
}
