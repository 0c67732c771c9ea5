//! A real KVM guest: its dirty log, cleared log and dirty ring report exactly
//! the pages it wrote; host writes through vm-memory land in the VMM log.
//! Skipped, with one line, where `/dev/kvm` cannot run a VM.
#![cfg(all(feature = "kvm", target_os = "linux", target_arch = "x86_64"))]

use std::collections::BTreeSet;
use std::time::Duration;

use spacekit::dirty::MemoryRangeTable;
use spacekit::kvm::{layout, DirtyMode, DirtyTracker, Guest, GuestConfig, Workload};
use vm_memory::{Bytes, GuestAddress};

fn kvm_or_skip(test: &str) -> bool {
    match spacekit::kvm::available() {
        Ok(()) => true,
        Err(e) => {
            println!("skipped {test}: {e}");
            false
        }
    }
}

fn pages_of(words: &[u64]) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    for (i, &w) in words.iter().enumerate() {
        let mut w = w;
        while w != 0 {
            out.insert(i as u64 * 64 + u64::from(w.trailing_zeros()));
            w &= w - 1;
        }
    }
    out
}

fn table_pages(t: &MemoryRangeTable) -> BTreeSet<u64> {
    t.ranges()
        .iter()
        .flat_map(|r| (r.gpa / 4096)..(r.end() / 4096))
        .collect()
}

/// A 64 MiB guest writes a known set of pages; `mode` reports exactly it.
fn known_set(mode: DirtyMode) {
    let writes = 3000;
    let seed = 0x5eed;
    let guest = Guest::start(GuestConfig {
        mem_size: 64 << 20,
        max_writes: writes,
        seed,
        dirty: mode,
        ..GuestConfig::default()
    })
    .expect("guest starts");
    assert!(
        guest.wait_quota(Duration::from_secs(20)),
        "guest made its writes"
    );
    assert_eq!(guest.writes(), writes);
    let mut tracker = DirtyTracker::new(&guest);
    let h = tracker.harvest(&guest).unwrap();
    let mut expected = layout::uniform_pages(guest.layout(), seed, writes);
    expected.insert(guest.layout().params_page());
    let got = pages_of(tracker.kvm_log());
    assert_eq!(got.len(), expected.len(), "{mode:?}: page count");
    assert_eq!(got, expected, "{mode:?}: the log is the written set");
    assert!(h.kvm_pages >= expected.len() as u64);
    assert_eq!(h.vmm_pages, 0, "no host writes yet");
    let mut table = MemoryRangeTable::new();
    tracker.build(&mut table).unwrap();
    assert_eq!(table_pages(&table), expected);
    // A second harvest with the guest idle at its quota finds nothing new.
    tracker.harvest(&guest).unwrap();
    assert!(
        pages_of(tracker.kvm_log()).is_empty(),
        "{mode:?}: log re-armed and empty"
    );
    guest.stop().unwrap();
}

#[test]
fn dirty_log_reports_exactly_the_written_pages() {
    if kvm_or_skip("dirty_log_reports_exactly_the_written_pages") {
        known_set(DirtyMode::Log);
    }
}

#[test]
fn cleared_log_reports_exactly_the_written_pages() {
    if kvm_or_skip("cleared_log_reports_exactly_the_written_pages") {
        known_set(DirtyMode::ClearLog);
    }
}

#[test]
fn dirty_ring_reports_exactly_the_written_pages() {
    if kvm_or_skip("dirty_ring_reports_exactly_the_written_pages") {
        // Room for every entry of the run: this guest makes up to four ring
        // entries per write on a shadow-paging host (the parameter page's
        // stores are logged each time). `a_small_ring_...` covers a ring
        // that fills.
        known_set(DirtyMode::Ring { entries: 65536 });
    }
}

