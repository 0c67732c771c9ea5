//! spacekit against a Cloud Hypervisor-shaped peer (`common/ch_peer.rs`,
//! written from the protocol's facts): spacekit's `Sender` migrates to a
//! Cloud Hypervisor-shaped receiver and a Cloud Hypervisor-shaped sender
//! migrates to spacekit's `Receiver`, multi-round with partitioned tables,
//! with 0 differing pages both ways; and the plain peer's reactions
//! (version, order, unknown commands) that the negotiation must respect.
//! With `/dev/kvm`, a real guest migrates to the Cloud Hypervisor-shaped
//! receiver (without it, that test prints one line and passes).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::thread;

use spacekit_testkit::ch_peer;

use ch_peer::{ch_partition, ch_receive, ch_send, ChEnd};
use spacekit::dirty::{MemoryRange, MemoryRangeTable};
use spacekit::migration::{
    diff_pages, hash_pages, Command, Extensions, MigrationError, Receiver, Sender, Status,
};

const PAGE: u64 = 4096;
const SIZE: usize = 8 << 20;

use spacekit_testkit::rng::Rng;

/// Random page runs written with new bytes in `mem`; returns them as
/// `(gpa, length)` ranges, ascending.
fn dirty_some(rng: &mut Rng, mem: &mut [u8], runs: usize) -> Vec<(u64, u64)> {
    let pages = mem.len() as u64 / PAGE;
    let mut dirty = vec![false; pages as usize];
    for _ in 0..runs {
        let p = rng.next() % pages;
        let n = 1 + rng.next() % 9;
        for q in p..(p + n).min(pages) {
            dirty[q as usize] = true;
            let at = (q * PAGE + rng.next() % PAGE) as usize;
            mem[at] = mem[at].wrapping_add(1 + (rng.next() % 200) as u8);
        }
    }
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (i, d) in dirty.iter().enumerate() {
        if !*d {
            continue;
        }
        let gpa = i as u64 * PAGE;
        match out.last_mut() {
            Some((g, l)) if *g + *l == gpa => *l += PAGE,
            _ => out.push((gpa, PAGE)),
        }
    }
    out
}

fn table_of(ranges: &[(u64, u64)]) -> MemoryRangeTable {
    let mut t = MemoryRangeTable::new();
    for &(gpa, length) in ranges {
        t.push(MemoryRange { gpa, length });
    }
    t
}

fn differing(a: &[u8], b: &[u8]) -> Vec<u64> {
    diff_pages(&hash_pages(a, PAGE).unwrap(), &hash_pages(b, PAGE).unwrap()).unwrap()
}

