//! e2fsprogs and temporary directories for the ext4 test binaries.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// An e2fsprogs tool: on PATH, else in /usr/sbin or /sbin.
pub fn tool(name: &str) -> PathBuf {
    if Command::new(name).arg("-V").output().is_ok() {
        return PathBuf::from(name);
    }
    ["/usr/sbin", "/sbin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from(name))
}

/// Whether every tool in `tools` runs. CI installs e2fsprogs (.ci/run):
/// there a missing tool is a failure, not a skip; elsewhere the caller
/// skips with one line.
pub fn have_e2fsprogs(tools: &[&str]) -> bool {
    let ok = tools
        .iter()
        .all(|t| Command::new(tool(t)).arg("-V").output().is_ok());
    assert!(
        ok || std::env::var_os("CI").is_none(),
        "CI is set but e2fsprogs ({tools:?}) is missing"
    );
    if !ok {
        eprintln!("skipping: e2fsprogs ({tools:?}) not found");
    }
    ok
}

/// A fresh directory under the system's temporary directory, removed on
/// drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// `spacekit-<pid>-<n>-<name>` under the temporary directory.
    pub fn new(name: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "spacekit-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    /// `name` inside the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
