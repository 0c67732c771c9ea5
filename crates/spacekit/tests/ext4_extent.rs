#![cfg(feature = "ext4")]
//! `spacekit::ext4::extent` against a model and against e2fsprogs.
//!
//! * `model_*` — random inserts (sizes up to the length caps, physically
//!   adjacent and not, written and unwritten, at the end and in holes) and
//!   truncates on an in-memory store, at 1 KiB and 4 KiB blocks, until the
//!   tree is 2 and 3 levels deep. After the operations the tree is checked
//!   by an independent reader of the raw blocks (headers, `eh_max`, tail
//!   checksums recomputed in full, key order, each child's keys within its
//!   index range, no empty node, every allocated tree block reachable and
//!   nothing else) and its extents against the model: the same mapping, and
//!   no two neighbours that could be merged. Every truncate's freed ranges
//!   equal what the model lost.
//! * `real_*` — trees written by debugfs on a `metadata_csum` image: the
//!   extents and tree blocks equal `debugfs -R "ex"`'s, and a flipped byte in
//!   an extent block is refused by its checksum.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit::crc32c;
use spacekit::ext4::raw::{le16, le32};
use spacekit::ext4::{Ext4Error, Image, OpenMode};
use spacekit::testing::ext4::extent::{self, Extent, ExtentStore};

use e2fs::{tool, TempDir};
use spacekit_testkit::e2fs;

// ---------------------------------------------------------------------------
// In-memory store
// ---------------------------------------------------------------------------

/// Tree blocks in a map; allocation counts up from 100 (data blocks in the
/// tests are above 1,000,000, so the two never meet).
struct Mem {
    bs: usize,
    blocks: HashMap<u64, Vec<u8>>,
    next: u64,
    allocs: u64,
    frees: u64,
}

impl Mem {
    fn new(bs: usize) -> Mem {
        Mem {
            bs,
            blocks: HashMap::new(),
            next: 100,
            allocs: 0,
            frees: 0,
        }
    }
}

