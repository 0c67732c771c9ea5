//! The aligned clear-area search against a brute-force model and against the
//! kernel ports (before and seed 000), at every SIMD level this machine has,
//! in both alignment forms: `find_clear_area(start, nr, align, offset)` (the
//! crate's convention, `(p + offset) % align == 0`) and the kernel's
//! `find_clear_area_mask(start, nr, align - 1, offset)`.

use baselines::find_bit::{find_next_zero_area_off, AreaVariant};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spacekit::arch::Level;
use spacekit::bitmap::{BitView, Bitmap, BitmapError, Bits, BitsMut};
use spacekit::testing::{find_clear_area_stats, AtLevel};

/// Whether `p` is acceptable: `(p + off) % align == 0` (wrapping, as the
/// kernel's `(p + off) & mask`).
fn aligned(p: usize, align: usize, off: usize) -> bool {
    p.wrapping_add(off).is_multiple_of(align)
}

/// Lowest p >= start with [p, p+nr) clear, (p + off) % align == 0, p + nr <= len.
fn naive(bits: &[bool], start: usize, nr: usize, align: usize, off: usize) -> Option<usize> {
    let len = bits.len();
    if nr == 0 {
        let first = (start..len).find(|&i| !bits[i])?;
        let p = (first..).find(|&p| aligned(p, align, off))?;
        return (p < len).then_some(p);
    }
    (start..len)
        .filter(|&p| aligned(p, align, off))
        .find(|&p| p + nr <= len && bits[p..p + nr].iter().all(|&b| !b))
}

/// Checks both alignment forms of the search on `b` at every level.
fn check_area<B: Bits + ?Sized>(
    b: &B,
    start: usize,
    nr: usize,
    align: usize,
    off: usize,
    want: Option<usize>,
    what: &str,
) {
    for level in Level::available() {
        let at = AtLevel(b, level);
        assert_eq!(
            at.find_clear_area(start, nr, align, off),
            Ok(want),
            "{level}: {what}"
        );
        assert_eq!(
            at.find_clear_area_mask(start, nr, align - 1, off),
            Ok(want),
            "{level} mask form: {what}"
        );
    }
}

fn random_bitmap(rng: &mut SmallRng, len: usize) -> (Bitmap, Vec<bool>) {
    // Mix of densities and run structures so long runs exist sometimes.
    let style = rng.random_range(0..5);
    let mut bits = vec![false; len];
    match style {
        0 => bits.iter_mut().for_each(|b| *b = rng.random_bool(0.5)),
        1 => bits.iter_mut().for_each(|b| *b = rng.random_bool(0.02)),
        2 => bits.iter_mut().for_each(|b| *b = rng.random_bool(0.97)),
        3 => {
            let mut i = 0;
            while i < len {
                let run = rng.random_range(1..300);
                let v = rng.random_bool(0.5);
                for b in bits.iter_mut().skip(i).take(run) {
                    *b = v;
                }
                i += run;
            }
        }
        _ => {}
    }
    let mut map = Bitmap::new(len);
    for (i, &b) in bits.iter().enumerate() {
        if b {
            map.set(i).unwrap();
        }
    }
    (map, bits)
}

fn check_one(rng: &mut SmallRng, len: usize) {
    let (map, bits) = random_bitmap(rng, len);
    let nr = match rng.random_range(0..4) {
        0 => rng.random_range(0..16),
        1 => rng.random_range(0..70),
        2 => rng.random_range(0..300),
        _ => rng.random_range(0..1200),
    };
    let align = match rng.random_range(0..3) {
        0 => 1,
        1 => 1usize << rng.random_range(0..7),
        _ => 1usize << rng.random_range(0..12),
    };
    let mask = align - 1;
    let off = if rng.random_bool(0.5) {
        0
    } else {
        rng.random_range(0..5000)
    };
    let start = if len == 0 {
        0
    } else {
        rng.random_range(0..len + 10)
    };
    let want = naive(&bits, start, nr, align, off);
    let what = format!("len={len} start={start} nr={nr} align={align} off={off}");
    check_area(&map, start, nr, align, off, want, &what);
    if nr > 0 {
        for v in [AreaVariant::Before, AreaVariant::Seed] {
            let (k, _) = find_next_zero_area_off(map.as_words(), len, start, nr, mask, off, v);
            let k = (k < len).then_some(k);
            assert_eq!(k, want, "{v:?}: {what}");
        }
    }
}

