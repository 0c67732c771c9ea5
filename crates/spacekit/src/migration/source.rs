//! [`MemorySource`]: guest memory as the sender reads it; per-page hashes.

use alloc::vec::Vec;

use super::error::MigrationError;
use crate::crc32c;

/// Guest memory as the migration sender reads it: `size()` bytes at
/// guest-physical addresses `0..size()`.
///
/// Implemented for `[u8]` and `Vec<u8>` (the slice's offsets are the GPAs).
/// A VMM implements it over its guest's mapping, which a running vCPU may be
/// writing while the sender copies it out; that is what pre-copy expects
/// (pages written during a round are dirty again and go in the next round).
pub trait MemorySource {
    /// Bytes of guest memory.
    fn size(&self) -> u64;

    /// Copies `out.len()` bytes starting at guest-physical address `gpa`
    /// into `out`. The sender only asks for ranges inside `0..size()`; an
    /// implementation may panic on any other.
    fn copy_out(&self, gpa: u64, out: &mut [u8]);

    /// The standard CRC-32C ([`crc32c::checksum`]) of the `len` bytes at
    /// `gpa` (inside `0..size()`). The default copies through a 4 KiB stack
    /// buffer; implementations with direct access can hash in place.
    fn crc32c(&self, gpa: u64, len: u64) -> u32 {
        let mut buf = [0u8; 4096];
        let mut crc = !0u32;
        let mut at = gpa;
        let end = gpa + len;
        while at < end {
            let n = (end - at).min(buf.len() as u64) as usize;
            self.copy_out(at, &mut buf[..n]);
            crc = crc32c::raw(crc, &buf[..n]);
            at += n as u64;
        }
        !crc
    }
}

impl MemorySource for [u8] {
    fn size(&self) -> u64 {
        self.len() as u64
    }

    /// # Panics
    /// When `gpa + out.len()` passes the slice's end.
    fn copy_out(&self, gpa: u64, out: &mut [u8]) {
        let start = usize::try_from(gpa).unwrap_or(usize::MAX);
        let src = start
            .checked_add(out.len())
            .and_then(|end| self.get(start..end))
            .expect("MemorySource::copy_out: range outside the slice");
        out.copy_from_slice(src);
    }

    fn crc32c(&self, gpa: u64, len: u64) -> u32 {
        crc32c::checksum(&self[gpa as usize..(gpa + len) as usize])
    }
}

impl MemorySource for Vec<u8> {
    fn size(&self) -> u64 {
        self.as_slice().size()
    }

    fn copy_out(&self, gpa: u64, out: &mut [u8]) {
        self.as_slice().copy_out(gpa, out);
    }

    fn crc32c(&self, gpa: u64, len: u64) -> u32 {
        self.as_slice().crc32c(gpa, len)
    }
}

/// Pages of `page_size` bytes in `size` bytes of memory (the last one may be
/// partial).
pub(crate) fn page_count(size: u64, page_size: u64) -> u64 {
    size.div_ceil(page_size)
}

/// The standard CRC-32C of each `page_size`-byte page of `source`, in
/// address order; the last page is hashed as far as memory goes when
/// `page_size` does not divide the size. The same list a
/// [`Receiver`](super::Receiver) sends for
/// [`Command::PageHashes`](super::Command::PageHashes), so [`diff_pages`]
/// can compare them.
///
/// # Errors
/// [`MigrationError::BadPageSize`] for a page size of 0.
///
/// ```
/// use spacekit::migration::{diff_pages, hash_pages};
///
/// let a = vec![0u8; 3 * 4096];
/// let mut b = a.clone();
/// b[4096 + 7] = 1;
/// let pages = diff_pages(&hash_pages(&a, 4096)?, &hash_pages(&b, 4096)?)?;
/// assert_eq!(pages, [1]);
/// # Ok::<(), spacekit::migration::MigrationError>(())
/// ```
pub fn hash_pages<M: MemorySource + ?Sized>(
    source: &M,
    page_size: u64,
) -> Result<Vec<u32>, MigrationError> {
    if page_size == 0 {
        return Err(MigrationError::BadPageSize { page_size });
    }
    let size = source.size();
    let pages = page_count(size, page_size);
    let mut out = Vec::with_capacity(usize::try_from(pages).unwrap_or(0));
    for p in 0..pages {
        let gpa = p * page_size;
        out.push(source.crc32c(gpa, page_size.min(size - gpa)));
    }
    Ok(out)
}

/// The indices of the pages whose hashes differ between two lists from
/// [`hash_pages`] or [`Sender::page_hashes`](super::Sender::page_hashes), in
/// ascending order.
///
/// # Errors
/// [`MigrationError::PageCountMismatch`] when the lists differ in length
/// (memories of different sizes), rather than comparing only the common
/// prefix.
pub fn diff_pages(local: &[u32], remote: &[u32]) -> Result<Vec<u64>, MigrationError> {
    if local.len() != remote.len() {
        return Err(MigrationError::PageCountMismatch {
            local: local.len(),
            remote: remote.len(),
        });
    }
    Ok(local
        .iter()
        .zip(remote)
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, _)| i as u64)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source that only offers `copy_out`, so the default `crc32c` runs.
    struct Plain<'a>(&'a [u8]);

    impl MemorySource for Plain<'_> {
        fn size(&self) -> u64 {
            self.0.len() as u64
        }
        fn copy_out(&self, gpa: u64, out: &mut [u8]) {
            self.0.copy_out(gpa, out);
        }
    }

    #[test]
    fn hashes_agree_between_default_and_slice() {
        let mem: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + i / 300) as u8).collect();
        for ps in [1u64, 7, 4096, 5000, 8192, 20_000, 1 << 20] {
            let a = hash_pages(&mem, ps).unwrap();
            let b = hash_pages(&Plain(&mem), ps).unwrap();
            assert_eq!(a, b, "page size {ps}");
            assert_eq!(a.len() as u64, 20_000u64.div_ceil(ps));
            for (i, h) in a.iter().enumerate() {
                let lo = i * ps as usize;
                let hi = (lo + ps as usize).min(mem.len());
                assert_eq!(*h, crc32c::checksum(&mem[lo..hi]));
            }
        }
        assert_eq!(hash_pages(&[][..], 4096).unwrap(), Vec::<u32>::new());
        assert_eq!(
            hash_pages(&mem, 0),
            Err(MigrationError::BadPageSize { page_size: 0 })
        );
    }

    #[test]
    fn diff_finds_pages() {
        assert_eq!(diff_pages(&[1, 2, 3], &[1, 0, 3]), Ok(vec![1]));
        assert_eq!(diff_pages(&[], &[]), Ok(vec![]));
        assert_eq!(diff_pages(&[5, 6], &[7, 8]), Ok(vec![0, 1]));
        assert_eq!(
            diff_pages(&[1, 2], &[1]),
            Err(MigrationError::PageCountMismatch {
                local: 2,
                remote: 1
            })
        );
    }

    #[test]
    #[should_panic(expected = "outside the slice")]
    fn slice_copy_out_outside_panics() {
        let mem = [0u8; 16];
        let mut out = [0u8; 4];
        mem.copy_out(14, &mut out);
    }
}
