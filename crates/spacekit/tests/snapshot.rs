#![cfg(all(feature = "std", unix))]
//! Memory snapshots: a full snapshot is sparse (its zero pages are holes,
//! seen through `st_blocks`) and reads back as the memory; a full snapshot
//! and three diffs of a changing memory merge into the memory at the last
//! diff (page hashes); diffs of the wrong base, out of order or of another
//! size are refused before anything is written; every damaged, cut or
//! lengthened file is refused with its typed error.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use spacekit::dirty::{MemoryRange, MemoryRangeTable};
use spacekit::migration::{diff_pages, hash_pages};
use spacekit::snapshot::{
    self, merge, write_diff, write_full, Kind, Snapshot, SnapshotError, SnapshotId, SnapshotInfo,
    TRAILER_BYTES,
};
use spacekit_testkit::e2fs::TempDir;
use spacekit_testkit::rng::Rng;

const PAGE: u64 = 4096;

/// `pages` pages, every `zero_every`-th one zero, the others random (never
/// all zero).
fn memory(pages: u64, zero_every: u64, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed);
    let mut m = vec![0u8; (pages * PAGE) as usize];
    for (i, p) in m.chunks_mut(PAGE as usize).enumerate() {
        if zero_every == 0 || !(i as u64).is_multiple_of(zero_every) {
            rng.fill(p);
            p[0] |= 1;
        }
    }
    m
}

fn table(ranges: &[(u64, u64)]) -> MemoryRangeTable {
    let mut t = MemoryRangeTable::new();
    for &(gpa, length) in ranges {
        t.push(MemoryRange { gpa, length });
    }
    t
}

/// Dirties `mem` as a guest would between two snapshots: random bytes in
/// some pages, some pages zeroed, a run of pages rewritten; the table of
/// what changed (in pages, some ranges unaligned to show the widening).
fn dirty(mem: &mut [u8], rng: &mut Rng) -> MemoryRangeTable {
    let pages = mem.len() as u64 / PAGE;
    let mut t = MemoryRangeTable::new();
    for k in 0..20 {
        let p = rng.below(pages);
        let at = (p * PAGE) as usize;
        match k % 3 {
            0 => mem[at..at + PAGE as usize].fill(0),
            _ => {
                let off = rng.below(PAGE - 8) as usize;
                mem[at + off] ^= 0x5a | 1;
                t.push(MemoryRange {
                    gpa: p * PAGE + off as u64,
                    length: 1,
                });
                continue;
            }
        }
        t.push(MemoryRange {
            gpa: p * PAGE,
            length: PAGE,
        });
    }
    let run = rng.below(pages - 8);
    for p in run..run + 8 {
        let at = (p * PAGE) as usize;
        rng.fill(&mut mem[at..at + PAGE as usize]);
    }
    t.push(MemoryRange {
        gpa: run * PAGE,
        length: 8 * PAGE,
    });
    t
}

/// The file's first bytes are `mem` (without printing them when not).
fn same_memory(path: impl AsRef<Path>, mem: &[u8]) {
    let bytes = fs::read(path.as_ref()).unwrap();
    let first = bytes.iter().zip(mem).position(|(a, b)| a != b);
    assert!(bytes.len() >= mem.len(), "{} bytes", bytes.len());
    assert_eq!(
        first,
        None,
        "first differing byte of {}",
        path.as_ref().display()
    );
}

fn allocated(path: &Path) -> u64 {
    fs::metadata(path).unwrap().blocks() * 512
}

