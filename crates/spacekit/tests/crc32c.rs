//! Integration tests for `spacekit::crc32c`: the bulk CRC, `shift`, `combine`,
//! `flip_range` and `splice`, each against an independent bit-at-a-time
//! reference (and, for buffers too large to allocate, against an independent
//! polynomial model), through the free functions, through an engine at every
//! SIMD level this machine has (`Engine::at_level(l)` for each of
//! `Level::available()`: the portable carry-less products, then PCLMULQDQ
//! where the CPU has it) and through `Engine::portable()` (portable bulk CRC
//! too), which must all agree with each other.

use std::fmt::Debug;

use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};
use spacekit::arch::Level;
use spacekit::crc32c::{self, CrcError, Engine};

// ---------------------------------------------------------------------------
// The reference
// ---------------------------------------------------------------------------

/// An independent CRC-32C: bit at a time, plus a slow model of the algebra
/// (multiplication modulo P on reflected values, as zlib's `multmodp`) for
/// lengths too large to feed through the bit loop.
mod reference {
    /// Reflected CRC-32C polynomial.
    pub const POLY: u32 = 0x82F6_3B78;
    /// The polynomial 1 in reflected order (bit 31 is x^0).
    pub const ONE: u32 = 1 << 31;
    /// The polynomial x in reflected order.
    pub const X: u32 = 1 << 30;

    /// One byte into the register, bit at a time.
    #[inline]
    pub fn step(mut crc: u32, b: u8) -> u32 {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
        }
        crc
    }

    /// Raw CRC-32C (no inversion in or out), bit at a time.
    pub fn raw(crc: u32, bytes: &[u8]) -> u32 {
        bytes.iter().fold(crc, |c, &b| step(c, b))
    }

    /// Standard CRC-32C.
    pub fn checksum(bytes: &[u8]) -> u32 {
        !raw(!0, bytes)
    }

    /// `raw(crc, &[0; n])` without allocating.
    pub fn zeros(crc: u32, n: usize) -> u32 {
        (0..n).fold(crc, |c, _| step(c, 0))
    }

    /// `a * b mod P`, reflected (zlib's `multmodp`).
    pub fn mulmod(a: u32, mut b: u32) -> u32 {
        let mut p = 0;
        for i in 0..32 {
            if a & (ONE >> i) != 0 {
                p ^= b;
            }
            b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
        }
        p
    }

    /// `x^e mod P`, reflected, by square-and-multiply (no reduction of `e`).
    pub fn xpow(mut e: u128) -> u32 {
        let (mut r, mut base) = (ONE, X);
        while e != 0 {
            if e & 1 != 0 {
                r = mulmod(r, base);
            }
            base = mulmod(base, base);
            e >>= 1;
        }
        r
    }

    /// `raw(crc, &[0; nbytes])` for any `nbytes`: `crc * x^(8 nbytes)`.
    pub fn shift(crc: u32, nbytes: u64) -> u32 {
        mulmod(xpow(8 * u128::from(nbytes)), crc)
    }

    /// `1 + x + ... + x^(n-1) mod P`, reflected, by doubling.
    pub fn ones(n: u64) -> u32 {
        // Invariant: s = 1 + ... + x^(m-1), xm = x^m for the prefix m of n's bits.
        let (mut s, mut xm) = (0u32, ONE);
        for bit in (0..64).rev() {
            s ^= mulmod(xm, s);
            xm = mulmod(xm, xm);
            if (n >> bit) & 1 != 0 {
                s = mulmod(s, X) ^ ONE;
                xm = mulmod(xm, X);
            }
        }
        s
    }

    /// The raw CRC (from 0) of a `buf_len`-byte buffer that is zero except
    /// bits `[first, first + n)`: what `flip_range` XORs into the CRC.
    pub fn flip_delta(buf_len: u64, first: u64, n: u64) -> u32 {
        let after = 8 * u128::from(buf_len) - u128::from(first) - u128::from(n);
        // Bit i of the stream contributes x^(bits after it + 32).
        mulmod(xpow(after + 32), ones(n))
    }
}

/// Flips bits `[first, first + n)` of `buf` (bit `i` = bit `i % 8` of byte
/// `i / 8`), one at a time.
fn flip_bits(buf: &mut [u8], first: u64, n: u64) {
    for i in first..first + n {
        buf[(i / 8) as usize] ^= 1 << (i % 8);
    }
}

fn random_bytes(rng: &mut SmallRng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill_bytes(&mut v);
    v
}

/// The bytes a proptest case works on, from a length and a seed (so failures
/// print two numbers, not 70 000 bytes).
fn bytes_from(len: usize, seed: u64) -> Vec<u8> {
    random_bytes(&mut SmallRng::seed_from_u64(seed), len)
}

// ---------------------------------------------------------------------------
// The implementations under test
// ---------------------------------------------------------------------------

/// One way to call the library: the free functions or an explicit engine.
#[derive(Clone, Copy, Debug)]
enum Via {
    Free,
    Engine(Engine),
}

/// The free functions, an engine at each available level, and the portable
/// engine.
fn vias() -> Vec<Via> {
    let mut v = vec![Via::Free];
    v.extend(Level::available().map(|l| Via::Engine(Engine::at_level(l))));
    v.push(Via::Engine(Engine::portable()));
    v
}

impl Via {
    fn raw(self, crc: u32, bytes: &[u8]) -> u32 {
        match self {
            Via::Free => crc32c::raw(crc, bytes),
            Via::Engine(e) => e.raw(crc, bytes),
        }
    }
    fn checksum(self, bytes: &[u8]) -> u32 {
        match self {
            Via::Free => crc32c::checksum(bytes),
            Via::Engine(e) => e.checksum(bytes),
        }
    }
    fn shift(self, crc: u32, nbytes: u64) -> u32 {
        match self {
            Via::Free => crc32c::shift(crc, nbytes),
            Via::Engine(e) => e.shift(crc, nbytes),
        }
    }
    fn combine(self, a: u32, b: u32, len_b: u64) -> u32 {
        match self {
            Via::Free => crc32c::combine(a, b, len_b),
            Via::Engine(e) => e.combine(a, b, len_b),
        }
    }
    fn flip_range(self, crc: u32, buf_len: u64, first: u64, n: u64) -> Result<u32, CrcError> {
        match self {
            Via::Free => crc32c::flip_range(crc, buf_len, first, n),
            Via::Engine(e) => e.flip_range(crc, buf_len, first, n),
        }
    }
    fn splice(
        self,
        crc: u32,
        buf_len: u64,
        offset: u64,
        old: &[u8],
        new: &[u8],
    ) -> Result<u32, CrcError> {
        match self {
            Via::Free => crc32c::splice(crc, buf_len, offset, old, new),
            Via::Engine(e) => e.splice(crc, buf_len, offset, old, new),
        }
    }
}

