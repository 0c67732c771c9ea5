//! Charts of the HTML report: a small description ([`Chart`]) that each
//! benchmark fills from its rows, drawn as inline SVG with `plotters`.
//!
//! Two kinds: lines over a numeric x axis (linear or log), one line per
//! variant with a marker per point, and grouped bars over categories. Log
//! axes are drawn by plotting `log10(v)` on a linear axis and labelling the
//! ticks with `v`, so both kinds share one coordinate type. Horizontal
//! reference lines (a physical limit measured in the same run) are dashed.

use plotters::coord::Shift;
use plotters::prelude::*;

/// The x axis of a chart.
#[derive(Clone, Debug)]
pub enum XAxis {
    /// Numbers, linear.
    Linear,
    /// Numbers, log scale.
    Log,
    /// Named categories (the points' x is the index into this list); drawn
    /// as grouped bars.
    Categories(Vec<String>),
}

/// One variant's points.
#[derive(Clone, Debug)]
pub struct Series {
    /// The variant's name (the legend).
    pub name: String,
    /// `(x, y)` points in x order (for categories, x is the index).
    pub points: Vec<(f64, f64)>,
}

/// A chart for the HTML report.
#[derive(Clone, Debug)]
pub struct Chart {
    /// Title above the chart.
    pub title: String,
    /// What x measures.
    pub x_label: String,
    /// What y measures.
    pub y_label: String,
    /// The x axis.
    pub x: XAxis,
    /// Whether y is drawn on a log scale.
    pub y_log: bool,
    /// One series per variant.
    pub series: Vec<Series>,
    /// Horizontal reference lines: `(label, y)`.
    pub limits: Vec<(String, f64)>,
}

impl Chart {
    /// An empty chart.
    pub fn new(title: &str, x_label: &str, y_label: &str, x: XAxis, y_log: bool) -> Chart {
        Chart {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            x,
            y_log,
            series: Vec::new(),
            limits: Vec::new(),
        }
    }

