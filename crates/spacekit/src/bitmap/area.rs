//! Aligned search for `nr` consecutive clear bits (bitmap_find_next_zero_area_off).
//!
//! # Result
//!
//! The lowest `p >= start` with `(p + align_offset) & align_mask == 0` and bits
//! `[p, p + nr)` all clear. The kernel's restart loop returns that same `p`: a
//! restart never skips an acceptable window, because every window starting at
//! or before the colliding bit contains it.
//!
//! # Algorithm
//!
//! The kernel's loop finds a clear bit, checks the window behind it for a set
//! bit and restarts past it; on a random bitmap it restarts once per set bit
//! (seed 000: once per *last* set bit of a window) and rereads the same words
//! each time. Here three pieces cooperate:
//!
//! * **The fast path** (inlined into the caller), for `nr <= 1024`, restarts
//!   the way seed 000 does: check the candidate window backwards, restart past
//!   its last set bit. Windows restart past their last collision, so this
//!   reads each word about once; its cost is per restart, which is small when
//!   collisions are sparse and large when they are dense. So after four tries
//!   it continues only while the collision it just found lay before the
//!   window's last word (sparse), and otherwise hands over to the full scan at
//!   the current candidate (no window starts earlier).
//!
//! * **The exact scan** reads words forward, carrying the start `r` of the
//!   clear run that reaches the current word boundary. For each word it
//!   (1) ends the carried run at the word's first set bit and accepts the lowest
//!   aligned start in it if the window fits, (2) finds windows inside the word
//!   with a doubling shift-and (`log2 nr` steps) masked by the alignment
//!   pattern, and (3) starts a new carried run at the word's top clear bits.
//!   All-clear and all-set words are skipped in bulk (SIMD). With coarse
//!   alignment it jumps straight to the next acceptable start after a
//!   collision. Every candidate start is examined once.
//!
//! * **The skip filter** jumps over regions that cannot hold a window. A run of
//!   `nr >= 2c - 1` clear bits contains a whole aligned `c`-bit lane of zeros,
//!   so for 15 <= nr < 127 the filter looks for the next all-zero byte,
//!   16-bit or 32-bit lane (c = 8, 16, 32) with SIMD compares. A run of
//!   `nr >= 127` contains `m = (nr + 1) / 64 - 1` whole zero words: for `m = 1`
//!   the filter finds the next zero word with SIMD; for `m > 1` it probes one
//!   word in `m` (every block of `m` words holds exactly one probe) and widens
//!   a zero probe to its zero run.
//!
//! The exact scan hands over to the filter at a word boundary `B` only when
//! the carried run is shorter than one lane (`B - r < c`: then every window
//! starting at or after `r` has its zero lane, or its whole zero words, at or
//! after `B`, where the filter looks) and when the next word (the one at `B`)
//! would not stop the filter anyway (for `m > 16` the strided filter always takes over: on
//! sparse maps it is cheaper than reading every word). The filter's hit `z`
//! bounds the window start from below (`z + c - nr` for a lane, `64 (a - 1) + 1`
//! for a block of zero words starting at word `a`); the exact scan resumes
//! there, or at `r` if that is later. Neither loop moves back before the
//! word holding `r`, so a word is read a bounded number of times (a fast-path
//! window, a filter probe and its widening, the exact scan), never once per
//! collision as in the kernel's loop.

use super::arch::{self, scalar::zero_chunk_in_word, Chunk};
use super::find::{next_in, prev_in, skip_fwd};
use super::word::{first_word_mask, last_word_mask, runs_of_ones, words_for, Align};
use crate::arch::Level;

/// How the search skips ahead between exact scans.
#[derive(Clone, Copy, Debug)]
enum Filter {
    /// A window contains an all-zero aligned lane of this width.
    Lane(Chunk),
    /// A window contains this many consecutive all-zero words.
    Words(usize),
}

impl Filter {
    /// The filter for windows of `nr` bits; `None` when `nr` is too short to
    /// guarantee a zero lane (then only all-set words are skipped).
    fn for_len(nr: usize) -> Option<Filter> {
        match nr {
            0..=14 => None,
            15..=30 => Some(Filter::Lane(Chunk::B8)),
            31..=62 => Some(Filter::Lane(Chunk::B16)),
            63..=126 => Some(Filter::Lane(Chunk::B32)),
            _ => Some(Filter::Words((nr + 1) / 64 - 1)),
        }
    }