/// Runs `f` through every [`Via`], asserts they all return the same value,
/// and returns it. `what` describes the call for failure messages.
fn agree<T: PartialEq + Debug>(what: &dyn Fn() -> String, f: impl Fn(Via) -> T) -> T {
    let vias = vias();
    let (&first, rest) = vias.split_first().expect("the free functions");
    let want = f(first);
    for &v in rest {
        let got = f(v);
        assert_eq!(got, want, "{v:?} disagrees with {first:?}: {}", what());
    }
    want
}

/// As [`agree`], for use inside proptest bodies.
fn agree_prop<T: PartialEq + Debug>(
    what: &dyn Fn() -> String,
    f: impl Fn(Via) -> T,
) -> Result<T, TestCaseError> {
    let vias = vias();
    let (&first, rest) = vias.split_first().expect("the free functions");
    let want = f(first);
    for &v in rest {
        let got = f(v);
        prop_assert_eq!(
            &got,
            &want,
            "{:?} disagrees with {:?}: {}",
            v,
            first,
            what()
        );
    }
    Ok(want)
}

// ---------------------------------------------------------------------------
// Sanity of the setup
// ---------------------------------------------------------------------------

/// With default features on an x86_64 CPU with PCLMULQDQ, the engines are
/// really different code, so comparing them is not vacuous.
#[test]
fn engines_are_distinct_where_possible() {
    let (bulk, unit) = Engine::portable().names();
    assert_eq!((bulk, unit), ("slicing-by-8", "portable"));
    // The bulk CRC: the `crc32` streams where the level has SSE4.2 and
    // PCLMULQDQ (with crc-fast's AVX-512 folds from 512 bytes where the
    // level also has AVX512VL and VPCLMULQDQ), else crc-fast (with its
    // feature) or slicing-by-8.
    for level in Level::available() {
        let bulk = Engine::at_level(level).names().0;
        let streams = cfg!(target_arch = "x86_64") && level.has_sse42() && level.has_pclmulqdq();
        let want = if streams
            && cfg!(feature = "crc-fast")
            && level.has_avx512vl()
            && level.has_vpclmulqdq()
        {
            "crc-fast-avx512"
        } else if streams {
            "sse4.2-crc32x3"
        } else if cfg!(feature = "crc-fast") {
            "crc-fast"
        } else {
            "slicing-by-8"
        };
        assert_eq!(bulk, want, "{level:?}");
    }
    assert_eq!(Engine::at_level(Level::scalar()).names().1, "portable");
    assert_eq!(Engine::detect(), Engine::at_level(Level::detect()));
    for level in Level::available() {
        let unit = Engine::at_level(level).names().1;
        let want = match (level.has_pclmulqdq(), level.has_sse42()) {
            (true, true) => "pclmulqdq+crc32",
            (true, false) => "pclmulqdq",
            _ => "portable",
        };
        assert_eq!(unit, want, "{level:?}");
    }
    #[cfg(target_arch = "x86_64")]
    if spacekit::arch::cpu_features().any(|f| f == ("pclmulqdq", true)) {
        assert!(Engine::detect().names().1.starts_with("pclmulqdq"));
    }
}

/// The reference and the algebra model, against published check values and
/// against each other.
#[test]
fn reference_is_sound() {
    // RFC 3720 (iSCSI) B.4 test vectors and the CRC catalogue check value.
    assert_eq!(reference::checksum(b"123456789"), 0xE306_9283);
    assert_eq!(reference::checksum(&[0u8; 32]), 0x8A91_36AA);
    assert_eq!(reference::checksum(&[0xFFu8; 32]), 0x62A8_AB43);
    let inc: Vec<u8> = (0..32).collect();
    assert_eq!(reference::checksum(&inc), 0x46DD_794E);
    let dec: Vec<u8> = (0..32).rev().collect();
    assert_eq!(reference::checksum(&dec), 0x113F_DB5C);

    // The model: shift and flip deltas against the bit loop.
    let mut rng = SmallRng::seed_from_u64(0x5eed_0001);
    for n in 0..600usize {
        let c: u32 = rng.random();
        assert_eq!(
            reference::shift(c, n as u64),
            reference::zeros(c, n),
            "n={n}"
        );
    }
    for len in 1..=10usize {
        for first in 0..8 * len as u64 {
            for n in 0..=(8 * len as u64 - first) {
                let mut d = vec![0u8; len];
                flip_bits(&mut d, first, n);
                assert_eq!(
                    reference::flip_delta(len as u64, first, n),
                    reference::raw(0, &d),
                    "len={len} first={first} n={n}"
                );
            }
        }
    }
    for _ in 0..300 {
        let len = rng.random_range(1..3000usize);
        let first = rng.random_range(0..8 * len as u64);
        let n = rng.random_range(0..=8 * len as u64 - first);
        let mut d = vec![0u8; len];
        flip_bits(&mut d, first, n);
        assert_eq!(
            reference::flip_delta(len as u64, first, n),
            reference::raw(0, &d),
            "len={len} first={first} n={n}"
        );
    }
}

// ---------------------------------------------------------------------------
// Known values and the bulk CRC
// ---------------------------------------------------------------------------

