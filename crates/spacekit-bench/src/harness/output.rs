//! What a benchmark produces: JSON rows, text tables, bars, charts, and
//! progress lines.

use std::io::Write;

use serde_json::{json, Map, Value};

use crate::chart::{Chart, XAxis};

/// One JSON row: `case`, `variant`, parameters, and the measured figures.
#[derive(Clone, Debug)]
pub struct Row(Map<String, Value>);

impl Row {
    /// A row of `case` measured by `variant`.
    pub fn new(case: &str, variant: &str) -> Row {
        let mut m = Map::new();
        m.insert("case".into(), json!(case));
        m.insert("variant".into(), json!(variant));
        Row(m)
    }

    /// Adds (or replaces) a field.
    pub fn field(mut self, key: &str, value: impl Into<Value>) -> Row {
        self.0.insert(key.into(), value.into());
        self
    }

    /// A field as a number, if present and numeric.
    pub fn num(&self, key: &str) -> Option<f64> {
        self.0.get(key).and_then(Value::as_f64)
    }

    /// A field as a string, if present and a string.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }

    /// The row as a JSON object.
    pub fn to_json(&self) -> Value {
        Value::Object(self.0.clone())
    }
}

/// One bar an issue set, checked on the rows of one run.
#[derive(Clone, Debug)]
pub struct Bar {
    /// Whether this run meets it.
    pub met: bool,
    /// What was compared, with the figures and the bar.
    pub text: String,
}

/// Everything one benchmark produced: its rows (the JSON), its text tables,
/// its bars and its charts (the HTML report).
#[derive(Debug, Default)]
pub struct Report {
    /// The JSON rows.
    pub rows: Vec<Row>,
    /// The tables, in the order printed.
    pub tables: Vec<Table>,
    /// The bars, in the order checked.
    pub bars: Vec<Bar>,
    /// Lines printed after the bars (e.g. a bar not checked in this mode).
    pub notes: Vec<String>,
    /// The charts of the HTML report.
    pub charts: Vec<Chart>,
}

impl Report {
    /// Adds a row.
    pub fn push(&mut self, row: Row) {
        self.rows.push(row);
    }

    /// Prints `table` and keeps it for the HTML report.
    pub fn table(&mut self, table: Table) {
        table.print();
        self.tables.push(table);
    }

    /// Prints the bars and keeps them for the HTML report.
    pub fn bars(&mut self, bars: Bars) {
        bars.print();
        self.bars.extend(bars.lines);
    }

    /// Prints a note and keeps it.
    pub fn note(&mut self, text: String) {
        println!("\n({text})");
        self.notes.push(text);
    }

    /// Adds a chart to the HTML report.
    pub fn chart(&mut self, chart: Chart) {
        self.charts.push(chart);
    }

    /// Takes over everything `other` holds (e.g. the `membw` rows a scan
    /// benchmark reports beside its own).
    pub fn absorb(&mut self, other: Report) {
        self.rows.extend(other.rows);
        self.tables.extend(other.tables);
        self.bars.extend(other.bars);
        self.notes.extend(other.notes);
        self.charts.extend(other.charts);
    }

    /// The `--json` object of this benchmark: its rows, then its bars
    /// (`met` and the line printed) and notes, as printed.
    pub fn to_json(&self, bench: &str) -> Value {
        json!({
            "bench": bench,
            "rows": self.rows.iter().map(Row::to_json).collect::<Vec<_>>(),
            "bars": self
                .bars
                .iter()
                .map(|b| json!({"met": b.met, "text": b.text}))
                .collect::<Vec<_>>(),
            "notes": self.notes,
        })
    }
}

