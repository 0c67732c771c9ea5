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
    for word in ["membw", "zero-area", "crc", "--quick", "--full", "--json"] {
        assert!(text.contains(word), "bench --help lacks {word}: {text}");
    }
    assert!(!text.contains("inject"), "the test hook stays hidden");
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
