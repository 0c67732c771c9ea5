#![no_main]
//! Fuzz target `snapshot`: see `crates/spacekit-testkit/src/checks/snapshot.rs` for what it checks.

use spacekit_testkit::checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::snapshot::run(data));