#[test]
fn random_cases_match_model_and_kernel_ports() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0000);
    for _ in 0..10_000 {
        let len = rng.random_range(0..3000);
        check_one(&mut rng, len);
    }
}

#[test]
fn seed_sizes_long_runs() {
    // The seed's 327,680-bit map with sparse bits and long requests.
    let mut rng = SmallRng::seed_from_u64(7);
    let len = 4096 * 8 * 10;
    let mut map = Bitmap::new(len);
    let mut bits = vec![false; len];
    for _ in 0..len / 500 {
        let i = rng.random_range(0..len);
        map.set(i).unwrap();
        bits[i] = true;
    }
    for nr in [8, 32, 128, 1024, 4096, 8192] {
        let want = naive(&bits, 0, nr, 1, 0);
        check_area(&map, 0, nr, 1, 0, want, &format!("nr={nr}"));
    }
}

#[test]
fn bad_alignment_is_an_error() {
    let map = Bitmap::new(100);
    for align in [0, 3, 6, 12, usize::MAX] {
        assert_eq!(
            map.find_clear_area(0, 4, align, 0),
            Err(BitmapError::InvalidAlignment { align })
        );
    }
    assert_eq!(
        map.find_clear_area_mask(0, 4, 6, 0),
        Err(BitmapError::InvalidAlignMask { mask: 6 })
    );
    // The largest power of two: only p = -offset (mod 2^63) is acceptable.
    assert_eq!(map.find_clear_area(0, 4, 1 << 63, 0), Ok(Some(0)));
    assert_eq!(map.find_clear_area(0, 4, 1 << 63, 1), Ok(None));
    assert_eq!(
        map.find_clear_area(0, 4, 1 << 63, (1 << 63) - 10),
        Ok(Some(10))
    );
    // The mask form also takes usize::MAX = 2^64 - 1: alignment 2^64.
    assert_eq!(map.find_clear_area_mask(0, 4, usize::MAX, 0), Ok(Some(0)));
    assert_eq!(map.find_clear_area_mask(0, 4, usize::MAX, 1), Ok(None));
    assert_eq!(
        map.find_clear_area_mask(0, 4, usize::MAX, usize::MAX - 9),
        Ok(Some(10))
    );
    assert_eq!(map.find_clear_area(100, 1, 1, 0), Ok(None));
    assert_eq!(map.find_clear_area(usize::MAX, 1, 1, 0), Ok(None));
    assert_eq!(map.find_clear_area(0, usize::MAX, 1, 0), Ok(None));
    // A bad alignment is reported even where nothing could fit.
    assert!(map.find_clear_area(100, 1, 0, 0).is_err());
}

#[test]
fn garbage_past_view_length_is_ignored() {
    let words = [0u64, !0 << 10];
    let v = BitView::new(&words, 74).unwrap();
    check_area(&v, 0, 74, 1, 0, Some(0), "whole view");
    check_area(&v, 1, 74, 1, 0, None, "past the view");
    check_area(&v, 60, 14, 1, 0, Some(60), "up to the view's end");
}

#[test]
fn run_carried_over_skipped_clear_words_into_a_full_word() {
    // Regression: a clear run spanning whole words skipped at SIMD speed and
    // ending at an all-set word must still be accepted.
    let mut map = Bitmap::new(1173);
    map.set_range(0..304).unwrap();
    map.set_range(704..1113).unwrap();
    for nr in [216, 300, 400] {
        check_area(&map, 42, nr, 1, 0, Some(304), &format!("nr={nr}"));
    }
    check_area(&map, 42, 401, 1, 0, None, "nr=401");
}

