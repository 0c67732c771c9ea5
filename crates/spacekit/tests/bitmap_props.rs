//! Property tests: every public bitmap operation against a naive `Vec<bool>`
//! model, at every SIMD level this machine has (`Level::available()`, the
//! portable scalar loops first), for owned bitmaps, borrowed views with
//! garbage past the length, and raw word slices.

use std::ops::{Bound, Range};

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestCaseResult;
use spacekit::arch::Level;
use spacekit::bitmap::{
    load_le_bytes, store_le_bytes, BitView, BitViewMut, Bitmap, BitmapError, Bits, BitsMut,
};
use spacekit::testing::AtLevel;

use spacekit_testkit::bits::*;

type Bounds = (Bound<usize>, Bound<usize>);

// ---------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------

/// Words holding `model`; bits past `model.len()` take the value `tail` (0 or
/// !0), and `extra` more words of `tail` follow.
fn words_with_tail(model: &[bool], tail: u64, extra: usize) -> Vec<u64> {
    let n = model.len().div_ceil(64) + extra;
    let mut words = vec![tail; n];
    for (wi, w) in words.iter_mut().enumerate().take(model.len().div_ceil(64)) {
        *w = tail;
        for b in 0..64 {
            let i = wi * 64 + b;
            if i < model.len() {
                if model[i] {
                    *w |= 1 << b;
                } else {
                    *w &= !(1 << b);
                }
            }
        }
    }
    words
}

