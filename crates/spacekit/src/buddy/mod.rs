//! A buddy page allocator over page frame numbers that frees (and takes) a
//! contiguous range in bulk: seed 003's batched `free_contig_range`.
//!
//! [`BuddyAllocator`] manages the pages `[base, base + pages)` (`base` need
//! not be aligned; blocks are aligned on absolute page numbers, as in the
//! kernel). Each page has one `u32` of metadata (free, poisoned, reference
//! count), and the free blocks of each order are the set bits of one
//! bitmap per order (the kernel's per-order free lists), laid out so that
//! a block and its buddy share a word; no operation allocates.
//!
//! | spacekit | Linux (mm/page_alloc.c) |
//! |---|---|
//! | [`alloc_pages`](BuddyAllocator::alloc_pages) | `alloc_pages` (split with `expand`) |
//! | [`free_pages`](BuddyAllocator::free_pages) | `__free_pages` (buddy merging in `__free_one_page`) |
//! | [`free_contig_range`](BuddyAllocator::free_contig_range) | `free_contig_range` / `__free_contig_range` |
//! | [`free_contig_frozen_range`](BuddyAllocator::free_contig_frozen_range) | `free_contig_frozen_range` (seed 003) |
//! | [`alloc_contig_range`](BuddyAllocator::alloc_contig_range) | `alloc_contig_range` (without migration: busy pages fail) |
//! | [`alloc_contig_pages`](BuddyAllocator::alloc_contig_pages) | `alloc_contig_pages` (CMA-like) |
//! | [`add_range`](BuddyAllocator::add_range) | `memblock_free_all` → `__free_pages_core` |
//! | [`mark_poisoned`](BuddyAllocator::mark_poisoned) | `memory_failure` + `take_page_off_buddy` |
//!
//! # Freeing a contiguous range
//!
//! Both contiguous frees go through one internal helper (the kernel
//! reviewers' `__free_contig_range_common`), which differs only in how a
//! page is prepared:
//!
//! 1. A first pass over the range's metadata words refuses the call (typed
//!    error, nothing changed) if any page is already free, or, for the
//!    refcounted path, has no reference left to drop, or, for the frozen
//!    path, still has one. The same pass notes whether every page is the
//!    common case (one reference, not poisoned). Before it, the refcounted
//!    and frozen frees check for the common case alone, which is one word
//!    value for every page (one XOR and one OR per word), and go straight
//!    to step 2 when it holds.
//! 2. Prepare: in the common case every word is overwritten with "free";
//!    otherwise each page drops its reference and is freed only if it
//!    reaches zero and is not poisoned. Both are straight loops over a
//!    `u32` slice that the compiler vectorises: the "compact prepare".
//! 3. The freed pages form batches that end at every page that was not
//!    freed and at every memory-section edge, and each batch is freed as
//!    chunks of order `min(alignment of pfn, log2(remaining), max_order)`,
//!    each with one buddy-merge walk.
//!
//! A range of 16,384 pages with an aligned start is 16 chunks of order 10:
//! 16 merge walks instead of 16,384, and two passes over 64 KiB of metadata
//! instead of 16,384 calls.
//!
//! # Freeing one page
//!
//! [`free_pages`](BuddyAllocator::free_pages)`(pfn, 0)` is the other hot
//! path (the kernel's `free_unref_page` / `__free_one_page`): it reads and
//! writes the page's own word (one compare tells the common case, one
//! reference and no poison, from everything else), then walks up the
//! orders. A merge step loads one bitmap word, tests the buddy's bit and
//! clears it; the last step sets the merged block's bit. Nothing else is
//! written: no list neighbours (a kernel-style doubly linked list writes
//! the old head's back link on every push and both neighbours' links on
//! every unlink, lines anywhere in the zone), no head or order marks in the
//! buddies' words. All the bitmaps together are about two bits per page
//! (256 KiB for a 1M-page zone), so a free of one page touches the page's
//! metadata line, one bitmap word per order it climbs, and the per-order
//! counters. A word that becomes non-zero checks one summary bit (usually
//! already set), or only compares its index with the last word of its
//! order found marked (frees of nearby pages).
//!
//! [`alloc_pages`](BuddyAllocator::alloc_pages) takes the lowest free
//! block of the smallest order that fits: from the word at the order's hint
//! (at or below its lowest non-zero word) when that word is non-zero, else
//! through the summary levels above the bitmap (a descent of four words for
//! 1M pages). It hands out blocks in address order, as
//! `buddy_system_allocator`'s first-fit split does; the page-by-page model
//! in the tests accepts any block of the smallest fitting order, the
//! tests of this path require the lowest.
//!
//! Cache lines a single-page free touches: before, the page's word, its
//! `next` and `prev` entries (two more arrays), the old list head's `prev`
//! (anywhere in the zone) and, per merge step, the buddy's word, its
//! `next`/`prev` and both list neighbours' links (two more lines anywhere);
//! now, the page's word and one bitmap word per order visited (the buddy's
//! bit sits in the block's own word), all within the 2-bits-per-page
//! bitmaps, plus the counters.
//!
//! # Example
//!
//! ```
//! use spacekit::buddy::BuddyAllocator;
//!
//! // 1 GiB of 4 KiB pages starting at pfn 0x40000, all free.
//! let mut zone = BuddyAllocator::new(0x40000, 1 << 18)?;
//! zone.add_range(0x40000, 1 << 18)?;
//!
//! let block = zone.alloc_pages(3)?;           // 8 pages, 8-aligned
//! zone.free_pages(block, 3)?;                 // merges back
//!
//! // CMA: take 16,384 contiguous pages aligned to 16,384, then give them back.
//! let cma = zone.alloc_contig_pages(16384, 16384)?;
//! zone.mark_poisoned(cma + 5)?;               // a page goes bad while in use
//! let done = zone.free_contig_range(cma, 16384)?;
//! assert_eq!((done.freed, done.poisoned), (16383, 1));
//! assert_eq!(zone.free_page_count(), (1 << 18) - 1);
//! # Ok::<(), spacekit::buddy::BuddyError>(())
//! ```

