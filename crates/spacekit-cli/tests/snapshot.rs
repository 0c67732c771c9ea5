//! `spacekit snapshot merge` and `info`: the merged file is the memory at
//! the last diff, the JSON fields are there, a diff of another base or a
//! damaged file fails with status 1 and leaves the output as it was, bad
//! arguments exit 2.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;
use spacekit::dirty::{MemoryRange, MemoryRangeTable};
use spacekit::snapshot::{write_diff, write_full};
use spacekit_testkit::e2fs::TempDir;
use spacekit_testkit::rng::Rng;

const PAGE: u64 = 4096;

fn spacekit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spacekit"))
        .arg("snapshot")
        .args(args)
        .output()
        .unwrap()
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A full snapshot and two diffs of a 64-page memory; the memory at the
/// last diff.
fn chain(dir: &TempDir) -> (Vec<PathBuf>, Vec<u8>) {
    let mut rng = Rng(7);
    let mut mem = vec![0u8; 64 * PAGE as usize];
    for p in (0..64).step_by(2) {
        rng.fill(&mut mem[p * PAGE as usize..][..PAGE as usize]);
    }
    let paths: Vec<PathBuf> = ["full", "d1", "d2"].iter().map(|n| dir.path(n)).collect();
    let mut base = write_full(&mem, PAGE, &paths[0]).unwrap();
    for (k, path) in paths[1..].iter().enumerate() {
        let mut t = MemoryRangeTable::new();
        for p in [3 + k as u64, 10, 40 + 2 * k as u64] {
            rng.fill(&mut mem[(p * PAGE) as usize..][..PAGE as usize]);
            t.push(MemoryRange {
                gpa: p * PAGE,
                length: PAGE,
            });
        }
        mem[(20 * PAGE) as usize..][..PAGE as usize].fill(0);
        t.push(MemoryRange {
            gpa: 20 * PAGE,
            length: PAGE,
        });
        base = write_diff(&mem, &t, &base, path).unwrap();
    }
    (paths, mem)
}

fn s(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn merge_writes_the_last_memory_and_reports_it() {
    let dir = TempDir::new("cli-snap-merge");
    let (p, mem) = chain(&dir);
    let out = dir.path("out");
    let v = json(&spacekit(&[
        "merge",
        s(&p[0]),
        s(&p[1]),
        s(&p[2]),
        "-o",
        s(&out),
        "--json",
    ]));
    assert_eq!(v["kind"], "full");
    assert_eq!(v["diffs"], 2);
    assert_eq!(v["memory_size"], mem.len() as u64);
    assert_eq!(v["page_size"], PAGE);
    assert_eq!(v["file_bytes"], mem.len() as u64 + 4096);
    assert_eq!(v["base_id"], Value::Null);
    assert!(v["allocated_bytes"].as_u64().unwrap() < mem.len() as u64);
    let bytes = fs::read(&out).unwrap();
    assert!(bytes[..mem.len()] == mem[..], "the merged memory differs");
    // The id is a full snapshot's of that memory.
    let direct = write_full(&mem, PAGE, dir.path("direct")).unwrap();
    assert_eq!(v["id"], direct.id.to_string());

    // info on each kind.
    let i = json(&spacekit(&["info", s(&p[2]), "--json", "--verify"]));
    assert_eq!(i["kind"], "diff");
    assert_eq!(i["ranges"], 4);
    assert_eq!(i["data_bytes"], 4 * PAGE);
    assert_eq!(i["verified"], true);
    let d1 = json(&spacekit(&["info", s(&p[1]), "--json"]));
    assert_eq!(i["base_id"], d1["id"]);
    let f = json(&spacekit(&["info", s(&out), "--json"]));
    assert_eq!(f["id"], v["id"]);
    assert_eq!(f["raw"], false);
    let text = spacekit(&["info", s(&p[2])]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("diff snapshot") && text.contains("ranges     4"),
        "{text}"
    );
    assert!(!text.contains("verified"), "{text}");
    let text = spacekit(&["info", s(&p[2]), "--verify"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("verified"), "--verify says so: {text}");
}

#[test]
fn failures_exit_1_and_leave_the_output() {
    let dir = TempDir::new("cli-snap-fail");
    let (p, _) = chain(&dir);
    let out = dir.path("out");
    fs::write(&out, b"old").unwrap();
    // d2 applied straight to the full snapshot: the wrong base.
    let r = spacekit(&["merge", s(&p[0]), s(&p[2]), "-o", s(&out)]);
    assert_eq!(r.status.code(), Some(1));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("d2") && err.contains("a diff of snapshot"),
        "{err}"
    );
    assert_eq!(fs::read(&out).unwrap(), b"old");
    // A damaged diff.
    let mut b = fs::read(&p[1]).unwrap();
    b[130] ^= 1;
    fs::write(dir.path("bad"), &b).unwrap();
    let r = spacekit(&["merge", s(&p[0]), s(&dir.path("bad")), "-o", s(&out)]);
    assert_eq!(r.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&r.stderr).contains("checksum"));
    assert_eq!(fs::read(&out).unwrap(), b"old");
    let r = spacekit(&["info", s(&dir.path("missing"))]);
    assert_eq!(r.status.code(), Some(1));
    // A raw image of an odd size: the message names the file.
    let odd = dir.path("odd.img");
    fs::write(&odd, vec![7u8; 5000]).unwrap();
    let r = spacekit(&["info", s(&odd)]);
    assert_eq!(r.status.code(), Some(1));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("odd.img") && err.contains("page size"),
        "{err}"
    );
    // Bad arguments: no diff, no -o, an unknown flag.
    for args in [
        &["merge", s(&p[0]), "-o", s(&out)][..],
        &["merge", s(&p[0]), s(&p[1])],
        &["info", s(&p[0]), "--nope"],
    ] {
        assert_eq!(spacekit(args).status.code(), Some(2), "{args:?}");
    }
    let help = spacekit(&["merge", "--help"]);
    assert!(String::from_utf8_lossy(&help.stdout).contains("temporary name"));
    let help = spacekit(&["--help"]);
    assert!(String::from_utf8_lossy(&help.stdout).contains("Exit status: 0 success; 1 failure"));
}

