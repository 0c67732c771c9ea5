//! Where an image's bytes live: the [`Device`] trait, with a file backend
//! ([`FileDevice`], the image file and its redo log beside it) and an
//! in-memory one ([`MemDevice`]). [`super::Image`] reads and writes only
//! through a device, so tests put a fault-injecting device between the image
//! and its file instead of the image carrying fault-injection state.

mod combine;

use combine::write_all_at;

use std::borrow::ToOwned;
use std::cell::RefCell;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::vec::Vec;

/// The storage under an [`Image`](super::Image): the file system's bytes,
/// addressed by byte offset, and a second, small byte store for the redo
/// log that makes a flush crash-safe.
///
/// A flush calls, in order: [`Device::write_log`] (the log's contents from
/// offset 0, then its trailer), [`Device::sync_log`], one
/// [`Device::write_at`] per changed block, [`Device::sync`], then
/// [`Device::remove_log`] (and, first of all, [`Device::sync`] when file
/// data was written since the last flush). A device must make each sync
/// durable when it returns (a `sync` is a barrier: writes before it are
/// durable after it); the log's removal need not be.
///
/// ```
/// use spacekit::ext4::{Device, MemDevice};
///
/// let mut dev = MemDevice::new(vec![0; 4096]);
/// dev.write_at(1024, b"ext4")?;
/// let mut buf = [0u8; 4];
/// dev.read_at(1024, &mut buf)?;
/// assert_eq!(&buf, b"ext4");
/// assert_eq!(dev.read_log()?, None);
/// # Ok::<(), std::io::Error>(())
/// ```
pub trait Device: fmt::Debug + Send {
    /// The length of the image in bytes.
    ///
    /// # Errors
    /// An I/O error from the backend.
    fn len(&self) -> io::Result<u64>;

    /// Whether the image is empty (`len() == 0`).
    ///
    /// # Errors
    /// As [`Device::len`].
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Whether writes are allowed (a read-only device refuses them).
    fn writable(&self) -> bool;

    /// Fills `buf` from byte `offset`.
    ///
    /// # Errors
    /// An I/O error, [`io::ErrorKind::UnexpectedEof`] past the end.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;

    /// Writes all of `data` at byte `offset`.
    ///
    /// # Errors
    /// An I/O error; part of `data` may have been written.
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()>;

    /// Makes every write so far durable.
    ///
    /// # Errors
    /// An I/O error.
    fn sync(&mut self) -> io::Result<()>;

    /// The redo log's bytes, or `None` if there is no log.
    ///
    /// # Errors
    /// An I/O error other than the log not existing.
    fn read_log(&self) -> io::Result<Option<Vec<u8>>>;

    /// Writes `data` at byte `offset` of the redo log; at offset 0 the log
    /// is first created empty (or emptied).
    ///
    /// # Errors
    /// An I/O error; part of `data` may have been written.
    fn write_log(&mut self, offset: u64, data: &[u8]) -> io::Result<()>;

    /// Makes the log, and its existence, durable.
    ///
    /// # Errors
    /// An I/O error.
    fn sync_log(&mut self) -> io::Result<()>;

    /// Removes the log; `Ok` if there is none. The removal need not be
    /// durable when this returns: the image checks a log that comes back
    /// before it replays it.
    ///
    /// # Errors
    /// An I/O error.
    fn remove_log(&mut self) -> io::Result<()>;

    /// Where the log lives, for error messages (a path for a file device).
    fn log_name(&self) -> PathBuf;