/// The documented range rule: `[start, end)` with `start <= end <= len`.
fn m_range(r: Bounds, len: usize) -> Result<(usize, usize), BitmapError> {
    let s = match r.0 {
        Bound::Included(s) => Some(s),
        Bound::Excluded(s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let e = match r.1 {
        Bound::Included(e) => e.checked_add(1),
        Bound::Excluded(e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (s, e) {
        (Some(s), Some(e)) if s <= e && e <= len => Ok((s, e)),
        _ => Err(BitmapError::RangeOutOfBounds {
            start: s.unwrap_or(usize::MAX),
            end: e.unwrap_or(usize::MAX),
            len,
        }),
    }
}

// ---------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------

const BOUNDARY_LENS: &[usize] = &[
    0, 1, 2, 7, 8, 9, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257, 511, 512, 513, 959,
    960, 961, 999, 1000,
];

fn arb_len(max: usize) -> impl Strategy<Value = usize> {
    prop_oneof![
        3 => 0..=max,
        1 => prop::sample::select(BOUNDARY_LENS.iter().copied().filter(|&l| l <= max).collect::<Vec<_>>()),
    ]
}

fn arb_density() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.0), Just(1.0), Just(0.004), Just(0.996), 0.0..=1.0f64,]
}

/// Concatenated runs of equal bits, truncated to `max` bits.
fn arb_runs(max: usize, max_run: usize) -> impl Strategy<Value = Vec<bool>> {
    let run = prop_oneof![1..=8usize, 56..=72usize, 1..=max_run];
    vec((run, any::<bool>()), 0..40).prop_map(move |runs| {
        let mut v = Vec::new();
        for (n, b) in runs {
            v.extend(std::iter::repeat_n(b, n));
        }
        v.truncate(max);
        v
    })
}

/// A model of up to `max` bits: random bits at a random density, or runs.
fn arb_model(max: usize, max_run: usize) -> impl Strategy<Value = Vec<bool>> {
    prop_oneof![
        3 => (arb_len(max), arb_density())
            .prop_flat_map(|(len, d)| vec(prop::bool::weighted(d), len)),
        2 => arb_runs(max, max_run),
    ]
}

/// Start positions, including ones at and past the end.
fn arb_start(len: usize) -> impl Strategy<Value = usize> {
    prop_oneof![
        8 => 0..len + 130,
        1 => Just(len),
        1 => Just(usize::MAX),
    ]
}

fn arb_bound(len: usize) -> impl Strategy<Value = Bound<usize>> {
    let x = prop_oneof![
        10 => 0..=len,
        2 => len..len + 70,
        1 => Just(usize::MAX),
        1 => Just(usize::MAX - 1),
    ];
    prop_oneof![
        4 => x.clone().prop_map(Bound::Included),
        4 => x.prop_map(Bound::Excluded),
        1 => Just(Bound::Unbounded),
    ]
}

/// Mostly valid half-open ranges, plus arbitrary (often invalid) bounds.
fn arb_range(len: usize) -> impl Strategy<Value = Bounds> {
    prop_oneof![
        3 => (0..=len, 0..=len).prop_map(|(a, b)| (Bound::Included(a.min(b)), Bound::Excluded(a.max(b)))),
        3 => (arb_bound(len), arb_bound(len)),
    ]
}

#[derive(Clone, Debug)]
enum Op {
    Set(usize),
    Clear(usize),
    Flip(usize),
    SetRange(Bounds),
    ClearRange(Bounds),
    FlipRange(Bounds),
    Fill(bool),
}

fn arb_op(len: usize) -> impl Strategy<Value = Op> {
    let idx = prop_oneof![
        8 => 0..len.max(1),
        2 => len..len + 70,
        1 => Just(usize::MAX),
    ];
    prop_oneof![
        3 => idx.clone().prop_map(Op::Set),
        3 => idx.clone().prop_map(Op::Clear),
        3 => idx.prop_map(Op::Flip),
        3 => arb_range(len).prop_map(Op::SetRange),
        3 => arb_range(len).prop_map(Op::ClearRange),
        3 => arb_range(len).prop_map(Op::FlipRange),
        1 => any::<bool>().prop_map(Op::Fill),
    ]
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------

/// Every query of `b` against the model. `path` names the bitmap type and path
/// in failure messages.
fn check_queries<B: Bits + ?Sized>(
    b: &B,
    m: &[bool],
    starts: &[usize],
    ranges: &[Bounds],
    ns: &[usize],
    path: &str,
) -> TestCaseResult {
    let len = m.len();
    prop_assert_eq!(b.bit_len(), len, "{}: bit_len", path);

    // get: every index, a few past the end.
    for i in (0..len + 70).chain([usize::MAX]) {
        prop_assert_eq!(b.get(i), m.get(i).copied(), "{}: get({})", path, i);
    }

    // Whole-map queries.
    let count = m.iter().filter(|&&x| x).count();
    prop_assert_eq!(b.count_ones(), count, "{}: count_ones", path);
    prop_assert_eq!(b.first_set(), m_next(m, 0, true), "{}: first_set", path);
    prop_assert_eq!(
        b.first_clear(),
        m_next(m, 0, false),
        "{}: first_clear",
        path
    );
    let last = |v: bool| (0..len).rev().find(|&i| m[i] == v);
    prop_assert_eq!(b.last_set(), last(true), "{}: last_set", path);
    prop_assert_eq!(b.last_clear(), last(false), "{}: last_clear", path);

    // Searches and iterators from each start.
    let mut all_starts = vec![0, len.saturating_sub(1), len];
    all_starts.extend_from_slice(starts);
    for &s in &all_starts {
        prop_assert_eq!(
            b.find_next_set(s),
            m_next(m, s, true),
            "{}: find_next_set({})",
            path,
            s
        );
        prop_assert_eq!(
            b.find_next_clear(s),
            m_next(m, s, false),
            "{}: find_next_clear({})",
            path,
            s
        );
        prop_assert_eq!(
            b.find_prev_set(s),
            m_prev(m, s, true),
            "{}: find_prev_set({})",
            path,
            s
        );
        prop_assert_eq!(
            b.find_prev_clear(s),
            m_prev(m, s, false),
            "{}: find_prev_clear({})",
            path,
            s
        );

        let mut it = b.iter_ones(s);
        let got: Vec<usize> = it.by_ref().collect();
        prop_assert_eq!(got, m_positions(m, s, true), "{}: iter_ones({})", path, s);
        prop_assert_eq!(it.next(), None, "{}: iter_ones({}) not fused", path, s);

        let mut it = b.iter_zeros(s);
        let got: Vec<usize> = it.by_ref().collect();
        prop_assert_eq!(got, m_positions(m, s, false), "{}: iter_zeros({})", path, s);
        prop_assert_eq!(it.next(), None, "{}: iter_zeros({}) not fused", path, s);

        // `fold` (and what runs on it: for_each, sum, count) has its own
        // word-at-a-time loop; after a few `next` calls, too.
        let push = |mut v: Vec<usize>, i| {
            v.push(i);
            v
        };
        prop_assert_eq!(
            b.iter_ones(s).fold(Vec::new(), push),
            m_positions(m, s, true),
            "{}: iter_ones({}).fold",
            path,
            s
        );
        let mut it = b.iter_zeros(s);
        let head: Vec<usize> = it.by_ref().take(3).collect();
        prop_assert_eq!(
            it.fold(head, push),
            m_positions(m, s, false),
            "{}: iter_zeros({}) next then fold",
            path,
            s
        );

        let mut it = b.set_runs(s);
        let got: Vec<Range<usize>> = it.by_ref().collect();
        prop_assert_eq!(got, m_runs(m, s, true), "{}: set_runs({})", path, s);
        prop_assert_eq!(it.next(), None, "{}: set_runs({}) not fused", path, s);

        let mut it = b.clear_runs(s);
        let got: Vec<Range<usize>> = it.by_ref().collect();
        prop_assert_eq!(got, m_runs(m, s, false), "{}: clear_runs({})", path, s);
        prop_assert_eq!(it.next(), None, "{}: clear_runs({}) not fused", path, s);
    }

    // nth_set.
    let ones = m_positions(m, 0, true);
    let mut all_ns = vec![0, count.saturating_sub(1), count, count + 1, usize::MAX];
    all_ns.extend_from_slice(ns);
    for &n in &all_ns {
        prop_assert_eq!(
            b.nth_set(n),
            ones.get(n).copied(),
            "{}: nth_set({})",
            path,
            n
        );
    }

    // Range queries, valid or not.
    let mut all_ranges: Vec<Bounds> = vec![
        (Bound::Unbounded, Bound::Unbounded),
        (Bound::Included(0), Bound::Excluded(len)),
        (Bound::Included(0), Bound::Excluded(len + 1)),
        (Bound::Unbounded, Bound::Included(usize::MAX)),
    ];
    all_ranges.extend_from_slice(ranges);
    for &r in &all_ranges {
        let want = m_range(r, len);
        let sub = |v: bool, rev: bool| {
            want.clone().map(|(s, e)| {
                if rev {
                    (s..e).rev().find(|&i| m[i] == v)
                } else {
                    (s..e).find(|&i| m[i] == v)
                }
            })
        };
        prop_assert_eq!(
            b.find_first_set_in(r),
            sub(true, false),
            "{}: find_first_set_in({:?})",
            path,
            r
        );
        prop_assert_eq!(
            b.find_first_clear_in(r),
            sub(false, false),
            "{}: find_first_clear_in({:?})",
            path,
            r
        );
        prop_assert_eq!(
            b.find_last_set_in(r),
            sub(true, true),
            "{}: find_last_set_in({:?})",
            path,
            r
        );
        prop_assert_eq!(
            b.find_last_clear_in(r),
            sub(false, true),
            "{}: find_last_clear_in({:?})",
            path,
            r
        );
        let cnt = want
            .clone()
            .map(|(s, e)| m[s..e].iter().filter(|&&x| x).count());
        prop_assert_eq!(b.count_ones_in(r), cnt, "{}: count_ones_in({:?})", path, r);
        let all_set = want.clone().map(|(s, e)| m[s..e].iter().all(|&x| x));
        prop_assert_eq!(b.all_set_in(r), all_set, "{}: all_set_in({:?})", path, r);
        let all_clear = want.clone().map(|(s, e)| m[s..e].iter().all(|&x| !x));
        prop_assert_eq!(
            b.all_clear_in(r),
            all_clear,
            "{}: all_clear_in({:?})",
            path,
            r
        );
    }
    Ok(())
}

/// Runs `check_queries` on `b` at every level this machine has.
fn check_all_levels<B: Bits + ?Sized>(
    b: &B,
    m: &[bool],
    starts: &[usize],
    ranges: &[Bounds],
    ns: &[usize],
    what: &str,
) -> TestCaseResult {
    for level in Level::available() {
        check_queries(
            &AtLevel(b, level),
            m,
            starts,
            ranges,
            ns,
            &format!("{what} {level}"),
        )?;
    }
    Ok(())
}

/// Applies `op` to `b` and to the model; checks the returned value.
fn apply_op<B: BitsMut + ?Sized>(b: &mut B, m: &mut [bool], op: &Op) -> TestCaseResult {
    let len = m.len();
    let bad_index = |index: usize| BitmapError::IndexOutOfBounds { index, len };
    match *op {
        Op::Set(i) | Op::Clear(i) | Op::Flip(i) => {
            let got = match op {
                Op::Set(_) => b.set(i),
                Op::Clear(_) => b.clear(i),
                _ => b.flip(i),
            };
            if i < len {
                let old = m[i];
                m[i] = match op {
                    Op::Set(_) => true,
                    Op::Clear(_) => false,
                    _ => !old,
                };
                prop_assert_eq!(got, Ok(old), "{:?}", op);
            } else {
                prop_assert_eq!(got, Err(bad_index(i)), "{:?}", op);
            }
        }
        Op::SetRange(r) | Op::ClearRange(r) | Op::FlipRange(r) => {
            let got = match op {
                Op::SetRange(_) => b.set_range(r),
                Op::ClearRange(_) => b.clear_range(r),
                _ => b.flip_range(r),
            };
            let want = m_range(r, len);
            if let Ok((s, e)) = want {
                for x in &mut m[s..e] {
                    *x = match op {
                        Op::SetRange(_) => true,
                        Op::ClearRange(_) => false,
                        _ => !*x,
                    };
                }
            }
            prop_assert_eq!(got, want.map(|_| ()), "{:?}", op);
        }
        Op::Fill(v) => {
            b.fill(v);
            m.fill(v);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

fn arb_query_case(
    max: usize,
    max_run: usize,
) -> impl Strategy<Value = (Vec<bool>, Vec<usize>, Vec<Bounds>, Vec<usize>)> {
    arb_model(max, max_run).prop_flat_map(|m| {
        let len = m.len();
        (
            Just(m),
            vec(arb_start(len), 1..6),
            vec(arb_range(len), 1..10),
            vec(0..len + 3, 1..4),
        )
    })
}

fn arb_mutation_case(max: usize) -> impl Strategy<Value = (Vec<bool>, Vec<Op>)> {
    arb_model(max, 300).prop_flat_map(|m| {
        let len = m.len();
        (Just(m), vec(arb_op(len), 1..40))
    })
}

proptest! {
    #![proptest_config(config(256))]

    /// Every query on an owned bitmap, both paths.
    #[test]
    fn bitmap_queries_match_model((m, starts, ranges, ns) in arb_query_case(1000, 300)) {
        let map = bitmap_of(&m);
        prop_assert_eq!(map.len(), m.len());
        prop_assert_eq!(map.is_empty(), m.is_empty());
        check_all_levels(&map, &m, &starts, &ranges, &ns, "Bitmap")?;
        check_all_levels(&map.view(), &m, &starts, &ranges, &ns, "Bitmap::view")?;
    }

    /// A view over words whose bits past `len` (and a whole extra word) are all
    /// ones answers exactly like the model.
    #[test]
    fn view_ignores_garbage_past_len((m, starts, ranges, ns) in arb_query_case(1000, 300)) {
        let words = words_with_tail(&m, !0, 1);
        let view = BitView::new(&words, m.len()).unwrap();
        check_all_levels(&view, &m, &starts, &ranges, &ns, "BitView(garbage)")?;
        // Exactly sized storage, too.
        let exact = &words[..m.len().div_ceil(64)];
        let view = BitView::new(exact, m.len()).unwrap();
        check_all_levels(&view, &m, &starts, &ranges, &ns, "BitView(exact garbage)")?;
    }

    /// `[u64]` is a bitmap of 64 * len bits.
    #[test]
    fn word_slice_queries_match_model(
        words in vec(prop_oneof![Just(0u64), Just(!0u64), any::<u64>(), (0..64u32).prop_map(|b| 1u64 << b)], 0..17),
        starts in vec(0..1200usize, 1..6),
        ranges in vec((0..1100usize, 0..1100usize).prop_map(|(a, b)| (Bound::Included(a), Bound::Excluded(b))), 1..10),
        ns in vec(0..1100usize, 1..4),
    ) {
        let m: Vec<bool> = (0..words.len() * 64).map(|i| words[i / 64] >> (i % 64) & 1 == 1).collect();
        check_all_levels(&words[..], &m, &starts, &ranges, &ns, "[u64]")?;
    }

    /// Large maps (beyond 16-word SIMD blocks), with long runs so the vector
    /// skip loops engage.
    #[test]
    fn long_bitmap_queries_match_model((m, starts, ranges, ns) in arb_query_case(5000, 2500)) {
        let map = bitmap_of(&m);
        check_all_levels(&map, &m, &starts, &ranges, &ns, "Bitmap(long)")?;
        let words = words_with_tail(&m, !0, 1);
        let view = BitView::new(&words, m.len()).unwrap();
        check_all_levels(&view, &m, &starts, &ranges, &ns, "BitView(long garbage)")?;
    }

    /// Random mutation sequences on an owned bitmap: return values, state after
    /// each step (words equal the model's, so the tail stays clear), and a full
    /// query check on the final state.
    #[test]
    fn bitmap_mutations_match_model((mut m, ops) in arb_mutation_case(1000)) {
        let mut map = bitmap_of(&m);
        let len = m.len();
        for (step, op) in ops.iter().enumerate() {
            apply_op(&mut map, &mut m, op)?;
            prop_assert_eq!(map.as_words(), &to_words(&m)[..], "step {}: {:?}", step, op);
            if len % 64 != 0 {
                let tail = map.as_words().last().unwrap() & !(!0u64 >> (64 - len % 64));
                prop_assert_eq!(tail, 0, "step {}: tail bits set after {:?}", step, op);
            }
            prop_assert_eq!(map.count_ones(), m.iter().filter(|&&x| x).count());
            for level in Level::available() {
                prop_assert_eq!(AtLevel(&map, level).last_set(), (0..len).rev().find(|&i| m[i]));
            }
        }
        prop_assert_eq!(&map, &bitmap_of(&m));
        check_all_levels(&map, &m, &[0, len / 2], &[], &[], "Bitmap(mutated)")?;
    }

    /// The same sequences through a `BitViewMut` at each level over words
    /// with all-ones garbage past `len`: the garbage is never touched.
    #[test]
    fn view_mut_never_touches_bits_past_len((m0, ops) in arb_mutation_case(1000)) {
        let len = m0.len();
        for level in Level::available() {
            let mut m = m0.clone();
            let mut words = words_with_tail(&m, !0, 1);
            {
                let mut view = AtLevel(BitViewMut::new(&mut words, len).unwrap(), level);
                for (step, op) in ops.iter().enumerate() {
                    apply_op(&mut view, &mut m, op)?;
                    prop_assert_eq!(view.words(), &words_with_tail(&m, !0, 1)[..], "{} step {}: {:?}", level, step, op);
                }
                let what = format!("BitViewMut(mutated) {level}");
                check_queries(&view, &m, &[0, len / 2], &[], &[], &what)?;
            }
            prop_assert_eq!(words, words_with_tail(&m, !0, 1));
        }
    }

    /// Mutations on a bare `[u64]` (64 * len bits).
    #[test]
    fn word_slice_mutations_match_model(
        (mut m, ops) in (0..12usize)
            .prop_flat_map(|n| vec(any::<bool>(), n * 64))
            .prop_flat_map(|m| { let len = m.len(); (Just(m), vec(arb_op(len), 1..40)) })
    ) {
        let mut words = to_words(&m);
        for (step, op) in ops.iter().enumerate() {
            apply_op(&mut words[..], &mut m, op)?;
            prop_assert_eq!(&words, &to_words(&m), "step {}: {:?}", step, op);
        }
    }

    /// Little-endian bytes: from_le_bytes / load_le_bytes / to_le_bytes /
    /// store_le_bytes (which keeps the pad bits `out` had).
    #[test]
    fn le_bytes_round_trip(
        (len, bytes, out) in arb_len(1000).prop_flat_map(|len| {
            let n = len.div_ceil(8);
            (Just(len), vec(any::<u8>(), n), vec(any::<u8>(), n))
        })
    ) {
        let m: Vec<bool> = (0..len).map(|i| bytes[i / 8] >> (i % 8) & 1 == 1).collect();
        let pad = if len % 8 == 0 { 0u8 } else { !0u8 << (len % 8) };
        let with_pad = |src: &[u8], old_last: u8| {
            let mut v = src.to_vec();
            if let Some(l) = v.last_mut() {
                *l = (*l & !pad) | (old_last & pad);
            }
            v
        };

        let map = Bitmap::from_le_bytes(&bytes, len).unwrap();
        prop_assert_eq!(map.as_words(), &to_words(&m)[..]);
        prop_assert_eq!(map.len(), len);

        // to_le_bytes: pad bits zero.
        prop_assert_eq!(map.to_le_bytes(), with_pad(&bytes, 0));

        // store_le_bytes keeps out's pad bits.
        let mut o = out.clone();
        map.store_le_bytes(&mut o).unwrap();
        prop_assert_eq!(&o, &with_pad(&bytes, out.last().copied().unwrap_or(0)));

        // load_le_bytes on an existing map replaces everything.
        let mut other = Bitmap::new_set(len);
        other.load_le_bytes(&bytes).unwrap();
        prop_assert_eq!(&other, &map);

        // Free functions over garbage words: the garbage never reaches `out`,
        // and load clears the tail of the last word.
        let garbage = words_with_tail(&m, !0, 1);
        let mut o = out.clone();
        store_le_bytes(&garbage, len, &mut o).unwrap();
        prop_assert_eq!(&o, &with_pad(&bytes, out.last().copied().unwrap_or(0)));
        let mut w = words_with_tail(&vec![true; len], !0, 0);
        load_le_bytes(&bytes, len, &mut w).unwrap();
        prop_assert_eq!(&w, &to_words(&m));

        // Wrong sizes: LengthMismatch in bytes, nothing changes.
        let n = bytes.len();
        let mut bigger = bytes.clone();
        bigger.push(0xA5);
        let err = BitmapError::LengthMismatch { expected: n, found: n + 1 };
        prop_assert_eq!(Bitmap::from_le_bytes(&bigger, len), Err(err.clone()));
        let mut other = map.clone();
        other.flip_range(..).unwrap();
        let before = other.clone();
        prop_assert_eq!(other.load_le_bytes(&bigger), Err(err.clone()));
        prop_assert_eq!(&other, &before);
        let mut o = bigger.clone();
        prop_assert_eq!(map.store_le_bytes(&mut o), Err(err));
        prop_assert_eq!(&o, &bigger);
        if n > 0 {
            let err = BitmapError::LengthMismatch { expected: n, found: n - 1 };
            prop_assert_eq!(Bitmap::from_le_bytes(&bytes[..n - 1], len), Err(err.clone()));
            prop_assert_eq!(other.load_le_bytes(&bytes[..n - 1]), Err(err.clone()));
            prop_assert_eq!(&other, &before);
            let mut o = out[..n - 1].to_vec();
            prop_assert_eq!(map.store_le_bytes(&mut o), Err(err));
            prop_assert_eq!(&o[..], &out[..n - 1]);
        }
    }
}
