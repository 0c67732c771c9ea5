//! The atomics of [`super::DirtyBitmap`]: core's, or loom's under
//! `--cfg loom` (`tests/loom_dirty.rs` model-checks `mark`,
//! `reset_range`, `harvest_into` and `take` over every interleaving).
//!
//! Only what the bitmap uses is re-exported, so a normal build compiles
//! exactly the code it did before the shim. loom's `AtomicU64` is not
//! const-constructible and has no `as_ptr` / `from_ptr`; the bitmap needs
//! neither (it builds its words with `AtomicU64::new` and harvests them
//! with scalar loads and swaps, no SIMD), so nothing is cfg'd out under
//! loom. loom atomics can only be created inside `loom::model`: under
//! `--cfg loom` a `DirtyBitmap` is only usable there, so only the loom
//! test binary is meant to run in that configuration.

#[cfg(not(loom))]
pub(super) use core::sync::atomic::{AtomicU64, Ordering};
#[cfg(loom)]
pub(super) use loom::sync::atomic::{AtomicU64, Ordering};
