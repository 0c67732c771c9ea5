//! Test-only hooks, gathered in one place (`spacekit::__testing`) and
//! hidden from the documentation: nothing here is part of the stable API.
//! Tests, benchmarks and fuzzers use them to force a SIMD level, to look
//! inside a search, to check a structure's invariants after every operation
//! (like roaring's `internal_validate` or the maple tree's `mt_validate`),
//! and to inject failures.
//!
//! Each area keeps its hooks in its own module and re-exports them here.

/// Checks every invariant of a structure; `Err` names the first one broken.
/// Used by tests and fuzzers after every operation.
pub trait Validate {
    /// `Ok(())` when every invariant holds.
    fn validate(&self) -> Result<(), alloc::string::String>;
}