    /// Asks the device to start writing back what was written so far,
    /// without waiting for it (a hint: the next [`Device::sync`] is still
    /// what makes it durable). Does nothing by default.
    ///
    /// # Errors
    /// An I/O error from the backend.
    fn start_writeback(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// [`Device::read_at`] without read-ahead past `buf`: a read that
    /// spans several metadata blocks (a flex group's bitmaps) must not
    /// pull in the blocks after them. Reads as `read_at` by default.
    ///
    /// # Errors
    /// As [`Device::read_at`].
    fn read_exact_range(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.read_at(offset, buf)
    }

    /// The byte offset just past the writes the device holds back to
    /// combine them, if it holds any: a write there joins them. `None` by
    /// default.
    fn waiting_end(&self) -> Option<u64> {
        None
    }

    /// The host file holding the image, when the device is one file read
    /// and written as it is (byte `n` of the image at byte `n` of the
    /// file): lets the kernel copy file data out without a pass through
    /// user space (`copy_file_range(2)`). `None` by default.
    fn file(&self) -> Option<&File> {
        None
    }
}

/// An image file and its redo log beside it (`<image>.spacekit-redo`),
/// with positioned reads and writes (`pread`/`pwrite` on Unix). Writes
/// that follow each other are combined into one `pwrite` of up to 256 KiB
/// (reads see them at once; [`Device::sync`] sends them first).
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    log: PathBuf,
    writable: bool,
    waiting: RefCell<combine::Combiner>,
}

impl FileDevice {
    /// Opens the image file at `path`, for writing too if `writable`.
    ///
    /// # Errors
    /// An I/O error opening the file; for writing, the error `access(2)`
    /// gives when the image's directory is not
    /// writable, since the redo log is made there: refused at the open,
    /// not at the first flush after all the work.
    ///
    /// The open holds a lock on the image file until the device is dropped
    /// (a POSIX record lock over the whole file, exclusive for writing,
    /// shared for reading), so another program's open is refused instead
    /// of two writers each overwriting the other's metadata; that error
    /// carries a [`Busy`] (see [`Busy::of`]). A read-write open of a file a
    /// loop device is attached to is refused the same way. Where the file
    /// system takes no locks, the open goes ahead unlocked.
    ///
    /// The lock is the process's, as POSIX record locks are: a second open
    /// of the same file in the same process is not refused, and closing
    /// any descriptor of the file in this process (another device on it
    /// being dropped, for one) releases it.
    pub fn open(path: impl AsRef<Path>, writable: bool) -> io::Result<FileDevice> {
        // The log goes beside the image file itself, whatever path names
        // it (a symlink, `..`): a crash's log is found by every path.
        let given = path.as_ref();
        let real = fs::canonicalize(given);
        let path = real.as_deref().unwrap_or(given);
        // A log an older version left beside the path given (not the file
        // it resolves to) is still the one to replay.
        let old_log = plain_log_path(given);
        let log = if !plain_log_path(path).exists() && old_log.exists() {
            old_log
        } else {
            plain_log_path(path)
        };
        let file = OpenOptions::new().read(true).write(writable).open(path)?;
        lock(&file, writable)?;
        if writable {
            if let Some(dev) = loop_device_of(&file) {
                return Err(Busy::error(std::format!(
                    "{dev} is attached to it (the kernel may have it mounted); detach it first (losetup -d)"
                )));
            }
            log_dir_writable(path)?;
        }
        Ok(FileDevice {
            file,
            log,
            writable,
            waiting: RefCell::default(),
        })
    }
}

/// Why an image file is busy: the payload of the [`io::Error`] that
/// [`FileDevice::open`] returns for an image another program holds.
#[derive(Debug)]
pub struct Busy(pub std::string::String);

impl fmt::Display for Busy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Busy {}

impl Busy {
    fn error(why: std::string::String) -> io::Error {
        io::Error::new(io::ErrorKind::ResourceBusy, Busy(why))
    }

    /// The [`Busy`] an error from [`FileDevice::open`] carries, if any.
    pub fn of(e: &io::Error) -> Option<&Busy> {
        e.get_ref().and_then(|x| x.downcast_ref::<Busy>())
    }
}

