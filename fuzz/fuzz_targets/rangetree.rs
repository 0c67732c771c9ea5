#![no_main]
//! Fuzz target `rangetree`: see `fuzz/checks/rangetree.rs` for what it checks.

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::rangetree::run(data));