/// A text table printed with aligned columns: first column left-aligned,
/// the rest right-aligned.
#[derive(Clone, Debug)]
pub struct Table {
    /// The line above the table.
    pub title: String,
    /// Column names.
    pub header: Vec<String>,
    /// Cells, row by row.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table.
    pub fn new(title: &str, header: &[&str]) -> Table {
        Table {
            title: title.into(),
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row of cells.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text lines (title, header, rows).
    pub fn lines(&self) -> Vec<String> {
        let mut width: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                if i < width.len() {
                    width[i] = width[i].max(c.chars().count());
                }
            }
        }
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                let w = width.get(i).copied().unwrap_or(0);
                if i == 0 {
                    s.push_str(&format!("{c:<w$}"));
                } else {
                    s.push_str(&format!("  {c:>w$}"));
                }
            }
            s
        };
        let mut out = vec![self.title.clone(), line(&self.header)];
        out.extend(self.rows.iter().map(|r| line(r)));
        out
    }

    /// Prints the table on stdout.
    pub fn print(&self) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out);
        for l in self.lines() {
            let _ = writeln!(out, "{l}");
        }
        let _ = out.flush();
    }
}

/// The bars, checked on the rows of one run and printed after its
/// tables as `[met]` / `[NOT MET]` lines.
pub struct Bars {
    bench: &'static str,
    lines: Vec<Bar>,
}

impl Bars {
    /// No bars yet, for benchmark `bench`.
    pub fn new(bench: &'static str) -> Bars {
        Bars {
            bench,
            lines: Vec::new(),
        }
    }

    /// Records whether a bar is met, with the text that explains it.
    pub fn check(&mut self, met: bool, text: String) {
        self.lines.push(Bar { met, text });
    }

    fn print(&self) {
        if self.lines.is_empty() {
            return;
        }
        println!("\n{} bars (ratios from this run):", self.bench);
        for b in &self.lines {
            println!("  [{}] {}", if b.met { "met" } else { "NOT MET" }, b.text);
        }
    }
}

impl Chart {
    /// Fills the chart from benchmark rows: one series per `variant`, x
    /// from the field `x_key` (for a [`XAxis::Categories`] axis, a string
    /// field whose value names the category; rows with another value are
    /// skipped), y from `y_key`. Rows missing either field are skipped.
    pub fn from_rows<'r>(
        mut self,
        rows: impl IntoIterator<Item = &'r Row>,
        x_key: &str,
        y_key: &str,
    ) -> Chart {
        for r in rows {
            let Some(variant) = r.str("variant") else {
                continue;
            };
            let x = match &self.x {
                XAxis::Categories(c) => r
                    .str(x_key)
                    .and_then(|v| c.iter().position(|k| k == v))
                    .map(|i| i as f64),
                _ => r.num(x_key),
            };
            if let (Some(x), Some(y)) = (x, r.num(y_key)) {
                self.point(variant, x, y);
            }
        }
        self
    }
}

/// Progress message on stderr.
pub fn progress(bench: &str, msg: &str) {
    eprintln!("[{bench}] {msg}");
}

/// Formats nanoseconds with a unit that keeps 3-4 significant digits.
pub fn fmt_ns(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e4 {
        format!("{:.1} us", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// Formats a ratio `a / b` as `12.3x`.
pub fn fmt_ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.1}x", a / b)
    } else {
        "-".into()
    }
}

/// Writes `text` to `path` whole: beside it as `NAME.tmp`, renamed over
/// it when complete (the temporary removed on a failure), so a failure
/// never leaves half a file; through a symlink (`/dev/stdout`, a link to
/// a results file) the target is written in place.
pub fn write_whole(path: &std::path::Path, text: &str) -> Result<(), crate::BenchError> {
    let err =
        |e: std::io::Error| crate::BenchError(format!("cannot write {}: {e}", path.display()));
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return std::fs::write(path, text).map_err(err);
    }
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    let tmp = path.with_file_name(name);
    let r = std::fs::write(&tmp, text).and_then(|_| std::fs::rename(&tmp, path));
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r.map_err(err)
}