/// Takes the process's lock on the image file: exclusive when `writable`,
/// shared otherwise, without waiting (a POSIX record lock over the whole
/// file, held until the process closes a descriptor of the file).
fn lock(file: &File, writable: bool) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: an all-zero `flock` is a valid value of the plain C
        // struct; the fields the call reads are set below.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = if writable {
            libc::F_WRLCK
        } else {
            libc::F_RDLCK
        } as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        // l_start = 0, l_len = 0: the whole file.
        // SAFETY: the descriptor is open for the whole call and `fl` is a
        // valid, initialised `flock` the call only reads.
        let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &fl) };
        if r != 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EACCES) => Err(Busy::error(
                    if writable {
                        "another program has it open (one writer at a time, and no reader beside a writer)"
                    } else {
                        "another program has it open for writing"
                    }
                    .into(),
                )),
                // A file system without locks (some network ones): go on
                // unlocked, as before.
                _ => Ok(()),
            };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, writable);
    Ok(())
}

/// The loop device (`/dev/loopN`) attached to `file`, if any (Linux: the
/// `backing_file` each loop device lists in sysfs, compared by device and
/// inode number).
fn loop_device_of(file: &File) -> Option<std::string::String> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt;
        let me = file.metadata().ok()?;
        for e in fs::read_dir("/sys/block").ok()?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with("loop") {
                continue;
            }
            let Ok(back) = fs::read_to_string(e.path().join("loop/backing_file")) else {
                continue;
            };
            let back = back.trim_end_matches('\n');
            if let Ok(m) = fs::metadata(back) {
                if m.dev() == me.dev() && m.ino() == me.ino() {
                    return Some(std::format!("/dev/{name}"));
                }
            }
        }
        None
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        None
    }
}

/// Whether this process may make the redo log of the image at `image`
/// (its directory writable and searchable, by the real ids); the
/// error names the directory and the log.
fn log_dir_writable(image: &Path) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::ffi::OsStrExt;
        let dir = match image.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // By the real ids (flags 0: the plain `faccessat` call, which
        // every seccomp profile allows; `AT_EACCESS` needs `faccessat2`,
        // which some answer with EPERM).
        // SAFETY: `c` is NUL-terminated; faccessat only reads it.
        let r = unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK | libc::X_OK, 0) };
        if r != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                std::format!(
                    "the redo log {} cannot be made: {}: {e}",
                    log_path(image).display(),
                    dir.display()
                ),
            ));
        }
    }
    Ok(())
}

/// The redo log path for the image at `image`: `<image>.spacekit-redo`,
/// beside the file `image` resolves to (symlinks followed) if it exists.
pub(crate) fn log_path(image: &Path) -> PathBuf {
    if let Ok(real) = fs::canonicalize(image) {
        return plain_log_path(&real);
    }
    plain_log_path(image)
}

fn plain_log_path(image: &Path) -> PathBuf {
    let mut s = image.as_os_str().to_owned();
    s.push(".spacekit-redo");
    PathBuf::from(s)
}

impl Device for FileDevice {
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn writable(&self) -> bool {
        self.writable
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        read_exact_at(&self.file, offset, buf)?;
        self.waiting.borrow().overlay(offset, buf);
        Ok(())
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.waiting.get_mut().write(&self.file, offset, data)
    }

