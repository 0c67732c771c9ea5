//! CPU dispatch for the whole library: which instructions this machine has,
//! detected once and cached, and a token naming the level code may run at.
//!
//! Every module with SIMD code (`bitmap`, `crc32c`, `dirty`) keeps its loops
//! in its own `arch/` folder — a portable `scalar` path plus one file per
//! instruction set — and picks one by matching a [`Level`]'s
//! [`kind`](Level::kind). This module is the only place that asks the CPU:
//! with the `std` feature it runs `is_x86_feature_detected!` once, on first
//! use, and caches the answer in an atomic (later calls cost one relaxed load);
//! without `std` the answer is the compile-time target features
//! (`-C target-feature`, `-C target-cpu`).
//!
//! A [`Level`] can only be obtained from [`Level::detect`] (the best level the
//! library implements on this CPU), [`Level::scalar`] (the portable fallback,
//! always available) or [`Level::available`] (every level this machine can run,
//! scalar first), so holding one proves the instructions it names exist. Tests
//! run the same assertions on each level of [`Level::available`]; benchmarks
//! time the fallback with [`Level::scalar`].
//!
//! ```
//! use spacekit::arch::{Level, LevelKind};
//!
//! let best = Level::detect();
//! assert!(Level::available().any(|l| l == best));
//! assert_eq!(Level::available().next(), Some(Level::scalar()));
//! if best.kind() >= LevelKind::Avx2 {
//!     assert!(best.has_avx2() && best.has_popcnt() && best.has_bmi1());
//! }
//! for (feature, present) in spacekit::arch::cpu_features() {
//!     println!("{feature}: {present}");
//! }
//! ```

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod scalar;
mod vector;
#[cfg(target_arch = "x86_64")]
mod x86_64;

pub(crate) use vector::{prefetch, Job, Vector};

/// Runs `job` compiled for `level`: one match per call, none per word.
#[inline(always)]
pub(crate) fn run<J: Job>(level: Level, job: J) -> J::Output {
    match level.isa() {
        Isa::Scalar => job.run::<scalar::Word>(),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` comes from a `Level` of kind `Avx2` or above,
        // which `crate::arch` only builds once the CPU reported AVX2, POPCNT
        // and BMI1.
        Isa::Avx2 => unsafe { avx2::run(job) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512` comes from a `Level` of kind `Avx512`, which
        // proves AVX-512 F, BW, VL, VPOPCNTDQ and VBMI2 besides everything
        // the AVX2 level has.
        Isa::Avx512 => unsafe { avx512::run(job) },
    }
}

use core::fmt;

/// The SIMD level a piece of code runs at, ordered from the portable fallback
/// up (`Scalar < Avx2 < Avx512`).
///
/// New levels may be added (hence `#[non_exhaustive]`); inside the library
/// every dispatch names each level explicitly, so a new one cannot fall back
/// silently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum LevelKind {
    /// Portable Rust only (the `x86_64` baseline, SSE2, where the compiler
    /// uses it on its own).
    Scalar,
    /// AVX2 with POPCNT and BMI1 (every AVX2 loop in the library may use all
    /// three): Intel Haswell, AMD Zen and later.
    Avx2,
    /// Everything of [`LevelKind::Avx2`] plus AVX-512 F, BW, VL, VPOPCNTDQ
    /// and VBMI2: Intel Ice Lake, Sapphire Rapids and later, AMD Zen 4 and
    /// later. The loops at this level use 512-bit loads, mask registers,
    /// `vpopcntq` and `vpcompressb`. Skylake-SP and Cascade Lake (AVX-512 F,
    /// BW and VL without VPOPCNTDQ/VBMI2) run the AVX2 level.
    Avx512,
}

