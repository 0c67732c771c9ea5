//! Write combining for [`FileDevice`](super::FileDevice): small writes
//! that follow each other on the device (a populate writes file after file
//! into consecutive free blocks) are gathered in memory and reach the file
//! as one `pwrite` of up to [`CAPACITY`] bytes.
//!
//! One `pwrite` per file of a few KiB costs a system call and, in the
//! host's page cache, a small folio per page; a write of hundreds of KiB
//! costs one call and lets the host file system use large folios. The
//! buffer is invisible to the device's users: reads see the bytes it holds
//! (laid over what the file has), a write that is not the next one in
//! line sends it first, and `sync`, `start_writeback` and handing out the
//! raw file send it before they act. A failed send keeps the bytes, and
//! the error is returned by the next write or sync (the bytes are sent
//! again then).

use std::fs::File;
use std::io;
use std::vec::Vec;

/// Most bytes gathered before they are sent.
pub(crate) const CAPACITY: usize = 256 << 10;

/// Bytes waiting to be written at `at`, and an error from sending them
/// that no caller has seen yet.
#[derive(Default)]
pub(crate) struct Combiner {
    at: u64,
    bytes: Vec<u8>,
    error: Option<io::Error>,
}

impl core::fmt::Debug for Combiner {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Combiner")
            .field("at", &self.at)
            .field("len", &self.bytes.len())
            .field("error", &self.error)
            .finish()
    }
}

impl Combiner {
    /// Writes `data` at `offset` of `file`: gathered when it follows the
    /// bytes waiting (or nothing waits) and fits, else after sending them.
    /// Writes of [`CAPACITY`] bytes or more go straight to the file.
    pub(crate) fn write(&mut self, file: &File, offset: u64, data: &[u8]) -> io::Result<()> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let next = self.at + self.bytes.len() as u64;
        let follows = !self.bytes.is_empty() && offset == next;
        if follows && self.bytes.len() + data.len() <= CAPACITY {
            self.bytes.extend_from_slice(data);
            return Ok(());
        }
        self.send(file)?;
        if data.len() >= CAPACITY {
            return write_all_at(file, offset, data);
        }
        if self.bytes.capacity() == 0 {
            self.bytes.reserve_exact(CAPACITY);
        }
        self.at = offset;
        self.bytes.extend_from_slice(data);
        Ok(())
    }

    /// Sends the bytes waiting to `file`. On an error they stay, to be
    /// sent again.
    pub(crate) fn send(&mut self, file: &File) -> io::Result<()> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        if self.bytes.is_empty() {
            return Ok(());
        }
        write_all_at(file, self.at, &self.bytes)?;
        self.bytes.clear();
        Ok(())
    }

    /// [`Combiner::send`] for a caller that cannot return the error: it
    /// is kept for the next write or send. Returns whether nothing waits.
    pub(crate) fn send_or_keep(&mut self, file: &File) -> bool {
        match self.send(file) {
            Ok(()) => true,
            Err(e) => {
                self.error = Some(e);
                false
            }
        }
    }

    /// The offset just past the waiting bytes, if any wait.
    pub(crate) fn end(&self) -> Option<u64> {
        (!self.bytes.is_empty()).then(|| self.at + self.bytes.len() as u64)
    }

    /// Lays the waiting bytes that fall in `offset..offset + buf.len()`
    /// over `buf` (which holds what the file has there).
    pub(crate) fn overlay(&self, offset: u64, buf: &mut [u8]) {
        let (a, b) = (self.at, self.at + self.bytes.len() as u64);
        let (s, t) = (offset.max(a), (offset + buf.len() as u64).min(b));
        if s < t {
            buf[(s - offset) as usize..(t - offset) as usize]
                .copy_from_slice(&self.bytes[(s - a) as usize..(t - a) as usize]);
        }
    }
}

/// Writes all of `buf` at `offset` (`pwrite` on Unix).
pub(crate) fn write_all_at(file: &File, offset: u64, buf: &[u8]) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::write_all_at(file, buf, offset)
    }
    #[cfg(not(unix))]
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = file;
        f.seek(SeekFrom::Start(offset))?;
        f.write_all(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn scratch(len: u64) -> (File, std::path::PathBuf) {
        let p = std::env::temp_dir().join(format!("spacekit-combine-{}-{len}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        f.set_len(len).unwrap();
        (f, p)
    }

    fn on_file(f: &File, at: u64, n: usize) -> Vec<u8> {
        let mut b = std::vec![0u8; n];
        f.read_exact_at(&mut b, at).unwrap();
        b
    }

    #[test]
    fn consecutive_writes_wait_and_reads_see_them() {
        let (f, p) = scratch(4 << 20);
        let mut c = Combiner::default();
        c.write(&f, 4096, &[1; 4096]).unwrap();
        c.write(&f, 8192, &[2; 100]).unwrap();
        // Nothing on the file yet; the overlay shows both writes.
        assert_eq!(on_file(&f, 4096, 4196), std::vec![0; 4196]);
        let mut b = on_file(&f, 4000, 4300);
        c.overlay(4000, &mut b);
        assert!(b[..96].iter().all(|&x| x == 0));
        assert!(b[96..4192].iter().all(|&x| x == 1));
        assert!(b[4192..4292].iter().all(|&x| x == 2));
        assert!(b[4292..].iter().all(|&x| x == 0));
        // A write elsewhere sends them first, then waits itself.
        c.write(&f, 0, &[3; 10]).unwrap();
        assert_eq!(on_file(&f, 8192, 100), std::vec![2; 100]);
        assert_eq!(on_file(&f, 0, 10), std::vec![0; 10]);
        c.send(&f).unwrap();
        assert_eq!(on_file(&f, 0, 10), std::vec![3; 10]);
        // An overwrite of waiting bytes lands after them, not under them.
        c.write(&f, 100, &[4; 8]).unwrap();
        c.write(&f, 100, &[5; 8]).unwrap();
        c.send(&f).unwrap();
        assert_eq!(on_file(&f, 100, 8), std::vec![5; 8]);
        // Past the capacity: sent, the rest waits.
        let big = std::vec![6u8; CAPACITY - 10];
        c.write(&f, 1 << 20, &big).unwrap();
        c.write(&f, (1 << 20) + big.len() as u64, &[7; 20]).unwrap();
        assert_eq!(on_file(&f, 1 << 20, 4), std::vec![6; 4]);
        let mut b = on_file(&f, (1 << 20) + big.len() as u64, 20);
        assert_eq!(b, std::vec![0; 20]);
        c.overlay((1 << 20) + big.len() as u64, &mut b);
        assert_eq!(b, std::vec![7; 20]);
        drop(f);
        let _ = std::fs::remove_file(p);
    }

    #[test]
    fn a_failed_send_keeps_the_bytes_and_reports_once() {
        let (f, p) = scratch(8192);
        let ro = File::open(&p).unwrap();
        let mut c = Combiner::default();
        c.write(&ro, 0, &[9; 16]).unwrap();
        assert!(!c.send_or_keep(&ro), "a read-only file refuses the write");
        assert!(c.write(&ro, 16, &[9; 16]).is_err(), "the kept error");
        // The bytes are still there and go out on a good file.
        c.send(&f).unwrap();
        assert_eq!(on_file(&f, 0, 16), std::vec![9; 16]);
        drop((f, ro));
        let _ = std::fs::remove_file(p);
    }
}
