#![no_main]
//! Fuzz target `migration_multi`: see `crates/spacekit-testkit/src/checks/multi.rs` for what it checks.

use spacekit_testkit::checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::multi::run(data));
