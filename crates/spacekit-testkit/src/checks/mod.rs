//! The checks of every fuzz target, shared by the cargo-fuzz targets
//! (`fuzz/fuzz_targets/*.rs`) and the stable replay test
//! (`crates/spacekit/tests/fuzz_replay.rs`). Each `run(&[u8])` decodes its
//! input with the tiny reader in `input.rs` (no `arbitrary`, no libFuzzer)
//! and panics when an invariant breaks.

pub mod bitmap;
pub mod buddy;
pub mod crc;
pub mod dirty;
#[cfg(feature = "ext4")]
pub mod ext4;
pub mod freespace;
pub mod input;
pub mod maps;
pub mod multi;
#[cfg(feature = "tar")]
pub mod populate_tar;
pub mod rangetree;
#[cfg(feature = "ext4")]
pub mod redo_log;
pub mod session;
pub mod snapshot;
pub mod wire;

/// Every target: its name (the directory under `fuzz/corpus/` and
/// `fuzz/regressions/`, and the file under `fuzz/fuzz_targets/`) and its
/// check.
pub type Check = fn(&[u8]);

pub const TARGETS: &[(&str, Check)] = &[
    #[cfg(feature = "ext4")]
    ("ext4", ext4::run),
    #[cfg(feature = "ext4")]
    ("redo_log", redo_log::run),
    #[cfg(feature = "tar")]
    ("populate_tar", populate_tar::run),
    ("dirty", dirty::run),
    ("migration_wire", wire::run),
    ("migration_session", session::run),
    ("migration_multi", multi::run),
    ("snapshot", snapshot::run),
    ("proc_maps", maps::run),
    ("rangetree", rangetree::run),
    ("buddy", buddy::run),
    ("freespace", freespace::run),
    ("bitmap", bitmap::run),
    ("crc32c", crc::run),
];