    /// Adds a point to the series `name` (created on first use).
    pub fn point(&mut self, name: &str, x: f64, y: f64) {
        match self.series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push((x, y)),
            None => self.series.push(Series {
                name: name.into(),
                points: vec![(x, y)],
            }),
        }
    }

    /// Adds a dashed horizontal line at `y`.
    pub fn limit(&mut self, label: &str, y: f64) {
        self.limits.push((label.into(), y));
    }

    /// The chart as an `<svg>` element, `width` x `height` pixels.
    pub fn to_svg(&self, width: u32, height: u32) -> Result<String, String> {
        let mut out = String::new();
        {
            let root = SVGBackend::with_string(&mut out, (width, height)).into_drawing_area();
            self.draw(&root)
                .map_err(|e| format!("{}: {e}", self.title))?;
            root.present().map_err(|e| format!("{}: {e}", self.title))?;
        }
        Ok(out)
    }

    /// The legend's entries: each series, then each limit (dashed).
    fn legend_entries(&self) -> Vec<(String, RGBColor, Swatch)> {
        let bars = matches!(self.x, XAxis::Categories(_));
        let mut v: Vec<(String, RGBColor, Swatch)> = self
            .series
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let how = if bars { Swatch::Box } else { Swatch::Line };
                (s.name.clone(), palette(&s.name, k), how)
            })
            .collect();
        for (k, (label, _)) in self.limits.iter().enumerate() {
            v.push((label.clone(), limit_grey(k), Swatch::Dashes(k)));
        }
        v
    }

    /// The legend, in its own strip right of the plot (so it never covers
    /// a bar or a line).
    fn draw_legend(&self, side: &DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), String> {
        let err = |e: &dyn std::fmt::Display| e.to_string();
        for (i, (name, color, how)) in self.legend_entries().into_iter().enumerate() {
            let y = 52 + 22 * i as i32;
            match how {
                Swatch::Box => side
                    .draw(&Rectangle::new([(6, y - 5), (18, y + 5)], color.filled()))
                    .map_err(|e| err(&e))?,
                Swatch::Line => side
                    .draw(&PathElement::new(
                        vec![(2, y), (22, y)],
                        color.stroke_width(3),
                    ))
                    .map_err(|e| err(&e))?,
                Swatch::Dashes(k) => {
                    let dash = [4, 8][k % 2];
                    let mut x = 2;
                    while x < 22 {
                        side.draw(&PathElement::new(
                            vec![(x, y), ((x + dash).min(22), y)],
                            color.stroke_width(2),
                        ))
                        .map_err(|e| err(&e))?;
                        x += 2 * dash;
                    }
                }
            }
            side.draw(&Text::new(
                name,
                (28, y - 8),
                ("sans-serif", 15).into_font(),
            ))
            .map_err(|e| err(&e))?;
        }
        Ok(())
    }

    fn draw(&self, whole: &DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), String> {
        let err = |e: &dyn std::fmt::Display| e.to_string();
        whole.fill(&WHITE).map_err(|e| err(&e))?;
        // The legend's strip: wide enough for its longest name (about 8.5
        // pixels a character at 15 px), at most a third of the chart.
        let longest = self
            .legend_entries()
            .iter()
            .map(|e| e.0.chars().count())
            .max()
            .unwrap_or(0) as u32;
        let (w, _) = whole.dim_in_pixel();
        let strip = (40 + longest * 17 / 2).min(w / 3);
        let (plot, side) = whole.split_horizontally(w - strip);
        self.draw_legend(&side)?;
        let root = &plot;
        let ty = |v: f64| if self.y_log { v.max(1e-12).log10() } else { v };
        let tx = |v: f64| match self.x {
            XAxis::Log => v.max(1e-12).log10(),
            _ => v,
        };
        // Ranges over every point and limit.
        let ys: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| ty(p.1)))
            .chain(self.limits.iter().map(|l| ty(l.1)))
            .filter(|v| v.is_finite())
            .collect();
        let (mut y0, mut y1) = min_max(&ys).unwrap_or((0.0, 1.0));
        // A little headroom above the data (the legend has its own strip).
        // Log axes span whole decades so that their ticks fall on powers of
        // 10.
        if self.y_log {
            y0 = y0.floor();
            y1 = (y1 + 0.2).ceil().max(y0 + 1.0);
        } else {
            y0 = y0.min(0.0);
            y1 = if y1 > y0 { y1 * 1.1 } else { y0 + 1.0 };
        }
        let (x0, x1) = match &self.x {
            XAxis::Categories(c) => (-0.5, c.len().max(1) as f64 - 0.5),
            _ => {
                let xs: Vec<f64> = self
                    .series
                    .iter()
                    .flat_map(|s| s.points.iter().map(|p| tx(p.0)))
                    .filter(|v| v.is_finite())
                    .collect();
                let (a, b) = min_max(&xs).unwrap_or((0.0, 1.0));
                if matches!(self.x, XAxis::Log) {
                    (a.floor(), b.ceil().max(a.floor() + 1.0))
                } else {
                    let pad = if b > a { (b - a) * 0.04 } else { 0.5 };
                    (a - pad, b + pad)
                }
            }
        };
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(48)
            .y_label_area_size(78)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|e| err(&e))?;
        // A linear axis of whole numbers (thread counts) labels only whole
        // ticks.
        let whole_x = matches!(self.x, XAxis::Linear)
            && self
                .series
                .iter()
                .flat_map(|s| s.points.iter())
                .all(|p| p.0 == p.0.round());
        let x_fmt = |v: &f64| match &self.x {
            XAxis::Log => compact(10f64.powf(*v)),
            XAxis::Linear if whole_x && (v - v.round()).abs() > 1e-9 => String::new(),
            XAxis::Linear => compact(*v),
            XAxis::Categories(c) => {
                let i = v.round();
                if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < c.len() {
                    c[i as usize].clone()
                } else {
                    String::new()
                }
            }
        };
        let y_fmt = |v: &f64| {
            if self.y_log {
                compact(10f64.powf(*v))
            } else {
                compact(*v)
            }
        };
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(self.x_label.as_str())
            .y_desc(self.y_label.as_str())
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 16))
            .light_line_style(RGBColor(238, 238, 238));
        if let XAxis::Categories(c) = &self.x {
            mesh.x_labels(c.len().max(1)).disable_x_mesh();
        }
        if self.y_log {
            mesh.y_labels(((y1 - y0) as usize + 1).clamp(2, 12));
        }
        if matches!(self.x, XAxis::Log) {
            mesh.x_labels(((x1 - x0) as usize + 1).clamp(2, 12));
        }
        mesh.draw().map_err(|e| err(&e))?;

        let n = self.series.len().max(1) as f64;
        for (k, s) in self.series.iter().enumerate() {
            let color = palette(&s.name, k);
            let style = ShapeStyle {
                color: color.to_rgba(),
                filled: true,
                stroke_width: if s.name == "spacekit" { 3 } else { 2 },
            };
            match &self.x {
                XAxis::Categories(_) => {
                    let w = 0.8 / n;
                    let bars = s.points.iter().map(|&(x, y)| {
                        let left = x - 0.4 + w * k as f64;
                        Rectangle::new([(left, y0), (left + w * 0.92, ty(y))], style)
                    });
                    chart.draw_series(bars).map_err(|e| err(&e))?;
                }
                _ => {
                    let pts: Vec<(f64, f64)> = s
                        .points
                        .iter()
                        .map(|&(x, y)| (tx(x), ty(y)))
                        .filter(|p| p.0.is_finite() && p.1.is_finite())
                        .collect();
                    chart
                        .draw_series(LineSeries::new(pts.iter().copied(), style))
                        .map_err(|e| err(&e))?;
                    chart
                        .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                        .map_err(|e| err(&e))?;
                }
            }
        }
        for (k, (_, y)) in self.limits.iter().enumerate() {
            let y = ty(*y);
            // Distinct greys and dash lengths, so two limits tell apart.
            let grey = limit_grey(k);
            let dashes = dashed(x0, x1, y, [60, 24][k % 2]);
            chart
                .draw_series(
                    dashes
                        .into_iter()
                        .map(|seg| PathElement::new(seg, grey.stroke_width(2))),
                )
                .map_err(|e| err(&e))?;
        }
        Ok(())
    }
}

