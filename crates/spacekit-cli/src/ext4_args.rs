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

/// Opens the image, naming it in the error.
pub(crate) fn open(c: &Common, mode: OpenMode) -> Result<Image, String> {
    Image::open(&c.image, mode).map_err(|e| format!("{}: {e}", c.image.display()))
}

/// One JSON value, pretty-printed, on standard output.
pub(crate) fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}
