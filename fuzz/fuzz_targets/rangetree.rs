#![no_main]
//! Fuzz target `rangetree`: see `crates/spacekit-testkit/src/checks/rangetree.rs` for what it checks.

use spacekit_testkit::checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::rangetree::run(data));
