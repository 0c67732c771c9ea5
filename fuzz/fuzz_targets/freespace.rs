#![no_main]
//! Fuzz target `freespace`: see `fuzz/checks/freespace.rs` for what it checks.

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::freespace::run(data));