    /// Width in bits of the unit whose presence the filter tests.
    fn lane_bits(self) -> usize {
        match self {
            Filter::Lane(c) => c as usize,
            Filter::Words(_) => 64,
        }
    }

    /// Whether the exact scan should read word `w` itself rather than hand
    /// over: true when the filter would stop at `w` anyway. On sparse data the
    /// strided block filter pays roughly one widening (a few words and two
    /// mispredicted branches) per `m` words, the exact scan about three cycles
    /// per word; past `m = 16` the filter wins, so it always takes over.
    fn stays_exact(self, w: u64) -> bool {
        match self {
            Filter::Lane(c) => zero_chunk_in_word(w, c).is_some(),
            Filter::Words(m) => m <= 16 && w == 0,
        }
    }
}

/// Longest window the kernel-style fast path tries (16 or 17 words).
const QUICK_MAX: usize = 1024;
/// Windows the fast path always tries; past them it continues only while
/// collisions stay sparse.
const QUICK_TRIES: usize = 4;

/// Counters a benchmark can read; the search itself never depends on them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AreaStats {
    /// How many times the search started over from a new candidate: one for
    /// the first, plus one per failed fast-path window and per resume after a
    /// filter skip. The counterpart of the kernel loop's count of passes
    /// through `again:` (which seed 000 reports as "goto again").
    pub restarts: usize,
}

/// First block of `m` consecutive zero words in `words[from..]`.
///
/// Every run of `m` consecutive indices at or after `from` holds exactly one
/// probe position `from + m - 1 + k*m`, so a tight strided loop over the
/// probes skips everything that cannot hold a block (on random data it reads
/// one word in `m`). A zero probe is widened to its zero run; if the run is
/// long enough it is the first block (earlier blocks would hold an earlier,
/// non-zero probe), otherwise probing restarts past the run's end.
fn first_zero_block(words: &[u64], from: usize, m: usize, be: Level) -> Option<usize> {
    if m == 1 {
        // First zero word: the lane filter at 64-bit width, with SIMD.
        return arch::first_zero_chunk(be, words, from, Chunk::B64).map(|bit| bit / 64);
    }
    let n = words.len();
    let mut lo_bound = from;
    let mut i = from.checked_add(m - 1)?;
    loop {
        while i < n && words[i] != 0 {
            i += m;
        }
        if i >= n {
            return None;
        }
        let mut lo = i;
        while lo > lo_bound && words[lo - 1] == 0 {
            lo -= 1;
        }
        let mut hi = i + 1;
        while hi < n && hi - lo < m && words[hi] == 0 {
            hi += 1;
        }
        if hi - lo >= m {
            return Some(lo);
        }
        // [lo, hi) is too short and words[hi] is set (or hi == n).
        lo_bound = hi + 1;
        i = hi.checked_add(m)?;
    }
}

/// Lowest acceptable start of `nr` clear bits at or after `start`, below `nbits`.
///
/// This part is small and inlined into the caller; the full scan lives in
/// [`scan`], out of line, so an immediate hit costs no more than the kernel's.
#[inline(always)]
pub(crate) fn find_clear_area(
    words: &[u64],
    nbits: usize,
    start: usize,
    nr: usize,
    align: Align,
    be: Level,
    stats: &mut AreaStats,
) -> Option<usize> {
    if start >= nbits {
        return None;
    }
    if nr == 0 {
        // The kernel returns the aligned first clear bit; callers treat
        // anything >= size as failure.
        let first = next_in::<true>(words, start, nbits, be)?;
        return align.up(first).filter(|&p| p < nbits);
    }
    if nr > nbits - start {
        return None;
    }
    // Fast path, for sparse maps: restart the way seed 000 does (past the
    // window's last set bit). Each try reads at most 17 words; when it stops,
    // the full scan starts at the current candidate (no window starts
    // earlier: every window starting at or before a window's last set bit
    // contains it).
    let mut start = align.up(start)?;
    stats.restarts += 1;
    if nr <= QUICK_MAX {
        let mut tries = 0;
        loop {
            if !fits(start, nr, nbits) {
                return None;
            }
            let end = start + nr;
            let Some(q) = prev_in::<false>(words, start, end, be) else {
                return Some(start);
            };
            start = align.up(q + 1)?;
            stats.restarts += 1;
            tries += 1;
            // Past the first few tries, keep restarting the seed's way only
            // while collisions are sparse (the window's last set bit lies
            // before its last word, so each try skips words unread); dense
            // regions go to the full scan, whose filters skip them faster.
            if tries >= QUICK_TRIES && q / 64 == (end - 1) / 64 {
                break;
            }
        }
        if start >= nbits {
            return None;
        }
    }
    scan(words, nbits, start, nr, align, be, stats)
}

