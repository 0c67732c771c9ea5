//! The naive buddy-allocator model: one state per page (free, poisoned,
//! reference count), the free blocks derived as the canonical (fully merged)
//! form of the free pages, and `merge_fixpoint`, the slow merge that form is
//! checked against. Used by the `buddy` test target.

use spacekit::buddy::{BuddyError, FreeSummary};
use std::collections::BTreeSet;

pub type E = BuddyError;

/// The canonical (fully merged) free blocks of a span whose page `i` is
/// `base + i`: every maximal run of free pages cut greedily into chunks of
/// order `min(alignment of pfn, log2(pages left in the run), max_order)`.
/// `canonical_form_is_the_merge_fixpoint` checks this against repeated
/// buddy merging.
pub fn canonical_blocks(base: u64, free: &[bool], max_order: u32) -> Vec<(u64, u32)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < free.len() {
        if !free[i] {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < free.len() && free[j] {
            j += 1;
        }
        let mut a = i;
        while a < j {
            let pfn = base + a as u64;
            let o = pfn.trailing_zeros().min((j - a).ilog2()).min(max_order);
            out.push((pfn, o));
            a += 1 << o;
        }
        i = j;
    }
    out
}

/// The free blocks obtained the slow way: every free page a block of order
/// 0, then merge any two buddies of one order below `max_order` until none
/// are left.
pub fn merge_fixpoint(base: u64, free: &[bool], max_order: u32) -> Vec<(u64, u32)> {
    let mut set: BTreeSet<(u64, u32)> = free
        .iter()
        .enumerate()
        .filter(|(_, &f)| f)
        .map(|(i, _)| (base + i as u64, 0))
        .collect();
    loop {
        let pair = set.iter().find_map(|&(p, o)| {
            let buddy = p ^ (1 << o);
            (o < max_order && set.contains(&(buddy, o))).then_some((p, buddy, o))
        });
        let Some((p, buddy, o)) = pair else { break };
        set.remove(&(p, o));
        set.remove(&(buddy, o));
        set.insert((p.min(buddy), o + 1));
    }
    set.into_iter().collect()
}

/// One page of the model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MPage {
    pub free: bool,
    pub poisoned: bool,
    pub refs: u32,
}

/// The naive model: one state per page; the free blocks are derived.
#[derive(Clone, Debug)]
pub struct Model {
    pub base: u64,
    pub max_order: u32,
    pub pages: Vec<MPage>,
}

pub const REF_LIMIT: u32 = (1 << 24) - 1;

impl Model {
    pub fn new(base: u64, pages: u64, max_order: u32) -> Self {
        Model {
            base,
            max_order,
            pages: vec![MPage::default(); pages as usize],
        }
    }

    pub fn end(&self) -> u64 {
        self.base + self.pages.len() as u64
    }

    fn span(&self, pfn: u64, n: u64) -> Result<std::ops::Range<usize>, E> {
        let bad = E::OutOfRange { pfn, pages: n };
        if pfn < self.base {
            return Err(bad);
        }
        let end = pfn.checked_add(n).ok_or(bad)?;
        if end > self.end() {
            return Err(bad);
        }
        Ok((pfn - self.base) as usize..(end - self.base) as usize)
    }

    fn free_flags(&self) -> Vec<bool> {
        self.pages.iter().map(|p| p.free).collect()
    }

    pub fn blocks(&self) -> Vec<(u64, u32)> {
        canonical_blocks(self.base, &self.free_flags(), self.max_order)
    }

    pub fn free_count(&self) -> u64 {
        self.pages.iter().filter(|p| p.free).count() as u64
    }

    fn first_free(&self, r: std::ops::Range<usize>) -> Option<u64> {
        let i0 = r.start;
        self.pages[r]
            .iter()
            .position(|p| p.free)
            .map(|k| self.base + (i0 + k) as u64)
    }

    pub fn add_range(&mut self, pfn: u64, n: u64) -> Result<FreeSummary, E> {
        let r = self.span(pfn, n)?;
        if let Some(p) = self.first_free(r.clone()) {
            return Err(E::AlreadyFree { pfn: p });
        }
        let mut s = FreeSummary::default();
        for p in &mut self.pages[r] {
            p.refs = 0;
            if p.poisoned {
                s.poisoned += 1;
            } else {
                p.free = true;
                s.freed += 1;
            }
        }
        Ok(s)
    }

    /// The pfns `alloc_pages(order)` may return: the heads of the free
    /// blocks of the smallest order at or above `order` (the block is split
    /// and its lowest part handed out).
    pub fn alloc_candidates(&self, order: u32) -> Result<Vec<u64>, E> {
        if order > self.max_order {
            return Err(E::BadOrder {
                order,
                max_order: self.max_order,
            });
        }
        let blocks = self.blocks();
        let best = blocks
            .iter()
            .map(|b| b.1)
            .filter(|&o| o >= order)
            .min()
            .ok_or(E::NoMemory { order })?;
        Ok(blocks.iter().filter(|b| b.1 == best).map(|b| b.0).collect())
    }

    /// Hands out `[pfn, pfn + 2^order)`; its first page gets the reference.
    pub fn take_block(&mut self, pfn: u64, order: u32) {
        let r = self.span(pfn, 1 << order).unwrap();
        let i0 = r.start;
        for p in &mut self.pages[r] {
            assert!(p.free && !p.poisoned, "handed out a page that was not free");
            p.free = false;
            p.refs = 0;
        }
        self.pages[i0].refs = 1;
    }

