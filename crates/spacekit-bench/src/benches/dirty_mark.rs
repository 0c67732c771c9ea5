//! `bench dirty-mark`: the VMM side of dirty-page tracking,
//! spacekit's atomic [`DirtyBitmap`] against rust-vmm `vm-memory`'s
//! `AtomicBitmap` (feature `backend-bitmap`), the bitmap Cloud Hypervisor
//! and other rust-vmm VMMs mark when the VMM itself writes guest memory and
//! harvest with `get_and_reset()` at every migration pass.
//!
//! The guest is 1 GiB of 4 KiB pages (64 MiB with `--quick`): spacekit's
//! log has [`Geometry`] base 4 GiB (a guest-physical address), vm-memory's
//! bitmap is built as its docs say, `AtomicBitmap::new(guest_bytes, 4096)`,
//! and takes offsets into the region (what a `GuestRegionMmap` passes it).
//! Both mark the same pages: vm-memory's `set_addr_range(off, len)` sets
//! the pages of bytes `off / 4096 ..= (off + len - 1) / 4096`, and
//! spacekit's `mark(base + off, len)` the pages of the same bytes.
//!
//! * `mark`: 1,024 marks (256 with `--quick`) of 1, 16, 64 or 256 pages
//!   each (field `pages`), at random page-aligned offsets (uniform over the
//!   offsets where the whole mark fits), `len = pages * 4096`; one timed
//!   call runs the whole list, the figure is ns per mark. vm-memory's
//!   `Bitmap::mark_dirty(off, len)` (its `set_addr_range`: one `SeqCst`
//!   `fetch_or` per page) against [`DirtyBitmap::mark`] (one `Release`
//!   `fetch_or` per 64-page word the range touches). The log is marked over
//!   and over (marks are idempotent); both variants face the same state.
//! * `harvest`: a get-and-reset of the whole log with 0.1% or 10% of its
//!   pages dirty (field `dirty`, in percent; distinct pages chosen at
//!   random): vm-memory's `get_and_reset()` (one `SeqCst` `fetch_and(0)`
//!   per word into a fresh `Vec`, its allocation timed, its drop not)
//!   against [`DirtyBitmap::harvest_into`] into a reused buffer (a plain
//!   load per word, an atomic swap only for dirty words). Each sample
//!   first re-dirties the log untimed (one one-page mark per dirty page,
//!   through each variant's own API) and checks what the previous timed
//!   harvest returned; the harvest alone is timed, once per sample.
//!
//! Correctness before timing: for every case, both logs are marked alike
//! from clean and harvested; each harvest must equal the words a per-page
//! model computes, word for word, and a second harvest of each must find
//! the log clean. Every timed harvest's output is checked against the model
//! too, and after the mark timing both logs are harvested and checked
//! again.
//!
//! JSON rows: `case` (`mark`, `harvest`), `variant` (`spacekit`,
//! `vm-memory`), `guest_bytes`, `pages` (mark: pages per mark) or `dirty`
//! (harvest: percent of pages dirty) and `dirty_words` (harvest: words
//! holding a dirty page), `marks` (mark: marks per timed call) and
//! `median_ns` (per mark, or per harvest).

use std::hint::black_box;
use std::num::NonZeroUsize;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use spacekit::dirty::{DirtyBitmap, DirtyError, Geometry};
use vm_memory::bitmap::{AtomicBitmap, Bitmap};

use crate::chart::{Chart, XAxis};
use crate::context::{BenchError, Ctx, Mode};
use crate::harness::{
    batch, progress, verify_lists, Bars, Comparison, Medians, Op, Report, Row, Table, Timer,
};

const NAME: &str = "dirty-mark";
/// Page size of both logs.
const PAGE: u64 = 4096;
/// Guest-physical address of the guest's first byte (spacekit's base).
const BASE: u64 = 1 << 32;
/// The guest: 1 GiB.
const GIB: u64 = 1 << 30;
/// Pages per mark.
const MARK_PAGES: [u64; 4] = [1, 16, 64, 256];
/// Percent of pages dirty at a harvest.
const DIRTY: [f64; 2] = [0.1, 10.0];
const SPK: &str = "spacekit";
const VMM: &str = "vm-memory";

fn dirty_err(what: &str, e: DirtyError) -> BenchError {
    BenchError(format!("{what}: {e}"))
}

