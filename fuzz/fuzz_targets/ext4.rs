#![no_main]
//! Fuzz target `ext4`: see `fuzz/checks/ext4.rs` for what it checks.

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::ext4::run(data));
