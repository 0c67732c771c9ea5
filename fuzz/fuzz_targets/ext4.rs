#![no_main]
//! Fuzz target `ext4`: see `crates/spacekit-testkit/src/checks/ext4.rs` for what it checks.

use spacekit_testkit::checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::ext4::run(data));
