#![no_main]
//! Fuzz target `migration_wire`: see `crates/spacekit-testkit/src/checks/wire.rs` for what it checks.

use spacekit_testkit::checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::wire::run(data));
