//! `validate()`: the free map, the per-page words and the counters agree.

use alloc::format;
use alloc::string::String;
use alloc::vec;

use super::meta::{FREE, POISON, REFS};
use super::BuddyAllocator;

impl BuddyAllocator {
    pub(super) fn check(&self) -> Result<(), String> {
        let n = self.meta.len();
        let map = &self.map;
        if map.orders.len() != self.max_order as usize + 1 {
            return Err(format!(
                "{} order maps for max order {}",
                map.orders.len(),
                self.max_order
            ));
        }
        for o in self.max_order + 1..32 {
            if map.count[o as usize] != 0 {
                return Err(format!(
                    "order {o} above max order {} has blocks",
                    self.max_order
                ));
            }
        }
        // Every set bit is a free block inside the span whose pages are
        // free and covered by no other block.
        let mut covered = vec![false; n];
        let mut total = 0u64;
        for o in 0..=self.max_order {
            let size = 1usize << o;
            let mut count = 0u64;
            let mut bad = None;
            map.for_each(o, |pfn| {
                count += 1;
                if bad.is_some() {
                    return;
                }
                if !self.block_in_span(pfn, o) {
                    bad = Some(format!(
                        "order {o}: a free block at {pfn:#x} is not inside the span"
                    ));
                    return;
                }
                let i = (pfn - self.base) as usize;
                for k in 0..size {
                    let w = self.meta[i + k];
                    if w != FREE {
                        bad = Some(format!(
                            "free block {pfn:#x} order {o}: page +{k} has word {w:#x}"
                        ));
                        return;
                    }
                    if covered[i + k] {
                        bad = Some(format!(
                            "free block {pfn:#x} order {o}: page +{k} is in another block too"
                        ));
                        return;
                    }
                    covered[i + k] = true;
                }
                if o < self.max_order && map.contains(o, pfn ^ (1 << o)) {
                    bad = Some(format!(
                        "free buddies {pfn:#x} and {:#x} of order {o} not merged",
                        pfn ^ (1 << o)
                    ));
                }
            });
            if let Some(e) = bad {
                return Err(e);
            }
            if count != map.count[o as usize] {
                return Err(format!(
                    "order {o}: {count} blocks, counter says {}",
                    map.count[o as usize]
                ));
            }
            total += count << o;
            // Summaries: a non-zero word has its bit set one level up, and
            // no bit names a word past its level's end.
            let m = &map.orders[o as usize];
            for l in 1..=m.top {
                let (below, above) = (map.level(o, l - 1), map.level(o, l));
                for (k, &w) in below.iter().enumerate() {
                    if w != 0 && above[k >> 6] >> (k & 63) & 1 == 0 {
                        return Err(format!(
                            "order {o} level {l}: word {k} below is non-zero, its bit is clear"
                        ));
                    }
                }
                for (k, &w) in above.iter().enumerate() {
                    let past = (k << 6) + 64 - w.leading_zeros() as usize;
                    if w != 0 && past > below.len() {
                        return Err(format!(
                            "order {o} level {l}: word {k} names a word past the level below"
                        ));
                    }
                }
            }
            let below_hint = map.hint[o as usize].saturating_sub(m.start[0]);
            if map.level(o, 0).iter().take(below_hint).any(|&w| w != 0) {
                return Err(format!(
                    "order {o}: a non-zero word below the hint {}",
                    map.hint[o as usize]
                ));
            }
            // A set summary bit puts its word at or above the hint (a word
            // becoming non-zero skips the hint when it finds the bit set).
            if m.top > 0 {
                let sum = map.level(o, 1);
                if let Some(k) =
                    (0..below_hint.min(m.len[0])).find(|&k| sum[k >> 6] >> (k & 63) & 1 != 0)
                {
                    return Err(format!(
                        "order {o}: word {k} lies below the hint {} and has its summary bit set",
                        map.hint[o as usize]
                    ));
                }
            }
            // The word remembered as marked is in the bitmap, at or above
            // the hint, with its summary bit set.
            let marked = map.marked[o as usize];
            if marked != usize::MAX {
                let k = marked.wrapping_sub(m.start[0]);
                if k >= m.len[0] || marked < map.hint[o as usize] {
                    return Err(format!(
                        "order {o}: the marked word {marked} is outside the bitmap or below the hint {}",
                        map.hint[o as usize]
                    ));
                }
                if m.top > 0 && map.level(o, 1)[k >> 6] >> (k & 63) & 1 == 0 {
                    return Err(format!(
                        "order {o}: the marked word {marked} has its summary bit clear"
                    ));
                }
            }
            if map.level(o, m.top).len() != 1 {
                return Err(format!("order {o}: top level is not one word"));
            }
        }
        // The blocks tile the free pages exactly; other pages carry only a
        // poison bit and a reference count.
        for (i, (&w, &c)) in self.meta.iter().zip(&covered).enumerate() {
            let pfn = self.base + i as u64;
            if w & FREE != 0 && !c {
                return Err(format!("page {pfn:#x} is free but in no block"));
            }
            if w & FREE == 0 && w & !(POISON | REFS) != 0 {
                return Err(format!("page {pfn:#x} has word {w:#x}"));
            }
        }
        let free = self.meta.iter().filter(|&&w| w & FREE != 0).count() as u64;
        if total != free || total != self.free_page_count() {
            return Err(format!(
                "free pages: {free} marked free, {total} in blocks, counter {}",
                self.free_page_count()
            ));
        }
        Ok(())
    }
}
