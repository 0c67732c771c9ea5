#![no_main]
//! Fuzz target `crc32c`: see `fuzz/checks/crc.rs` for what it checks.

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::crc::run(data));
