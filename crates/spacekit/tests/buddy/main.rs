//! Buddy allocator: the canonical free-block form checked exhaustively
//! against repeated buddy merging, random operation sequences against a
//! per-page model, batched contiguous frees against page-by-page frees,
//! refused calls changing nothing, CMA rounds on a 1M-page zone, and the
//! locked allocator shared by several threads.
//!
//! One test target; the files are split by concern: `checks` (snapshots and
//! refused-call checks), `canonical`, `ops` (proptest op sequences against the
//! page model), `batch` (batched vs page-by-page frees), `refused`, `cma`,
//! `threads` and `single` (the single-page fast path and small orders page by
//! page, allocation lowest block first). The model is
//! `spacekit_testkit::buddy_model`; the proptests persist failures next to their
//! file (`spacekit_testkit::regressions` says why).

use spacekit_testkit::buddy_model as model;
use spacekit_testkit::regressions;

mod checks;

mod batch;
mod canonical;
mod cma;
mod ops;
mod refused;
mod single;
mod threads;

/// Weight of spans at the very top of the pfn space in the proptests.
const TOP: u32 = 1;
