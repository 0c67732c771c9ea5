//! x86_64 instantiations of the word-skipping loops.

pub(crate) mod avx2;
pub(crate) mod avx512;
