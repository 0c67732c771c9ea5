//! Target `proc_maps`: `/proc/PID/maps` parsing. Never a panic; a parse that
//! succeeds agrees with a line-by-line re-parse (every mapping in the tree,
//! in order, none overlapping, the `[stack]` start); an error is a typed
//! `MapsError` naming a line that exists.

use spacekit::rangetree::maps::{parse_line, MapsError, ProcMaps};
use spacekit::testing::Validate;

pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        // Also feed the lossy text: the parser takes &str.
        run_text(&String::from_utf8_lossy(data));
        return;
    };
    run_text(text);
}

fn run_text(text: &str) {
    let lines: Vec<&str> = text.lines().collect();
    match ProcMaps::parse(text) {
        Ok(maps) => {
            maps.tree.validate().expect("maps tree invariants");
            // Re-parse each non-blank line: the tree holds exactly them.
            let mut expect = Vec::new();
            let mut stack = None;
            for (i, raw) in lines.iter().enumerate() {
                let raw = raw.strip_suffix('\r').unwrap_or(raw);
                if raw.trim().is_empty() {
                    continue;
                }
                let (m, path) = parse_line(raw, i + 1).expect("a line parse() accepted");
                assert!(m.start < m.end, "line {}: empty range accepted", i + 1);
                if path == "[stack]" && stack.is_none() {
                    stack = Some(m.start);
                }
                expect.push((m.start, m.end, path.to_string(), i + 1));
            }
            expect.sort();
            let got: Vec<_> = maps
                .tree
                .iter()
                .map(|(f, l, m)| {
                    assert_eq!((f, l), (m.start, m.end - 1), "key of line {}", m.line);
                    (m.start, m.end, maps.path(m).to_string(), m.line)
                })
                .collect();
            assert_eq!(got, expect, "tree against the lines");
            for w in got.windows(2) {
                assert!(w[0].1 <= w[1].0, "overlapping mappings accepted: {w:?}");
            }
            assert_eq!(maps.stack, stack, "[stack]");
        }
        Err(e) => {
            let line = match &e {
                MapsError::Fields { line, .. }
                | MapsError::Field { line, .. }
                | MapsError::EmptyRange { line }
                | MapsError::Overlap { line, .. }
                | MapsError::TooManyPaths { line } => *line,
                _ => return,
            };
            assert!(
                line >= 1 && line <= lines.len(),
                "{e}: line {line} of {}",
                lines.len()
            );
            let _ = e.to_string();
        }
    }
}
