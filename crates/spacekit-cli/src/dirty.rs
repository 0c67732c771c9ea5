//! `spacekit dirty ranges`: a raw dirty bitmap file to a memory range table.

use crate::args::parse_u64;
use std::borrow::Cow;
use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;
use spacekit::bitmap::le_words;
use spacekit::dirty::{Geometry, MemoryRangeTable, Scan};

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
    /// The file is read 512 MiB at a time and scanned on all threads.
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
    /// Bytes per page: a power of two (`4K`, `2M` and 0x-hex taken).
    #[arg(long, default_value_t = 4096, value_parser = crate::args::parse_size)]
    page_size: u64,
    /// Guest-physical address of the first page (decimal or 0x-hex).
    #[arg(long, default_value = "0", value_parser = parse_u64)]
    base: u64,
    /// Join ranges separated by at most this many clean pages (fewer,
    /// larger copies).
    #[arg(long, default_value_t = 0, value_name = "PAGES", value_parser = parse_u64)]
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

/// Runs `spacekit dirty`.
pub fn run(args: &DirtyArgs) -> Result<(), String> {
    match &args.command {
        DirtyCommand::Ranges(a) => ranges(a),
    }
}

/// A bitmap file, read a step at a time into a reused buffer.
///
/// Read, not memory-mapped: mapping a file is `unsafe` (another process may
/// truncate it under the mapping), and the CLI holds no `unsafe`. The scan
/// reads each byte once either way; a buffer of one step bounds the memory.
struct BitmapFile {
    path: PathBuf,
    file: File,
    /// The bytes of a source that is not a regular file, read at the open.
    whole: Option<std::io::Cursor<Vec<u8>>>,
    words: usize,
    buf: Vec<u8>,
}

impl BitmapFile {
    fn open(path: &Path) -> Result<BitmapFile, String> {
        let mut file =
            File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let meta = file
            .metadata()
            .map_err(|e| format!("cannot stat {}: {e}", path.display()))?;
        // A pipe (`<(…)`, /dev/stdin) has no length to trust: read whole.
        let mut b = Vec::new();
        let whole = (!meta.is_file())
            .then(|| file.read_to_end(&mut b).map(|_| std::io::Cursor::new(b)))
            .transpose()
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let len = whole
            .as_ref()
            .map_or(meta.len(), |c| c.get_ref().len() as u64);
        if !len.is_multiple_of(8) {
            return Err(format!(
                "{}: {len} bytes is not a whole number of 64-bit words",
                path.display()
            ));
        }
        let words = usize::try_from(len / 8)
            .map_err(|_| format!("{}: {len} bytes is too large", path.display()))?;
        Ok(BitmapFile {
            path: path.to_path_buf(),
            file,
            whole,
            words,
            buf: Vec::new(),
        })
    }

    /// The next `n` words of the file: borrowed from the buffer (aligned by
    /// the allocator) on little-endian machines, decoded elsewhere.
    fn next_words(&mut self, n: usize) -> Result<Cow<'_, [u64]>, String> {
        let want = n * 8;
        self.buf.clear();
        self.buf
            .try_reserve_exact(want)
            .map_err(|e| format!("cannot read {}: {e}", self.path.display()))?;
        let from: &mut dyn Read = match &mut self.whole {
            Some(c) => c,
            None => &mut self.file,
        };
        from.take(want as u64)
            .read_to_end(&mut self.buf)
            .map_err(|e| format!("cannot read {}: {e}", self.path.display()))?;
        if self.buf.len() != want {
            return Err(format!(
                "{}: the file shrank while it was read",
                self.path.display()
            ));
        }
        le_words(&self.buf).map_err(|e| format!("{}: {e}", self.path.display()))
    }
}

/// Words per step (512 MiB of bitmap: 2^32 pages): read, scanned, and
/// reported on the progress bar at a time.
const STEP_WORDS: usize = 64 << 20;

fn ranges(a: &RangesArgs) -> Result<(), String> {
    let mut first = BitmapFile::open(&a.file)?;
    let mut second = a.or.as_deref().map(BitmapFile::open).transpose()?;
    let nwords = first.words;
    if let Some(second) = &second {
        if second.words != nwords {
            return Err(format!(
                "{} has {} words but {} has {}: the two logs must cover the same memory",
                a.file.display(),
                nwords,
                second.path.display(),
                second.words
            ));
        }
    }
    let geometry = Geometry::new(a.base, a.page_size).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let show = !a.quiet && io::stderr().is_terminal() && nwords > STEP_WORDS;
    let mut table = MemoryRangeTable::new();
    let nsteps = nwords.div_ceil(STEP_WORDS).max(1);
    for (k, lo) in (0..nwords.max(1)).step_by(STEP_WORDS).enumerate() {
        let hi = (lo + STEP_WORDS).min(nwords);
        let offset = (lo as u64)
            .checked_mul(64)
            .and_then(|page| geometry.page_addr(page))
            .ok_or_else(|| "the bitmap's pages run past the 64-bit address space".to_string())?;
        let w1 = first.next_words(hi - lo)?;
        let w2 = second.as_mut().map(|f| f.next_words(hi - lo)).transpose()?;
        let mut scan = Scan::new(&w1, geometry.with_base(offset))
            .map_err(|e| e.to_string())?
            .merge_gap(a.merge_gap)
            .parallel(true);
        if let Some(w2) = &w2 {
            scan = scan.or(w2).map_err(|e| e.to_string())?;
        }
        table.extend_from(scan);
        if show {
            eprint!(
                "\r[dirty] {:>3}% ({} of {} MiB, {} ranges)",
                (k + 1) * 100 / nsteps,
                (hi * 8) >> 20,
                (nwords * 8) >> 20,
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
                "bitmap_bytes": nwords * 8,
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
            (nwords * 8) >> 20,
            elapsed.as_secs_f64() * 1e3
        );
    }
    Ok(())
}