#[test]
fn host_writes_through_vm_memory_are_in_the_vmm_log() {
    if !kvm_or_skip("host_writes_through_vm_memory_are_in_the_vmm_log") {
        return;
    }
    let guest = Guest::start(GuestConfig {
        mem_size: 64 << 20,
        workload: Workload::Idle,
        ..GuestConfig::default()
    })
    .unwrap();
    let first = guest.layout().first_page;
    let mut expected = BTreeSet::new();
    for (k, p) in [first, first + 7, first + 8, first + 1000]
        .into_iter()
        .enumerate()
    {
        // A 6000-byte write from the middle of page p spans p and p + 1.
        guest
            .memory()
            .write_slice(&vec![k as u8 + 1; 6000], GuestAddress(p * 4096 + 2048))
            .unwrap();
        expected.extend([p, p + 1]);
    }
    guest
        .memory()
        .write_obj(0xdead_beef_u32, GuestAddress((first + 5000) * 4096))
        .unwrap();
    expected.insert(first + 5000);
    let mut tracker = DirtyTracker::new(&guest);
    let h = tracker.harvest(&guest).unwrap();
    assert_eq!(pages_of(tracker.vmm_log()), expected);
    assert_eq!(h.vmm_pages, expected.len() as u64);
    assert!(
        pages_of(tracker.kvm_log()).is_empty(),
        "an idle guest writes nothing"
    );
    let mut table = MemoryRangeTable::new();
    tracker.build(&mut table).unwrap();
    assert_eq!(table_pages(&table), expected);
    tracker.harvest(&guest).unwrap();
    assert!(
        pages_of(tracker.vmm_log()).is_empty(),
        "harvest takes the log"
    );
    guest.stop().unwrap();
}

#[test]
fn bad_configs_are_typed_errors() {
    use spacekit::kvm::KvmError;
    for (cfg, what) in [
        (
            GuestConfig {
                mem_size: 3 << 20,
                ..GuestConfig::default()
            },
            "size",
        ),
        (
            GuestConfig {
                vcpus: 0,
                ..GuestConfig::default()
            },
            "vcpus",
        ),
        (
            GuestConfig {
                vcpus: 64,
                ..GuestConfig::default()
            },
            "vcpus",
        ),
        (
            GuestConfig {
                workload: Workload::Hot {
                    hot_pages: 0,
                    hot_percent: 90,
                },
                ..GuestConfig::default()
            },
            "hot",
        ),
    ] {
        match Guest::start(cfg) {
            Err(KvmError::BadConfig { .. }) => {}
            Err(KvmError::Unavailable { reason }) => {
                println!("skipped part of bad_configs_are_typed_errors: {reason}");
                return;
            }
            other => panic!("{what}: {:?}", other.err()),
        }
    }
    if !kvm_or_skip("bad_configs_are_typed_errors (map)") {
        return;
    }
    // More memory than the address space can map.
    match Guest::start(GuestConfig {
        mem_size: 1 << 62,
        ..GuestConfig::default()
    }) {
        Err(KvmError::Map { .. }) => {}
        other => panic!("huge guest: {:?}", other.err()),
    }
}

/// A ring small enough to be overrun is reported, never a silent loss: the
/// harvest either succeeds with exactly the written set or fails with
/// `RingOverflow`.
#[test]
fn a_small_ring_is_exact_or_reports_overflow() {
    if !kvm_or_skip("a_small_ring_is_exact_or_reports_overflow") {
        return;
    }
    let writes = 3000;
    let guest = Guest::start(GuestConfig {
        mem_size: 64 << 20,
        max_writes: writes,
        seed: 9,
        dirty: DirtyMode::Ring { entries: 1024 },
        ..GuestConfig::default()
    })
    .unwrap();
    let done = guest.wait_quota(Duration::from_secs(20));
    let mut tracker = DirtyTracker::new(&guest);
    match tracker.harvest(&guest) {
        Ok(_) => {
            assert!(done);
            let mut expected = layout::uniform_pages(guest.layout(), 9, writes);
            expected.insert(guest.layout().params_page());
            assert_eq!(pages_of(tracker.kvm_log()), expected);
        }
        Err(spacekit::kvm::KvmError::RingOverflow) => {
            println!("the 1024-entry ring overflowed on this host (reported, as it must be)");
        }
        Err(e) => panic!("{e}"),
    }
    drop(guest);
}