impl ExtentStore for Mem {
    fn block_size(&self) -> usize {
        self.bs
    }
    fn read(&mut self, block: u64) -> Result<Vec<u8>, Ext4Error> {
        Ok(self
            .blocks
            .get(&block)
            .unwrap_or_else(|| panic!("read of unallocated block {block}"))
            .clone())
    }
    fn write(&mut self, block: u64, data: Vec<u8>) -> Result<(), Ext4Error> {
        assert!(
            self.blocks.contains_key(&block),
            "write of unallocated {block}"
        );
        assert_eq!(data.len(), self.bs);
        self.blocks.insert(block, data);
        Ok(())
    }
    fn alloc_tree_block(&mut self, _goal: u64) -> Result<u64, Ext4Error> {
        self.next += 1;
        self.allocs += 1;
        self.blocks.insert(self.next, vec![0xA5; self.bs]);
        Ok(self.next)
    }
    fn free_tree_block(&mut self, block: u64) -> Result<(), Ext4Error> {
        assert!(self.blocks.remove(&block).is_some(), "double free {block}");
        self.frees += 1;
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Independent checker over the raw bytes
// ---------------------------------------------------------------------------

/// (logical, physical, len, unwritten), decoded here, not by the library.
type Run = (u64, u64, u64, bool);

struct Checked {
    extents: Vec<Run>,
    blocks: BTreeSet<u64>,
    depth: u16,
}

fn check_tree(root: &[u8; 60], st: &Mem, seed: Option<u32>) -> Checked {
    let mut c = Checked {
        extents: Vec::new(),
        blocks: BTreeSet::new(),
        depth: le16(root, 6),
    };
    check_node(root, true, st, seed, 0, 1 << 32, &mut c);
    // Every extent in order, none overlapping.
    for w in c.extents.windows(2) {
        assert!(w[0].0 + w[0].2 <= w[1].0, "extents overlap: {w:?}");
    }
    let allocated: BTreeSet<u64> = st.blocks.keys().copied().collect();
    assert_eq!(c.blocks, allocated, "tree blocks vs allocated blocks");
    c
}

fn check_node(
    node: &[u8],
    is_root: bool,
    st: &Mem,
    seed: Option<u32>,
    lo: u64,
    hi: u64,
    c: &mut Checked,
) -> u16 {
    assert_eq!(le16(node, 0), 0xF30A, "magic");
    let entries = le16(node, 2) as usize;
    let max = le16(node, 4) as usize;
    let depth = le16(node, 6);
    let want_max = if is_root { 4 } else { (st.bs - 12) / 12 };
    assert_eq!(max, want_max, "eh_max");
    assert!(entries <= max, "eh_entries {entries} > eh_max {max}");
    assert!(depth <= 5);
    if !is_root {
        assert!(entries > 0, "an empty tree block");
        if let Some(seed) = seed {
            let end = 12 + 12 * max;
            assert_eq!(
                le32(node, end),
                crc32c::raw(seed, &node[..end]),
                "tail checksum differs from a full recomputation"
            );
        }
    } else if depth > 0 {
        assert!(entries > 0, "an empty index root");
    }
    let mut prev_key: Option<u64> = None;
    for i in 0..entries {
        let e = &node[12 + 12 * i..24 + 12 * i];
        let key = u64::from(le32(e, 0));
        assert!(key >= lo && key < hi, "key {key} outside [{lo}, {hi})");
        if let Some(p) = prev_key {
            assert!(key > p, "keys not increasing");
        }
        prev_key = Some(key);
        if depth == 0 {
            let raw = le16(e, 4);
            let (len, unwritten) = if raw > 32768 {
                (raw - 32768, true)
            } else {
                (raw, false)
            };
            assert!(len > 0);
            let phys = (u64::from(le16(e, 6)) << 32) | u64::from(le32(e, 8));
            assert!(key + u64::from(len) <= hi, "extent past its index range");
            c.extents.push((key, phys, u64::from(len), unwritten));
        } else {
            let child = u64::from(le32(e, 4)) | (u64::from(le16(e, 8)) << 32);
            assert!(c.blocks.insert(child), "block {child} reached twice");
            let next = if i + 1 < entries {
                u64::from(le32(node, 24 + 12 * i))
            } else {
                hi
            };
            let cb = st.blocks.get(&child).expect("child block exists");
            // spacekit keeps every index key equal to its child's first key.
            assert_eq!(
                u64::from(le32(cb, 12)),
                key,
                "index key != child's first key"
            );
            // The child's first key is at least the index key (checked by
            // the range) and its depth one less.
            let cd = check_node(cb, false, st, seed, key, next, c);
            assert_eq!(cd + 1, depth, "child depth");
        }
    }
    depth
}

// ---------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------

/// Logical start -> (physical, len, unwritten) of each inserted piece.
/// Physical start -> len of the same pieces: the test never maps a
/// physical block twice.
#[derive(Default)]
struct Model {
    pieces: BTreeMap<u64, (u64, u64, bool)>,
    phys: BTreeMap<u64, u64>,
}

/// Coalesces runs that continue each other (logically, physically, same
/// kind) regardless of the length caps: two equal mappings give equal
/// results however they are cut.
fn coalesce(runs: impl IntoIterator<Item = Run>) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for r in runs {
        match out.last_mut() {
            Some(l) if l.0 + l.2 == r.0 && l.1 + l.2 == r.1 && l.3 == r.3 => l.2 += r.2,
            _ => out.push(r),
        }
    }
    out
}

/// Compares two range lists, printing only the first difference.
fn same_ranges(got: Vec<(u64, u64)>, want: Vec<(u64, u64)>, op: usize) {
    if got != want {
        let i = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
        panic!(
            "freed at op {op}: {} ranges vs {} expected; first difference at {i}: {:?} vs {:?}",
            got.len(),
            want.len(),
            got.get(i),
            want.get(i)
        );
    }
}

/// Physical ranges, sorted and coalesced.
fn normalize(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.sort();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (p, l) in v {
        match out.last_mut() {
            Some(x) if x.0 + x.1 == p => x.1 += l,
            _ => out.push((p, l)),
        }
    }
    out
}

fn cap(unwritten: bool) -> u64 {
    if unwritten {
        32767
    } else {
        32768
    }
}

impl Model {
    fn end(&self) -> u64 {
        self.pieces.iter().next_back().map_or(0, |(l, p)| l + p.1)
    }

