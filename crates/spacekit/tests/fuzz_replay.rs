//! Replays every fuzz corpus and regression file on stable: each file in
//! `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/` goes through the
//! same check the cargo-fuzz target runs (`spacekit_testkit::checks`), so `cargo test`
//! keeps every input the fuzzers found interesting, and every crash they
//! found, passing without a nightly toolchain.
//!
//! A regression whose bug is not fixed yet is listed in [`KNOWN_OPEN`]: it
//! is replayed and must still fail (so the list cannot go stale silently);
//! the test prints the list. Remove an entry when its fix lands.

#![cfg(feature = "std")]

use std::fs;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use spacekit_testkit::checks;

/// Regressions of bugs in files another change is editing, reproduced but
/// not fixed yet: `(target, file name, what fails)`.
const KNOWN_OPEN: &[(&str, &str, &str)] = &[];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of `dir`, sorted (none if it does not exist).
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

/// Runs `check` on `data`; `Err` with the panic message if it panicked.
fn outcome(check: fn(&[u8]), data: &[u8]) -> Result<(), String> {
    panic::catch_unwind(AssertUnwindSafe(|| check(data))).map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into())
    })
}

fn replay(target: &str, check: fn(&[u8])) {
    let root = fuzz_dir();
    let mut failures = Vec::new();
    let mut ran = 0;
    for kind in ["corpus", "regressions"] {
        for file in files(&root.join(kind).join(target)) {
            let name = file
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .to_string();
            let data = fs::read(&file).expect("read a fuzz input");
            ran += 1;
            let known = KNOWN_OPEN
                .iter()
                .find(|(t, n, _)| *t == target && *n == name);
            match (outcome(check, &data), known) {
                (Ok(()), None) => {}
                (Err(msg), None) => failures.push(format!("{kind}/{target}/{name}: {msg}")),
                (Err(_), Some((_, _, what))) => {
                    eprintln!("known open (still failing, as listed): {kind}/{target}/{name}: {what}");
                }
                (Ok(()), Some(_)) => failures.push(format!(
                    "{kind}/{target}/{name} is listed in KNOWN_OPEN but passes now: remove it from the list"
                )),
            }
        }
    }
    eprintln!("{target}: replayed {ran} files");
    assert!(
        failures.is_empty(),
        "{} of {ran} inputs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Every target has a seed corpus, and every KNOWN_OPEN entry names a file
/// that exists.
#[test]
fn every_target_has_a_corpus() {
    let root = fuzz_dir();
    for (target, _) in checks::TARGETS {
        assert!(
            !files(&root.join("corpus").join(target)).is_empty(),
            "fuzz/corpus/{target}/ is empty or missing"
        );
    }
    for (target, name, what) in KNOWN_OPEN {
        eprintln!("KNOWN_OPEN: {target}/{name}: {what}");
        assert!(
            root.join("regressions").join(target).join(name).is_file(),
            "KNOWN_OPEN names a missing file: regressions/{target}/{name}"
        );
    }
}

macro_rules! replay_tests {
    ($($name:ident => $target:literal, $check:path;)*) => {$(
        #[test]
        fn $name() {
            replay($target, $check);
        }
    )*};
}

#[cfg(feature = "ext4")]
replay_tests! {
    ext4 => "ext4", checks::ext4::run;
}

#[cfg(feature = "tar")]
replay_tests! {
    populate_tar => "populate_tar", checks::populate_tar::run;
}

replay_tests! {
    dirty => "dirty", checks::dirty::run;
    migration_wire => "migration_wire", checks::wire::run;
    migration_session => "migration_session", checks::session::run;
    migration_multi => "migration_multi", checks::multi::run;
    snapshot => "snapshot", checks::snapshot::run;
    proc_maps => "proc_maps", checks::maps::run;
    rangetree => "rangetree", checks::rangetree::run;
    buddy => "buddy", checks::buddy::run;
    freespace => "freespace", checks::freespace::run;
    bitmap => "bitmap", checks::bitmap::run;
    crc32c => "crc32c", checks::crc::run;
}

/// The replay can fail: a check that panics on an input is reported with
/// the panic's message, and one that passes is not.
#[test]
fn a_panicking_check_is_reported() {
    fn picky(data: &[u8]) {
        assert!(data.first() != Some(&0xAA), "input starts with 0xAA");
    }
    assert_eq!(outcome(picky, &[1, 2]), Ok(()));
    let err = outcome(picky, &[0xAA]).expect_err("the panic must be caught");
    assert!(err.contains("0xAA"), "{err}");
    // The input reader pads a short input with zeros.
    let mut input = checks::input::Input::new(&[1, 2]);
    assert_eq!(input.u32(), 0x0201);
    assert!(input.is_empty());
}

/// Inputs no fuzzer has seen: fixed-seed random bytes through the ext4
/// check, so its newer operations (write, mkdir, symlink, link, rename,
/// rmdir, read) run on stable before a corpus holds them.
#[cfg(feature = "ext4")]
#[test]
fn ext4_random_inputs() {
    let mut rng = spacekit_testkit::rng::Rng(0x00E4_7F00_5EED);
    for i in 0..300 {
        let n = 16 + rng.below(400) as usize;
        let mut data = rng.bytes(n);
        // No edits to the base image most of the time, so the file model
        // (and its reopen check) stays on.
        if i % 4 != 0 && data.len() > 2 {
            data[2] = 0;
        }
        if let Err(e) = outcome(checks::ext4::run, &data) {
            panic!("input {i} ({data:02x?}): {e}");
        }
    }
}

/// Inputs no fuzzer has seen: each seed of the `populate_tar` corpus
/// with fixed-seed random bytes changed, cut short or appended, through
/// its check (so damaged headers, PAX records, sparse maps and compressed
/// streams run on stable).
#[cfg(feature = "tar")]
#[test]
fn populate_tar_damaged_seeds() {
    let mut rng = spacekit_testkit::rng::Rng(0x7A2_5EED);
    let seeds = files(&fuzz_dir().join("corpus/populate_tar"));
    assert!(!seeds.is_empty(), "no populate_tar seeds");
    for seed in &seeds {
        let base = fs::read(seed).expect("read a seed");
        for i in 0..40 {
            let mut data = base.clone();
            match i % 4 {
                0 => data.truncate(rng.below(data.len() as u64 + 1) as usize),
                1 => {
                    let n = 1 + rng.below(600) as usize;
                    data.extend(rng.bytes(n));
                }
                _ => {
                    for _ in 0..1 + rng.below(8) {
                        let at = rng.below(data.len().max(1) as u64) as usize;
                        if let Some(b) = data.get_mut(at) {
                            *b = rng.below(256) as u8;
                        }
                    }
                }
            }
            if let Err(e) = outcome(checks::populate_tar::run, &data) {
                panic!("{} variant {i}: {e}", seed.display());
            }
        }
    }
}
