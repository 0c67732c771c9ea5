//! Argument parsers shared by every subcommand: numbers, sizes and file
//! modes (and the mode's `ls -l` letter). Each
//! has clap's `value_parser` shape (`fn(&str) -> Result<T, String>`) and
//! its message names the text.

mod num;

pub(crate) use num::{parse_nonzero_size, parse_size, parse_u64};

/// An octal permission mode up to `7777`.
pub(crate) fn parse_mode(s: &str) -> Result<u16, String> {
    u16::from_str_radix(s, 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("{s:?} is not an octal mode up to 7777"))
}

/// `mode`'s file type as `ls -l` shows it.
pub(crate) fn type_char(mode: u16) -> char {
    match mode & 0xF000 {
        0x8000 => '-',
        0x4000 => 'd',
        0xA000 => 'l',
        0x2000 => 'c',
        0x6000 => 'b',
        0x1000 => 'p',
        0xC000 => 's',
        _ => '?',
    }
}
