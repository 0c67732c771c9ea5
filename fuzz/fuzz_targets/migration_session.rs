#![no_main]
//! Fuzz target `migration_session`: see `fuzz/checks/session.rs` for what it checks.

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::session::run(data));
