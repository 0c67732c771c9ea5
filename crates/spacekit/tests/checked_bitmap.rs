//! Integration tests for `spacekit::checked_bitmap::CheckedBitmap`: every
//! operation against a `Vec<bool>` model, with the kept checksum compared to
//! an independent bit-at-a-time CRC-32C of the model's bytes, for bitmaps
//! built on both engines (`from_bytes`, which uses `Engine::detect()`, and
//! `from_bytes_with(Engine::portable(), ..)`), and with a free-space index
//! over all the bits or over the checksummed ones only, checked against the
//! bits (`testing::Validate`) and the model's free runs after every
//! operation.

use std::ops::Bound;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestCaseResult;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use spacekit::bitmap::BitmapError;
use spacekit::checked_bitmap::CheckedBitmap;
use spacekit::crc32c::{self, CrcError, Engine};
use spacekit::freespace::FreeSpaceError;
use spacekit::testing::Validate;

// ---------------------------------------------------------------------------
// The reference and the model
// ---------------------------------------------------------------------------

/// An independent raw CRC-32C, bit at a time (no inversion in or out).
mod reference {
    pub fn raw(mut crc: u32, bytes: &[u8]) -> u32 {
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0x82F6_3B78
                } else {
                    crc >> 1
                };
            }
        }
        crc
    }
}

/// Above this many bytes the bit-at-a-time reference is too slow to run after
/// every operation; the bulk `crc32c::raw` (tested against a bit reference in
/// `tests/crc32c.rs`) stands in.
const REF_MAX: usize = 1024;

/// The checksum `bytes` should have under `seed`.
fn want_crc(seed: u32, bytes: &[u8]) -> u32 {
    if bytes.len() <= REF_MAX {
        reference::raw(seed, bytes)
    } else {
        crc32c::raw(seed, bytes)
    }
}

/// The model's on-disk bytes (bit `i` = bit `i % 8` of byte `i / 8`).
fn model_bytes(m: &[bool]) -> Vec<u8> {
    m.chunks(8)
        .map(|c| {
            c.iter()
                .enumerate()
                .fold(0u8, |b, (i, &x)| b | (u8::from(x) << i))
        })
        .collect()
}

fn model_of(bytes: &[u8]) -> Vec<bool> {
    (0..bytes.len() * 8)
        .map(|i| bytes[i / 8] >> (i % 8) & 1 == 1)
        .collect()
}

/// An update, as the model understands it. Ranges are `start..end` as given
/// (possibly invalid).
#[derive(Clone, Debug)]
enum Op {
    Set(usize),
    Clear(usize),
    Flip(usize),
    SetRange(usize, usize),
    ClearRange(usize, usize),
    FlipRange(usize, usize),
}

/// The longest clear run of `m[..len]` as `(start, length)`, the lowest of
/// equals.
fn model_largest_free(m: &[bool], len: usize) -> Option<(usize, usize)> {
    let mut best: Option<(usize, usize)> = None;
    let mut i = 0;
    while i < len {
        if m[i] {
            i += 1;
            continue;
        }
        let s = i;
        while i < len && !m[i] {
            i += 1;
        }
        if best.is_none_or(|(_, n)| i - s > n) {
            best = Some((s, i - s));
        }
    }
    best
}

/// The lowest multiple of 8 starting 8 clear bits inside `m[..len]`.
fn model_first_fit_8(m: &[bool], len: usize) -> Option<usize> {
    (0..len.saturating_sub(7))
        .step_by(8)
        .find(|&s| m[s..s + 8].iter().all(|&b| !b))
}

/// Both engines' bitmaps (the detected one also with a free-space index over
/// all its bits and over its checksummed bits) and the model they must
/// match.
struct Harness {
    maps: Vec<(&'static str, CheckedBitmap)>,
    model: Vec<bool>,
    seed: u32,
    csum_len: usize,
}

impl Harness {
    fn new(bytes: &[u8], seed: u32, csum_len: usize) -> Harness {
        let detect = CheckedBitmap::from_bytes(bytes, seed, csum_len).unwrap();
        let portable =
            CheckedBitmap::from_bytes_with(Engine::portable(), bytes, seed, csum_len).unwrap();
        let indexed = detect.clone().with_index(bytes.len() * 8).unwrap();
        let prefix = detect.clone().with_index(csum_len * 8).unwrap();
        let h = Harness {
            maps: vec![
                ("detect", detect),
                ("portable", portable),
                ("indexed", indexed),
                ("indexed-prefix", prefix),
            ],
            model: model_of(bytes),
            seed,
            csum_len,
        };
        h.check("new").unwrap();
        h
    }

