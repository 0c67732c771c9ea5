//! x86_64 kernels of the dirty scanner.

pub(crate) mod avx2;
