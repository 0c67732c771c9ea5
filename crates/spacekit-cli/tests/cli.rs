//! The `spacekit` binary end to end: help texts, the JSON report's shape, and
//! the rule that a disagreement between variants fails the run without JSON.

use std::path::PathBuf;
use std::process::Command;

fn spacekit() -> Command {
    Command::new(env!("CARGO_BIN_EXE_spacekit"))
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spacekit-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Runs `spacekit bench ARGS --json FILE`, requires success, parses FILE.
fn bench_json(name: &str, args: &[&str]) -> serde_json::Value {
    let path = tmp(name);
    let out = spacekit()
        .arg("bench")
        .args(args)
        .arg("--json")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    std::fs::remove_file(&path).ok();
    v
}

/// The rows of `bench NAME --quick --json`, after checking the report
/// names the benchmark.
fn quick_rows(name: &str) -> Vec<serde_json::Value> {
    let v = bench_json(&format!("{name}.json"), &[name, "--quick"]);
    assert_eq!(v["bench"], name);
    v["rows"].as_array().unwrap().clone()
}

#[test]
fn help_explains_every_subcommand() {
    let out = spacekit().arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for word in ["bench", "dirty", "ext4", "maps"] {
        assert!(text.contains(word), "--help lacks {word}: {text}");
    }

    let out = spacekit().args(["bench", "--help"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for word in [
        "membw",
        "zero-area",
        "crc",
        "dirty",
        "fork",
        "rangetree",
        "cma",
        "ext4-fallocate",
        "ext4-write",
        "--quick",
        "--full",
        "--json",
    ] {
        assert!(text.contains(word), "bench --help lacks {word}: {text}");
    }
    assert!(!text.contains("inject"), "the test hook stays hidden");

    let out = spacekit()
        .args(["dirty", "ranges", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for word in [
        "--or",
        "--page-size",
        "--base",
        "--merge-gap",
        "--format",
        "chv",
    ] {
        assert!(
            text.contains(word),
            "dirty ranges --help lacks {word}: {text}"
        );
    }
}

/// Writes `words` as a raw little-endian bitmap file.
fn bitmap_file(name: &str, words: &[u64]) -> PathBuf {
    let path = tmp(name);
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Runs `spacekit dirty ranges ARGS`; returns (success, stdout, stderr).
fn dirty_ranges(args: &[&std::ffi::OsStr]) -> (bool, Vec<u8>, String) {
    let out = spacekit()
        .args(["dirty", "ranges", "--quiet"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn dirty_ranges_in_every_format_match_the_library() {
    use spacekit::dirty::{Geometry, MemoryRangeTable, Scan};
    // Random runs over 3000 words, and a second log to OR in.
    let mut s = 0x1234_5678u64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let a: Vec<u64> = (0..3000)
        .map(|i| match i % 7 {
            0 => !0,
            1 => next() & next(),
            _ => 0,
        })
        .collect();
    let b: Vec<u64> = (0..3000).map(|_| next() & next() & next()).collect();
    let fa = bitmap_file("a.bin", &a);
    let fb = bitmap_file("b.bin", &b);
    let base = 0x1_0000_0000u64;
    let scan = Scan::new(&a, Geometry::new(base, 4096).unwrap()).unwrap();
    let want = MemoryRangeTable::from_scan(scan.or(&b).unwrap().merge_gap(3));
    assert!(want.len() > 100);

    let common = |fmt: &str| -> Vec<std::ffi::OsString> {
        vec![
            fa.clone().into(),
            "--or".into(),
            fb.clone().into(),
            "--base".into(),
            "0x100000000".into(),
            "--merge-gap".into(),
            "3".into(),
            "--format".into(),
            fmt.into(),
        ]
    };
    let run = |fmt: &str| {
        let args = common(fmt);
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let (ok, out, err) = dirty_ranges(&refs);
        assert!(ok, "{fmt}: {err}");
        out
    };
    // chv: Cloud Hypervisor's wire format, byte for byte.
    let chv = run("chv");
    assert_eq!(chv, want.to_bytes());
    assert_eq!(MemoryRangeTable::from_bytes(&chv).unwrap(), want);
    // text: "gpa length" in hex, one line per range.
    let text = String::from_utf8(run("text")).unwrap();
    let parsed: Vec<(u64, u64)> = text
        .lines()
        .map(|l| {
            let (g, n) = l.split_once(' ').unwrap();
            (
                u64::from_str_radix(g.trim_start_matches("0x"), 16).unwrap(),
                u64::from_str_radix(n.trim_start_matches("0x"), 16).unwrap(),
            )
        })
        .collect();
    let pairs: Vec<(u64, u64)> = want.ranges().iter().map(|r| (r.gpa, r.length)).collect();
    assert_eq!(parsed, pairs);
    // json: the same ranges plus the totals.
    let v: serde_json::Value = serde_json::from_slice(&run("json")).unwrap();
    assert_eq!(v["total_bytes"].as_u64().unwrap(), want.total_bytes());
    assert_eq!(v["bitmap_bytes"].as_u64().unwrap(), 3000 * 8);
    let js: Vec<(u64, u64)> = v["ranges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["gpa"].as_u64().unwrap(), r["length"].as_u64().unwrap()))
        .collect();
    assert_eq!(js, pairs);
    // Numbers as the other commands take them: the gap in hex, the page
    // size with a suffix.
    let mut args = common("chv");
    args[6] = "0x3".into();
    args.extend(["--page-size".into(), "4K".into()]);
    let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let (ok, out, err) = dirty_ranges(&refs);
    assert!(ok, "{err}");
    assert_eq!(out, chv, "--merge-gap 0x3 --page-size 4K");
}

/// `spacekit dirty ranges BIG | head -1`: the reader goes away, and the
/// command ends quietly with the status a SIGPIPE death gives (141), as
/// `cat` does, not with an error message.
#[test]
fn an_early_closed_pipe_ends_quietly_with_141() {
    use std::io::Read;
    // Every 997th page dirty over 4 MiB of bitmap: about 34,000 lines.
    let mut words = vec![0u64; 4 << 17];
    for bit in (0..words.len() * 64).step_by(997) {
        words[bit / 64] |= 1 << (bit % 64);
    }
    let path = bitmap_file("pipe.bin", &words);
    let mut child = spacekit()
        .args(["dirty", "ranges"])
        .arg(&path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(141),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn dirty_ranges_rejects_bad_input() {
    let good = bitmap_file("good.bin", &[1, 2, 3]);
    let short = bitmap_file("short.bin", &[1, 2]);
    let odd = tmp("odd.bin");
    std::fs::write(&odd, [0u8; 12]).unwrap();
    let cases: Vec<(Vec<std::ffi::OsString>, &str)> = vec![
        (
            vec![good.clone().into(), "--or".into(), short.clone().into()],
            "same memory",
        ),
        (vec![odd.clone().into()], "64-bit words"),
        (
            vec![good.clone().into(), "--page-size".into(), "3000".into()],
            "power of two",
        ),
        (vec![tmp("missing.bin").into()], "cannot open"),
        (
            vec![
                good.clone().into(),
                "--base".into(),
                "0xffffffffffffffff".into(),
            ],
            "overflows",
        ),
    ];
    for (args, msg) in cases {
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let (ok, out, err) = dirty_ranges(&refs);
        assert!(!ok, "{args:?} succeeded");
        assert!(out.is_empty(), "{args:?} wrote output");
        assert!(err.contains(msg), "{args:?}: {err}");
    }
}

#[test]
fn quick_dirty_writes_the_documented_rows() {
    let rows = quick_rows("dirty");
    for density in ["0%", "0.1%", "1%", "5%", "clustered", "100%"] {
        for variant in ["before", "seed", "spacekit", "spacekit-mt"] {
            let r = rows
                .iter()
                .find(|r| r["case"] == "scan" && r["variant"] == variant && r["density"] == density)
                .unwrap_or_else(|| panic!("no scan/{variant}/{density} row"));
            assert_eq!(r["bytes"].as_u64().unwrap(), 1 << 20, "{r}");
            assert!(r["median_ns"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["gbps"].as_f64().unwrap() > 0.0, "{r}");
            let ranges = r["ranges"].as_u64().unwrap();
            match density {
                "0%" => assert_eq!(ranges, 0),
                "100%" => assert_eq!(ranges, 1),
                _ => assert!(ranges > 0, "{r}"),
            }
        }
    }
    assert!(
        rows.iter()
            .any(|r| r["case"] == "read" && r["variant"] == "limit" && r["threads"] == 1),
        "the membw rows of the same run"
    );
}

#[test]
fn unknown_benchmark_is_rejected() {
    let out = spacekit()
        .args(["bench", "no-such-bench"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn quick_zero_area_writes_the_documented_rows() {
    let rows = quick_rows("zero-area");
    let find = |case: &str, variant: &str| {
        rows.iter()
            .filter(|r| r["case"] == case && r["variant"] == variant)
            .collect::<Vec<_>>()
    };
    // Seed 000's table: both tests, five counts, four variants.
    for variant in ["before", "seed", "spacekit", "spacekit-scalar"] {
        let r = find("seed000", variant);
        assert_eq!(r.len(), 10, "{variant}");
        for row in r {
            assert!(row["test"] == "test1" || row["test"] == "test2");
            assert!(row["cnt"].as_u64().is_some());
            assert!(row["restarts"].as_u64().is_some());
            assert!(row["median_ns"].as_f64().unwrap() > 0.0);
        }
    }
    // The kernel loop restarts far more often than seed 000's on random data.
    let restarts = |variant: &str| {
        find("seed000", variant)
            .iter()
            .find(|r| r["test"] == "test1" && r["cnt"] == 128)
            .map(|r| r["restarts"].as_u64().unwrap())
            .unwrap()
    };
    assert!(restarts("before") > restarts("seed"));
    // Scan rows and the membw rows of the same run.
    for pattern in ["all-set", "all-clear"] {
        let r = find("scan", "spacekit");
        let row = r.iter().find(|r| r["pattern"] == pattern).unwrap();
        assert!(row["gbps"].as_f64().unwrap() > 0.0);
        assert!(row["bytes"].as_u64().unwrap() > 0);
        assert!(row["median_ns"].as_f64().unwrap() > 0.0);
    }
    let membw = find("read", "limit");
    assert!(!membw.is_empty());
    assert!(membw
        .iter()
        .all(|r| r["threads"].as_u64().is_some() && r["gbps"].as_f64().is_some()));
}

#[test]
fn quick_crc_writes_the_documented_rows() {
    let rows = quick_rows("crc");
    let find = |case: &str, variant: &str| -> Vec<&serde_json::Value> {
        rows.iter()
            .filter(|r| r["case"] == case && r["variant"] == variant)
            .collect()
    };
    for (case, variant) in [
        ("flip", "spacekit"),
        ("flip", "seed"),
        ("flip", "spacekit-scalar"),
        ("full", "before"),
        ("combine", "spacekit"),
        ("combine", "crc32c"),
        ("combine", "crc-fast"),
        ("bulk", "spacekit"),
        ("bulk", "crc32c"),
        ("bulk", "crc-fast"),
    ] {
        let found = find(case, variant);
        assert!(!found.is_empty(), "no {case}/{variant} row");
        for r in found {
            assert!(r["size"].as_u64().unwrap() > 0, "{r}");
            assert!(r["median_ns"].as_f64().unwrap() > 0.0, "{r}");
            if case == "bulk" {
                assert!(r["gbps"].as_f64().unwrap() > 0.0, "{r}");
            }
        }
    }
    // Seed 001's table sizes that quick mode keeps, for each flip variant.
    let sizes: Vec<u64> = find("flip", "spacekit")
        .iter()
        .map(|r| r["size"].as_u64().unwrap())
        .collect();
    assert!(sizes.contains(&1024) && sizes.contains(&65536), "{sizes:?}");
}

#[test]
fn several_benchmarks_write_an_array() {
    // A name given twice runs once.
    let v = bench_json("both.json", &["crc", "fork", "crc", "--quick"]);
    let arr = v.as_array().unwrap();
    let names: Vec<_> = arr.iter().map(|b| b["bench"].as_str().unwrap()).collect();
    assert_eq!(names, ["crc", "fork"]);
    // Each has its bars as printed.
    let bars = arr[1]["bars"].as_array().unwrap();
    assert!(!bars.is_empty());
    assert!(
        bars.iter()
            .all(|b| b["met"].is_boolean()
                && b["text"].as_str().is_some_and(|t| t.contains("(bar: ")))
    );
}

/// A place the JSON or report cannot go is refused before the run, and a
/// hex seed (as the report shows it) is taken.
#[test]
fn bench_output_places_are_checked_first() {
    let dir = tmp("bench-out-first");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("file"), b"x").unwrap();
    for (flag, path) in [
        ("--json", dir.join("missing/out.json")),
        ("--report", dir.join("file")),
    ] {
        let out = spacekit()
            .args(["bench", "fork", "--quick", flag])
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("cannot write"), "{err}");
        assert!(!err.contains("[fork]"), "the run started: {err}");
        assert!(out.stdout.is_empty(), "the run printed tables");
    }
    let out = spacekit()
        .args(["bench", "crc", "--quick", "--seed", "0x5EED0001", "--json"])
        .arg(dir.join("seed.json"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = spacekit()
        .args(["bench", "crc", "--quick", "--seed", "0xzz"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `bench NAME --quick --inject-mismatch --json FILE` and checks it
/// fails, says why, and writes no JSON.
fn assert_mismatch_fails(bench: &str) {
    let path = tmp(&format!("{bench}-mismatch.json"));
    std::fs::remove_file(&path).ok();
    let out = spacekit()
        .args(["bench", bench, "--quick", "--inject-mismatch", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("disagree"));
    assert!(!path.exists());
}

#[test]
fn a_disagreement_fails_and_writes_no_json() {
    assert_mismatch_fails("membw");
}

#[test]
fn quick_fork_writes_the_documented_rows() {
    let rows = quick_rows("fork");
    for vmas in [21u64, 421, 6421] {
        for variant in ["before", "btreemap", "rangemap", "spacekit", "limit"] {
            let r = rows
                .iter()
                .find(|r| r["case"] == "fork" && r["variant"] == variant && r["vmas"] == vmas)
                .unwrap_or_else(|| panic!("no fork/{variant}/{vmas} row"));
            assert_eq!(r["added"].as_u64().unwrap(), vmas - 21, "{r}");
            let ns = r["median_ns"].as_f64().unwrap();
            assert!(ns > 0.0, "{r}");
            let fps = r["forks_per_sec"].as_f64().unwrap();
            assert!((fps * ns / 1e9 - 1.0).abs() < 1e-6, "{r}");
        }
    }
    assert_eq!(rows.len(), 15);
}

#[test]
fn quick_rangetree_writes_the_documented_rows() {
    let rows = quick_rows("rangetree");
    for n in [1024u64, 65536] {
        for case in ["get", "find_gap"] {
            for variant in ["spacekit", "btreemap"] {
                let r = rows
                    .iter()
                    .find(|r| r["case"] == case && r["variant"] == variant && r["ranges"] == n)
                    .unwrap_or_else(|| panic!("no {case}/{variant}/{n} row"));
                assert!(r["median_ns"].as_f64().unwrap() > 0.0, "{r}");
                assert!(r["queries"].as_u64().unwrap() > 0, "{r}");
                if case == "find_gap" {
                    assert_eq!(r["size"].as_u64().unwrap(), 1000 * 4096, "{r}");
                }
            }
        }
    }
    assert_eq!(rows.len(), 8);
}

/// Runs `spacekit maps ARGS`; returns (success, stdout, stderr).
fn maps(args: &[&std::ffi::OsStr]) -> (bool, String, String) {
    let out = spacekit().arg("maps").args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A small process's maps, with a path containing spaces, an anonymous
/// mapping, a mapping filling most of the space under the stack, and
/// [vsyscall] above the mmap window.
const FIXTURE: &str = "\
00400000-00452000 r-xp 00000000 08:02 173521     /usr/bin/my prog (deleted)
555555554000-555555556000 r--p 00000000 08:01 1311       /usr/bin/my prog
555555556000-55555555a000 r-xp 00002000 08:01 1311       /usr/bin/my prog
55555555a000-55555555c000 rw-p 00006000 08:01 1311       /usr/bin/my prog
55555555c000-55555557d000 rw-p 00000000 00:00 0          [heap]
7ffff7d00000-7ffff7d28000 r--p 00000000 08:01 2222       /usr/lib/libc.so.6
7ffff7d28000-7ffff7ebd000 r-xp 00028000 08:01 2222       /usr/lib/libc.so.6
7ffff7ebd000-7ffff7f15000 r--p 001bd000 08:01 2222       /usr/lib/libc.so.6
7ffff7f15000-7ffff7f19000 r--p 00214000 08:01 2222       /usr/lib/libc.so.6
7ffff7f19000-7ffff7f1b000 rw-p 00218000 08:01 2222       /usr/lib/libc.so.6
7ffff7f1b000-7ffff7f28000 rw-p 00000000 00:00 0
7ffff7fb0000-7ffff7fb4000 r--p 00000000 00:00 0          [vvar]
7ffff7fb4000-7ffff7fb6000 r-xp 00000000 00:00 0          [vdso]
7ffff7fb6000-7ffff7fb8000 r--p 00000000 08:01 3333       /usr/lib/ld-linux-x86-64.so.2
7ffff7fb8000-7ffff7fe2000 r-xp 00002000 08:01 3333       /usr/lib/ld-linux-x86-64.so.2
7ffff7fe2000-7ffff7fed000 r--p 0002c000 08:01 3333       /usr/lib/ld-linux-x86-64.so.2
7ffff7fee000-7ffff7ff0000 r--p 00037000 08:01 3333       /usr/lib/ld-linux-x86-64.so.2
7ffff7ff0000-7ffff7ff2000 rw-p 00039000 08:01 3333       /usr/lib/ld-linux-x86-64.so.2
7ffff8000000-7ffffffd8000 rw-p 00000000 00:00 0
7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0          [stack]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0  [vsyscall]
";

/// `(start, end_exclusive, path)` of each line, parsed naively.
fn naive_parse(text: &str) -> Vec<(u64, u64, String)> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut it = l.splitn(6, ' ');
            let (s, e) = it.next().unwrap().split_once('-').unwrap();
            for _ in 0..4 {
                it.next().unwrap();
            }
            let path = it.next().unwrap_or("").trim_start().to_string();
            (
                u64::from_str_radix(s, 16).unwrap(),
                u64::from_str_radix(e, 16).unwrap(),
                path,
            )
        })
        .collect()
}

/// Brute force over a maps file: the mmap window, its gaps (inclusive, in
/// address order), and the highest page-aligned start of `size` bytes.
struct Naive {
    window: (u64, u64),
    gaps: Vec<(u64, u64)>,
    found: Option<u64>,
}

fn naive_layout(lines: &[(u64, u64, String)], size: u64) -> Naive {
    let low = 0x10000u64;
    let high = lines
        .iter()
        .find(|l| l.2 == "[stack]")
        .map_or(0x7fff_ffff_ffff, |l| l.0 - 1);
    let mut sorted: Vec<(u64, u64)> = lines.iter().map(|l| (l.0, l.1)).collect();
    sorted.sort();
    let mut gaps = Vec::new();
    let mut cur = low; // lowest address not yet known to be mapped
    for &(s, e) in &sorted {
        if s > cur && cur <= high {
            gaps.push((cur, (s - 1).min(high)));
        }
        cur = cur.max(e);
    }
    if cur <= high {
        gaps.push((cur, high));
    }
    let size = size.div_ceil(4096) * 4096;
    let found = gaps.iter().rev().find_map(|&(f, l)| {
        let top = l.checked_sub(size - 1)?;
        let start = top & !4095;
        (start >= f).then_some(start)
    });
    Naive {
        window: (low, high),
        gaps,
        found,
    }
}

#[test]
fn maps_on_a_fixture_matches_brute_force() {
    let path = tmp("maps.txt");
    std::fs::write(&path, FIXTURE).unwrap();
    let lines = naive_parse(FIXTURE);
    for find in ["100000", "200K", "0x40000", "1M", "0x20000000000000"] {
        let (ok, out, err) = maps(&[
            path.as_os_str(),
            "--json".as_ref(),
            "--gaps".as_ref(),
            "4".as_ref(),
            "--find".as_ref(),
            find.as_ref(),
            "--repeat".as_ref(),
            "3".as_ref(),
        ]);
        assert!(ok, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let size = match find {
            "100000" => 100000,
            "200K" => 200 << 10,
            "0x40000" => 0x40000,
            "1M" => 1 << 20,
            _ => 0x20000000000000,
        };
        let Naive {
            window,
            gaps,
            found,
        } = naive_layout(&lines, size);
        assert_eq!(v["mappings"].as_u64().unwrap(), lines.len() as u64);
        assert!(v["height"].as_u64().unwrap() >= 1);
        assert_eq!(v["window"]["first"].as_u64().unwrap(), window.0);
        assert_eq!(v["window"]["last"].as_u64().unwrap(), window.1);
        assert_eq!(v["gap_count"].as_u64().unwrap(), gaps.len() as u64);
        let mut largest = gaps.clone();
        largest.sort_by(|x, y| (y.1 - y.0).cmp(&(x.1 - x.0)).then(x.0.cmp(&y.0)));
        largest.truncate(4);
        let got: Vec<(u64, u64)> = v["gaps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| {
                let (f, l) = (g["first"].as_u64().unwrap(), g["last"].as_u64().unwrap());
                assert_eq!(g["size"].as_u64().unwrap(), l - f + 1);
                (f, l)
            })
            .collect();
        assert_eq!(got, largest, "--find {find}");
        let rounded = size.div_ceil(4096) * 4096;
        assert_eq!(v["find"]["size"].as_u64().unwrap(), rounded);
        assert_eq!(v["find"]["start"].as_u64(), found, "--find {find}");
        assert_eq!(v["find"]["end"].as_u64(), found.map(|s| s + rounded));
        // Ranges in address order, with paths as written (spaces kept).
        let ranges = v["ranges"].as_array().unwrap();
        let mut want: Vec<(u64, u64, String)> = lines.clone();
        want.sort();
        let got: Vec<(u64, u64, String)> = ranges
            .iter()
            .map(|r| {
                (
                    r["start"].as_u64().unwrap(),
                    r["end"].as_u64().unwrap(),
                    r["path"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        assert_eq!(got, want);
        assert!(v["dup"]["dup_map_ns"].as_f64().unwrap() > 0.0);
        assert_eq!(v["dup"]["runs"].as_u64().unwrap(), 3);
    }
    // Sanity of the brute force itself: 200K lands under [vvar], 100000 is
    // rounded up to 25 pages, and the huge size fits nowhere.
    assert_eq!(
        naive_layout(&lines, 200 << 10).found,
        Some(0x7fff_f7fb_0000 - 0x32000)
    );
    assert_eq!(
        naive_layout(&lines, 100000).found,
        Some(0x7fff_f7fb_0000 - 0x19000)
    );
    assert_eq!(naive_layout(&lines, 0x20000000000000).found, None);

    // Text output: a summary, the first and last few mappings, the gaps.
    let (ok, out, err) = maps(&[path.as_os_str(), "--repeat".as_ref(), "3".as_ref()]);
    assert!(ok, "{err}");
    assert!(out.contains("21 mappings"), "{out}");
    assert!(out.contains("--ranges lists all"), "{out}");
    assert!(out.contains("/usr/bin/my prog (deleted)"), "{out}");
    assert!(out.contains("[vsyscall]"), "{out}");
    assert!(out.contains("dup_map"), "{out}");
    let (ok, out, err) = maps(&[
        path.as_os_str(),
        "--ranges".as_ref(),
        "--repeat".as_ref(),
        "3".as_ref(),
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("[vdso]") && !out.contains("--ranges lists all"),
        "{out}"
    );
}

#[test]
fn maps_of_self_and_of_a_pid() {
    if !std::path::Path::new("/proc/self/maps").exists() {
        eprintln!("no /proc/self/maps: skipped");
        return;
    }
    let (ok, out, err) = maps(&[
        "self".as_ref(),
        "--json".as_ref(),
        "--repeat".as_ref(),
        "5".as_ref(),
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["source"], "/proc/self/maps");
    let n = v["mappings"].as_u64().unwrap();
    assert!(n >= 5, "{v}");
    assert_eq!(v["ranges"].as_array().unwrap().len() as u64, n);
    assert!(v["gap_count"].as_u64().unwrap() >= 1);
    assert!(
        v["find"]["start"].as_u64().is_some(),
        "1 MiB fits in a real address space"
    );
    assert!(v["dup"]["ratio"].as_f64().unwrap() > 0.0);

    // A process whose maps stay put: compare with our own read of them.
    let Ok(mut child) = Command::new("sleep").arg("30").spawn() else {
        return;
    };
    let pid = child.id().to_string();
    let file = format!("/proc/{pid}/maps");
    // Wait until exec and the dynamic loader are done (two equal reads).
    let mut text = String::new();
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let now = std::fs::read_to_string(&file).unwrap_or_default();
        if !now.is_empty() && now == text {
            break;
        }
        text = now;
    }
    let (ok, out, err) = maps(&[
        pid.as_ref(),
        "--json".as_ref(),
        "--repeat".as_ref(),
        "3".as_ref(),
    ]);
    child.kill().ok();
    child.wait().ok();
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["source"], file.as_str());
    let lines = naive_parse(&text);
    assert_eq!(v["mappings"].as_u64().unwrap(), lines.len() as u64);
    let Naive {
        window,
        gaps,
        found,
    } = naive_layout(&lines, 1 << 20);
    assert_eq!(v["window"]["last"].as_u64().unwrap(), window.1);
    assert_eq!(v["gap_count"].as_u64().unwrap(), gaps.len() as u64);
    assert_eq!(v["find"]["start"].as_u64(), found);
}

#[test]
fn maps_json_has_the_documented_shape() {
    let path = tmp("maps-shape.txt");
    std::fs::write(&path, FIXTURE).unwrap();
    let (ok, out, err) = maps(&[
        path.as_os_str(),
        "--json".as_ref(),
        "--repeat".as_ref(),
        "2".as_ref(),
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for key in [
        "source",
        "mappings",
        "height",
        "ranges",
        "window",
        "gap_count",
        "gaps",
        "find",
        "dup",
    ] {
        assert!(v.get(key).is_some(), "no {key}: {v}");
    }
    for key in [
        "line", "start", "end", "perms", "offset", "dev", "inode", "path",
    ] {
        assert!(v["ranges"][0].get(key).is_some(), "no ranges[].{key}: {v}");
    }
    let r = &v["ranges"][1];
    assert_eq!(r["line"], 2);
    assert_eq!(r["perms"], "r--p");
    assert_eq!(r["dev"], "08:01");
    assert_eq!(r["inode"], 1311);
    assert_eq!(
        v["ranges"][10]["path"],
        serde_json::Value::Null,
        "anonymous"
    );
    assert_eq!(
        v["gaps"].as_array().unwrap().len(),
        5,
        "--gaps defaults to 5"
    );
    assert_eq!(v["find"]["size"], 1 << 20, "--find defaults to 1M");
    assert_eq!(v["find"]["align"], 4096);
    for key in ["runs", "copies_per_run", "dup_map_ns", "insert_ns", "ratio"] {
        assert!(v["dup"][key].as_f64().is_some(), "no dup.{key}: {v}");
    }
}

#[test]
fn maps_rejects_bad_input() {
    let good = "1000000-1001000 r--p 00000000 00:00 0\n";
    let cases: Vec<(String, &str)> = vec![
        (
            format!("{good}2000000-2001000 r--p 00000000 00:00 0\nzz-10 r--p 00000000 00:00 0\n"),
            "line 3: bad address range \"zz-10\"",
        ),
        (
            format!("{good}{good}"),
            "line 2: 0x1000000-0x1001000 overlaps line 1",
        ),
        (
            format!("{good}3000000-3002000 r--p 0 00:00 0\n3001000-3003000 r--p 0 00:00 0\n"),
            "line 3: 0x3001000-0x3003000 overlaps line 2",
        ),
        (
            format!("{good}5000-4000 r--p 0 00:00 0\n"),
            "line 2: bad address range",
        ),
        (
            format!("{good}4000-5000 rwxq 0 00:00 0\n"),
            "line 2: bad permissions",
        ),
        (format!("{good}4000-5000 rwxp 0\n"), "line 2: expected"),
        (
            format!("{good}4000-5000 rwxp 0 00:00 -1\n"),
            "line 2: bad inode",
        ),
    ];
    for (k, (text, msg)) in cases.iter().enumerate() {
        let path = tmp(&format!("bad-maps-{k}.txt"));
        std::fs::write(&path, text).unwrap();
        let (ok, out, err) = maps(&[path.as_os_str(), "--repeat".as_ref(), "1".as_ref()]);
        assert!(!ok, "{text:?} succeeded");
        assert!(out.is_empty(), "{text:?} wrote {out}");
        assert!(err.contains(msg), "{text:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let (ok, _, err) = maps(&[tmp("no-such-maps.txt").as_os_str()]);
    assert!(!ok && err.contains("cannot open"), "{err}");
    let dir = tmp("a-directory");
    std::fs::create_dir_all(&dir).unwrap();
    let (ok, _, err) = maps(&[dir.as_os_str()]);
    assert!(!ok && err.contains("cannot read"), "{err}");
    let (ok, _, err) = maps(&["self".as_ref(), "--find".as_ref(), "12Q".as_ref()]);
    assert!(!ok && err.contains("12Q"), "{err}");
}

#[test]
fn maps_help_explains_the_window() {
    let out = spacekit().args(["maps", "--help"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for word in [
        "--json",
        "--ranges",
        "--gaps",
        "--find",
        "--repeat",
        "0x10000",
        "[stack]",
        "self",
        "find_gap_rev_aligned",
        "dup_map",
    ] {
        assert!(text.contains(word), "maps --help lacks {word}: {text}");
    }
}

/// `spacekit migrate`'s exit status rule, as its `--help` states it: every
/// bad argument is 2 and is refused before anything starts (no guest, no
/// receiver); 1 is a failure while running, such as a `--listen` path
/// that holds a file (left as it was). No `/dev/kvm` needed: nothing
/// reaches it.
#[test]
fn migrate_bad_arguments_exit_2() {
    let out = spacekit().args(["migrate", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Exit status"), "{help}");
    assert!(help.contains("2 bad arguments"), "{help}");
    let keep = tmp("keep-me.txt");
    std::fs::write(&keep, b"precious").unwrap();
    let keep_arg = keep.to_str().unwrap().to_string();
    let cases: Vec<Vec<&str>> = vec![
        vec!["--size", "3M"],
        vec!["--size", "0"],
        vec!["--size", "lots"],
        vec!["--vcpus", "0"],
        vec!["--vcpus", "64"],
        vec!["--mode", "ring:3"],
        vec!["--workload", "nope"],
        vec!["--rate", "-1"],
        vec!["--receive"],
        // Checked before the guest starts: not a number, and past what a
        // duration holds (which panicked after the guest had started).
        vec!["--timeout", "nan"],
        vec!["--timeout", "1e20"],
    ];
    for args in cases {
        let out = spacekit().arg("migrate").args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "migrate {args:?}: {err}");
        assert!(err.contains("error"), "migrate {args:?}: {err}");
    }
    let out = spacekit()
        .args([
            "migrate",
            "--receive",
            "--size",
            "2M",
            "--listen",
            &keep_arg,
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("not a socket"), "{err}");
    assert_eq!(std::fs::read(&keep).unwrap(), b"precious");
    std::fs::remove_file(&keep).ok();
    // `--bandwidth` holds one connection: `--connections 1` (the default,
    // given) goes with it, more is refused before a guest starts.
    let out = spacekit()
        .args([
            "migrate",
            "--size",
            "3M",
            "--connections",
            "1",
            "--bandwidth",
            "8M",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("memory size") && !err.contains("connections"),
        "{err}"
    );
    let out = spacekit()
        .args(["migrate", "--connections", "2", "--bandwidth", "8M"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--bandwidth holds one connection"), "{err}");
}

#[test]
fn quick_cma_writes_the_documented_rows() {
    let rows = quick_rows("cma");
    for start in ["aligned", "unaligned", "poisoned", "section"] {
        let mut variants = vec!["before", "spacekit"];
        if start == "aligned" {
            variants.push("buddy_system_allocator");
        }
        for variant in &variants {
            let r = rows
                .iter()
                .find(|r| r["case"] == "free" && r["variant"] == *variant && r["start"] == start)
                .unwrap_or_else(|| panic!("no free/{variant}/{start} row"));
            assert_eq!(r["pages"].as_u64().unwrap(), 16384, "{r}");
            assert!(r["median_ns"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["zone_pages"].as_u64().unwrap() >= 1 << 18, "{r}");
        }
        let found = rows.iter().filter(|r| r["start"] == start).count();
        assert_eq!(
            found,
            variants.len(),
            "{start}: only the crate's aligned row is extra"
        );
    }
    assert_eq!(rows.len(), 9);

    // A disagreement in this benchmark, too, fails without JSON.
    assert_mismatch_fails("cma");
}

#[test]
fn quick_ext4_fallocate_writes_the_documented_rows() {
    let rows = quick_rows("ext4-fallocate");
    // In-memory groups at 4 KiB and 64 KiB blocks (block size x 8 blocks).
    for bs in [4096u64, 65536] {
        for variant in ["before", "flip", "spacekit"] {
            let r = rows
                .iter()
                .find(|r| {
                    r["case"] == "fallocate"
                        && r["variant"] == variant
                        && r["block_size"] == bs
                        && r["source"] == "memory"
                })
                .unwrap_or_else(|| panic!("no fallocate/{variant}/{bs} row"));
            assert_eq!(r["blocks_per_group"].as_u64().unwrap(), bs * 8, "{r}");
            assert!(r["gbps"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["allocs"].as_u64().unwrap() > 0, "{r}");
        }
    }
    for variant in ["scan", "spacekit"] {
        let r = rows
            .iter()
            .find(|r| r["case"] == "first-fit" && r["variant"] == variant)
            .unwrap_or_else(|| panic!("no first-fit/{variant} row"));
        assert_eq!(r["bits"].as_u64().unwrap(), 524288);
        assert!(r["median_ns"].as_f64().unwrap() > 0.0);
    }
    // The whole-process race with debugfs (4 KiB blocks with --quick),
    // where e2fsprogs is installed.
    if e2fsprogs_installed() {
        for variant in ["debugfs", "spacekit"] {
            let r = rows
                .iter()
                .find(|r| r["case"] == "fallocate-process" && r["variant"] == variant)
                .unwrap_or_else(|| panic!("no fallocate-process/{variant} row"));
            assert_eq!(r["block_size"].as_u64().unwrap(), 4096, "{r}");
            assert_eq!(r["bytes"].as_u64().unwrap(), 6 << 30, "{r}");
            assert_eq!(r["run"], "process", "{r}");
            assert!(r["extents"].as_u64().unwrap() > 1, "{r}");
            assert!(r["median_ns"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
    assert_mismatch_fails("ext4-fallocate");
}

#[test]
fn quick_ext4_write_writes_the_documented_rows() {
    let rows = quick_rows("ext4-write");
    if rows.is_empty() {
        eprintln!("ext4-write skipped (e2fsprogs not installed)");
        return;
    }
    for (case, bytes) in [("large-write", 8u64 << 20), ("large-read", 8 << 20)] {
        for variant in ["debugfs", "spacekit", "limit"] {
            let r = rows
                .iter()
                .find(|r| r["case"] == case && r["variant"] == variant)
                .unwrap_or_else(|| panic!("no {case}/{variant} row"));
            assert_eq!(r["bytes"].as_u64().unwrap(), bytes, "{r}");
            assert_eq!(r["block_size"].as_u64().unwrap(), 4096, "{r}");
            // Run from the spacekit binary, every variant is a process.
            assert_eq!(r["run"], "process", "{r}");
            assert!(r["median_ns"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["gbps"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
    for variant in ["debugfs", "spacekit", "spacekit-api", "limit"] {
        let r = rows
            .iter()
            .find(|r| r["case"] == "small" && r["variant"] == variant)
            .unwrap_or_else(|| panic!("no small/{variant} row"));
        assert_eq!(r["files"].as_u64().unwrap(), 200, "{r}");
        assert_eq!(r["dirs"].as_u64().unwrap(), 7, "{r}");
        assert!(r["median_ns"].as_f64().unwrap() > 0.0, "{r}");
        // spacekit's populate is a process like debugfs; the per-file
        // calls run in-process.
        let run = if variant == "spacekit-api" {
            "in-process"
        } else {
            "process"
        };
        assert_eq!(r["run"], run, "{r}");
    }
    assert_eq!(rows.len(), 10);
    assert_mismatch_fails("ext4-write");
}

/// Whether debugfs runs here (on `PATH` or in sbin, where the benchmarks
/// look for it).
fn e2fsprogs_installed() -> bool {
    ["debugfs", "/sbin/debugfs", "/usr/sbin/debugfs"]
        .iter()
        .any(|p| {
            Command::new(p)
                .arg("-V")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

/// A 64 MiB, 4-group ext4 image made by mkfs.ext4, or `None` (with a
/// notice) when e2fsprogs is not installed.
fn ext4_image(name: &str) -> Option<PathBuf> {
    let path = tmp(name);
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(64 << 20).unwrap();
    drop(f);
    let out = Command::new("mkfs.ext4")
        .env("E2FSPROGS_FAKE_TIME", "1700000000")
        .args(["-F", "-q", "-b", "4096", "-g", "4096", "-O", "^has_journal"])
        .args(["-U", "6a5e1c3e-2b7a-4d4f-9c1e-0123456789ab"])
        .arg(&path)
        .output();
    match out {
        Ok(o) if o.status.success() => Some(path),
        _ => {
            eprintln!("mkfs.ext4 not available: skipping");
            None
        }
    }
}

fn e2fsck_exit(path: &std::path::Path) -> Option<i32> {
    Command::new("e2fsck")
        .arg("-fn")
        .arg(path)
        .output()
        .ok()?
        .status
        .code()
}

#[test]
fn ext4_commands_allocate_and_free_with_full_accounting() {
    let Some(img) = ext4_image("ext4-cli.img") else {
        return;
    };
    let run = |args: &[&str]| {
        spacekit()
            .arg("ext4")
            .args(args)
            .arg(&img)
            .output()
            .unwrap()
    };
    let out = run(&["info", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(info["group_count"], 4);
    assert_eq!(info["block_size"], 4096);
    let free0 = info["free_blocks"].as_u64().unwrap();
    assert_eq!(info["groups"].as_array().unwrap().len(), 4);
    assert!(run(&["verify"]).status.success());
    // Free extents: JSON, every group, sums to the free count.
    let out = run(&["free-extents", "--json"]);
    let fe: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sum: u64 = fe["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["free"].as_array().unwrap().clone())
        .map(|e| e[1].as_u64().unwrap() - e[0].as_u64().unwrap() + 1)
        .sum();
    assert_eq!(sum, free0);
    // Allocate 100 blocks aligned to 64 from block 5000.
    let out = spacekit()
        .args([
            "ext4", "alloc", "--blocks", "100", "--align", "64", "--goal", "5000", "--json",
        ])
        .arg(&img)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let a: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let start = a["start"].as_u64().unwrap();
    assert!(start >= 5000 && start.is_multiple_of(64), "{a}");
    assert_eq!(a["free_blocks"].as_u64().unwrap(), free0 - 100);
    assert!(run(&["verify"]).status.success());
    if let Some(code) = e2fsck_exit(&img) {
        assert_eq!(code, 4, "unreferenced blocks are a leak to e2fsck");
    }
    // Free them: the image is clean again; a second free is an error.
    let free = |s: u64| {
        spacekit()
            .args(["ext4", "free"])
            .arg(&img)
            .args([s.to_string(), "100".into()])
            .output()
            .unwrap()
    };
    assert!(free(start).status.success());
    if let Some(code) = e2fsck_exit(&img) {
        assert_eq!(code, 0);
    }
    let again = free(start);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already free"));
    assert!(run(&["verify"]).status.success());
    let _ = std::fs::remove_file(&img);
}

#[test]
fn ext4_rejects_a_file_that_is_not_ext4_and_reports_a_flipped_bit() {
    let junk = tmp("not-ext4.img");
    std::fs::write(&junk, vec![0x5au8; 1 << 16]).unwrap();
    let before = std::fs::read(&junk).unwrap();
    let out = spacekit()
        .args(["ext4", "info"])
        .arg(&junk)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("s_magic"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(&junk).unwrap(), before, "nothing written");
    let _ = std::fs::remove_file(&junk);

    let Some(img) = ext4_image("ext4-flip.img") else {
        return;
    };
    // Flip a bit of group 3's block bitmap behind spacekit's back.
    let info = spacekit()
        .args(["ext4", "info", "--json"])
        .arg(&img)
        .output()
        .unwrap();
    let info: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    let bitmap_block = info["groups"][3]["block_bitmap"].as_u64().unwrap();
    let mut bytes = std::fs::read(&img).unwrap();
    bytes[(bitmap_block * 4096 + 100) as usize] ^= 0x10;
    std::fs::write(&img, &bytes).unwrap();
    let out = spacekit()
        .args(["ext4", "verify", "--json"])
        .arg(&img)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks: Vec<&str> = v["mismatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["check"].as_str().unwrap())
        .collect();
    assert!(checks.contains(&"BlockBitmapChecksum"), "{v}");
    let _ = std::fs::remove_file(&img);
}

#[test]
fn ext4_writes_refuse_an_image_whose_descriptor_checksum_fails() {
    let Some(img) = ext4_image("ext4-bad-desc.img") else {
        return;
    };
    let out = spacekit()
        .args(["ext4", "fallocate"])
        .arg(&img)
        .args(["/f", "--size", "8192"])
        .output()
        .unwrap();
    assert!(out.status.success());
    // Group 0's descriptor checksum (4 KiB blocks: the table is block 1).
    let mut bytes = std::fs::read(&img).unwrap();
    bytes[4096 + 0x1E] ^= 0xFF;
    std::fs::write(&img, &bytes).unwrap();
    for args in [
        &["fallocate", "/f", "--size", "1M"][..],
        &["fallocate", "/g", "--size", "1M"],
        &["truncate", "/f", "--size", "10"],
        &["rm", "/f"],
        &["alloc", "--blocks", "8"],
        &["free", "100", "1"],
    ] {
        let out = spacekit()
            .arg("ext4")
            .arg(args[0])
            .arg(&img)
            .args(&args[1..])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("descriptor fails its checksum"),
            "{args:?}: {err}"
        );
        assert!(std::fs::read(&img).unwrap() == bytes, "{args:?} wrote");
    }
    let _ = std::fs::remove_file(&img);
}

/// An image with the `quota` feature: every write verb refuses it with one
/// line naming the feature, exit 1, the image byte-identical (its quota
/// files' usage would otherwise fall behind); reading verbs work.
#[test]
fn ext4_writes_refuse_a_quota_image_and_reads_work() {
    let path = tmp("ext4-quota.img");
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(32 << 20).unwrap();
    drop(f);
    let made = Command::new("mkfs.ext4")
        .args(["-F", "-q", "-b", "4096", "-O", "quota"])
        .arg(&path)
        .output();
    if !made.is_ok_and(|o| o.status.success()) {
        eprintln!("mkfs.ext4 not available: skipping");
        return;
    }
    let host = tmp("ext4-quota-src");
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(host.join("f"), b"bytes").unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let from = host.to_str().unwrap();
    for args in [
        &["mkdir", "/d"][..],
        &["write", "/w", "--from", "/etc/hostname"],
        &["fallocate", "/f", "--size", "8192"],
        &["touch", "/t"],
        &["populate", "--from", from],
    ] {
        let out = ext4_cmd(args[0], &path, &args[1..]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("quota"), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(std::fs::read(&path).unwrap() == bytes, "{args:?} wrote");
    }
    let out = ext4_cmd("ls", &path, &["/"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("lost+found"));
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir_all(&host);
}

/// `debugfs -R CMD IMAGE`'s standard output, or `None` without debugfs.
fn debugfs(img: &std::path::Path, cmd: &str) -> Option<String> {
    let out = Command::new("debugfs")
        .args(["-R", cmd])
        .arg(img)
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The number after `key` in debugfs's text.
fn debugfs_field(text: &str, key: &str) -> u64 {
    let i = text
        .find(key)
        .unwrap_or_else(|| panic!("no {key} in {text}"));
    text[i + key.len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// `spacekit ext4 CMD IMAGE ARGS...`.
fn ext4_cmd(cmd: &str, img: &std::path::Path, args: &[&str]) -> std::process::Output {
    spacekit()
        .args(["ext4", cmd])
        .arg(img)
        .args(args)
        .output()
        .unwrap()
}

/// Success, with standard output parsed as JSON.
fn ext4_json(cmd: &str, img: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = ext4_cmd(cmd, img, &all);
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{cmd} {args:?}: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Success, with standard output as text.
fn ext4_text(cmd: &str, img: &std::path::Path, args: &[&str]) -> String {
    let out = ext4_cmd(cmd, img, args);
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// debugfs's size and block count of PATH equal `size` and `blocks`, and
/// `e2fsck -fn` finds nothing to fix.
fn assert_debugfs_stat(img: &std::path::Path, path: &str, size: u64, blocks: u64, what: &str) {
    if let Some(text) = debugfs(img, &format!("stat {path}")) {
        assert_eq!(debugfs_field(&text, "Size: "), size, "{what}: {text}");
        assert_eq!(
            debugfs_field(&text, "Blockcount: "),
            blocks,
            "{what}: {text}"
        );
    }
    if let Some(code) = e2fsck_exit(img) {
        assert_eq!(code, 0, "{what}: e2fsck -fn");
    }
}

/// The text `stat`: `Size: N   Blockcount: M`, and the extent lines.
fn text_stat(text: &str) -> (u64, u64, usize) {
    let size = debugfs_field(text, "Size: ");
    let blocks = debugfs_field(text, "Blockcount: ");
    let leaves = text
        .lines()
        .filter(|l| l.contains('/') && l.contains(" - "))
        .count();
    (size, blocks, leaves)
}

#[test]
fn ext4_file_commands_agree_with_debugfs_and_keep_the_image_clean() {
    let Some(img) = ext4_image("ext4-files.img") else {
        return;
    };
    // fallocate --json creates /a: 1 MiB of unwritten blocks.
    let a = ext4_json("fallocate", &img, &["/a", "--size", "1M"]);
    assert_eq!(a["path"], "/a");
    assert_eq!(a["size"], 1 << 20);
    assert_eq!(a["blocks"], (1 << 20) / 512);
    let exts = a["extents"].as_array().unwrap();
    let mapped: u64 = exts
        .iter()
        .filter(|e| e["is_index"] == false)
        .map(|e| e["len"].as_u64().unwrap())
        .sum();
    assert_eq!(mapped, 256);
    assert!(exts.iter().all(|e| e["unwritten"] == true), "{a}");
    let ino_a = a["inode"].as_u64().unwrap();
    assert_debugfs_stat(&img, "/a", 1 << 20, 2048, "fallocate --json");
    // fallocate as text creates /b; --keep-size leaves the size at 0.
    let t = ext4_text("fallocate", &img, &["/b", "--size", "10M"]);
    let (size, blocks, leaves) = text_stat(&t);
    assert_eq!((size, blocks), (10 << 20, (10 << 20) / 512), "{t}");
    assert!(leaves >= 1, "{t}");
    assert!(t.contains("Uninit"), "{t}");
    assert_debugfs_stat(&img, "/b", 10 << 20, (10 << 20) / 512, "fallocate");
    let k = ext4_json("fallocate", &img, &["/k", "--size", "64K", "--keep-size"]);
    assert_eq!(
        (k["size"].as_u64(), k["blocks"].as_u64()),
        (Some(0), Some(128))
    );
    assert_debugfs_stat(&img, "/k", 0, 128, "fallocate --keep-size");
    // stat, both ways, says what fallocate said.
    let s = ext4_json("stat", &img, &["/a"]);
    assert_eq!(s["inode"], ino_a);
    assert_eq!(
        (s["size"].clone(), s["blocks"].clone()),
        (a["size"].clone(), a["blocks"].clone())
    );
    assert_eq!(s["extents"], a["extents"]);
    let t = ext4_text("stat", &img, &["/b"]);
    assert_eq!(text_stat(&t), (size, blocks, leaves));
    assert!(t.starts_with("Inode: "), "{t}");
    // ls, both ways: the root's entries with their inodes and sizes.
    let l = ext4_json("ls", &img, &[]);
    assert_eq!(l["dir"], "/");
    let entries = l["entries"].as_array().unwrap();
    let entry = |name: &str| {
        entries
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {l}"))
    };
    for n in [".", "..", "lost+found", "a", "b", "k"] {
        entry(n);
    }
    assert_eq!(entry("a")["inode"], ino_a);
    assert_eq!(entry("a")["size"], 1 << 20);
    assert_eq!(entry("b")["size"], 10 << 20);
    assert_eq!(entry("..")["inode"], 2);
    let t = ext4_text("ls", &img, &["/"]);
    let line = t
        .lines()
        .find(|l| l.ends_with(" b"))
        .unwrap_or_else(|| panic!("no b in {t}"));
    assert!(
        line.contains(" -0644 ") && line.contains(" 10485760 "),
        "{line}"
    );
    if let Some(d) = debugfs(&img, "ls -l /") {
        let names: Vec<&str> = d
            .lines()
            .filter_map(|l| l.split_whitespace().last())
            .collect();
        for n in ["a", "b", "k", "lost+found"] {
            assert!(names.contains(&n), "debugfs ls: {d}");
        }
    }
    let t = ext4_text("ls", &img, &["/lost+found"]);
    assert_eq!(t.lines().count(), 2, "{t}");
    // truncate, both ways: shrinking frees the blocks past the end.
    let tr = ext4_json("truncate", &img, &["/b", "--size", "4K"]);
    assert_eq!(
        (tr["size"].as_u64(), tr["blocks"].as_u64()),
        (Some(4096), Some(8))
    );
    assert_debugfs_stat(&img, "/b", 4096, 8, "truncate --json");
    let t = ext4_text("truncate", &img, &["/a", "--size", "6000"]);
    assert_eq!(text_stat(&t), (6000, 16, 1), "{t}");
    assert_debugfs_stat(&img, "/a", 6000, 16, "truncate");
    // Growing only sets the size (a sparse tail).
    let tr = ext4_json("truncate", &img, &["/b", "--size", "1G"]);
    assert_eq!(
        (tr["size"].as_u64(), tr["blocks"].as_u64()),
        (Some(1 << 30), Some(8))
    );
    assert_debugfs_stat(&img, "/b", 1 << 30, 8, "truncate up");
    // rm, both ways: gone from ls and from debugfs, blocks back.
    let before = ext4_json("info", &img, &[])["free_blocks"]
        .as_u64()
        .unwrap();
    let r = ext4_json("rm", &img, &["/a"]);
    assert_eq!(r["removed"], "/a");
    assert_eq!(r["free_blocks"].as_u64().unwrap(), before + 2);
    let out = ext4_cmd("rm", &img, &["/b"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("removed /b"));
    let l = ext4_json("ls", &img, &[]);
    let names: Vec<&str> = l["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(
        !names.contains(&"a") && !names.contains(&"b") && names.contains(&"k"),
        "{l}"
    );
    if let Some(d) = debugfs(&img, "ls -l /") {
        let names: Vec<&str> = d
            .lines()
            .filter_map(|l| l.split_whitespace().last())
            .collect();
        assert!(!names.contains(&"a") && !names.contains(&"b"), "{d}");
        assert!(names.contains(&"k"), "{d}");
    }
    if let Some(code) = e2fsck_exit(&img) {
        assert_eq!(code, 0, "after rm");
    }
    assert!(ext4_cmd("verify", &img, &[]).status.success());
    let _ = std::fs::remove_file(&img);
}

#[test]
fn ext4_file_command_errors_exit_1_with_one_line_and_change_nothing() {
    let Some(img) = ext4_image("ext4-file-errors.img") else {
        return;
    };
    ext4_json("fallocate", &img, &["/f", "--size", "8K"]);
    let bytes = std::fs::read(&img).unwrap();
    let cases: &[(&str, &[&str], &str)] = &[
        ("rm", &["/nope"], "no such file"),
        ("stat", &["/nope"], "no such file"),
        ("stat", &["/nope", "--json"], "no such file"),
        ("stat", &["nope"], "absolute"),
        ("stat", &["/f/x"], "not a directory"),
        ("ls", &["/nope"], "no such file"),
        ("ls", &["/f"], "not a directory"),
        ("rm", &["/lost+found"], "not a regular file"),
        ("rm", &["/nope/x"], "no such file"),
        ("truncate", &["/nope", "--size", "1K"], "no such file"),
        ("fallocate", &["/f", "--size", "12Q"], "unknown unit"),
        ("fallocate", &["/g", "--size", "lots"], "not a size"),
        ("truncate", &["/f", "--size=-1"], "not a size"),
        ("truncate", &["/f", "--size", "99999999999T"], "too large"),
        ("truncate", &["/f", "--size", "100T"], "largest file size"),
        (
            "fallocate",
            &["/f", "--size", "1T"],
            "not enough free space",
        ),
        (
            "fallocate",
            &["/lost+found", "--size", "1K"],
            "not a regular file",
        ),
    ];
    for (cmd, args, want) in cases {
        let out = ext4_cmd(cmd, &img, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cmd} {args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{cmd} {args:?}: {err}");
        assert!(err.contains(want), "{cmd} {args:?}: {err}");
        assert!(out.stdout.is_empty(), "{cmd} {args:?}");
        assert!(
            std::fs::read(&img).unwrap() == bytes,
            "{cmd} {args:?} changed the image"
        );
    }
    if let Some(code) = e2fsck_exit(&img) {
        assert_eq!(code, 0);
    }
    let _ = std::fs::remove_file(&img);
}

/// `write` (from a sparse host file, and from standard input), `cat` and
/// `get` move bytes in and out unchanged: debugfs dumps what `write` put
/// in, `get` keeps holes, an existing path is refused without a change.
#[test]
fn ext4_write_cat_get_move_bytes_unchanged() {
    let Some(img) = ext4_image("ext4-write.img") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("spacekit-cli-write-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A sparse host file: 8 KiB of data at 1 MiB, 4 MiB long.
    let src = dir.join("sparse.src");
    let mut want = vec![0u8; 4 << 20];
    for (i, b) in want[1 << 20..(1 << 20) + 8192].iter_mut().enumerate() {
        *b = (i * 7 + 1) as u8;
    }
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::create(&src).unwrap();
        f.set_len(4 << 20).unwrap();
        f.write_all_at(&want[1 << 20..(1 << 20) + 8192], 1 << 20)
            .unwrap();
    }
    let w = ext4_json(
        "write",
        &img,
        &["/s", "--from", src.to_str().unwrap(), "--mode", "600"],
    );
    assert_eq!(
        (w["path"].as_str(), w["bytes"].as_u64()),
        (Some("/s"), Some(8192))
    );
    let st = ext4_json("stat", &img, &["/s"]);
    assert_eq!(st["size"], 4 << 20);
    assert_eq!(st["blocks"], 16, "only the data's blocks: {st}");
    assert_eq!(st["mode"].as_u64().unwrap() & 0o7777, 0o600);
    // From standard input.
    let mut child = spacekit()
        .args(["ext4", "write"])
        .arg(&img)
        .arg("/in")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"line one\nline two\n").unwrap();
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    assert_eq!(ext4_text("cat", &img, &["/in"]), "line one\nline two\n");
    // debugfs reads the same bytes.
    if debugfs(&img, "stat /s").is_some() {
        let dumped = dir.join("dumped");
        debugfs(&img, &format!("dump /s {}", dumped.display()));
        assert!(std::fs::read(&dumped).unwrap() == want, "debugfs dump /s");
    }
    // get: the same bytes, the holes kept.
    let out = dir.join("got");
    ext4_text("get", &img, &["/s", out.to_str().unwrap()]);
    assert!(std::fs::read(&out).unwrap() == want, "get /s");
    use std::os::unix::fs::MetadataExt;
    assert!(
        std::fs::metadata(&out).unwrap().blocks() * 512 < 1 << 20,
        "get kept no holes"
    );
    // An existing path: refused, the image unchanged.
    let before = std::fs::read(&img).unwrap();
    let o = ext4_cmd("write", &img, &["/s", "--from", src.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("already exists"));
    assert!(
        std::fs::read(&img).unwrap() == before,
        "a refused write changed the image"
    );
    // From a pipe named as a file (`--from /dev/stdin`): no length to go
    // by, read to its end.
    let piped: Vec<u8> = (0..300_000u32).map(|i| (i * 13 + 5) as u8).collect();
    let mut child = spacekit()
        .args(["ext4", "write"])
        .arg(&img)
        .args(["/piped", "--from", "/dev/stdin", "--json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let bytes = piped.clone();
    let feeder = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &bytes));
    let o = child.wait_with_output().unwrap();
    feeder.join().unwrap().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let w: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(w["bytes"].as_u64(), Some(piped.len() as u64));
    assert!(
        ext4_cmd("cat", &img, &["/piped"]).stdout == piped,
        "cat /piped"
    );
    // `get --json` says what it wrote; `cat --json` is refused (its
    // output is the file's bytes).
    let g = ext4_json("get", &img, &["/piped", out.to_str().unwrap()]);
    assert_eq!(g["bytes"].as_u64(), Some(piped.len() as u64));
    assert!(std::fs::read(&out).unwrap() == piped, "get /piped");
    let o = ext4_cmd("cat", &img, &["/piped", "--json"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty());
    // Through a symlink: the link stays, its target gets the bytes (as
    // `cp` writes through one).
    let target = dir.join("target");
    std::fs::write(&target, b"before").unwrap();
    let link = dir.join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    ext4_text("get", &img, &["/piped", link.to_str().unwrap()]);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(
        std::fs::read(&target).unwrap() == piped,
        "get through a symlink"
    );
    // Through a symlink onto a longer file: cut first, so the holes of a
    // sparse file read as zeros, not the target's old bytes.
    std::fs::write(&target, vec![0xFFu8; 5 << 20]).unwrap();
    ext4_text("get", &img, &["/s", link.to_str().unwrap()]);
    assert!(
        std::fs::read(&target).unwrap() == want,
        "get /s through a symlink"
    );
    let dangling = dir.join("dangling");
    std::os::unix::fs::symlink(dir.join("nowhere"), &dangling).unwrap();
    let o = ext4_cmd("get", &img, &["/s", dangling.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        !dir.join("nowhere").exists(),
        "wrote through a dangling symlink"
    );
    // A `get` of what is no regular file leaves the host file alone.
    std::fs::write(&out, b"precious").unwrap();
    let o = ext4_cmd("get", &img, &["/lost+found", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(std::fs::read(&out).unwrap(), b"precious");
    let strays: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("sk-tmp"))
        .collect();
    assert!(strays.is_empty(), "temporary files left: {strays:?}");
    if let Some(code) = e2fsck_exit(&img) {
        assert_eq!(code, 0, "e2fsck -fn after write");
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&img);
}

/// `readlink` prints a target's bytes as they are, UTF-8 or not (here
/// one debugfs made), and with `--json` the text and, for bytes that
/// are not UTF-8, the bytes in hex; `ls --json` gives names (and `-l`
/// targets) the same way.
#[test]
fn ext4_readlink_keeps_the_targets_bytes() {
    let Some(img) = ext4_image("ext4-readlink.img") else {
        return;
    };
    use std::os::unix::ffi::OsStrExt;
    let target: &[u8] = b"caf\xe9/\xff\xfe";
    let mut cmd = b"symlink /bad ".to_vec();
    cmd.extend_from_slice(target);
    let o = Command::new("debugfs")
        .arg("-w")
        .arg("-R")
        .arg(std::ffi::OsStr::from_bytes(&cmd))
        .arg(&img)
        .output()
        .unwrap();
    assert!(o.status.success());
    let o = ext4_cmd("readlink", &img, &["/bad"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.stdout, [target, b"\n"].concat());
    let j = ext4_json("readlink", &img, &["/bad"]);
    assert_eq!(j["target_hex"].as_str(), Some("636166e92ffffe"));
    assert_eq!(
        j["target"].as_str(),
        Some(String::from_utf8_lossy(target).as_ref())
    );
    // A name that is not UTF-8: `ls --json` and `ls -l --json` give its
    // bytes in hex too.
    let o = Command::new("debugfs")
        .arg("-w")
        .arg("-R")
        .arg(std::ffi::OsStr::from_bytes(b"symlink /n\xff t"))
        .arg(&img)
        .output()
        .unwrap();
    assert!(o.status.success());
    for long in [false, true] {
        let args: &[&str] = if long { &["/", "-l"] } else { &["/"] };
        let j = ext4_json("ls", &img, args);
        let e = j["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name_hex"].as_str() == Some("6eff"))
            .unwrap_or_else(|| panic!("long {long}: no entry named n\\xff: {j}"));
        assert_eq!(e["name"].as_str(), Some("n\u{fffd}"));
        if long {
            assert_eq!(e["target"].as_str(), Some("t"));
            let bad = j["entries"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["name"].as_str() == Some("bad"))
                .unwrap();
            assert_eq!(bad["target_hex"].as_str(), Some("636166e92ffffe"));
        }
    }
    ext4_text("ln", &img, &["-s", "plain/target", "/good"]);
    let j = ext4_json("readlink", &img, &["/good"]);
    assert_eq!(j["target"].as_str(), Some("plain/target"));
    assert!(j.get("target_hex").is_none(), "{j}");
    let _ = std::fs::remove_file(&img);
}

/// The verbs over names and inodes, as a user chains them: each exits 0,
/// debugfs sees the result, e2fsck finds nothing to fix, a refused one
/// exits 1 and changes nothing.
#[test]
fn ext4_name_and_inode_verbs_agree_with_debugfs() {
    let Some(img) = ext4_image("ext4-verbs.img") else {
        return;
    };
    let ok = |args: &[&str]| {
        let out = ext4_cmd(args[0], &img, &args[1..]);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    ok(&["mkdir", "/etc"]);
    ok(&["mkdir", "/etc/sub", "--mode", "700"]);
    ok(&["touch", "/etc/hosts", "--time", "1700000000.25"]);
    ok(&["ln", "/etc/hosts", "/hosts2"]);
    ok(&["ln", "-s", "../etc/hosts", "/etc/sub/link"]);
    ok(&["mknod", "/null", "c", "1", "3", "--mode", "666"]);
    ok(&["mknod", "/fifo", "p"]);
    ok(&["chmod", "/etc/hosts", "600"]);
    ok(&["chown", "/etc/hosts", "1000:2000"]);
    ok(&["xattr", "/etc/hosts", "set", "user.comment", "hello"]);
    // Without --json a change is reported to a person, not as JSON.
    let o = ext4_cmd("chmod", &img, &["/etc/hosts", "600"]);
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && said.contains("/etc/hosts: ") && !said.contains('{'),
        "{said}"
    );
    // Each verb's line names the path and what was done first.
    let o = ext4_cmd("mkdir", &img, &["/made"]);
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && said.contains(": /made: made, inode ") && !said.contains("null"),
        "{said}"
    );
    let o = ext4_cmd("rmdir", &img, &["/made"]);
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(said.trim_end().ends_with(": /made: removed"), "{said}");
    ok(&["mv", "/etc/sub", "/sub2"]);
    assert_eq!(
        ext4_text("readlink", &img, &["/sub2/link"]),
        "../etc/hosts\n"
    );
    assert_eq!(
        ext4_text("xattr", &img, &["/etc/hosts", "get", "user.comment"]),
        "user.comment=0x68656c6c6f\n"
    );
    let before = std::fs::read(&img).unwrap();
    let o = ext4_cmd("rmdir", &img, &["/etc"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not empty"));
    assert!(
        std::fs::read(&img).unwrap() == before,
        "a refused rmdir changed the image"
    );
    if let Some(t) = debugfs(&img, "stat /etc/hosts") {
        assert!(
            t.contains("Type: regular") && t.contains("Mode:  0600"),
            "{t}"
        );
        assert!(
            t.contains("User:  1000") && t.contains("Group:  2000") && t.contains("Links: 2"),
            "{t}"
        );
        assert!(t.contains("mtime: 0x6553f100:3b9aca00"), "{t}");
    }
    if let Some(t) = debugfs(&img, "stat /null") {
        assert!(
            t.contains("Type: character special") && t.contains("Device major/minor number: 01:03"),
            "{t}"
        );
    }
    if let Some(t) = debugfs(&img, "ls -l /sub2") {
        assert!(t.contains("link"), "{t}");
    }
    if let Some(code) = e2fsck_exit(&img) {
        assert_eq!(code, 0, "e2fsck -fn after the verbs");
    }
    let _ = std::fs::remove_file(&img);
}

/// Ctrl-C during `bench ext4-populate`: the run's scratch directories
/// (images, the tree, the tmpfs copies) and any loop mount under them go
/// with it; exit status 130.
#[test]
fn an_interrupted_bench_leaves_no_scratch_or_mount() {
    if !e2fsprogs_installed() {
        println!(
            "skipping an_interrupted_bench_leaves_no_scratch_or_mount: e2fsprogs not installed"
        );
        return;
    }
    let child = spacekit()
        .args(["bench", "ext4-populate", "--quick"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let tag = format!("-{}-", child.id());
    let ours = move || -> Vec<String> {
        let mut found: Vec<String> = [std::env::temp_dir(), "/dev/shm".into()]
            .iter()
            .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("spacekit-bench-") && n.contains(&tag))
            .collect();
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        found.extend(
            mounts
                .lines()
                .filter(|l| l.contains("spacekit-bench-") && l.contains(&tag))
                .map(String::from),
        );
        found
    };
    let mut child = child;
    let t = std::time::Instant::now();
    while ours().is_empty() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the bench ended before it made its scratch"
        );
        assert!(t.elapsed().as_secs() < 60, "no scratch directory");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    if status.code() == Some(0) {
        println!("the bench finished before the interrupt: nothing to check");
        return;
    }
    assert_eq!(status.code(), Some(130));
    assert!(ours().is_empty(), "left: {:?}", ours());
}

/// `--json` onto a directory fails and leaves no temporary file; through
/// a symlink it writes the link's target and keeps the link.
#[test]
fn bench_json_fails_cleanly_and_writes_through_a_symlink() {
    let dir = tmp("bench-json-out");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("adir")).unwrap();
    let out = spacekit()
        .args(["bench", "fork", "--quick", "--json"])
        .arg(dir.join("adir"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left, ["adir"], "left: {left:?}");
    std::fs::write(dir.join("real.json"), b"old").unwrap();
    std::os::unix::fs::symlink("real.json", dir.join("link.json")).unwrap();
    let out = spacekit()
        .args(["bench", "fork", "--quick", "--json"])
        .arg(dir.join("link.json"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::symlink_metadata(dir.join("link.json"))
        .unwrap()
        .file_type()
        .is_symlink());
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("real.json")).unwrap()).unwrap();
    assert_eq!(v["bench"], "fork");
    let _ = std::fs::remove_dir_all(&dir);
}

/// One writer at a time: while `ext4 write` holds the image (reading its
/// bytes from a pipe), a second writer and a reader are refused as busy and
/// change nothing; afterwards both go ahead. A loop device attached to the
/// image refuses writers too.
#[test]
fn a_busy_image_is_refused_not_shared() {
    use std::io::Write;
    let Some(img) = ext4_image("busy.img") else {
        return;
    };
    let mut writer = spacekit()
        .args(["ext4", "write"])
        .arg(&img)
        .arg("/f")
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = writer.stdin.take().unwrap();
    pipe.write_all(b"first half ").unwrap();
    // Wait until the writer has the image open (its descriptors name it).
    let img_abs = std::fs::canonicalize(&img).unwrap();
    let fds = format!("/proc/{}/fd", writer.id());
    let start = std::time::Instant::now();
    while !std::fs::read_dir(&fds)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == img_abs))
    {
        assert!(
            start.elapsed().as_secs() < 30,
            "the writer never opened the image"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let o = ext4_cmd("mkdir", &img, &["/d"]);
    let refused = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(
        o.status.code(),
        Some(1),
        "a second writer went ahead: {refused}"
    );
    assert!(refused.contains("another program has it open"), "{refused}");
    let o = ext4_cmd("ls", &img, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("busy"));
    pipe.write_all(b"second half").unwrap();
    drop(pipe);
    assert!(writer.wait().unwrap().success());
    let o = ext4_cmd("cat", &img, &["/f"]);
    assert_eq!(o.stdout, b"first half second half");
    let o = ext4_cmd("mkdir", &img, &["/d"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(e2fsck_exit(&img), Some(0));

    // A loop device attached to the image: writers are refused (the kernel
    // may have it mounted), readers are not.
    let attach = Command::new("losetup")
        .args(["-f", "--show"])
        .arg(&img)
        .output();
    let Some(dev) = attach
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    else {
        println!("losetup not allowed here: skipping the loop-device half");
        return;
    };
    let before = std::fs::read(&img).unwrap();
    let o = ext4_cmd("mkdir", &img, &["/e"]);
    let ls = ext4_cmd("ls", &img, &[]);
    let _ = Command::new("losetup").args(["-d", &dev]).status();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("{dev} is attached")), "{err}");
    assert!(ls.status.success());
    assert_eq!(
        std::fs::read(&img).unwrap(),
        before,
        "the refused write changed the image"
    );
    let _ = std::fs::remove_file(&img);
}

/// A bitmap from a pipe (`/dev/stdin`, `<(…)`) is read to its end, not
/// taken as empty from the length a pipe reports (0).
#[test]
fn dirty_ranges_reads_a_pipe_whole() {
    use std::io::Write;
    let words = [1u64 | 1 << 63, 0, 0b110];
    let path = bitmap_file("piped.bin", &words);
    let from_file = spacekit()
        .args(["dirty", "ranges"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(from_file.status.success());
    let mut child = spacekit()
        .args(["dirty", "ranges", "/dev/stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    child.stdin.take().unwrap().write_all(&bytes).unwrap();
    let piped = child.wait_with_output().unwrap();
    assert!(
        piped.status.success(),
        "{}",
        String::from_utf8_lossy(&piped.stderr)
    );
    assert!(!piped.stdout.is_empty());
    assert_eq!(piped.stdout, from_file.stdout);
}

/// `xattr set` takes `0x` and an even number of hex digits, or quoted text;
/// odd or non-hex digits are refused with nothing set (the last digit was
/// dropped, or the rest ignored, and the command said it set the value).
#[test]
fn xattr_hex_values_are_whole_or_refused() {
    use std::io::Write;
    let Some(img) = ext4_image("xhex.img") else {
        return;
    };
    let mut w = spacekit()
        .args(["ext4", "write"])
        .arg(&img)
        .arg("/b")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    w.stdin.take().unwrap().write_all(b"x").unwrap();
    assert!(w.wait().unwrap().success());
    let get = || {
        ext4_text("xattr", &img, &["/b", "get", "user.t"])
            .trim()
            .to_string()
    };
    let set = |v: &str| ext4_cmd("xattr", &img, &["/b", "set", "user.t", v]);
    assert!(set("0x4142").status.success());
    assert_eq!(get(), "user.t=0x4142");
    for bad in ["0xabc", "0x1", "0x41z", "0x+1", "0xé"] {
        let o = set(bad);
        assert_eq!(o.status.code(), Some(1), "{bad}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("even number of hex digits"));
        assert_eq!(get(), "user.t=0x4142", "{bad} changed the value");
    }
    assert!(set("\"0xygen\"").status.success());
    assert_eq!(get(), "user.t=0x30787967656e");
    let _ = std::fs::remove_file(&img);
}

/// Small refusals and a listing as the kernel gives it: `chown` to
/// `(uid_t)-1` (chown(2)'s "leave as it is") and `truncate --keep-size`
/// (fallocate's flag) are refused with nothing changed, and `xattr list`
/// leaves out inline data's `system.data`, as listxattr does.
#[test]
fn chown_minus_one_keep_size_and_system_data() {
    let Some(img) = ext4_image("smallref.img") else {
        return;
    };
    let run = |args: &[&str]| ext4_cmd(args[0], &img, &args[1..]);
    assert!(run(&["mkdir", "/d"]).status.success());
    let before = std::fs::read(&img).unwrap();
    for args in [
        &["chown", "/d", "4294967295:0"][..],
        &["chown", "/d", "0:4294967295"][..],
        &["truncate", "/d", "--size", "0", "--keep-size"][..],
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert_eq!(
            std::fs::read(&img).unwrap(),
            before,
            "{args:?} changed the image"
        );
    }
    let _ = std::fs::remove_file(&img);
    // An inline-data file debugfs wrote.
    let il = tmp("inline.img");
    let f = std::fs::File::create(&il).unwrap();
    f.set_len(32 << 20).unwrap();
    drop(f);
    let src = tmp("inline-src.txt");
    std::fs::write(&src, b"small").unwrap();
    let made = Command::new("mkfs.ext4")
        .args(["-F", "-q", "-O", "inline_data"])
        .arg(&il)
        .status();
    let wrote = Command::new("debugfs")
        .args(["-w", "-R", &format!("write {} tiny", src.display())])
        .arg(&il)
        .output();
    if !made.is_ok_and(|s| s.success()) || !wrote.is_ok_and(|o| o.status.success()) {
        println!("mkfs.ext4 or debugfs not available: skipping the inline-data half");
        return;
    }
    let o = spacekit()
        .args(["ext4", "xattr"])
        .arg(&il)
        .args(["/tiny", "list"])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(!String::from_utf8_lossy(&o.stdout).contains("system.data"));
    let o = spacekit()
        .args(["ext4", "cat"])
        .arg(&il)
        .arg("/tiny")
        .output()
        .unwrap();
    assert_eq!(o.stdout, b"small");
    let _ = std::fs::remove_file(&il);
}

/// A message that cannot be written to standard error (`2>/dev/full`) is
/// dropped: the command's status is its own (0 for a change made, 1 for a
/// refusal), not a panic's 101.
#[test]
fn an_unwritable_stderr_does_not_change_the_status() {
    let Some(img) = ext4_image("fullerr.img") else {
        return;
    };
    let run = || {
        spacekit()
            .args(["ext4", "mkdir"])
            .arg(&img)
            .arg("/x")
            .stderr(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open("/dev/full")
                    .unwrap(),
            )
            .status()
            .unwrap()
    };
    assert_eq!(run().code(), Some(0), "the mkdir");
    assert_eq!(run().code(), Some(1), "the second mkdir (exists)");
    let o = spacekit().args(["ext4", "ls"]).arg(&img).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains(" x"));
    let _ = std::fs::remove_file(&img);
}