    pub fn free_pages(&mut self, pfn: u64, order: u32) -> Result<bool, E> {
        if order > self.max_order {
            return Err(E::BadOrder {
                order,
                max_order: self.max_order,
            });
        }
        let n = 1u64 << order;
        if !pfn.is_multiple_of(n) {
            return Err(E::Misaligned { pfn, order });
        }
        let r = self.span(pfn, n)?;
        if let Some(p) = self.first_free(r.clone()) {
            return Err(E::AlreadyFree { pfn: p });
        }
        let head = &mut self.pages[r.start];
        if head.refs == 0 {
            return Err(E::NotReferenced { pfn });
        }
        head.refs -= 1;
        // Held back: references left on the first page, a poisoned page,
        // or a later page still holding a reference.
        let block = &self.pages[r.clone()];
        if block[0].refs > 0
            || block.iter().any(|p| p.poisoned)
            || block[1..].iter().any(|p| p.refs > 0)
        {
            return Ok(false);
        }
        for p in &mut self.pages[r] {
            p.free = true;
            p.refs = 0;
        }
        Ok(true)
    }

    pub fn get_page(&mut self, pfn: u64) -> Result<u32, E> {
        let r = self.span(pfn, 1)?;
        let p = &mut self.pages[r.start];
        if p.free {
            return Err(E::AlreadyFree { pfn });
        }
        if p.refs == REF_LIMIT {
            return Err(E::RefcountOverflow { pfn });
        }
        p.refs += 1;
        Ok(p.refs)
    }

    pub fn put_ref(&mut self, pfn: u64) -> Result<u32, E> {
        let r = self.span(pfn, 1)?;
        let p = &mut self.pages[r.start];
        if p.free {
            return Err(E::AlreadyFree { pfn });
        }
        if p.refs == 0 {
            return Err(E::NotReferenced { pfn });
        }
        p.refs -= 1;
        Ok(p.refs)
    }

    /// Refcounted (`frozen == false`) or frozen contiguous free. Refused
    /// for the first page (in pfn order) that is free or, refcounted, has
    /// no reference or, frozen, has one. (Which of two refusals wins when
    /// both apply is not in the spec; this is what the implementation
    /// documents in `first_refusal`.)
    pub fn free_contig(&mut self, pfn: u64, n: u64, frozen: bool) -> Result<FreeSummary, E> {
        let r = self.span(pfn, n)?;
        for (k, p) in self.pages[r.clone()].iter().enumerate() {
            let at = pfn + k as u64;
            if p.free {
                return Err(E::AlreadyFree { pfn: at });
            }
            if !frozen && p.refs == 0 {
                return Err(E::NotReferenced { pfn: at });
            }
            if frozen && p.refs != 0 {
                return Err(E::Referenced {
                    pfn: at,
                    refcount: p.refs,
                });
            }
        }
        let mut s = FreeSummary::default();
        for p in &mut self.pages[r] {
            if !frozen {
                p.refs -= 1;
            }
            if p.refs > 0 {
                s.still_referenced += 1;
            } else if p.poisoned {
                s.poisoned += 1;
            } else {
                p.free = true;
                s.freed += 1;
            }
        }
        Ok(s)
    }

    /// `alloc_contig_range` for `start <= end`.
    pub fn alloc_contig_range(&mut self, start: u64, end: u64) -> Result<(), E> {
        let r = self.span(start, end - start)?;
        let i0 = r.start;
        if let Some(k) = self.pages[r.clone()].iter().position(|p| !p.free) {
            return Err(E::Busy {
                pfn: self.base + (i0 + k) as u64,
            });
        }
        for p in &mut self.pages[r] {
            p.free = false;
            p.refs = 1;
        }
        Ok(())
    }

    /// `alloc_contig_pages` for `nr > 0` and a power-of-two `align`:
    /// try every aligned start from the bottom.
    pub fn alloc_contig_pages(&mut self, nr: u64, align: u64) -> Result<u64, E> {
        let none = E::NoSpace { pages: nr };
        let mut start = self.base.checked_next_multiple_of(align).ok_or(none)?;
        while start.checked_add(nr).is_some_and(|e| e <= self.end()) {
            let i = (start - self.base) as usize;
            if self.pages[i..i + nr as usize].iter().all(|p| p.free) {
                self.alloc_contig_range(start, start + nr).unwrap();
                return Ok(start);
            }
            start = start.checked_add(align).ok_or(none)?;
        }
        Err(none)
    }

    pub fn mark_poisoned(&mut self, pfn: u64) -> Result<(), E> {
        let r = self.span(pfn, 1)?;
        let p = &mut self.pages[r.start];
        if p.free {
            *p = MPage {
                free: false,
                poisoned: true,
                refs: 0,
            };
        } else {
            p.poisoned = true;
        }
        Ok(())
    }

    pub fn clear_poisoned(&mut self, pfn: u64) -> Result<bool, E> {
        let r = self.span(pfn, 1)?;
        let p = &mut self.pages[r.start];
        let was = p.poisoned;
        p.poisoned = false;
        Ok(was)
    }
}