#[test]
fn known_values() {
    for v in vias() {
        assert_eq!(v.checksum(b"123456789"), 0xE306_9283, "{v:?}");
        assert_eq!(v.raw(!0, b"123456789"), 0x1CF9_6D7C, "{v:?}");
        assert_eq!(v.raw(0, b""), 0, "{v:?}");
        assert_eq!(v.checksum(b""), 0, "{v:?}");
        for x in [1, 0x1234_5678, 0x8000_0000, !0, 0xDEAD_BEEF] {
            assert_eq!(v.raw(x, b""), x, "{v:?} raw({x:#x}, [])");
        }
        assert_eq!(v.checksum(&[0u8; 32]), 0x8A91_36AA, "{v:?}");
        assert_eq!(v.checksum(&[0xFFu8; 32]), 0x62A8_AB43, "{v:?}");
        let inc: Vec<u8> = (0..32).collect();
        assert_eq!(v.checksum(&inc), 0x46DD_794E, "{v:?}");
        // One byte and raw semantics: x^32 mod P for the last stream bit.
        assert_eq!(v.raw(0, &[0x80]), reference::POLY, "{v:?}");
        assert_eq!(v.raw(0, &[0]), 0, "{v:?}");
    }
}

/// `raw` on unaligned sub-slices of a larger buffer, for lengths in three
/// bands, with initial CRCs 0, !0 and random.
#[test]
fn raw_matches_reference_on_random_slices() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0002);
    let big = random_bytes(&mut rng, 16384 + 64);
    // Every length and start offset near the small end.
    for len in 0..=200usize {
        for start in 0..17 {
            let s = &big[start..start + len];
            let init = [0, !0, rng.random()][len % 3];
            let want = reference::raw(init, s);
            let got = agree(&|| format!("raw len={len} start={start}"), |v| {
                v.raw(init, s)
            });
            assert_eq!(got, want, "len={len} start={start} init={init:#x}");
        }
    }
    // Random lengths in each band.
    for (max, count) in [(128usize, 200), (3072, 60), (16385, 25)] {
        for k in 0..count {
            let len = rng.random_range(0..max);
            let start = rng.random_range(0..64);
            let init = [0, !0, rng.random()][k % 3];
            let s = &big[start..start + len];
            let want = reference::raw(init, s);
            let got = agree(&|| format!("raw len={len} start={start}"), |v| {
                v.raw(init, s)
            });
            assert_eq!(got, want, "len={len} start={start} init={init:#x}");
        }
    }
    // The exact 16 KiB maximum.
    let s = &big[7..7 + 16384];
    assert_eq!(
        agree(&|| "raw 16384".to_string(), |v| v.raw(!0, s)),
        reference::raw(!0, s)
    );
}

/// `raw` across the bulk path's block boundaries: the three-stream split
/// from 512 bytes, whole blocks of three 8 KiB streams (24 KiB) and what
/// is left after them, at unaligned starts and with random initial CRCs.
#[test]
fn raw_matches_reference_across_bulk_blocks() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0005);
    let big = random_bytes(&mut rng, 4 * 24576 + 2048);
    let block = 24576usize;
    for len in [
        511,
        512,
        513,
        535,
        536,
        4096,
        block - 1,
        block,
        block + 1,
        block + 511,
        block + 512,
        2 * block - 8,
        2 * block,
        2 * block + 23,
        3 * block + 1000,
        4 * block + 777,
    ] {
        for start in [0usize, 1, 7, 13] {
            let s = &big[start..start + len];
            let init: u32 = rng.random();
            let want = reference::raw(init, s);
            let got = agree(&|| format!("raw len={len} start={start}"), |v| {
                v.raw(init, s)
            });
            assert_eq!(got, want, "len={len} start={start} init={init:#x}");
        }
    }
    // From 16 MiB the bulk path hands over to crc-fast (when built in).
    let huge = random_bytes(&mut rng, (16 << 20) + 9);
    for s in [&huge[..16 << 20], &huge[3..]] {
        let init: u32 = rng.random();
        let want = reference::raw(init, s);
        let got = agree(&|| format!("raw len={}", s.len()), |v| v.raw(init, s));
        assert_eq!(got, want, "len={}", s.len());
    }
}

/// Slices ending exactly at the end of their allocation (a read past the end
/// would be caught by sanitizers and Miri; the value is checked here).
#[test]
fn raw_on_slices_ending_at_allocation_end() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0003);
    for len in (0..=80usize).chain([127, 128, 129, 255, 256, 257, 1023, 1024, 1025, 4099]) {
        let buf: Box<[u8]> = random_bytes(&mut rng, len).into_boxed_slice();
        for start in 0..len.min(40) + 1 {
            let tail = &buf[start..];
            let init: u32 = rng.random();
            let want = reference::raw(init, tail);
            let got = agree(&|| format!("raw tail len={len} start={start}"), |v| {
                v.raw(init, tail)
            });
            assert_eq!(got, want, "len={len} start={start}");
        }
    }
}

/// Streaming: a CRC continued over consecutive pieces equals the CRC of the
/// whole, whatever the cut points.
#[test]
fn raw_streams_over_pieces() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0004);
    let buf = random_bytes(&mut rng, 9000);
    let want = reference::raw(0x1234_5678, &buf);
    for _ in 0..30 {
        let mut cuts: Vec<usize> = (0..rng.random_range(1..12))
            .map(|_| rng.random_range(0..=buf.len()))
            .collect();
        cuts.extend([0, buf.len()]);
        cuts.sort_unstable();
        let got = agree(&|| format!("pieces {cuts:?}"), |v| {
            cuts.windows(2)
                .fold(0x1234_5678, |c, w| v.raw(c, &buf[w[0]..w[1]]))
        });
        assert_eq!(got, want, "cuts {cuts:?}");
    }
}

// ---------------------------------------------------------------------------
// flip_range: the kernel's cases
// ---------------------------------------------------------------------------

/// Checks one flip against the reference: `crc` is the reference CRC of `buf`
/// from `seed`.
fn check_flip(buf: &[u8], seed: u32, crc: u32, first: u64, n: u64) {
    let mut flipped = buf.to_vec();
    flip_bits(&mut flipped, first, n);
    let want = reference::raw(seed, &flipped);
    let len = buf.len() as u64;
    let got = agree(
        &|| format!("flip_range len={len} first={first} n={n}"),
        |v| v.flip_range(crc, len, first, n),
    );
    assert_eq!(got, Ok(want), "flip_range len={len} first={first} n={n}");
}

