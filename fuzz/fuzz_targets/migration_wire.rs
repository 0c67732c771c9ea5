#![no_main]
//! Fuzz target `migration_wire`: see `fuzz/checks/wire.rs` for what it checks.

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::wire::run(data));
