//! Portable word-skipping loops: the fallback every test also runs.

/// Lane width, in bits, of the zero-chunk filter used by the clear-area search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Chunk {
    B8 = 8,
    B16 = 16,
    B32 = 32,
    B64 = 64,
}

/// First index `>= from` with `words[i] != pat` (the tests' oracle).
#[cfg(test)]
pub(crate) fn first_diff(words: &[u64], from: usize, pat: u64) -> Option<usize> {
    let tail = words.get(from..)?;
    tail.iter().position(|&w| w != pat).map(|i| i + from)
}

/// Last index `< end` with `words[i] != pat`.
#[inline]
pub(crate) fn last_diff(words: &[u64], end: usize, pat: u64) -> Option<usize> {
    let head = words.get(..end.min(words.len()))?;
    head.iter().rposition(|&w| w != pat)
}

/// Offset (in bits, lane-aligned) of the lowest all-zero `chunk` lane of `w`.
///
/// Uses the classic "has a zero lane" identity `(w - 0x..01) & !w & 0x..80`: a
/// lane's high bit ends up set only if the lane is zero or sits above a zero
/// lane (through the borrow), so the lowest flagged lane is the first zero one.
#[inline(always)]
pub(crate) fn zero_chunk_in_word(w: u64, chunk: Chunk) -> Option<u32> {
    let (lo, hi) = match chunk {
        Chunk::B8 => (0x0101_0101_0101_0101u64, 0x8080_8080_8080_8080u64),
        Chunk::B16 => (0x0001_0001_0001_0001, 0x8000_8000_8000_8000),
        Chunk::B32 => (0x0000_0001_0000_0001, 0x8000_0000_8000_0000),
        Chunk::B64 => return (w == 0).then_some(0),
    };
    let t = w.wrapping_sub(lo) & !w & hi;
    (t != 0).then(|| t.trailing_zeros() & !(chunk as u32 - 1))
}

/// Bit position of the first zero `chunk` lane in `words[from..]`.
#[inline]
pub(crate) fn first_zero_chunk(words: &[u64], from: usize, chunk: Chunk) -> Option<usize> {
    // One loop per lane width, chosen once per call.
    match chunk {
        Chunk::B8 => zero_lane_scan::<8>(words, from),
        Chunk::B16 => zero_lane_scan::<16>(words, from),
        Chunk::B32 => zero_lane_scan::<32>(words, from),
        Chunk::B64 => zero_lane_scan::<64>(words, from),
    }
}

/// The zero `C`-bit lanes of `w` as flags: non-zero iff `w` has one, and
/// then its lowest set bit lies in the first zero lane (the identity of
/// [`zero_chunk_in_word`]; at `C = 64`, 1 iff `w == 0`).
#[inline(always)]
fn zero_lane_flags<const C: usize>(w: u64) -> u64 {
    let (lo, hi) = match C {
        8 => (0x0101_0101_0101_0101u64, 0x8080_8080_8080_8080u64),
        16 => (0x0001_0001_0001_0001, 0x8000_8000_8000_8000),
        32 => (0x0000_0001_0000_0001, 0x8000_0000_8000_0000),
        _ => return u64::from(w == 0),
    };
    w.wrapping_sub(lo) & !w & hi
}

/// [`first_zero_chunk`] for lanes of `C` bits: four words per branch (their
/// flags OR-ed; at 64 bits their minimum), then the word that holds the
/// lane. A loop of one word per branch runs at about one word per cycle at
/// best and at half that when its few instructions straddle a 64-byte line
/// (1.9x measured on Zen 3, depending only on where the linker puts it);
/// four words per branch leave the loop overhead a quarter of the work.
#[inline(always)]
fn zero_lane_scan<const C: usize>(words: &[u64], from: usize) -> Option<usize> {
    let tail = words.get(from..)?;
    let mut base = from;
    for q in tail.chunks_exact(4) {
        let hit = if C == 64 {
            q[0].min(q[1]).min(q[2].min(q[3])) == 0
        } else {
            (zero_lane_flags::<C>(q[0])
                | zero_lane_flags::<C>(q[1])
                | zero_lane_flags::<C>(q[2])
                | zero_lane_flags::<C>(q[3]))
                != 0
        };
        if hit {
            break;
        }
        base += 4;
    }
    // The step that hit, or the last words short of a step.
    for (i, &w) in words[base..].iter().enumerate() {
        let t = zero_lane_flags::<C>(w);
        if t != 0 {
            let off = if C == 64 {
                0
            } else {
                t.trailing_zeros() as usize & !(C - 1)
            };
            return Some((base + i) * 64 + off);
        }
    }
    None
}

/// Number of set bits in `words`.
#[inline(always)]
pub(crate) fn count_ones(words: &[u64]) -> usize {
    words.iter().map(|w| w.count_ones() as usize).sum()
}

/// The word holding the `n`-th set bit (from 0) and the bit's rank inside it,
/// or `Err(n - total)` when `words` holds `total <= n` set bits. Counts eight
/// words at a time, then narrows to the word.
#[inline(always)]
pub(crate) fn nth_word(words: &[u64], mut n: usize) -> Result<(usize, u32), usize> {
    let mut chunks = words.chunks_exact(8);
    let mut base = 0;
    for c in &mut chunks {
        let k = count_ones(c);
        if n < k {
            break;
        }
        n -= k;
        base += 8;
    }
    for (i, &w) in words[base..].iter().enumerate() {
        let k = w.count_ones() as usize;
        if n < k {
            return Ok((base + i, n as u32));
        }
        n -= k;
    }
    Err(n)
}
