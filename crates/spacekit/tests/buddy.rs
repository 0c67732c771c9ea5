//! Buddy allocator: the canonical free-block form checked exhaustively
//! against repeated buddy merging, random operation sequences against a
//! per-page model, batched contiguous frees against page-by-page frees,
//! refused calls changing nothing, CMA rounds on a 1M-page zone, and the
//! locked allocator shared by several threads.

use proptest::collection::vec;
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use spacekit::buddy::{
    BuddyAllocator, BuddyConfig, BuddyError, FreeSummary, LockedBuddyAllocator, PageState,
    MAX_ORDER_LIMIT,
};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::Mutex;

type E = BuddyError;

/// Weight of spans at the very top of the pfn space in the proptests.
const TOP: u32 = 1;

// ---------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------

/// The canonical (fully merged) free blocks of a span whose page `i` is
/// `base + i`: every maximal run of free pages cut greedily into chunks of
/// order `min(alignment of pfn, log2(pages left in the run), max_order)`.
/// `canonical_form_is_the_merge_fixpoint` checks this against repeated
/// buddy merging.
fn canonical_blocks(base: u64, free: &[bool], max_order: u32) -> Vec<(u64, u32)> {
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
fn merge_fixpoint(base: u64, free: &[bool], max_order: u32) -> Vec<(u64, u32)> {
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
struct MPage {
    free: bool,
    poisoned: bool,
    refs: u32,
}

/// The naive model: one state per page; the free blocks are derived.
#[derive(Clone, Debug)]
struct Model {
    base: u64,
    max_order: u32,
    pages: Vec<MPage>,
}

const REF_LIMIT: u32 = (1 << 24) - 1;

impl Model {
    fn new(base: u64, pages: u64, max_order: u32) -> Self {
        Model {
            base,
            max_order,
            pages: vec![MPage::default(); pages as usize],
        }
    }

    fn end(&self) -> u64 {
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

    fn blocks(&self) -> Vec<(u64, u32)> {
        canonical_blocks(self.base, &self.free_flags(), self.max_order)
    }

    fn free_count(&self) -> u64 {
        self.pages.iter().filter(|p| p.free).count() as u64
    }

    fn first_free(&self, r: std::ops::Range<usize>) -> Option<u64> {
        let i0 = r.start;
        self.pages[r]
            .iter()
            .position(|p| p.free)
            .map(|k| self.base + (i0 + k) as u64)
    }

    fn add_range(&mut self, pfn: u64, n: u64) -> Result<FreeSummary, E> {
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
    fn alloc_candidates(&self, order: u32) -> Result<Vec<u64>, E> {
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
    fn take_block(&mut self, pfn: u64, order: u32) {
        let r = self.span(pfn, 1 << order).unwrap();
        let i0 = r.start;
        for p in &mut self.pages[r] {
            assert!(p.free && !p.poisoned, "handed out a page that was not free");
            p.free = false;
            p.refs = 0;
        }
        self.pages[i0].refs = 1;
    }

    fn free_pages(&mut self, pfn: u64, order: u32) -> Result<bool, E> {
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

    fn get_page(&mut self, pfn: u64) -> Result<u32, E> {
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

    fn put_ref(&mut self, pfn: u64) -> Result<u32, E> {
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
    fn free_contig(&mut self, pfn: u64, n: u64, frozen: bool) -> Result<FreeSummary, E> {
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
    fn alloc_contig_range(&mut self, start: u64, end: u64) -> Result<(), E> {
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
    fn alloc_contig_pages(&mut self, nr: u64, align: u64) -> Result<u64, E> {
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

    fn mark_poisoned(&mut self, pfn: u64) -> Result<(), E> {
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

    fn clear_poisoned(&mut self, pfn: u64) -> Result<bool, E> {
        let r = self.span(pfn, 1)?;
        let p = &mut self.pages[r.start];
        let was = p.poisoned;
        p.poisoned = false;
        Ok(was)
    }
}

// ---------------------------------------------------------------------------
// Shared checks
// ---------------------------------------------------------------------------

fn zone(base: u64, pages: u64, max_order: u32, section_pages: u64) -> BuddyAllocator {
    BuddyAllocator::with_config(
        base,
        pages,
        BuddyConfig {
            max_order,
            section_pages,
        },
    )
    .unwrap()
}

/// Everything observable about an allocator's state.
#[derive(Debug, PartialEq)]
struct Snapshot {
    blocks: Vec<(u64, u32)>,
    pages: Vec<PageState>,
    free: u64,
    per_order: Vec<u64>,
    largest: Option<u32>,
}

fn snapshot(b: &BuddyAllocator) -> Snapshot {
    Snapshot {
        blocks: b.free_blocks(),
        pages: (b.base()..b.base() + b.pages())
            .map(|p| b.page(p).unwrap())
            .collect(),
        free: b.free_page_count(),
        per_order: b.free_blocks_per_order().to_vec(),
        largest: b.largest_free_order(),
    }
}

/// The snapshot the model predicts.
fn expected(m: &Model) -> Snapshot {
    let blocks = m.blocks();
    let mut head = vec![None; m.pages.len()];
    let mut per_order = vec![0u64; m.max_order as usize + 1];
    for &(p, o) in &blocks {
        head[(p - m.base) as usize] = Some(o);
        per_order[o as usize] += 1;
    }
    Snapshot {
        largest: blocks.iter().map(|b| b.1).max(),
        pages: m
            .pages
            .iter()
            .zip(head)
            .map(|(p, head_of)| PageState {
                free: p.free,
                head_of,
                poisoned: p.poisoned,
                refcount: p.refs,
            })
            .collect(),
        free: m.free_count(),
        per_order,
        blocks,
    }
}

/// The allocator is valid and agrees with the model page by page.
fn check(b: &BuddyAllocator, m: &Model, ctx: &dyn Debug) {
    b.validate()
        .unwrap_or_else(|e| panic!("validate after {ctx:?}: {e}"));
    let (got, want) = (snapshot(b), expected(m));
    assert_eq!(got.blocks, want.blocks, "free blocks after {ctx:?}");
    assert_eq!(got, want, "state after {ctx:?}");
    let end = m.end();
    if m.base > 0 {
        let pfn = m.base - 1;
        assert_eq!(b.page(pfn), Err(E::OutOfRange { pfn, pages: 1 }));
    }
    assert_eq!(b.page(end), Err(E::OutOfRange { pfn: end, pages: 1 }));
}

/// Runs a call that must be refused, checks that nothing changed, and
/// returns the error.
#[track_caller]
fn refused<T: Debug>(
    b: &mut BuddyAllocator,
    f: impl FnOnce(&mut BuddyAllocator) -> Result<T, E>,
) -> E {
    let before = snapshot(b);
    let e = f(b).expect_err("call should be refused");
    assert_eq!(
        snapshot(b),
        before,
        "refused call ({e:?}) changed the state"
    );
    b.validate().unwrap();
    e
}

// ---------------------------------------------------------------------------
// 0. The canonical form the model relies on
// ---------------------------------------------------------------------------

/// Greedy decomposition of free runs == repeated merging, for every free
/// subset of small spans at every base alignment and max order; and the
/// allocator, fed the free pages one at a time, ends in the same blocks.
#[test]
fn canonical_form_is_the_merge_fixpoint() {
    for base in 0..12u64 {
        for pages in 1..=10usize {
            for max_order in 0..=4 {
                for mask in 0u32..1 << pages {
                    let free: Vec<bool> = (0..pages).map(|i| mask >> i & 1 == 1).collect();
                    let want = merge_fixpoint(base, &free, max_order);
                    assert_eq!(
                        canonical_blocks(base, &free, max_order),
                        want,
                        "base {base} free {free:?} max_order {max_order}"
                    );
                    if pages <= 8 && max_order <= 3 {
                        // Fed page by page from the top: each free merges.
                        let mut b = zone(base, pages as u64, max_order, 16);
                        for i in (0..pages).rev().filter(|&i| free[i]) {
                            b.add_range(base + i as u64, 1).unwrap();
                        }
                        b.validate().unwrap();
                        assert_eq!(b.free_blocks(), want, "base {base} free {free:?}");
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// 1. Operation sequences against the model
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
struct Cfg {
    base: u64,
    pages: u64,
    max_order: u32,
    section_shift: u32,
    add_all: bool,
}

impl Cfg {
    fn zone(&self) -> BuddyAllocator {
        zone(
            self.base,
            self.pages,
            self.max_order,
            1 << self.section_shift,
        )
    }
}

#[derive(Clone, Debug)]
enum Op {
    AddRange(u64, u64),
    AllocPages(u32),
    FreePages(u64, u32),
    GetPage(u64),
    PutRef(u64),
    FreeContig(u64, u64),
    FreeFrozen(u64, u64),
    AllocContigRange(u64, u64),
    AllocContigPages(u64, u64),
    MarkPoisoned(u64),
    ClearPoisoned(u64),
    /// Free held allocation `i` whole (`free_pages` or `free_contig_range`).
    FreeHeld(usize),
    /// Ops on page `k` of held allocation `i`.
    HeldGet(usize, u64),
    HeldPut(usize, u64),
    HeldPoison(usize, u64),
    HeldUnpoison(usize, u64),
    /// Contiguous frees of the sub-range at `(offset, len)` of held
    /// allocation `i`.
    HeldContig(usize, u64, u64),
    HeldFrozen(usize, u64, u64),
}

fn arb_cfg() -> impl Strategy<Value = Cfg> {
    (
        prop_oneof![
            6 => 0u64..100,
            // Spans at the very top of the pfn space, in the last section.
            TOP => (0u64..100).prop_map(|k| u64::MAX - 400 + k),
        ],
        prop_oneof![3 => 1u64..300, 1 => 1u64..20],
        0u32..=6,
        // Sections of 2^max_order pages and up (smaller ones are refused).
        prop_oneof![8 => 0u32..=4, 1 => Just(63u32)],
        prop_oneof![1 => Just(false), 3 => Just(true)],
    )
        .prop_map(|(base, pages, max_order, extra, add_all)| Cfg {
            base,
            pages,
            max_order,
            section_shift: if extra == 63 { 63 } else { max_order + extra },
            add_all,
        })
}

/// A pfn: mostly inside the span, sometimes just outside it or far away.
fn arb_pfn(c: Cfg) -> BoxedStrategy<u64> {
    let end = c.base + c.pages;
    prop_oneof![
        12 => c.base..end,
        1 => c.base.saturating_sub(3)..=c.base,
        1 => end..=end.saturating_add(3),
        1 => prop_oneof![Just(0u64), Just(u64::MAX), Just(u64::MAX - 1)],
    ]
    .boxed()
}

fn arb_len(c: Cfg) -> BoxedStrategy<u64> {
    prop_oneof![
        6 => 0u64..=8,
        3 => 0..=c.pages + 1,
        1 => prop_oneof![Just(u64::MAX), Just(u64::MAX - c.base)],
    ]
    .boxed()
}

fn arb_order(c: Cfg) -> BoxedStrategy<u32> {
    prop_oneof![
        12 => 0..=c.max_order,
        1 => c.max_order + 1..=c.max_order + 2,
        1 => prop_oneof![Just(31u32), Just(63), Just(64), Just(u32::MAX)],
    ]
    .boxed()
}

fn arb_align() -> BoxedStrategy<u64> {
    prop_oneof![
        8 => (0u32..=6).prop_map(|s| 1u64 << s),
        2 => 0u64..=10,
        1 => prop_oneof![Just(1u64 << 63), Just(u64::MAX)],
    ]
    .boxed()
}

fn arb_op(c: Cfg) -> BoxedStrategy<Op> {
    let (pfn, len, order) = (arb_pfn(c), arb_len(c), arb_order(c));
    let idx = any::<usize>();
    let k = any::<u64>();
    prop_oneof![
        2 => (pfn.clone(), len.clone()).prop_map(|(p, n)| Op::AddRange(p, n)),
        6 => order.clone().prop_map(Op::AllocPages),
        2 => (pfn.clone(), order).prop_map(|(p, o)| Op::FreePages(p, o)),
        1 => pfn.clone().prop_map(Op::GetPage),
        1 => pfn.clone().prop_map(Op::PutRef),
        2 => (pfn.clone(), len.clone()).prop_map(|(p, n)| Op::FreeContig(p, n)),
        2 => (pfn.clone(), len.clone()).prop_map(|(p, n)| Op::FreeFrozen(p, n)),
        3 => prop_oneof![
            (pfn.clone(), 0u64..=24).prop_map(|(p, d)| Op::AllocContigRange(p, p.saturating_add(d))),
            (pfn.clone(), pfn.clone()).prop_map(|(a, b)| Op::AllocContigRange(a, b)),
        ],
        3 => (len, arb_align()).prop_map(|(n, a)| Op::AllocContigPages(n, a)),
        1 => pfn.clone().prop_map(Op::MarkPoisoned),
        1 => pfn.prop_map(Op::ClearPoisoned),
        5 => idx.prop_map(Op::FreeHeld),
        2 => (idx, k).prop_map(|(i, k)| Op::HeldGet(i, k)),
        2 => (idx, k).prop_map(|(i, k)| Op::HeldPut(i, k)),
        1 => (idx, k).prop_map(|(i, k)| Op::HeldPoison(i, k)),
        1 => (idx, k).prop_map(|(i, k)| Op::HeldUnpoison(i, k)),
        3 => (idx, k, k).prop_map(|(i, a, b)| Op::HeldContig(i, a, b)),
        2 => (idx, k, k).prop_map(|(i, a, b)| Op::HeldFrozen(i, a, b)),
    ]
    .boxed()
}

fn arb_case() -> impl Strategy<Value = (Cfg, Vec<Op>)> {
    arb_cfg().prop_flat_map(|c| (Just(c), vec(arb_op(c), 1..120)))
}

/// An allocation the sequence still holds: `(first pfn, pages, order if
/// it came from alloc_pages)`.
type Held = (u64, u64, Option<u32>);

fn run_ops(c: Cfg, ops: &[Op]) {
    let mut b = c.zone();
    let mut m = Model::new(c.base, c.pages, c.max_order);
    assert_eq!(
        (b.base(), b.pages(), b.max_order(), b.section_pages()),
        (c.base, c.pages, c.max_order, 1 << c.section_shift)
    );
    check(&b, &m, &"new");
    if c.add_all {
        assert_eq!(b.add_range(c.base, c.pages), m.add_range(c.base, c.pages));
        check(&b, &m, &"add_all");
    }
    let mut held: Vec<Held> = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        // The held allocation an op refers to, and a page / sub-range of it.
        let pick = |i: usize| held.get(i % held.len().max(1)).copied();
        let sub = |(p, n, _): Held, a: u64, l: u64| {
            let off = a % n;
            (p + off, 1 + l % (n - off))
        };
        match *op {
            Op::AddRange(p, n) => assert_eq!(b.add_range(p, n), m.add_range(p, n)),
            Op::AllocPages(o) => {
                let got = b.alloc_pages(o);
                match m.alloc_candidates(o) {
                    Err(e) => assert_eq!(got, Err(e)),
                    Ok(heads) => {
                        let p = got.unwrap();
                        assert!(
                            heads.contains(&p),
                            "alloc_pages({o}) gave {p:#x}, not the head of a smallest \
                             fitting block: {heads:x?}"
                        );
                        m.take_block(p, o);
                        held.push((p, 1 << o, Some(o)));
                    }
                }
            }
            Op::FreePages(p, o) => assert_eq!(b.free_pages(p, o), m.free_pages(p, o)),
            Op::GetPage(p) => assert_eq!(b.get_page(p), m.get_page(p)),
            Op::PutRef(p) => assert_eq!(b.put_ref(p), m.put_ref(p)),
            Op::FreeContig(p, n) => {
                assert_eq!(b.free_contig_range(p, n), m.free_contig(p, n, false));
            }
            Op::FreeFrozen(p, n) => {
                assert_eq!(b.free_contig_frozen_range(p, n), m.free_contig(p, n, true));
            }
            Op::AllocContigRange(s, e) => {
                let got = b.alloc_contig_range(s, e);
                if s > e {
                    assert!(
                        matches!(got, Err(E::OutOfRange { pfn, .. }) if pfn == s),
                        "alloc_contig_range({s:#x}, {e:#x}) = {got:?}"
                    );
                } else {
                    assert_eq!(got, m.alloc_contig_range(s, e));
                    if got.is_ok() && e > s {
                        held.push((s, e - s, None));
                    }
                }
            }
            Op::AllocContigPages(n, a) => {
                let got = b.alloc_contig_pages(n, a);
                if n == 0 && !a.is_power_of_two() {
                    // Both refusals apply; the spec does not rank them.
                    assert!(
                        matches!(got, Err(E::ZeroPages | E::BadAlignment { .. })),
                        "alloc_contig_pages(0, {a}) = {got:?}"
                    );
                } else if n == 0 {
                    assert_eq!(got, Err(E::ZeroPages));
                } else if !a.is_power_of_two() {
                    assert_eq!(got, Err(E::BadAlignment { align: a }));
                } else {
                    assert_eq!(got, m.alloc_contig_pages(n, a));
                    if let Ok(p) = got {
                        held.push((p, n, None));
                    }
                }
            }
            Op::MarkPoisoned(p) => assert_eq!(b.mark_poisoned(p), m.mark_poisoned(p)),
            Op::ClearPoisoned(p) => assert_eq!(b.clear_poisoned(p), m.clear_poisoned(p)),
            Op::FreeHeld(i) => {
                let Some((p, n, order)) = pick(i) else {
                    continue;
                };
                match order {
                    Some(o) => assert_eq!(b.free_pages(p, o), m.free_pages(p, o)),
                    None => assert_eq!(b.free_contig_range(p, n), m.free_contig(p, n, false)),
                }
            }
            Op::HeldGet(i, k)
            | Op::HeldPut(i, k)
            | Op::HeldPoison(i, k)
            | Op::HeldUnpoison(i, k) => {
                let Some((p, n, _)) = pick(i) else { continue };
                let p = p + k % n;
                match op {
                    Op::HeldGet(..) => assert_eq!(b.get_page(p), m.get_page(p)),
                    Op::HeldPut(..) => assert_eq!(b.put_ref(p), m.put_ref(p)),
                    Op::HeldPoison(..) => assert_eq!(b.mark_poisoned(p), m.mark_poisoned(p)),
                    _ => assert_eq!(b.clear_poisoned(p), m.clear_poisoned(p)),
                }
            }
            Op::HeldContig(i, a, l) => {
                let Some(h) = pick(i) else { continue };
                let (p, n) = sub(h, a, l);
                assert_eq!(b.free_contig_range(p, n), m.free_contig(p, n, false));
            }
            Op::HeldFrozen(i, a, l) => {
                let Some(h) = pick(i) else { continue };
                let (p, n) = sub(h, a, l);
                assert_eq!(b.free_contig_frozen_range(p, n), m.free_contig(p, n, true));
            }
        }
        check(&b, &m, &(step, op));
        // Forget allocations that are wholly free again.
        held.retain(|&(p, n, _)| {
            let i = (p - c.base) as usize;
            m.pages[i..i + n as usize].iter().any(|pg| !pg.free)
        });
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn ops_match_the_page_model((c, ops) in arb_case()) {
        run_ops(c, &ops);
    }
}

// ---------------------------------------------------------------------------
// 2. Batched contiguous frees == freeing page by page
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Mode {
    Refcounted,
    Frozen,
    Add,
}

#[derive(Clone, Copy, Debug)]
struct BatchCase {
    base: u64,
    pages: u64,
    max_order: u32,
    section_shift: u32,
    off: u64,
    len: u64,
    seed: u64,
    poison: u32,
    extra: u32,
    mode: Mode,
}

fn arb_batch() -> impl Strategy<Value = BatchCase> {
    (
        prop_oneof![
            6 => 0u64..100,
            TOP => (0u64..100).prop_map(|k| u64::MAX - 3000 + k),
        ],
        1u64..2000,
        0u32..=10,
        0u32..=4,
        (any::<u64>(), any::<u64>(), any::<u64>()),
        (0u32..5, 0u32..8),
        prop_oneof![Just(Mode::Refcounted), Just(Mode::Frozen), Just(Mode::Add)],
    )
        .prop_map(
            |(base, pages, max_order, extra_shift, (off, len, seed), (poison, extra), mode)| {
                let off = off % pages;
                BatchCase {
                    base,
                    pages,
                    max_order,
                    section_shift: max_order + extra_shift,
                    off,
                    len: 1 + len % (pages - off),
                    seed,
                    poison,
                    extra,
                    mode,
                }
            },
        )
}

/// Fragments a zone at random, then makes every page of `[s, e)` allocated
/// with at least one reference (taking free runs with
/// `alloc_contig_range`, adding a reference to pages that have none).
fn prepare_range(b: &mut BuddyAllocator, rng: &mut SmallRng, s: u64, e: u64) {
    let mo = b.max_order();
    let (base, end) = (b.base(), b.base() + b.pages());
    let mut blocks = Vec::new();
    for _ in 0..rng.random_range(0..40) {
        let o = rng.random_range(0..=mo);
        if let Ok(p) = b.alloc_pages(o) {
            blocks.push((p, o));
        }
    }
    // Give some back (tail pages of the rest keep no reference).
    for (p, o) in blocks {
        if rng.random_bool(0.5) {
            assert_eq!(b.free_pages(p, o), Ok(true));
        }
    }
    // Holes: poisoned pages outside the range.
    for _ in 0..rng.random_range(0..4) {
        let p = rng.random_range(base..end);
        if !(s..e).contains(&p) {
            b.mark_poisoned(p).unwrap();
        }
    }
    let mut p = s;
    while p < e {
        let st = b.page(p).unwrap();
        if st.free {
            let mut q = p + 1;
            while q < e && b.page(q).unwrap().free {
                q += 1;
            }
            b.alloc_contig_range(p, q).unwrap();
            p = q;
        } else {
            if st.refcount == 0 {
                b.get_page(p).unwrap();
            }
            p += 1;
        }
    }
    b.validate().unwrap();
}

fn run_batch(c: BatchCase) {
    let mut rng = SmallRng::seed_from_u64(c.seed);
    let mut b = zone(c.base, c.pages, c.max_order, 1 << c.section_shift);
    let (s, e) = (c.base + c.off, c.base + c.off + c.len);
    match c.mode {
        Mode::Add => {
            // Everything but the range is free memory; the range's pages
            // are reserved, some with references or poison.
            b.add_range(c.base, c.off).unwrap();
            b.add_range(e, c.base + c.pages - e).unwrap();
            for _ in 0..c.extra {
                b.get_page(rng.random_range(s..e)).unwrap();
            }
        }
        Mode::Refcounted | Mode::Frozen => {
            b.add_range(c.base, c.pages).unwrap();
            prepare_range(&mut b, &mut rng, s, e);
            for _ in 0..c.extra {
                b.get_page(rng.random_range(s..e)).unwrap();
            }
        }
    }
    for _ in 0..c.poison {
        b.mark_poisoned(rng.random_range(s..e)).unwrap();
    }
    if let Mode::Frozen = c.mode {
        for p in s..e {
            while b.page(p).unwrap().refcount > 0 {
                b.put_ref(p).unwrap();
            }
        }
    }
    b.validate().unwrap();
    let before: Vec<PageState> = (s..e).map(|p| b.page(p).unwrap()).collect();
    let mut one = b.clone();

    // Batched.
    let sum = match c.mode {
        Mode::Refcounted => b.free_contig_range(s, c.len),
        Mode::Frozen => b.free_contig_frozen_range(s, c.len),
        Mode::Add => b.add_range(s, c.len),
    }
    .unwrap();
    b.validate().unwrap();

    // One page at a time, in an independent way where there is one.
    let mut want = FreeSummary::default();
    let mut order: Vec<u64> = (s..e).collect();
    order.shuffle(&mut rng);
    for p in order {
        let st = before[(p - s) as usize];
        match c.mode {
            Mode::Refcounted => {
                let freed = one.free_pages(p, 0).unwrap();
                if st.refcount > 1 {
                    want.still_referenced += 1;
                } else if st.poisoned {
                    want.poisoned += 1;
                } else {
                    want.freed += 1;
                }
                assert_eq!(
                    freed,
                    st.refcount == 1 && !st.poisoned,
                    "page {p:#x} {st:?}"
                );
            }
            Mode::Frozen => {
                if st.poisoned {
                    want.poisoned += 1;
                } else {
                    want.freed += 1;
                    one.get_page(p).unwrap();
                    assert_eq!(one.free_pages(p, 0), Ok(true));
                }
            }
            Mode::Add => {
                let r = one.add_range(p, 1).unwrap();
                if st.poisoned {
                    want.poisoned += 1;
                    assert_eq!(r.poisoned, 1);
                } else {
                    want.freed += 1;
                    assert_eq!(r.freed, 1);
                }
            }
        }
    }
    one.validate().unwrap();
    assert_eq!(sum, want);
    assert_eq!(b.free_blocks(), one.free_blocks());
    assert_eq!(snapshot(&b), snapshot(&one));
    // And both are the canonical form of their free pages.
    let free: Vec<bool> = (c.base..c.base + c.pages)
        .map(|p| b.page(p).unwrap().free)
        .collect();
    assert_eq!(
        b.free_blocks(),
        canonical_blocks(c.base, &free, c.max_order)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(768))]

    #[test]
    fn batched_contig_free_equals_page_by_page(c in arb_batch()) {
        run_batch(c);
    }
}

/// The batching paths at their edges: every start alignment and length
/// around a section edge, with sections smaller than, equal to and larger
/// than the largest block.
#[test]
fn batched_free_across_section_edges() {
    for (max_order, section) in [
        (3u32, 8u64),
        (3, 16),
        (2, 4),
        (0, 1),
        (0, 2),
        (1, 2),
        (4, 16),
    ] {
        for off in 0..20u64 {
            for len in 1..=40u64 {
                let base = 3;
                let pages = 64;
                if off + len > pages {
                    continue;
                }
                let mut b = zone(base, pages, max_order, section);
                b.add_range(base, pages).unwrap();
                let s = base + off;
                b.alloc_contig_range(s, s + len).unwrap();
                let mut one = b.clone();
                let mut m = Model::new(base, pages, max_order);
                m.add_range(base, pages).unwrap();
                m.alloc_contig_range(s, s + len).unwrap();
                let want = m.free_contig(s, len, false).unwrap();
                assert_eq!(b.free_contig_range(s, len), Ok(want));
                for p in s..s + len {
                    assert_eq!(one.free_pages(p, 0), Ok(true));
                }
                check(&b, &m, &(max_order, section, off, len));
                assert_eq!(snapshot(&b), snapshot(&one));
            }
        }
    }
}

/// Spans in the last section of the pfn space (the section end is 2^64)
/// and ending at `u64::MAX`: every path that frees a run computes a
/// section edge there.
#[test]
fn spans_at_the_top_of_the_pfn_space() {
    for (base, pages, max_order, section) in [
        (u64::MAX - 1000, 1000, 10, 32768),
        (u64::MAX - 37, 37, 3, 8),
        (u64::MAX - 300, 200, 4, 1 << 63),
        ((1 << 63) + 5, 100, 2, 1 << 63),
    ] {
        let ctx = (base, pages, max_order, section);
        let mut b = zone(base, pages, max_order, section);
        let mut m = Model::new(base, pages, max_order);
        assert_eq!(b.add_range(base, pages), m.add_range(base, pages));
        check(&b, &m, &ctx);
        let p = b.alloc_pages(1).unwrap();
        assert!(m.alloc_candidates(1).unwrap().contains(&p));
        m.take_block(p, 1);
        check(&b, &m, &ctx);
        let end = base + pages;
        assert_eq!(
            b.alloc_contig_range(end - 9, end - 2),
            m.alloc_contig_range(end - 9, end - 2)
        );
        assert_eq!(b.mark_poisoned(end - 1), m.mark_poisoned(end - 1));
        check(&b, &m, &ctx);
        let got = b.alloc_contig_pages(5, 1);
        assert_eq!(got, m.alloc_contig_pages(5, 1));
        assert_eq!(b.free_pages(p, 1), m.free_pages(p, 1));
        assert_eq!(
            b.free_contig_range(end - 9, 7),
            m.free_contig(end - 9, 7, false)
        );
        let q = got.unwrap();
        assert_eq!(b.free_contig_range(q, 5), m.free_contig(q, 5, false));
        assert_eq!(b.clear_poisoned(end - 1), m.clear_poisoned(end - 1));
        assert_eq!(
            b.free_contig_frozen_range(end - 1, 1),
            m.free_contig(end - 1, 1, true)
        );
        check(&b, &m, &ctx);
        assert_eq!(b.free_page_count(), pages);
    }
}

// ---------------------------------------------------------------------------
// 3. Refused calls: typed errors, nothing changes
// ---------------------------------------------------------------------------

#[test]
fn bad_config_is_refused() {
    let bad = |base: u64, pages: u64, max_order: u32, section_pages: u64| {
        let r = BuddyAllocator::with_config(
            base,
            pages,
            BuddyConfig {
                max_order,
                section_pages,
            },
        );
        assert!(
            matches!(r, Err(E::BadConfig { .. })),
            "with_config({base}, {pages}, {max_order}, {section_pages}) = {r:?}"
        );
    };
    bad(0, 16, 10, 0);
    bad(0, 16, 10, 3);
    bad(0, 16, 10, 32768 + 1);
    bad(0, 16, 10, u64::MAX);
    // A max-order block larger than a section.
    bad(0, 16, 4, 8);
    bad(0, 16, 1, 1);
    bad(0, 16, MAX_ORDER_LIMIT, 1 << 29);
    bad(0, 16, MAX_ORDER_LIMIT + 1, 32768);
    bad(0, 16, u32::MAX, 32768);
    bad(0, u64::from(u32::MAX), 10, 32768);
    bad(0, u64::MAX, 10, 32768);
    bad(u64::MAX - 5, 6, 10, 32768);
    bad(u64::MAX, 1, 0, 1);
    assert!(matches!(
        BuddyAllocator::new(0, 1 << 32),
        Err(E::BadConfig { .. })
    ));
    // The limits themselves are fine.
    let b = zone(3, 16, MAX_ORDER_LIMIT, 1 << 63);
    b.validate().unwrap();
    assert_eq!(
        (b.max_order(), b.section_pages()),
        (MAX_ORDER_LIMIT, 1 << 63)
    );
    assert_eq!(
        b.free_blocks_per_order().len(),
        MAX_ORDER_LIMIT as usize + 1
    );
    let top = zone(u64::MAX - 6, 6, 2, 4);
    assert_eq!(top.pages(), 6);
    let d = BuddyConfig::default();
    assert_eq!((d.max_order, d.section_pages), (10, 32768));
    // An empty zone has nothing to give.
    let mut empty = zone(7, 0, 3, 8);
    assert_eq!(empty.add_range(7, 0), Ok(FreeSummary::default()));
    assert_eq!(empty.alloc_pages(0), Err(E::NoMemory { order: 0 }));
    assert_eq!(empty.alloc_contig_pages(1, 1), Err(E::NoSpace { pages: 1 }));
    assert_eq!(empty.page(7), Err(E::OutOfRange { pfn: 7, pages: 1 }));
    assert_eq!(empty.largest_free_order(), None);
    empty.validate().unwrap();
}

#[test]
fn refused_calls_change_nothing() {
    // 200 pages from pfn 13 (unaligned), order <= 4, 32-page sections.
    let (base, pages) = (13u64, 200u64);
    let end = base + pages;
    let mut b = zone(base, pages, 4, 32);

    // Reserved memory: nothing to allocate, nothing to free.
    assert_eq!(
        refused(&mut b, |b| b.alloc_pages(0)),
        E::NoMemory { order: 0 }
    );
    assert_eq!(
        refused(&mut b, |b| b.free_pages(16, 0)),
        E::NotReferenced { pfn: 16 }
    );
    assert_eq!(
        refused(&mut b, |b| b.free_contig_range(20, 5)),
        E::NotReferenced { pfn: 20 }
    );
    assert_eq!(
        refused(&mut b, |b| b.put_ref(20)),
        E::NotReferenced { pfn: 20 }
    );
    assert_eq!(
        refused(&mut b, |b| b.alloc_contig_range(20, 21)),
        E::Busy { pfn: 20 }
    );

    b.add_range(base, pages).unwrap();
    b.validate().unwrap();

    // Out of range: below the base, at the end, and pfn + n overflowing.
    let oor = |pfn, pages| E::OutOfRange { pfn, pages };
    for (p, n) in [
        (base - 1, 1),
        (base - 1, 2),
        (0, 1),
        (end, 1),
        (end - 1, 2),
        (end + 1, 0),
        (base, pages + 1),
        (base, u64::MAX),
        (u64::MAX, 1),
        (u64::MAX - 1, 5),
        (u64::MAX, u64::MAX),
    ] {
        assert_eq!(refused(&mut b, |b| b.add_range(p, n)), oor(p, n));
        assert_eq!(refused(&mut b, |b| b.free_contig_range(p, n)), oor(p, n));
        assert_eq!(
            refused(&mut b, |b| b.free_contig_frozen_range(p, n)),
            oor(p, n)
        );
        if let Some(e) = p.checked_add(n) {
            assert_eq!(refused(&mut b, |b| b.alloc_contig_range(p, e)), oor(p, n));
        }
    }
    for p in [0, base - 1, end, end + 1, u64::MAX] {
        assert_eq!(refused(&mut b, |b| b.get_page(p)), oor(p, 1));
        assert_eq!(refused(&mut b, |b| b.put_ref(p)), oor(p, 1));
        assert_eq!(refused(&mut b, |b| b.mark_poisoned(p)), oor(p, 1));
        assert_eq!(refused(&mut b, |b| b.clear_poisoned(p)), oor(p, 1));
        assert_eq!(b.page(p), Err(oor(p, 1)));
    }
    // A block reaching past either end (aligned, so not Misaligned).
    assert_eq!(refused(&mut b, |b| b.free_pages(8, 3)), oor(8, 8));
    assert_eq!(refused(&mut b, |b| b.free_pages(208, 3)), oor(208, 8));
    assert_eq!(
        refused(&mut b, |b| b.free_pages(u64::MAX - 15, 4)),
        oor(u64::MAX - 15, 16)
    );
    // start > end.
    let e = refused(&mut b, |b| b.alloc_contig_range(50, 49));
    assert!(matches!(e, E::OutOfRange { pfn: 50, .. }), "{e:?}");
    // Empty ranges at the end are fine and change nothing.
    let before = snapshot(&b);
    assert_eq!(b.free_contig_range(end, 0), Ok(FreeSummary::default()));
    assert_eq!(
        b.free_contig_frozen_range(end, 0),
        Ok(FreeSummary::default())
    );
    assert_eq!(b.alloc_contig_range(end, end), Ok(()));
    assert_eq!(snapshot(&b), before);

    // Bad orders (checked before any shift by the order).
    for o in [5, 6, 31, 63, 64, u32::MAX] {
        let bad = E::BadOrder {
            order: o,
            max_order: 4,
        };
        assert_eq!(refused(&mut b, |b| b.alloc_pages(o)), bad);
        assert_eq!(refused(&mut b, |b| b.free_pages(0, o)), bad);
        assert_eq!(refused(&mut b, |b| b.free_pages(32, o)), bad);
    }
    // Bad contiguous allocations.
    assert_eq!(
        refused(&mut b, |b| b.alloc_contig_pages(0, 1)),
        E::ZeroPages
    );
    for a in [0, 3, 6, 12, u64::MAX] {
        assert_eq!(
            refused(&mut b, |b| b.alloc_contig_pages(1, a)),
            E::BadAlignment { align: a }
        );
    }
    for (n, a) in [
        (pages + 1, 1),
        (u64::MAX, 1),
        (1, 1 << 63),
        (pages, 2),
        (198, 8),
    ] {
        assert_eq!(
            refused(&mut b, |b| b.alloc_contig_pages(n, a)),
            E::NoSpace { pages: n }
        );
    }

    // Allocated blocks: misaligned, double frees, partly free blocks.
    let p = b.alloc_pages(3).unwrap();
    b.validate().unwrap();
    assert!(p.is_multiple_of(8) && (base..end - 7).contains(&p));
    for k in 1..8 {
        assert_eq!(
            refused(&mut b, |b| b.free_pages(p + k, 3)),
            E::Misaligned {
                pfn: p + k,
                order: 3
            }
        );
    }
    assert_eq!(
        refused(&mut b, |b| b.free_pages(p + 4, 3)),
        E::Misaligned {
            pfn: p + 4,
            order: 3
        }
    );
    // Tail pages hold no reference.
    assert_eq!(
        refused(&mut b, |b| b.free_pages(p + 2, 1)),
        E::NotReferenced { pfn: p + 2 }
    );
    assert_eq!(
        refused(&mut b, |b| b.free_contig_range(p, 8)),
        E::NotReferenced { pfn: p + 1 }
    );
    assert_eq!(
        refused(&mut b, |b| b.free_contig_frozen_range(p, 8)),
        E::Referenced {
            pfn: p,
            refcount: 1
        }
    );
    // The page below the block is free (only the block is allocated).
    let r0 = p - 1;
    assert!(b.page(r0).unwrap().free);
    assert_eq!(
        refused(&mut b, |b| b.free_contig_range(r0, 9)),
        E::AlreadyFree { pfn: r0 }
    );
    assert_eq!(
        refused(&mut b, |b| b.add_range(r0, 9)),
        E::AlreadyFree { pfn: r0 }
    );
    assert_eq!(
        refused(&mut b, |b| b.alloc_contig_range(r0, r0 + 9)),
        E::Busy { pfn: p }
    );
    assert_eq!(b.free_pages(p, 3), Ok(true));
    b.validate().unwrap();
    // Double free.
    assert_eq!(
        refused(&mut b, |b| b.free_pages(p, 3)),
        E::AlreadyFree { pfn: p }
    );
    assert_eq!(
        refused(&mut b, |b| b.get_page(p + 3)),
        E::AlreadyFree { pfn: p + 3 }
    );
    assert_eq!(
        refused(&mut b, |b| b.put_ref(p + 3)),
        E::AlreadyFree { pfn: p + 3 }
    );
    // A block with one free page inside: freeing it names that page.
    let q = b.alloc_pages(2).unwrap();
    assert_eq!(b.free_contig_frozen_range(q + 3, 1).map(|s| s.freed), Ok(1));
    b.validate().unwrap();
    assert_eq!(
        refused(&mut b, |b| b.free_pages(q, 2)),
        E::AlreadyFree { pfn: q + 3 }
    );
    // Freeing the other three pages brings the block back whole.
    assert_eq!(b.free_contig_frozen_range(q + 1, 2).map(|s| s.freed), Ok(2));
    assert_eq!(b.free_pages(q, 0), Ok(true));
    b.validate().unwrap();
    assert_eq!(b.free_page_count(), pages);
    assert_eq!(
        b.free_blocks(),
        canonical_blocks(base, &vec![true; pages as usize], 4)
    );
}

/// A page's reference count stops at its 24-bit limit.
#[test]
fn refcount_overflow_is_refused() {
    let mut b = zone(0, 4, 2, 4);
    b.add_range(0, 4).unwrap();
    let p = b.alloc_pages(0).unwrap();
    let mut n = 1;
    loop {
        match b.get_page(p) {
            Ok(c) => {
                n += 1;
                assert_eq!(c, n);
            }
            Err(e) => {
                assert_eq!(e, E::RefcountOverflow { pfn: p });
                break;
            }
        }
        assert!(n <= REF_LIMIT, "no overflow at {n}");
    }
    assert_eq!(n, REF_LIMIT);
    assert_eq!(
        refused(&mut b, |b| b.get_page(p)),
        E::RefcountOverflow { pfn: p }
    );
    assert_eq!(b.page(p).unwrap().refcount, REF_LIMIT);
    b.mark_poisoned(p).unwrap();
    assert_eq!(b.page(p).unwrap().refcount, REF_LIMIT);
    assert_eq!(b.put_ref(p), Ok(REF_LIMIT - 1));
    b.validate().unwrap();
}

// ---------------------------------------------------------------------------
// 4. A 1M-page zone: fragmentation, then CMA rounds
// ---------------------------------------------------------------------------

#[test]
fn cma_rounds_on_a_fragmented_million_page_zone() {
    const BASE: u64 = 0x40000;
    const PAGES: u64 = 1 << 20;
    const CMA: u64 = 16384;
    let mut rng = SmallRng::seed_from_u64(0xc3a_0001);
    let mut b = BuddyAllocator::new(BASE, PAGES).unwrap();
    assert_eq!(b.add_range(BASE, PAGES).map(|s| s.freed), Ok(PAGES));
    // Model: free flag per page.
    let mut free = vec![true; PAGES as usize];
    let idx = |p: u64| (p - BASE) as usize;
    let take = |free: &mut Vec<bool>, p: u64, n: u64| {
        for f in &mut free[idx(p)..idx(p) + n as usize] {
            assert!(*f, "page {p:#x}.. handed out twice");
            *f = false;
        }
    };

    // Fragment with buddy allocations, give half back.
    let mut blocks = Vec::new();
    for _ in 0..1500 {
        let o = rng.random_range(0..=10);
        let p = b.alloc_pages(o).unwrap();
        assert!(p.is_multiple_of(1 << o));
        take(&mut free, p, 1 << o);
        blocks.push((p, o));
    }
    blocks.shuffle(&mut rng);
    for &(p, o) in &blocks[..750] {
        assert_eq!(b.free_pages(p, o), Ok(true));
        free[idx(p)..idx(p) + (1 << o)].fill(true);
    }
    // And small pinned runs scattered over the upper half.
    for _ in 0..300 {
        let p = rng.random_range(BASE + 32 * CMA..BASE + PAGES - 64);
        let n = rng.random_range(1..64);
        let got = b.alloc_contig_range(p, p + n);
        match free[idx(p)..idx(p + n)].iter().position(|f| !f) {
            Some(k) => assert_eq!(got, Err(E::Busy { pfn: p + k as u64 })),
            None => {
                assert_eq!(got, Ok(()));
                take(&mut free, p, n);
            }
        }
    }
    let count = |free: &[bool]| free.iter().filter(|&&f| f).count() as u64;
    assert_eq!(b.free_page_count(), count(&free));
    b.validate().unwrap();

    // CMA rounds, some allocations held across rounds, some pages going bad.
    let mut outstanding: Vec<u64> = Vec::new();
    let mut taken = 0;
    for round in 0..50 {
        let want = (BASE..BASE + PAGES)
            .step_by(CMA as usize)
            .find(|&c| free[idx(c)..idx(c + CMA)].iter().all(|&f| f));
        let got = b.alloc_contig_pages(CMA, CMA);
        match want {
            Some(c) => {
                assert_eq!(got, Ok(c), "round {round}");
                take(&mut free, c, CMA);
                outstanding.push(c);
                taken += 1;
            }
            None => assert_eq!(got, Err(E::NoSpace { pages: CMA }), "round {round}"),
        }
        if !outstanding.is_empty() && (outstanding.len() > 3 || rng.random_bool(0.6)) {
            let c = outstanding.swap_remove(rng.random_range(0..outstanding.len()));
            let bad = rng.random_bool(0.1).then(|| c + rng.random_range(0..CMA));
            if let Some(p) = bad {
                b.mark_poisoned(p).unwrap();
            }
            let sum = b.free_contig_range(c, CMA).unwrap();
            let nbad = u64::from(bad.is_some());
            assert_eq!(
                sum,
                FreeSummary {
                    freed: CMA - nbad,
                    still_referenced: 0,
                    poisoned: nbad
                }
            );
            free[idx(c)..idx(c + CMA)].fill(true);
            if let Some(p) = bad {
                free[idx(p)] = false;
            }
        }
        assert_eq!(b.free_page_count(), count(&free), "round {round}");
    }
    assert!(taken >= 25, "only {taken} CMA allocations succeeded");
    for c in outstanding {
        assert_eq!(b.free_contig_range(c, CMA).map(|s| s.freed), Ok(CMA));
        free[idx(c)..idx(c + CMA)].fill(true);
    }
    assert_eq!(b.free_page_count(), count(&free));
    b.validate().unwrap();
    assert_eq!(b.free_blocks(), canonical_blocks(BASE, &free, 10));
    assert_eq!(b.largest_free_order(), Some(10));
}

// ---------------------------------------------------------------------------
// 5. The locked allocator from several threads
// ---------------------------------------------------------------------------

/// Blocks some thread holds: first pfn -> end, under its own mutex.
struct Claims(Mutex<BTreeMap<u64, u64>>);

impl Claims {
    fn claim(&self, s: u64, e: u64) {
        let mut m = self.0.lock().unwrap();
        if let Some((&ps, &pe)) = m.range(..e).next_back() {
            assert!(pe <= s, "[{s:#x}, {e:#x}) overlaps held [{ps:#x}, {pe:#x})");
        }
        m.insert(s, e);
    }

    fn release(&self, s: u64) {
        assert!(self.0.lock().unwrap().remove(&s).is_some());
    }
}

#[test]
fn locked_allocator_shared_by_threads() {
    const BASE: u64 = 0x1003;
    const PAGES: u64 = 1 << 16;
    let mut inner = zone(BASE, PAGES, 10, 4096);
    inner.add_range(BASE, PAGES).unwrap();
    let start_blocks = inner.free_blocks();
    let z = LockedBuddyAllocator::new(inner);
    let claims = Claims(Mutex::new(BTreeMap::new()));
    let threads = 4;
    std::thread::scope(|sc| {
        for t in 0..threads {
            let (z, claims) = (&z, &claims);
            sc.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(0x10c4 + t);
                // (pfn, pages, order if a buddy block)
                let mut held: Vec<(u64, u64, Option<u32>)> = Vec::new();
                let free_one = |h: (u64, u64, Option<u32>), rng: &mut SmallRng| {
                    let (p, n, o) = h;
                    claims.release(p);
                    match o {
                        Some(o) => assert_eq!(z.free_pages(p, o), Ok(true)),
                        None if rng.random_bool(0.3) => {
                            // Freeze the pages under one lock, free them
                            // under another.
                            {
                                let mut g = z.lock();
                                for q in p..p + n {
                                    assert_eq!(g.put_ref(q), Ok(0));
                                }
                            }
                            let s = z.free_contig_frozen_range(p, n).unwrap();
                            assert_eq!(s.freed, n);
                        }
                        None => {
                            let s = z.free_contig_range(p, n).unwrap();
                            assert_eq!(
                                s,
                                FreeSummary {
                                    freed: n,
                                    ..Default::default()
                                }
                            );
                        }
                    }
                };
                for _ in 0..20_000 {
                    if held.len() < 24 && rng.random_bool(0.55) {
                        if rng.random_bool(0.6) {
                            let o = rng.random_range(0..=6);
                            match z.alloc_pages(o) {
                                Ok(p) => {
                                    assert!(p.is_multiple_of(1 << o));
                                    claims.claim(p, p + (1 << o));
                                    held.push((p, 1 << o, Some(o)));
                                }
                                Err(e) => assert_eq!(e, E::NoMemory { order: o }),
                            }
                        } else {
                            let n = rng.random_range(1..=300);
                            let a = 1 << rng.random_range(0..=6);
                            match z.alloc_contig_pages(n, a) {
                                Ok(p) => {
                                    assert!(p.is_multiple_of(a));
                                    claims.claim(p, p + n);
                                    held.push((p, n, None));
                                }
                                Err(e) => assert_eq!(e, E::NoSpace { pages: n }),
                            }
                        }
                    } else if !held.is_empty() {
                        let i = rng.random_range(0..held.len());
                        if rng.random_bool(0.1) {
                            // An extra reference under one lock: the first
                            // free only drops it.
                            let (p, _, o) = held[i];
                            let mut g = z.lock();
                            assert_eq!(g.get_page(p), Ok(2));
                            assert_eq!(g.free_pages(p, o.unwrap_or(0)), Ok(false));
                            assert_eq!(g.page(p).unwrap().refcount, 1);
                        } else {
                            let h = held.swap_remove(i);
                            free_one(h, &mut rng);
                        }
                    }
                }
                for h in held {
                    free_one(h, &mut rng);
                }
            });
        }
    });
    assert!(claims.0.lock().unwrap().is_empty());
    let b = z.into_inner();
    b.validate().unwrap();
    assert_eq!(b.free_page_count(), PAGES);
    assert_eq!(b.free_blocks(), start_blocks);
}