    /// Whether physical blocks `p .. p + len` are unmapped.
    fn phys_free(&self, p: u64, len: u64) -> bool {
        let before = self.phys.range(..p + len).next_back();
        before.is_none_or(|(&s, &l)| s + l <= p)
    }

    fn add(&mut self, logical: u64, physical: u64, len: u64, unwritten: bool) {
        assert!(self.phys_free(physical, len));
        self.pieces.insert(logical, (physical, len, unwritten));
        self.phys.insert(physical, len);
    }

    fn runs(&self) -> Vec<Run> {
        coalesce(self.pieces.iter().map(|(&l, &(p, n, u))| (l, p, n, u)))
    }

    /// Removes everything from `first` on; returns the lost physical ranges.
    fn truncate(&mut self, first: u64) -> Vec<(u64, u64)> {
        let mut lost = Vec::new();
        let tail: Vec<u64> = self.pieces.range(first..).map(|(&l, _)| l).collect();
        for l in tail {
            let (p, n, _) = self.pieces.remove(&l).unwrap();
            self.phys.remove(&p);
            lost.push((p, n));
        }
        if let Some((&l, v)) = self.pieces.range_mut(..first).next_back() {
            if l + v.1 > first {
                let keep = first - l;
                lost.push((v.0 + keep, v.1 - keep));
                v.1 = keep;
                self.phys.insert(v.0, keep);
            }
        }
        lost
    }
}

/// Checks the tree against the model: same mapping, no mergeable
/// neighbours.
fn check_against_model(root: &[u8; 60], st: &mut Mem, seed: Option<u32>, m: &Model) -> u16 {
    let c = check_tree(root, st, seed);
    let lib: Vec<Run> = extent::extents(root, st, seed)
        .unwrap()
        .iter()
        .map(|e| {
            (
                u64::from(e.logical),
                e.physical,
                u64::from(e.len),
                e.unwritten,
            )
        })
        .collect();
    assert_eq!(lib, c.extents, "extents() vs the raw blocks");
    assert_eq!(coalesce(c.extents.iter().copied()), m.runs(), "mapping");
    for w in c.extents.windows(2) {
        let (a, b) = (w[0], w[1]);
        let mergeable = a.0 + a.2 == b.0 && a.1 + a.2 == b.1 && a.3 == b.3 && a.2 + b.2 <= cap(a.3);
        assert!(!mergeable, "neighbours {a:?} {b:?} should have been merged");
    }
    let tb: BTreeSet<u64> = extent::tree_blocks(root, st, seed)
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(tb, c.blocks, "tree_blocks()");
    extent::validate(root, st, seed).unwrap();
    c.depth
}

struct Params {
    bs: usize,
    seed: Option<u32>,
    rng: u64,
    target_depth: u16,
    /// Chance of a physically adjacent (mergeable) extent.
    adjacent: f64,
    /// Chance of an insert into a hole rather than an append.
    hole: f64,
    /// Chance of a truncate.
    truncate: f64,
    /// Chance that a truncate empties the tree (else it cuts up to 200
    /// blocks off the end).
    zero: f64,
    max_ops: usize,
}

/// Runs random operations until the tree is `target_depth` deep; returns the
/// number of operations.
fn run_model(p: Params) -> usize {
    let mut rng = SmallRng::seed_from_u64(p.rng);
    let mut st = Mem::new(p.bs);
    let mut root = [0u8; 60];
    extent::init_root(&mut root);
    let mut m = Model::default();
    let mut phys_next: u64 = 1_000_000;
    let mut depth = 0;
    let mut max_depth = 0;
    let mut truncates = 0;
    for op in 0..p.max_ops {
        let n = m.pieces.len();
        if rng.random_bool(p.truncate) && n > 0 {
            let end = m.end();
            let first = if rng.random_bool(p.zero) {
                0
            } else {
                end - rng.random_range(0..=end.min(200))
            };
            let blocks_before = st.blocks.len() as u64;
            let frees_before = st.frees;
            let freed = extent::truncate(&mut root, &mut st, p.seed, first as u32).unwrap();
            let lost = m.truncate(first);
            same_ranges(normalize(freed), normalize(lost), op);
            assert_eq!(
                st.blocks.len() as u64,
                blocks_before - (st.frees - frees_before)
            );
            truncates += 1;
        } else {
            // Where: an append (maybe right after the end), or a hole.
            let unwritten = rng.random_bool(0.25);
            let big = rng.random_bool(0.02);
            let want_len: u64 = if big {
                rng.random_range(1..=cap(unwritten))
            } else {
                rng.random_range(1..=8)
            };
            let (logical, room) = if rng.random_bool(p.hole) && n > 1 {
                // A hole after a random piece, if any.
                let k = rng.random_range(0..n - 1);
                let (&l, &(_, len, _)) = m.pieces.iter().nth(k).unwrap();
                let (&next, _) = m.pieces.range(l + 1..).next().unwrap();
                let start = l + len;
                if start == next {
                    continue;
                }
                let s = if rng.random_bool(0.5) {
                    start
                } else {
                    rng.random_range(start..next)
                };
                (s, next - s)
            } else {
                let gap = if rng.random_bool(0.5) {
                    0
                } else {
                    rng.random_range(1..5)
                };
                (m.end() + gap, u64::MAX)
            };
            let len = want_len.min(room);
            // Physically: after the left piece, before the right one, or
            // somewhere new.
            let left = m
                .pieces
                .range(..logical)
                .next_back()
                .filter(|(l, v)| *l + v.1 == logical)
                .map(|(_, v)| v.0 + v.1)
                .filter(|&ph| m.phys_free(ph, len));
            let right = m
                .pieces
                .range(logical + len..)
                .next()
                .filter(|(l, v)| **l == logical + len && v.0 > len + 1_000_000)
                .map(|(_, v)| v.0 - len)
                .filter(|&ph| m.phys_free(ph, len));
            let (first, second) = if rng.random_bool(0.5) {
                (left, right)
            } else {
                (right, left)
            };
            let physical = match (rng.random_bool(p.adjacent), first, second) {
                (true, Some(ph), _) => ph,
                (true, None, Some(ph)) => ph,
                _ => {
                    phys_next += 1 + rng.random_range(0..2);
                    let ph = phys_next;
                    phys_next += len;
                    ph
                }
            };
            let e = Extent {
                logical: logical as u32,
                physical,
                len: len as u16,
                unwritten,
            };
            let allocs = st.allocs;
            let out = extent::insert(&mut root, &mut st, p.seed, e).unwrap();
            assert_eq!(u64::from(out.tree_blocks_added), st.allocs - allocs);
            m.add(logical, physical, len, unwritten);
            phys_next = phys_next.max(physical + len);
            // The new blocks map where they should (every time while the
            // tree is small, then every 16th insert).
            let probes = if n < 5000 || op % 16 == 0 {
                vec![logical, logical + len - 1]
            } else {
                Vec::new()
            };
            for probe in probes {
                let f = extent::find(&root, &mut st, p.seed, probe as u32)
                    .unwrap()
                    .expect("mapped");
                assert_eq!(
                    f.physical + (probe - u64::from(f.logical)),
                    physical + probe - logical
                );
                assert_eq!(f.unwritten, unwritten);
            }
            depth = out.depth;
        }
        // The full check: every operation while the tree is small, then
        // regularly, and whenever the depth changes.
        let d = extent::depth(&root).unwrap();
        let every = (m.pieces.len() / 16).max(1);
        if n < 600 || op % every == 0 || d != depth {
            let cd = check_against_model(&root, &mut st, p.seed, &m);
            assert_eq!(cd, d);
        }
        depth = d;
        max_depth = max_depth.max(d);
        if n < 5000 || op % 16 == 0 {
            let goal = extent::goal(&root, &mut st, p.seed).unwrap();
            let want = m.pieces.iter().next_back().map(|(_, v)| v.0 + v.1);
            assert_eq!(goal, want, "goal");
        }
        if d >= p.target_depth {
            check_against_model(&root, &mut st, p.seed, &m);
            assert!(truncates > 0 || p.truncate == 0.0);
            // Unlink: everything goes, every tree block is freed.
            let all = m.truncate(0);
            let freed = extent::truncate(&mut root, &mut st, p.seed, 0).unwrap();
            same_ranges(normalize(freed), normalize(all), op);
            assert!(st.blocks.is_empty(), "tree blocks left after truncate(0)");
            let mut empty = [0u8; 60];
            extent::init_root(&mut empty);
            assert_eq!(root, empty);
            eprintln!("depth {d} after {op} operations");
            return op;
        }
    }
    panic!(
        "depth {} not reached in {} operations (max depth {max_depth})",
        p.target_depth, p.max_ops
    );
}

#[test]
fn model_1k_depth2_mixed() {
    for (i, seed) in [Some(0x1234_5678), None].into_iter().enumerate() {
        run_model(Params {
            bs: 1024,
            seed,
            rng: 1 + i as u64,
            target_depth: 2,
            adjacent: 0.3,
            hole: 0.3,
            truncate: 0.01,
            zero: 0.05,
            max_ops: 100_000,
        });
    }
}

#[test]
fn model_1k_depth3() {
    run_model(Params {
        bs: 1024,
        seed: Some(0xC0FF_EE00),
        rng: 3,
        target_depth: 3,
        adjacent: 0.2,
        hole: 0.3,
        truncate: 0.002,
        zero: 0.05,
        max_ops: 200_000,
    });
}

#[test]
fn model_4k_depth2_mixed() {
    run_model(Params {
        bs: 4096,
        seed: Some(0x0BAD_F00D),
        rng: 4,
        target_depth: 2,
        adjacent: 0.3,
        hole: 0.3,
        truncate: 0.005,
        zero: 0.05,
        max_ops: 100_000,
    });
}

#[test]
fn model_4k_depth3() {
    // 4 * 340 full leaves: mostly appends, so leaves fill up.
    run_model(Params {
        bs: 4096,
        seed: Some(0xFEED_0001),
        rng: 5,
        target_depth: 3,
        adjacent: 0.05,
        hole: 0.02,
        truncate: 0.0005,
        zero: 0.0,
        max_ops: 1_000_000,
    });
}

#[test]
fn merges_across_leaf_boundaries() {
    // Fill two leaves with one-block extents two blocks apart, then fill
    // each gap: every fill merges with both neighbours, wherever they are,
    // until one extent is left.
    for bs in [1024, 4096] {
        let mut st = Mem::new(bs);
        let mut root = [0u8; 60];
        extent::init_root(&mut root);
        let seed = Some(99);
        let n = 3 * (bs as u32 - 12) / 12;
        for i in 0..n {
            let e = Extent {
                logical: 2 * i,
                physical: 1_000_000 + 2 * u64::from(i),
                len: 1,
                unwritten: false,
            };
            assert!(!extent::insert(&mut root, &mut st, seed, e).unwrap().merged);
        }
        assert_eq!(extent::depth(&root).unwrap(), 1);
        // Fill from the right so leaves empty out at their start.
        for i in (0..n - 1).rev() {
            let e = Extent {
                logical: 2 * i + 1,
                physical: 1_000_000 + 2 * u64::from(i) + 1,
                len: 1,
                unwritten: false,
            };
            assert!(extent::insert(&mut root, &mut st, seed, e).unwrap().merged);
            check_tree(&root, &st, seed);
        }
        let all = extent::extents(&root, &mut st, seed).unwrap();
        assert_eq!(
            all,
            [Extent {
                logical: 0,
                physical: 1_000_000,
                len: (2 * n - 1) as u16,
                unwritten: false
            }]
        );
        // Emptied leaves were freed; the last one stays.
        assert_eq!(st.blocks.len(), 1);
    }
}

#[test]
fn length_caps_stop_merging() {
    let mut st = Mem::new(1024);
    let mut root = [0u8; 60];
    extent::init_root(&mut root);
    for unwritten in [false, true] {
        extent::truncate(&mut root, &mut st, None, 0).unwrap();
        let c = if unwritten { 32767 } else { 32768 };
        let a = Extent {
            logical: 0,
            physical: 1000,
            len: c - 1,
            unwritten,
        };
        extent::insert(&mut root, &mut st, None, a).unwrap();
        let b = Extent {
            logical: u32::from(c) - 1,
            physical: 1000 + u64::from(c) - 1,
            len: 1,
            unwritten,
        };
        assert!(extent::insert(&mut root, &mut st, None, b).unwrap().merged);
        let d = Extent {
            logical: u32::from(c),
            physical: 1000 + u64::from(c),
            len: 1,
            unwritten,
        };
        assert!(!extent::insert(&mut root, &mut st, None, d).unwrap().merged);
        let got = extent::extents(&root, &mut st, None).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].len, c);
        // The on-disk length encodes the kind.
        let raw = u16::from_le_bytes([root[16], root[17]]);
        assert_eq!(raw, if unwritten { 32768 + c } else { c });
    }
    // Written and unwritten neighbours never merge.
    extent::truncate(&mut root, &mut st, None, 0).unwrap();
    let w = Extent {
        logical: 0,
        physical: 1000,
        len: 5,
        unwritten: false,
    };
    extent::insert(&mut root, &mut st, None, w).unwrap();
    let u = Extent {
        logical: 5,
        physical: 1005,
        len: 5,
        unwritten: true,
    };
    assert!(!extent::insert(&mut root, &mut st, None, u).unwrap().merged);
}