fn migrate_and_check(cfg: GuestConfig, mcfg: spacekit::kvm::MigrateConfig) {
    use spacekit::migration::Receiver;
    use std::os::unix::net::UnixStream;
    let size = cfg.mem_size as usize;
    let guest = Guest::start(cfg.clone()).expect("guest starts");
    let (mut a, mut b) = UnixStream::pair().unwrap();
    let receiver = std::thread::spawn(move || {
        let mut memory = vec![0u8; size];
        let mut rx = Receiver::new(&mut memory);
        rx.serve(&mut b).map(|s| s.bytes)
    });
    let mut rounds = 0;
    let report = spacekit::kvm::migrate(&guest, &mut a, &mcfg, |_, _| rounds += 1).unwrap();
    let received = receiver.join().unwrap().unwrap();
    assert!(report.rounds.len() >= 2, "round 0 and a last round");
    assert_eq!(rounds, report.rounds.len());
    assert!(report.rounds.last().unwrap().last);
    let sent: u64 = report.rounds.iter().map(|r| r.bytes_sent).sum();
    assert_eq!(sent, received);
    assert!(
        report.differing_pages.is_empty(),
        "{:?}: {} pages differ: {:?}",
        cfg.workload,
        report.differing_pages.len(),
        &report.differing_pages[..report.differing_pages.len().min(10)]
    );
    if cfg.workload != Workload::Idle {
        assert!(report.guest_writes > 0, "the guest ran during pre-copy");
        let dirtied: u64 = report.rounds.iter().skip(1).map(|r| r.dirty_pages).sum();
        assert!(dirtied > 0, "later rounds sent what the guest dirtied");
    }
    guest.stop().unwrap();
}

/// A failure after `Start` while the stream still works (here the
/// receiver's memory is one page larger, so the page-hash lists differ in
/// length) makes `migrate` send `Abandon`, as documented: the receiver
/// returns `Abandoned` instead of seeing the stream end.
#[test]
fn a_failed_migration_sends_abandon() {
    use spacekit::kvm::KvmError;
    use spacekit::migration::{MigrationError, Receiver};
    use std::os::unix::net::UnixStream;
    if !kvm_or_skip("a_failed_migration_sends_abandon") {
        return;
    }
    let size = 64usize << 20;
    let guest = Guest::start(GuestConfig {
        mem_size: size as u64,
        ..GuestConfig::default()
    })
    .expect("guest starts");
    let (mut a, mut b) = UnixStream::pair().unwrap();
    let receiver = std::thread::spawn(move || {
        let mut memory = vec![0u8; size + 4096];
        Receiver::new(&mut memory).serve(&mut b)
    });
    let mcfg = spacekit::kvm::MigrateConfig {
        max_rounds: 1,
        ..Default::default()
    };
    let res = spacekit::kvm::migrate(&guest, &mut a, &mcfg, |_, _| {});
    assert!(
        matches!(
            res,
            Err(KvmError::Migration(
                MigrationError::PageCountMismatch { .. }
            ))
        ),
        "{res:?}"
    );
    drop(a); // without Abandon, the receiver sees the stream end
    assert_eq!(receiver.join().unwrap(), Err(MigrationError::Abandoned));
    guest.stop().unwrap();
}

#[test]
fn migration_of_a_256_mib_guest_is_byte_identical() {
    if !kvm_or_skip("migration_of_a_256_mib_guest_is_byte_identical") {
        return;
    }
    let m = spacekit::kvm::MigrateConfig {
        max_rounds: 4,
        ..Default::default()
    };
    migrate_and_check(
        GuestConfig {
            mem_size: 256 << 20,
            ..GuestConfig::default()
        },
        m.clone(),
    );
}

#[test]
fn migration_is_byte_identical_for_every_workload_and_mode() {
    if !kvm_or_skip("migration_is_byte_identical_for_every_workload_and_mode") {
        return;
    }
    let m = spacekit::kvm::MigrateConfig {
        max_rounds: 3,
        ..Default::default()
    };
    for workload in [
        Workload::Uniform,
        Workload::Hot {
            hot_pages: 256,
            hot_percent: 90,
        },
        Workload::Sweep,
        Workload::Idle,
    ] {
        for dirty in [
            DirtyMode::Log,
            DirtyMode::ClearLog,
            DirtyMode::Ring { entries: 65536 },
        ] {
            migrate_and_check(
                GuestConfig {
                    mem_size: 64 << 20,
                    workload,
                    dirty,
                    // Paced so a ring is harvested before it fills.
                    writes_per_sec: 50_000,
                    vcpus: 2,
                    ..GuestConfig::default()
                },
                m.clone(),
            );
        }
    }
}