    /// The checksum both maps keep (checked equal by `check`).
    fn crc(&self) -> u32 {
        self.maps[0].1.checksum()
    }

    fn bytes(&self) -> Vec<u8> {
        self.maps[0].1.to_bytes()
    }

    /// Everything observable against the model.
    fn check(&self, after: &str) -> TestCaseResult {
        let mb = model_bytes(&self.model);
        let want = want_crc(self.seed, &mb[..self.csum_len]);
        for (name, map) in &self.maps {
            prop_assert_eq!(map.len(), self.model.len(), "{} len after {}", name, after);
            prop_assert_eq!(map.is_empty(), self.model.is_empty());
            prop_assert_eq!(map.csum_len(), self.csum_len);
            prop_assert_eq!(map.seed(), self.seed);
            prop_assert!(map.to_bytes() == mb, "{} bits differ after {}", name, after);
            prop_assert_eq!(
                map.checksum(),
                want,
                "{} checksum after {} (csum_len {})",
                name,
                after,
                self.csum_len
            );
            prop_assert_eq!(map.recompute(), want, "{} recompute after {}", name, after);
            prop_assert!(map.verify(), "{} verify after {}", name, after);
            if let Err(e) = map.validate() {
                prop_assert!(false, "{} validate after {}: {}", name, after, e);
            }
            // The index's searches see the model's free runs (over the bits
            // it covers).
            if let Some(ix) = map.index() {
                let n = ix.len() as usize;
                prop_assert_eq!(
                    map.largest_free(),
                    model_largest_free(&self.model, n),
                    "{} largest free after {}",
                    name,
                    after
                );
                prop_assert_eq!(
                    map.first_fit(8, 8, 0, 0),
                    Ok(model_first_fit_8(&self.model, n)),
                    "{} first fit after {}",
                    name,
                    after
                );
            }
        }
        Ok(())
    }

    /// Applies `op` to every map and to the model, checks the returned value
    /// and then every bit and the checksum. Returns the first map's result
    /// (single-bit results as 0 or 1).
    fn apply(&mut self, op: &Op) -> Result<Result<usize, BitmapError>, TestCaseError> {
        let len = self.model.len();
        let (crc0, bytes0) = (self.crc(), self.bytes());
        let mut first = None;
        // What the model says, computed before it changes.
        let want: Result<usize, BitmapError> = match *op {
            Op::Set(i) | Op::Clear(i) | Op::Flip(i) => {
                if i < len {
                    Ok(usize::from(self.model[i]))
                } else {
                    Err(BitmapError::IndexOutOfBounds { index: i, len })
                }
            }
            Op::SetRange(s, e) | Op::ClearRange(s, e) | Op::FlipRange(s, e) => {
                if s <= e && e <= len {
                    let ones = self.model[s..e].iter().filter(|&&b| b).count();
                    Ok(match op {
                        Op::SetRange(..) => (e - s) - ones,
                        Op::ClearRange(..) => ones,
                        _ => e - s,
                    })
                } else {
                    Err(BitmapError::RangeOutOfBounds {
                        start: s,
                        end: e,
                        len,
                    })
                }
            }
        };
        for (name, map) in &mut self.maps {
            let got = match *op {
                Op::Set(i) => map.set(i).map(usize::from),
                Op::Clear(i) => map.clear(i).map(usize::from),
                Op::Flip(i) => map.flip(i).map(usize::from),
                Op::SetRange(s, e) => map.set_range(s..e),
                Op::ClearRange(s, e) => map.clear_range(s..e),
                Op::FlipRange(s, e) => map.flip_range(s..e),
            };
            prop_assert_eq!(&got, &want, "{} {:?}", name, op);
            if got.is_err() {
                prop_assert_eq!(
                    map.checksum(),
                    crc0,
                    "{} {:?} changed the checksum",
                    name,
                    op
                );
                prop_assert!(map.to_bytes() == bytes0, "{} {:?} changed bits", name, op);
            }
            first.get_or_insert(got);
        }
        if want.is_ok() {
            match *op {
                Op::Set(i) => self.model[i] = true,
                Op::Clear(i) => self.model[i] = false,
                Op::Flip(i) => self.model[i] = !self.model[i],
                Op::SetRange(s, e) => self.model[s..e].fill(true),
                Op::ClearRange(s, e) => self.model[s..e].fill(false),
                Op::FlipRange(s, e) => self.model[s..e].iter_mut().for_each(|b| *b = !*b),
            }
        }
        self.check(&format!("{op:?}"))?;
        Ok(first.unwrap())
    }

