//! The carry-less multiply unit, chosen once at runtime.
//!
//! * portable — `gf2::Portable`, products by 4-bit windows;
//! * `x86_64` — PCLMULQDQ, detected on first use and cached in an atomic.

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;

use super::gf2;

/// Which carry-less multiply unit the O(log n) updates use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unit {
    Portable,
    // Never built in a no_std build for a target without PCLMULQDQ.
    #[cfg(target_arch = "x86_64")]
    #[cfg_attr(
        not(any(feature = "std", target_feature = "pclmulqdq")),
        allow(dead_code)
    )]
    Pclmul,
}

#[cfg(all(feature = "std", target_arch = "x86_64"))]
static DETECTED: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(0);

impl Unit {
    /// The best unit this CPU has. Without `std`, detection is compile-time.
    #[inline]
    pub(crate) fn detect() -> Unit {
        #[cfg(all(feature = "std", target_arch = "x86_64"))]
        {
            use core::sync::atomic::Ordering;
            // Relaxed is enough: every racing initialisation stores the same
            // value, a pure function of the CPU.
            match DETECTED.load(Ordering::Relaxed) {
                2 => Unit::Pclmul,
                1 => Unit::Portable,
                _ => detect_slow(),
            }
        }
        #[cfg(all(
            not(feature = "std"),
            target_arch = "x86_64",
            target_feature = "pclmulqdq"
        ))]
        {
            Unit::Pclmul
        }
        #[cfg(not(any(
            all(feature = "std", target_arch = "x86_64"),
            all(
                not(feature = "std"),
                target_arch = "x86_64",
                target_feature = "pclmulqdq"
            )
        )))]
        {
            Unit::Portable
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Unit::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            Unit::Pclmul => "pclmulqdq",
        }
    }

    /// See [`gf2::flip_delta`].
    #[inline]
    pub(crate) fn flip_delta(self, a: u64, b: u64) -> u32 {
        match self {
            Unit::Portable => gf2::flip_delta::<gf2::Portable>(a, b),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Unit::Pclmul` is only built after PCLMULQDQ was
            // detected (or is enabled at compile time).
            Unit::Pclmul => unsafe { x86_64::flip_delta(a, b) },
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
        }
    }
}

/// First call: asks the CPU, caches the answer.
#[cfg(all(feature = "std", target_arch = "x86_64"))]
#[cold]
#[inline(never)]
fn detect_slow() -> Unit {
    let has = std::is_x86_feature_detected!("pclmulqdq");
    DETECTED.store(
        if has { 2 } else { 1 },
        core::sync::atomic::Ordering::Relaxed,
    );
    if has {
        Unit::Pclmul
    } else {
        Unit::Portable
    }
}
