#![no_main]
//! Fuzz target `redo_log`: see `crates/spacekit-testkit/src/checks/redo_log.rs` for what it checks.

use spacekit_testkit::checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::redo_log::run(data));
