//! Target `crc32c`: the incremental CRC-32C identities against
//! recomputation, on every engine this machine has (each SIMD level and the
//! portable one), and every engine agreeing with the others.

use spacekit::arch::Level;
use spacekit::crc32c::Engine;

use super::input::Input;

/// Bitwise CRC-32C (reflected, poly 0x82F63B78), no inversion: the
/// reference every engine's `raw` must equal.
fn reference_raw(mut crc: u32, bytes: &[u8]) -> u32 {
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    crc
}

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let seed = input.u32();
    let split = input.u16() as usize;
    let shift_a = input.edgy_u64();
    let shift_b = input.edgy_u64();
    let first_bit = input.u32() as u64;
    let nbits = input.u32() as u64;
    let splice_off = input.u16() as u64;
    let splice_len = input.u8() as usize;
    let new_bytes = input.bytes(splice_len).to_vec();
    let buf = input.rest();
    let split = split.min(buf.len());
    let (a, b) = buf.split_at(split);

    let expect = reference_raw(seed, buf);
    let engines: Vec<Engine> = Level::available()
        .map(Engine::at_level)
        .chain([Engine::portable(), Engine::detect()])
        .collect();
    for e in engines {
        let name = e.names();
        assert_eq!(e.raw(seed, buf), expect, "{name:?}: raw");
        assert_eq!(
            e.checksum(buf),
            !reference_raw(!0, buf),
            "{name:?}: checksum"
        );
        // combine, raw and standard.
        assert_eq!(
            e.combine(e.raw(seed, a), e.raw(0, b), b.len() as u64),
            expect,
            "{name:?}: raw combine at {split}"
        );
        assert_eq!(
            e.combine(e.checksum(a), e.checksum(b), b.len() as u64),
            e.checksum(buf),
            "{name:?}: standard combine at {split}"
        );
        // shift: zeros appended, and composition for huge lengths.
        let zeros = vec![0u8; (shift_a % 4096) as usize];
        assert_eq!(
            e.shift(seed, zeros.len() as u64),
            reference_raw(seed, &zeros),
            "{name:?}: shift by {}",
            zeros.len()
        );
        let (x, y) = (shift_a >> 1, shift_b >> 1);
        assert_eq!(
            e.shift(e.shift(seed, x), y),
            e.shift(seed, x + y),
            "{name:?}: shift({x}) then shift({y})"
        );
        // raw_words over the same bytes.
        let mut words = vec![0u64; buf.len().div_ceil(8)];
        for (i, &byte) in buf.iter().enumerate() {
            words[i / 8] |= u64::from(byte) << (8 * (i % 8));
        }
        assert_eq!(
            e.raw_words(seed, &words, buf.len()),
            expect,
            "{name:?}: raw_words"
        );
        // flip_range against flipping the bits and recomputing.
        let len = buf.len() as u64;
        let fb = first_bit % (8 * len + 2);
        let nb = nbits % (8 * len + 2);
        let got = e.flip_range(expect, len, fb, nb);
        if fb + nb <= 8 * len {
            let mut flipped = buf.to_vec();
            for i in fb..fb + nb {
                flipped[(i / 8) as usize] ^= 1 << (i % 8);
            }
            assert_eq!(
                got.ok(),
                Some(reference_raw(seed, &flipped)),
                "{name:?}: flip_range({fb}, {nb}) of {len} bytes"
            );
        } else {
            assert!(
                got.is_err(),
                "{name:?}: flip_range({fb}, {nb}) of {len} bytes accepted"
            );
        }
        // splice against replacing the bytes and recomputing.
        let off = splice_off % (len + 2);
        let old = buf.get(off as usize..(off as usize).saturating_add(new_bytes.len()));
        match old {
            Some(old) if old.len() == new_bytes.len() => {
                let mut spliced = buf.to_vec();
                spliced[off as usize..off as usize + new_bytes.len()].copy_from_slice(&new_bytes);
                assert_eq!(
                    e.splice(expect, len, off, old, &new_bytes).ok(),
                    Some(reference_raw(seed, &spliced)),
                    "{name:?}: splice at {off}"
                );
                if !new_bytes.is_empty() {
                    assert!(
                        e.splice(expect, len, off, old, &new_bytes[1..]).is_err(),
                        "{name:?}: splice with a length mismatch accepted"
                    );
                }
            }
            _ => {
                let old = vec![0u8; new_bytes.len()];
                assert!(
                    e.splice(expect, len, off, &old, &new_bytes).is_err(),
                    "{name:?}: splice past the end accepted (at {off}, {} bytes of {len})",
                    new_bytes.len()
                );
            }
        }
    }
}
