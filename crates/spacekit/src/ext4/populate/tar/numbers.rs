//! The numbers of a tar archive: a header's numeric fields (octal, or
//! GNU's base-256 for what octal cannot hold, negative times too) and PAX
//! times (decimal seconds with a fraction).

use crate::ext4::namespace::Timestamp;

/// A PAX time: decimal seconds with an optional fraction, maybe negative;
/// `None` if it is not one (or does not fit 64 bits).
pub(super) fn pax_time(v: &[u8]) -> Option<Timestamp> {
    let (neg, v) = match v.strip_prefix(b"-") {
        Some(rest) => (true, rest),
        None => (false, v),
    };
    let (int, frac) = match v.iter().position(|&b| b == b'.') {
        Some(i) => (&v[..i], &v[i + 1..]),
        None => (v, &v[..0]),
    };
    if int.is_empty() || !int.iter().chain(frac).all(u8::is_ascii_digit) {
        return None;
    }
    let mut secs = 0i64;
    for &d in int {
        secs = secs
            .checked_mul(10)
            .and_then(|s| s.checked_add(i64::from(d - b'0')))?;
    }
    let mut nanos = 0u32;
    for i in 0..9 {
        nanos = nanos * 10 + frac.get(i).map_or(0, |d| u32::from(d - b'0'));
    }
    Some(match (neg, nanos) {
        (false, _) => Timestamp { secs, nanos },
        (true, 0) => Timestamp { secs: -secs, nanos },
        (true, _) => Timestamp {
            secs: -secs - 1,
            nanos: 1_000_000_000 - nanos,
        },
    })
}

/// A 12-byte numeric header field as a signed number: octal digits
/// (leading spaces, ending at a space or NUL), or GNU's base-256 form (the
/// first byte's top bit set; `0xff` first: negative, two's complement over
/// the whole field). `None` for a field that does not parse or needs more
/// than 64 signed bits.
pub(super) fn header_number(field: &[u8]) -> Option<i64> {
    debug_assert_eq!(field.len(), 12);
    match field.first() {
        Some(&b) if b & 0x80 != 0 => {
            let negative = b == 0xff;
            let fill = if negative { 0xff } else { 0x00 };
            // The marker byte (without its marker bit when positive) and
            // the other bytes above the last 8 are sign fill.
            let (high, low) = field.split_at(4);
            let first = if negative { b } else { b & 0x7f };
            if first != fill || high[1..].iter().any(|&x| x != fill) {
                return None;
            }
            let v = i64::from_be_bytes(low.try_into().ok()?);
            // The value's sign agrees with the field's.
            (negative == (v < 0)).then_some(v)
        }
        _ => {
            let text = field
                .iter()
                .skip_while(|&&c| c == b' ')
                .take_while(|&&c| c != b' ' && c != 0);
            let mut v = 0i64;
            let mut any = false;
            for &c in text {
                if !(b'0'..=b'7').contains(&c) {
                    return None;
                }
                v = v.checked_mul(8)?.checked_add(i64::from(c - b'0'))?;
                any = true;
            }
            any.then_some(v)
        }
    }
}