#[cfg(any(test, feature = "testing"))]
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

mod freemap;
mod meta;
#[cfg(any(test, feature = "testing"))]
mod validate;

use freemap::FreeMap;
use meta::{FREE, NIL, POISON, REFS};

/// The largest `max_order` a [`BuddyConfig`] may ask for.
pub const MAX_ORDER_LIMIT: u32 = 30;

/// Shape of a [`BuddyAllocator`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuddyConfig {
    /// Largest block order (the kernel's `MAX_PAGE_ORDER`, 10: 4 MiB of
    /// 4 KiB pages). At most [`MAX_ORDER_LIMIT`].
    pub max_order: u32,
    /// Pages per memory section (a power of two; the kernel's x86-64 value,
    /// 128 MiB of 4 KiB pages, is 32,768). A contiguous free never batches
    /// across a section edge.
    pub section_pages: u64,
}

impl Default for BuddyConfig {
    fn default() -> Self {
        BuddyConfig {
            max_order: 10,
            section_pages: 32768,
        }
    }
}

/// What a [`BuddyAllocator`] call can refuse. The allocator is unchanged
/// whenever one is returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuddyError {
    /// A configuration the allocator cannot represent.
    BadConfig {
        /// What is wrong.
        what: &'static str,
    },
    /// Pages `[pfn, pfn + pages)` are not all inside the allocator's span.
    OutOfRange {
        /// First page asked for.
        pfn: u64,
        /// Number of pages asked for.
        pages: u64,
    },
    /// An order above the allocator's `max_order`.
    BadOrder {
        /// The order given.
        order: u32,
        /// The allocator's largest order.
        max_order: u32,
    },
    /// A block's first page is not aligned to its order.
    Misaligned {
        /// The page given.
        pfn: u64,
        /// The block's order.
        order: u32,
    },
    /// An alignment that is not a power of two.
    BadAlignment {
        /// The alignment given.
        align: u64,
    },
    /// Zero pages asked for.
    ZeroPages,
    /// The page is already free (a double free, or freeing or adding a free
    /// page).
    AlreadyFree {
        /// The first such page.
        pfn: u64,
    },
    /// A refcounted free of a page whose reference count is already zero.
    NotReferenced {
        /// The first such page.
        pfn: u64,
    },
    /// A frozen free of a page that still has references.
    Referenced {
        /// The first such page.
        pfn: u64,
        /// Its reference count.
        refcount: u32,
    },
    /// A reference count would pass its 24-bit limit.
    RefcountOverflow {
        /// The page.
        pfn: u64,
    },
    /// `alloc_contig_range` found a page that is not free.
    Busy {
        /// The first such page.
        pfn: u64,
    },
    /// No free block of this order (or larger).
    NoMemory {
        /// The order asked for.
        order: u32,
    },
    /// No free run of `pages` contiguous pages at the alignment asked for.
    NoSpace {
        /// The number of pages asked for.
        pages: u64,
    },
}

impl fmt::Display for BuddyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BuddyError::BadConfig { what } => write!(f, "bad allocator configuration: {what}"),
            BuddyError::OutOfRange { pfn, pages } => {
                write!(f, "pages {pfn:#x}..+{pages:#x} are outside the allocator")
            }
            BuddyError::BadOrder { order, max_order } => {
                write!(f, "order {order} is above the largest order {max_order}")
            }
            BuddyError::Misaligned { pfn, order } => {
                write!(f, "page {pfn:#x} is not aligned to order {order}")
            }
            BuddyError::BadAlignment { align } => {
                write!(f, "alignment {align:#x} is not a power of two")
            }
            BuddyError::ZeroPages => f.write_str("zero pages asked for"),
            BuddyError::AlreadyFree { pfn } => write!(f, "page {pfn:#x} is already free"),
            BuddyError::NotReferenced { pfn } => {
                write!(f, "page {pfn:#x} has no reference to drop")
            }
            BuddyError::Referenced { pfn, refcount } => {
                write!(f, "page {pfn:#x} still has {refcount} reference(s)")
            }
            BuddyError::RefcountOverflow { pfn } => {
                write!(f, "page {pfn:#x}: reference count overflow")
            }
            BuddyError::Busy { pfn } => write!(f, "page {pfn:#x} is not free"),
            BuddyError::NoMemory { order } => write!(f, "no free block of order {order}"),
            BuddyError::NoSpace { pages } => {
                write!(f, "no free run of {pages:#x} contiguous pages")
            }
        }
    }
}