/// Seed 001's `crc32c_flip_range()` test cases, for 1 KiB, 4 KiB and 64 KiB
/// buffers.
#[test]
fn flip_range_kernel_cases() {
    const SEED: u32 = 0x1234_5678;
    for (len, randoms) in [(1024usize, 100), (4096, 100), (65536, 100)] {
        let mut rng = SmallRng::seed_from_u64(0x5eed_0010 ^ len as u64);
        let buf = random_bytes(&mut rng, len);
        let crc = reference::raw(SEED, &buf);
        let bits = 8 * len as u64;

        check_flip(&buf, SEED, crc, 0, 1); // single bit at 0
        check_flip(&buf, SEED, crc, 0, 8); // first byte
        check_flip(&buf, SEED, crc, bits - 8, 8); // last byte
        check_flip(&buf, SEED, crc, bits - 1, 1); // last bit
        check_flip(&buf, SEED, crc, 0, bits); // whole buffer
        check_flip(&buf, SEED, crc, 3, bits - 3); // to the end, unaligned
        check_flip(&buf, SEED, crc, 5, 7); // across bytes 0 and 1

        // nbits = 0: unchanged, wherever it starts (including the very end).
        for first in [0, 1, 7, 8, bits / 2, bits - 1, bits] {
            let got = agree(&|| format!("flip_range n=0 first={first}"), |v| {
                v.flip_range(crc, len as u64, first, 0)
            });
            assert_eq!(got, Ok(crc), "len={len} first={first}");
        }

        for _ in 0..randoms {
            let first = rng.random_range(0..bits);
            check_flip(&buf, SEED, crc, first, 1);
        }
        for _ in 0..randoms {
            let first = rng.random_range(0..bits);
            let n = rng.random_range(1..=bits - first);
            check_flip(&buf, SEED, crc, first, n);
        }
    }
}

/// Every (first, n) in small buffers, so every byte-boundary case is hit.
#[test]
fn flip_range_exhaustive_small() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0011);
    for len in 1..=18usize {
        let buf = random_bytes(&mut rng, len);
        let seed: u32 = rng.random();
        let crc = reference::raw(seed, &buf);
        let bits = 8 * len as u64;
        for first in 0..=bits {
            for n in 0..=bits - first {
                check_flip(&buf, seed, crc, first, n);
            }
        }
    }
}

/// flip_range is only valid when the bits really all changed; applied twice it
/// must undo itself, whatever the buffer held.
#[test]
fn flip_range_twice_is_identity() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0012);
    for _ in 0..200 {
        let len: u64 = rng.random_range(1..1 << 20);
        let first = rng.random_range(0..8 * len);
        let n = rng.random_range(0..=8 * len - first);
        let c: u32 = rng.random();
        for v in vias() {
            let once = v.flip_range(c, len, first, n).unwrap();
            assert_eq!(
                v.flip_range(once, len, first, n),
                Ok(c),
                "{v:?} len={len} first={first} n={n}"
            );
            if n > 0 {
                // A run of fewer than 2^32 - 2 ones never has a zero CRC.
                assert_ne!(once, c, "{v:?} len={len} first={first} n={n}");
            }
        }
    }
}

// ---------------------------------------------------------------------------
// flip_range on buffers too large to allocate
// ---------------------------------------------------------------------------

/// Buffer lengths in bytes, up to the largest whose bit count fits a `u64`.
const HUGE_LENS: &[u64] = &[
    1 << 30,
    (1 << 30) + 3,
    (1 << 33) - 1,
    1 << 33,
    (1 << 33) + 5,
    1 << 40,
    u64::MAX / 16,
    u64::MAX / 8 - 1,
    u64::MAX / 8,
];

/// (first, n) pairs for a buffer of `len` bytes: edges, the whole buffer, runs
/// crossing 2^32 and 2^36 bits, and random ones.
fn huge_cases(rng: &mut SmallRng, len: u64) -> Vec<(u64, u64)> {
    let bits = 8 * len;
    let mut v = vec![
        (0, 1),
        (0, 8),
        (0, bits),
        (1, bits - 1),
        (bits - 1, 1),
        (bits - 8, 8),
        (bits - 1000, 1000),
        (bits / 2, 12345),
        (bits / 3, bits / 3),
        (bits - (1 << 20) - 3, 1 << 20),
    ];
    for edge in [1u64 << 32, 1 << 36, (1 << 32) - 2] {
        if edge + 100 < bits {
            v.push((edge - 17, 40));
            v.push((bits - edge - 17, 40));
            v.push((0, edge + 1));
        }
    }
    for first in 0..40 {
        v.push((first, 3 + first % 5));
    }
    for _ in 0..30 {
        let first = rng.random_range(0..bits);
        let n = rng.random_range(0..=bits - first);
        v.push((first, n));
        let n = rng.random_range(0..=(bits - first).min(5000));
        v.push((first, n));
    }
    v
}

#[test]
fn flip_range_huge_matches_model() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0020);
    for &len in HUGE_LENS {
        for (first, n) in huge_cases(&mut rng, len) {
            let c: u32 = rng.random();
            let what = || format!("flip_range len={len} first={first} n={n}");
            let got = agree(&what, |v| v.flip_range(c, len, first, n));
            assert_eq!(
                got,
                Ok(c ^ reference::flip_delta(len, first, n)),
                "{}",
                what()
            );
        }
    }
}