#[test]
fn corrupt_blocks_are_refused_and_not_written() {
    let seed = Some(5);
    let mut st = Mem::new(1024);
    let mut root = [0u8; 60];
    extent::init_root(&mut root);
    for i in 0..200u32 {
        let e = Extent {
            logical: 3 * i,
            physical: 1_000_000 + 3 * u64::from(i),
            len: 1,
            unwritten: false,
        };
        extent::insert(&mut root, &mut st, seed, e).unwrap();
    }
    let leaf = *extent::tree_blocks(&root, &mut st, seed)
        .unwrap()
        .last()
        .unwrap();
    let good = st.blocks[&leaf].clone();
    // eh_max larger than the block holds; a bad magic; a bad checksum.
    type Damage = (usize, u8, fn(&Ext4Error) -> bool);
    let cases: [Damage; 3] = [
        (5, 0x7F, |e| {
            matches!(
                e,
                Ext4Error::Corrupt {
                    field: "eh_max",
                    ..
                }
            )
        }),
        (0, 0x00, |e| {
            matches!(
                e,
                Ext4Error::Corrupt {
                    field: "eh_magic",
                    ..
                }
            )
        }),
        (30, 0x5A, |e| {
            matches!(
                e,
                Ext4Error::BadChecksum {
                    what: "extent block",
                    ..
                }
            )
        }),
    ];
    for (off, byte, want) in cases {
        let mut bad = good.clone();
        bad[off] = byte;
        st.blocks.insert(leaf, bad.clone());
        let before = root;
        let e = extent::extents(&root, &mut st, seed).unwrap_err();
        assert!(want(&e), "{e:?}");
        let e = extent::insert(
            &mut root,
            &mut st,
            seed,
            Extent {
                logical: 10_000,
                physical: 5_000_000,
                len: 1,
                unwritten: false,
            },
        )
        .unwrap_err();
        assert!(want(&e), "{e:?}");
        assert!(extent::truncate(&mut root, &mut st, seed, 0).is_err());
        assert_eq!(root, before);
        assert_eq!(st.blocks[&leaf], bad, "a refused block was written");
    }
}