impl core::error::Error for BuddyError {}

/// What a contiguous free did with the range's pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FreeSummary {
    /// Pages returned to the free lists.
    pub freed: u64,
    /// Pages that kept a reference (refcounted path only).
    pub still_referenced: u64,
    /// Poisoned pages held back (never freed).
    pub poisoned: u64,
}

/// One page's state, as [`BuddyAllocator::page`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageState {
    /// In a free block.
    pub free: bool,
    /// `Some(order)` if the page heads a free block of that order.
    pub head_of: Option<u32>,
    /// Marked bad: never handed out or freed.
    pub poisoned: bool,
    /// Reference count (0 for free pages).
    pub refcount: u32,
}

/// What `free_pages(pfn, 0)` did, as a one-byte status (returned in a
/// register; the public wrapper turns it into the `Result`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PageFree {
    Freed,
    Held,
    OutOfRange,
    AlreadyFree,
    NotReferenced,
}

/// How a contiguous free prepares each page (never exposed: two thin public
/// wrappers and `add_range` call one helper).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Prepare {
    /// Drop one reference; free the pages that reach zero.
    Refcounted,
    /// The pages' reference counts are already zero.
    Frozen,
    /// Memory handed to the allocator: any reference count is reset.
    Add,
}

/// A prepared page's word: FREE if nothing is left of it (no reference, no
/// poison), else what is left.
#[inline]
fn freed_or(left: u32) -> u32 {
    if left == 0 {
        FREE
    } else {
        left
    }
}

/// Pass 1 of a contiguous free over the range's words, branch-free so it
/// vectorises: any page free, any page `how` refuses, any page off the
/// common case (refcounted: not exactly one reference; all: poisoned).
#[inline]
fn scan(pages: &[u32], how: Prepare) -> (u32, u32, u32) {
    let (mut free, mut refused, mut unusual) = (0u32, 0u32, 0u32);
    match how {
        Prepare::Refcounted => {
            for &m in pages {
                free |= m & FREE;
                refused |= u32::from(m & REFS == 0);
                unusual |= u32::from(m & (POISON | REFS) != 1);
            }
        }
        Prepare::Frozen => {
            for &m in pages {
                free |= m & FREE;
                refused |= m & REFS;
                unusual |= m & POISON;
            }
        }
        Prepare::Add => {
            for &m in pages {
                free |= m & FREE;
                unusual |= m & POISON;
            }
        }
    }
    (free, refused, unusual)
}

/// A buddy allocator over the page frame numbers `[base, base + pages)`.
/// See the [module docs](self).
#[derive(Clone, Debug)]
pub struct BuddyAllocator {
    base: u64,
    meta: Vec<u32>,
    map: FreeMap,
    max_order: u32,
    section_shift: u32,
}

impl BuddyAllocator {
    /// An allocator over `[base, base + pages)` with the default
    /// [`BuddyConfig`] (max order 10, 32,768-page sections). Every page
    /// starts reserved (not free, no references): hand memory over with
    /// [`add_range`](Self::add_range).
    ///
    /// # Errors
    /// [`BadConfig`](BuddyError::BadConfig) if `pages` is 2^32 - 1 or more
    /// (page indices are `u32`) or `base + pages` passes 2^64.
    pub fn new(base: u64, pages: u64) -> Result<Self, BuddyError> {
        Self::with_config(base, pages, BuddyConfig::default())
    }

    /// An allocator with an explicit [`BuddyConfig`].
    ///
    /// # Errors
    /// As [`new`](Self::new), and [`BadConfig`](BuddyError::BadConfig) for a
    /// `max_order` above [`MAX_ORDER_LIMIT`], a section size that is not a
    /// power of two, or a section smaller than a block of `max_order`.
    pub fn with_config(base: u64, pages: u64, config: BuddyConfig) -> Result<Self, BuddyError> {
        if pages >= u64::from(NIL) {
            return Err(BuddyError::BadConfig {
                what: "more than 2^32 - 2 pages",
            });
        }
        if base.checked_add(pages).is_none() {
            return Err(BuddyError::BadConfig {
                what: "base + pages passes 2^64",
            });
        }
        if config.max_order > MAX_ORDER_LIMIT {
            return Err(BuddyError::BadConfig {
                what: "max_order above 30",
            });
        }
        if !config.section_pages.is_power_of_two() {
            return Err(BuddyError::BadConfig {
                what: "section size not a power of two",
            });
        }
        if config.section_pages >> config.max_order == 0 {
            // The kernel's build-time check: MAX_PAGE_ORDER within a section.
            return Err(BuddyError::BadConfig {
                what: "a max-order block is larger than a section",
            });
        }
        let n = pages as usize;
        Ok(BuddyAllocator {
            base,
            meta: alloc::vec![0; n],
            map: FreeMap::new(base, pages, config.max_order),
            max_order: config.max_order,
            section_shift: config.section_pages.trailing_zeros(),
        })
    }