/// SIGTERM (as Ctrl-C) during a merge: the output is as it was, and the temporary file
/// the merge was writing beside it (as large as the memory) is removed.
#[test]
fn an_interrupted_merge_leaves_no_temporary_file() {
    let dir = TempDir::new("cli-snap-int");
    // 512 MiB of memory, every page data: the merge takes long enough to
    // be caught while it writes.
    let mut rng = Rng(11);
    let mut mem = vec![0u8; 512 << 20];
    rng.fill(&mut mem);
    let full = dir.path("full");
    let base = write_full(&mem, PAGE, &full).unwrap();
    let mut t = MemoryRangeTable::new();
    t.push(MemoryRange {
        gpa: 0,
        length: PAGE,
    });
    let diff = dir.path("d1");
    write_diff(&mem, &t, &base, &diff).unwrap();
    drop(mem);
    let out = dir.path("out");
    fs::write(&out, b"old").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_spacekit"))
        .args(["snapshot", "merge"])
        .args([&full, &diff])
        .arg("-o")
        .arg(&out)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let temporaries = || -> Vec<String> {
        fs::read_dir(dir.path("."))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".sk-tmp."))
            .collect()
    };
    // Wait for the temporary file, then interrupt.
    let start = std::time::Instant::now();
    while temporaries().is_empty() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the merge ended before it was seen writing"
        );
        assert!(start.elapsed().as_secs() < 60, "no temporary file");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // SIGTERM, as a service manager stops a job: the same cleaning, and
    // 128 + 15 as a shell reports it.
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let o = child.wait_with_output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(143),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(fs::read(&out).unwrap(), b"old", "the output changed");
    assert!(temporaries().is_empty(), "left: {:?}", temporaries());
}

/// `merge -o` naming one of its inputs is refused (the chain's base or a
/// diff would be lost), and neither a pipe, a FIFO, a device nor an empty
/// file is taken for a snapshot: refused at once, never waited on or read
/// as zero bytes of memory.
#[test]
fn inputs_are_neither_replaced_nor_mistaken() {
    let dir = TempDir::new("snap-inputs");
    let (paths, _) = chain(&dir);
    for victim in [&paths[0], &paths[2]] {
        let before = fs::read(victim).unwrap();
        let o = spacekit(&[
            "merge",
            s(&paths[0]),
            s(&paths[1]),
            s(&paths[2]),
            "-o",
            s(victim),
        ]);
        assert_eq!(o.status.code(), Some(1));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("one of the merge's inputs"), "{err}");
        assert_eq!(fs::read(victim).unwrap(), before, "an input was replaced");
    }
    // An input named through a symlink is still the file `-o` names:
    // refused. A symlink named by `-o` is replaced itself, its target (the
    // base) kept.
    let via = dir.path("via");
    std::os::unix::fs::symlink(&paths[0], &via).unwrap();
    let before = fs::read(&paths[0]).unwrap();
    let o = spacekit(&["merge", s(&via), s(&paths[1]), "-o", s(&paths[0])]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(fs::read(&paths[0]).unwrap(), before);
    let o = spacekit(&["merge", s(&paths[0]), s(&paths[1]), "-o", s(&via)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!fs::symlink_metadata(&via).unwrap().file_type().is_symlink());
    assert_eq!(
        fs::read(&paths[0]).unwrap(),
        before,
        "the link's target changed"
    );
    let empty = dir.path("empty");
    fs::write(&empty, b"").unwrap();
    let fifo = dir.path("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    for bad in [s(&empty), "/dev/null", "/dev/zero", s(&fifo)] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_spacekit"))
            .args(["snapshot", "info", bad])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if start.elapsed().as_secs() > 20 {
                let _ = child.kill();
                panic!("snapshot info {bad} hangs");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert_eq!(status.code(), Some(1), "{bad}");
    }
}
