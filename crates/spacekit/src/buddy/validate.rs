//! `validate()`: the free lists, the per-page words and the counters agree.

use alloc::format;
use alloc::string::String;
use alloc::vec;

use super::meta::{order_of, FREE, HEAD, NIL, POISON, REFS};
use super::BuddyAllocator;

impl BuddyAllocator {
    pub(super) fn check(&self) -> Result<(), String> {
        let n = self.meta.len();
        let mut on_list = vec![false; n];
        let mut total = 0u64;
        for o in 0..32u32 {
            let mut i = self.lists.head[o as usize];
            let mut prev = NIL;
            let mut count = 0u64;
            while i != NIL {
                if o > self.max_order {
                    return Err(format!(
                        "list {o} above max order {} is not empty",
                        self.max_order
                    ));
                }
                let iu = i as usize;
                if iu >= n || on_list[iu] {
                    return Err(format!("list {o}: index {i} out of range or listed twice"));
                }
                on_list[iu] = true;
                if self.lists.prev[iu] != prev {
                    return Err(format!(
                        "list {o}: page index {i} has prev {}, want {prev}",
                        self.lists.prev[iu]
                    ));
                }
                let m = self.meta[iu];
                if m & HEAD == 0 || m & FREE == 0 || order_of(m) != o {
                    return Err(format!("list {o}: page index {i} has word {m:#x}"));
                }
                count += 1;
                prev = i;
                i = self.lists.next[iu];
            }
            if count != self.lists.count[o as usize] {
                return Err(format!(
                    "list {o}: {count} blocks, counter says {}",
                    self.lists.count[o as usize]
                ));
            }
            if (count > 0) != (self.lists.nonempty >> o & 1 == 1) {
                return Err(format!("list {o}: non-empty mask wrong"));
            }
            total += count << o;
        }
        // Walk the pages: blocks tile the free pages exactly.
        let mut i = 0usize;
        let mut free = 0u64;
        while i < n {
            let m = self.meta[i];
            let pfn = self.base + i as u64;
            if m & HEAD != 0 {
                let o = order_of(m);
                let size = 1usize << o;
                if !on_list[i] {
                    return Err(format!(
                        "page {pfn:#x} heads a free block of order {o} but is on no list"
                    ));
                }
                if pfn & (size as u64 - 1) != 0 || i + size > n {
                    return Err(format!(
                        "free block {pfn:#x} order {o} misaligned or past the end"
                    ));
                }
                for (k, &w) in self.meta[i..i + size].iter().enumerate() {
                    let head_ok = if k == 0 { w & HEAD != 0 } else { w & HEAD == 0 };
                    if w & FREE == 0 || !head_ok || w & (POISON | REFS) != 0 {
                        return Err(format!(
                            "free block {pfn:#x} order {o}: page +{k} has word {w:#x}"
                        ));
                    }
                }
                if o < self.max_order {
                    let buddy = pfn ^ (1u64 << o);
                    if let Some(b) = buddy.checked_sub(self.base) {
                        let b = b as usize;
                        if b + size <= n && self.meta[b] & HEAD != 0 && order_of(self.meta[b]) == o
                        {
                            return Err(format!(
                                "free buddies {pfn:#x} and {buddy:#x} of order {o} not merged"
                            ));
                        }
                    }
                }
                free += size as u64;
                i += size;
            } else if m & FREE != 0 {
                return Err(format!("page {pfn:#x} is free but in no block"));
            } else {
                i += 1;
            }
        }
        if free != total || free != self.free_pages {
            return Err(format!(
                "free pages: {free} in blocks, {total} on the lists, counter {}",
                self.free_pages
            ));
        }
        Ok(())
    }
}