// ---------------------------------------------------------------------------
// Real trees from e2fsprogs
// ---------------------------------------------------------------------------

fn debugfs(img: &Path, args: &[&str]) -> String {
    let out = Command::new(tool("debugfs"))
        .args(args)
        .arg(img)
        .env("E2FSPROGS_FAKE_TIME", "1700000000")
        .output()
        .unwrap();
    assert!(out.status.success(), "debugfs {args:?} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A 1 KiB-block metadata_csum image holding `/f` (a 450-block file written
/// into 400 one-block holes: a depth-2 tree) and `/g` (600 unwritten blocks
/// fallocated into 400 other holes).
fn fragmented_image(dir: &TempDir) -> PathBuf {
    let img = dir.path("img");
    let st = Command::new(tool("mkfs.ext4"))
        .args(["-q", "-F", "-O", "metadata_csum", "-b", "1024"])
        .args(["-U", "01234567-89ab-cdef-0123-456789abcdef"])
        .args(["-E", "hash_seed=01234567-89ab-cdef-0123-456789abcdef"])
        .arg(&img)
        .arg("32M")
        .env("E2FSPROGS_FAKE_TIME", "1700000000")
        .status()
        .unwrap();
    assert!(st.success());
    let small = dir.path("small");
    let big = dir.path("big");
    fs::write(&small, vec![0x11u8; 1024]).unwrap();
    fs::write(&big, (0..450 * 1024).map(|i| i as u8).collect::<Vec<u8>>()).unwrap();
    let mut cmds = String::new();
    for i in 0..800 {
        cmds += &format!("write {} /s{i}\n", small.display());
    }
    for i in (0..800).step_by(2) {
        cmds += &format!("rm /s{i}\n");
    }
    cmds += &format!("write {} /f\n", big.display());
    for i in (1..800).step_by(2) {
        cmds += &format!("rm /s{i}\n");
    }
    cmds += "write /dev/null /g\nfallocate /g 0 599\n";
    let cmdfile = dir.path("cmds");
    fs::write(&cmdfile, cmds).unwrap();
    debugfs(&img, &["-w", "-f", cmdfile.to_str().unwrap()]);
    img
}

/// Reads a file's inode from the image: (i_block, seed_i).
fn inode_root(img: &Path, name: &str) -> ([u8; 60], u32) {
    let stat = debugfs(img, &["-R", &format!("stat {name}")]);
    let ino: u32 = stat
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("Inode: N in debugfs stat");
    let image = Image::open(img, OpenMode::ReadOnly).unwrap();
    let info = image.info();
    let g = (ino - 1) / info.inodes_per_group;
    let idx = u64::from((ino - 1) % info.inodes_per_group);
    let table = image.group(g).unwrap().inode_table;
    let off = table * u64::from(info.block_size) + idx * u64::from(info.inode_size);
    let mut inode = vec![0u8; info.inode_size as usize];
    fs::File::open(img)
        .unwrap()
        .read_exact_at(&mut inode, off)
        .unwrap();
    assert_eq!(le32(&inode, 0x20) & 0x80000, 0x80000, "EXTENTS_FL");
    let generation = le32(&inode, 0x64);
    let seed = crc32c::raw(info.checksum_seed, &ino.to_le_bytes());
    let seed = crc32c::raw(seed, &generation.to_le_bytes());
    let mut root = [0u8; 60];
    root.copy_from_slice(&inode[0x28..0x28 + 60]);
    (root, seed)
}

/// Reads tree blocks from an image file; never writes.
struct FileStore {
    file: fs::File,
    bs: usize,
}

impl ExtentStore for FileStore {
    fn block_size(&self) -> usize {
        self.bs
    }
    fn read(&mut self, block: u64) -> Result<Vec<u8>, Ext4Error> {
        let mut b = vec![0u8; self.bs];
        self.file
            .read_exact_at(&mut b, block * self.bs as u64)
            .unwrap();
        Ok(b)
    }
    fn write(&mut self, _: u64, _: Vec<u8>) -> Result<(), Ext4Error> {
        panic!("read-only store written")
    }
    fn alloc_tree_block(&mut self, _: u64) -> Result<u64, Ext4Error> {
        panic!("read-only store")
    }
    fn free_tree_block(&mut self, _: u64) -> Result<(), Ext4Error> {
        panic!("read-only store")
    }
}

/// `debugfs -R "ex NAME"`: (leaf extents, index-node physical blocks, depth).
fn debugfs_ex(img: &Path, name: &str) -> (Vec<Extent>, BTreeSet<u64>, u16) {
    let out = debugfs(img, &["-R", &format!("ex {name}")]);
    let mut leaves = Vec::new();
    let mut blocks = BTreeSet::new();
    let mut depth = 0;
    for line in out.lines().skip(1) {
        // " 1/ 2   1/ 83     0 -     0  2328 -  2328      1 Uninit"
        let t: Vec<&str> = line
            .split(|c: char| c.is_whitespace() || c == '/' || c == '-')
            .filter(|s| !s.is_empty())
            .collect();
        if t.len() < 6 {
            continue;
        }
        let level: u16 = t[0].parse().unwrap();
        let max: u16 = t[1].parse().unwrap();
        depth = max;
        let logical: u32 = t[4].parse().unwrap();
        let physical: u64 = t[6].parse().unwrap();
        if level < max {
            // An index entry: the block below.
            blocks.insert(physical);
        } else {
            let len: u16 = t[8].parse().unwrap();
            leaves.push(Extent {
                logical,
                physical,
                len,
                unwritten: t.get(9) == Some(&"Uninit"),
            });
        }
    }
    (leaves, blocks, depth)
}

#[test]
fn real_trees_match_debugfs() {
    if !e2fs::have_e2fsprogs(&["mkfs.ext4", "debugfs", "e2fsck"]) {
        return;
    }
    let dir = TempDir::new("extent-real");
    let img = fragmented_image(&dir);
    let bs = 1024;
    let mut depths = Vec::new();
    for name in ["/f", "/g"] {
        let (root, seed) = inode_root(&img, name);
        let mut st = FileStore {
            file: fs::File::open(&img).unwrap(),
            bs,
        };
        let (want, want_blocks, want_depth) = debugfs_ex(&img, name);
        assert!(want.len() > 100, "{name}: not fragmented: {want:?}");
        let got = extent::extents(&root, &mut st, Some(seed)).unwrap();
        assert_eq!(got, want, "{name}: extents vs debugfs ex");
        let blocks: BTreeSet<u64> = extent::tree_blocks(&root, &mut st, Some(seed))
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(blocks, want_blocks, "{name}: tree blocks");
        assert_eq!(extent::depth(&root).unwrap(), want_depth);
        extent::validate(&root, &mut st, Some(seed)).unwrap();
        for e in &want {
            let f =
                extent::find(&root, &mut st, Some(seed), e.logical + u32::from(e.len) - 1).unwrap();
            assert_eq!(f, Some(*e));
        }
        let last = want.last().unwrap();
        assert_eq!(
            extent::goal(&root, &mut st, Some(seed)).unwrap(),
            Some(last.physical_end())
        );
        depths.push(want_depth);
        // A wrong seed fails every block's checksum.
        assert!(matches!(
            extent::extents(&root, &mut st, Some(seed ^ 1)),
            Err(Ext4Error::BadChecksum { .. })
        ));
        if name == "/g" {
            assert!(
                want.iter().all(|e| e.unwritten),
                "fallocate gives unwritten"
            );
        }
    }
    assert_eq!(depths[0], 2, "/f should be two levels deep");
}

#[test]
fn real_tree_with_a_flipped_byte_is_refused() {
    if !e2fs::have_e2fsprogs(&["mkfs.ext4", "debugfs", "e2fsck"]) {
        return;
    }
    let dir = TempDir::new("extent-flip");
    let img = fragmented_image(&dir);
    let (root, seed) = inode_root(&img, "/f");
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&img)
        .unwrap();
    let mut st = FileStore {
        file: file.try_clone().unwrap(),
        bs: 1024,
    };
    let blocks = extent::tree_blocks(&root, &mut st, Some(seed)).unwrap();
    let victim = *blocks.last().unwrap();
    // One bit of an extent's physical block number, past the header.
    let off = victim * 1024 + 12 + 12 * 3 + 8;
    let mut b = [0u8; 1];
    file.read_exact_at(&mut b, off).unwrap();
    file.write_all_at(&[b[0] ^ 0x10], off).unwrap();
    assert!(matches!(
        extent::extents(&root, &mut st, Some(seed)),
        Err(Ext4Error::BadChecksum {
            what: "extent block",
            ..
        })
    ));
    // e2fsck agrees that the block is bad.
    let out = Command::new(tool("e2fsck"))
        .args(["-fn"])
        .arg(&img)
        .output()
        .unwrap();
    let all = String::from_utf8_lossy(&out.stdout);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        all.contains("checksum does not match extent"),
        "e2fsck -fn: {all}"
    );
}
