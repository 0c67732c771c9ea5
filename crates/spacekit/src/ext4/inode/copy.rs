//! Copies between host files and files in the image: [`Image::copy_in`]
//! (sparse, by `SEEK_DATA`/`SEEK_HOLE`), [`Image::copy_from`] (a stream)
//! and [`Image::copy_out`] (extent by extent in the kernel where it can).

use std::io;
use std::vec::Vec;

use crate::ext4::device::kernel_copy;
use crate::ext4::error::{io as io_err, Ext4Error};
use crate::ext4::flags::{ENCRYPT_FL, INLINE_DATA_FL};
use crate::ext4::image::Image;
use crate::ext4::inode::data::Source;
use crate::ext4::inode::extent;
use crate::ext4::inode::file::ReadStore;

impl Image {
    /// Copies host file `src` into new (or empty) regular file `ino` from
    /// byte 0, as `cp` does: only the host's data ranges
    /// (`SEEK_DATA`/`SEEK_HOLE`; the whole file where the host file system
    /// cannot say) are copied, so
    /// the host's holes stay holes, and the size becomes the host file's
    /// length (a trailing hole included) if that is larger. On an image
    /// file ([`FileDevice`](crate::ext4::FileDevice)) the kernel copies the whole
    /// blocks of data ranges of at least [`COPY_CHUNK`] bytes
    /// (`copy_file_range(2)`, in pieces of up to [`KERNEL_CHUNK`] bytes);
    /// shorter ranges, all ranges on other devices, and where the kernel
    /// cannot copy between the two files, the bytes are read in pieces of
    /// [`READ_PIECE`] and every block of the image they fill with zeros
    /// stays a hole too (`cp --sparse=always`, `mke2fs -d`), while a
    /// range the kernel copies keeps its zeros as data (as `cp` copies).
    /// Returns the bytes written. Each piece is one [`Image::write`] per
    /// run of blocks that are not all zeros; nothing is flushed. `src`'s
    /// file offset is moved (by the seeks). A `src` that is not a regular
    /// file (a pipe, a FIFO, a character device), or one that gives its
    /// length as 0 (as `/proc` files do), is read from its offset to its
    /// end instead, as [`Image::copy_from`] reads a stream.
    ///
    /// # Errors
    /// As [`Image::write`]; [`Ext4Error::Io`] reading `src`.
    pub fn copy_in(&mut self, ino: u32, src: &std::fs::File) -> Result<u64, Ext4Error> {
        use std::os::unix::fs::FileExt;
        let meta = src.metadata().map_err(io_err("stat source file"))?;
        let len = meta.len();
        // A pipe, a FIFO or a character device has no length to copy up
        // to, and a `/proc` file says 0 bytes yet has some: their bytes
        // come only by reading to the end (a truly empty file costs one
        // read).
        if !meta.file_type().is_file() || len == 0 {
            return self.copy_from(ino, &mut &*src);
        }
        // A small file goes through memory, where all-zero pieces stay
        // holes anyway: with as many blocks as bytes it needs no seeks.
        // (Blocks can also count preallocation, so a larger file seeks.)
        let dense = len <= COPY_CHUNK as u64 && {
            use std::os::unix::fs::MetadataExt;
            meta.blocks().saturating_mul(512) >= len
        };
        let kernel = self.dev.file().is_some();
        // A large file the kernel copies keeps its zeros as data, so its
        // data ranges (`SEEK_DATA`: not its holes, nor blocks it only has
        // preallocated) are what it needs here at least: a shortfall is
        // refused before a byte is written (else most of a file that cannot
        // fit went into free blocks before the allocator said so).
        if kernel && len >= COPY_CHUNK as u64 {
            let bs = u64::from(self.info.block_size);
            let (mut need, mut at) = (0u64, 0u64);
            while let Some((data, hole)) = next_data(src, at, len)? {
                need += hole.div_ceil(bs) - data / bs;
                at = hole;
            }
            if need > self.free_blocks_count() {
                return Err(Ext4Error::NoSpace {
                    len: u32::try_from(need).unwrap_or(u32::MAX),
                    align: 1,
                });
            }
        }
        // Made on first use, no larger than the file: a small file's copy
        // must not pay for mapping a whole piece, and a file the kernel
        // copies needs none.
        let mut buf = Vec::new();
        let mut written = 0;
        let mut at = 0;
        while at < len {
            let range = if dense {
                Some((at, len))
            } else {
                next_data(src, at, len)?
            };
            let Some((data, hole)) = range else {
                break;
            };
            let mut off = data;
            // The kernel's copy pays a set-up per call: small ranges go
            // through memory.
            while kernel && hole - off >= COPY_CHUNK as u64 {
                let n = (hole - off).min(KERNEL_CHUNK);
                let piece = Source::File {
                    file: src,
                    at: off,
                    len: n,
                };
                self.write_from(ino, off, piece)?;
                written += n;
                off += n;
            }
            while off < hole {
                let n = (hole - off).min(READ_PIECE as u64) as usize;
                if buf.len() < n {
                    buf.resize(n, 0);
                }
                src.read_exact_at(&mut buf[..n], off)
                    .map_err(|e| io_err("read source file")(shrank(e)))?;
                written += self.write_nonzero(ino, off, &buf[..n])?;
                off += n as u64;
            }
            at = hole;
        }
        if self.inode(ino)?.size < len {
            self.truncate(ino, len)?;
        }
        Ok(written)
    }