    /// `apply` for plain tests.
    fn run(&mut self, op: Op) -> Result<usize, BitmapError> {
        self.apply(&op).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `run` for an op that must succeed.
    fn ok(&mut self, op: Op) -> usize {
        self.run(op.clone())
            .unwrap_or_else(|e| panic!("{op:?} failed: {e}"))
    }
}

fn random_bytes(rng: &mut SmallRng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill_bytes(&mut v);
    v
}

// ---------------------------------------------------------------------------
// Construction
// ---------------------------------------------------------------------------

#[test]
fn from_bytes_checksums_the_first_csum_len_bytes() {
    let mut rng = SmallRng::seed_from_u64(0xb17_0001);
    let bytes = random_bytes(&mut rng, 4096);
    let seed = 0xDEAD_BEEF;
    // 2048 is ext4's block bitmap with clusters_per_group = 16384 in a 4 KiB
    // block.
    for csum_len in [4096, 2048, 0, 1, 7, 8, 13, 4095] {
        let want = reference::raw(seed, &bytes[..csum_len]);
        let maps = [
            CheckedBitmap::from_bytes(&bytes, seed, csum_len).unwrap(),
            CheckedBitmap::from_bytes_with(Engine::detect(), &bytes, seed, csum_len).unwrap(),
            CheckedBitmap::from_bytes_with(Engine::portable(), &bytes, seed, csum_len).unwrap(),
        ];
        for map in maps {
            assert_eq!(map.checksum(), want, "csum_len {csum_len}");
            assert_eq!(map.recompute(), want, "csum_len {csum_len}");
            assert!(map.verify());
            assert_eq!(map.csum_len(), csum_len);
            assert_eq!(map.seed(), seed);
            assert_eq!(map.len(), 4096 * 8);
            assert!(!map.is_empty());
            assert_eq!(map.to_bytes(), bytes);
            assert_eq!(map.bitmap().to_le_bytes(), bytes);
            let (bits, crc) = map.into_parts();
            assert_eq!(crc, want);
            assert_eq!(bits.to_le_bytes(), bytes);
        }
    }
    // A prefix checksum really is a prefix checksum.
    assert_ne!(
        CheckedBitmap::from_bytes(&bytes, seed, 2048)
            .unwrap()
            .checksum(),
        reference::raw(seed, &bytes)
    );
    // from_bytes is from_bytes_with the detected engine.
    assert_eq!(
        CheckedBitmap::from_bytes(&bytes, seed, 100).unwrap(),
        CheckedBitmap::from_bytes_with(Engine::detect(), &bytes, seed, 100).unwrap()
    );
}

#[test]
fn from_bytes_rejects_csum_len_past_the_end() {
    for (len, csum_len) in [(0, 1), (10, 11), (4096, 4097), (4096, usize::MAX)] {
        let bytes = vec![0x5Au8; len];
        let want = CrcError::ChecksumLenTooLong { csum_len, len };
        assert_eq!(
            CheckedBitmap::from_bytes(&bytes, 1, csum_len),
            Err(want.clone())
        );
        assert_eq!(
            CheckedBitmap::from_bytes_with(Engine::portable(), &bytes, 1, csum_len),
            Err(want.clone())
        );
        assert!(!want.to_string().is_empty());
    }
}

#[test]
fn empty_bitmap() {
    let mut h = Harness::new(&[], 0x1234_5678, 0);
    assert_eq!(h.crc(), 0x1234_5678);
    assert!(h.maps[0].1.is_empty());
    assert_eq!(
        h.run(Op::Set(0)),
        Err(BitmapError::IndexOutOfBounds { index: 0, len: 0 })
    );
    assert_eq!(h.run(Op::SetRange(0, 0)), Ok(0));
    assert_eq!(h.run(Op::FlipRange(0, 0)), Ok(0));
    assert_eq!(
        h.run(Op::ClearRange(0, 1)),
        Err(BitmapError::RangeOutOfBounds {
            start: 0,
            end: 1,
            len: 0
        })
    );
    for (_, map) in &mut h.maps {
        assert_eq!(map.set_range(..), Ok(0));
        assert_eq!(map.checksum(), 0x1234_5678);
    }
}

// ---------------------------------------------------------------------------
// Updates
// ---------------------------------------------------------------------------

#[test]
fn zero_csum_len_keeps_the_seed() {
    let mut rng = SmallRng::seed_from_u64(0xb17_0002);
    let bytes = random_bytes(&mut rng, 64);
    let seed = 0xCAFE_F00D;
    let mut h = Harness::new(&bytes, seed, 0);
    for op in [
        Op::SetRange(0, 512),
        Op::ClearRange(3, 500),
        Op::FlipRange(0, 512),
        Op::Set(0),
        Op::Clear(0),
        Op::Flip(511),
        Op::SetRange(100, 300),
    ] {
        h.ok(op);
        assert_eq!(h.crc(), seed);
    }
    assert_ne!(h.bytes(), bytes);
}

#[test]
fn single_bit_ops_follow_the_model() {
    let mut rng = SmallRng::seed_from_u64(0xb17_0003);
    let bytes = random_bytes(&mut rng, 37);
    let csum_len = 29;
    let mut h = Harness::new(&bytes, 0x0F0F_1234, csum_len);
    for i in 0..37 * 8 {
        let was = h.model[i];
        let inside = i < csum_len * 8;
        let c = h.crc();
        assert_eq!(h.run(Op::Set(i)), Ok(usize::from(was)));
        assert_eq!(h.crc() != c, !was && inside, "set({i}) checksum change");
        assert_eq!(h.run(Op::Set(i)), Ok(1));
        let c = h.crc();
        assert_eq!(h.run(Op::Clear(i)), Ok(1));
        assert_eq!(h.crc() != c, inside, "clear({i}) checksum change");
        assert_eq!(h.run(Op::Clear(i)), Ok(0));
        let c = h.crc();
        assert_eq!(h.run(Op::Flip(i)), Ok(0));
        assert_eq!(h.crc() != c, inside, "flip({i}) checksum change");
        assert_eq!(h.run(Op::Flip(i)), Ok(1));
        if was {
            h.ok(Op::Set(i));
        }
    }
    // Back where it started.
    assert_eq!(h.bytes(), bytes);
    assert_eq!(h.crc(), reference::raw(0x0F0F_1234, &bytes[..csum_len]));
}

#[test]
fn bits_past_csum_len_do_not_touch_the_checksum() {
    // An ext4 4 KiB block bitmap with 16384 clusters per group: the second
    // half is padding (which ext4 sets to ones) and is not checksummed.
    let mut rng = SmallRng::seed_from_u64(0xb17_0004);
    let bytes = random_bytes(&mut rng, 4096);
    let mut h = Harness::new(&bytes, 0x7777_0001, 2048);
    let crc = h.crc();
    let ops = [
        Op::SetRange(16384, 32768),
        Op::ClearRange(16384, 20000),
        Op::FlipRange(20000, 32768),
        Op::Set(16384),
        Op::Clear(32767),
        Op::Flip(16385),
        Op::SetRange(16390, 16391),
        Op::ClearRange(30000, 32768),
    ];
    let mut changed_bytes = 0;
    for op in ops {
        let before = h.bytes();
        h.ok(op.clone());
        changed_bytes += usize::from(h.bytes() != before);
        assert_eq!(h.crc(), crc, "{op:?}");
    }
    assert!(changed_bytes >= 6, "only {changed_bytes} ops changed bits");
    // And a change inside moves it.
    h.ok(Op::Flip(16383));
    assert_ne!(h.crc(), crc);
}

/// Ranges across `8 * csum_len`: all clear (flip path), all set (nothing to
/// do) and mixed (splice path), for boundaries on and off word edges.
#[test]
fn ranges_crossing_the_csum_boundary() {
    let mut rng = SmallRng::seed_from_u64(0xb17_0005);
    for (len, csum_len) in [
        (4096usize, 2048usize),
        (64, 13),
        (64, 8),
        (200, 100),
        (40, 1),
        (50, 49),
    ] {
        let cb = csum_len * 8;
        let nbits = len * 8;
        let spans = [
            (cb.saturating_sub(37), (cb + 50).min(nbits)),
            (cb - 1, cb + 1),
            (cb.saturating_sub(200), nbits),
            (0, nbits),
            (cb.saturating_sub(64), (cb + 64).min(nbits)),
        ];
        for (s, e) in spans {
            let seed: u32 = rng.random();
            // All clear: every bit flips.
            let mut h = Harness::new(&vec![0u8; len], seed, csum_len);
            assert_eq!(h.run(Op::SetRange(s, e)), Ok(e - s));
            // All set now: setting again changes nothing.
            let c = h.crc();
            assert_eq!(h.run(Op::SetRange(s, e)), Ok(0));
            assert_eq!(h.crc(), c);
            // Clearing all of it flips back to the start.
            assert_eq!(h.run(Op::ClearRange(s, e)), Ok(e - s));
            assert_eq!(h.crc(), reference::raw(seed, &vec![0u8; csum_len]));
            assert_eq!(h.run(Op::ClearRange(s, e)), Ok(0));

            // Mixed, from random contents.
            let bytes = random_bytes(&mut rng, len);
            let mut h = Harness::new(&bytes, seed, csum_len);
            h.ok(Op::SetRange(s, e));
            let bytes = random_bytes(&mut rng, len);
            let mut h2 = Harness::new(&bytes, seed, csum_len);
            h2.ok(Op::ClearRange(s, e));
            h2.ok(Op::FlipRange(s, e));
            // Mixed with the changed bits only on one side of the boundary.
            let mut h3 = Harness::new(&vec![0xFF; len], seed, csum_len);
            h3.ok(Op::Clear(s));
            assert_eq!(h3.run(Op::SetRange(s, e)), Ok(1));
            h3.ok(Op::Clear(e - 1));
            assert_eq!(h3.run(Op::SetRange(s, e)), Ok(1));
        }
    }
}

#[test]
fn all_clear_all_set_and_mixed_ranges() {
    let mut h = Harness::new(&vec![0u8; 4096], 0xABCD_EF01, 4096);
    assert_eq!(h.run(Op::SetRange(100, 30000)), Ok(29900)); // all clear
    assert_eq!(h.run(Op::SetRange(100, 30000)), Ok(0)); // all set
    assert_eq!(h.run(Op::SetRange(50, 30050)), Ok(100)); // mixed: both ends
    assert_eq!(h.run(Op::ClearRange(0, 32768)), Ok(30000)); // mixed
    assert_eq!(h.run(Op::ClearRange(0, 32768)), Ok(0));
    assert_eq!(h.run(Op::FlipRange(7, 32761)), Ok(32754));
    assert_eq!(h.run(Op::ClearRange(0, 32768)), Ok(32754)); // mixed, all words
    assert_eq!(h.crc(), reference::raw(0xABCD_EF01, &[0u8; 4096]));
    // Ranges inside one word.
    assert_eq!(h.run(Op::SetRange(64, 128)), Ok(64));
    assert_eq!(h.run(Op::SetRange(60, 70)), Ok(4));
    assert_eq!(h.run(Op::ClearRange(65, 66)), Ok(1));
    assert_eq!(h.run(Op::SetRange(64, 127)), Ok(1));
}

/// Mixed ranges whose changed bits span exactly `k` words, around the
/// 32-word chunk of the splice path, at several alignments.
#[test]
fn mixed_ranges_spanning_many_words() {
    for k in (1..=70).chain([96, 97, 128, 129, 500, 1000]) {
        for (lead, skew) in [(0, 0), (3, 17), (1, 63)] {
            let first_word: usize = 2 + lead;
            let s = first_word * 64 + skew;
            let e = ((first_word + k) * 64 - skew).max(s + 1);
            let len = (first_word + k + 2) * 8;
            // The whole buffer, a ragged end, and ending right after the range
            // (possibly inside the range's last word).
            for csum_len in [len, len - 3, e.div_ceil(8)] {
                // All set but for one bit at each end of the span (and one
                // inside): set_range changes only those, k words apart.
                let mut h = Harness::new(&vec![0xFF; len], 0x5EED_0000 ^ k as u32, csum_len);
                let mut holes = vec![s, e - 1, (s + e) / 2];
                holes.sort_unstable();
                holes.dedup();
                for &b in &holes {
                    h.ok(Op::Clear(b));
                }
                let c = h.crc();
                assert_eq!(
                    h.run(Op::SetRange(s.saturating_sub(5), e + 5)),
                    Ok(holes.len()),
                    "k={k} lead={lead} skew={skew}"
                );
                assert_ne!(h.crc(), c);
                // And the clear direction, from all clear.
                let mut h = Harness::new(&vec![0; len], 0x5EED_1111 ^ k as u32, csum_len);
                for &b in &holes {
                    h.ok(Op::Set(b));
                }
                assert_eq!(
                    h.run(Op::ClearRange(s, e)),
                    Ok(holes.len()),
                    "k={k} lead={lead} skew={skew}"
                );
            }
        }
    }
    // Random contents, long ranges.
    let mut rng = SmallRng::seed_from_u64(0xb17_0006);
    let bytes = random_bytes(&mut rng, 9000);
    let mut h = Harness::new(&bytes, 0x2468_ACE0, 8000);
    for _ in 0..40 {
        let s = rng.random_range(0..72000);
        let e = rng.random_range(s..=72000);
        match rng.random_range(0..3) {
            0 => h.run(Op::SetRange(s, e)),
            1 => h.run(Op::ClearRange(s, e)),
            _ => h.run(Op::FlipRange(s, e)),
        }
        .unwrap();
    }
}

/// Ranges whose only changed bits sit in their first or last word, with
/// bits just outside the range (in the same words) that must be ignored.
#[test]
fn changes_only_in_the_first_or_last_word() {
    let (s, e) = (1000, 20000); // words 15..=312, both partial
    for csum_len in [4096, 2501, 2500] {
        for holes in [
            vec![s],
            vec![s + 20],
            vec![e - 1],
            vec![e - 30],
            vec![s, e - 1],
        ] {
            // Setting over all-set bits but the holes; the bits just outside
            // the range are clear and must stay clear and uncounted.
            let mut h = Harness::new(&vec![0xFF; 4096], 0x0DDB_A110, csum_len);
            for &b in holes.iter().chain(&[s - 1, e]) {
                h.ok(Op::Clear(b));
            }
            assert_eq!(h.run(Op::SetRange(s, e)), Ok(holes.len()), "{holes:?}");
            assert!(!h.model[s - 1] && !h.model[e]);
            // Clearing over all-clear bits but the holes.
            let mut h = Harness::new(&vec![0; 4096], 0x0DDB_A110, csum_len);
            for &b in holes.iter().chain(&[s - 1, e]) {
                h.ok(Op::Set(b));
            }
            assert_eq!(h.run(Op::ClearRange(s, e)), Ok(holes.len()), "{holes:?}");
        }
        // Nothing inside changes, though the neighbours in the same words
        // differ: the checksum must not move.
        let mut h = Harness::new(&vec![0xFF; 4096], 0x0DDB_A110, csum_len);
        h.ok(Op::Clear(s - 1));
        h.ok(Op::Clear(e));
        let c = h.crc();
        assert_eq!(h.run(Op::SetRange(s, e)), Ok(0));
        assert_eq!(h.crc(), c);
    }
}

// ---------------------------------------------------------------------------
// Bad input and output buffers
// ---------------------------------------------------------------------------

#[test]
fn out_of_range_requests_change_nothing() {
    let mut rng = SmallRng::seed_from_u64(0xb17_0007);
    let bytes = random_bytes(&mut rng, 100);
    let mut h = Harness::new(&bytes, 0x600D_CAFE, 60);
    let len = 800;
    for i in [800, 801, 1 << 20, usize::MAX] {
        for op in [Op::Set(i), Op::Clear(i), Op::Flip(i)] {
            assert_eq!(
                h.run(op),
                Err(BitmapError::IndexOutOfBounds { index: i, len })
            );
        }
    }
    for (s, e) in [
        (0, 801),
        (801, 801),
        (10, 5),
        (800, 799),
        (usize::MAX, usize::MAX),
        (5, usize::MAX),
    ] {
        for op in [
            Op::SetRange(s, e),
            Op::ClearRange(s, e),
            Op::FlipRange(s, e),
        ] {
            assert_eq!(
                h.run(op),
                Err(BitmapError::RangeOutOfBounds {
                    start: s,
                    end: e,
                    len
                })
            );
        }
    }
    // Other range forms, including ones whose bounds overflow (reported
    // saturated).
    let crc = h.crc();
    type Bounds = (Bound<usize>, Bound<usize>);
    let bad: [(Bounds, usize, usize); 4] = [
        (
            (Bound::Excluded(usize::MAX), Bound::Unbounded),
            usize::MAX,
            len,
        ),
        (
            (Bound::Unbounded, Bound::Included(usize::MAX)),
            0,
            usize::MAX,
        ),
        ((Bound::Included(0), Bound::Included(800)), 0, 801),
        ((Bound::Excluded(800), Bound::Unbounded), 801, 800),
    ];
    for (_, map) in &mut h.maps {
        for (r, start, end) in bad {
            let want = Err(BitmapError::RangeOutOfBounds { start, end, len });
            assert_eq!(map.set_range(r), want, "{r:?}");
            assert_eq!(map.clear_range(r), want, "{r:?}");
            assert_eq!(map.flip_range(r), want, "{r:?}");
            assert_eq!(map.checksum(), crc);
            assert_eq!(map.to_bytes(), bytes);
            assert!(map.verify());
        }
    }
    assert_eq!(h.bytes(), bytes);
    h.check("bad ranges").unwrap();
}

#[test]
fn store_bytes_checks_the_length() {
    let mut rng = SmallRng::seed_from_u64(0xb17_0008);
    let bytes = random_bytes(&mut rng, 333);
    let mut h = Harness::new(&bytes, 3, 300);
    h.ok(Op::FlipRange(5, 2000));
    h.ok(Op::Set(2663));
    for (_, map) in &h.maps {
        for n in [0, 1, 332, 334, 1000] {
            let mut out = vec![0xA5u8; n];
            assert_eq!(
                map.store_bytes(&mut out),
                Err(BitmapError::LengthMismatch {
                    expected: 333,
                    found: n
                })
            );
            assert!(out.iter().all(|&b| b == 0xA5), "written despite error");
        }
        for fill in [0x00, 0xA5, 0xFF] {
            let mut out = vec![fill; 333];
            assert_eq!(map.store_bytes(&mut out), Ok(()));
            assert_eq!(out, map.to_bytes());
            assert_eq!(out, model_bytes(&h.model));
        }
    }
}

// ---------------------------------------------------------------------------
// The free-space index
// ---------------------------------------------------------------------------

#[test]
fn index_searches_follow_every_update() {
    // An ext4-like group: 8192-bit bitmap, the index over its first 8000
    // bits (the blocks), the checksum over 1000 bytes; bit 0 is block 8001.
    let mut bytes = vec![0u8; 1024];
    bytes[..4].fill(0xFF); // 32 metadata blocks
    let map = CheckedBitmap::from_bytes(&bytes, 0xE4, 1000).unwrap();
    let mut map = map.with_index(8000).unwrap();
    map.set_range(8000..).unwrap(); // padding: in use, outside the index
    assert_eq!(map.index().map(|ix| ix.len()), Some(8000));
    assert_eq!(map.largest_free(), Some((32, 7968)));
    // 100 blocks aligned to 16 on absolute numbers: (s + 8001) % 16 == 0.
    let s = map.first_fit(100, 16, 8001, 0).unwrap().unwrap();
    assert_eq!((s, (s + 8001) % 16), (47, 0));
    assert_eq!(map.set_range(s..s + 100), Ok(100));
    // Every kind of update keeps searches and the checksum current.
    map.clear(s + 50).unwrap();
    map.flip_range(4000..4100).unwrap();
    map.set(7999).unwrap();
    map.validate().unwrap();
    assert_eq!(map.first_fit(1, 1, 0, s), Ok(Some(s + 50)));
    assert_eq!(map.first_fit(1, 1, 0, 7999), Ok(Some(32)), "wraps");
    // Best fit by size class: the single free bit for one block.
    assert_eq!(map.best_fit(1, 1, 0), Ok(Some(s + 50)));
    // Two runs of 40+ share the 2048 class: the lower one.
    assert_eq!(map.best_fit(40, 1, 0), Ok(Some(147)));
    assert_eq!(map.largest_free(), Some((4100, 3899)));
    assert_eq!(
        map.checksum(),
        reference::raw(0xE4, &map.to_bytes()[..1000])
    );
    // The index is not part of the value.
    let plain = CheckedBitmap::from_bytes(&map.to_bytes(), 0xE4, 1000).unwrap();
    assert_eq!(plain, map);
    assert!(plain.index().is_none());
    // Without it, the same answers by a scan (of all the bits).
    let mut unindexed = map.clone();
    assert!(unindexed.remove_index().is_some());
    for (nr, align, off, goal) in [
        (1, 1, 0, 0),
        (1, 1, 0, 7999),
        (100, 16, 8001, 0),
        (9, 8, 3, 5000),
    ] {
        assert_eq!(
            unindexed.first_fit(nr, align, off, goal),
            map.first_fit(nr, align, off, goal),
            "{nr} {align} {off} {goal}"
        );
        assert_eq!(
            unindexed.best_fit(nr, align, off),
            map.best_fit(nr, align, off)
        );
    }
    assert_eq!(unindexed.largest_free(), map.largest_free());
    unindexed.validate().unwrap();
    // into_parts drops the index.
    let (bits, crc) = map.into_parts();
    assert_eq!(
        (bits.to_le_bytes(), crc),
        (plain.to_bytes(), plain.checksum())
    );
}

#[test]
fn index_bad_input_is_a_typed_error() {
    let mut map = CheckedBitmap::from_bytes(&[0u8; 64], 1, 64).unwrap();
    assert_eq!(
        map.build_index(513),
        Err(FreeSpaceError::OutOfRange {
            start: 0,
            end: 513,
            bits: 512
        })
    );
    assert!(map.index().is_none());
    let map = map.with_index(500).unwrap();
    assert_eq!(map.first_fit(0, 1, 0, 0), Err(FreeSpaceError::ZeroLength));
    assert_eq!(
        map.first_fit(1, 6, 0, 0),
        Err(FreeSpaceError::BadAlignment { align: 6 })
    );
    assert_eq!(
        map.best_fit(1, 0, 0),
        Err(FreeSpaceError::BadAlignment { align: 0 })
    );
    assert_eq!(
        map.first_fit(1, 1, 0, 501),
        Err(FreeSpaceError::OutOfRange {
            start: 501,
            end: 501,
            bits: 500
        })
    );
    // Larger than the indexed bits: no fit, not an error.
    assert_eq!(map.first_fit(501, 1, 0, 0), Ok(None));
    assert_eq!(map.first_fit(500, 1, 0, 500), Ok(Some(0)));
    let full = CheckedBitmap::from_bytes(&[0xFF; 8], 1, 8)
        .unwrap()
        .with_index(64)
        .unwrap();
    assert_eq!(full.largest_free(), None);
    assert_eq!(full.best_fit(1, 1, 0), Ok(None));
    let e: Box<dyn std::error::Error> = Box::new(FreeSpaceError::ZeroLength);
    assert!(!e.to_string().is_empty());
}

// ---------------------------------------------------------------------------
// Property test: random operation sequences
// ---------------------------------------------------------------------------

/// A bit position: anywhere, near the checksum boundary, near the end (and
/// past it), or absurd.
fn arb_pos(nbits: usize, cb: usize) -> impl Strategy<Value = usize> {
    prop_oneof![
        6 => 0..nbits,
        2 => cb.saturating_sub(70)..cb + 70,
        2 => nbits.saturating_sub(70)..nbits + 3,
        1 => Just(usize::MAX),
    ]
}

/// `start..end`: short (often all clear or all set), long, or arbitrary.
fn arb_range(nbits: usize, cb: usize) -> impl Strategy<Value = (usize, usize)> {
    prop_oneof![
        4 => (arb_pos(nbits, cb), 0..=130usize).prop_map(|(s, n)| (s, s.saturating_add(n))),
        3 => (arb_pos(nbits, cb), arb_pos(nbits, cb)).prop_map(|(a, b)| (a.min(b), a.max(b))),
        1 => (arb_pos(nbits, cb), arb_pos(nbits, cb)),
    ]
}

fn arb_op(nbits: usize, cb: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => arb_pos(nbits, cb).prop_map(Op::Set),
        2 => arb_pos(nbits, cb).prop_map(Op::Clear),
        2 => arb_pos(nbits, cb).prop_map(Op::Flip),
        3 => arb_range(nbits, cb).prop_map(|(s, e)| Op::SetRange(s, e)),
        3 => arb_range(nbits, cb).prop_map(|(s, e)| Op::ClearRange(s, e)),
        2 => arb_range(nbits, cb).prop_map(|(s, e)| Op::FlipRange(s, e)),
    ]
}

#[derive(Clone, Debug)]
struct Case {
    len: usize,
    csum_len: usize,
    seed: u32,
    fill_seed: u64,
    /// 0: all clear, 1: all set, 2: random, 3: sparse, 4: dense.
    fill: u8,
    ops: Vec<Op>,
}

fn arb_case() -> impl Strategy<Value = Case> {
    let len = prop_oneof![
        3 => 1..=64usize,
        3 => 1..=1100usize,
        2 => 1..=9000usize,
        1 => prop::sample::select(&[1usize, 7, 8, 9, 63, 64, 65, 511, 512, 513, 4096, 9000][..]),
    ];
    len.prop_flat_map(|len| {
        let csum_len = prop_oneof![
            Just(len),
            Just(0),
            0..=len,
            Just(len / 2),
            Just(len - len % 8),
            Just(len - 1),
        ];
        (Just(len), csum_len)
    })
    .prop_flat_map(|(len, csum_len)| {
        (
            any::<u32>(),
            any::<u64>(),
            0..5u8,
            vec(arb_op(len * 8, csum_len * 8), 50..=200),
        )
            .prop_map(move |(seed, fill_seed, fill, ops)| Case {
                len,
                csum_len,
                seed,
                fill_seed,
                fill,
                ops,
            })
    })
}

fn case_bytes(c: &Case) -> Vec<u8> {
    let mut rng = SmallRng::seed_from_u64(c.fill_seed);
    match c.fill {
        0 => vec![0; c.len],
        1 => vec![0xFF; c.len],
        2 => random_bytes(&mut rng, c.len),
        f => {
            let mut b = vec![if f == 3 { 0 } else { 0xFF }; c.len];
            for _ in 0..c.len / 8 + 1 {
                let i = rng.random_range(0..c.len * 8);
                b[i / 8] ^= 1 << (i % 8);
            }
            b
        }
    }
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn prop_ops_follow_the_model(case in arb_case()) {
        let bytes = case_bytes(&case);
        let mut h = Harness::new(&bytes, case.seed, case.csum_len);
        for op in &case.ops {
            let _ = h.apply(op)?; // its result is checked inside
        }
        // The engines kept identical state throughout (checked against the
        // model after every op); their final maps agree bit for bit.
        prop_assert_eq!(h.maps[0].1.bitmap(), h.maps[1].1.bitmap());
        prop_assert_eq!(h.maps[0].1.checksum(), h.maps[1].1.checksum());
    }
}
