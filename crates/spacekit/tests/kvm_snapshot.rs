//! A running KVM guest's memory to a full snapshot and three diff
//! snapshots; merged, they equal the guest's memory at the last diff (page
//! hashes), and the full snapshot alone does not. Skipped, with one line,
//! where `/dev/kvm` cannot run a VM.
#![cfg(all(feature = "kvm", target_os = "linux", target_arch = "x86_64"))]

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use spacekit::kvm::snapshot::{differing_pages, restore, Snapshotter};
use spacekit::kvm::{DirtyMode, Guest, GuestConfig, Workload};

fn kvm_or_skip(test: &str) -> bool {
    match spacekit::kvm::available() {
        Ok(()) => true,
        Err(e) => {
            println!("skipped {test}: {e}");
            false
        }
    }
}

fn chain(dirty: DirtyMode) {
    let dir = std::env::temp_dir().join(format!(
        "spacekit-kvm-snapshot-{}-{dirty:?}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let guest = Guest::start(GuestConfig {
        mem_size: 64 << 20,
        vcpus: 2,
        workload: Workload::Uniform,
        writes_per_sec: 20_000,
        dirty,
        ..GuestConfig::default()
    })
    .expect("guest starts");
    std::thread::sleep(Duration::from_millis(100));
    let full = dir.join("full");
    let (mut snap, r) = Snapshotter::full(&guest, &full, false).unwrap();
    assert_eq!(r.pages, (64 << 20) / 4096);
    // Mostly zero pages: the file holds far less than the memory.
    let meta = std::fs::metadata(&full).unwrap();
    assert!(
        meta.blocks() * 512 < (64 << 20) / 4,
        "sparse: {} bytes allocated",
        meta.blocks() * 512
    );
    let mut diffs = Vec::new();
    for i in 1..=3 {
        std::thread::sleep(Duration::from_millis(100));
        let p = dir.join(format!("diff{i}"));
        let r = snap.diff(&guest, &p, i == 3).unwrap();
        assert!(r.pages > 0, "diff {i} holds the pages dirtied since");
        diffs.push(p);
    }
    // The guest is paused at the last diff.
    let merged = dir.join("merged");
    spacekit::snapshot::merge(&full, &diffs, &merged).unwrap();
    let d = differing_pages(&guest, &merged).unwrap();
    assert!(
        d.is_empty(),
        "{dirty:?}: {} pages differ: {:?}",
        d.len(),
        &d[..d.len().min(8)]
    );
    // Without the diffs it would not match: they carry what changed.
    assert!(!differing_pages(&guest, &full).unwrap().is_empty());
    guest.resume();
    guest.stop().unwrap();
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_full_snapshot_and_three_diffs_merge_to_the_guest_memory() {
    if !kvm_or_skip("a_full_snapshot_and_three_diffs_merge_to_the_guest_memory") {
        return;
    }
    chain(DirtyMode::Log);
    chain(DirtyMode::Ring { entries: 65536 });
}

/// The chain across guests, as across processes: a guest snapshotted in
/// full and stopped; a second restored from it, run, and snapshotted as a
/// diff; a third restored from both, run, and snapshotted as a diff. The
/// three files merged equal the third guest's memory.
#[test]
fn a_chain_across_restored_guests_merges_to_the_last_memory() {
    if !kvm_or_skip("a_chain_across_restored_guests_merges_to_the_last_memory") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("spacekit-kvm-restore-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = GuestConfig {
        mem_size: 32 << 20,
        workload: Workload::Uniform,
        writes_per_sec: 20_000,
        seed: 7,
        ..GuestConfig::default()
    };
    let guest = Guest::start(cfg.clone()).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let mut files = vec![dir.join("full")];
    Snapshotter::full(&guest, &files[0], false).unwrap();
    guest.stop().unwrap();
    for i in 1..=2u64 {
        // A different seed: the restored guest writes other pages; the
        // second restored guest idles (its parameter page, whose workload
        // field the loader changed, reaches the diff through the VMM log).
        let cfg = GuestConfig {
            seed: 7 + i,
            workload: if i == 2 {
                Workload::Idle
            } else {
                Workload::Uniform
            },
            ..cfg.clone()
        };
        let (guest, base) = restore(cfg, &files).unwrap();
        // The restored memory is the chain's.
        guest.pause();
        let merged = dir.join("restored");
        if files.len() == 1 {
            std::fs::copy(&files[0], &merged).unwrap();
        } else {
            spacekit::snapshot::merge(&files[0], &files[1..], &merged).unwrap();
        }
        let before = differing_pages(&guest, &merged).unwrap();
        guest.resume();
        std::thread::sleep(Duration::from_millis(100));
        let mut chain = Snapshotter::continue_from(&guest, base);
        let p = dir.join(format!("diff{i}"));
        let r = chain.diff(&guest, &p, true).unwrap();
        assert!(r.pages > 0);
        // Only the loader's first pages (its parameter page) may differ,
        // and pages the guest wrote between its start (it runs at once) and
        // the pause: those are in the diff, which holds every page written
        // since the restore.
        let written = spacekit::snapshot::Snapshot::open(&p).unwrap();
        let in_diff = |page: u64| {
            written
                .ranges()
                .iter()
                .any(|r| (r.gpa..r.gpa + r.length).contains(&(page * 4096)))
        };
        assert!(before.iter().all(|&p| p < 64 || in_diff(p)), "{before:?}");
        files.push(p);
        spacekit::snapshot::merge(&files[0], &files[1..], &merged).unwrap();
        let d = differing_pages(&guest, &merged).unwrap();
        assert!(
            d.is_empty(),
            "diff {i}: {} pages differ: {:?}",
            d.len(),
            &d[..d.len().min(8)]
        );
        guest.resume();
        guest.stop().unwrap();
    }
    // A chain out of order is refused, and the size must match.
    assert!(restore(cfg.clone(), &[files[0].clone(), files[2].clone()]).is_err());
    let small = GuestConfig {
        mem_size: 16 << 20,
        ..cfg
    };
    assert!(restore(small, &files[..1]).is_err());
    std::fs::remove_dir_all(&dir).ok();
}