    /// First page of the span.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Number of pages in the span.
    pub fn pages(&self) -> u64 {
        self.meta.len() as u64
    }

    /// Largest block order.
    pub fn max_order(&self) -> u32 {
        self.max_order
    }

    /// Pages per memory section.
    pub fn section_pages(&self) -> u64 {
        1 << self.section_shift
    }

    /// Pages on the free lists.
    pub fn free_page_count(&self) -> u64 {
        self.map.free_pages()
    }

    /// Free blocks of each order, `0..=max_order` (`/proc/buddyinfo`).
    pub fn free_blocks_per_order(&self) -> &[u64] {
        &self.map.count[..=self.max_order as usize]
    }

    /// The largest order with a free block, if any.
    pub fn largest_free_order(&self) -> Option<u32> {
        self.map.last_nonempty()
    }

    /// Every free block as `(first pfn, order)`, sorted by pfn.
    pub fn free_blocks(&self) -> Vec<(u64, u32)> {
        let mut v = Vec::new();
        for o in 0..=self.max_order {
            self.map.for_each(o, |pfn| v.push((pfn, o)));
        }
        v.sort_unstable();
        v
    }

    /// The state of page `pfn`.
    ///
    /// # Errors
    /// [`OutOfRange`](BuddyError::OutOfRange) outside the span.
    pub fn page(&self, pfn: u64) -> Result<PageState, BuddyError> {
        let i = self.span(pfn, 1)?;
        let m = self.meta[i];
        Ok(PageState {
            free: m & FREE != 0,
            head_of: self.head_of(pfn),
            poisoned: m & POISON != 0,
            refcount: m & REFS,
        })
    }

    /// The order of the free block `pfn` heads, if it heads one.
    fn head_of(&self, pfn: u64) -> Option<u32> {
        let i = (pfn - self.base) as usize;
        if self.meta[i] & FREE == 0 {
            return None;
        }
        (0..=self.max_order)
            .take_while(|&o| pfn & ((1 << o) - 1) == 0)
            .find(|&o| self.block_in_span(pfn, o) && self.map.contains(o, pfn))
    }

    /// Whether the block of `2^o` pages at `pfn` lies inside the span.
    fn block_in_span(&self, pfn: u64, o: u32) -> bool {
        pfn >= self.base && pfn - self.base + (1 << o) <= self.pages()
    }

    /// Index of `pfn` after checking that `[pfn, pfn + n)` is in the span.
    #[inline]
    fn span(&self, pfn: u64, n: u64) -> Result<usize, BuddyError> {
        let bad = BuddyError::OutOfRange { pfn, pages: n };
        let i = pfn.checked_sub(self.base).ok_or(bad)?;
        let end = i.checked_add(n).ok_or(bad)?;
        if end > self.pages() {
            return Err(bad);
        }
        Ok(i as usize)
    }

    /// Hands `[pfn, pfn + n)` to the allocator as free memory, merging with
    /// free neighbours (the kernel's boot-time `memblock_free_all`). Any
    /// reference count is reset; poisoned pages are held back. Adding free
    /// pages is an error.
    ///
    /// # Errors
    /// [`OutOfRange`](BuddyError::OutOfRange),
    /// [`AlreadyFree`](BuddyError::AlreadyFree) (nothing changes).
    pub fn add_range(&mut self, pfn: u64, n: u64) -> Result<FreeSummary, BuddyError> {
        self.free_contig_common(pfn, n, Prepare::Add)
    }

    /// Allocates a free block of `2^order` pages (aligned to its size) and
    /// returns its first page, which holds one reference (the kernel's
    /// `alloc_pages` without `__GFP_COMP`).
    ///
    /// # Errors
    /// [`BadOrder`](BuddyError::BadOrder),
    /// [`NoMemory`](BuddyError::NoMemory).
    #[inline(always)]
    pub fn alloc_pages(&mut self, order: u32) -> Result<u64, BuddyError> {
        if order > self.max_order {
            return Err(BuddyError::BadOrder {
                order,
                max_order: self.max_order,
            });
        }
        // The page comes back in registers, the error is built here.
        self.alloc_block(order)
            .ok_or(BuddyError::NoMemory { order })
    }

    /// `alloc_pages` for a valid order: the lowest free block of the
    /// smallest order that fits, split down to `order` (`__rmqueue_smallest`
    /// with `expand`), its first page given one reference.
    #[inline]
    fn alloc_block(&mut self, order: u32) -> Option<u64> {
        let mut o = self.map.first_nonempty(order)?;
        let pfn = self.map.pop_first(o)?;
        while o > order {
            o -= 1;
            self.map.insert(o, pfn + (1 << o));
        }
        let (i, n) = ((pfn - self.base) as usize, 1usize << order);
        if order == 0 {
            self.meta[i] = 1;
        } else {
            let block = &mut self.meta[i..i + n];
            block.fill(0);
            block[0] = 1;
        }
        Some(pfn)
    }

