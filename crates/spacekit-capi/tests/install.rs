//! `install.sh` lays out lib/libspacekit.{so,a}, include/spacekit.h and
//! lib/pkgconfig/spacekit.pc under a prefix, and a C program builds with
//! `cc prog.c $(pkg-config --cflags --libs spacekit)` and runs, as the
//! README shows.

mod common;

use std::path::Path;
use std::process::Command;

#[test]
fn install_then_build_with_pkg_config() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let built = common::lib_dir();
    let prefix = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi-install/prefix");
    let _ = std::fs::remove_dir_all(&prefix);

    let out = Command::new("sh")
        .arg(crate_dir.join("install.sh"))
        .arg("--from")
        .arg(built)
        .arg(&prefix)
        .output()
        .expect("run install.sh");
    assert!(
        out.status.success(),
        "install.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in [
        "lib/libspacekit.so",
        "lib/libspacekit.a",
        "include/spacekit.h",
        "lib/pkgconfig/spacekit.pc",
    ] {
        assert!(prefix.join(f).is_file(), "{f} not installed");
    }
    let pc = std::fs::read_to_string(prefix.join("lib/pkgconfig/spacekit.pc")).expect("pc");
    assert!(pc.contains("Libs: -L${libdir} -lspacekit"), "{pc}");
    assert!(pc.contains("Version: 0."), "{pc}");

    let pkg_config_ok = Command::new("pkg-config")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !pkg_config_ok {
        println!("pkg-config not found: not building against the installed library");
        return;
    }
    // Exactly the README's command line, through a shell.
    let prog = crate_dir.join("examples/block_bitmap.c");
    let bin = prefix.join("block_bitmap");
    let pc_path = prefix.join("lib/pkgconfig");
    let status = Command::new("sh")
        .arg("-c")
        .arg(r#"cc -std=c99 -Wall -Wextra -Werror "$1" -o "$2" $(pkg-config --cflags --libs spacekit)"#)
        .arg("sh")
        .arg(&prog)
        .arg(&bin)
        .env("PKG_CONFIG_PATH", &pc_path)
        .status()
        .expect("cc");
    assert!(status.success(), "cc with pkg-config flags failed");
    let run = Command::new(&bin)
        .env("LD_LIBRARY_PATH", prefix.join("lib"))
        .output()
        .expect("run the program");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success() && stdout.contains("done"), "{stdout}");
    // It really linked the shared library.
    let ldd = Command::new("ldd")
        .arg(&bin)
        .env("LD_LIBRARY_PATH", prefix.join("lib"))
        .output();
    if let Ok(ldd) = ldd {
        let text = String::from_utf8_lossy(&ldd.stdout);
        assert!(text.contains("libspacekit.so"), "{text}");
    }
}