    fn read_exact_range(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        // Read-ahead over a fresh image file reaches holes and blocks not
        // yet cached after the ones asked for: a 64 KiB read of a flex
        // group's bitmaps took 3 to 15 ms here that way, 50 us without.
        // `POSIX_FADV_RANDOM` turns it off for this open file, `NORMAL`
        // back on (file data read later still gets it).
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            let fd = self.file.as_raw_fd();
            // SAFETY: `fd` is this device's open file for the whole call;
            // posix_fadvise only sets read-ahead state on it (a failure
            // leaves read-ahead as it was: the read is still right).
            unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_RANDOM) };
            let r = self.read_at(offset, buf);
            // SAFETY: as above.
            unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_NORMAL) };
            r
        }
        #[cfg(not(target_os = "linux"))]
        self.read_at(offset, buf)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.waiting.get_mut().send(&self.file)?;
        // fdatasync: writes inside the file never change its size, and the
        // data is what a flush orders.
        self.file.sync_data()
    }

    fn read_log(&self) -> io::Result<Option<Vec<u8>>> {
        match fs::read(&self.log) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn write_log(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let f = OpenOptions::new()
            .write(true)
            .create(offset == 0)
            .truncate(offset == 0)
            .open(&self.log)?;
        write_all_at(&f, offset, data)
    }

    fn sync_log(&mut self) -> io::Result<()> {
        // fdatasync covers the new file's size; the directory sync makes
        // its name durable.
        File::open(&self.log)?.sync_data()?;
        sync_dir(&self.log)
    }

    fn remove_log(&mut self) -> io::Result<()> {
        // Not fsynced: a log that comes back after a power failure is
        // checked before it is replayed (see `redo.rs`).
        match fs::remove_file(&self.log) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn log_name(&self) -> PathBuf {
        self.log.clone()
    }

    fn file(&self) -> Option<&File> {
        // The kernel must see the waiting bytes before it reads or writes
        // the file; if they cannot be sent, the caller copies through
        // `read_at`/`write_at`, and the next write reports the error.
        self.waiting
            .borrow_mut()
            .send_or_keep(&self.file)
            .then_some(&self.file)
    }

    fn start_writeback(&mut self) -> io::Result<()> {
        self.waiting.get_mut().send(&self.file)?;
        start_writeback(std::os::fd::AsFd::as_fd(&self.file))
    }

    fn waiting_end(&self) -> Option<u64> {
        self.waiting.borrow().end()
    }
}

impl Drop for FileDevice {
    fn drop(&mut self) {
        // Best effort: what was written reaches the file, as it would have
        // without combining (unsynced either way).
        let _ = self.waiting.get_mut().send(&self.file);
    }
}

/// Asks the kernel to start writing back `file`'s dirty pages, without
/// waiting (Linux; nothing elsewhere).
pub(crate) fn start_writeback(file: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is an open file for the whole call; the
        // call only starts write-back of its dirty pages (offset 0, length
        // 0: the whole file) and does not wait.
        let r =
            unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
    Ok(())
}

/// fsyncs the directory holding `path`, so a created or removed log is
/// durable (a no-op where directories cannot be opened).
fn sync_dir(path: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(())
    }
}

/// Reads `buf.len()` bytes at `offset` (one `pread` on Unix).
fn read_exact_at(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
    }
    #[cfg(not(unix))]
    {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = file;
        f.seek(SeekFrom::Start(offset))?;
        f.read_exact(buf)
    }
}

/// An image held in memory, with its redo log: for tests, and for building
/// an image before writing it out in one piece. Writes past the end are
/// refused (an image does not grow).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemDevice {
    image: Vec<u8>,
    log: Option<Vec<u8>>,
    read_only: bool,
}

impl MemDevice {
    /// A writable device holding `image`.
    pub fn new(image: Vec<u8>) -> MemDevice {
        MemDevice {
            image,
            log: None,
            read_only: false,
        }
    }

    /// The same device, refusing writes.
    pub fn read_only(self) -> MemDevice {
        MemDevice {
            read_only: true,
            ..self
        }
    }

    /// The image's bytes.
    pub fn image(&self) -> &[u8] {
        &self.image
    }

    /// The redo log's bytes, if there is a log.
    pub fn log(&self) -> Option<&[u8]> {
        self.log.as_deref()
    }

    /// The image's bytes, consuming the device.
    pub fn into_image(self) -> Vec<u8> {
        self.image
    }
}

/// `offset..offset + len` inside `size` bytes, as `usize`s.
fn span(offset: u64, len: usize, size: usize) -> io::Result<(usize, usize)> {
    usize::try_from(offset)
        .ok()
        .and_then(|s| Some((s, s.checked_add(len)?)))
        .filter(|&(_, e)| e <= size)
        .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))
}

impl MemDevice {
    fn check_writable(&self) -> io::Result<()> {
        if self.read_only {
            return Err(io::Error::from(io::ErrorKind::PermissionDenied));
        }
        Ok(())
    }
}