impl LevelKind {
    /// A short name for reports: `"scalar"`, `"avx2"` or `"avx512"`.
    pub const fn name(self) -> &'static str {
        match self {
            LevelKind::Scalar => "scalar",
            LevelKind::Avx2 => "avx2",
            LevelKind::Avx512 => "avx512",
        }
    }

    /// The features a CPU must have to run this level.
    const fn required(self) -> Caps {
        match self {
            LevelKind::Scalar => Caps(0),
            LevelKind::Avx2 => Caps(Caps::AVX2.0 | Caps::POPCNT.0 | Caps::BMI1.0),
            LevelKind::Avx512 => Caps(
                LevelKind::Avx2.required().0
                    | Caps::AVX512F.0
                    | Caps::AVX512BW.0
                    | Caps::AVX512VL.0
                    | Caps::AVX512VPOPCNTDQ.0
                    | Caps::AVX512VBMI2.0,
            ),
        }
    }

    /// The features code at this level may use, when the CPU has them: the
    /// scalar level the non-vector extras (POPCNT, BMI, PCLMULQDQ, SSE4.2), AVX2
    /// everything but AVX-512, AVX-512 everything.
    const fn allowed(self) -> Caps {
        match self {
            LevelKind::Scalar => Caps(
                Caps::POPCNT.0 | Caps::BMI1.0 | Caps::BMI2.0 | Caps::PCLMULQDQ.0 | Caps::SSE42.0,
            ),
            LevelKind::Avx2 => Caps(Caps::ALL.0 & !Caps::AVX512_FAMILY.0),
            LevelKind::Avx512 => Caps::ALL,
        }
    }

    /// The highest level a CPU with features `caps` runs.
    const fn of(caps: Caps) -> LevelKind {
        if caps.contains(LevelKind::Avx512.required()) {
            LevelKind::Avx512
        } else if caps.contains(LevelKind::Avx2.required()) {
            LevelKind::Avx2
        } else {
            LevelKind::Scalar
        }
    }
}

impl fmt::Display for LevelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The highest level the library has code for. [`Level::detect`] and
/// [`Level::available`] never go above it.
const IMPLEMENTED: LevelKind = LevelKind::Avx512;

/// The instruction set a dispatch runs: what the library's own `match`es
/// look at. Only the sets compiled for this target exist, so a dispatch
/// names each one and cannot fall back silently; holding one proves the CPU
/// runs it (it comes from a [`Level`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    /// Portable code.
    Scalar,
    /// AVX2, POPCNT and BMI1 are present.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// Everything of `Avx2` plus AVX-512 F, BW, VL, VPOPCNTDQ and VBMI2.
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

/// A set of CPU features, one bit each (private: only this module builds
/// them, from what the CPU reported).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Caps(u16);

impl fmt::Debug for Caps {
    /// The feature names, e.g. `{avx2, bmi1, popcnt}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut set = f.debug_set();
        for (name, c) in FEATURES {
            if self.contains(c) {
                set.entry(&format_args!("{name}"));
            }
        }
        set.finish()
    }
}

impl Caps {
    const AVX2: Caps = Caps(1 << 0);
    const BMI1: Caps = Caps(1 << 1);
    const BMI2: Caps = Caps(1 << 2);
    const POPCNT: Caps = Caps(1 << 3);
    const PCLMULQDQ: Caps = Caps(1 << 4);
    const AVX512F: Caps = Caps(1 << 5);
    const AVX512BW: Caps = Caps(1 << 6);
    const AVX512VL: Caps = Caps(1 << 7);
    const AVX512VPOPCNTDQ: Caps = Caps(1 << 8);
    const AVX512VBMI2: Caps = Caps(1 << 9);
    const VPCLMULQDQ: Caps = Caps(1 << 10);
    const GFNI: Caps = Caps(1 << 11);
    const SSE42: Caps = Caps(1 << 12);
    const ALL: Caps = Caps((1 << 13) - 1);
    const AVX512_FAMILY: Caps = Caps(
        Caps::AVX512F.0
            | Caps::AVX512BW.0
            | Caps::AVX512VL.0
            | Caps::AVX512VPOPCNTDQ.0
            | Caps::AVX512VBMI2.0,
    );

