#![no_main]
//! Fuzz target `proc_maps`: see `fuzz/checks/maps.rs` for what it checks.

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::maps::run(data));
