//! Where the C libraries are: this crate is only a `cdylib` + `staticlib`,
//! so `cargo test` does not build them for its integration tests (which
//! cannot link them as Rust). The tests build them once, with the profile,
//! target directory and features the tests themselves were built with, and
//! use `target/<profile>/libspacekit.{a,so}`. Cargo does not hold its build
//! lock while tests run, and an up-to-date build is a no-op.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// `target/<profile>`, holding freshly built `libspacekit.a` and
/// `libspacekit.so`.
pub fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(build)
}

fn build() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test runs from target/<profile>/deps")
        .to_path_buf();
    let target_dir = profile_dir.parent().expect("target dir");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_string());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "-p", "spacekit-capi", "--lib"])
        .arg("--target-dir")
        .arg(target_dir)
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"));
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => {}
        Some("release") => {
            cmd.arg("--release");
        }
        Some(other) => {
            cmd.args(["--profile", other]);
        }
        None => panic!("no profile directory in {}", exe.display()),
    }
    if !cfg!(feature = "ext4") {
        cmd.arg("--no-default-features");
    }
    let out = cmd.output().expect("run cargo build for libspacekit");
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in ["libspacekit.a", "libspacekit.so"] {
        assert!(
            profile_dir.join(f).is_file(),
            "{} missing after {cmd:?}",
            profile_dir.join(f).display()
        );
    }
    profile_dir
}
