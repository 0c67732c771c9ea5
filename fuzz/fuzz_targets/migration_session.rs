#![no_main]
//! Fuzz target `migration_session`: see `crates/spacekit-testkit/src/checks/session.rs` for what it checks.

use spacekit_testkit::checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::session::run(data));