    /// Drops the reference on block `[pfn, pfn + 2^order)`'s first page and,
    /// if none is left, frees the block with buddy merging (the kernel's
    /// `__free_pages`). Returns whether the block went back to the free
    /// lists: not if references remain, nor if a page of it is poisoned
    /// (`free_pages_prepare` failing: the block is held back), nor if a later
    /// page of the block still holds a reference (a bad page to the kernel).
    ///
    /// # Errors
    /// [`BadOrder`](BuddyError::BadOrder),
    /// [`Misaligned`](BuddyError::Misaligned),
    /// [`OutOfRange`](BuddyError::OutOfRange),
    /// [`AlreadyFree`](BuddyError::AlreadyFree) if a page of the block is
    /// free, [`NotReferenced`](BuddyError::NotReferenced) if the first page
    /// has no reference. Nothing changes on an error.
    #[inline(always)]
    pub fn free_pages(&mut self, pfn: u64, order: u32) -> Result<bool, BuddyError> {
        if order == 0 {
            // The status comes back in a register, the error is built here.
            return match self.free_page(pfn) {
                PageFree::Freed => Ok(true),
                PageFree::Held => Ok(false),
                PageFree::OutOfRange => Err(BuddyError::OutOfRange { pfn, pages: 1 }),
                PageFree::AlreadyFree => Err(BuddyError::AlreadyFree { pfn }),
                PageFree::NotReferenced => Err(BuddyError::NotReferenced { pfn }),
            };
        }
        self.free_block(pfn, order)
    }

    /// `free_pages` for `order > 0`.
    fn free_block(&mut self, pfn: u64, order: u32) -> Result<bool, BuddyError> {
        if order > self.max_order {
            return Err(BuddyError::BadOrder {
                order,
                max_order: self.max_order,
            });
        }
        let n = 1u64 << order;
        if pfn & (n - 1) != 0 {
            return Err(BuddyError::Misaligned { pfn, order });
        }
        let i = self.span(pfn, n)?;
        let block = &mut self.meta[i..i + n as usize];
        if let Some(k) = block.iter().position(|m| m & FREE != 0) {
            return Err(BuddyError::AlreadyFree {
                pfn: pfn + k as u64,
            });
        }
        if block[0] & REFS == 0 {
            return Err(BuddyError::NotReferenced { pfn });
        }
        block[0] -= 1;
        // free_pages_prepare: a poisoned page, or a later page still
        // holding a reference, makes the block bad: it is held back.
        if block[0] != 0 || block[1..].iter().any(|&m| m != 0) {
            return Ok(false);
        }
        block.fill(FREE);
        self.free_chunk(pfn, order);
        Ok(true)
    }

    /// `free_pages(pfn, 0)`: one word to check and write, then the merge
    /// walk (see the [module docs](self#freeing-one-page)).
    #[inline(always)]
    fn free_page(&mut self, pfn: u64) -> PageFree {
        // Below the base wraps to a huge index: one compare for both ends.
        let i = pfn.wrapping_sub(self.base);
        if i >= self.pages() {
            return PageFree::OutOfRange;
        }
        let i = i as usize;
        let m = self.meta[i];
        // The common case, one reference and no poison, is one word value.
        if m != 1 {
            return self.free_page_rare(i);
        }
        self.meta[i] = FREE;
        // SAFETY: `pfn` is in the span (`i` is below `pages()`), the span
        // the map was built for.
        unsafe { self.map.merge_insert_page(pfn) };
        PageFree::Freed
    }

    /// `free_page` of a page whose word is not exactly one reference: an
    /// error, or a page that more references or its poison bit hold back.
    #[cold]
    #[inline(never)]
    fn free_page_rare(&mut self, i: usize) -> PageFree {
        let m = self.meta[i];
        if m & FREE != 0 {
            return PageFree::AlreadyFree;
        }
        if m & REFS == 0 {
            return PageFree::NotReferenced;
        }
        // What is left: more references or the poison bit hold it back
        // (never nothing: the word was not exactly one reference).
        self.meta[i] = m - 1;
        PageFree::Held
    }

    /// Takes one more reference on an allocated page (`get_page`); returns
    /// the new count.
    ///
    /// # Errors
    /// [`OutOfRange`](BuddyError::OutOfRange),
    /// [`AlreadyFree`](BuddyError::AlreadyFree) for a free page,
    /// [`RefcountOverflow`](BuddyError::RefcountOverflow).
    pub fn get_page(&mut self, pfn: u64) -> Result<u32, BuddyError> {
        let i = self.span(pfn, 1)?;
        let m = self.meta[i];
        if m & FREE != 0 {
            return Err(BuddyError::AlreadyFree { pfn });
        }
        if m & REFS == REFS {
            return Err(BuddyError::RefcountOverflow { pfn });
        }
        self.meta[i] = m + 1;
        Ok((m & REFS) + 1)
    }