/// The full scan: exact word walk plus skip filters (see the module docs),
/// for `nr > 0`; `None` when no window fits.
#[inline(never)]
fn scan(
    words: &[u64],
    nbits: usize,
    start: usize,
    nr: usize,
    align: Align,
    be: Level,
    stats: &mut AreaStats,
) -> Option<usize> {
    // The caller checked this for its own `start`; the fast path may have
    // moved it since.
    if start >= nbits || nr > nbits - start {
        return None;
    }
    let nw = words_for(nbits);
    let words = &words[..nw];
    let tail = last_word_mask(nbits);
    let filter = Filter::for_len(nr);
    let pattern = align.patterns();

    let mut wi = start / 64;
    let mut lo_mask = first_word_mask(start); // bits below `start` count as set
    let mut r = wi * 64; // carried clear run: [r, 64 * wi) is all clear

    loop {
        // ---- exact scan ----
        let filter = loop {
            if wi >= nw {
                return None;
            }
            let base = wi * 64;
            let raw = words[wi];
            let mut x = !raw & lo_mask;
            lo_mask = !0;
            if wi + 1 == nw {
                x &= tail;
            }
            if x == !0 {
                // The whole word is clear: the carried run grows, through every
                // following all-clear word (skipped at SIMD speed).
                let p = align.up(r)?;
                if fits(p, nr, base + 64) {
                    return Some(p);
                }
                match skip_fwd(words, wi + 1, nw, 0, be) {
                    Some(next) => {
                        // The run reaches at least the start of word `next`.
                        if fits(p, nr, next * 64) {
                            return Some(p);
                        }
                        wi = next;
                        continue;
                    }
                    // Clear to the end of the words, hence to nbits.
                    None => return fits(p, nr, nbits).then_some(p),
                }
            } else if x == 0 {
                // The whole word is set: skip every following all-set word.
                wi = skip_fwd(words, wi + 1, nw, !0, be)?;
                r = wi * 64;
                continue;
            } else {
                let t = x.trailing_ones() as usize;
                let p = align.up(r)?;
                if fits(p, nr, base + t) {
                    return Some(p);
                }
                if nr < 64 {
                    let y = runs_of_ones(x, nr) & pattern.at(base);
                    if y != 0 {
                        return Some(base + y.trailing_zeros() as usize);
                    }
                }
                r = base + 64 - x.leading_ones() as usize;
                // With coarse alignment the next acceptable start may lie words
                // ahead: jump there (no window can start before it). Every
                // position in [r, next) is unaligned, so later steps that
                // restart from the word boundary below `next` re-derive it
                // through `align.up`.
                let next = align.up(r)?;
                if next / 64 > wi + 1 {
                    lo_mask = first_word_mask(next);
                    wi = next / 64 - 1;
                    r = (wi + 1) * 64;
                }
            }
            wi += 1;
            if let Some(f) = filter {
                // Hand over only when the filter has something to skip: if the
                // next word already holds a candidate lane, the filter would
                // stop right there, so reading it here is cheaper.
                if wi * 64 - r < f.lane_bits() && wi < nw && !f.stays_exact(words[wi]) {
                    break f;
                }
            }
        };

        // ---- skip filter, from word `wi` (bit `bound`) ----
        let bound = wi * 64;
        let lower = match filter {
            Filter::Lane(c) => {
                let z = arch::first_zero_chunk(be, words, wi, c)?;
                // A window holding the lane at z starts at or after z + c - nr.
                (z + c as usize).saturating_sub(nr)
            }
            Filter::Words(m) => {
                let a = first_zero_block(words, wi, m, be)?;
                // The window's whole words start at a or later, so it starts
                // after bit 64 * (a - 1).
                if a == 0 {
                    0
                } else {
                    64 * (a - 1) + 1
                }
            }
        };
        stats.restarts += 1;
        let s = lower.max(r);
        if s > bound {
            wi = s / 64;
            lo_mask = first_word_mask(s);
            r = wi * 64;
        } else {
            // [r, bound) is clear, so the run may as well start at s.
            r = s;
            lo_mask = !0;
        }
    }
}

