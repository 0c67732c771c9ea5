//! Target `snapshot`: memory snapshot files (`spacekit::snapshot`). The
//! first byte picks one of two checks:
//!
//! * **a hostile file** (even): the rest of the input is a file, opened as
//!   any snapshot. Opening never panics; a diff that opens has a table
//!   that is sorted, disjoint, page-aligned, inside memory, adding up to
//!   its data, and a length that is its header's. Merged onto an all-zero
//!   base of its memory size (whose id a seed can name), it succeeds
//!   exactly when its data's CRC (computed here from the input bytes) is
//!   the one its header stores, and then the output is a model: zeros with
//!   each range's bytes read straight from the input at its place in the
//!   data region. A full snapshot that opens verifies exactly when the
//!   CRC of its memory bytes matches, and hashes its pages without panic.
//! * **a damaged chain** (odd): a memory of up to 64 pages of 512 bytes,
//!   a full snapshot of it, up to three diffs of input-chosen ranges
//!   (unaligned, overlapping, empty) each after input-chosen writes and
//!   zeroings; then, maybe, one file damaged (a byte flipped, cut, or
//!   bytes appended). The undamaged chain must merge into the memory at
//!   the last diff (bytes and page hashes); a damaged one must fail, or
//!   give that same memory (a full snapshot cut to its memory is a plain
//!   image of it), or (no diffs) the damaged base's own bytes as a plain
//!   image; a
//!   flipped byte must always fail (unless it hit the base's trailer
//!   magic, which makes the base a plain memory image: merged alone it
//!   gives its own bytes). A failed merge leaves no output.

use std::fs;
use std::path::{Path, PathBuf};

use spacekit::crc32c;
use spacekit::dirty::{MemoryRange, MemoryRangeTable};
use spacekit::migration::hash_pages;
use spacekit::snapshot::{self, Kind, Snapshot, SnapshotInfo};

use super::input::Input;

