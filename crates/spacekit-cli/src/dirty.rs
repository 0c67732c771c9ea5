//! `spacekit dirty ranges`: a raw dirty bitmap file to a memory range table.

use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Subcommand, ValueEnum};
use memmap2::Mmap;
use serde_json::json;
use spacekit::dirty::MemoryRangeTable;

/// Arguments of `spacekit dirty`.
#[derive(Args, Debug)]
pub struct DirtyArgs {
    #[command(subcommand)]
    command: DirtyCommand,
}

#[derive(Subcommand, Debug)]
enum DirtyCommand {
    /// Turn a dirty bitmap into the memory ranges to copy.
    ///
    /// FILE holds the bitmap as raw little-endian 64-bit words (bit i of the
    /// file = page BASE + i * PAGE_SIZE), as KVM's KVM_GET_DIRTY_LOG or a
    /// VMM's own log produce it; its length must be a multiple of 8 bytes.
    /// The file is memory-mapped and scanned on all threads.
    Ranges(RangesArgs),
}

/// Output formats of `dirty ranges`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    /// One `GPA LENGTH` line per range (hex), then a summary on stderr.
    Text,
    /// `{"page_size", "base", "ranges": [{"gpa", "length"}], "total_bytes"}`.
    Json,
    /// Cloud Hypervisor's wire format: 16 bytes per range (`gpa` then
    /// `length`, little-endian u64), nothing else.
    Chv,
}

#[derive(Args, Debug)]
struct RangesArgs {
    /// The bitmap file.
    file: PathBuf,
    /// A second bitmap of the same length, ORed with the first (a
    /// hypervisor's log and a VMM's own); a length mismatch is an error.
    #[arg(long, value_name = "FILE2")]
    or: Option<PathBuf>,
    /// Bytes per page: a power of two.
    #[arg(long, default_value_t = 4096, value_parser = parse_u64)]
    page_size: u64,
    /// Guest-physical address of the first page (decimal or 0x-hex).
    #[arg(long, default_value = "0", value_parser = parse_u64)]
    base: u64,
    /// Join ranges separated by at most this many clean pages (fewer,
    /// larger copies).
    #[arg(long, default_value_t = 0, value_name = "PAGES")]
    merge_gap: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Write the output to FILE instead of standard output.
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
    /// No progress bar, even on a terminal.
    #[arg(long)]
    quiet: bool,
}

/// A decimal or `0x` hexadecimal u64 (shared by the subcommands).
pub(crate) fn parse_u64(s: &str) -> Result<u64, String> {
    let t = s.replace('_', "");
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => t.parse(),
    };
    r.map_err(|e| format!("`{s}` is not a number: {e}"))
}

/// Runs `spacekit dirty`.
pub fn run(args: &DirtyArgs) -> Result<(), String> {
    match &args.command {
        DirtyCommand::Ranges(a) => ranges(a),
    }
}

/// A bitmap file, mapped, and viewed as words.
struct Bitmap {
    map: Option<Mmap>,
}

impl Bitmap {
    fn open(path: &Path) -> Result<Bitmap, String> {
        let f = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let len = f
            .metadata()
            .map_err(|e| format!("cannot stat {}: {e}", path.display()))?
            .len();
        if !len.is_multiple_of(8) {
            return Err(format!(
                "{}: {len} bytes is not a whole number of 64-bit words",
                path.display()
            ));
        }
        let map = if len == 0 {
            None
        } else {
            // SAFETY: the mapping is read-only and private to this process;
            // like every reader of a file that someone else may change, we
            // rely on the file not being truncated while it is mapped (a
            // bitmap being scanned is a snapshot by contract).
            Some(
                unsafe { Mmap::map(&f) }
                    .map_err(|e| format!("cannot map {}: {e}", path.display()))?,
            )
        };
        Ok(Bitmap { map })
    }

