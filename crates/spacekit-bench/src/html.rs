//! The `--report DIR` page: `DIR/index.html`, one self-contained file (inline
//! CSS and SVG; no script, font, image or stylesheet from anywhere else, so
//! it opens offline and can be attached to a mail).
//!
//! Per benchmark: its charts, its bars (met or not), its tables; at the top,
//! the machine (CPU, SIMD features detected, cores, memory, and the memory
//! bandwidth measured in the same run).

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use crate::benches::Bench;
use crate::context::{BenchError, Ctx};
use crate::harness::Report;

/// What the report says about the machine.
#[derive(Clone, Debug, Default)]
pub struct Machine {
    /// `model name` from /proc/cpuinfo.
    pub cpu: String,
    /// Logical CPUs this process may use.
    pub cores: usize,
    /// Total memory, GiB.
    pub memory_gib: f64,
    /// The SIMD level spacekit runs, and every CPU feature it asked about.
    pub simd: String,
    /// Memory read bandwidth of this run, GB/s: `(threads, gbps)`.
    pub membw: Vec<(u64, f64)>,
}

impl Machine {
    /// The SIMD level spacekit chose and the features the CPU reports, e.g.
    /// `avx2 (avx2 popcnt bmi1 pclmulqdq ...)`.
    pub fn simd_summary() -> String {
        let level = spacekit::arch::Level::detect();
        let have: Vec<&str> = spacekit::arch::cpu_features()
            .filter(|f| f.1)
            .map(|f| f.0)
            .collect();
        format!("SIMD level {} (CPU: {})", level.name(), have.join(" "))
    }

    /// This machine, with the bandwidth rows found in `reports`.
    pub fn probe(reports: &[(&Bench, Report)]) -> Machine {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_gib = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kb| kb / (1024.0 * 1024.0));
        let mut membw: Vec<(u64, f64)> = Vec::new();
        for (_, r) in reports {
            for row in &r.rows {
                if row.str("case") == Some("read") && row.str("variant") == Some("limit") {
                    if let (Some(t), Some(g)) = (row.num("threads"), row.num("gbps")) {
                        if !membw.iter().any(|m| m.0 == t as u64) {
                            membw.push((t as u64, g));
                        }
                    }
                }
            }
        }
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_gib,
            simd: Machine::simd_summary(),
            membw,
        }
    }
}

/// Escapes text for HTML.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            _ => o.push(c),
        }
    }
    o
}

