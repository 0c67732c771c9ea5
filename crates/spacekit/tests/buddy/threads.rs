//! Buddy: the locked allocator shared by several threads, every block held
//! by at most one thread, the zone whole again at the end.

use crate::checks::zone;
use crate::model::E;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit::buddy::{FreeSummary, LockedBuddyAllocator};
use spacekit::testing::Validate;
use std::collections::BTreeMap;
use std::sync::Mutex;

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
