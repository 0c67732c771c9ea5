//! Target `buddy`: `BuddyAllocator` operation sequences against a per-page
//! model (free, poisoned, reference count). After every operation:
//! `validate()`, every page's state, the free count, and the free blocks
//! equal to the canonical (fully merged) blocks of the model's free pages.

use spacekit::buddy::{BuddyAllocator, BuddyConfig, BuddyError};
use spacekit::testing::Validate;

use super::input::Input;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Page {
    free: bool,
    poisoned: bool,
    refs: u32,
}

const REF_LIMIT: u32 = (1 << 24) - 1;

struct Model {
    base: u64,
    pages: Vec<Page>,
    max_order: u32,
}

impl Model {
    fn idx(&self, pfn: u64, n: u64) -> Option<usize> {
        let i = pfn.checked_sub(self.base)?;
        let end = i.checked_add(n)?;
        (end <= self.pages.len() as u64).then_some(i as usize)
    }

    /// The canonical free blocks: each maximal free run cut into chunks of
    /// order min(alignment of the pfn, log2(pages left), max_order).
    fn blocks(&self) -> Vec<(u64, u32)> {
        let mut out = Vec::new();
        let mut i = 0;
        let n = self.pages.len();
        while i < n {
            if !self.pages[i].free {
                i += 1;
                continue;
            }
            let mut j = i;
            while j < n && self.pages[j].free {
                j += 1;
            }
            let mut a = i;
            while a < j {
                let pfn = self.base + a as u64;
                let o = pfn
                    .trailing_zeros()
                    .min((j - a).ilog2())
                    .min(self.max_order);
                out.push((pfn, o));
                a += 1 << o;
            }
            i = j;
        }
        out
    }

    /// Marks `[i, i + n)` allocated with one reference each, as
    /// alloc_contig_range does.
    fn take(&mut self, i: usize, n: usize, refs_each: bool) {
        for (k, p) in self.pages[i..i + n].iter_mut().enumerate() {
            *p = Page {
                free: false,
                poisoned: false,
                refs: u32::from(refs_each || k == 0),
            };
        }
    }
}

