//! What every `spacekit ext4` verb takes (the image, `--json`, a path in
//! it) and how it opens the image and prints JSON.

use std::path::PathBuf;

use clap::Args;
use serde_json::Value;
use spacekit::ext4::{Image, OpenMode};

#[derive(Args, Debug)]
pub(crate) struct Common {
    /// The image file.
    pub(crate) image: PathBuf,
    /// One JSON object on standard output instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args, Debug)]
pub(crate) struct PathArgs {
    #[command(flatten)]
    pub(crate) common: Common,
    /// The file (absolute path in the image).
    pub(crate) path: String,
}

/// Opens the image, naming it in the error. A write refuses a malformed
/// `SOURCE_DATE_EPOCH` first: every write stamps times from it.
pub(crate) fn open(c: &Common, mode: OpenMode) -> Result<Image, String> {
    if mode == OpenMode::ReadWrite {
        source_date_epoch()?;
    }
    Image::open(&c.image, mode).map_err(|e| format!("{}: {e}", c.image.display()))
}

/// `SOURCE_DATE_EPOCH` as reproducible-builds.org defines it: unset (or
/// empty) is `None`; a value that is not a whole number of seconds is an
/// error, not ignored, so a build meant to be reproducible never quietly
/// is not.
pub(crate) fn source_date_epoch() -> Result<Option<i64>, String> {
    match std::env::var_os("SOURCE_DATE_EPOCH") {
        None => Ok(None),
        Some(v) if v.is_empty() => Ok(None),
        Some(v) => v
            .to_str()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .map(Some)
            .ok_or_else(|| {
                format!(
                    "SOURCE_DATE_EPOCH={}: not a whole number of seconds since 1970",
                    v.to_string_lossy()
                )
            }),
    }
}

/// Sets `key` of JSON object `v` to `bytes` as text (UTF-8, invalid
/// sequences replaced) and, when they are not UTF-8, `KEY_hex` to the
/// bytes in hex: names and symlink targets in ext4 are bytes, JSON
/// strings are text.
pub(crate) fn put_bytes(v: &mut Value, key: &str, bytes: &[u8]) {
    v[key] = String::from_utf8_lossy(bytes).into_owned().into();
    if std::str::from_utf8(bytes).is_err() {
        v[format!("{key}_hex")] = bytes
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
            .into();
    }
}

/// One JSON value, pretty-printed, on standard output.
pub(crate) fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}
