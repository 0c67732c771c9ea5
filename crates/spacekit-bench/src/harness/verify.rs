//! Correctness before timing: every variant's answer must equal the first.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::context::BenchError;

/// Set by `--inject-mismatch`: the next verification reports a disagreement
/// (to test that a disagreement exits non-zero and writes no JSON).
static INJECT_MISMATCH: AtomicBool = AtomicBool::new(false);

/// Makes the next [`verify`] (or [`verify_lists`]) fail.
pub fn inject_mismatch(on: bool) {
    INJECT_MISMATCH.store(on, Ordering::Relaxed);
}

/// Longest `Debug` text of an answer quoted in an error.
const QUOTE: usize = 300;

fn quote<T: fmt::Debug>(v: &T) -> String {
    let s = format!("{v:?}");
    if s.len() <= QUOTE {
        return s;
    }
    let mut end = QUOTE;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// Fails the benchmark unless every `(variant, answer)` equals the first.
pub fn verify<T: PartialEq + fmt::Debug>(
    what: &str,
    answers: &[(&str, T)],
) -> Result<(), BenchError> {
    if INJECT_MISMATCH.swap(false, Ordering::Relaxed) {
        return Err(BenchError(format!(
            "variants disagree on {what} (injected by --inject-mismatch)"
        )));
    }
    if let Some((first_name, first)) = answers.first() {
        for (name, a) in &answers[1..] {
            if a != first {
                return Err(BenchError(format!(
                    "variants disagree on {what}: {first_name} gives {}, {name} gives {}",
                    quote(first),
                    quote(a)
                )));
            }
        }
    }
    Ok(())
}

/// Where `b` first differs from `a`, if it does.
fn first_difference<T: PartialEq + fmt::Debug>(a: &[T], b: &[T]) -> Option<String> {
    if let Some(i) = a.iter().zip(b).position(|(x, y)| x != y) {
        return Some(format!("at entry {i}: {:?} instead of {:?}", b[i], a[i]));
    }
    (a.len() != b.len()).then(|| format!("{} entries instead of {}", b.len(), a.len()))
}

/// [`verify`] for long lists: names the first differing entry instead of
/// printing whole lists.
pub fn verify_lists<T: PartialEq + fmt::Debug>(
    what: &str,
    answers: &[(&str, Vec<T>)],
) -> Result<(), BenchError> {
    if let Some((first_name, first)) = answers.first() {
        for (name, a) in &answers[1..] {
            if let Some(d) = first_difference(first, a) {
                return Err(BenchError(format!(
                    "variants disagree on {what}: {name} differs from {first_name} {d}"
                )));
            }
        }
    }
    // The lists are equal; this keeps --inject-mismatch working.
    let lens: Vec<(&str, usize)> = answers.iter().map(|(n, a)| (*n, a.len())).collect();
    verify(what, &lens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_reports_the_disagreeing_variant() {
        assert!(verify("x", &[("a", 1), ("b", 1), ("c", 1)]).is_ok());
        let e = verify("x", &[("a", 1), ("b", 1), ("c", 2)]).unwrap_err();
        assert!(e.0.contains("c gives 2"), "{e}");
    }

    #[test]
    fn verify_lists_names_the_first_difference() {
        assert!(verify_lists("l", &[("a", vec![1, 2]), ("b", vec![1, 2])]).is_ok());
        let e = verify_lists("l", &[("a", vec![1, 2, 3]), ("b", vec![1, 5, 3])]).unwrap_err();
        assert!(
            e.0.contains("b differs from a at entry 1: 5 instead of 2"),
            "{e}"
        );
        let e = verify_lists("l", &[("a", vec![1, 2]), ("b", vec![1])]).unwrap_err();
        assert!(e.0.contains("1 entries instead of 2"), "{e}");
    }

    #[test]
    fn long_answers_are_cut_in_messages() {
        let e = verify("v", &[("a", vec![0u8; 1000]), ("b", vec![1u8; 1000])]).unwrap_err();
        assert!(e.0.len() < 2 * QUOTE + 100, "{}", e.0.len());
    }
}
