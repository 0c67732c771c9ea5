#![no_main]
//! Fuzz target `buddy`: see `crates/spacekit-testkit/src/checks/buddy.rs` for what it checks.

use spacekit_testkit::checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::buddy::run(data));
