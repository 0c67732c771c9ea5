//! [`ScanOpts`]: how a scan runs (a test hook, re-exported from `hooks`).

use alloc::vec::Vec;

use crate::arch::Level;

/// How a scan runs: which CPU level, and (for the parallel table build) how
/// many words each parallel block holds.
#[derive(Clone, Copy, Debug)]
pub struct ScanOpts {
    /// The CPU level the scan is compiled for.
    pub backend: Level,
    /// Words per block of the parallel scan.
    pub block_words: usize,
}

impl Default for ScanOpts {
    fn default() -> Self {
        ScanOpts {
            backend: Level::detect(),
            block_words: 16 * 1024,
        }
    }
}

impl ScanOpts {
    /// One `ScanOpts` per CPU level this machine runs ([`Level::available`]:
    /// scalar first, the detected level last), each with `block_words` words
    /// per parallel block: a test loops over them to run every path.
    pub fn each_backend(block_words: usize) -> Vec<ScanOpts> {
        Level::available()
            .map(|backend| ScanOpts {
                backend,
                block_words,
            })
            .collect()
    }
}