#[test]
fn flip_range_huge_identities() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0021);
    for &len in HUGE_LENS {
        let bits = 8 * len;
        for (first, n) in huge_cases(&mut rng, len) {
            let c: u32 = rng.random();
            let what = || format!("len={len} first={first} n={n}");
            let flip = |c: u32, len: u64, f: u64, n: u64| {
                agree(&|| format!("flip_range({c:#x}, {len}, {f}, {n})"), |v| {
                    v.flip_range(c, len, f, n).unwrap()
                })
            };
            let from_c = flip(c, len, first, n);
            let from_0 = flip(0, len, first, n);

            // (a) linearity in the CRC.
            assert_eq!(from_c ^ c, from_0, "linearity {}", what());

            // (b) two adjacent runs compose.
            let n1 = if n == 0 { 0 } else { rng.random_range(0..=n) };
            let two = flip(flip(c, len, first, n1), len, first + n1, n - n1);
            assert_eq!(two, from_c, "composition n1={n1} {}", what());

            // (c) only the bits after the run matter: drop leading bytes.
            let lead = first / 8;
            for drop in [lead, lead / 2, lead.min(1), lead.min(1 << 31)] {
                let moved = flip(0, len - drop, first - 8 * drop, n);
                assert_eq!(moved, from_0, "dropping {drop} bytes {}", what());
            }

            // (d) trailing zero bytes are a shift.
            let tail = (bits - first - n) / 8;
            for k in [tail, tail / 2, tail.min(1), tail.min(3 << 30)] {
                let shorter = flip(0, len - k, first, n);
                let shifted = agree(&|| format!("shift by {k} {}", what()), |v| {
                    v.shift(shorter, k)
                });
                assert_eq!(shifted, from_0, "trailing {k} bytes {}", what());
            }
        }
        // (c) the last n bits of any buffer give the same delta.
        for n in [1u64, 7, 8, 9, 64, 1000, 1 << 20, (1 << 32) + 1] {
            let here = Engine::detect().flip_range(0, len, bits - n, n).unwrap();
            for other in [n.div_ceil(8), n.div_ceil(8) + 1, 4096, 1 << 30] {
                if 8 * other < n {
                    continue;
                }
                let there = agree(&|| format!("last {n} bits of {other}"), |v| {
                    v.flip_range(0, other, 8 * other - n, n).unwrap()
                });
                assert_eq!(here, there, "last {n} bits: len {len} vs {other}");
            }
        }
    }
}

/// A 3 MiB buffer (past the 2 MiB depth change of the exponent tree),
/// compared directly against the reference.
#[test]
fn flip_range_moderate_buffer_against_reference() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0022);
    let len = 3 << 20;
    let mut buf = random_bytes(&mut rng, len);
    let seed = 0x0BAD_F00D;
    let crc = reference::raw(seed, &buf);
    let bits = 8 * len as u64;
    // One long run from near the start to near the end, applied to the buffer
    // and to the CRC, then a short one near the start (far from the end).
    let (f1, n1) = (13, bits - 13 - 77);
    let c1 = agree(&|| "3 MiB long run".to_string(), |v| {
        v.flip_range(crc, len as u64, f1, n1)
    })
    .unwrap();
    flip_bits(&mut buf, f1, n1);
    assert_eq!(c1, reference::raw(seed, &buf), "long run");
    let (f2, n2) = (1000, 3);
    let c2 = agree(&|| "3 MiB short run".to_string(), |v| {
        v.flip_range(c1, len as u64, f2, n2)
    })
    .unwrap();
    flip_bits(&mut buf, f2, n2);
    assert_eq!(c2, reference::raw(seed, &buf), "short run");
}

// ---------------------------------------------------------------------------
// shift
// ---------------------------------------------------------------------------

#[test]
fn shift_matches_reference() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0030);
    const MAX: usize = 70_000;
    let mut checkpoints: Vec<usize> = (0..=1100).collect();
    checkpoints.extend([
        2047, 2048, 2049, 4095, 4096, 4097, 8191, 8192, 8193, 32767, 32768, 65535, 65536, 65537,
        MAX,
    ]);
    checkpoints.extend((0..100).map(|_| rng.random_range(0..=MAX)));
    checkpoints.sort_unstable();
    checkpoints.dedup();
    for c in [0u32, 1, !0, 0x8000_0000, rng.random(), rng.random()] {
        // Walk the reference through the zero bytes once, checking on the way.
        let mut reg = c;
        let mut at = 0usize;
        for &n in &checkpoints {
            reg = reference::zeros(reg, n - at);
            at = n;
            let got = agree(&|| format!("shift({c:#x}, {n})"), |v| v.shift(c, n as u64));
            assert_eq!(got, reg, "shift({c:#x}, {n})");
        }
    }
}

#[test]
fn shift_by_zero_is_identity() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0031);
    for c in [0u32, 1, !0]
        .into_iter()
        .chain((0..50).map(|_| rng.random()))
    {
        for v in vias() {
            assert_eq!(v.shift(c, 0), c, "{v:?} shift({c:#x}, 0)");
        }
    }
}

#[test]
fn shift_huge_counts() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0032);
    let mut ns: Vec<u64> = vec![
        (1 << 31) - 1, // x^(8 n) = 1 for multiples of 2^31 - 1 bytes
        (1 << 31) - 2,
        (1 << 31) + 1,
        (1 << 32) - 2,
        (1 << 32) - 1,
        1 << 32,
        (1 << 33) - 1,
        1 << 33,
        (1 << 33) + 1,
        1 << 40,
        u64::MAX,
        u64::MAX - 1,
        u64::MAX / 8,
        ((1 << 31) - 1) * 1000,
    ];
    ns.extend((0..60).map(|_| rng.random::<u64>() >> rng.random_range(0..64)));
    for &n in &ns {
        for c in [1u32, !0, rng.random()] {
            let what = || format!("shift({c:#x}, {n})");
            let got = agree(&what, |v| v.shift(c, n));
            assert_eq!(got, reference::shift(c, n), "{}", what());
        }
    }
    // Composition, where a + b does not overflow.
    for _ in 0..300 {
        let a = rng.random::<u64>() >> rng.random_range(0..64);
        let b = rng.random::<u64>() >> rng.random_range(0..64);
        let Some(ab) = a.checked_add(b) else { continue };
        let c: u32 = rng.random();
        for v in vias() {
            assert_eq!(
                v.shift(v.shift(c, a), b),
                v.shift(c, ab),
                "{v:?} shift(shift({c:#x}, {a}), {b})"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// combine
// ---------------------------------------------------------------------------

#[test]
fn combine_matches_reference() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0040);
    let mut cases: Vec<(usize, usize)> = vec![(0, 0), (0, 1), (1, 0), (0, 5000), (5000, 0)];
    cases.extend((0..80).map(|_| (rng.random_range(0..5000), rng.random_range(0..5000))));
    for (la, lb) in cases {
        let a = random_bytes(&mut rng, la);
        let b = random_bytes(&mut rng, lb);
        let ab = [a.as_slice(), b.as_slice()].concat();

        let std_ab = reference::checksum(&ab);
        let got = agree(&|| format!("combine std la={la} lb={lb}"), |v| {
            v.combine(v.checksum(&a), v.checksum(&b), lb as u64)
        });
        assert_eq!(got, std_ab, "standard la={la} lb={lb}");
        let got = agree(&|| format!("combine std ref la={la} lb={lb}"), |v| {
            v.combine(reference::checksum(&a), reference::checksum(&b), lb as u64)
        });
        assert_eq!(got, std_ab, "standard from reference la={la} lb={lb}");

        let seed: u32 = rng.random();
        let raw_ab = reference::raw(seed, &ab);
        let got = agree(&|| format!("combine raw la={la} lb={lb}"), |v| {
            v.combine(reference::raw(seed, &a), reference::raw(0, &b), lb as u64)
        });
        assert_eq!(got, raw_ab, "raw la={la} lb={lb} seed={seed:#x}");
    }
}

#[test]
fn combine_with_empty_parts() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0041);
    let a = random_bytes(&mut rng, 777);
    let ca = reference::checksum(&a);
    for v in vias() {
        // Empty B: its standard CRC is 0 and the shift is by 0 bytes.
        assert_eq!(v.combine(ca, reference::checksum(&[]), 0), ca, "{v:?}");
        // Empty A: its standard CRC is 0.
        assert_eq!(
            v.combine(reference::checksum(&[]), ca, a.len() as u64),
            ca,
            "{v:?}"
        );
        // Raw form: empty A leaves the seed, which must be shifted past B.
        let seed = 0xC0FF_EE00;
        assert_eq!(
            v.combine(seed, reference::raw(0, &a), a.len() as u64),
            reference::raw(seed, &a),
            "{v:?}"
        );
    }
}

