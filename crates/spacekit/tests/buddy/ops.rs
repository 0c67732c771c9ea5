//! Buddy operation sequences (proptest) against the per-page model, on random
//! zones (unaligned bases, the top of the pfn space, every section size).

use crate::checks::{check, zone};
use crate::model::{Model, E};
use crate::TOP;
use proptest::collection::vec;
use proptest::prelude::*;
use spacekit::buddy::BuddyAllocator;

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
    #![proptest_config(crate::regressions::with_cases(1024))]

    #[test]
    fn ops_match_the_page_model((c, ops) in arb_case()) {
        run_ops(c, &ops);
    }
}