    /// Drops one reference on an allocated page without freeing it
    /// (`page_ref_dec`); returns the count left. A page left with none is
    /// *frozen*: it stays allocated until
    /// [`free_contig_frozen_range`](Self::free_contig_frozen_range) frees it.
    ///
    /// # Errors
    /// [`OutOfRange`](BuddyError::OutOfRange),
    /// [`AlreadyFree`](BuddyError::AlreadyFree),
    /// [`NotReferenced`](BuddyError::NotReferenced).
    pub fn put_ref(&mut self, pfn: u64) -> Result<u32, BuddyError> {
        let i = self.span(pfn, 1)?;
        let m = self.meta[i];
        if m & FREE != 0 {
            return Err(BuddyError::AlreadyFree { pfn });
        }
        if m & REFS == 0 {
            return Err(BuddyError::NotReferenced { pfn });
        }
        self.meta[i] = m - 1;
        Ok((m & REFS) - 1)
    }

    /// Frees the contiguous range `[pfn, pfn + n)` of refcounted pages
    /// (seed 003's `free_contig_range`): every page drops one reference,
    /// and the pages that reach zero and are not poisoned are freed in
    /// batches of the largest aligned chunks (see the
    /// [module docs](self#freeing-a-contiguous-range)).
    ///
    /// # Errors
    /// [`OutOfRange`](BuddyError::OutOfRange),
    /// [`AlreadyFree`](BuddyError::AlreadyFree) if any page is free,
    /// [`NotReferenced`](BuddyError::NotReferenced) if any page has no
    /// reference; the first such page in the range decides which. Nothing
    /// changes on an error.
    pub fn free_contig_range(&mut self, pfn: u64, n: u64) -> Result<FreeSummary, BuddyError> {
        self.free_contig_common(pfn, n, Prepare::Refcounted)
    }

    /// Frees the contiguous range `[pfn, pfn + n)` of frozen pages (their
    /// reference counts already zero; seed 003's
    /// `free_contig_frozen_range`). Poisoned pages are held back; the rest
    /// are freed in batches of the largest aligned chunks.
    ///
    /// # Errors
    /// [`OutOfRange`](BuddyError::OutOfRange),
    /// [`AlreadyFree`](BuddyError::AlreadyFree),
    /// [`Referenced`](BuddyError::Referenced) if any page still has a
    /// reference; the first such page in the range decides which. Nothing
    /// changes on an error.
    pub fn free_contig_frozen_range(
        &mut self,
        pfn: u64,
        n: u64,
    ) -> Result<FreeSummary, BuddyError> {
        self.free_contig_common(pfn, n, Prepare::Frozen)
    }

    /// The one helper behind both contiguous frees and `add_range`.
    fn free_contig_common(
        &mut self,
        pfn: u64,
        n: u64,
        how: Prepare,
    ) -> Result<FreeSummary, BuddyError> {
        let i0 = self.span(pfn, n)?;
        let end = i0 + n as usize;
        let pages = &mut self.meta[i0..end];
        // The common case of the refcounted and frozen frees has one word
        // for every page (one reference, or none; no poison): one XOR and
        // one OR per word decide it, then the range is written free.
        let common = match how {
            Prepare::Refcounted => Some(1),
            Prepare::Frozen => Some(0),
            Prepare::Add => None,
        };
        // Checked in chunks: the full scan below only covers what follows
        // the last chunk found common.
        let mut checked = 0;
        if let Some(c) = common {
            for chunk in pages.chunks(1024) {
                if chunk.iter().fold(0, |a, &m| a | (m ^ c)) != 0 {
                    break;
                }
                checked += chunk.len();
            }
            if checked == pages.len() {
                pages.fill(FREE);
                self.free_run(i0, end);
                return Ok(FreeSummary {
                    freed: n,
                    ..FreeSummary::default()
                });
            }
        }
        // Pass 1 (branch-free, vectorised): refuse bad input, and find out
        // whether every page is the common case.
        let (free, refused, unusual) = scan(&pages[checked..], how);
        if free != 0 || refused != 0 {
            return Err(self.first_refusal(i0, end, how));
        }
        let mut sum = FreeSummary::default();
        // Pass 2: prepare every page.
        if unusual == 0 {
            pages.fill(FREE);
            sum.freed = n;
            self.free_run(i0, end);
            return Ok(sum);
        }
        // Slow path: prepare every page without a branch (a page is freed
        // when nothing is left: no reference, no poison).
        match how {
            Prepare::Refcounted => pages.iter_mut().for_each(|m| *m = freed_or(*m - 1)),
            Prepare::Frozen => pages.iter_mut().for_each(|m| *m = freed_or(*m)),
            Prepare::Add => pages.iter_mut().for_each(|m| *m = freed_or(*m & POISON)),
        }
        // Pass 3: batches are the runs between kept pages. Kept pages are
        // rare: groups of 64 pages all freed are skipped with one AND.
        let mut run = i0;
        let mut j = i0;
        while j < end {
            let g = end.min(j + 64);
            if self.meta[j..g].iter().fold(FREE, |a, &m| a & m) == FREE {
                j = g;
                continue;
            }
            for k in j..g {
                let w = self.meta[k];
                if w & FREE == 0 {
                    if w & REFS != 0 {
                        sum.still_referenced += 1;
                    } else {
                        sum.poisoned += 1;
                    }
                    if run < k {
                        self.free_run(run, k);
                    }
                    run = k + 1;
                }
            }
            j = g;
        }
        if run < end {
            self.free_run(run, end);
        }
        sum.freed = n - sum.still_referenced - sum.poisoned;
        Ok(sum)
    }

