#![no_main]
//! Fuzz target `bitmap`: see `crates/spacekit-testkit/src/checks/bitmap.rs` for what it checks.

use spacekit_testkit::checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::bitmap::run(data));
