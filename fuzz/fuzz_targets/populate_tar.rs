#![no_main]
//! Fuzz target `populate_tar`: see `crates/spacekit-testkit/src/checks/populate_tar.rs` for what it checks.

use spacekit_testkit::checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::populate_tar::run(data));
