//! Test support for spacekit, beside the library as `regex-test` sits
//! beside `regex`: the models the tests check against, e2fsprogs helpers,
//! a Cloud Hypervisor-shaped migration peer, a fault-injecting ext4 device,
//! and every fuzz target's check. The library's own hooks
//! (`spacekit::testing`, feature `testing`) are turned on by this crate, so
//! a test that depends on it gets them and a default build of the library
//! has none.

pub mod bits;
pub mod buddy_model;
pub mod ch_peer;
pub mod checks;
pub mod e2fs;
#[cfg(feature = "ext4")]
pub mod faults;
pub mod gen_tree;
pub mod rangetree_model;
pub mod regressions;
pub mod rng;
pub mod tree;