/// The two logs of one case, over the same guest.
struct Logs {
    spk: DirtyBitmap,
    vmm: AtomicBitmap,
    words: usize,
}

impl Logs {
    fn new(guest_bytes: u64) -> Result<Logs, BenchError> {
        let geometry = Geometry::new(BASE, PAGE).map_err(|e| dirty_err("the geometry", e))?;
        let spk = DirtyBitmap::new(geometry, guest_bytes).map_err(|e| dirty_err("the log", e))?;
        let page = NonZeroUsize::new(PAGE as usize)
            .ok_or_else(|| BenchError("a zero page size".into()))?;
        let vmm = AtomicBitmap::new(guest_bytes as usize, page);
        let words = spk.words();
        if vmm.len() != spk.pages() as usize {
            return Err(BenchError(format!(
                "vm-memory tracks {} pages, spacekit {}",
                vmm.len(),
                spk.pages()
            )));
        }
        Ok(Logs { spk, vmm, words })
    }

    /// spacekit's harvest into a new buffer.
    fn harvest_spk(&self) -> Result<Vec<u64>, BenchError> {
        let mut out = vec![!0u64; self.words];
        self.spk
            .harvest_into(&mut out)
            .map_err(|e| dirty_err("harvest_into", e))?;
        Ok(out)
    }

    /// Harvests both logs: `(spacekit's words, vm-memory's words)`.
    fn harvest_both(&self) -> Result<(Vec<u64>, Vec<u64>), BenchError> {
        Ok((self.harvest_spk()?, self.vmm.get_and_reset()))
    }

    /// Checks that a harvest of each log finds it clean.
    fn check_clean(&self, what: &str) -> Result<(), BenchError> {
        let (spk, vmm) = self.harvest_both()?;
        verify_lists(
            &format!("the log {what} (must be clean)"),
            &[("expected", vec![0u64; self.words]), (SPK, spk), (VMM, vmm)],
        )
    }

    /// Harvests both logs, checks both against `want` word for word, then
    /// checks that the harvests left both logs clean.
    fn check(&self, what: &str, want: &[u64]) -> Result<(), BenchError> {
        let (spk, vmm) = self.harvest_both()?;
        verify_lists(
            &format!("the harvested words {what}"),
            &[("expected", want.to_vec()), (SPK, spk), (VMM, vmm)],
        )?;
        self.check_clean(&format!("after the harvest {what}"))
    }
}

/// The words a log holds after marking `len` bytes at each offset: the
/// per-page model of both (pages `off / PAGE ..= (off + len - 1) / PAGE`).
fn model(words: usize, offsets: &[u64], len: u64) -> Vec<u64> {
    let mut out = vec![0u64; words];
    for &off in offsets {
        for p in off / PAGE..=(off + len - 1) / PAGE {
            out[(p / 64) as usize] |= 1 << (p % 64);
        }
    }
    out
}

/// Per-mark times of marks of `pages` pages.
fn mark_case(
    ctx: &Ctx,
    logs: &Logs,
    guest_bytes: u64,
    pages: u64,
    marks: usize,
    rng: &mut SmallRng,
) -> Result<Medians, BenchError> {
    let len = pages * PAGE;
    let slots = guest_bytes / PAGE - pages + 1;
    let offsets: Vec<u64> = (0..marks)
        .map(|_| rng.random_range(0..slots) * PAGE)
        .collect();
    let want = model(logs.words, &offsets, len);
    let what = format!("after {marks} marks of {pages} pages");

    // Correctness first: mark both from clean; the harvests are the
    // answers the comparison checks against the model, and must leave the
    // logs clean.
    logs.check_clean("before the marks")?;
    for &off in &offsets {
        logs.spk
            .mark(BASE + off, len)
            .map_err(|e| dirty_err("mark", e))?;
        logs.vmm.mark_dirty(off as usize, len as usize);
    }
    let (spk_words, vmm_words) = logs.harvest_both()?;
    logs.check_clean(&format!("after the harvest {what}"))?;

    let mut refused = 0usize;
    let m = Comparison::lists(format!("the harvested words {what}"))
        .expect(want.clone())
        .variant(
            SPK,
            spk_words,
            batch(|| {
                let log = black_box(&logs.spk);
                for &off in &offsets {
                    refused += log.mark(BASE + off, len).is_err() as usize;
                }
            }),
        )
        .variant(
            VMM,
            vmm_words,
            batch(|| {
                let log = black_box(&logs.vmm);
                for &off in &offsets {
                    log.mark_dirty(off as usize, len as usize);
                }
            }),
        )
        .run(&ctx.timer())?
        .per(marks as f64);
    if refused != 0 {
        return Err(BenchError(format!(
            "spacekit refused {refused} timed marks of {pages} pages"
        )));
    }
    // The timed marks left exactly the marked pages dirty.
    logs.check(&format!("{what} (after timing)"), &want)?;
    Ok(m)
}