/// Whether a window of `nr` bits starting at `p` ends at or before `end`.
#[inline(always)]
fn fits(p: usize, nr: usize, end: usize) -> bool {
    p <= end && end - p >= nr
}

#[cfg(test)]
mod tests {
    //! The full scan on its own, bypassing the kernel-style fast path that
    //! answers most small cases before the scan runs, at every level.
    use super::*;
    use alloc::vec::Vec;

    /// Lowest acceptable p >= start with `nr` clear bits, by brute force.
    fn model(bits: &[bool], start: usize, nr: usize, mask: usize, off: usize) -> Option<usize> {
        let mut run = alloc::vec![0usize; bits.len() + 1];
        for p in (0..bits.len()).rev() {
            run[p] = if bits[p] { 0 } else { run[p + 1] + 1 };
        }
        (start..bits.len())
            .filter(|&p| p.wrapping_add(off) & mask == 0)
            .find(|&p| run[p] >= nr)
    }

    fn words_of(bits: &[bool]) -> Vec<u64> {
        let mut w = alloc::vec![0u64; bits.len().div_ceil(64)];
        for (i, _) in bits.iter().enumerate().filter(|(_, &b)| b) {
            w[i / 64] |= 1 << (i % 64);
        }
        w
    }

    /// The scan at every level this machine runs.
    fn scan_all(
        bits: &[bool],
        start: usize,
        nr: usize,
        mask: usize,
        off: usize,
    ) -> Vec<Option<usize>> {
        let w = words_of(bits);
        let a = Align::new(mask, off);
        let mut st = AreaStats::default();
        Level::available()
            .map(|l| scan(&w, bits.len(), start, nr, a, l, &mut st))
            .collect()
    }

    /// `want` once per available level.
    fn each_level(want: Option<usize>) -> Vec<Option<usize>> {
        alloc::vec![want; Level::available().count()]
    }

    /// xorshift64*, enough for test data without a dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn clear_words_then_a_full_word() {
        // A clear run over whole words skipped at SIMD speed, ending exactly
        // at an all-set word, must be accepted.
        let mut bits = alloc::vec![false; 1173];
        bits[..304].iter_mut().for_each(|b| *b = true);
        bits[704..1113].iter_mut().for_each(|b| *b = true);
        for nr in [216, 300, 400, 401] {
            let want = model(&bits, 42, nr, 0, 0);
            assert_eq!(scan_all(&bits, 42, nr, 0, 0), each_level(want), "nr={nr}");
        }
    }

    #[test]
    fn random_maps_match_the_model() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for case in 0..3000 {
            let len = 1 + rng.below(12_000);
            // Run-structured maps with a per-case mean run length.
            let mean = 1 + rng.below(if case % 2 == 0 { 400 } else { 3000 });
            let mut bits = alloc::vec![false; len];
            let mut i = 0;
            let mut v = rng.below(2) == 1;
            while i < len {
                let l = 1 + rng.below(2 * mean);
                let end = (i + l).min(len);
                bits[i..end].iter_mut().for_each(|b| *b = v);
                v = !v;
                i = end;
            }
            let nr = 1 + match case % 3 {
                0 => rng.below(64),
                1 => rng.below(400),
                _ => rng.below(3000),
            };
            let mask = (1usize << rng.below(12)) - 1;
            let off = rng.below(5000);
            let start = rng.below(len);
            let want = model(&bits, start, nr, mask, off);
            assert_eq!(
                scan_all(&bits, start, nr, mask, off),
                each_level(want),
                "len={len} start={start} nr={nr} mask={mask} off={off}"
            );
        }
    }
}