/// This process's scratch directory (tmpfs where there is one, so the
/// snapshots' syncs are cheap).
fn scratch() -> PathBuf {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let tid = format!("{:?}", std::thread::current().id());
    let tid: String = tid.chars().filter(char::is_ascii_digit).collect();
    let dir = base.join(format!(
        "spacekit-fuzz-snapshot-{}-{tid}",
        std::process::id()
    ));
    fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

pub fn run(data: &[u8]) {
    let dir = scratch();
    let mut input = Input::new(data);
    if input.u8().is_multiple_of(2) {
        hostile_file(input.rest(), &dir);
    } else {
        damaged_chain(&mut input, &dir);
    }
    let _ = fs::remove_dir_all(&dir);
}

/// Memory sizes the checks build models of.
const MODEL_MAX: u64 = 1 << 20;

fn hostile_file(bytes: &[u8], dir: &Path) {
    let path = dir.join("x");
    fs::write(&path, bytes).expect("write the input");
    let Ok(snap) = Snapshot::open(&path) else {
        return;
    };
    let info = snap.info().clone();
    assert_eq!(info.file_bytes, bytes.len() as u64);
    match info.kind {
        Kind::Diff => hostile_diff(&snap, &info, bytes, dir),
        Kind::Full => {
            let size = info.memory_size;
            if size > MODEL_MAX {
                return;
            }
            let crc = crc32c::checksum(&bytes[..size as usize]);
            assert_eq!(snap.verify(&mut |_, _| {}).is_ok(), crc == info.data_crc);
            let hashes = snap.hash_pages(512).expect("hash pages");
            assert_eq!(hashes, hash_pages(&bytes[..size as usize], 512).unwrap());
        }
    }
}

fn hostile_diff(snap: &Snapshot, info: &SnapshotInfo, bytes: &[u8], dir: &Path) {
    let ps = info.page_size;
    let mut end = 0;
    let mut total = 0;
    for r in snap.ranges() {
        assert!(
            r.length > 0 && r.gpa.is_multiple_of(ps) && r.length.is_multiple_of(ps),
            "{r:?}"
        );
        assert!(r.gpa >= end && r.end() <= info.memory_size, "{r:?}");
        end = r.end();
        total += r.length;
    }
    assert_eq!(snap.ranges().len() as u64, info.ranges);
    assert_eq!(total, info.data_bytes);
    assert_eq!(info.data_offset + info.data_bytes, info.file_bytes);
    let size = info.memory_size;
    if size > MODEL_MAX {
        return;
    }
    let data = &bytes[info.data_offset as usize..];
    let crc_ok = crc32c::checksum(data) == info.data_crc;
    assert_eq!(snap.verify(&mut |_, _| {}).is_ok(), crc_ok);
    let zeros = vec![0u8; size as usize];
    let base = snapshot::write_full(&zeros, ps, dir.join("zero")).expect("zero base");
    let out = dir.join("out");
    let merged = snapshot::merge(dir.join("zero"), &[snap.path()], &out);
    if info.base_id != Some(base.id) {
        assert!(merged.is_err(), "a diff of another base merged");
        return;
    }
    assert_eq!(merged.is_ok(), crc_ok, "{merged:?}");
    if merged.is_err() {
        assert!(!out.exists(), "a failed merge left its output");
        return;
    }
    let mut model = zeros;
    let mut at = 0usize;
    for r in snap.ranges() {
        let n = r.length as usize;
        model[r.gpa as usize..][..n].copy_from_slice(&data[at..at + n]);
        at += n;
    }
    assert!(
        same_memory(&out, &model),
        "merged memory differs from the model"
    );
}

/// Whether the file's first bytes are `mem`.
fn same_memory(path: &Path, mem: &[u8]) -> bool {
    fs::read(path).is_ok_and(|b| b.len() >= mem.len() && b[..mem.len()] == *mem)
}

/// One change of a chain's memory: random bytes or zeros over a range.
fn mutate(input: &mut Input, mem: &mut [u8]) -> (u64, u64) {
    let len = mem.len() as u64;
    let at = input.below(len);
    let n = 1 + input.below((len - at).min(2048));
    let r = &mut mem[at as usize..(at + n) as usize];
    if input.bool() {
        r.fill(0);
    } else {
        for b in r.iter_mut() {
            *b = input.u8() | 1;
        }
    }
    (at, n)
}

fn damaged_chain(input: &mut Input, dir: &Path) {
    const PS: u64 = 512;
    let pages = 1 + input.below(64);
    let mut mem = vec![0u8; (pages * PS) as usize];
    for _ in 0..input.below(6) {
        mutate(input, &mut mem);
    }
    let full = dir.join("full");
    let mut base = snapshot::write_full(&mem, PS, &full).expect("write full");
    let mut diffs = Vec::new();
    for k in 0..input.below(4) {
        let mut table = MemoryRangeTable::new();
        for _ in 0..input.below(5) {
            let (gpa, length) = mutate(input, &mut mem);
            // The dirty range covers the change, maybe more, maybe unaligned.
            let extra = input.below(3) * 100;
            let gpa = gpa.saturating_sub(extra);
            let length = (length + 2 * extra).min(mem.len() as u64 - gpa);
            table.push(MemoryRange { gpa, length });
        }
        if input.bool() {
            table.push(MemoryRange { gpa: 0, length: 0 });
        }
        let path = dir.join(format!("d{k}"));
        base = snapshot::write_diff(&mem, &table, &base, &path).expect("write diff");
        diffs.push(path);
    }
    let files: Vec<&PathBuf> = std::iter::once(&full).chain(&diffs).collect();
    let victim = files[input.below(files.len() as u64) as usize];
    let mut flipped = false;
    let damaged = match input.u8() % 4 {
        0 => false,
        1 => {
            let mut b = fs::read(victim).expect("read");
            let at = input.below(b.len() as u64) as usize;
            b[at] ^= input.u8() | 1;
            fs::write(victim, b).expect("write");
            flipped = true;
            true
        }
        2 => {
            let len = fs::metadata(victim).expect("stat").len();
            let f = fs::OpenOptions::new()
                .write(true)
                .open(victim)
                .expect("open");
            f.set_len(input.below(len)).expect("cut");
            true
        }
        _ => {
            let mut b = fs::read(victim).expect("read");
            let n = 1 + input.below(600) as usize;
            b.extend_from_slice(input.bytes(n));
            b.push(1);
            fs::write(victim, b).expect("write");
            true
        }
    };
    let out = dir.join("out");
    match snapshot::merge(&full, &diffs, &out) {
        Ok(info) => {
            // A full snapshot cut to a multiple of 4 KiB, or with its
            // trailer's magic hit, is a plain memory image: merged alone,
            // it gives its own bytes.
            let as_raw = damaged
                && victim == &full
                && diffs.is_empty()
                && fs::read(&full).is_ok_and(|b| same_memory(&out, &b));
            assert!(
                !flipped || as_raw,
                "a flipped byte of {} went unnoticed",
                victim.display()
            );
            if !as_raw {
                assert!(same_memory(&out, &mem), "merged memory differs");
                let snap = Snapshot::open(&out).expect("reopen the output");
                assert_eq!(snap.info().id, info.id);
                assert_eq!(snap.hash_pages(PS).unwrap(), hash_pages(&mem, PS).unwrap());
            }
        }
        Err(e) => {
            assert!(damaged, "an undamaged chain failed: {e}");
            assert!(!out.exists(), "a failed merge left its output");
        }
    }
}