    /// The error for the first page of `[i0, end)` that `how` refuses.
    #[cold]
    fn first_refusal(&self, i0: usize, end: usize, how: Prepare) -> BuddyError {
        for (k, &m) in self.meta[i0..end].iter().enumerate() {
            let pfn = self.base + (i0 + k) as u64;
            if m & FREE != 0 {
                return BuddyError::AlreadyFree { pfn };
            }
            match how {
                Prepare::Refcounted if m & REFS == 0 => return BuddyError::NotReferenced { pfn },
                Prepare::Frozen if m & REFS != 0 => {
                    return BuddyError::Referenced {
                        pfn,
                        refcount: m & REFS,
                    }
                }
                _ => {}
            }
        }
        BuddyError::ZeroPages
    }

    /// Frees pages `[a, b)` (indices; their words already say FREE) as
    /// batches that stop at section edges, each in the largest aligned
    /// chunks.
    fn free_run(&mut self, mut a: usize, b: usize) {
        while a < b {
            let pfn = self.base + a as u64;
            // The section's end; none for the last section below 2^64.
            let stop = match (pfn | ((1u64 << self.section_shift) - 1)).checked_add(1) {
                Some(section_end) => b.min((section_end - self.base).min(self.pages()) as usize),
                None => b,
            };
            while a < stop {
                let pfn = self.base + a as u64;
                let order = pfn
                    .trailing_zeros()
                    .min((stop - a).ilog2())
                    .min(self.max_order);
                self.free_chunk(pfn, order);
                a += 1 << order;
            }
        }
    }

    /// Puts the chunk of `2^order` pages at `pfn` (in the span, aligned,
    /// words already FREE) on the free map, merging with free buddies of
    /// equal order (`__free_one_page`). A buddy's bit shares a word with
    /// the block's own, and a set bit is always a block inside the span, so
    /// one word per order decides the merge.
    #[inline]
    fn free_chunk(&mut self, pfn: u64, order: u32) {
        self.map.merge_insert(pfn, order, self.max_order);
    }

    /// The free block covering free page index `i`: (head pfn, order).
    fn covering(&self, i: usize) -> Option<(u64, u32)> {
        let pfn = self.base + i as u64;
        (0..=self.max_order)
            .map(|o| (pfn & !((1u64 << o) - 1), o))
            .take_while(|&(h, _)| h >= self.base)
            .find(|&(h, o)| self.block_in_span(h, o) && self.map.contains(o, h))
    }

    /// Takes exactly the pages `[start, end)` (each then holds one
    /// reference), splitting the free blocks that cover them and returning
    /// the rest to the free lists (the kernel's `alloc_contig_range`,
    /// without migration: a page in use fails the call).
    ///
    /// # Errors
    /// [`OutOfRange`](BuddyError::OutOfRange) (also for `start > end`),
    /// [`Busy`](BuddyError::Busy) naming the first page that is not free.
    /// Nothing changes on an error.
    pub fn alloc_contig_range(&mut self, start: u64, end: u64) -> Result<(), BuddyError> {
        let n = end.checked_sub(start).ok_or(BuddyError::OutOfRange {
            pfn: start,
            pages: 0,
        })?;
        let i0 = self.span(start, n)?;
        let iend = i0 + n as usize;
        if let Some(k) = self.meta[i0..iend].iter().position(|m| m & FREE == 0) {
            return Err(BuddyError::Busy {
                pfn: start + k as u64,
            });
        }
        let mut i = i0;
        while i < iend {
            let Some((h, o)) = self.covering(i) else {
                // Unreachable while validate() holds: every free page is in
                // a block.
                debug_assert!(false, "free page without a block");
                break;
            };
            self.map.remove(o, h);
            let h = (h - self.base) as usize;
            let bend = h + (1 << o);
            if h < i0 {
                self.free_run(h, i0);
            }
            if bend > iend {
                self.free_run(iend, bend);
            }
            i = bend;
        }
        self.meta[i0..iend].fill(1);
        Ok(())
    }

