#![no_main]
//! Fuzz target `proc_maps`: see `crates/spacekit-testkit/src/checks/maps.rs` for what it checks.

use spacekit_testkit::checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::maps::run(data));