    #[inline(always)]
    const fn contains(self, other: Caps) -> bool {
        self.0 & other.0 == other.0
    }
}

/// Every feature the library reports, in the order [`cpu_features`] lists
/// them, with the names `is_x86_feature_detected!` uses.
const FEATURES: [(&str, Caps); 13] = [
    ("avx2", Caps::AVX2),
    ("bmi1", Caps::BMI1),
    ("bmi2", Caps::BMI2),
    ("popcnt", Caps::POPCNT),
    ("pclmulqdq", Caps::PCLMULQDQ),
    ("avx512f", Caps::AVX512F),
    ("avx512bw", Caps::AVX512BW),
    ("avx512vl", Caps::AVX512VL),
    ("avx512vpopcntdq", Caps::AVX512VPOPCNTDQ),
    ("avx512vbmi2", Caps::AVX512VBMI2),
    ("vpclmulqdq", Caps::VPCLMULQDQ),
    ("gfni", Caps::GFNI),
    ("sse4.2", Caps::SSE42),
];

/// The set holding `FEATURES[i]` for each `found[i]`.
#[cfg(target_arch = "x86_64")]
const fn caps_from(found: [bool; x86_64::COUNT]) -> Caps {
    let mut acc = 0;
    let mut i = 0;
    while i < FEATURES.len() {
        if found[i] {
            acc |= FEATURES[i].1 .0;
        }
        i += 1;
    }
    Caps(acc)
}

/// The runtime answer, cached: with `std`, the first call asks the CPU and
/// stores two words in atomics, the CPU's features and the encoded
/// [`Level::detect`]. Relaxed ordering is enough: the values are a pure
/// function of the CPU, so racing first calls all store the same thing.
#[cfg(all(feature = "std", target_arch = "x86_64"))]
mod cache {
    use super::{caps_from, x86_64, Caps, Level, LevelKind};
    use core::sync::atomic::{AtomicU32, Ordering::Relaxed};

    /// Set in a cached word once detection has run (so 0 means "not yet").
    const INIT: u32 = 1 << 31;

    /// The CPU's features, `INIT`-tagged.
    static CPU: AtomicU32 = AtomicU32::new(0);

    /// [`Level::detect`]'s answer, encoded by [`encode`].
    static BEST: AtomicU32 = AtomicU32::new(0);

    pub(super) fn encode(l: Level) -> u32 {
        INIT | (l.kind as u32) << 16 | u32::from(l.caps.0)
    }

    /// Inverse of [`encode`] for a word that has `INIT` set.
    #[inline(always)]
    pub(super) fn decode(v: u32) -> Level {
        let kind = match (v >> 16) & 0xff {
            0 => LevelKind::Scalar,
            1 => LevelKind::Avx2,
            _ => LevelKind::Avx512,
        };
        Level {
            kind,
            caps: Caps(v as u16),
        }
    }

    /// The CPU's features.
    #[inline]
    pub(super) fn cpu() -> Caps {
        let v = CPU.load(Relaxed);
        if v & INIT != 0 {
            Caps(v as u16)
        } else {
            slow().0
        }
    }

    /// [`Level::detect`].
    #[inline]
    pub(super) fn best() -> Level {
        let v = BEST.load(Relaxed);
        if v & INIT != 0 {
            decode(v)
        } else {
            slow().1
        }
    }

    /// First call: asks the CPU, caches the answers.
    #[cold]
    #[inline(never)]
    fn slow() -> (Caps, Level) {
        let cpu = caps_from(x86_64::detect());
        let best = Level::best(cpu);
        CPU.store(INIT | u32::from(cpu.0), Relaxed);
        BEST.store(encode(best), Relaxed);
        (cpu, best)
    }
}