    /// Finds the lowest free run of `pages` contiguous pages starting on a
    /// multiple of `align` and takes it like
    /// [`alloc_contig_range`](Self::alloc_contig_range) (the kernel's
    /// `alloc_contig_pages`, what CMA does). The scan jumps past the last
    /// busy page of each failed candidate.
    ///
    /// # Errors
    /// [`ZeroPages`](BuddyError::ZeroPages),
    /// [`BadAlignment`](BuddyError::BadAlignment),
    /// [`NoSpace`](BuddyError::NoSpace).
    pub fn alloc_contig_pages(&mut self, pages: u64, align: u64) -> Result<u64, BuddyError> {
        if pages == 0 {
            return Err(BuddyError::ZeroPages);
        }
        if !align.is_power_of_two() {
            return Err(BuddyError::BadAlignment { align });
        }
        let none = BuddyError::NoSpace { pages };
        let limit = self.base + self.pages();
        let mut p = self.base.checked_next_multiple_of(align).ok_or(none)?;
        while p.checked_add(pages).is_some_and(|e| e <= limit) {
            let i = (p - self.base) as usize;
            match self.meta[i..i + pages as usize]
                .iter()
                .rposition(|m| m & FREE == 0)
            {
                None => {
                    self.alloc_contig_range(p, p + pages)?;
                    return Ok(p);
                }
                Some(k) => {
                    p = (p + k as u64 + 1)
                        .checked_next_multiple_of(align)
                        .ok_or(none)?;
                }
            }
        }
        Err(none)
    }

    /// Marks page `pfn` bad (hardware poison): a free page is taken off the
    /// free lists (`take_page_off_buddy`); an allocated page keeps its
    /// references but will never be freed.
    ///
    /// # Errors
    /// [`OutOfRange`](BuddyError::OutOfRange).
    pub fn mark_poisoned(&mut self, pfn: u64) -> Result<(), BuddyError> {
        let i = self.span(pfn, 1)?;
        let m = self.meta[i];
        if m & FREE != 0 {
            self.alloc_contig_range(pfn, pfn + 1)?;
            self.meta[i] = POISON;
        } else {
            self.meta[i] = m | POISON;
        }
        Ok(())
    }

    /// Clears page `pfn`'s poison mark (`unpoison_memory`). A page that was
    /// held back has no references left: give it back with
    /// [`free_contig_frozen_range`](Self::free_contig_frozen_range)`(pfn, 1)`.
    /// Returns whether the page was poisoned.
    ///
    /// # Errors
    /// [`OutOfRange`](BuddyError::OutOfRange).
    pub fn clear_poisoned(&mut self, pfn: u64) -> Result<bool, BuddyError> {
        let i = self.span(pfn, 1)?;
        let was = self.meta[i] & POISON != 0;
        self.meta[i] &= !POISON;
        Ok(was)
    }
}

/// A [`BuddyAllocator`] behind a mutex, for use from several threads.
///
/// Every operation takes the lock for its whole duration (a contiguous
/// free of 16,384 pages holds it for microseconds, as the kernel holds the
/// zone lock per chunk). [`lock`](Self::lock) gives the allocator itself
/// for a sequence of operations under one acquisition. The allocator never
/// panics on bad input, so a poisoned mutex (a panic elsewhere while the
/// guard was held) is recovered rather than propagated.
#[cfg(feature = "std")]
#[cfg_attr(docsrs, doc(cfg(feature = "std")))]
#[derive(Debug)]
pub struct LockedBuddyAllocator(std::sync::Mutex<BuddyAllocator>);

#[cfg(feature = "std")]
impl LockedBuddyAllocator {
    /// Wraps an allocator.
    pub fn new(inner: BuddyAllocator) -> Self {
        LockedBuddyAllocator(std::sync::Mutex::new(inner))
    }

    /// Exclusive access until the guard is dropped.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, BuddyAllocator> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// [`BuddyAllocator::alloc_pages`] under the lock.
    pub fn alloc_pages(&self, order: u32) -> Result<u64, BuddyError> {
        self.lock().alloc_pages(order)
    }

    /// [`BuddyAllocator::free_pages`] under the lock.
    pub fn free_pages(&self, pfn: u64, order: u32) -> Result<bool, BuddyError> {
        self.lock().free_pages(pfn, order)
    }

    /// [`BuddyAllocator::alloc_contig_pages`] under the lock.
    pub fn alloc_contig_pages(&self, pages: u64, align: u64) -> Result<u64, BuddyError> {
        self.lock().alloc_contig_pages(pages, align)
    }

    /// [`BuddyAllocator::free_contig_range`] under the lock.
    pub fn free_contig_range(&self, pfn: u64, n: u64) -> Result<FreeSummary, BuddyError> {
        self.lock().free_contig_range(pfn, n)
    }

    /// [`BuddyAllocator::free_contig_frozen_range`] under the lock.
    pub fn free_contig_frozen_range(&self, pfn: u64, n: u64) -> Result<FreeSummary, BuddyError> {
        self.lock().free_contig_frozen_range(pfn, n)
    }

    /// The allocator, unwrapped.
    pub fn into_inner(self) -> BuddyAllocator {
        self.0
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests;

#[cfg(any(test, feature = "testing"))]
impl crate::testing::Validate for BuddyAllocator {
    /// Checks every invariant: the free map and the per-page words agree
    /// (each set bit is a free, aligned, in-span block whose pages are
    /// exactly FREE; every free page is in exactly one block), no two free
    /// buddies of one order are left unmerged, the summary levels cover
    /// every non-zero word, allocated pages carry only poison and a
    /// reference count, and the counts add up. For tests; O(pages).
    fn validate(&self) -> Result<(), String> {
        self.check()
    }
}
