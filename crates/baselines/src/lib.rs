//! Faithful ports of each seed's "before" and "after" code, written for
//! spacekit's benchmarks and used as test oracles. Never a dependency of the
//! library itself.
//!
//! The ports keep the original algorithms and their costs (same loops, same
//! restarts, same per-call work) so that a side-by-side benchmark measures the
//! algorithm, not a translation artefact. They return the kernel's sentinel
//! values (`size` for "not found") exactly like the originals.

pub mod buddy;
pub mod crc_flip;
pub mod dirty_log;
pub mod find_bit;
