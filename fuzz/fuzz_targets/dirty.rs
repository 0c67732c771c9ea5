#![no_main]
//! Fuzz target `dirty`: see `crates/spacekit-testkit/src/checks/dirty.rs` for what it checks.

use spacekit_testkit::checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::dirty::run(data));
