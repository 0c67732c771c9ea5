//! [`ScanOpts`]: how a scan runs. With the `testing` feature its fields are
//! public (re-exported from `hooks`) so tests force each CPU level and small
//! parallel blocks; without it the type is empty and every scan runs at the
//! detected level with the default block size.

#[cfg(any(test, feature = "testing"))]
use alloc::vec::Vec;

use crate::arch::Level;

/// Words per block of the parallel scan, by default.
#[cfg(any(test, feature = "testing", feature = "rayon"))]
const BLOCK_WORDS: usize = 16 * 1024;

/// How a scan runs: which CPU level, and (for the parallel table build) how
/// many words each parallel block holds.
#[derive(Clone, Copy, Debug)]
pub struct ScanOpts {
    /// The CPU level the scan is compiled for.
    #[cfg(any(test, feature = "testing"))]
    pub backend: Level,
    /// Words per block of the parallel scan.
    #[cfg(any(test, feature = "testing"))]
    pub block_words: usize,
    /// Run the parallel scan whenever one is asked for and the bitmap has
    /// two blocks, even where the cost model would run it on one thread
    /// (so tests reach the parallel code on any bitmap).
    #[cfg(any(test, feature = "testing"))]
    pub force_parallel: bool,
    /// Which split a forced parallel table build runs: `true` the one-pass
    /// split (chunks claimed from both ends, the caller's scanned into the
    /// table, the others' into buffers joined after), `false` the counting
    /// split (a counting pass
    /// sizes each block's share of the table, then the blocks fill it).
    #[cfg(any(test, feature = "testing"))]
    pub one_pass: bool,
}

impl Default for ScanOpts {
    fn default() -> Self {
        ScanOpts {
            #[cfg(any(test, feature = "testing"))]
            backend: Level::detect(),
            #[cfg(any(test, feature = "testing"))]
            block_words: BLOCK_WORDS,
            #[cfg(any(test, feature = "testing"))]
            force_parallel: false,
            #[cfg(any(test, feature = "testing"))]
            one_pass: false,
        }
    }
}

impl ScanOpts {
    /// The level the scan runs at.
    #[inline]
    pub(crate) fn level(self) -> Level {
        #[cfg(any(test, feature = "testing"))]
        return self.backend;
        #[cfg(not(any(test, feature = "testing")))]
        Level::detect()
    }

    /// Words per parallel block (at least 1).
    #[inline]
    #[cfg(feature = "rayon")]
    pub(crate) fn block(self) -> usize {
        #[cfg(any(test, feature = "testing"))]
        return self.block_words.max(1);
        #[cfg(not(any(test, feature = "testing")))]
        BLOCK_WORDS
    }

    /// Whether a parallel scan skips the cost model (tests only).
    #[inline]
    #[cfg(feature = "rayon")]
    pub(crate) fn force_parallel(self) -> bool {
        #[cfg(any(test, feature = "testing"))]
        return self.force_parallel;
        #[cfg(not(any(test, feature = "testing")))]
        false
    }

    /// Whether a forced parallel table build runs the one-pass split
    /// (tests only).
    #[inline]
    #[cfg(feature = "rayon")]
    pub(crate) fn one_pass(self) -> bool {
        #[cfg(any(test, feature = "testing"))]
        return self.one_pass;
        #[cfg(not(any(test, feature = "testing")))]
        false
    }
}

#[cfg(any(test, feature = "testing"))]
impl ScanOpts {
    /// Two `ScanOpts` per CPU level this machine runs ([`Level::available`]:
    /// scalar first, the detected level last), each with `block_words` words
    /// per parallel block and the parallel scan forced wherever one is asked
    /// for, one with the counting split and one with the one-pass split: a
    /// test loops over them to run every path.
    pub fn each_backend(block_words: usize) -> Vec<ScanOpts> {
        Level::available()
            .flat_map(|backend| {
                [false, true].map(|one_pass| ScanOpts {
                    backend,
                    block_words,
                    force_parallel: true,
                    one_pass,
                })
            })
            .collect()
    }
}
