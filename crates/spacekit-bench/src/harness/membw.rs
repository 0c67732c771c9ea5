//! Memory read bandwidth, the physical limit of every scan (`bench membw`,
//! and the `membw` rows of the scan benchmarks).
//!
//! A buffer much larger than the last-level cache is filled (so page faults
//! stay out of the timings) and then read start to end by one thread, and by
//! every thread on its own slice. The read loop XORs 128 bytes per step into
//! four AVX2 accumulators (scalar when AVX2 is missing), which is as fast as
//! the memory system lets a core read.

use std::hint::black_box;
use std::thread;

use super::output::{fmt_ns, progress, Report, Row, Table};
use super::verify::verify;
use crate::context::{BenchError, Ctx, Mode};

/// Bandwidth figures of one run.
#[derive(Clone, Copy, Debug)]
pub struct Bandwidth {
    /// Single-thread read bandwidth, GB/s (1e9 bytes per second).
    pub single: f64,
    /// Read bandwidth with every thread reading its own slice, GB/s (equal
    /// to `single` on a one-thread machine).
    pub all: f64,
    /// Threads of the `all` figure.
    pub threads: usize,
}

/// Measures bandwidth over `buf` (made by [`buffer`]) and returns its rows,
/// for other benchmarks to include.
pub fn measure(ctx: &Ctx, buf: &[u64]) -> Result<(Report, Bandwidth), BenchError> {
    let bytes = buf.len() * 8;

    let threads = thread::available_parallelism().map_or(1, |n| n.get());
    let timer = ctx.timer();
    let mut report = Report::default();
    let mut table = Table::new(
        "membw: memory read bandwidth",
        &["threads", "bytes", "time", "GB/s"],
    );
    let (mut single, mut all) = (0.0, 0.0);
    let mut counts = vec![1];
    if threads > 1 {
        counts.push(threads);
    }
    for &t in &counts {
        progress("membw", &format!("reading with {t} thread(s)"));
        let ns = if t == 1 {
            timer.median_ns(|| {
                black_box(read_xor(black_box(buf)));
            })
        } else {
            let chunk = buf.len().div_ceil(t);
            timer.median_ns(|| {
                thread::scope(|s| {
                    for part in buf.chunks(chunk) {
                        s.spawn(move || black_box(read_xor(black_box(part))));
                    }
                });
            })
        };
        let gbps = bytes as f64 / ns;
        if t == 1 {
            single = gbps;
        }
        all = gbps;
        table.row(vec![
            t.to_string(),
            bytes.to_string(),
            fmt_ns(ns),
            format!("{gbps:.2}"),
        ]);
        report.push(
            Row::new("read", "limit")
                .field("threads", t)
                .field("bytes", bytes)
                .field("median_ns", ns)
                .field("gbps", gbps),
        );
    }
    report.table(table);
    Ok((
        report,
        Bandwidth {
            single,
            all,
            threads,
        },
    ))
}

