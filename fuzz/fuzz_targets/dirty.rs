#![no_main]
//! Fuzz target `dirty`: see `fuzz/checks/dirty.rs` for what it checks.

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::dirty::run(data));
