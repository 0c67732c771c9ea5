#![no_main]
//! Fuzz target `buddy`: see `fuzz/checks/buddy.rs` for what it checks.

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::buddy::run(data));
