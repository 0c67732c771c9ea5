//! The C side of the ABI: every C test program (`tests/c/*.c`) and example
//! (`examples/*.c`) is compiled with the system `cc` (`-std=c99 -Wall
//! -Wextra -Werror`) against `libspacekit.a` and run, under valgrind
//! (`--error-exitcode=1 --leak-check=full --errors-for-leak-kinds=all`)
//! when it is installed; the header also compiles as C++; and every
//! function the header declares is called by at least one C test.
//!
//! This crate is only a `cdylib` + `staticlib`, so the tests cannot link it
//! as Rust: they link the `libspacekit.a` that `common::lib_dir` builds in
//! `target/<profile>`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `target/<profile>/libspacekit.a`, built for these tests.
fn static_lib() -> PathBuf {
    common::lib_dir().join("libspacekit.a")
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("capi-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs `cmd`, panicking with its output unless it succeeds.
fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Compiles `src` (C99, warnings are errors) against the static library.
fn compile(src: &Path, dir: &Path) -> PathBuf {
    let exe = dir.join(src.file_stem().expect("file name"));
    run(Command::new("cc")
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-g", "-I"])
        .arg(crate_dir().join("include"))
        .arg("-I")
        .arg(crate_dir().join("tests/c"))
        .arg(src)
        .arg("-o")
        .arg(&exe)
        .arg(static_lib())
        .args(["-lpthread", "-ldl", "-lm", "-lrt", "-lutil", "-lgcc_s"]));
    exe
}

/// Runs a compiled program under valgrind when it is installed (zero
/// errors, zero leaks of any kind), else directly. The only suppressions
/// are `valgrind.supp`'s: rayon's global pool, which a parallel range-table
/// fill starts and which lives until exit.
fn run_checked(exe: &Path, args: &[&Path]) -> String {
    if have("valgrind") {
        run(Command::new("valgrind")
            .args([
                "--quiet",
                "--error-exitcode=1",
                "--leak-check=full",
                "--errors-for-leak-kinds=all",
                "--show-leak-kinds=all",
                "--num-callers=64",
            ])
            .arg(format!(
                "--suppressions={}",
                crate_dir().join("valgrind.supp").display()
            ))
            .arg(exe)
            .args(args))
    } else {
        println!("valgrind not found: running {} without it", exe.display());
        run(Command::new(exe).args(args))
    }
}

fn c_test(name: &str) -> String {
    let dir = scratch(name);
    let exe = compile(&crate_dir().join(format!("tests/c/{name}.c")), &dir);
    run_checked(&exe, &[])
}

#[test]
fn c_bitmap() {
    assert!(c_test("bitmap").contains("bitmap: ok"));
}

#[test]
fn c_crc() {
    assert!(c_test("crc").contains("crc: ok"));
}

#[test]
fn c_dirty() {
    assert!(c_test("dirty").contains("dirty: ok"));
}

#[test]
fn c_rangetree() {
    assert!(c_test("rangetree").contains("rangetree: ok"));
}

#[test]
fn c_buddy() {
    assert!(c_test("buddy").contains("buddy: ok"));
}

/// `PATH` with /sbin and /usr/sbin, where mkfs.ext4 and e2fsck live.
fn sbin_path() -> String {
    let path = std::env::var("PATH").unwrap_or_default();
    format!("{path}:/sbin:/usr/sbin")
}

#[test]
fn c_ext4() {
    if !cfg!(feature = "ext4") {
        // The header declares the ext4 functions; the library has them only
        // with the feature, so ext4.c would not link.
        println!("built without feature ext4: skipping the C ext4 test");
        return;
    }
    let path = sbin_path();
    let mkfs = Command::new("mkfs.ext4")
        .env("PATH", &path)
        .arg("-V")
        .output();
    if !mkfs.is_ok_and(|o| o.status.success()) {
        println!("mkfs.ext4 not found: skipping the C ext4 test");
        return;
    }
    let dir = scratch("ext4");
    let img = dir.join("fs.img");
    run(Command::new("mkfs.ext4")
        .env("PATH", &path)
        .env("E2FSPROGS_FAKE_TIME", "1700000000")
        .args(["-q", "-F", "-b", "1024", "-O", "metadata_csum,^has_journal"])
        .arg(&img)
        .arg("8M"));
    let exe = compile(&crate_dir().join("tests/c/ext4.c"), &dir);
    let out = run_checked(&exe, &[&img, &dir]);
    assert!(out.contains("ext4: ok"), "{out}");
    // The writes left a file system e2fsck accepts as it is.
    run(Command::new("e2fsck")
        .env("PATH", &path)
        .arg("-fn")
        .arg(&img));
}

#[test]
fn c_examples() {
    let dir = scratch("examples");
    for name in ["block_bitmap", "vmm_dirty", "cma"] {
        let exe = compile(&crate_dir().join(format!("examples/{name}.c")), &dir);
        let out = run_checked(&exe, &[]);
        assert!(out.contains("done"), "{name}: {out}");
    }
}

#[test]
fn header_compiles_as_cpp() {
    let dir = scratch("cpp");
    let src = dir.join("header.cpp");
    std::fs::write(
        &src,
        "#include \"spacekit.h\"\n\
         int main() {\n\
           size_t words = 0;\n\
           return spacekit_bitmap_words(100, &words) == SPACEKIT_OK && words == 2 ? 0 : 1;\n\
         }\n",
    )
    .expect("write header.cpp");
    let exe = dir.join("header-cpp");
    run(Command::new("c++")
        .args(["-Wall", "-Wextra", "-Werror", "-I"])
        .arg(crate_dir().join("include"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg(static_lib())
        .args(["-lpthread", "-ldl", "-lm", "-lrt", "-lutil", "-lgcc_s"]));
    run(&mut Command::new(&exe));
}

/// The `spacekit_` functions the header declares.
fn header_functions() -> Vec<String> {
    let h = std::fs::read_to_string(crate_dir().join("include/spacekit.h")).expect("header");
    let mut names: Vec<String> = h
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .filter(|l| !l.contains("typedef"))
        .filter_map(|l| {
            // `<return type> spacekit_name(<args>);`: the identifier just
            // before the first parenthesis.
            let before = &l[..l.find('(')?];
            let name = before.rsplit([' ', '*']).next()?;
            let is_ident = name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            (is_ident && name.starts_with("spacekit_")).then(|| name.to_string())
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn every_function_is_called_from_a_c_test() {
    let funcs = header_functions();
    assert!(funcs.len() > 60, "found only {} functions", funcs.len());
    let mut tests = String::new();
    for entry in std::fs::read_dir(crate_dir().join("tests/c")).expect("tests/c") {
        let p = entry.expect("entry").path();
        if p.extension().is_some_and(|e| e == "c") {
            tests.push_str(&std::fs::read_to_string(&p).expect("read test"));
        }
    }
    let missing: Vec<_> = funcs
        .iter()
        .filter(|f| !tests.contains(&format!("{f}(")))
        .collect();
    assert!(missing.is_empty(), "functions no C test calls: {missing:?}");
}

/// The first C program of README.md builds and prints what it says.
#[test]
fn readme_program() {
    let readme = std::fs::read_to_string(crate_dir().join("README.md")).expect("README.md");
    let start = readme.find("```c\n").expect("a C block in README.md") + 5;
    let len = readme[start..].find("```").expect("end of the C block");
    let dir = scratch("readme");
    let src = dir.join("prog.c");
    std::fs::write(&src, &readme[start..start + len]).expect("write prog.c");
    let exe = compile(&src, &dir);
    let out = run_checked(&exe, &[]);
    assert_eq!(out, "16 free bits at 72\n");
}