impl Device for MemDevice {
    fn len(&self) -> io::Result<u64> {
        Ok(self.image.len() as u64)
    }

    fn writable(&self) -> bool {
        !self.read_only
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let (s, e) = span(offset, buf.len(), self.image.len())?;
        buf.copy_from_slice(&self.image[s..e]);
        Ok(())
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.check_writable()?;
        let (s, e) = span(offset, data.len(), self.image.len())?;
        self.image[s..e].copy_from_slice(data);
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn read_log(&self) -> io::Result<Option<Vec<u8>>> {
        Ok(self.log.clone())
    }

    fn write_log(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.check_writable()?;
        let log = if offset == 0 {
            self.log.insert(Vec::new())
        } else {
            self.log.get_or_insert_with(Vec::new)
        };
        let s =
            usize::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let e = s + data.len();
        if log.len() < e {
            log.resize(e, 0);
        }
        log[s..e].copy_from_slice(data);
        Ok(())
    }

    fn sync_log(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn remove_log(&mut self) -> io::Result<()> {
        self.check_writable()?;
        self.log = None;
        Ok(())
    }

    fn log_name(&self) -> PathBuf {
        PathBuf::from("(redo log in memory)")
    }
}

/// Copies `len` bytes at byte `from` of `src` to byte `to` of `dst` in the
/// kernel (`copy_file_range(2)`). `Ok(false)` when the kernel cannot copy
/// between these two files (another file system on an old kernel, a file
/// system without the call): the caller copies the bytes itself.
pub(super) fn kernel_copy(
    src: &std::fs::File,
    from: u64,
    dst: &std::fs::File,
    to: u64,
    len: u64,
) -> io::Result<bool> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let (mut off_in, mut off_out) = (from as libc::loff_t, to as libc::loff_t);
        let mut left = len;
        while left > 0 {
            let n = usize::try_from(left).unwrap_or(usize::MAX).min(1 << 30);
            // SAFETY: both descriptors are open files borrowed for the
            // call; the offsets are locals the kernel reads and advances.
            let r = unsafe {
                libc::copy_file_range(
                    src.as_raw_fd(),
                    &mut off_in,
                    dst.as_raw_fd(),
                    &mut off_out,
                    n,
                    0,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(
                        libc::ENOSYS | libc::EXDEV | libc::EINVAL | libc::EOPNOTSUPP | libc::EBADF,
                    ) => return Ok(false),
                    _ => return Err(e),
                }
            }
            if r == 0 {
                // The source ends before the range: a host file that
                // shrank while being copied in, or an image file cut
                // inside a file's extent while one is copied out.
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    std::format!(
                        "the source ended {left} bytes early: it shrank while being copied"
                    ),
                ));
            }
            left -= r as u64;
        }
        Ok(true)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (src, from, dst, to, len);
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_device_reads_writes_and_refuses_past_the_end() {
        let mut d = MemDevice::new(vec![0; 100]);
        d.write_at(90, &[1; 10]).unwrap();
        assert_eq!(
            d.write_at(95, &[1; 10]).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        let mut b = [0u8; 11];
        assert!(d.read_at(90, &mut b).is_err());
        d.read_at(89, &mut b).unwrap();
        assert_eq!(b, [0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]);
        assert!(d.read_at(u64::MAX, &mut b).is_err());
        d.write_log(0, b"abc").unwrap();
        d.write_log(5, b"de").unwrap();
        assert_eq!(d.read_log().unwrap().unwrap(), b"abc\0\0de");
        d.write_log(0, b"x").unwrap();
        assert_eq!(d.log(), Some(&b"x"[..]));
        d.remove_log().unwrap();
        assert_eq!(d.read_log().unwrap(), None);
        let mut ro = d.read_only();
        assert!(!ro.writable());
        assert!(ro.write_at(0, &[1]).is_err());
        assert!(ro.write_log(0, &[1]).is_err());
    }
}
