#![no_main]
//! Fuzz target `crc32c`: see `crates/spacekit-testkit/src/checks/crc.rs` for what it checks.

use spacekit_testkit::checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::crc::run(data));