/// Combining with a second part too long to allocate: the first CRC moves
/// past `len_b` zero bytes.
#[test]
fn combine_huge_lengths() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0042);
    let mut lens: Vec<u64> = vec![
        1 << 20,
        (1 << 31) - 1,
        1 << 32,
        (1 << 33) + 1,
        1 << 40,
        u64::MAX / 8,
        u64::MAX,
    ];
    lens.extend((0..40).map(|_| rng.random::<u64>() >> rng.random_range(0..40)));
    for len_b in lens {
        let (a, b): (u32, u32) = (rng.random(), rng.random());
        let what = || format!("combine({a:#x}, {b:#x}, {len_b})");
        let got = agree(&what, |v| v.combine(a, b, len_b));
        assert_eq!(got, reference::shift(a, len_b) ^ b, "{}", what());
    }
}

// ---------------------------------------------------------------------------
// splice
// ---------------------------------------------------------------------------

/// Replaces `buf[offset..offset + new.len()]` by `new`, checking `splice`
/// against the reference; returns the new reference CRC.
fn check_splice(buf: &mut [u8], seed: u32, crc: u32, offset: usize, new: &[u8]) -> u32 {
    let old = buf[offset..offset + new.len()].to_vec();
    buf[offset..offset + new.len()].copy_from_slice(new);
    let want = reference::raw(seed, buf);
    let len = buf.len() as u64;
    let what = || format!("splice len={len} offset={offset} n={}", new.len());
    let got = agree(&what, |v| v.splice(crc, len, offset as u64, &old, new));
    assert_eq!(got, Ok(want), "{}", what());
    want
}

#[test]
fn splice_matches_reference() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0050);
    for len in [1usize, 7, 64, 255, 256, 257, 1000, 4096] {
        let mut buf = random_bytes(&mut rng, len);
        let seed: u32 = rng.random();
        let mut crc = reference::raw(seed, &buf);
        let mut regions = vec![
            (0, 1),                             // first byte
            (len - 1, 1),                       // last byte
            (0, len),                           // whole buffer
            (0, len.min(300)),                  // start, chunked past 256
            (len - len.min(513), len.min(513)), // end, two chunks and a bit
            (len / 3, len / 3),
        ];
        for _ in 0..20 {
            let off = rng.random_range(0..len);
            regions.push((off, rng.random_range(0..=len - off)));
        }
        for (off, n) in regions {
            let new = random_bytes(&mut rng, n);
            crc = check_splice(&mut buf, seed, crc, off, &new);
        }
    }
}

/// Regions around the 256-byte chunk size, at every alignment.
#[test]
fn splice_long_regions() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0051);
    let mut buf = random_bytes(&mut rng, 3000);
    let seed = 0x1357_9BDF;
    let mut crc = reference::raw(seed, &buf);
    for n in [255usize, 256, 257, 511, 512, 513, 768, 1000, 2999, 3000] {
        for off in [0, (3000 - n).min(1), 3000 - n] {
            let new = random_bytes(&mut rng, n);
            crc = check_splice(&mut buf, seed, crc, off, &new);
        }
    }
    // New contents equal to the old: nothing changes.
    let same = buf[100..900].to_vec();
    assert_eq!(check_splice(&mut buf, seed, crc, 100, &same), crc);
}

#[test]
fn splice_empty_region_is_identity() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0052);
    for _ in 0..50 {
        let len: u64 = rng.random_range(0..1 << 40);
        let offset = rng.random_range(0..=len);
        let c: u32 = rng.random();
        for v in vias() {
            assert_eq!(v.splice(c, len, offset, &[], &[]), Ok(c), "{v:?}");
        }
    }
    for v in vias() {
        assert_eq!(v.splice(7, 0, 0, &[], &[]), Ok(7), "{v:?}");
        assert_eq!(v.splice(7, u64::MAX, u64::MAX, &[], &[]), Ok(7), "{v:?}");
    }
}

/// A splice in a huge (unallocated) buffer is a shifted delta.
#[test]
fn splice_in_huge_buffers() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0053);
    for &len in HUGE_LENS.iter().chain(&[u64::MAX]) {
        for _ in 0..10 {
            let n = rng.random_range(1..600usize);
            let old = random_bytes(&mut rng, n);
            let new = random_bytes(&mut rng, n);
            let offset = rng.random_range(0..=len - n as u64);
            let c: u32 = rng.random();
            let x: Vec<u8> = old.iter().zip(&new).map(|(a, b)| a ^ b).collect();
            let after = len - offset - n as u64;
            let want = c ^ reference::shift(reference::raw(0, &x), after);
            let what = || format!("splice len={len} offset={offset} n={n}");
            let got = agree(&what, |v| v.splice(c, len, offset, &old, &new));
            assert_eq!(got, Ok(want), "{}", what());
        }
    }
}

