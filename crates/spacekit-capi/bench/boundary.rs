//! The Rust half of the boundary benchmark (`bench/run` drives it): the
//! same loops as `bench/boundary.c`, calling spacekit directly from Rust.
//! Prints `check <name> <hex>` (results, compared with C's) and
//! `ns <name> <ns per call>` (the fastest of 21 timed loops).

use std::hint::black_box;
use std::time::Instant;

use spacekit_core::bitmap::{BitView, Bits};
use spacekit_core::crc32c;

const BLOCK_BYTES: u64 = 32768;
const NBITS: usize = BLOCK_BYTES as usize * 8;
const ROUNDS: usize = 21;

/// xorshift64, the same sequence as the C side's.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A half-full bitmap: alternating used and free runs of 1..=64 bits.
fn half_full() -> Vec<u64> {
    let mut w = vec![0u64; NBITS / 64];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut pos = 0usize;
    while pos < NBITS {
        let used = (rng.next() % 64 + 1) as usize;
        let free = (rng.next() % 64 + 1) as usize;
        for b in pos..(pos + used).min(NBITS) {
            w[b / 64] |= 1 << (b % 64);
        }
        pos += used + free;
    }
    w
}

/// The fastest ns per call of `ROUNDS` timings of `f(iters)` (the one
/// least disturbed by other work on the machine).
fn time(iters: u64, mut f: impl FnMut(u64) -> u64) -> (f64, u64) {
    let mut check = 0;
    let mut ns: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let t = Instant::now();
            check = f(iters);
            t.elapsed().as_nanos() as f64 / iters as f64
        })
        .collect();
    ns.sort_by(f64::total_cmp);
    (ns[0], check)
}

fn main() {
    let iters: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);

    // Every argument goes through black_box, as C's arguments reach the
    // library as runtime values: the rows compare the same call. The
    // `-const` rows let Rust fold the constant arguments into the inlined
    // search (what only a Rust caller can get), for information.
    for (name, opaque) in [("flip_range", true), ("flip_range-const", false)] {
        let (ns, check) = time(iters, |n| {
            let mut crc = 0x5EEDu32;
            for i in 0..n {
                let first = i * 4093 % (BLOCK_BYTES * 8 - 64);
                crc = if opaque {
                    crc32c::flip_range(
                        black_box(crc),
                        black_box(BLOCK_BYTES),
                        black_box(first),
                        black_box(64),
                    )
                } else {
                    crc32c::flip_range(black_box(crc), BLOCK_BYTES, first, 64)
                }
                .expect("in range");
            }
            u64::from(crc)
        });
        println!("check {name} {check:x}");
        println!("ns {name} {ns:.2}");
    }

    // find_clear_area: 16 bits aligned to 8 in a half-full bitmap, a view
    // made per call as C's wrapper does.
    let words = half_full();
    for (name, opaque) in [("find_clear_area", true), ("find_clear_area-const", false)] {
        let (ns, check) = time(iters, |n| {
            let mut sum = 0u64;
            for i in 0..n {
                let start = (i as usize * 7919) % NBITS;
                let r = if opaque {
                    BitView::new(black_box(&words), black_box(NBITS))
                        .expect("bits fit")
                        .find_clear_area_mask(
                            black_box(start),
                            black_box(16),
                            black_box(7),
                            black_box(0),
                        )
                } else {
                    BitView::new(&words, NBITS)
                        .expect("bits fit")
                        .find_clear_area_mask(start, 16, 7, 0)
                }
                .expect("valid mask");
                sum = sum.wrapping_add(r.map_or(NBITS, |p| p) as u64);
            }
            sum
        });
        println!("check {name} {check:x}");
        println!("ns {name} {ns:.2}");
    }
}