/// One variant's state in the harvest timing.
struct HarvestState<'a, L> {
    log: &'a L,
    /// The last timed harvest's output.
    out: Vec<u64>,
    /// Whether `out` holds a harvest not yet checked.
    pending: bool,
    /// The first wrong harvest seen.
    failed: Option<String>,
}

impl<'a, L> HarvestState<'a, L> {
    fn new(log: &'a L, words: usize) -> Self {
        HarvestState {
            log,
            out: vec![0u64; words],
            pending: false,
            failed: None,
        }
    }

    /// Checks the previous timed harvest against `want`.
    fn check_previous(&mut self, want: &[u64]) {
        if self.pending && self.failed.is_none() && self.out != want {
            let i = self.out.iter().zip(want).position(|(a, b)| a != b);
            self.failed = Some(format!(
                "a timed harvest differs from the model (first at word {i:?}, {} words)",
                self.out.len()
            ));
        }
        self.pending = false;
    }
}

/// The harvest timer: one harvest per sample, a re-dirtying setup before
/// each.
fn harvest_timer(mode: Mode) -> Timer {
    let (samples, budget) = match mode {
        Mode::Quick => (11, Duration::from_millis(40)),
        Mode::Default => (201, Duration::from_secs(2)),
        Mode::Full => (1001, Duration::from_secs(8)),
    };
    Timer {
        sample: Duration::ZERO,
        samples,
        budget,
    }
}

/// Per-harvest times with `dirty` percent of the pages dirty; also returns
/// how many words hold a dirty page.
fn harvest_case(
    ctx: &Ctx,
    logs: &Logs,
    guest_bytes: u64,
    dirty: f64,
    rng: &mut SmallRng,
) -> Result<(Medians, usize), BenchError> {
    let pages = (guest_bytes / PAGE) as usize;
    let n = ((pages as f64 * dirty / 100.0).round() as usize).max(1);
    let offsets: Vec<u64> = sample(rng, pages, n)
        .into_iter()
        .map(|p| p as u64 * PAGE)
        .collect();
    let want = model(logs.words, &offsets, PAGE);
    let dirty_words = want.iter().filter(|&&w| w != 0).count();
    let mark_spk = |log: &DirtyBitmap| {
        offsets
            .iter()
            .map(|&off| log.mark(BASE + off, PAGE))
            .find(Result::is_err)
            .unwrap_or(Ok(()))
    };
    let mark_vmm = |log: &AtomicBitmap| {
        for &off in &offsets {
            log.set_addr_range(off as usize, PAGE as usize);
        }
    };

    // Correctness first: dirty both from clean; the harvests are the
    // answers the comparison checks against the model, and must leave the
    // logs clean.
    logs.check_clean(&format!("before dirtying {dirty}%"))?;
    mark_spk(&logs.spk).map_err(|e| dirty_err("mark", e))?;
    mark_vmm(&logs.vmm);
    let (spk_words, vmm_words) = logs.harvest_both()?;
    logs.check_clean(&format!("after the harvest at {dirty}% dirty"))?;

    let mut spk = HarvestState::new(&logs.spk, logs.words);
    let mut vmm = HarvestState::new(&logs.vmm, logs.words);
    let m = Comparison::lists(format!("the harvested words at {dirty}% dirty"))
        .expect(want.clone())
        .variant(
            SPK,
            spk_words,
            Op::with_setup(
                &mut spk,
                |s| {
                    s.check_previous(&want);
                    if let Err(e) = mark_spk(s.log) {
                        s.failed.get_or_insert(format!("re-dirtying: {e}"));
                    }
                },
                |s| {
                    if black_box(s.log).harvest_into(&mut s.out).is_err() {
                        s.failed.get_or_insert("harvest_into refused".into());
                    }
                    s.pending = true;
                },
            ),
        )
        .variant(
            VMM,
            vmm_words,
            Op::with_setup(
                &mut vmm,
                |s| {
                    s.check_previous(&want);
                    // The previous harvest's vector is dropped here, untimed.
                    s.out = Vec::new();
                    mark_vmm(s.log);
                },
                |s| {
                    s.out = black_box(s.log).get_and_reset();
                    s.pending = true;
                },
            ),
        )
        .run(&harvest_timer(ctx.mode))?;
    for (name, s) in [(SPK, &mut spk.failed), (VMM, &mut vmm.failed)] {
        if let Some(e) = s.take() {
            return Err(BenchError(format!("{name} at {dirty}% dirty: {e}")));
        }
    }
    spk.check_previous(&want);
    vmm.check_previous(&want);
    if let Some(e) = spk.failed.or(vmm.failed) {
        return Err(BenchError(format!("at {dirty}% dirty: {e}")));
    }
    logs.check_clean(&format!("after timing the harvests at {dirty}% dirty"))?;
    Ok((m, dirty_words))
}