    /// The words: borrowed from the mapping on little-endian machines.
    fn words(&self) -> std::borrow::Cow<'_, [u64]> {
        let bytes: &[u8] = self.map.as_deref().unwrap_or(&[]);
        if cfg!(target_endian = "little") {
            // SAFETY: every bit pattern is a valid u64, and `align_to`
            // only hands out the correctly aligned middle part.
            let (head, words, tail) = unsafe { bytes.align_to::<u64>() };
            if head.is_empty() && tail.is_empty() {
                return std::borrow::Cow::Borrowed(words);
            }
        }
        // Elsewhere, decode; `open` checked the length is whole words.
        std::borrow::Cow::Owned(
            bytes
                .chunks_exact(8)
                .map(|c| {
                    let mut w = [0u8; 8];
                    w.copy_from_slice(c);
                    u64::from_le_bytes(w)
                })
                .collect(),
        )
    }
}

/// Words per progress step (512 MiB of bitmap: 2^32 pages).
const STEP_WORDS: usize = 64 << 20;

fn ranges(a: &RangesArgs) -> Result<(), String> {
    let first = Bitmap::open(&a.file)?;
    let second = a.or.as_deref().map(Bitmap::open).transpose()?;
    let w1 = first.words();
    let w2 = second.as_ref().map(Bitmap::words);
    if let Some(w2) = &w2 {
        if w2.len() != w1.len() {
            return Err(format!(
                "{} has {} words but {} has {}: the two logs must cover the same memory",
                a.file.display(),
                w1.len(),
                a.or.as_deref().unwrap_or(Path::new("")).display(),
                w2.len()
            ));
        }
    }
    let started = Instant::now();
    let show = !a.quiet && io::stderr().is_terminal() && w1.len() > STEP_WORDS;
    let mut table = MemoryRangeTable::new();
    let nsteps = w1.len().div_ceil(STEP_WORDS).max(1);
    for (k, lo) in (0..w1.len().max(1)).step_by(STEP_WORDS).enumerate() {
        let hi = (lo + STEP_WORDS).min(w1.len());
        let offset = (lo as u64 * 64)
            .checked_mul(a.page_size)
            .and_then(|o| a.base.checked_add(o))
            .ok_or_else(|| "the bitmap's pages run past the 64-bit address space".to_string())?;
        let r = match &w2 {
            None => table.par_extend_from_bitmap(&w1[lo..hi], a.page_size, offset, a.merge_gap),
            Some(w2) => table.par_extend_from_bitmaps_or(
                &w1[lo..hi],
                &w2[lo..hi],
                a.page_size,
                offset,
                a.merge_gap,
            ),
        };
        r.map_err(|e| e.to_string())?;
        if show {
            eprint!(
                "\r[dirty] {:>3}% ({} of {} MiB, {} ranges)",
                (k + 1) * 100 / nsteps,
                (hi * 8) >> 20,
                (w1.len() * 8) >> 20,
                table.len()
            );
        }
    }
    if show {
        eprintln!();
    }
    let elapsed = started.elapsed();
    let mut out: Box<dyn Write> = match &a.output {
        Some(p) => Box::new(BufWriter::new(
            File::create(p).map_err(|e| format!("cannot create {}: {e}", p.display()))?,
        )),
        None => Box::new(BufWriter::new(io::stdout().lock())),
    };
    let werr = |e: io::Error| format!("cannot write the output: {e}");
    match a.format {
        Format::Text => {
            for r in table.ranges() {
                writeln!(out, "{:#x} {:#x}", r.gpa, r.length).map_err(werr)?;
            }
        }
        Format::Json => {
            let v = json!({
                "page_size": a.page_size,
                "base": a.base,
                "bitmap_bytes": w1.len() * 8,
                "ranges": table.ranges().iter().map(|r| json!({"gpa": r.gpa, "length": r.length})).collect::<Vec<_>>(),
                "total_bytes": table.total_bytes(),
            });
            serde_json::to_writer(&mut out, &v).map_err(|e| e.to_string())?;
            writeln!(out).map_err(werr)?;
        }
        Format::Chv => out.write_all(&table.to_bytes()).map_err(werr)?,
    }
    out.flush().map_err(werr)?;
    if !a.quiet && a.format == Format::Text {
        eprintln!(
            "{} ranges, {} bytes dirty, {} MiB of bitmap scanned in {:.1} ms",
            table.len(),
            table.total_bytes(),
            (w1.len() * 8) >> 20,
            elapsed.as_secs_f64() * 1e3
        );
    }
    Ok(())
}
