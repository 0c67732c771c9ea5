#![no_main]
//! Fuzz target `bitmap`: see `fuzz/checks/bitmap.rs` for what it checks.

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::bitmap::run(data));