const STYLE: &str = "
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1d1d1f;background:#f6f6f4}
main{max-width:1100px;margin:0 auto;padding:24px 28px 60px}
h1{font-size:26px;margin:8px 0 4px} h2{font-size:21px;margin:0 0 4px}
.sub{color:#555;margin:0 0 18px}
section{background:#fff;border:1px solid #e2e2de;border-radius:8px;padding:18px 22px;margin:22px 0}
table{border-collapse:collapse;font:12.5px ui-monospace,SFMono-Regular,Menlo,monospace;margin:8px 0 14px}
td,th{padding:3px 10px;text-align:right;border-bottom:1px solid #eee;white-space:nowrap}
td:first-child,th:first-child{text-align:left} th{background:#f1f1ee;font-weight:600}
.scroll{overflow-x:auto} .caption{font-weight:600;margin:12px 0 2px;font-size:14px}
.bars{list-style:none;padding:0;margin:10px 0} .bars li{margin:3px 0;font-size:14px} summary{cursor:pointer;font-weight:600;font-size:14px}
.met,.not{display:inline-block;min-width:74px;text-align:center;border-radius:4px;font-weight:700;font-size:12px;padding:1px 6px;margin-right:8px}
.met{background:#dff3e2;color:#17662a} .not{background:#fbe1e1;color:#a3161a}
.machine td{font-family:system-ui,sans-serif;text-align:left}
.charts{display:flex;flex-wrap:wrap;gap:10px} .charts svg{max-width:100%;height:auto;border:1px solid #eee}
nav a{margin-right:12px;color:#0b5cad;text-decoration:none}
.about{color:#444;margin:0 0 10px}
";

/// Writes `dir/index.html` for `reports` (creating `dir`); returns its path.
pub fn write_report(
    dir: &Path,
    ctx: &Ctx,
    reports: &[(&Bench, Report)],
) -> Result<std::path::PathBuf, BenchError> {
    let machine = Machine::probe(reports);
    let page = render(ctx, &machine, reports)?;
    fs::create_dir_all(dir)
        .map_err(|e| BenchError(format!("cannot create {}: {e}", dir.display())))?;
    let path = dir.join("index.html");
    crate::harness::write_whole(&path, &page)?;
    Ok(path)
}

/// The page as a string.
pub fn render(
    ctx: &Ctx,
    machine: &Machine,
    reports: &[(&Bench, Report)],
) -> Result<String, BenchError> {
    let mut h = String::new();
    let w = &mut h;
    let _ = write!(
        w,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>spacekit bench</title><style>{STYLE}</style></head><body><main>\n"
    );
    let met = reports
        .iter()
        .flat_map(|(_, r)| &r.bars)
        .filter(|b| b.met)
        .count();
    let bars = reports.iter().map(|(_, r)| r.bars.len()).sum::<usize>();
    let _ = writeln!(
        w,
        "<h1>spacekit bench</h1><p class=\"sub\">{} benchmark(s), {:?} mode, seed {:#x}; \
         {met} of {bars} bars met. Every variant was verified to give identical answers before \
         it was timed; times are medians, variants sampled round-robin, ratios from this run.</p>",
        reports.len(),
        ctx.mode,
        ctx.seed
    );
    let bw = machine
        .membw
        .iter()
        .map(|(t, g)| format!("{g:.1} GB/s with {t} thread(s)"))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = write!(
        w,
        "<section><h2>Machine</h2><table class=\"machine\">\
         <tr><td>CPU</td><td>{}</td></tr><tr><td>SIMD</td><td>{}</td></tr>\
         <tr><td>cores</td><td>{}</td></tr><tr><td>memory</td><td>{:.1} GiB</td></tr>\
         <tr><td>read bandwidth</td><td>{}</td></tr></table>\n<nav>",
        esc(&machine.cpu),
        esc(&machine.simd),
        machine.cores,
        machine.memory_gib,
        if bw.is_empty() {
            "not measured in this run".into()
        } else {
            esc(&bw)
        }
    );
    for (b, _) in reports {
        let _ = write!(w, "<a href=\"#{}\">{}</a>", b.name, b.name);
    }
    let _ = writeln!(w, "</nav></section>");
    for (b, r) in reports {
        let _ = writeln!(
            w,
            "<section id=\"{}\"><h2>{}</h2><p class=\"about\">{}</p>",
            b.name,
            esc(b.name),
            esc(b.about)
        );
        let _ = write!(w, "<div class=\"charts\">");
        for c in &r.charts {
            let svg = c.to_svg(1040, 420).map_err(BenchError)?;
            let _ = write!(
                w,
                "<figure data-chart=\"{}\" style=\"margin:0\">{svg}</figure>",
                esc(&c.title)
            );
        }
        let _ = writeln!(w, "</div>");
        if !r.bars.is_empty() {
            // Bars not met first; a long list starts folded.
            let met = r.bars.iter().filter(|b| b.met).count();
            let _ = write!(
                w,
                "<details class=\"bars\"{}><summary>{met} of {} bars met</summary><ul class=\"bars\">",
                if r.bars.len() <= 8 || met < r.bars.len() { " open" } else { "" },
                r.bars.len()
            );
            for bar in r
                .bars
                .iter()
                .filter(|b| !b.met)
                .chain(r.bars.iter().filter(|b| b.met))
            {
                let (class, word) = if bar.met {
                    ("met", "met")
                } else {
                    ("not", "NOT MET")
                };
                let _ = write!(
                    w,
                    "<li><span class=\"{class}\">{word}</span>{}</li>",
                    esc(&bar.text)
                );
            }
            let _ = writeln!(w, "</ul></details>");
        }
        for t in &r.tables {
            let _ = write!(
                w,
                "<div class=\"caption\">{}</div><div class=\"scroll\"><table><tr>",
                esc(&t.title)
            );
            for c in &t.header {
                let _ = write!(w, "<th>{}</th>", esc(c));
            }
            let _ = write!(w, "</tr>");
            for row in &t.rows {
                let _ = write!(w, "<tr>");
                for c in row {
                    let _ = write!(w, "<td>{}</td>", esc(c));
                }
                let _ = write!(w, "</tr>");
            }
            let _ = writeln!(w, "</table></div>");
        }
        for n in &r.notes {
            let _ = write!(w, "<p class=\"about\">{}</p>", esc(n));
        }
        let _ = writeln!(w, "</section>");
    }
    let _ = writeln!(w, "</main></body></html>");
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::{Chart, XAxis};
    use crate::context::Mode;
    use crate::harness::{Bars, Row, Table};

    #[test]
    fn page_holds_tables_bars_and_charts_and_escapes_text() {
        let bench = Bench {
            name: "demo",
            about: "a <demo>",
            run: |_| Ok(Report::default()),
        };
        let mut r = Report::default();
        r.push(
            Row::new("read", "limit")
                .field("threads", 1)
                .field("gbps", 20.5),
        );
        let mut t = Table::new("t & u", &["a", "b"]);
        t.row(vec!["1".into(), "2".into()]);
        r.tables.push(t);
        let mut bars = Bars::new("demo");
        bars.check(true, "fast".into());
        bars.check(false, "slow".into());
        r.bars(bars);
        let mut c = Chart::new("c", "x", "y", XAxis::Linear, false);
        c.point("spacekit", 1.0, 2.0);
        r.chart(c);
        let ctx = Ctx {
            mode: Mode::Quick,
            seed: 1,
        };
        let reports = [(&bench, r)];
        let m = Machine::probe(&reports);
        assert_eq!(m.membw, [(1, 20.5)]);
        let page = render(&ctx, &m, &reports).unwrap();
        assert!(page.contains("a &lt;demo&gt;"));
        assert!(page.contains("t &amp; u"));
        assert!(page.contains("<span class=\"met\">met</span>fast"));
        assert!(page.contains("<span class=\"not\">NOT MET</span>slow"));
        assert!(page.contains("1 of 2 bars met"));
        assert_eq!(page.matches("<svg").count(), 1);
        assert!(page.contains("20.5 GB/s with 1 thread(s)"));
    }
}