#[test]
fn a_full_snapshot_is_sparse_and_reads_back() {
    let dir = TempDir::new("snap-full");
    // 1024 pages (4 MiB), 7 of every 8 zero.
    let mut mem = vec![0u8; 1024 * PAGE as usize];
    let mut rng = Rng(3);
    for p in (0..1024).step_by(8) {
        let at = p * PAGE as usize;
        rng.fill(&mut mem[at..at + PAGE as usize]);
    }
    let path = dir.path("full");
    let info = write_full(&mem, PAGE, &path).unwrap();
    assert_eq!(info.kind, Kind::Full);
    assert_eq!(info.memory_size, mem.len() as u64);
    assert_eq!(info.file_bytes, mem.len() as u64 + TRAILER_BYTES);
    assert_eq!(fs::metadata(&path).unwrap().len(), info.file_bytes);
    // 128 data pages and the trailer; ext4 allocates no more than that
    // (a little slack for other filesystems' granularity).
    let alloc = allocated(&path);
    assert!(
        alloc <= 129 * PAGE + 64 * 1024,
        "{alloc} bytes allocated for 128 non-zero pages"
    );
    assert_eq!(info.allocated_bytes, alloc);
    // The memory is the file's first bytes, at guest-physical offsets.
    same_memory(&path, &mem);
    let snap = Snapshot::open(&path).unwrap();
    assert_eq!(snap.info(), &info);
    assert_eq!(
        snap.hash_pages(PAGE).unwrap(),
        hash_pages(&mem, PAGE).unwrap()
    );
    assert_eq!(
        snap.hash_pages(64 << 10).unwrap(),
        hash_pages(&mem, 64 << 10).unwrap()
    );
    snap.verify(&mut |_, _| {}).unwrap();
    let mut page = vec![0u8; 100];
    snap.read_memory(8 * PAGE + 5, &mut page).unwrap();
    assert_eq!(page, mem[8 * PAGE as usize + 5..][..100]);
    assert!(matches!(
        snap.read_memory(mem.len() as u64 - 4, &mut page),
        Err(SnapshotError::RangeOutsideMemory { .. })
    ));
    // The id depends on the memory alone.
    let again = write_full(&mem, 8192, dir.path("again")).unwrap();
    assert_eq!(again.id, info.id);
    mem[77] ^= 1;
    assert_ne!(
        write_full(&mem, PAGE, dir.path("other")).unwrap().id,
        info.id
    );
    // No temporary file is left.
    let names: Vec<_> = fs::read_dir(dir.path("."))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
}

#[test]
fn an_all_zero_memory_allocates_only_the_trailer() {
    let dir = TempDir::new("snap-zero");
    let mem = vec![0u8; 256 * PAGE as usize];
    let info = write_full(&mem, PAGE, dir.path("z")).unwrap();
    assert!(info.allocated_bytes <= 64 * 1024, "{info:?}");
    assert_eq!(
        info.id,
        SnapshotId::full(mem.len() as u64, spacekit::crc32c::checksum(&mem))
    );
}

/// A full snapshot, three diffs of a memory that keeps changing (pages
/// written, pages zeroed, unaligned dirty ranges), merged: the result is
/// the memory at the last diff, page for page, and its zero pages are
/// holes.
#[test]
fn a_full_snapshot_and_three_diffs_merge_into_the_last_memory() {
    let dir = TempDir::new("snap-merge");
    let mut mem = memory(512, 3, 11);
    let mut rng = Rng(99);
    let full = write_full(&mem, PAGE, dir.path("full")).unwrap();
    let mut base: SnapshotInfo = full.clone();
    let mut diffs = Vec::new();
    for k in 0..3 {
        let t = dirty(&mut mem, &mut rng);
        let path = dir.path(&format!("diff{k}"));
        let d = write_diff(&mem, &t, &base, &path).unwrap();
        assert_eq!(d.base_id, Some(base.id));
        assert_eq!(d.kind, Kind::Diff);
        let opened = Snapshot::open(&path).unwrap();
        assert_eq!(opened.info(), &d);
        opened.verify(&mut |_, _| {}).unwrap();
        // Ranges widened to pages, sorted, disjoint.
        assert!(opened.ranges().windows(2).all(|w| w[0].end() < w[1].gpa));
        assert!(opened
            .ranges()
            .iter()
            .all(|r| r.gpa % PAGE == 0 && r.length % PAGE == 0));
        diffs.push(path);
        base = d;
    }
    let out = dir.path("merged");
    let mut calls = 0;
    let merged =
        snapshot::merge_with_progress(dir.path("full"), &diffs, &out, &mut |done, total| {
            calls += 1;
            assert!(done <= total);
        })
        .unwrap();
    assert!(calls > 0);
    let snap = Snapshot::open(&out).unwrap();
    assert_eq!(snap.info(), &merged);
    let want = hash_pages(&mem, PAGE).unwrap();
    assert_eq!(
        diff_pages(&snap.hash_pages(PAGE).unwrap(), &want).unwrap(),
        Vec::<u64>::new()
    );
    same_memory(&out, &mem);
    // Same id as a full snapshot of that memory; as sparse as one.
    let direct = write_full(&mem, PAGE, dir.path("direct")).unwrap();
    assert_eq!(merged.id, direct.id);
    assert_eq!(merged.allocated_bytes, direct.allocated_bytes);
    // Merging a prefix of the chain gives the memory of that diff.
    merge(dir.path("full"), &diffs[..0], dir.path("copy")).unwrap();
    assert_eq!(Snapshot::open(dir.path("copy")).unwrap().info().id, full.id);
}

