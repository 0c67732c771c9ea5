//! x86_64 feature detection: the only code in the workspace that asks the
//! CPU (`is_x86_feature_detected!`, which reads CPUID and checks that the
//! operating system saves the vector registers). The parent module caches
//! the answer.
//!
//! Both tables list the features in the order of the parent's `FEATURES`
//! (`avx2`, `bmi1`, `bmi2`, `popcnt`, `pclmulqdq`, `avx512f`, `avx512bw`,
//! `avx512vl`, `avx512vpopcntdq`, `avx512vbmi2`, `vpclmulqdq`, `gfni`,
//! `sse4.2`).

/// Number of features the library knows.
pub(super) const COUNT: usize = 13;

/// Whether this CPU has each feature, asked at runtime (slow: call once).
#[cfg(feature = "std")]
#[cold]
pub(super) fn detect() -> [bool; COUNT] {
    use std::is_x86_feature_detected as has;
    [
        has!("avx2"),
        has!("bmi1"),
        has!("bmi2"),
        has!("popcnt"),
        has!("pclmulqdq"),
        has!("avx512f"),
        has!("avx512bw"),
        has!("avx512vl"),
        has!("avx512vpopcntdq"),
        has!("avx512vbmi2"),
        has!("vpclmulqdq"),
        has!("gfni"),
        has!("sse4.2"),
    ]
}

/// The features the compiler may assume (`-C target-feature`,
/// `-C target-cpu`), for builds without runtime detection.
#[cfg(not(feature = "std"))]
pub(super) const COMPILED: [bool; COUNT] = [
    cfg!(target_feature = "avx2"),
    cfg!(target_feature = "bmi1"),
    cfg!(target_feature = "bmi2"),
    cfg!(target_feature = "popcnt"),
    cfg!(target_feature = "pclmulqdq"),
    cfg!(target_feature = "avx512f"),
    cfg!(target_feature = "avx512bw"),
    cfg!(target_feature = "avx512vl"),
    cfg!(target_feature = "avx512vpopcntdq"),
    cfg!(target_feature = "avx512vbmi2"),
    cfg!(target_feature = "vpclmulqdq"),
    cfg!(target_feature = "gfni"),
    cfg!(target_feature = "sse4.2"),
];