/// The features this CPU has (cached after the first call).
#[inline(always)]
fn cpu_caps() -> Caps {
    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    {
        cache::cpu()
    }
    #[cfg(all(not(feature = "std"), target_arch = "x86_64"))]
    {
        const COMPILED: Caps = caps_from(x86_64::COMPILED);
        COMPILED
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Caps(0)
    }
}

/// A proof that this CPU runs code of a given [`LevelKind`], with the
/// optional features that code may use.
///
/// A `Level` can only be obtained from [`Level::detect`], [`Level::scalar`]
/// or [`Level::available`], so holding one proves the instructions it names
/// exist: `kind() >= LevelKind::Avx2` guarantees AVX2, POPCNT and BMI1, and
/// each `has_*` query that answers `true` guarantees that feature (including
/// the operating system's support for its registers). `unsafe` code may rely
/// on that.
///
/// The queries answer for code running *at this level*: features above it
/// report `false` even when the CPU has them (an AVX2 level never reports
/// AVX-512), and [`Level::scalar`] reports no feature at all. For the CPU
/// itself, see [`cpu_features`] and [`cpu_level`].
///
/// Copying a `Level` is free and choosing by it is one `match`, so hot code
/// takes it by value (a [`crate::bitmap::Bitmap`] keeps the one it was built
/// with).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Level {
    kind: LevelKind,
    caps: Caps,
}

impl Level {
    /// The CPU's features restricted to what `kind` may use; `kind` must be
    /// at most [`LevelKind::of`]`(cpu)`.
    const fn capped(cpu: Caps, kind: LevelKind) -> Level {
        Level {
            kind,
            caps: Caps(cpu.0 & kind.allowed().0),
        }
    }

    /// The best level the library implements on this CPU, with every optional feature the CPU has at that level
    /// (PCLMULQDQ for CRC updates, for instance). Detected on first use and
    /// cached; later calls are one relaxed atomic load. Without the `std`
    /// feature the answer is the compile-time target features.
    #[inline]
    pub fn detect() -> Level {
        #[cfg(all(feature = "std", target_arch = "x86_64"))]
        {
            cache::best()
        }
        #[cfg(all(not(feature = "std"), target_arch = "x86_64"))]
        {
            const BEST: Level = Level::best(caps_from(x86_64::COMPILED));
            BEST
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Level::scalar()
        }
    }

    /// Computes [`Level::detect`] from the CPU's features (the cached path
    /// calls this once).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    const fn best(cpu: Caps) -> Level {
        let kind = LevelKind::of(cpu);
        let kind = if kind as u8 > IMPLEMENTED as u8 {
            IMPLEMENTED
        } else {
            kind
        };
        Level::capped(cpu, kind)
    }

    /// The portable fallback: no optional instruction at all (every `has_*`
    /// query is `false`, so CRC updates use portable carry-less products
    /// too). Always available; tests and benchmarks use it to run the paths
    /// a CPU without SIMD takes.
    #[inline]
    pub const fn scalar() -> Level {
        Level {
            kind: LevelKind::Scalar,
            caps: Caps(0),
        }
    }

    /// Every level the library implements that this machine can run, lowest
    /// first: [`Level::scalar`], then each vector level up to
    /// [`Level::detect`], each with the optional features the CPU has there.
    /// On a CPU without a vector level, [`Level::detect`] follows the
    /// portable level when it differs (a scalar level with PCLMULQDQ). The
    /// last item is always [`Level::detect`].
    ///
    /// Tests run the same assertions on each; every path the library can take
    /// on this machine is among them.
    pub fn available() -> impl Iterator<Item = Level> + Clone {
        let cpu = cpu_caps();
        let best = Level::detect();
        let mut out = [Some(Level::scalar()), None, None];
        let mut n = 1;
        for kind in [LevelKind::Avx2, LevelKind::Avx512] {
            if kind <= best.kind {
                out[n] = Some(Level::capped(cpu, kind));
                n += 1;
            }
        }
        if n == 1 && best != Level::scalar() {
            out[1] = Some(best);
        }
        out.into_iter().flatten()
    }

    /// The instruction set the library's loops run at this level.
    #[inline(always)]
    pub(crate) const fn isa(self) -> Isa {
        match self.kind {
            LevelKind::Scalar => Isa::Scalar,
            #[cfg(target_arch = "x86_64")]
            LevelKind::Avx2 => Isa::Avx2,
            #[cfg(target_arch = "x86_64")]
            LevelKind::Avx512 => Isa::Avx512,
            // No vector level is ever built off x86_64.
            #[cfg(not(target_arch = "x86_64"))]
            LevelKind::Avx2 | LevelKind::Avx512 => Isa::Scalar,
        }
    }

    /// The level's kind, which dispatch code matches on.
    #[inline(always)]
    pub const fn kind(self) -> LevelKind {
        self.kind
    }

    /// A short name for reports: `"scalar"`, `"avx2"` or `"avx512"` (the
    /// kind's name; the optional features are not named).
    pub const fn name(self) -> &'static str {
        self.kind.name()
    }

    #[inline(always)]
    const fn has(self, c: Caps) -> bool {
        self.caps.contains(c)
    }
}