    /// Writes `data` at byte `off` of file `ino`, leaving out every block
    /// of the image that it fills with zeros (so they stay holes, as
    /// `mke2fs -d` leaves them; a block it fills only in part is written
    /// if those bytes are not all zeros). Meant for a new file or bytes
    /// past its end, where a block left out reads as zeros; elsewhere it
    /// would keep what it held. Returns the bytes written.
    pub(crate) fn write_nonzero(
        &mut self,
        ino: u32,
        off: u64,
        data: &[u8],
    ) -> Result<u64, Ext4Error> {
        let bs = u64::from(self.info.block_size);
        let mut written = 0;
        // The pieces `data` makes of the image's blocks: [at, to) in `data`.
        let mut at = 0;
        let mut run: Option<usize> = None;
        while at < data.len() {
            let next = ((off + at as u64) / bs + 1) * bs - off;
            let to = (next as usize).min(data.len());
            let zero = all_zero(&data[at..to]);
            match (zero, run) {
                (false, None) => run = Some(at),
                (true, Some(r)) => {
                    self.write(ino, off + r as u64, &data[r..at])?;
                    written += (at - r) as u64;
                    run = None;
                }
                _ => {}
            }
            at = to;
        }
        if let Some(r) = run {
            self.write(ino, off + r as u64, &data[r..])?;
            written += (data.len() - r) as u64;
        }
        Ok(written)
    }

    /// Writes everything `src` yields into regular file `ino` from byte 0
    /// on, in pieces of [`COPY_CHUNK`] bytes (one [`Image::write`] each);
    /// returns the bytes written. For streams (a pipe, standard input); a
    /// host file goes faster and sparse through [`Image::copy_in`].
    ///
    /// # Errors
    /// As [`Image::write`]; [`Ext4Error::Io`] reading `src`.
    pub fn copy_from(&mut self, ino: u32, src: &mut dyn io::Read) -> Result<u64, Ext4Error> {
        let mut buf = std::vec![0u8; COPY_CHUNK];
        let mut at = 0u64;
        loop {
            // Fill the piece (a pipe hands out a little at a time).
            let mut n = 0;
            while n < buf.len() {
                match src.read(&mut buf[n..]) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(io_err("read source")(e)),
                }
            }
            if n == 0 {
                return Ok(at);
            }
            self.write(ino, at, &buf[..n])?;
            at += n as u64;
        }
    }

    /// Copies regular file `ino` out to host file `dst` (from byte 0,
    /// `dst` cut to the file's size), holes and unwritten extents left as
    /// holes. On an image file ([`FileDevice`](crate::ext4::FileDevice)) of
    /// blocks up to 4 KiB with no change pending over the file's blocks,
    /// each written extent is copied by the kernel (`copy_file_range(2)`:
    /// no pass through user space, as `cp` copies); otherwise, or where the
    /// kernel cannot copy between the two files, the bytes are read and
    /// written, and runs of 4 KiB of zeros are not written either (so a
    /// host file's holes inside a larger block come back). Returns the
    /// file's size.
    ///
    /// # Errors
    /// As [`Image::read`]; [`Ext4Error::Io`] writing `dst`.
    pub fn copy_out(&self, ino: u32, dst: &std::fs::File) -> Result<u64, Ext4Error> {
        use std::os::unix::fs::FileExt;
        if let Some(size) = self.copy_out_in_kernel(ino, dst)? {
            return Ok(size);
        }
        let mut buf = std::vec![0u8; COPY_CHUNK];
        let mut at = 0u64;
        loop {
            let n = self.read(ino, at, &mut buf)?;
            if n == 0 {
                break;
            }
            let zero = |i: usize| all_zero(&buf[i..(i + ZERO_RUN as usize).min(n)]);
            let mut k = 0;
            while k < n {
                let (start, z) = (k, zero(k));
                while k < n && zero(k) == z {
                    k = (k + ZERO_RUN as usize).min(n);
                }
                if !z {
                    dst.write_all_at(&buf[start..k], at + start as u64)
                        .map_err(io_err("write host file"))?;
                }
            }
            at += n as u64;
        }
        dst.set_len(at).map_err(io_err("write host file"))?;
        Ok(at)
    }

    /// [`Image::copy_out`] by `copy_file_range(2)`, extent by extent;
    /// `None` (nothing copied that matters: the caller copies everything)
    /// when the device is not a file, the file is inline, encrypted or not
    /// extent-mapped, a pending block of the cache lies in its extents, or
    /// the kernel refuses the copy.
    fn copy_out_in_kernel(&self, ino: u32, dst: &std::fs::File) -> Result<Option<u64>, Ext4Error> {
        let Some(img) = self.dev.file() else {
            return Ok(None);
        };
        if self.info.block_size > ZERO_RUN {
            // A block larger than the zero runs the copy through memory
            // leaves out would come out whole: holes the host file had
            // inside a block are kept only by that copy.
            return Ok(None);
        }
        let inode = self.inode(ino)?;
        if !inode.is_file() || inode.flags & (INLINE_DATA_FL | ENCRYPT_FL) != 0 {
            return Ok(None);
        }
        let Ok((root, inode)) = self.root_of_file(ino) else {
            return Ok(None);
        };
        let bs = u64::from(self.info.block_size);
        let seed = self.seed_of(ino, inode.generation);
        let exts = extent::extents(&root, &mut ReadStore(self), seed)?;
        let written: Vec<_> = exts
            .iter()
            .filter(|e| !e.unwritten && u64::from(e.logical) * bs < inode.size)
            .collect();
        if written.iter().any(|e| {
            self.pending_blocks
                .range(e.physical..e.physical + u64::from(e.len))
                .next()
                .is_some()
        }) {
            return Ok(None);
        }
        for e in written {
            let lo = u64::from(e.logical) * bs;
            let len = (e.end() * bs).min(inode.size) - lo;
            if !kernel_copy(img, e.physical * bs, dst, lo, len).map_err(io_err("copy file data"))? {
                return Ok(None);
            }
        }
        dst.set_len(inode.size).map_err(io_err("write host file"))?;
        Ok(Some(inode.size))
    }
}

