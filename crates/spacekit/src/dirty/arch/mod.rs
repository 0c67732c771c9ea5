//! The dirty scanner's word-parallel pieces.
//!
//! The scanner (`../scan.rs`) is generic: it calls the three pieces in
//! [`generic`], stage 1 of a batch ([`generic::marks`]), stage 2 for one
//! word ([`generic::expand`]) and the parallel scan's sizing pass
//! ([`generic::count_edges`]), each written once over the per-ISA
//! [`crate::arch::Vector`] trait, and hands its work to
//! [`crate::arch::run`] as a [`crate::arch::Job`], which matches the
//! [`crate::arch::Level`] once per call and runs the whole job compiled for
//! it:
//!
//! * scalar — one word at a time;
//! * AVX2 — four words per step, the job compiled with AVX2, POPCNT and
//!   BMI1 (`tzcnt`/`blsr` in the expand loop);
//! * AVX-512 — eight words per step with mask registers, `vpopcntq` edge
//!   counts, and each word's edge positions emitted by one `vpcompressb`
//!   instead of a bit loop (the trait's `expand`).
//!
//! Words come through the [`Words`] trait: one bitmap, or the OR of two.

pub(crate) mod generic;
mod scalar;
mod words;

pub(crate) use words::Words;
