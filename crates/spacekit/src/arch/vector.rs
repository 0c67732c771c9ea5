//! The one kernel model of the library's SIMD code: a small per-ISA
//! [`Vector`] trait, and [`run`](super::run), which runs a generic [`Job`] compiled for
//! a [`Level`](super::Level).
//!
//! Each word-parallel algorithm (the bitmap's word-skipping loops, the dirty
//! scanner's stage 1 and edge count) is written once, in its module's
//! `arch/generic.rs`, over `V: Vector`. The trait has three implementations,
//! and nothing else differs between the levels:
//!
//! * [`Word`](super::scalar::Word) — one `u64`, portable Rust;
//! * `Avx2` — a 256-bit vector of four words;
//! * `Avx512` — a 512-bit vector of eight words, mask registers for the
//!   compares, `vpopcntq`, masked tail loads and `vpcompressb`.
//!
//! Where an ISA needs a different instruction sequence rather than a
//! different width (the AVX-512 expand of an edge mask with `vpcompressb`,
//! the AVX2 prefetch of the zero-lane search), it is a method of the trait
//! with a portable default, not a copy of the algorithm.
//!
//! Dispatch is one `match` per [`run`](super::run) call, never per word: a module wraps
//! its work in a [`Job`] whose `run::<V>` is `#[inline(always)]`, and [`run`](super::run)
//! calls it from an entry point compiled with the level's target features,
//! so the whole generic algorithm is compiled for that ISA (memchr's
//! `arch/generic` plus per-ISA `Vector` model).

/// The operations the generic algorithms need from one instruction set: a
/// vector of `LANES` 64-bit words and what they do with it.
///
/// The vector types are private to their ISA files and only instantiated
/// (as the `V` of a [`Job`]) by [`run`](super::run)'s entry point for that ISA, which is
/// compiled with the ISA's target features and reached only with a
/// [`Level`](super::Level) proving the CPU has them; that is what makes the intrinsics in
/// the safe methods sound. The `unsafe` methods are the loads, whose bounds
/// the caller guarantees.
///
/// # Safety
/// An implementation must only be instantiated by its own `run` entry point
/// (as above), and its methods must do what their documentation says, in
/// particular read no memory beyond what the loads' contracts allow: the
/// generic algorithms rely on it for their own `unsafe` blocks.
pub(crate) unsafe trait Vector: Copy {
    /// 64-bit words per vector.
    const LANES: usize;
    /// Vectors folded into one test by a step of the zero-lane search
    /// (a power of two, at most 8).
    const FOLD: usize;
    /// [`Vector::expand`] is one compress instruction rather than a bit
    /// loop: the table builder then expands every word with it instead of
    /// its own unconditional writes (`dirty::arch::generic::emit_edges`).
    const COMPRESS: bool = false;
    /// [`Vector::stream_lines`] writes with non-temporal stores, past the
    /// cache (so a large output's lines are not first read from memory).
    const STREAMS: bool = false;

    /// Every lane `x`.
    fn splat(x: u64) -> Self;

    /// Words `i..i + LANES` of `words` (an unaligned load).
    ///
    /// # Safety
    /// `i + LANES <= words.len()`.
    unsafe fn load(words: &[u64], i: usize) -> Self;

    /// Words `i..i + k` in the low lanes, zeros above; no other word is
    /// read.
    ///
    /// # Safety
    /// `k <= LANES` and `i + k <= words.len()`.
    unsafe fn load_part(words: &[u64], i: usize, k: usize) -> Self;

    /// Stores the lanes to `words[i..i + LANES]` (an unaligned store).
    ///
    /// # Safety
    /// `i + LANES <= words.len()`.
    unsafe fn store(self, words: &mut [u64], i: usize);

    /// Lane-wise OR.
    fn or(self, b: Self) -> Self;

    /// Bit `k` set iff lane `k` of `self` differs from lane `k` of `pat`.
    fn ne_mask(self, pat: Self) -> u64;

    /// Bit `j` set when lane `j`'s top bit is set.
    fn top_mask(self) -> u64;

    /// Whether any lane of the four vectors differs from `pat`.
    fn any_ne4(v: [Self; 4], pat: Self) -> bool;

    /// [`Vector::ne_mask`] and [`Vector::top_mask`] of a whole batch of 64
    /// words joined into two 64-bit masks (bit `t` for word `t`), `f(j)`
    /// giving words `j..j + LANES`. An implementation calls `f` exactly
    /// once for each multiple `j` of `LANES` below 64, in increasing
    /// order, and with no other `j` (callers' `unsafe` loads rely on it).
    /// Default: each vector's masks shifted into place. AVX-512 joins its
    /// mask registers with `kunpck`: left to itself, the compiler
    /// assembled the eight 8-bit masks with a chain of byte inserts and a
    /// vector shift, which cost more than the compares.
    #[inline(always)]
    fn batch_masks(mut f: impl FnMut(usize) -> Self, pat: Self) -> (u64, u64) {
        let (mut ne, mut top, mut j) = (0, 0, 0);
        while j < 64 {
            let v = f(j);
            ne |= v.ne_mask(pat) << j;
            top |= v.top_mask() << j;
            j += Self::LANES;
        }
        (ne, top)
    }

    /// `acc` plus each lane's number of set bits, lane by lane.
    fn add_popcnt(acc: Self, v: Self) -> Self;

