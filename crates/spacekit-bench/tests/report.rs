//! The `--report` page of a quick run of every benchmark: one section per
//! benchmark, each with its charts and each chart with its series, and
//! nothing loaded from outside the page.

use spacekit_bench::html::{render, Machine};
use spacekit_bench::{Ctx, Mode, BENCHES};

/// The series each benchmark's charts must show (every chart of the
/// benchmark together), by benchmark name.
const EXPECTED: &[(&str, &[&str])] = &[
    ("membw", &["limit"]),
    (
        "zero-area",
        &["before", "seed", "spacekit", "spacekit-scalar"],
    ),
    ("crc", &["before", "seed", "spacekit", "spacekit-scalar"]),
    (
        "dirty",
        &["before", "seed", "spacekit", "spacekit-mt", "membw"],
    ),
    (
        "fork",
        &["before", "btreemap", "rangemap", "spacekit", "limit"],
    ),
    ("rangetree", &["spacekit", "btreemap"]),
    ("cma", &["before", "spacekit", "buddy_system_allocator"]),
    ("buddy", &["spacekit", "buddy_system_allocator"]),
    ("alloc", &["spacekit", "vm-allocator"]),
    (
        "bitmaps",
        &[
            "bitmap-allocator",
            "spacekit",
            "spacekit-index",
            "fixedbitset",
        ],
    ),
    ("dirty-mark", &["spacekit", "vm-memory"]),
    ("ext4-fallocate", &["before", "flip", "splice", "spacekit"]),
    ("ext4-write", &["debugfs", "spacekit", "limit"]),
    (
        "ext4-populate",
        &["spacekit", "mke2fs-d", "genext2fs", "limit"],
    ),
    ("migrate", &["before", "seed", "spacekit"]),
];

#[test]
fn every_benchmark_has_its_charts_and_series_and_the_page_is_self_contained() {
    // Every registered benchmark is listed here, and nothing else.
    let mut names: Vec<&str> = BENCHES.iter().map(|b| b.name).collect();
    let mut listed: Vec<&str> = EXPECTED.iter().map(|e| e.0).collect();
    names.sort_unstable();
    listed.sort_unstable();
    assert_eq!(names, listed, "EXPECTED must list every benchmark");

    let ctx = Ctx {
        mode: Mode::Quick,
        seed: 0x5EED_0000,
    };
    let reports = spacekit_bench::run(&[], &ctx).expect("a quick run of every benchmark");
    assert_eq!(reports.len(), BENCHES.len());
    for (bench, report) in &reports {
        let want = EXPECTED.iter().find(|e| e.0 == bench.name).unwrap().1;
        // `migrate` needs /dev/kvm, `ext4-write` e2fsprogs and
        // `ext4-populate` e2fsprogs and genext2fs; without them, they say
        // so and draw nothing.
        if matches!(bench.name, "migrate" | "ext4-write" | "ext4-populate")
            && report.notes.iter().any(|n| n.starts_with("skipped:"))
        {
            println!("{}: {}", bench.name, report.notes[0]);
            continue;
        }
        assert!(!report.charts.is_empty(), "{}: no chart", bench.name);
        for chart in &report.charts {
            assert!(
                !chart.series.is_empty() && chart.series.iter().all(|s| !s.points.is_empty()),
                "{}: chart {:?} has an empty series",
                bench.name,
                chart.title
            );
            // Every series and limit line is named in the drawn legend.
            let svg = chart.to_svg(800, 400).unwrap();
            for name in chart
                .series
                .iter()
                .map(|s| s.name.as_str())
                .chain(chart.limits.iter().map(|l| l.0.as_str()))
            {
                assert!(
                    svg.contains(&format!("\n{name}\n</text>")),
                    "{}: {name} is not in the legend of {:?}",
                    bench.name,
                    chart.title
                );
            }
        }
        let drawn: Vec<&str> = report
            .charts
            .iter()
            .flat_map(|c| {
                c.series
                    .iter()
                    .map(|s| s.name.as_str())
                    .chain(c.limits.iter().map(|l| l.0.as_str()))
            })
            .collect();
        for w in want {
            assert!(
                drawn.contains(w),
                "{}: no series {w} in its charts (has {drawn:?})",
                bench.name
            );
        }
    }

    let machine = Machine::probe(&reports);
    let page = render(&ctx, &machine, &reports).unwrap();
    for (bench, report) in &reports {
        let at = page
            .find(&format!("<section id=\"{}\">", bench.name))
            .unwrap_or_else(|| panic!("no section for {}", bench.name));
        let end = page[at..].find("</section>").unwrap() + at;
        assert_eq!(
            page[at..end].matches("<svg").count(),
            report.charts.len(),
            "{}: every chart drawn in its section",
            bench.name
        );
    }
    // Self-contained: no scripts, stylesheets, images, fonts or frames from
    // anywhere (the SVG namespace URI is an identifier, not a load).
    let lower = page.to_ascii_lowercase();
    for bad in [
        "<script",
        "<link",
        "<img",
        "<iframe",
        "@import",
        "url(",
        "src=",
        "@font-face",
    ] {
        assert!(!lower.contains(bad), "the page holds {bad}");
    }
    let hrefs: Vec<&str> = lower
        .match_indices("href=")
        .map(|(i, _)| &lower[i..i + 8])
        .collect();
    assert!(
        hrefs.iter().all(|h| h.starts_with("href=\"#")),
        "only links inside the page: {hrefs:?}"
    );
    assert!(page.contains("read bandwidth") && !machine.membw.is_empty());
}