/// The `has_*` queries, one per feature.
macro_rules! queries {
    ($($(#[$doc:meta])* $name:ident => $cap:ident;)*) => {
        impl Level {
            $(
                $(#[$doc])*
                #[inline(always)]
                pub const fn $name(self) -> bool {
                    self.has(Caps::$cap)
                }
            )*
        }
    };
}

queries! {
    /// AVX2 (256-bit integer vectors). Implied by `kind() >= Avx2`.
    has_avx2 => AVX2;
    /// BMI1 (`tzcnt`, `blsr`, `andn`). Implied by `kind() >= Avx2`.
    has_bmi1 => BMI1;
    /// BMI2 (`pdep`, `pext`, `shlx`).
    has_bmi2 => BMI2;
    /// POPCNT. Implied by `kind() >= Avx2`.
    has_popcnt => POPCNT;
    /// PCLMULQDQ (64-bit carry-less multiply), used by the CRC-32C updates.
    /// Independent of the level's kind: any level but [`Level::scalar`] has
    /// it when the CPU does.
    has_pclmulqdq => PCLMULQDQ;
    /// AVX-512 Foundation. Implied by `kind() >= Avx512`.
    has_avx512f => AVX512F;
    /// AVX-512 byte and word instructions. Implied by `kind() >= Avx512`.
    has_avx512bw => AVX512BW;
    /// AVX-512 vector-length extensions (the 128/256-bit forms). Implied by
    /// `kind() >= Avx512`.
    has_avx512vl => AVX512VL;
    /// AVX-512 `vpopcntq` / `vpopcntd` (only at an AVX-512 level).
    has_avx512vpopcntdq => AVX512VPOPCNTDQ;
    /// AVX-512 VBMI2 (compress/expand of bytes and words; only at an AVX-512
    /// level).
    has_avx512vbmi2 => AVX512VBMI2;
    /// VPCLMULQDQ (carry-less multiply on 256/512-bit vectors; at AVX2 and
    /// above).
    has_vpclmulqdq => VPCLMULQDQ;
    /// GFNI (Galois-field byte instructions; at AVX2 and above).
    has_gfni => GFNI;
    /// SSE4.2 (the `crc32` instruction, used for short CRC-32C inputs). Like
    /// PCLMULQDQ, any level but [`Level::scalar`] has it when the CPU does.
    has_sse42 => SSE42;
}

impl Default for Level {
    /// [`Level::detect`].
    fn default() -> Level {
        Level::detect()
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Every CPU feature the library knows, with whether this CPU has it (and
/// the operating system supports it), for reports: `avx2`, `bmi1`, `bmi2`,
/// `popcnt`, `pclmulqdq`, `avx512f`, `avx512bw`, `avx512vl`,
/// `avx512vpopcntdq`, `avx512vbmi2`, `vpclmulqdq`, `gfni`, `sse4.2`, in that
/// order.
/// These are the CPU's features, whatever level the library runs at; off
/// `x86_64` every one is `false`.
///
/// ```
/// let names: Vec<_> = spacekit::arch::cpu_features().map(|(n, _)| n).collect();
/// assert_eq!(names[0], "avx2");
/// assert_eq!(names.len(), 13);
/// ```
pub fn cpu_features() -> impl Iterator<Item = (&'static str, bool)> + Clone {
    let cpu = cpu_caps();
    FEATURES
        .into_iter()
        .map(move |(name, c)| (name, cpu.contains(c)))
}

/// The highest level this CPU supports (equal to [`Level::detect`]'s kind
/// with the `std` feature, since the library implements every level). For
/// reports; dispatch uses a [`Level`].
pub fn cpu_level() -> LevelKind {
    LevelKind::of(cpu_caps())
}

/// For tests that run every level of [`Level::available`]: prints one line
/// when this machine cannot run the AVX-512 level, so a run that never
/// exercised those loops says so. Call once per test.
#[cfg(test)]
pub(crate) fn note_skipped_levels() {
    if cfg!(target_arch = "x86_64") && !Level::available().any(|l| l.kind() == LevelKind::Avx512) {
        std::println!("AVX-512 level not available on this machine: its tests were skipped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn detect_is_the_last_available_level() {
        let all: Vec<Level> = Level::available().collect();
        assert_eq!(all[0], Level::scalar());
        assert_eq!(all.last(), Some(&Level::detect()));
        assert!(all
            .windows(2)
            .all(|w| w[0].kind() <= w[1].kind() && w[0] != w[1]));
        assert!(Level::detect().kind() <= IMPLEMENTED);
        assert!(Level::detect().kind() <= cpu_level());
    }

    #[test]
    fn levels_imply_their_features() {
        for l in Level::available() {
            if l.kind() >= LevelKind::Avx2 {
                assert!(l.has_avx2() && l.has_popcnt() && l.has_bmi1(), "{l:?}");
            } else {
                assert!(!l.has_avx2(), "{l:?}");
            }
            if l.kind() < LevelKind::Avx512 {
                assert!(!l.has_avx512f() && !l.has_avx512vpopcntdq(), "{l:?}");
            }
            // A level never claims what the CPU lacks.
            for (name, present) in cpu_features() {
                let q = match name {
                    "avx2" => l.has_avx2(),
                    "bmi1" => l.has_bmi1(),
                    "bmi2" => l.has_bmi2(),
                    "popcnt" => l.has_popcnt(),
                    "pclmulqdq" => l.has_pclmulqdq(),
                    "avx512f" => l.has_avx512f(),
                    "avx512bw" => l.has_avx512bw(),
                    "avx512vl" => l.has_avx512vl(),
                    "avx512vpopcntdq" => l.has_avx512vpopcntdq(),
                    "avx512vbmi2" => l.has_avx512vbmi2(),
                    "vpclmulqdq" => l.has_vpclmulqdq(),
                    "gfni" => l.has_gfni(),
                    "sse4.2" => l.has_sse42(),
                    other => panic!("unknown feature {other}"),
                };
                assert!(present || !q, "{l:?} claims {name}");
            }
        }
        let s = Level::scalar();
        assert_eq!(s.caps, Caps(0));
        assert_eq!(s.name(), "scalar");
    }

    #[test]
    fn kinds_from_features() {
        assert_eq!(LevelKind::of(Caps(0)), LevelKind::Scalar);
        assert_eq!(LevelKind::of(Caps::AVX2), LevelKind::Scalar);
        assert_eq!(LevelKind::of(LevelKind::Avx2.required()), LevelKind::Avx2);
        assert_eq!(LevelKind::of(Caps::ALL), LevelKind::Avx512);
        // The best level is capped at what the library implements, and its
        // features at what that level may use.
        let best = Level::best(Caps::ALL);
        assert_eq!(best.kind(), IMPLEMENTED);
        assert!(best.has_pclmulqdq() && best.has_vpclmulqdq() && best.has_avx512f());
        // AVX-512 F/BW/VL alone (Skylake-SP) runs the AVX2 level, without
        // reporting AVX-512 features.
        let skx = Caps(
            LevelKind::Avx2.required().0 | Caps::AVX512F.0 | Caps::AVX512BW.0 | Caps::AVX512VL.0,
        );
        assert_eq!(LevelKind::of(skx), LevelKind::Avx2);
        assert!(!Level::best(skx).has_avx512f());
        let old = Level::best(Caps(Caps::PCLMULQDQ.0 | Caps::POPCNT.0 | Caps::AVX2.0));
        assert_eq!(old.kind(), LevelKind::Scalar);
        assert!(old.has_pclmulqdq() && !old.has_avx2());
        assert_eq!(LevelKind::Avx512.to_string(), "avx512");
    }

    /// Without `std`, the level is the compile-time target features'.
    #[cfg(not(feature = "std"))]
    #[test]
    fn compile_time_level() {
        let avx2 = cfg!(all(
            target_arch = "x86_64",
            target_feature = "avx2",
            target_feature = "popcnt",
            target_feature = "bmi1"
        ));
        assert_eq!(Level::detect().kind() >= LevelKind::Avx2, avx2);
    }

    #[cfg(all(feature = "std", target_arch = "x86_64"))]
    #[test]
    fn cache_encoding_round_trips() {
        for l in Level::available() {
            assert_eq!(cache::decode(cache::encode(l)), l);
        }
        let top = Level::capped(Caps::ALL, LevelKind::Avx512);
        assert_eq!(cache::decode(cache::encode(top)), top);
    }

    #[test]
    fn debug_names_the_features() {
        let l = Level::capped(Caps::ALL, LevelKind::Avx2);
        let s = alloc::format!("{l:?}");
        assert!(s.contains("Avx2") && s.contains("pclmulqdq"), "{s}");
        assert!(!s.contains("avx512f"), "{s}");
        assert_eq!(alloc::format!("{:?}", Level::scalar().caps), "{}");
    }

    /// [`Vector::pairs_to_ranges`] run through `run`, at one level.
    struct Pairs<'a> {
        pairs: &'a mut [u64],
        shift: u32,
        base: u64,
    }

    impl Job for Pairs<'_> {
        type Output = ();
        fn run<V: Vector>(self) {
            V::pairs_to_ranges(self.pairs, self.shift, self.base)
        }
    }

    #[test]
    fn pairs_to_ranges_at_every_level_matches_the_formula() {
        note_skipped_levels();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for level in Level::available() {
            // Every length up to a few vectors (tails of each width), shifts
            // across the whole range and past it, bases that wrap.
            for pairs in 0..21 {
                for shift in [0, 1, 12, 21, 63, 64, 200] {
                    let base = next();
                    let v: Vec<u64> = (0..2 * pairs).map(|_| next()).collect();
                    let want: Vec<u64> = v
                        .chunks(2)
                        .flat_map(|p| {
                            [
                                base.wrapping_add(p[0].wrapping_shl(shift)),
                                p[1].wrapping_sub(p[0]).wrapping_shl(shift),
                            ]
                        })
                        .collect();
                    let mut got = v.clone();
                    run(
                        level,
                        Pairs {
                            pairs: &mut got,
                            shift,
                            base,
                        },
                    );
                    assert_eq!(got, want, "{level}: {pairs} pairs, shift {shift}");
                }
            }
        }
    }

    #[test]
    fn detection_is_cached_and_stable() {
        assert_eq!(Level::detect(), Level::detect());
        let a: Vec<_> = cpu_features().collect();
        let b: Vec<_> = cpu_features().collect();
        assert_eq!(a, b);
        assert_eq!(a.len(), FEATURES.len());
    }
}