/// How a legend entry is drawn: a filled box (bars), a line, or dashes
/// (the `k`-th limit's).
#[derive(Clone, Copy, Debug)]
enum Swatch {
    Box,
    Line,
    Dashes(usize),
}

/// The grey of the `k`-th limit line.
fn limit_grey(k: usize) -> RGBColor {
    [RGBColor(90, 90, 90), RGBColor(20, 20, 20)][k % 2]
}

/// `n` dash segments along `y` from `x0` to `x1`.
fn dashed(x0: f64, x1: f64, y: f64, n: usize) -> Vec<Vec<(f64, f64)>> {
    let step = (x1 - x0) / n as f64;
    (0..n)
        .step_by(2)
        .map(|i| {
            let a = x0 + step * i as f64;
            vec![(a, y), (a + step, y)]
        })
        .collect()
}

fn min_max(v: &[f64]) -> Option<(f64, f64)> {
    let lo = v.iter().copied().reduce(f64::min)?;
    let hi = v.iter().copied().reduce(f64::max)?;
    Some((lo, hi))
}

/// A short label: `512`, `4k`, `1.5M`, `0.25`.
fn compact(v: f64) -> String {
    let a = v.abs();
    let (d, unit) = if a >= 1e12 {
        (1e12, "T")
    } else if a >= 1e9 {
        (1e9, "G")
    } else if a >= 1e6 {
        (1e6, "M")
    } else if a >= 1e4 {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    let x = v / d;
    let s = if x == x.round() || x.abs() >= 10.0 {
        format!("{x:.0}")
    } else if x.abs() >= 1.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    };
    format!("{s}{unit}")
}

/// A fixed colour per well-known variant, so a variant looks the same in
/// every chart; others take the palette in order.
fn palette(name: &str, k: usize) -> RGBColor {
    match name {
        "spacekit" => RGBColor(214, 39, 40),
        "spacekit-mt" => RGBColor(148, 20, 20),
        "spacekit-scalar" => RGBColor(255, 127, 80),
        "before" => RGBColor(31, 119, 180),
        "seed" => RGBColor(44, 160, 44),
        "limit" => RGBColor(90, 90, 90),
        _ => {
            const OTHERS: [RGBColor; 6] = [
                RGBColor(148, 103, 189),
                RGBColor(140, 86, 75),
                RGBColor(227, 119, 194),
                RGBColor(188, 189, 34),
                RGBColor(23, 190, 207),
                RGBColor(127, 127, 127),
            ];
            OTHERS[k % OTHERS.len()]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_bars_render_with_every_series() {
        let mut c = Chart::new("t", "x", "y", XAxis::Log, true);
        c.point("spacekit", 8.0, 10.0);
        c.point("spacekit", 4096.0, 100.0);
        c.point("seed", 8.0, 50.0);
        c.point("seed", 4096.0, 5000.0);
        c.limit("memcpy", 5.0);
        let svg = c.to_svg(600, 300).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..50]);
        for name in ["spacekit", "seed", "memcpy"] {
            assert!(svg.contains(&format!("\n{name}\n</text>")), "legend {name}");
        }
        let mut b = Chart::new(
            "b",
            "start",
            "ns",
            XAxis::Categories(vec!["aligned".into(), "section".into()]),
            false,
        );
        b.point("before", 0.0, 300.0);
        b.point("spacekit", 0.0, 7.0);
        b.point("spacekit", 1.0, 9.0);
        let svg = b.to_svg(600, 300).unwrap();
        assert!(svg.contains("\naligned\n</text>") && svg.contains("\nsection\n</text>"));
        assert!(svg.matches("<rect").count() >= 3);
    }

    #[test]
    fn compact_labels() {
        assert_eq!(compact(512.0), "512");
        assert_eq!(compact(16384.0), "16k");
        assert_eq!(compact(1_500_000.0), "1.5M");
        assert_eq!(compact(0.25), "0.25");
    }
}