fn pfn(input: &mut Input, base: u64, pages: u64) -> u64 {
    match input.u8() % 8 {
        0 => input.edgy_u64(),
        1 => base.wrapping_sub(1 + u64::from(input.u8() % 4)),
        _ => base + input.below(pages + 2),
    }
}

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let base = match input.u8() % 4 {
        0 => 0,
        1 => u64::from(input.u16()),
        2 => 1u64 << (input.u8() % 40),
        _ => u64::MAX - 4096 - u64::from(input.u16() % 4096),
    };
    let pages = 1 + u64::from(input.u16() % 700);
    let max_order = u32::from(input.u8() % 12);
    let section_pages = 1u64 << (max_order + u32::from(input.u8() % 3));
    let config = BuddyConfig {
        max_order,
        section_pages,
    };
    let mut zone = match BuddyAllocator::with_config(base, pages, config) {
        Ok(z) => z,
        Err(e) => {
            assert!(
                base.checked_add(pages).is_none(),
                "with_config({base}, {pages}, {config:?}) refused: {e}"
            );
            return;
        }
    };
    let mut m = Model {
        base,
        pages: vec![Page::default(); pages as usize],
        max_order,
    };
    let mut steps = 0;
    while !input.is_empty() && steps < 100 {
        steps += 1;
        let op = input.u8() % 12;
        let what;
        match op {
            0 => {
                let p = pfn(&mut input, base, pages);
                let n = input.below(pages + 2);
                what = format!("add_range({p}, {n})");
                let got = zone.add_range(p, n);
                match m.idx(p, n) {
                    None => assert!(got.is_err(), "{what}: {got:?}"),
                    Some(i) => {
                        let n = n as usize;
                        if m.pages[i..i + n].iter().any(|q| q.free) {
                            assert!(
                                matches!(got, Err(BuddyError::AlreadyFree { .. })),
                                "{what}: {got:?}"
                            );
                        } else {
                            let s = got.unwrap_or_else(|e| panic!("{what}: {e}"));
                            let mut freed = 0;
                            for q in &mut m.pages[i..i + n] {
                                q.refs = 0;
                                if !q.poisoned {
                                    q.free = true;
                                    freed += 1;
                                }
                            }
                            assert_eq!(s.freed, freed, "{what}: freed");
                        }
                    }
                }
            }
            1 | 2 => {
                let order = u32::from(input.u8() % (max_order as u8 + 2));
                what = format!("alloc_pages({order})");
                let got = zone.alloc_pages(order);
                if order > max_order {
                    assert!(
                        matches!(got, Err(BuddyError::BadOrder { .. })),
                        "{what}: {got:?}"
                    );
                } else {
                    // The lowest block of the smallest order that fits.
                    let want = m
                        .blocks()
                        .into_iter()
                        .filter(|&(_, o)| o >= order)
                        .min_by_key(|&(p, o)| (o, p));
                    match want {
                        None => assert!(
                            matches!(got, Err(BuddyError::NoMemory { .. })),
                            "{what}: {got:?}"
                        ),
                        Some((p, _)) => {
                            assert_eq!(got, Ok(p), "{what}");
                            let i = m.idx(p, 1).expect("in span");
                            m.take(i, 1 << order, false);
                        }
                    }
                }
            }
            3 | 4 => {
                let p = pfn(&mut input, base, pages);
                let order = u32::from(input.u8() % (max_order as u8 + 2));
                what = format!("free_pages({p}, {order})");
                let got = zone.free_pages(p, order);
                let n = 1u64 << order.min(63);
                if order > max_order || !p.is_multiple_of(n) {
                    assert!(got.is_err(), "{what}: {got:?}");
                } else {
                    match m.idx(p, n) {
                        None => assert!(got.is_err(), "{what}: {got:?}"),
                        Some(i) => {
                            let n = n as usize;
                            let block = &m.pages[i..i + n];
                            if block.iter().any(|q| q.free) || block[0].refs == 0 {
                                assert!(got.is_err(), "{what}: {got:?}");
                            } else {
                                let left = block[0].refs - 1;
                                let goes = left == 0
                                    && !block.iter().any(|q| q.poisoned)
                                    && block[1..].iter().all(|q| q.refs == 0);
                                assert_eq!(got, Ok(goes), "{what}");
                                m.pages[i].refs = left;
                                if goes {
                                    for q in &mut m.pages[i..i + n] {
                                        q.free = true;
                                    }
                                }
                            }
                        }
                    }
                }
            }
            5 => {
                let p = pfn(&mut input, base, pages);
                what = format!("get_page({p})");
                let got = zone.get_page(p);
                match m.idx(p, 1) {
                    None => assert!(got.is_err(), "{what}: {got:?}"),
                    Some(i) if m.pages[i].free || m.pages[i].refs >= REF_LIMIT => {
                        assert!(got.is_err(), "{what}: {got:?}")
                    }
                    Some(i) => {
                        m.pages[i].refs += 1;
                        assert_eq!(got, Ok(m.pages[i].refs), "{what}");
                    }
                }
            }
            6 => {
                let p = pfn(&mut input, base, pages);
                what = format!("put_ref({p})");
                let got = zone.put_ref(p);
                match m.idx(p, 1) {
                    None => assert!(got.is_err(), "{what}: {got:?}"),
                    Some(i) if m.pages[i].free || m.pages[i].refs == 0 => {
                        assert!(got.is_err(), "{what}: {got:?}")
                    }
                    Some(i) => {
                        m.pages[i].refs -= 1;
                        assert_eq!(got, Ok(m.pages[i].refs), "{what}");
                    }
                }
            }
            7 | 8 => {
                let p = pfn(&mut input, base, pages);
                let n = 1 + input.below(pages + 1);
                let frozen = op == 8;
                what = format!("free_contig(frozen {frozen})({p}, {n})");
                let got = if frozen {
                    zone.free_contig_frozen_range(p, n)
                } else {
                    zone.free_contig_range(p, n)
                };
                match m.idx(p, n) {
                    None => assert!(got.is_err(), "{what}: {got:?}"),
                    Some(i) => {
                        let n = n as usize;
                        let r = &m.pages[i..i + n];
                        let bad = r.iter().any(|q| q.free)
                            || if frozen {
                                r.iter().any(|q| q.refs != 0)
                            } else {
                                r.iter().any(|q| q.refs == 0)
                            };
                        if bad {
                            assert!(got.is_err(), "{what}: {got:?}");
                        } else {
                            let mut freed = 0;
                            for q in &mut m.pages[i..i + n] {
                                if !frozen {
                                    q.refs -= 1;
                                }
                                if q.refs == 0 && !q.poisoned {
                                    q.free = true;
                                    freed += 1;
                                }
                            }
                            let s = got.unwrap_or_else(|e| panic!("{what}: {e}"));
                            assert_eq!(s.freed, freed, "{what}: freed");
                        }
                    }
                }
            }
            9 => {
                let start = pfn(&mut input, base, pages);
                let end = start
                    .wrapping_add(input.below(65))
                    .wrapping_sub(u64::from(input.u8() == 0));
                what = format!("alloc_contig_range({start}, {end})");
                let got = zone.alloc_contig_range(start, end);
                match end
                    .checked_sub(start)
                    .and_then(|n| m.idx(start, n).map(|i| (i, n)))
                {
                    None => assert!(got.is_err(), "{what}: {got:?}"),
                    Some((i, n)) => {
                        let n = n as usize;
                        if m.pages[i..i + n].iter().all(|q| q.free) {
                            assert_eq!(got, Ok(()), "{what}");
                            m.take(i, n, true);
                        } else {
                            assert!(
                                matches!(got, Err(BuddyError::Busy { .. })),
                                "{what}: {got:?}"
                            );
                        }
                    }
                }
            }
            10 => {
                let n = input.below(70);
                let align = match input.u8() % 6 {
                    0 => u64::from(input.u8()),
                    k => 1u64 << (k * 2 - 2),
                };
                what = format!("alloc_contig_pages({n}, {align})");
                let got = zone.alloc_contig_pages(n, align);
                if n == 0 || !align.is_power_of_two() {
                    assert!(got.is_err(), "{what}: {got:?}");
                } else {
                    let want = (0..m.pages.len())
                        .map(|i| base + i as u64)
                        .filter(|p| p % align == 0)
                        .find(|&p| {
                            m.idx(p, n)
                                .is_some_and(|i| m.pages[i..i + n as usize].iter().all(|q| q.free))
                        });
                    match want {
                        None => assert!(got.is_err(), "{what}: {got:?}"),
                        Some(p) => {
                            assert_eq!(got, Ok(p), "{what}");
                            let i = m.idx(p, n).expect("in span");
                            m.take(i, n as usize, true);
                        }
                    }
                }
            }
            _ => {
                let p = pfn(&mut input, base, pages);
                let clear = input.bool();
                what = format!("poison(clear {clear})({p})");
                match m.idx(p, 1) {
                    None => {
                        if clear {
                            assert!(zone.clear_poisoned(p).is_err(), "{what}");
                        } else {
                            assert!(zone.mark_poisoned(p).is_err(), "{what}");
                        }
                    }
                    Some(i) => {
                        if clear {
                            let was = m.pages[i].poisoned;
                            assert_eq!(zone.clear_poisoned(p), Ok(was), "{what}");
                            m.pages[i].poisoned = false;
                        } else {
                            assert_eq!(zone.mark_poisoned(p), Ok(()), "{what}");
                            let q = &mut m.pages[i];
                            if q.free {
                                *q = Page {
                                    free: false,
                                    poisoned: true,
                                    refs: 0,
                                };
                            } else {
                                q.poisoned = true;
                            }
                        }
                    }
                }
            }
        }
        if let Err(e) = zone.validate() {
            panic!("validate after step {steps}, {what}: {e}");
        }
        let free = m.pages.iter().filter(|q| q.free).count() as u64;
        assert_eq!(zone.free_page_count(), free, "free count after {what}");
        for (i, q) in m.pages.iter().enumerate() {
            let s = zone.page(base + i as u64).expect("page in span");
            assert_eq!(
                (s.free, s.poisoned, s.refcount),
                (q.free, q.poisoned, q.refs),
                "page {} after {what}",
                base + i as u64
            );
        }
        assert_eq!(zone.free_blocks(), m.blocks(), "free blocks after {what}");
    }
}