/// The buffer `bench membw` reads: much larger than the last-level cache,
/// filled (so page faults stay out of timings) and checked once.
pub fn buffer(ctx: &Ctx) -> Result<Vec<u64>, BenchError> {
    let bytes: usize = match ctx.mode {
        Mode::Quick => 64 << 20,
        Mode::Default => 1 << 30,
        Mode::Full => 4 << 30,
    };
    progress("membw", &format!("filling {} MiB", bytes >> 20));
    let words = bytes / 8;
    let mut buf = huge_capacity(words)?;
    buf.extend((0..words as u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    let expect = buf.iter().fold(0u64, |a, &w| a ^ w);
    verify(
        "the XOR of the buffer",
        &[("scalar", expect), ("read loop", read_xor(&buf))],
    )?;
    Ok(buf)
}

/// An empty vector with room for `words` words, its memory asked to be
/// backed by huge pages where the kernel gives them on request (Linux
/// `madvise(MADV_HUGEPAGE)`; transparent huge pages in `madvise` mode, as
/// here). Every buffer a scan benchmark reads and compares with [`measure`]
/// comes from here, so a scan reads memory rather than walks page tables:
/// on this machine (a guest under shadow paging) 384 MiB read in 22 ms on
/// 4 KiB pages and in 12.4 ms on 2 MiB pages, and which pages a plain
/// buffer got changed from run to run. Best effort: without huge pages the
/// vector is an ordinary one.
///
/// # Errors
/// The allocation failed.
pub fn huge_capacity(words: usize) -> Result<Vec<u64>, BenchError> {
    let mut v: Vec<u64> = Vec::new();
    v.try_reserve_exact(words)
        .map_err(|e| BenchError(format!("cannot allocate {} MiB: {e}", (words * 8) >> 20)))?;
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let p = v.as_ptr() as usize;
        let (a, e) = (
            p.next_multiple_of(HUGE),
            (p + v.capacity() * 8) / HUGE * HUGE,
        );
        if e > a {
            // SAFETY: `[a, e)` lies inside the vector's allocation, which
            // this process owns; the call only sets a hint on those pages
            // (none is touched yet) and changes no memory.
            unsafe { libc::madvise(a as *mut libc::c_void, e - a, libc::MADV_HUGEPAGE) };
        }
    }
    Ok(v)
}

/// [`huge_capacity`] filled with `words` copies of `fill`.
///
/// # Errors
/// The allocation failed.
pub fn huge_vec(words: usize, fill: u64) -> Result<Vec<u64>, BenchError> {
    let mut v = huge_capacity(words)?;
    v.resize(words, fill);
    Ok(v)
}

/// XOR of every word, read as fast as the CPU allows.
pub fn read_xor(buf: &[u64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if spacekit::arch::Level::detect().has_avx2() {
        // SAFETY: a `Level` reports AVX2 only when the CPU has it (spacekit
        // detects it once, at runtime).
        return unsafe { read_xor_avx2(buf) };
    }
    read_xor_scalar(buf)
}

fn read_xor_scalar(buf: &[u64]) -> u64 {
    let mut acc = [0u64; 4];
    let mut chunks = buf.chunks_exact(4);
    for c in &mut chunks {
        for (a, w) in acc.iter_mut().zip(c) {
            *a ^= w;
        }
    }
    let tail = chunks.remainder().iter().fold(0, |a, &w| a ^ w);
    acc[0] ^ acc[1] ^ acc[2] ^ acc[3] ^ tail
}

/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn read_xor_avx2(buf: &[u64]) -> u64 {
    use std::arch::x86_64::*;
    // Start on a 32-byte boundary so no load straddles two cache lines.
    let head = ((32 - buf.as_ptr() as usize % 32) % 32 / 8).min(buf.len());
    let (head, buf) = buf.split_at(head);
    let mut acc = [_mm256_setzero_si256(); 4];
    let mut chunks = buf.chunks_exact(16);
    for c in &mut chunks {
        let p = c.as_ptr().cast::<__m256i>();
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: `c` holds 16 words = 4 vectors; unaligned loads.
            let v = unsafe { _mm256_loadu_si256(p.add(k)) };
            *a = _mm256_xor_si256(*a, v);
        }
    }
    let v = _mm256_xor_si256(
        _mm256_xor_si256(acc[0], acc[1]),
        _mm256_xor_si256(acc[2], acc[3]),
    );
    let mut lanes = [0u64; 4];
    // SAFETY: `lanes` is 32 bytes, the size of one vector; unaligned store.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast::<__m256i>(), v) };
    let rest = read_xor_scalar(chunks.remainder()) ^ read_xor_scalar(head);
    lanes.iter().fold(rest, |a, &w| a ^ w)
}

/// Words of `src` read per step of [`read_stream`] (4 KiB).
const STREAM_STEP: usize = 512;

/// Output words from which [`read_stream`] writes with streaming stores
/// (16 MiB), as spacekit's dirty table builder does for tables past that
/// size.
const STREAM_FROM_WORDS: usize = 2 << 20;

/// The floor of any pass that reads `src` and writes `dst.len()` words of
/// output: one pass that reads `src` in 4 KiB steps (as [`read_xor`]) and,
/// after each step, writes its proportional share of `dst` (stores of a
/// value that depends on what was read, so neither can be skipped). An
/// output of [`STREAM_FROM_WORDS`] or more is written with non-temporal
/// stores (`movnti`, past the cache: a plain store first reads its line
/// from memory), the way spacekit's table builder writes a large table,
/// so the floor stays below it. Returns the XOR of `src`; `dst` ends
/// filled with running XORs.
pub fn read_stream(src: &[u64], dst: &mut [u64]) -> u64 {
    let (n, out) = (src.len().max(1), dst.len());
    let stream = out >= STREAM_FROM_WORDS;
    let mut acc = 0u64;
    let mut o = 0;
    for (b, chunk) in src.chunks(STREAM_STEP).enumerate() {
        acc ^= read_xor(chunk);
        let o2 = ((b + 1) * STREAM_STEP).min(n) * out / n;
        fill(&mut dst[o..o2], acc, stream);
        o = o2;
    }
    fill(&mut dst[o..], acc, stream);
    #[cfg(target_arch = "x86_64")]
    if stream {
        // SAFETY: SSE, part of the x86_64 baseline.
        unsafe { std::arch::x86_64::_mm_sfence() };
    }
    acc
}

/// `dst` filled with `x`: with `movnti` when `stream` on x86_64, else
/// plain stores.
fn fill(dst: &mut [u64], x: u64, stream: bool) {
    #[cfg(target_arch = "x86_64")]
    if stream {
        for w in dst.iter_mut() {
            // SAFETY: SSE2, part of the x86_64 baseline; `w` is a valid,
            // aligned word of `dst`.
            unsafe { std::arch::x86_64::_mm_stream_si64((w as *mut u64).cast::<i64>(), x as i64) };
        }
        return;
    }
    let _ = stream;
    dst.fill(x);
}
