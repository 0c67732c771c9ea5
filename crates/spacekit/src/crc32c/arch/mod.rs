//! The carry-less multiply unit, chosen from a [`Level`].
//!
//! * portable — `gf2::Portable`, products by 4-bit windows;
//! * `x86_64` — PCLMULQDQ, when the level has it ([`Level::has_pclmulqdq`];
//!   `crate::arch` detects it once and caches it).

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

use super::gf2;
use crate::arch::Level;

/// Which carry-less multiply unit the O(log n) updates use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unit {
    Portable,
    /// Only built from a `Level` that has PCLMULQDQ.
    #[cfg(target_arch = "x86_64")]
    Pclmul,
    /// PCLMULQDQ with the `crc32` instruction reducing shifts in the
    /// reflected domain; only built from a `Level` that has PCLMULQDQ and
    /// SSE4.2.
    #[cfg(target_arch = "x86_64")]
    PclmulCrc32,
}

impl Unit {
    /// The best unit `level` may use. PCLMULQDQ is a feature of its own,
    /// not tied to the level's vector kind, so it is queried directly.
    #[inline]
    pub(crate) const fn for_level(level: Level) -> Unit {
        #[cfg(target_arch = "x86_64")]
        if level.has_pclmulqdq() {
            return if level.has_sse42() {
                Unit::PclmulCrc32
            } else {
                Unit::Pclmul
            };
        }
        let _ = level;
        Unit::Portable
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Unit::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            Unit::Pclmul => "pclmulqdq",
            #[cfg(target_arch = "x86_64")]
            Unit::PclmulCrc32 => "pclmulqdq+crc32",
        }
    }

    /// See [`gf2::flip_delta`].
    #[inline]
    pub(crate) fn flip_delta(self, a: u64, b: u64) -> u32 {
        match self {
            Unit::Portable => gf2::flip_delta::<gf2::Portable>(a, b),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Unit::Pclmul` and `Unit::PclmulCrc32` are only
            // built by `for_level` from a `Level` that has PCLMULQDQ, which
            // proves the CPU has it.
            Unit::Pclmul | Unit::PclmulCrc32 => unsafe { x86_64::flip_delta(a, b) },
        }
    }

    /// See [`gf2::mul_xpow`].
    #[inline]
    pub(crate) fn mul_xpow(self, crc: u32, e: u64) -> u32 {
        match self {
            Unit::Portable => gf2::mul_xpow::<gf2::Portable>(crc, e),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as in `flip_delta`.
            Unit::Pclmul => unsafe { x86_64::mul_xpow(crc, e) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Unit::PclmulCrc32` is only built by `for_level` from
            // a `Level` that has PCLMULQDQ and SSE4.2.
            Unit::PclmulCrc32 => unsafe { x86_64::mul_xpow_crc32(crc, e) },
        }
    }
}
