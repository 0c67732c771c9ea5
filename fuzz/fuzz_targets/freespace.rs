#![no_main]
//! Fuzz target `freespace`: see `crates/spacekit-testkit/src/checks/freespace.rs` for what it checks.

use spacekit_testkit::checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::freespace::run(data));
