//! Per-page metadata: one `u32` per page.
//!
//! ```text
//! bit 31  FREE    the page is in a free block
//! bit 29  POISON  hardware-poisoned / bad: never handed out, never freed
//! 0..=23  REFS    reference count (allocated pages)
//! ```
//!
//! A free page's word is exactly `FREE`; an allocated page's word is its
//! poison bit and reference count. Which free page heads a block, and of
//! which order, is not in the word but in the per-order bitmaps
//! ([`super::freemap`]): a merge then never writes the words of the
//! buddies it absorbs, and a free of one page writes one word.
//!
//! One word per page keeps the contiguous-free prepare pass a straight loop
//! over a `u32` slice that the compiler vectorises.

pub(super) const FREE: u32 = 1 << 31;
pub(super) const POISON: u32 = 1 << 29;
pub(super) const REFS: u32 = (1 << 24) - 1;
/// Pages are indexed by `u32`: this many or more cannot be managed.
pub(super) const NIL: u32 = u32::MAX;