/// spacekit's `Sender` to a Cloud Hypervisor-shaped receiver: nothing is
/// negotiated (the receiver answers `Start` with zero padding), the page
/// check is refused locally, the `Config` and `State` payloads arrive, and
/// memory is identical after rounds sent whole and partitioned.
#[test]
fn spacekit_sender_to_cloud_hypervisor_receiver() {
    let mut rng = Rng(0x51ac_e417);
    let mut source: Vec<u8> = (0..SIZE).map(|i| (i * 7 + i / 4099) as u8).collect();
    let (mut tx, mut rx) = UnixStream::pair().unwrap();
    let dest = thread::spawn(move || {
        let mut memory = vec![0u8; SIZE];
        let (end, got) = ch_receive(&mut rx, &mut memory);
        (end, got, memory)
    });
    let mut sender = Sender::with_buffer_size(64 * 1024 + 3);
    sender.start(&mut tx).unwrap();
    assert_eq!(sender.extensions(), Extensions::NONE);
    sender
        .send_config(&mut tx, br#"{"vm_config":{"memory":{"size":8388608}}}"#)
        .unwrap();
    sender
        .send_memory(&mut tx, &table_of(&[(0, SIZE as u64)]), &source)
        .unwrap();
    for round in 1..=6 {
        let dirty = table_of(&dirty_some(&mut rng, &mut source, 20 * round));
        let parts = if round % 2 == 0 {
            dirty.partition(100 * 1024)
        } else {
            vec![dirty]
        };
        for part in &parts {
            sender.send_memory(&mut tx, part, &source).unwrap();
        }
    }
    // The plain peer never sees spacekit's extension.
    assert_eq!(
        sender.page_hashes(&mut tx, PAGE),
        Err(MigrationError::NotNegotiated {
            command: Command::PageHashes
        })
    );
    sender.send_state(&mut tx, br#"{"snapshot":{}}"#).unwrap();
    sender.complete(&mut tx).unwrap();
    let (end, got, memory) = dest.join().unwrap();
    assert_eq!(end, ChEnd::Completed { paused: false });
    assert_eq!(
        got.config.as_deref(),
        Some(&br#"{"vm_config":{"memory":{"size":8388608}}}"#[..])
    );
    assert_eq!(got.state.as_deref(), Some(&br#"{"snapshot":{}}"#[..]));
    assert!(got.memory_requests >= 8);
    // Every request header but Start's 6 bytes is zero there, as Cloud
    // Hypervisor writes them; Start carries version 0 (then the offer).
    assert_eq!(got.headers[0].1[..2], [0, 0]);
    assert!(got.headers[1..].iter().all(|(_, h, _)| *h == [0; 6]));
    assert!(
        got.headers.iter().all(|(c, _, _)| (1..=9).contains(c)),
        "only Cloud Hypervisor's commands"
    );
    assert_eq!(differing(&source, &memory), Vec::<u64>::new());
    assert!(memory == source);
}

/// A Cloud Hypervisor-shaped sender to spacekit's `Receiver`: `Config` and
/// `State` are handed to the caller, partitioned tables (ranges taken from
/// the end and split) land where they say, 0 differing pages.
#[test]
fn cloud_hypervisor_sender_to_spacekit_receiver() {
    let mut rng = Rng(0x0c10_d4e7);
    let mut source: Vec<u8> = (0..SIZE).map(|i| (i * 13 + i / 4111) as u8).collect();
    let mut rounds = vec![vec![(0, SIZE as u64)]];
    let mut snapshot = source.clone();
    for round in 1..=6 {
        rounds.push(dirty_some(&mut rng, &mut snapshot, 30 * round));
    }
    rounds.push(Vec::new()); // an empty round: skipped by the sender
                             // The sender sends from memory as it is at the end; each round's ranges
                             // carry their bytes then.
    source.copy_from_slice(&snapshot);
    for paused in [false, true] {
        let (mut tx, mut rx) = UnixStream::pair().unwrap();
        let dest = thread::spawn(move || {
            let mut memory = vec![0u8; SIZE];
            let mut payloads = Vec::new();
            let mut r = Receiver::new(&mut memory);
            let res = r.serve_with(&mut rx, |c, p| {
                payloads.push((c, p.to_vec()));
                Ok(())
            });
            (res, payloads, memory)
        });
        let rounds2 = rounds.clone();
        let src = source.clone();
        let send = thread::spawn(move || {
            ch_send(
                &mut tx,
                &src,
                &rounds2,
                b"{\"cfg\":1}",
                b"{\"st\":2}",
                3 * PAGE + 100,
                paused,
            )
        });
        send.join().unwrap().unwrap();
        let (res, payloads, memory) = dest.join().unwrap();
        let summary = res.unwrap();
        assert_eq!(summary.extensions, Extensions::NONE);
        assert_eq!(summary.version, 0);
        assert_eq!(summary.paused, paused);
        assert_eq!(
            payloads,
            [
                (Command::Config, b"{\"cfg\":1}".to_vec()),
                (Command::State, b"{\"st\":2}".to_vec())
            ]
        );
        let parts: usize = rounds
            .iter()
            .map(|r| ch_partition(r, 3 * PAGE + 100).len())
            .sum();
        assert_eq!(summary.memory_requests, parts as u64);
        assert_eq!(differing(&source, &memory), Vec::<u64>::new());
        assert!(memory == source);
    }
}

/// The partition the peer uses is Cloud Hypervisor's: ranges from the end,
/// split at the chunk size, the upper part first.
#[test]
fn peer_partition_is_cloud_hypervisors() {
    // Cloud Hypervisor's own test: four 2-page ranges in chunks of 5 pages.
    let p = PAGE;
    let t = [(p, 2 * p), (5 * p, 2 * p), (9 * p, 2 * p), (13 * p, 2 * p)];
    let parts = ch_partition(&t, 5 * p);
    assert_eq!(
        parts,
        [
            vec![(13 * p, 2 * p), (9 * p, 2 * p), (6 * p, p)],
            vec![(5 * p, p), (p, 2 * p)]
        ]
    );
    assert!(ch_partition(&[], p).is_empty());
}

fn raw(command: u16, headers: [u8; 6], length: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..2].copy_from_slice(&command.to_le_bytes());
    b[2..8].copy_from_slice(&headers);
    b[8..].copy_from_slice(&length.to_le_bytes());
    b
}

fn against_ch(input: &[u8]) -> (ChEnd, Vec<u8>) {
    let (mut tx, mut rx) = UnixStream::pair().unwrap();
    let dest = thread::spawn(move || {
        let mut memory = vec![0u8; 8192];
        ch_receive(&mut rx, &mut memory).0
    });
    tx.write_all(input).unwrap();
    tx.shutdown(std::net::Shutdown::Write).unwrap();
    let end = dest.join().unwrap();
    let mut out = Vec::new();
    let _ = tx.read_to_end(&mut out);
    (end, out)
}

/// What the plain peer does that spacekit must respect: it refuses other
/// versions, wants `Config` before `Memory`, and drops the connection
/// without an answer on a command it does not know — such as spacekit's
/// page-hash request, which is why that request is negotiated first.
#[test]
fn the_plain_peers_rules() {
    let ok = {
        let mut b = [0u8; 16];
        b[0] = 1;
        b
    };
    let err = {
        let mut b = [0u8; 16];
        b[0] = 2;
        b
    };
    let (end, out) = against_ch(&raw(1, [1, 0, 0, 0, 0, 0], 0));
    assert_eq!(
        end,
        ChEnd::Refused {
            state: "Established",
            command: 1
        }
    );
    assert_eq!(out, err);
    // spacekit's offer rides in bytes it ignores: accepted, zero padding.
    let (_, out) = against_ch(&raw(1, [0, 0, b'S', b'K', 1, 0], 0));
    assert_eq!(out[..16], ok);
    let mut memory_first = raw(1, [0; 6], 0).to_vec();
    memory_first.extend(raw(4, [0; 6], 16));
    memory_first.extend([0u8; 16]);
    let (end, out) = against_ch(&memory_first);
    assert_eq!(
        end,
        ChEnd::Refused {
            state: "Started",
            command: 4
        }
    );
    assert_eq!(out, [ok, err].concat());
    let mut hashes = raw(1, [0; 6], 0).to_vec();
    hashes.extend(raw(2, [0; 6], 0));
    hashes.extend(raw(0x5348, [0; 6], 8));
    hashes.extend(4096u64.to_le_bytes());
    let (end, out) = against_ch(&hashes);
    assert!(matches!(end, ChEnd::Dropped(ref why) if why.contains("0x5348")));
    assert_eq!(out, [ok, ok].concat(), "no answer to the unknown command");

    // spacekit's receiver answers what the plain one answers, and more.
    let (mut tx, mut rx) = UnixStream::pair().unwrap();
    let dest = thread::spawn(move || {
        let mut memory = vec![0u8; 8192];
        Receiver::new(&mut memory).serve(&mut rx)
    });
    tx.write_all(&memory_first).unwrap();
    tx.shutdown(std::net::Shutdown::Write).unwrap();
    let mut out = Vec::new();
    tx.read_to_end(&mut out).unwrap();
    assert_eq!(out, [ok, err].concat());
    assert!(dest.join().unwrap().is_err());
}

/// A spacekit sender that skips `Config` is refused by the plain peer (as it
/// was before spacekit sent one): the sender reads the error.
#[test]
fn memory_without_config_is_rejected_by_the_plain_peer() {
    let (mut tx, mut rx) = UnixStream::pair().unwrap();
    let dest = thread::spawn(move || {
        let mut memory = vec![0u8; 8192];
        ch_receive(&mut rx, &mut memory).0
    });
    let mut sender = Sender::new();
    sender.start(&mut tx).unwrap();
    assert_eq!(
        sender.send_memory(&mut tx, &table_of(&[(0, 4096)]), &vec![1u8; 8192]),
        Err(MigrationError::Rejected {
            status: Status::Error,
            command: Command::Memory
        })
    );
    assert_eq!(
        dest.join().unwrap(),
        ChEnd::Refused {
            state: "Started",
            command: 4
        }
    );
}

/// A real guest migrated by `kvm::migrate` to the Cloud Hypervisor-shaped
/// receiver: the plain protocol end to end (Config, rounds, State,
/// Complete), no page check offered, and 0 differing pages when the test
/// compares the paused guest with what arrived.
#[cfg(all(feature = "kvm", target_os = "linux", target_arch = "x86_64"))]
#[test]
fn kvm_guest_to_cloud_hypervisor_receiver() {
    use spacekit::kvm::{self, Guest, GuestConfig, GuestSource, MigrateConfig};
    if let Err(e) = kvm::available() {
        println!("skipped kvm_guest_to_cloud_hypervisor_receiver: {e}");
        return;
    }
    const MEM: u64 = 64 << 20;
    let guest = Guest::start(GuestConfig {
        mem_size: MEM,
        ..GuestConfig::default()
    })
    .unwrap();
    let (mut tx, mut rx) = UnixStream::pair().unwrap();
    let dest = thread::spawn(move || {
        let mut memory = vec![0u8; MEM as usize];
        let (end, got) = ch_receive(&mut rx, &mut memory);
        (end, got, memory)
    });
    let cfg = MigrateConfig {
        max_rounds: 3,
        ..MigrateConfig::default()
    };
    let report = kvm::migrate(&guest, &mut tx, &cfg, |_, _| {}).unwrap();
    assert!(!report.pages_checked);
    assert!(report.to_string().contains("pages not compared"));
    let (end, got, memory) = dest.join().unwrap();
    assert_eq!(end, ChEnd::Completed { paused: false });
    assert!(got.config.is_some() && got.state.is_some());
    let local = hash_pages(&GuestSource::new(&guest), PAGE).unwrap();
    let remote = hash_pages(&memory, PAGE).unwrap();
    assert_eq!(diff_pages(&local, &remote).unwrap(), Vec::<u64>::new());
    guest.stop().unwrap();
}