/// Checks, before a run, that [`write_whole`] will be able to write `path`
/// after it (a file, or with `dir` a directory holding `index.html`, made
/// if missing): the place exists, is what it should be, and takes a new
/// file (a probe file is made and removed). Nothing else is left behind.
///
/// # Errors
/// A [`crate::BenchError`] naming the path and the reason.
pub fn check_writable(path: &std::path::Path, dir: bool) -> Result<(), crate::BenchError> {
    use std::path::Path;
    let fail = |why: String| crate::BenchError(format!("cannot write {}: {why}", path.display()));
    // A symlink (`/dev/stdout`) is written through, as `write_whole` does:
    // its target must take the bytes, wherever the link lives.
    if !dir && std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map(drop)
            .map_err(|e| fail(e.to_string()));
    }
    let parent = |p: &Path| -> std::path::PathBuf {
        match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => Path::new(".").to_path_buf(),
        }
    };
    // The directory that will hold the new file: `path` itself for a report
    // directory that exists, else the nearest existing directory above.
    let mut at = if dir {
        path.to_path_buf()
    } else {
        parent(path)
    };
    if dir {
        if let Ok(m) = std::fs::metadata(path) {
            if !m.is_dir() {
                return Err(fail("not a directory".into()));
            }
        }
    } else if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        return Err(fail("is a directory".into()));
    }
    // Only a report directory is made with its parents.
    while dir && std::fs::symlink_metadata(&at).is_err() {
        let up = parent(&at);
        if up == at {
            break;
        }
        at = up;
    }
    match std::fs::metadata(&at) {
        Ok(m) if !m.is_dir() => {
            return Err(fail(format!("{} is not a directory", at.display())));
        }
        Err(e) => return Err(fail(format!("{}: {e}", at.display()))),
        Ok(_) => {}
    }
    let probe = at.join(format!(".spacekit-bench-probe.{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(|e| fail(format!("{}: {e}", at.display())))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_places_are_checked_before_a_run() {
        let d = std::env::temp_dir().join(format!("spacekit-bench-out-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        // A new file in an existing directory, a report directory not made
        // yet (two levels), and an existing one: fine, and nothing is left.
        check_writable(&d.join("out.json"), false).unwrap();
        check_writable(&d.join("a/b"), true).unwrap();
        check_writable(&d, true).unwrap();
        assert_eq!(
            std::fs::read_dir(&d).unwrap().count(),
            0,
            "a probe file was left"
        );
        // A missing directory under a file, a file where the report
        // directory should be, and a directory where the JSON should be.
        std::fs::write(d.join("f"), "x").unwrap();
        let e = check_writable(&d.join("f/out.json"), false).unwrap_err();
        assert!(e.0.contains("is not a directory"), "{}", e.0);
        let e = check_writable(&d.join("no/out.json"), false).unwrap_err();
        assert!(e.0.contains("No such file"), "{}", e.0);
        let e = check_writable(&d.join("f"), true).unwrap_err();
        assert!(e.0.contains("not a directory"), "{}", e.0);
        let e = check_writable(&d, false).unwrap_err();
        assert!(e.0.contains("is a directory"), "{}", e.0);
        // A symlink is checked by its target (as it is written through).
        let target = d.join("target.json");
        std::fs::write(&target, "old").unwrap();
        std::os::unix::fs::symlink(&target, d.join("link.json")).unwrap();
        check_writable(&d.join("link.json"), false).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "old");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn table_lines_align_columns() {
        let mut t = Table::new("t", &["a", "bb"]);
        t.row(vec!["xyz".into(), "1".into()]);
        assert_eq!(t.lines(), ["t", "a    bb", "xyz   1"]);
    }

    #[test]
    fn report_keeps_rows_and_json_shape() {
        let mut r = Report::default();
        r.push(Row::new("c", "spacekit").field("median_ns", 2.5));
        let j = r.to_json("x");
        assert_eq!(j["bench"], "x");
        assert_eq!(j["rows"][0]["case"], "c");
        assert_eq!(j["rows"][0]["median_ns"], 2.5);
        assert_eq!(r.rows[0].num("median_ns"), Some(2.5));
        assert_eq!(r.rows[0].str("variant"), Some("spacekit"));
        // Bars and notes go out as printed.
        r.bars.push(Bar {
            met: false,
            text: "c: 3x (bar: 5x)".into(),
        });
        r.notes.push("n".into());
        let j = r.to_json("x");
        assert_eq!(j["bars"][0]["met"], false);
        assert_eq!(j["bars"][0]["text"], "c: 3x (bar: 5x)");
        assert_eq!(j["notes"][0], "n");
    }
}
