//! The numbers of a tar archive's headers: octal, or GNU's base-256 for
//! what octal cannot hold, negative times too. (PAX times are
//! [`Timestamp::parse_decimal`](crate::ext4::Timestamp::parse_decimal).)

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
