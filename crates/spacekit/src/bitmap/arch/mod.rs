//! Word-skipping primitives, chosen once at runtime.
//!
//! Long scans in the bitmap engine spend their time skipping words that cannot
//! hold an answer: all-zero words when looking for a set bit, all-one words when
//! looking for a clear bit, and words without a zero byte/half/quarter when
//! looking for a long clear run. Those loops live here, in two
//! instantiations:
//!
//! * [`scalar`] — portable Rust, one word (or a haszero bit trick) at a time;
//! * `x86_64::avx2` — four 256-bit loads per step (128 bytes).
//!
//! [`Backend::detect`] picks the best one once (the answer is cached in an
//! atomic) and every search carries the chosen [`Backend`] by value, so tests can
//! force the scalar path with [`Backend::scalar`] and run both through the same
//! assertions.

pub(crate) mod scalar;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

/// Which implementation of the word-skipping loops a search uses.
///
/// A `Backend` can only be obtained from [`Backend::detect`] (the best path this
/// CPU supports) or [`Backend::scalar`] (the portable fallback), so holding one
/// proves the instructions it uses are available.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backend(Kind);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Scalar,
    // Never built in a no_std build for a target without AVX2.
    #[cfg(target_arch = "x86_64")]
    #[cfg_attr(
        not(any(
            feature = "std",
            all(target_feature = "avx2", target_feature = "popcnt")
        )),
        allow(dead_code)
    )]
    Avx2,
}

/// Lane width, in bits, of the zero-chunk filter used by the clear-area search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Chunk {
    B8 = 8,
    B16 = 16,
    B32 = 32,
    B64 = 64,
}

#[cfg(all(feature = "std", target_arch = "x86_64"))]
static DETECTED: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(0);

impl Backend {
    /// The fastest implementation this CPU supports, detected on first use and
    /// cached. Without the `std` feature, detection is compile-time
    /// (`target_feature = "avx2"`).
    #[inline]
    pub fn detect() -> Backend {
        #[cfg(all(feature = "std", target_arch = "x86_64"))]
        {
            use core::sync::atomic::Ordering;
            // Relaxed is enough: the value is a pure function of the CPU, so
            // racing initialisations all store the same thing.
            match DETECTED.load(Ordering::Relaxed) {
                2 => Backend(Kind::Avx2),
                1 => Backend(Kind::Scalar),
                _ => detect_slow(),
            }
        }
        #[cfg(all(
            not(feature = "std"),
            target_arch = "x86_64",
            target_feature = "avx2",
            target_feature = "popcnt"
        ))]
        {
            Backend(Kind::Avx2)
        }
        #[cfg(not(any(
            all(feature = "std", target_arch = "x86_64"),
            all(
                not(feature = "std"),
                target_arch = "x86_64",
                target_feature = "avx2",
                target_feature = "popcnt"
            )
        )))]
        {
            Backend(Kind::Scalar)
        }
    }

    /// The portable fallback. Always available; used by tests to exercise the
    /// same code paths a CPU without AVX2 takes.
    #[inline]
    pub const fn scalar() -> Backend {
        Backend(Kind::Scalar)
    }

    /// Whether this is the AVX2 backend (which also proves POPCNT).
    #[inline]
    pub(crate) fn is_avx2(self) -> bool {
        match self.0 {
            Kind::Scalar => false,
            #[cfg(target_arch = "x86_64")]
            Kind::Avx2 => true,
        }
    }

    /// A short name for reports: `"avx2"` or `"scalar"`.
    pub fn name(self) -> &'static str {
        match self.0 {
            Kind::Scalar => "scalar",
            #[cfg(target_arch = "x86_64")]
            Kind::Avx2 => "avx2",
        }
    }

    /// Index of the first word at or after `from` that differs from `pat`
    /// (`pat` = 0: first non-zero word; `pat` = !0: first word with a clear bit).
    // Out of line on purpose: callers look a few words ahead inline first, so
    // only long skips get here, and keeping both loops out of the callers
    // keeps the hot searches small enough to inline.
    #[inline(never)]
    pub(crate) fn first_diff(self, words: &[u64], from: usize, pat: u64) -> Option<usize> {
        match self.0 {
            Kind::Scalar => scalar::first_diff(words, from, pat),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a `Kind::Avx2` backend is only built by `detect` after the
            // CPU (or the compile-time target) reported AVX2.
            Kind::Avx2 => unsafe { x86_64::avx2::first_diff(words, from, pat) },
        }
    }

    /// Index of the last word strictly before `end` that differs from `pat`.
    // Out of line on purpose: callers look a few words ahead inline first, so
    // only long skips get here, and keeping both loops out of the callers
    // keeps the hot searches small enough to inline.
    #[inline(never)]
    pub(crate) fn last_diff(self, words: &[u64], end: usize, pat: u64) -> Option<usize> {
        match self.0 {
            Kind::Scalar => scalar::last_diff(words, end, pat),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as in `first_diff`, the variant proves AVX2 is present.
            Kind::Avx2 => unsafe { x86_64::avx2::last_diff(words, end, pat) },
        }
    }

    /// Bit position of the first all-zero, `chunk`-aligned lane of `chunk` bits in
    /// `words[from..]`.
    // Out of line on purpose: callers look a few words ahead inline first, so
    // only long skips get here, and keeping both loops out of the callers
    // keeps the hot searches small enough to inline.
    #[inline(never)]
    pub(crate) fn first_zero_chunk(
        self,
        words: &[u64],
        from: usize,
        chunk: Chunk,
    ) -> Option<usize> {
        match self.0 {
            Kind::Scalar => scalar::first_zero_chunk(words, from, chunk),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as in `first_diff`, the variant proves AVX2 is present.
            Kind::Avx2 => unsafe { x86_64::avx2::first_zero_chunk(words, from, chunk) },
        }
    }
}

/// First call: asks the CPU, caches the answer.
#[cfg(all(feature = "std", target_arch = "x86_64"))]
#[cold]
#[inline(never)]
fn detect_slow() -> Backend {
    let avx2 = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("popcnt");
    DETECTED.store(
        if avx2 { 2 } else { 1 },
        core::sync::atomic::Ordering::Relaxed,
    );
    if avx2 {
        Backend(Kind::Avx2)
    } else {
        Backend(Kind::Scalar)
    }
}

impl Backend {
    /// Number of set bits in `words`.
    #[inline(never)]
    pub(crate) fn count_ones(self, words: &[u64]) -> usize {
        match self.0 {
            Kind::Scalar => scalar::count_ones(words),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Kind::Avx2` is only built after AVX2 and POPCNT were
            // detected.
            Kind::Avx2 => unsafe { x86_64::avx2::count_ones(words) },
        }
    }

    /// The word holding the `n`-th set bit and its rank there, or
    /// `Err(n - total)`.
    #[inline(never)]
    pub(crate) fn nth_word(self, words: &[u64], n: usize) -> Result<(usize, u32), usize> {
        match self.0 {
            Kind::Scalar => scalar::nth_word(words, n),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as in `count_ones`.
            Kind::Avx2 => unsafe { x86_64::avx2::nth_word(words, n) },
        }
    }
}

impl Default for Backend {
    fn default() -> Self {
        Backend::detect()
    }
}