/// Runs `bench dirty-mark`.
pub fn run(ctx: &Ctx) -> Result<Report, BenchError> {
    let (guest_bytes, marks) = match ctx.mode {
        Mode::Quick => (64 << 20, 256),
        _ => (GIB, 1024),
    };
    let mut rng = SmallRng::seed_from_u64(ctx.seed ^ 0xD1E7_3A4C);
    let logs = Logs::new(guest_bytes)?;
    let mut report = Report::default();
    let mut bars = Bars::new(NAME);

    // ---- mark ----
    let mut table = Table::new(
        &format!(
            "marks of N pages at random page-aligned offsets in a {} MiB guest, median ns per mark \
             ({marks} marks per timed call): spacekit DirtyBitmap::mark vs vm-memory \
             AtomicBitmap::mark_dirty",
            guest_bytes >> 20
        ),
        &["pages", SPK, VMM, "vm-memory/spk"],
    );
    let mut at_bar = None;
    for pages in MARK_PAGES {
        progress(NAME, &format!("marks of {pages} pages"));
        let m = mark_case(ctx, &logs, guest_bytes, pages, marks, &mut rng)?;
        m.rows(&mut report, |v| {
            Row::new("mark", v)
                .field("pages", pages)
                .field("guest_bytes", guest_bytes)
                .field("marks", marks)
        });
        table.row(vec![
            pages.to_string(),
            format!("{:.1}", m.ns(SPK)),
            format!("{:.1}", m.ns(VMM)),
            m.ratio_cell(VMM, SPK),
        ]);
        if pages == 64 {
            at_bar = Some(m);
        }
    }
    report.table(table);
    if let Some(m) = at_bar {
        bars.check(
            m.ratio(VMM, SPK) >= 10.0,
            format!(
                "mark of 64 pages: spacekit {:.1} ns vs vm-memory {:.1} ns = {:.1}x faster (bar: >= 10x)",
                m.ns(SPK),
                m.ns(VMM),
                m.ratio(VMM, SPK)
            ),
        );
    }

    // ---- harvest ----
    let mut table = Table::new(
        &format!(
            "harvest (get-and-reset) of a {} MiB guest's log ({} words), median per harvest, the \
             log re-dirtied untimed before each: spacekit harvest_into a reused buffer vs \
             vm-memory get_and_reset",
            guest_bytes >> 20,
            logs.words
        ),
        &["dirty", "dirty words", SPK, VMM, "vm-memory/spk"],
    );
    let mut at_bar = None;
    for dirty in DIRTY {
        progress(NAME, &format!("harvests at {dirty}% dirty"));
        let (m, dirty_words) = harvest_case(ctx, &logs, guest_bytes, dirty, &mut rng)?;
        m.rows(&mut report, |v| {
            Row::new("harvest", v)
                .field("dirty", dirty)
                .field("dirty_words", dirty_words)
                .field("guest_bytes", guest_bytes)
        });
        table.row(vec![
            format!("{dirty}%"),
            dirty_words.to_string(),
            m.cell(SPK),
            m.cell(VMM),
            m.ratio_cell(VMM, SPK),
        ]);
        if dirty == 0.1 {
            at_bar = Some(m);
        }
    }
    report.table(table);
    match at_bar {
        Some(m) if guest_bytes == GIB => bars.check(
            m.ratio(VMM, SPK) >= 5.0,
            format!(
                "harvest of a 1 GiB guest at 0.1% dirty: spacekit {} vs vm-memory {} = {:.1}x \
                 faster (bar: >= 5x)",
                m.cell(SPK),
                m.cell(VMM),
                m.ratio(VMM, SPK)
            ),
        ),
        _ => report.note("harvest bar (1 GiB guest): not checked in --quick mode".into()),
    }

    report.chart(
        Chart::new(
            "dirty-mark: time per mark vs pages per mark",
            "pages per mark",
            "ns per mark (log)",
            XAxis::Log,
            true,
        )
        .from_rows(
            report.rows.iter().filter(|r| r.str("case") == Some("mark")),
            "pages",
            "median_ns",
        ),
    );
    report.chart(
        Chart::new(
            &format!(
                "dirty-mark: time per harvest of a {} MiB guest's log vs percent dirty",
                guest_bytes >> 20
            ),
            "percent of pages dirty",
            "ns per harvest (log)",
            XAxis::Log,
            true,
        )
        .from_rows(
            report
                .rows
                .iter()
                .filter(|r| r.str("case") == Some("harvest")),
            "dirty",
            "median_ns",
        ),
    );
    report.bars(bars);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_marks_the_pages_a_range_touches() {
        let w = model(4, &[0, 63 * PAGE], 2 * PAGE);
        assert_eq!(w, [0b11 | 1 << 63, 1, 0, 0]);
        let w = model(4, &[PAGE], 1);
        assert_eq!(w, [0b10, 0, 0, 0]);
    }

    #[test]
    fn both_logs_agree_on_partial_pages() {
        // vm-memory's documented semantics: pages of start_addr ..=
        // start_addr + len - 1, so a range straddling a page edge marks both.
        let logs = Logs::new(1 << 20).unwrap();
        logs.spk.mark(BASE + PAGE - 16, 32).unwrap();
        logs.vmm.mark_dirty((PAGE - 16) as usize, 32);
        let want = model(logs.words, &[PAGE - 16], 32);
        assert_eq!(want[0], 0b11);
        logs.check("of a straddling range", &want).unwrap();
    }

    #[test]
    fn a_page_one_log_misses_fails_the_check() {
        let logs = Logs::new(1 << 20).unwrap();
        logs.spk.mark(BASE + 5 * PAGE, PAGE).unwrap();
        let want = model(logs.words, &[5 * PAGE], PAGE);
        let e = logs.check("of one page", &want).unwrap_err();
        assert!(e.0.contains("vm-memory differs"), "{e}");
        // The harvest left both clean, so a clean check now passes, and a
        // page left in one log fails it.
        logs.check_clean("now").unwrap();
        logs.vmm.mark_dirty(0, 1);
        assert!(logs.check_clean("with a page left").is_err());
    }

    #[test]
    fn a_quick_run_pairs_its_rows_and_draws_both_series() {
        let ctx = Ctx {
            mode: Mode::Quick,
            seed: 7,
        };
        let report = run(&ctx).unwrap();
        assert_eq!(report.rows.len(), 2 * (MARK_PAGES.len() + DIRTY.len()));
        // Rows come in (spacekit, vm-memory) pairs with the same fields.
        for pair in report.rows.chunks(2) {
            let (a, b) = (pair[0].to_json(), pair[1].to_json());
            assert_eq!(
                (pair[0].str("variant"), pair[1].str("variant")),
                (Some(SPK), Some(VMM))
            );
            let keys = |v: &serde_json::Value| {
                let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
                k.sort();
                k
            };
            assert_eq!(keys(&a), keys(&b));
            for k in keys(&a) {
                if k != "variant" && k != "median_ns" {
                    assert_eq!(a[&k], b[&k], "field {k}");
                }
            }
            assert!(pair[0].num("median_ns").unwrap() > 0.0);
        }
        assert_eq!(report.charts.len(), 2);
        for chart in &report.charts {
            let svg = chart.to_svg(800, 400).unwrap();
            for name in [SPK, VMM] {
                assert!(
                    svg.contains(&format!("\n{name}\n</text>")),
                    "{name} in {}",
                    chart.title
                );
            }
        }
    }
}