#[test]
fn a_zero_page_in_a_diff_zeroes_the_base() {
    let dir = TempDir::new("snap-zero-diff");
    let mut mem = memory(16, 0, 5);
    let base = write_full(&mem, PAGE, dir.path("base")).unwrap();
    mem[4 * PAGE as usize..6 * PAGE as usize].fill(0);
    let d = write_diff(&mem, &table(&[(4 * PAGE, 2 * PAGE)]), &base, dir.path("d")).unwrap();
    // The diff's two pages are holes: only its header block is allocated.
    assert!(d.allocated_bytes <= PAGE + 64 * 1024, "{d:?}");
    let m = merge(dir.path("base"), &[dir.path("d")], dir.path("out")).unwrap();
    same_memory(dir.path("out"), &mem);
    assert!(m.allocated_bytes < base.allocated_bytes);
}

#[test]
fn diffs_of_the_wrong_base_are_refused() {
    let dir = TempDir::new("snap-chain");
    let mut mem = memory(64, 4, 8);
    let mut rng = Rng(4);
    let full = write_full(&mem, PAGE, dir.path("full")).unwrap();
    let t1 = dirty(&mut mem, &mut rng);
    let d1 = write_diff(&mem, &t1, &full, dir.path("d1")).unwrap();
    let t2 = dirty(&mut mem, &mut rng);
    write_diff(&mem, &t2, &d1, dir.path("d2")).unwrap();
    let other = write_full(&memory(64, 4, 9), PAGE, dir.path("other")).unwrap();
    let out = dir.path("out");
    fs::write(&out, b"old").unwrap();
    let cases: [(&str, &[&str], PathBuf, SnapshotId, SnapshotId); 3] = [
        ("other", &["d1"], dir.path("d1"), full.id, other.id),
        ("full", &["d2"], dir.path("d2"), d1.id, full.id),
        ("full", &["d2", "d1"], dir.path("d2"), d1.id, full.id),
    ];
    for (base, diffs, path, expected, found) in cases {
        let diffs: Vec<PathBuf> = diffs.iter().map(|d| dir.path(d)).collect();
        assert_eq!(
            merge(dir.path(base), &diffs, &out),
            Err(SnapshotError::BaseMismatch {
                path,
                expected,
                found
            }),
            "{base} {diffs:?}"
        );
        assert_eq!(fs::read(&out).unwrap(), b"old");
    }
    // The right order works; a diff as the base, a full snapshot as a
    // diff, and a memory of another size are refused.
    merge(dir.path("full"), &[dir.path("d1"), dir.path("d2")], &out).unwrap();
    assert!(matches!(
        merge(dir.path("d1"), &[dir.path("d2")], dir.path("x")),
        Err(SnapshotError::WrongKind {
            expected: Kind::Full,
            found: Kind::Diff,
            ..
        })
    ));
    assert!(matches!(
        merge(dir.path("full"), &[dir.path("other")], dir.path("x")),
        Err(SnapshotError::WrongKind {
            expected: Kind::Diff,
            found: Kind::Full,
            ..
        })
    ));
    let small = memory(32, 4, 8);
    assert!(matches!(
        write_diff(&small, &t1, &full, dir.path("x")),
        Err(SnapshotError::SizeMismatch { .. })
    ));
    let big = write_full(&memory(128, 4, 8), PAGE, dir.path("big")).unwrap();
    write_diff(
        &memory(128, 4, 8),
        &table(&[(0, PAGE)]),
        &big,
        dir.path("bigd"),
    )
    .unwrap();
    assert!(matches!(
        merge(dir.path("full"), &[dir.path("bigd")], dir.path("x")),
        Err(SnapshotError::SizeMismatch { .. })
    ));
    assert!(matches!(
        write_diff(&mem, &table(&[(63 * PAGE, 2 * PAGE)]), &full, dir.path("x")),
        Err(SnapshotError::RangeOutsideMemory { index: 0, .. })
    ));
    assert!(!dir.path("x").exists());
}

