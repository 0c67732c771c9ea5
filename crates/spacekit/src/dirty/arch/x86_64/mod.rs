//! x86_64 kernels of the dirty scanner.

pub(crate) mod avx2;
pub(crate) mod avx512;