    /// Lane-wise wrapping sum.
    fn add(self, b: Self) -> Self;

    /// The sum of the lanes.
    fn sum(self) -> u64;

    /// A vector that is zero in a `C`-bit lane if `a` or `b` is (the
    /// lane-wise unsigned minimum). It may also be zero in other lanes (the
    /// AVX2 64-bit form is a 32-bit minimum): a prefilter whose hits the
    /// search checks with [`Vector::first_zero_lane`].
    fn min_lanes<const C: usize>(a: Self, b: Self) -> Self;

    /// Whether some `C`-bit lane of `self` is zero.
    fn has_zero_lane<const C: usize>(self) -> bool;

    /// Bit offset, inside the vector, of the first zero `C`-bit lane.
    fn first_zero_lane<const C: usize>(self) -> Option<usize>;

    /// The edge masks `w ^ (w << 1 | below >> 63)` of each lane `w`, where
    /// `below` is the word below the lane. `prev` is the carried state: set
    /// it to [`Vector::splat`] of the word below lane 0 before the first
    /// call; each call updates it for the next vector.
    fn edges(self, prev: &mut Self) -> Self;

    /// Hints that the line holding `p` will be read soon (never faults, so
    /// `p` may point past the data). Default: nothing.
    #[inline(always)]
    fn prefetch(p: *const u64) {
        let _ = p;
    }

    /// Converts each pair `(start, end)` of bit positions in `pairs` (even
    /// length) to a range in place: `(base + (start << shift), (end - start)
    /// << shift)`, wrapping. The dirty table builder's last step for a
    /// batch. Default: one pair at a time.
    #[inline(always)]
    fn pairs_to_ranges(pairs: &mut [u64], shift: u32, base: u64) {
        pairs_to_ranges_scalar(pairs, shift, base)
    }

    /// Copies `src` to `dst`, whole 64-byte lines (eight words) at a time:
    /// with non-temporal stores where [`Vector::STREAMS`] (the lines go to
    /// memory without being read into the cache first), else ordinary ones.
    /// Default: an ordinary copy.
    ///
    /// # Safety
    /// `src.len()` is a multiple of 8, `dst` is valid for writes of
    /// `src.len()` words and lies on a 64-byte boundary, and the two do
    /// not overlap. Before any other access to `dst` (this thread's too:
    /// the streamed stores are ordered apart from its others), the writer
    /// calls [`Vector::store_fence`].
    #[inline(always)]
    unsafe fn stream_lines(src: &[u64], dst: *mut u64) {
        // SAFETY: the caller's guarantee.
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
    }

    /// Orders the [`Vector::stream_lines`] stores before every later store
    /// (`sfence` where [`Vector::STREAMS`]). Default: nothing.
    #[inline(always)]
    fn store_fence() {}

    /// Writes the positions of `e`'s set bits, each plus `pos`, to `s` in
    /// ascending order; slots past the `e.count_ones()`-th (of the first
    /// 64) may receive garbage. `dense`: more edges per word are likely.
    /// Default: a bit loop with eight (`dense`) or four unconditional
    /// writes.
    ///
    /// # Panics
    /// If `s` holds fewer than 64 slots.
    #[inline(always)]
    fn expand(pos: u64, e: u64, s: &mut [u64], dense: bool) {
        if dense {
            expand_bits::<8>(pos, e, s)
        } else {
            expand_bits::<4>(pos, e, s)
        }
    }
}

/// [`Vector::pairs_to_ranges`]'s portable form.
#[inline(always)]
pub(crate) fn pairs_to_ranges_scalar(pairs: &mut [u64], shift: u32, base: u64) {
    for p in pairs.chunks_exact_mut(2) {
        let (s, e) = (p[0], p[1]);
        p[0] = base.wrapping_add(s.wrapping_shl(shift));
        p[1] = e.wrapping_sub(s).wrapping_shl(shift);
    }
}

/// [`Vector::expand`]'s portable form with `U` unconditional writes, so the
/// "more edges than that" branch stays rare. A mask with fewer edges writes
/// position `pos + 64`, garbage past the live count.
#[inline(always)]
fn expand_bits<const U: usize>(pos: u64, mut e: u64, s: &mut [u64]) {
    let n = e.count_ones() as usize;
    let s = &mut s[..64];
    for slot in &mut s[..U] {
        *slot = pos + u64::from(e.trailing_zeros());
        e &= e.wrapping_sub(1);
    }
    if n > U {
        let mut j = U;
        while e != 0 {
            s[j] = pos + u64::from(e.trailing_zeros());
            e &= e - 1;
            j += 1;
        }
    }
}

/// Hints that the line holding `p` will be read soon, at any level:
/// `prefetcht0` (SSE, in the x86_64 baseline) on x86_64, nothing elsewhere.
/// It never faults, so `p` may point past the data. For loops that want it
/// whatever the level (the dirty table builder); a level's own choice for
/// its streaming loops is [`Vector::prefetch`].
#[inline(always)]
pub(crate) fn prefetch(p: *const u64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of the x86_64 baseline; a prefetch never faults,
    // whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// A piece of work to run compiled for one level (see [`super::run`]).
pub(crate) trait Job {
    /// What the job returns.
    type Output;
    /// Runs the job with vector type `V`. Implementations are
    /// `#[inline(always)]`, so the whole job is compiled inside the level's
    /// entry point, with its target features.
    fn run<V: Vector>(self) -> Self::Output;
}
