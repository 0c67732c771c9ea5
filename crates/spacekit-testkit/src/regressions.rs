//! The proptest config for test targets that are folders
//! (`tests/<name>/main.rs`): failures persisted next to the file holding the
//! `proptest!`, as `<file stem>.proptest-regressions`.
//!
//! proptest's default persistence (`SourceParallel`) walks up from the source
//! file to the first folder holding a `lib.rs` or `main.rs`. A top-level
//! `tests/<name>.rs` finds none and falls back to
//! `tests/<name>.proptest-regressions`, but `tests/<name>/ops.rs` finds
//! `tests/<name>/main.rs` and would use
//! `tests/proptest-regressions/ops.txt`, one folder shared by every folder
//! target, where `buddy/ops.rs` and `rangetree/ops.rs` would share a file.
//! Used by the folder targets `tests/buddy/` and `tests/rangetree/`.

use proptest::test_runner::{Config, FileFailurePersistence};

/// `ProptestConfig::with_cases(cases)` with failures persisted next to the
/// source file (unless `PROPTEST_DISABLE_FAILURE_PERSISTENCE` turned
/// persistence off).
pub fn with_cases(cases: u32) -> Config {
    let mut config = Config::with_cases(cases);
    if config.failure_persistence.is_some() {
        config.failure_persistence = Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        )));
    }
    config
}
