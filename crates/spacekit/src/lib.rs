//! spacekit: the fast paths memory and storage managers are built from.
//!
//! * [`bitmap`] — word-level bit search over `u64` words: next/previous set or
//!   clear bit, counts, runs, and the aligned search for `nr` consecutive clear
//!   bits (Linux's `bitmap_find_next_zero_area_off`) that reads the bitmap once
//!   instead of restarting per collision. AVX2 with a scalar fallback.
//!
//! The crate is `#![no_std]` with `alloc`; the default `std` feature adds
//! runtime CPU feature detection.
#![cfg_attr(not(test), no_std)]
#![deny(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod bitmap;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