/// Linear-time model: `run[p]` = number of consecutive clear bits from p.
fn naive_fast(bits: &[bool], start: usize, nr: usize, align: usize, off: usize) -> Option<usize> {
    let len = bits.len();
    let mut run = vec![0usize; len + 1];
    for p in (0..len).rev() {
        run[p] = if bits[p] { 0 } else { run[p + 1] + 1 };
    }
    (start..len)
        .filter(|&p| aligned(p, align, off))
        .find(|&p| run[p] >= nr)
}

#[test]
fn large_maps_long_requests_and_coarse_alignment() {
    let mut rng = SmallRng::seed_from_u64(0xa11c);
    for case in 0..600 {
        let len = rng.random_range(1..40_000);
        let (map, bits) = random_bitmap(&mut rng, len);
        let nr = match case % 4 {
            0 => rng.random_range(1..200),
            1 => rng.random_range(100..1500),
            2 => rng.random_range(1000..6000),
            _ => rng.random_range(1..64),
        };
        let align = match rng.random_range(0..4) {
            0 => 1,
            1 => 1usize << rng.random_range(0..7),
            2 => 1usize << rng.random_range(6..12),
            _ => 1usize << rng.random_range(9..14),
        };
        let mask = align - 1;
        let off = if rng.random_bool(0.5) {
            0
        } else {
            rng.random_range(0..1 << 14)
        };
        let start = rng.random_range(0..len);
        let want = naive_fast(&bits, start, nr, align, off);
        let ctx = format!("len={len} start={start} nr={nr} align={align} off={off}");
        check_area(&map, start, nr, align, off, want, &ctx);
        let (k, _) =
            find_next_zero_area_off(map.as_words(), len, start, nr, mask, off, AreaVariant::Seed);
        assert_eq!((k < len).then_some(k), want, "seed port {ctx}");
    }
}

#[test]
fn sparse_maps_with_runs_of_every_length() {
    // Clear runs of every length 1..=300 separated by one set bit: the first
    // run of at least nr must be found for every nr, aligned or not.
    let mut bits = Vec::new();
    for l in 1..=300usize {
        bits.extend(std::iter::repeat_n(false, l));
        bits.push(true);
    }
    let mut map = Bitmap::new(bits.len());
    for (i, &b) in bits.iter().enumerate() {
        if b {
            map.set(i).unwrap();
        }
    }
    for nr in 1..=301 {
        for align in [1usize, 2, 8, 64, 256] {
            let want = naive_fast(&bits, 0, nr, align, 0);
            check_area(
                &map,
                0,
                nr,
                align,
                0,
                want,
                &format!("nr={nr} align={align}"),
            );
        }
    }
}

#[test]
fn restarts_count_candidates_like_the_kernel_loop() {
    let mut map = Bitmap::new(4096);
    // Immediate hit: one pass, as the kernel counts it.
    let (p, st) = find_clear_area_stats(&map, 0, 8, 1, 0).unwrap();
    assert_eq!((p, st.restarts), (Some(0), 1));
    let (_, k) = find_next_zero_area_off(map.as_words(), 4096, 0, 8, 0, 0, AreaVariant::Seed);
    assert_eq!(k, 1);
    // Two collisions, each past the previous window: three candidates.
    map.set(5).unwrap();
    map.set(13).unwrap();
    let (p, st) = find_clear_area_stats(&map, 0, 8, 1, 0).unwrap();
    assert_eq!((p, st.restarts), (Some(14), 3));
    // At every level, counted the same way.
    for level in Level::available() {
        let (p, st) = find_clear_area_stats(&AtLevel(&map, level), 0, 8, 1, 0).unwrap();
        assert_eq!((p, st.restarts), (Some(14), 3), "{level}");
    }
    assert!(find_clear_area_stats(&map, 0, 8, 3, 0).is_err());
    let (k, again) = find_next_zero_area_off(map.as_words(), 4096, 0, 8, 0, 0, AreaVariant::Seed);
    assert_eq!((k, again), (14, 3));
}
