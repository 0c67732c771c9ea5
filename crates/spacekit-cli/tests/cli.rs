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

#[test]
fn help_explains_every_subcommand() {
    let out = spacekit().arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("bench"), "{text}");

    let out = spacekit().args(["bench", "--help"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for word in [
        "membw",
        "zero-area",
        "crc",
        "dirty",
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
    use spacekit::dirty::MemoryRangeTable;
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
    let want = MemoryRangeTable::from_bitmaps_or(&a, &b, 4096, base, 3).unwrap();
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
    let v = bench_json("dirty.json", &["dirty", "--quick"]);
    assert_eq!(v["bench"], "dirty");
    let rows = v["rows"].as_array().unwrap();
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
    let v = bench_json("zero-area.json", &["zero-area", "--quick"]);
    assert_eq!(v["bench"], "zero-area");
    let rows = v["rows"].as_array().unwrap();
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
    let v = bench_json("crc.json", &["crc", "--quick"]);
    assert_eq!(v["bench"], "crc");
    let rows = v["rows"].as_array().unwrap();
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
    let v = bench_json("both.json", &["membw", "membw", "--quick"]);
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 2);
    assert!(arr.iter().all(|b| b["bench"] == "membw"));
}

#[test]
fn a_disagreement_fails_and_writes_no_json() {
    let path = tmp("mismatch.json");
    std::fs::remove_file(&path).ok();
    let out = spacekit()
        .args(["bench", "membw", "--quick", "--inject-mismatch", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("disagree"));
    assert!(!path.exists());
}