/// Flips one byte of `path` at `at`.
fn flip(path: &Path, at: u64) {
    let mut b = fs::read(path).unwrap();
    b[at as usize] ^= 0x20;
    fs::write(path, b).unwrap();
}

fn set_len(path: &Path, len: u64) {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

#[test]
fn damaged_files_are_refused_with_their_error() {
    let dir = TempDir::new("snap-damage");
    let mut mem = memory(32, 2, 21);
    let full = write_full(&mem, PAGE, dir.path("full")).unwrap();
    let t = table(&[(PAGE, 2 * PAGE), (9 * PAGE, PAGE)]);
    mem[PAGE as usize + 3] ^= 1;
    mem[9 * PAGE as usize] ^= 1;
    let d = write_diff(&mem, &t, &full, dir.path("diff")).unwrap();
    assert_eq!(d.data_offset, PAGE);
    let fresh = |name: &str, src: &str| {
        let p = dir.path(name);
        fs::copy(dir.path(src), &p).unwrap();
        p
    };
    let open_diff = |p: &Path| Snapshot::open_diff(p).map(|_| ());
    let merged = |base: &Path, diff: &Path| merge(base, &[diff], dir.path("out")).map(|_| ());

    // Magic, version, kind, page size, flags, reserved.
    let p = fresh("magic", "diff");
    flip(&p, 0);
    assert!(matches!(open_diff(&p), Err(SnapshotError::BadMagic { .. })));
    let p = fresh("version", "diff");
    flip(&p, 8);
    assert!(matches!(
        open_diff(&p),
        Err(SnapshotError::UnsupportedVersion { version: 0x21, .. })
    ));
    for (at, field) in [(12, "page_size"), (68, "flags"), (100, "reserved")] {
        let p = fresh(field, "diff");
        flip(&p, at);
        match open_diff(&p) {
            Err(SnapshotError::BadHeader { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        }
    }
    // Any other header byte, a table byte, a padding byte: the CRC.
    for at in [30, 44, 124, 128 + 3, 128 + 16 + 9, 1000] {
        let p = fresh("crc", "diff");
        flip(&p, at);
        assert!(
            matches!(
                open_diff(&p),
                Err(SnapshotError::BadChecksum { what: "header", .. })
                    | Err(SnapshotError::BadHeader { .. })
            ),
            "byte {at}: {:?}",
            open_diff(&p)
        );
    }
    // A data byte: opening checks the table only; verify and merge read it.
    let p = fresh("data", "diff");
    flip(&p, d.data_offset + 5);
    let snap = Snapshot::open_diff(&p).unwrap();
    assert!(matches!(
        snap.verify(&mut |_, _| {}),
        Err(SnapshotError::BadChecksum { what: "data", .. })
    ));
    assert!(matches!(
        merged(&dir.path("full"), &p),
        Err(SnapshotError::BadChecksum { what: "data", .. })
    ));
    assert!(!dir.path("out").exists());
    // Cut and lengthened.
    for len in [0, 5, 127, 200, PAGE, d.file_bytes - 1] {
        let p = fresh("cut", "diff");
        set_len(&p, len);
        match open_diff(&p) {
            Err(SnapshotError::Truncated { got, .. }) => assert_eq!(got, len),
            Err(SnapshotError::BadMagic { .. }) if len < 8 => {}
            Err(SnapshotError::Io { kind, .. }) if len == 0 => {
                assert_eq!(kind, std::io::ErrorKind::InvalidInput);
            }
            other => panic!("cut to {len}: {other:?}"),
        }
    }
    let p = fresh("long", "diff");
    set_len(&p, d.file_bytes + 1);
    assert!(matches!(
        open_diff(&p),
        Err(SnapshotError::TrailingBytes { .. })
    ));
    // A damaged full snapshot: its memory (caught by verify and merge),
    // its trailer (caught on open).
    let p = fresh("fullmem", "full");
    flip(&p, 3 * PAGE + 1);
    assert!(matches!(
        Snapshot::open(&p).unwrap().verify(&mut |_, _| {}),
        Err(SnapshotError::BadChecksum { what: "memory", .. })
    ));
    assert!(matches!(
        merged(&p, &dir.path("diff")),
        Err(SnapshotError::BadChecksum { what: "memory", .. })
    ));
    let p = fresh("trailer", "full");
    flip(&p, full.memory_size + 200);
    assert!(matches!(
        Snapshot::open(&p),
        Err(SnapshotError::BadChecksum { what: "header", .. })
    ));
    assert!(!dir.path("out").exists());
    // Opened without saying which kind: a magic a bit off (at the start
    // of a diff, in a full snapshot's trailer) or a kind no snapshot has
    // is a damaged snapshot, not a raw memory image.
    for (src, at) in [
        ("diff", 0),
        ("diff", 3),
        ("full", full.memory_size),
        ("full", full.memory_size + 3),
    ] {
        let p = fresh("near-magic", src);
        flip(&p, at);
        assert!(
            matches!(Snapshot::open(&p), Err(SnapshotError::BadMagic { .. })),
            "{src} byte {at}: {:?}",
            snapshot::info(&p)
        );
    }
    let p = fresh("kind", "diff");
    flip(&p, 10);
    match Snapshot::open(&p) {
        Err(SnapshotError::BadHeader {
            field: "kind",
            value,
            ..
        }) => assert_eq!(value, 2 ^ 0x20),
        other => panic!("kind: {other:?}"),
    }
    // A table whose ranges overlap, with a correct CRC: refused by range.
    let p = fresh("overlap", "diff");
    let mut b = fs::read(&p).unwrap();
    b[128 + 16..128 + 24].copy_from_slice(&(2 * PAGE).to_le_bytes());
    let crc = {
        let mut c = spacekit::crc32c::raw(!0, &b[..124]);
        c = spacekit::crc32c::raw(c, &b[128..d.data_offset as usize]);
        !c
    };
    b[124..128].copy_from_slice(&crc.to_le_bytes());
    fs::write(&p, &b).unwrap();
    assert!(matches!(
        open_diff(&p),
        Err(SnapshotError::TableOutOfRange { index: 1, .. })
    ));
    // A plain memory image (the trailer cut off) is a full snapshot with
    // the same id.
    let p = fresh("raw", "full");
    set_len(&p, full.memory_size);
    let raw = snapshot::info(&p).unwrap();
    assert!(raw.raw);
    assert_eq!(raw.id, full.id);
    merge(&p, &[dir.path("diff")], dir.path("out")).unwrap();
    same_memory(dir.path("out"), &mem);
    // A missing file names itself.
    match merge(dir.path("none"), &[dir.path("diff")], dir.path("out2")) {
        Err(e @ SnapshotError::Io { .. }) => {
            assert_eq!(e.path(), Some(dir.path("none").as_path()));
            assert!(e.to_string().contains("none"), "{e}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn page_sizes_are_checked() {
    let dir = TempDir::new("snap-pages");
    let mem = vec![1u8; 64 << 10];
    for bad in [0, 1, 256, 3000, 4 << 20] {
        assert_eq!(
            write_full(&mem, bad, dir.path("x")),
            Err(SnapshotError::BadPageSize { page_size: bad })
        );
    }
    assert_eq!(
        write_full(&vec![0u8; 4096 + 512], PAGE, dir.path("x")),
        Err(SnapshotError::UnalignedMemory {
            size: 4096 + 512,
            page_size: PAGE
        })
    );
    // 512-byte and 2 MiB pages work.
    for ps in [512, 2 << 20] {
        let mem = memory(1024, 5, ps);
        let f = write_full(&mem, ps, dir.path("f")).unwrap();
        let mut m2 = mem.clone();
        m2[100] ^= 1;
        write_diff(&m2, &table(&[(0, 1)]), &f, dir.path("d")).unwrap();
        merge(dir.path("f"), &[dir.path("d")], dir.path("o")).unwrap();
        same_memory(dir.path("o"), &m2);
    }
}
