//! Per-page metadata: one `u32` per page, and the index-linked free lists.
//!
//! ```text
//! bit 31  FREE    the page is in a free block
//! bit 30  HEAD    the page heads a free block (it is on a free list)
//! bit 29  POISON  hardware-poisoned / bad: never handed out, never freed
//! 24..=28 ORDER   the free block's order (heads only)
//! 0..=23  REFS    reference count (allocated pages)
//! ```
//!
//! One word per page keeps the contiguous-free prepare pass a straight loop
//! over a `u32` slice that the compiler vectorises.

pub(super) const FREE: u32 = 1 << 31;
pub(super) const HEAD: u32 = 1 << 30;
pub(super) const POISON: u32 = 1 << 29;
pub(super) const ORDER_SHIFT: u32 = 24;
pub(super) const ORDER_MASK: u32 = 0x1f << ORDER_SHIFT;
pub(super) const REFS: u32 = (1 << ORDER_SHIFT) - 1;
/// End of a free list.
pub(super) const NIL: u32 = u32::MAX;

/// The metadata word of a free block head of `order`.
#[inline]
pub(super) const fn head(order: u32) -> u32 {
    FREE | HEAD | (order << ORDER_SHIFT)
}

/// The order recorded in a head's word.
#[inline]
pub(super) const fn order_of(m: u32) -> u32 {
    (m & ORDER_MASK) >> ORDER_SHIFT
}

/// Doubly linked free lists, one per order, threaded through two per-page
/// arrays of page indices: O(1) push and remove, no allocation per
/// operation.
#[derive(Clone, Debug)]
pub(super) struct Lists {
    pub head: [u32; 32],
    pub next: alloc::vec::Vec<u32>,
    pub prev: alloc::vec::Vec<u32>,
    /// Blocks on each list.
    pub count: [u64; 32],
    /// Bit `o` set when list `o` is not empty.
    pub nonempty: u32,
}

impl Lists {
    pub fn new(pages: usize) -> Lists {
        Lists {
            head: [NIL; 32],
            next: alloc::vec![NIL; pages],
            prev: alloc::vec![NIL; pages],
            count: [0; 32],
            nonempty: 0,
        }
    }

    /// Pushes page index `i` on list `order`.
    #[inline]
    pub fn push(&mut self, i: u32, order: u32) {
        let o = order as usize;
        let h = self.head[o];
        self.next[i as usize] = h;
        self.prev[i as usize] = NIL;
        if h != NIL {
            self.prev[h as usize] = i;
        }
        self.head[o] = i;
        self.count[o] += 1;
        self.nonempty |= 1 << order;
    }

    /// Removes page index `i` from list `order`.
    #[inline]
    pub fn remove(&mut self, i: u32, order: u32) {
        let o = order as usize;
        let (n, p) = (self.next[i as usize], self.prev[i as usize]);
        if p == NIL {
            self.head[o] = n;
        } else {
            self.next[p as usize] = n;
        }
        if n != NIL {
            self.prev[n as usize] = p;
        }
        self.next[i as usize] = NIL;
        self.prev[i as usize] = NIL;
        self.count[o] -= 1;
        if self.head[o] == NIL {
            self.nonempty &= !(1 << order);
        }
    }
}