/// A read of a source file that ended early: the file shrank since its
/// size was taken (another process cut it while it was being copied).
fn shrank(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        io::Error::new(
            e.kind(),
            "the file ended early: it shrank while being copied",
        )
    } else {
        e
    }
}

/// Whether every byte of `b` is zero (the SIMD test the migration
/// sender uses for zero pages; a byte-by-byte test costs more than the
/// copy around it).
fn all_zero(b: &[u8]) -> bool {
    crate::migration::zero::is_zero(crate::arch::Level::detect(), b)
}

/// The runs of zeros [`Image::copy_out`] leaves out through memory (a
/// host page).
const ZERO_RUN: u32 = 4096;

/// The shortest data range [`Image::copy_in`] has the kernel copy (and the
/// piece size of [`Image::copy_from`]).
pub const COPY_CHUNK: usize = 1 << 20;

/// The piece size of [`Image::copy_in`] through user space (one
/// [`Image::write`] each): small enough that a populate's memory stays a
/// small part of what it copies.
pub const READ_PIECE: usize = 256 << 10;

/// The piece size of [`Image::copy_in`] in the kernel (one write, one
/// undo record, each).
pub const KERNEL_CHUNK: u64 = 64 << 20;

/// The next data range `[data, hole)` of `f` at or after byte `at` (below
/// `len`), or `None` if only a hole follows. Where `SEEK_DATA` is not
/// supported, everything from `at` is data.
fn next_data(f: &std::fs::File, at: u64, len: u64) -> Result<Option<(u64, u64)>, Ext4Error> {
    use std::os::fd::AsRawFd;
    let fd = f.as_raw_fd();
    let seek = |off: u64, whence: i32| -> io::Result<u64> {
        // SAFETY: `fd` is an open descriptor borrowed from `f` for the
        // call; `lseek` only moves its file offset (documented on
        // `copy_in`; the copy itself uses positioned reads).
        let r = unsafe { libc::lseek(fd, off as libc::off_t, whence) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as u64)
        }
    };
    let data = match seek(at, libc::SEEK_DATA) {
        Ok(d) => d,
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(Some((at, len))),
        Err(e) => return Err(io_err("seek source file")(e)),
    };
    if data >= len {
        return Ok(None);
    }
    let hole = seek(data, libc::SEEK_HOLE)
        .map_err(io_err("seek source file"))?
        .min(len);
    Ok(Some((data, hole)))
}

#[cfg(test)]
mod tests {
    use super::{all_zero, shrank};
    use crate::ext4::device::kernel_copy;

    /// A source that ends before the range asked for is named as the
    /// source that shrank, through memory and in the kernel.
    #[test]
    fn a_source_that_ended_early_is_named() {
        use std::os::unix::fs::FileExt;
        let dir = std::env::temp_dir().join(std::format!("sk-shrank-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::write(&a, [7u8; 5000]).unwrap();
        let src = std::fs::File::open(&a).unwrap();
        let dst = std::fs::File::create(&b).unwrap();
        let mut buf = [0u8; 8192];
        let e = shrank(src.read_exact_at(&mut buf, 0).unwrap_err());
        assert!(e.to_string().contains("shrank"), "{e}");
        let e = kernel_copy(&src, 0, &dst, 0, 8192).unwrap_err();
        assert!(e.to_string().contains("ended 3192 bytes early"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// One non-zero byte anywhere (in a 16-byte word or the tail) is seen.
    #[test]
    fn all_zero_sees_every_byte() {
        for len in 0..70 {
            let mut b = std::vec![0u8; len];
            assert!(all_zero(&b), "{len} zeros");
            for i in 0..len {
                b[i] = 0x80;
                assert!(!all_zero(&b), "len {len}, byte {i}");
                b[i] = 0;
            }
        }
    }
}
