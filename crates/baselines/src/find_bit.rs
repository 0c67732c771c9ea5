//! Linux's word-at-a-time bit searches (lib/find_bit.c, include/linux/find.h)
//! and bitmap_find_next_zero_area_off (lib/bitmap.c), before and after seed 000.
//!
//! Conventions are the kernel's: `size`/`nbits` in bits, bit `i` is bit `i % 64`
//! of word `i / 64`, "not found" is reported as `size` (or `end`).

const BITS: usize = 64;

#[inline(always)]
fn first_word_mask(start: usize) -> u64 {
    !0u64 << (start % BITS)
}

#[inline(always)]
fn last_word_mask(nbits: usize) -> u64 {
    !0u64 >> ((BITS - nbits % BITS) % BITS)
}

/// Word-at-a-time forward search: `invert` selects find_next_zero_bit.
/// Mirrors the kernel's FIND_NEXT_BIT macro: mask the first word, walk whole
/// words until one is non-zero, clamp the result to `size`.
#[inline(always)]
fn find_next(addr: &[u64], size: usize, start: usize, invert: u64) -> usize {
    if start >= size {
        return size;
    }
    let mut idx = start / BITS;
    let mut tmp = (addr[idx] ^ invert) & first_word_mask(start);
    while tmp == 0 {
        idx += 1;
        if idx * BITS >= size {
            return size;
        }
        tmp = addr[idx] ^ invert;
    }
    (idx * BITS + tmp.trailing_zeros() as usize).min(size)
}

/// `find_next_bit(addr, size, offset)`: first set bit at or after `offset`, or
/// `size`.
pub fn find_next_bit(addr: &[u64], size: usize, offset: usize) -> usize {
    find_next(addr, size, offset, 0)
}

/// `find_next_zero_bit(addr, size, offset)`: first clear bit at or after
/// `offset`, or `size`.
pub fn find_next_zero_bit(addr: &[u64], size: usize, offset: usize) -> usize {
    find_next(addr, size, offset, !0)
}

/// `find_last_bit(addr, size)`: last set bit below `size`, or `size`.
pub fn find_last_bit(addr: &[u64], size: usize) -> usize {
    if size == 0 {
        return size;
    }
    let mut idx = (size - 1) / BITS;
    let mut mask = last_word_mask(size);
    loop {
        let val = addr[idx] & mask;
        if val != 0 {
            return idx * BITS + 63 - val.leading_zeros() as usize;
        }
        if idx == 0 {
            return size;
        }
        idx -= 1;
        mask = !0;
    }
}

/// Seed 000's `find_last_bit_range(addr, end, start)`: last set bit in
/// `[start, end)`, or `end` when there is none. Walks words downward from the
/// one holding `end - 1`, masking the first and last.
pub fn find_last_bit_range(addr: &[u64], end: usize, start: usize) -> usize {
    if start >= end {
        return end;
    }
    let first = start / BITS;
    let mut idx = (end - 1) / BITS;
    let mut mask = last_word_mask(end);
    loop {
        if idx == first {
            mask &= first_word_mask(start);
        }
        let val = addr[idx] & mask;
        if val != 0 {
            return idx * BITS + 63 - val.leading_zeros() as usize;
        }
        if idx == first {
            return end;
        }
        idx -= 1;
        mask = !0;
    }
}

/// `find_nth_bit(addr, size, n)`: position of the n-th set bit (from 0), or
/// `size` when there are not that many. Popcount per word, then a bit-by-bit
/// select inside the word.
pub fn find_nth_bit(addr: &[u64], size: usize, mut n: usize) -> usize {
    let nwords = size.div_ceil(BITS);
    for (idx, &raw) in addr[..nwords].iter().enumerate() {
        let mut w = if (idx + 1) * BITS > size {
            raw & last_word_mask(size)
        } else {
            raw
        };
        let c = w.count_ones() as usize;
        if n >= c {
            n -= c;
            continue;
        }
        while n > 0 {
            w &= w - 1;
            n -= 1;
        }
        return idx * BITS + w.trailing_zeros() as usize;
    }
    size
}

/// Which inner search the area loop uses after aligning a candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AreaVariant {
    /// Upstream: `find_next_bit(map, end, index)`, the FIRST collision.
    Before,
    /// Seed 000: `find_last_bit_range(map, end, index)`, the LAST collision.
    Seed,
}

/// `bitmap_find_next_zero_area_off(map, size, start, nr, align_mask,
/// align_offset)` with the chosen inner search. Returns `(index, restarts)`:
/// the kernel's return value (`>= size` means failure; on failure it is the
/// out-of-range `end`) and how many times the loop went through `again:`.
pub fn find_next_zero_area_off(
    map: &[u64],
    size: usize,
    mut start: usize,
    nr: usize,
    align_mask: usize,
    align_offset: usize,
    variant: AreaVariant,
) -> (usize, usize) {
    let mut again = 0;
    loop {
        again += 1;
        let mut index = find_next_zero_bit(map, size, start);
        // __ALIGN_MASK(index + align_offset, align_mask) - align_offset
        index = (index.wrapping_add(align_offset).wrapping_add(align_mask) & !align_mask)
            .wrapping_sub(align_offset);
        let end = index.wrapping_add(nr);
        if end > size || end < index {
            return (end.max(size), again);
        }
        let i = match variant {
            AreaVariant::Before => find_next_bit(map, end, index),
            AreaVariant::Seed => find_last_bit_range(map, end, index),
        };
        if i < end {
            start = i + 1;
            continue;
        }
        return (index, again);
    }
}

/// Kernel-style run iteration (for_each_set_bitrange): calls `f(b, e)` for
/// every maximal run `[b, e)` of set bits, using find_next_bit and
/// find_next_zero_bit.
pub fn for_each_set_bitrange(addr: &[u64], size: usize, mut f: impl FnMut(usize, usize)) {
    let mut b = find_next_bit(addr, size, 0);
    while b < size {
        let e = find_next_zero_bit(addr, size, b);
        f(b, e);
        b = find_next_bit(addr, size, e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_searches() {
        let map = [0b1010u64, 0, 1 << 63];
        assert_eq!(find_next_bit(&map, 192, 0), 1);
        assert_eq!(find_next_bit(&map, 192, 4), 191);
        assert_eq!(find_next_bit(&map, 191, 4), 191);
        assert_eq!(find_next_zero_bit(&map, 192, 1), 2);
        assert_eq!(find_last_bit(&map, 192), 191);
        assert_eq!(find_last_bit(&map, 191), 3);
        assert_eq!(find_last_bit_range(&map, 191, 2), 3);
        assert_eq!(find_last_bit_range(&map, 191, 4), 191);
        assert_eq!(find_nth_bit(&map, 192, 2), 191);
        assert_eq!(find_nth_bit(&map, 192, 3), 192);
    }

    #[test]
    fn area_variants_agree_and_seed_restarts_less() {
        // 0b...0110_0110 pattern: clear runs of 2 between pairs of set bits.
        let map = [0x6666_6666_6666_6666u64; 4];
        let (a, ra) = find_next_zero_area_off(&map, 256, 0, 2, 0, 0, AreaVariant::Before);
        let (b, rb) = find_next_zero_area_off(&map, 256, 0, 2, 0, 0, AreaVariant::Seed);
        assert_eq!((a, b), (3, 3));
        assert!(rb <= ra);
        let (a, _) = find_next_zero_area_off(&map, 256, 0, 3, 0, 0, AreaVariant::Before);
        assert!(a >= 256);
    }
}