/// Both updates XOR in the CRC of the change alone, so they apply unchanged
/// to a standard CRC-32C value (`!raw(!0, ..)`) of the buffer, and
/// equivalently as `!update(!c, ..)`.
#[test]
fn updates_apply_to_standard_crcs() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_0054);
    for len in [1usize, 9, 100, 4096] {
        let mut buf = random_bytes(&mut rng, len);
        for _ in 0..20 {
            let c = reference::checksum(&buf);
            let bits = 8 * len as u64;
            let first = rng.random_range(0..bits);
            let n = rng.random_range(0..=bits - first);
            flip_bits(&mut buf, first, n);
            let want = reference::checksum(&buf);
            for v in vias() {
                let l = len as u64;
                assert_eq!(v.flip_range(c, l, first, n), Ok(want), "{v:?}");
                assert_eq!(v.flip_range(!c, l, first, n).map(|x| !x), Ok(want), "{v:?}");
            }

            let c = want;
            let off = rng.random_range(0..len);
            let k = rng.random_range(0..=len - off);
            let old = buf[off..off + k].to_vec();
            let new = random_bytes(&mut rng, k);
            buf[off..off + k].copy_from_slice(&new);
            let want = reference::checksum(&buf);
            for v in vias() {
                let (l, o) = (len as u64, off as u64);
                assert_eq!(v.splice(c, l, o, &old, &new), Ok(want), "{v:?}");
                assert_eq!(
                    v.splice(!c, l, o, &old, &new).map(|x| !x),
                    Ok(want),
                    "{v:?}"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------

#[test]
fn flip_range_rejects_bad_ranges() {
    for v in vias() {
        let cases = [
            (16u64, 0u64, 129u64),
            (16, 128, 1),
            (16, 129, 0),
            (16, 127, 2),
            (0, 0, 1),
            (0, 1, 0),
            (16, u64::MAX, 1), // first + n overflows
            (16, 1, u64::MAX), // first + n overflows
            (16, u64::MAX, u64::MAX),
            (u64::MAX / 8, u64::MAX - 7, 1), // ends one past the largest buffer
            (u64::MAX / 8, 8, u64::MAX - 8),
        ];
        for (buf_len, first_bit, nbits) in cases {
            let got = v.flip_range(0x1234, buf_len, first_bit, nbits);
            let want = CrcError::BitRangeOutOfBounds {
                first_bit,
                nbits,
                buf_len,
            };
            assert_eq!(
                got,
                Err(want.clone()),
                "{v:?} {buf_len} {first_bit} {nbits}"
            );
            assert!(!want.to_string().is_empty());
        }
        // The largest buffer whose bit count fits still works, to its end.
        assert!(v.flip_range(0, u64::MAX / 8, u64::MAX - 8, 1).is_ok());
        assert!(v.flip_range(0, u64::MAX / 8, 0, u64::MAX - 7).is_ok());
        for buf_len in [u64::MAX / 8 + 1, 1 << 62, u64::MAX] {
            for (first_bit, nbits) in [(0, 0), (0, 1), (5, 3)] {
                let got = v.flip_range(0, buf_len, first_bit, nbits);
                let want = CrcError::BufferTooLarge { buf_len };
                assert_eq!(got, Err(want.clone()), "{v:?} {buf_len}");
                assert!(!want.to_string().is_empty());
            }
        }
    }
}

#[test]
fn splice_rejects_bad_regions() {
    for v in vias() {
        for (old, new) in [
            (&[1u8, 2][..], &[1u8][..]),
            (&[], &[0]),
            (&[0; 300], &[0; 299]),
        ] {
            let got = v.splice(5, 1000, 0, old, new);
            let want = CrcError::LengthMismatch {
                old: old.len(),
                new: new.len(),
            };
            assert_eq!(got, Err(want.clone()), "{v:?}");
            assert!(!want.to_string().is_empty());
        }
        let four = [0u8, 1, 2, 3];
        let cases = [
            (10u64, 7u64, 4usize), // ends one past the buffer
            (10, 11, 0),           // empty region past the end
            (10, 11, 4),
            (0, 0, 4),
            (10, u64::MAX, 4), // offset + len overflows
            (u64::MAX, u64::MAX - 2, 4),
        ];
        for (buf_len, offset, n) in cases {
            let got = v.splice(5, buf_len, offset, &four[..n], &four[..n]);
            let want = CrcError::ByteRangeOutOfBounds {
                offset,
                len: n as u64,
                buf_len,
            };
            assert_eq!(got, Err(want.clone()), "{v:?} {buf_len} {offset} {n}");
            assert!(!want.to_string().is_empty());
        }
        // Exactly at the end is fine.
        assert!(v.splice(5, 10, 6, &four, &four).is_ok());
        assert!(v.splice(5, u64::MAX, u64::MAX - 4, &four, &four).is_ok());
    }
}

#[test]
fn error_display_names_the_values() {
    let e = CrcError::BitRangeOutOfBounds {
        first_bit: 123,
        nbits: 456,
        buf_len: 789,
    };
    let s = e.to_string();
    assert!(
        s.contains("123") && s.contains("456") && s.contains("789"),
        "{s}"
    );
    let s = CrcError::ByteRangeOutOfBounds {
        offset: 11,
        len: 22,
        buf_len: 33,
    }
    .to_string();
    assert!(
        s.contains("11") && s.contains("22") && s.contains("33"),
        "{s}"
    );
    let s = CrcError::LengthMismatch { old: 44, new: 55 }.to_string();
    assert!(s.contains("44") && s.contains("55"), "{s}");
    let s = CrcError::ChecksumLenTooLong {
        csum_len: 66,
        len: 77,
    }
    .to_string();
    assert!(s.contains("66") && s.contains("77"), "{s}");
    let s = CrcError::BufferTooLarge { buf_len: 88 }.to_string();
    assert!(s.contains("88"), "{s}");
    // It is a std error.
    let _: &dyn std::error::Error = &e;
}

// ---------------------------------------------------------------------------
// Property tests
// ---------------------------------------------------------------------------

/// Above this many bytes the bit-at-a-time reference is too slow for
/// proptest; the bulk path (checked against it above) stands in.
const REF_MAX: usize = 4096;

/// A full recompute by the bulk path of both engines (which must agree),
/// and by the reference when the buffer is small.
fn recompute(crc: u32, bytes: &[u8]) -> Result<u32, TestCaseError> {
    let fast = Engine::detect().raw(crc, bytes);
    let soft = Engine::portable().raw(crc, bytes);
    prop_assert_eq!(fast, soft, "bulk paths disagree on {} bytes", bytes.len());
    if bytes.len() <= REF_MAX {
        prop_assert_eq!(fast, reference::raw(crc, bytes), "bulk vs reference");
    }
    Ok(fast)
}

const EDGE_LENS: &[usize] = &[
    0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 255, 256, 257, 4095, 4096, 4097, 65535,
    65536, 70_000,
];

fn arb_len() -> impl Strategy<Value = usize> {
    prop_oneof![
        2 => 0..=64usize,
        3 => 0..=REF_MAX,
        3 => 0..=70_000usize,
        1 => prop::sample::select(EDGE_LENS),
    ]
}

/// A position in `0..=max` from a random `u64` and a choice of edge.
fn pick(edge: u8, r: u64, max: u64) -> u64 {
    match edge % 8 {
        0 => 0,
        1 => max,
        2 => max.min(r % 9),
        3 => max - max.min(r % 9),
        _ => r % (max + 1),
    }
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

static ZEROS: [u8; 70_000] = [0; 70_000];

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn prop_raw_streams(
        len in arb_len(),
        seed in any::<u64>(),
        crc in any::<u32>(),
        (start, e, r) in (0..64usize, any::<u8>(), any::<u64>()),
    ) {
        // An unaligned slice of a larger buffer, continued across a cut.
        let buf = bytes_from(len + 64, seed);
        let s = &buf[start..start + len];
        let want = recompute(crc, s)?;
        let cut = pick(e, r, len as u64) as usize;
        let got = agree_prop(&|| format!("raw len={len} cut={cut}"), |v| {
            v.raw(v.raw(crc, &s[..cut]), &s[cut..])
        })?;
        prop_assert_eq!(got, want);
    }

    #[test]
    fn prop_flip_range(
        len in arb_len(),
        seed in any::<u64>(),
        crc_seed in any::<u32>(),
        (e1, r1, e2, r2) in (any::<u8>(), any::<u64>(), any::<u8>(), any::<u64>()),
    ) {
        let mut buf = bytes_from(len, seed);
        let bits = 8 * len as u64;
        let first = pick(e1, r1, bits);
        let n = pick(e2, r2, bits - first);
        let crc = recompute(crc_seed, &buf)?;
        flip_bits(&mut buf, first, n);
        let want = recompute(crc_seed, &buf)?;
        let got = agree_prop(&|| format!("flip_range len={len} first={first} n={n}"), |v| {
            v.flip_range(crc, len as u64, first, n)
        })?;
        prop_assert_eq!(got, Ok(want), "len={} first={} n={}", len, first, n);
    }

    #[test]
    fn prop_splice(
        len in arb_len(),
        seed in any::<u64>(),
        crc_seed in any::<u32>(),
        (e1, r1, e2, r2) in (any::<u8>(), any::<u64>(), any::<u8>(), any::<u64>()),
    ) {
        let mut buf = bytes_from(len, seed);
        let offset = pick(e1, r1, len as u64) as usize;
        let n = pick(e2, r2, (len - offset) as u64) as usize;
        let crc = recompute(crc_seed, &buf)?;
        let old = buf[offset..offset + n].to_vec();
        let new = bytes_from(n, !seed);
        buf[offset..offset + n].copy_from_slice(&new);
        let want = recompute(crc_seed, &buf)?;
        let got = agree_prop(&|| format!("splice len={len} offset={offset} n={n}"), |v| {
            v.splice(crc, len as u64, offset as u64, &old, &new)
        })?;
        prop_assert_eq!(got, Ok(want), "len={} offset={} n={}", len, offset, n);
    }

    #[test]
    fn prop_shift(n in arb_len(), c in any::<u32>()) {
        let want = recompute(c, &ZEROS[..n])?;
        prop_assert_eq!(reference::shift(c, n as u64), want, "model");
        let got = agree_prop(&|| format!("shift({c:#x}, {n})"), |v| v.shift(c, n as u64))?;
        prop_assert_eq!(got, want);
    }

    #[test]
    fn prop_shift_huge(n in any::<u64>(), m in any::<u64>(), c in any::<u32>()) {
        let got = agree_prop(&|| format!("shift({c:#x}, {n})"), |v| v.shift(c, n))?;
        prop_assert_eq!(got, reference::shift(c, n));
        let m = m % (u64::MAX - n).saturating_add(1);
        let two = agree_prop(&|| format!("shift(shift({c:#x}, {n}), {m})"), |v| {
            v.shift(v.shift(c, n), m)
        })?;
        prop_assert_eq!(two, agree_prop(&|| "shift sum".to_string(), |v| v.shift(c, n + m))?);
        let got = agree_prop(&|| format!("combine({c:#x}, {m:#x}, {n})"), |v| {
            v.combine(c, m as u32, n)
        })?;
        prop_assert_eq!(got, reference::shift(c, n) ^ m as u32);
    }

    #[test]
    fn prop_combine(
        len in arb_len(),
        seed in any::<u64>(),
        crc_seed in any::<u32>(),
        (e, r) in (any::<u8>(), any::<u64>()),
    ) {
        let buf = bytes_from(len, seed);
        let cut = pick(e, r, len as u64) as usize;
        let (a, b) = buf.split_at(cut);
        let lb = b.len() as u64;

        let want_std = !recompute(!0, &buf)?;
        let got = agree_prop(&|| format!("combine std len={len} cut={cut}"), |v| {
            v.combine(v.checksum(a), v.checksum(b), lb)
        })?;
        prop_assert_eq!(got, want_std, "standard");

        let want_raw = recompute(crc_seed, &buf)?;
        let (ra, rb) = (recompute(crc_seed, a)?, recompute(0, b)?);
        let got = agree_prop(&|| format!("combine raw len={len} cut={cut}"), |v| {
            v.combine(ra, rb, lb)
        })?;
        prop_assert_eq!(got, want_raw, "raw");
    }
}
