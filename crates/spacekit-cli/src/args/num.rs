//! Numbers and sizes.

/// A decimal or `0x` hexadecimal u64; `_` separators allowed.
pub(crate) fn parse_u64(s: &str) -> Result<u64, String> {
    let t = s.trim().replace('_', "");
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => t.parse(),
    };
    r.map_err(|e| format!("`{s}` is not a number: {e}"))
}

/// A size in bytes: a decimal number with an optional binary suffix `K`,
/// `M`, `G` or `T` (any case, optionally followed by `iB` or `B`, as
/// `fallocate -l` takes it), or `0x` hexadecimal with an optional `K`, `M`,
/// `G` or `T`; `_` separators allowed. 0 is a size.
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim().replace('_', "");
    let not = || format!("`{s}` is not a size");
    let too_large = || format!("`{s}` is too large for 64 bits");
    let shift_of = |c: Option<char>| match c.map(|c| c.to_ascii_uppercase()) {
        Some('K') => Some(10),
        Some('M') => Some(20),
        Some('G') => Some(30),
        Some('T') => Some(40),
        _ => None,
    };
    let (n, shift) = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        let (digits, shift) = match shift_of(h.chars().last()) {
            Some(shift) => (&h[..h.len() - 1], shift),
            None => (h, 0),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(not());
        }
        (
            u64::from_str_radix(digits, 16).map_err(|_| too_large())?,
            shift,
        )
    } else {
        let end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (digits, unit) = t.split_at(end);
        if digits.is_empty() {
            return Err(not());
        }
        let unit = unit.strip_suffix("iB").unwrap_or(unit);
        let unit = unit.strip_suffix('B').unwrap_or(unit);
        let shift = match unit {
            "" => 0,
            u if u.len() == 1 => shift_of(u.chars().next())
                .ok_or_else(|| format!("`{s}`: unknown unit (K, M, G, T)"))?,
            _ => return Err(format!("`{s}`: unknown unit (K, M, G, T)")),
        };
        (digits.parse::<u64>().map_err(|_| too_large())?, shift)
    };
    n.checked_mul(1 << shift).ok_or_else(too_large)
}

/// A size of at least one byte (see [`parse_size`]).
pub(crate) fn parse_nonzero_size(s: &str) -> Result<u64, String> {
    match parse_size(s)? {
        0 => Err("the size must be at least 1 byte".into()),
        n => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(parse_u64("0"), Ok(0));
        assert_eq!(parse_u64("1_000"), Ok(1000));
        assert_eq!(parse_u64("0x10"), Ok(16));
        assert_eq!(parse_u64("0XfF"), Ok(255));
        assert!(parse_u64("").is_err());
        assert!(parse_u64("-1").is_err());
        assert!(parse_u64("0x").is_err());
        assert!(parse_u64("18446744073709551616").is_err());
    }

    #[test]
    fn sizes() {
        for (s, want) in [
            ("0", 0),
            ("12345", 12345),
            ("1M", 1 << 20),
            ("64k", 64 << 10),
            ("2G", 2 << 30),
            ("1T", 1 << 40),
            ("20MiB", 20 << 20),
            ("20MB", 20 << 20),
            ("7B", 7),
            ("0x1000", 4096),
            ("0x10K", 16 << 10),
            ("1_024", 1024),
        ] {
            assert_eq!(parse_size(s), Ok(want), "{s}");
        }
        assert_eq!(parse_size("0x1B"), Ok(0x1B), "B is a hex digit");
        for (s, why) in [
            ("", "not a size"),
            ("K", "not a size"),
            ("lots", "not a size"),
            ("-1", "not a size"),
            ("0x", "not a size"),
            ("0xZ", "not a size"),
            ("1X", "unknown unit"),
            ("12Q", "unknown unit"),
            ("1.5M", "unknown unit"),
            ("1KK", "unknown unit"),
            ("99999999999T", "too large"),
            ("18446744073709551616", "too large"),
        ] {
            let e = parse_size(s).unwrap_err();
            assert!(e.contains(why), "{s}: {e}");
        }
        assert_eq!(parse_nonzero_size("1"), Ok(1));
        assert!(parse_nonzero_size("0").is_err());
        assert!(parse_nonzero_size("0K").is_err());
    }
}
