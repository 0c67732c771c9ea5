//! A host directory as a populate source ([`Populate::add_dir`]): walked
//! depth first with each directory's names in byte order (never `readdir`
//! order), on a second thread that also reads the files, so the image is
//! built while the next files are read.
//!
//! Each entry is reached from its directory's descriptor (`openat`,
//! `fstatat`: one name looked up, not the whole path). A regular file or a
//! directory (as the listing's `d_type` says) is opened first (a file
//! without blocking, so a name replaced by a FIFO cannot hang the walk),
//! and its type, permission bits (setuid, setgid and sticky too), owner,
//! times with nanoseconds and extended attributes (`flistxattr` /
//! `fgetxattr`: `user.*`, `security.*`, `trusted.*` as root, POSIX ACLs)
//! come through the descriptor. Other entries' (symlinks, device nodes,
//! FIFOs, sockets, and any entry of a listing without types) come from
//! `fstatat`, and their xattrs from `llistxattr` / `lgetxattr` on the
//! whole path, not following a symlink. Two directories of the path are
//! open at a time, however deep the tree. Files with more than one link become one inode and
//! hard links (by device and inode number). Files up to [`IN_MEMORY`] bytes
//! are read whole on the walking thread; larger ones are copied by
//! [`Image::copy_in`] (holes stay holes, the kernel copies big ranges).
//! The walking thread stays at most [`BUDGET`] bytes ahead, a larger file
//! (handed over open) counting as [`FILE_HELD`] bytes, so at most a few
//! of them are open at once.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::string::{String, ToString};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Condvar, Mutex};
use std::vec::Vec;

use crate::ext4::error::{host_io, Ext4Error};
use crate::ext4::namespace::{NodeKind, Timestamp};
use crate::ext4::populate::{Contents, Entry, EntryKind, Meta, Populate};

/// Files up to this size are read into memory by the walking thread.
pub const IN_MEMORY: u64 = 256 << 10;
/// How many bytes of file contents the walking thread may hold ahead of
/// the image.
pub const BUDGET: u64 = 1 << 20;
/// What a file larger than [`IN_MEMORY`], handed over open, counts against
/// [`BUDGET`]: at most 16 such files wait open at once.
pub const FILE_HELD: u64 = BUDGET / 16;

/// What the walking thread hands over.
enum Kind {
    Dir,
    Bytes(Vec<u8>),
    File(fs::File),
    Symlink(Vec<u8>),
    Node(NodeKind),
    HardLink(Vec<u8>),
}

/// One walked entry (its path relative to the top).
struct Item {
    path: Vec<u8>,
    kind: Kind,
    meta: Meta,
    /// Bytes of contents held in memory, or [`FILE_HELD`] for a file
    /// handed over open (counted against [`BUDGET`]).
    held: u64,
}

/// The bytes the walking thread holds ahead, whether the consumer has
/// gone, and whether the walking thread waits (so the consumer wakes it
/// only then: a wake-up is a system call).
#[derive(Default)]
struct Budget {
    state: Mutex<Held>,
    cond: Condvar,
}

#[derive(Default)]
struct Held {
    bytes: u64,
    gone: bool,
    waiting: bool,
}

impl Budget {
    /// Waits until `n` more bytes fit (or nothing is held); false when the
    /// consumer has gone.
    fn take(&self, n: u64) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while !s.gone && s.bytes > 0 && s.bytes + n > BUDGET {
            s.waiting = true;
            s = self.cond.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.waiting = false;
        s.bytes += n;
        !s.gone
    }

    /// Whether `n` more bytes fit now.
    fn fits(&self, n: u64) -> bool {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.bytes == 0 || s.bytes + n <= BUDGET
    }

    fn give(&self, n: u64) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.bytes = s.bytes.saturating_sub(n);
        if s.waiting && s.bytes <= BUDGET / 2 {
            self.cond.notify_all();
        }
    }

    fn close(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.gone = true;
        self.cond.notify_all();
    }
}

/// Closes the budget when the consumer leaves (also on a panic).
struct CloseOnDrop<'a>(&'a Budget);

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl Populate<'_> {
    /// Adds everything under host directory `dir` (not `dir` itself, whose
    /// permission bits, owner, times and xattrs go to the populate's
    /// directory), as [`Populate::add`] would one entry at a time, in byte
    /// order of names, depth first.
    ///
    /// # Errors
    /// [`Ext4Error::Io`] reading the host tree (the context names the
    /// call and the path); [`Ext4Error::PopulateNoSpace`] when the image
    /// runs out of blocks or inodes (after the rest of the tree was
    /// counted); as [`Populate::add`]. After an error the populate is
    /// rolled back.
    pub fn add_dir(&mut self, dir: &Path) -> Result<(), Ext4Error> {
        let top = fs::symlink_metadata(dir).map_err(host_io("lstat", dir))?;
        if !top.is_dir() {
            return Err(Ext4Error::NotADirectory {
                path: dir.display().to_string(),
            });
        }
        let top = open_dir(dir)?;
        let budget = Budget::default();
        let (tx, rx) = sync_channel::<Vec<Result<Item, Ext4Error>>>(16);
        std::thread::scope(|s| {
            let b = &budget;
            s.spawn(move || {
                let mut w = Walker {
                    tx,
                    budget: b,
                    links: HashMap::new(),
                    batch: Vec::new(),
                    batch_bytes: 0,
                };
                let top_meta = fstat(&top)
                    .map_err(|e| host_io("fstat", dir)(e))
                    .and_then(|st| {
                        let x = xattrs_of(&Target::Fd(top.as_raw_fd()), &|| dir.to_path_buf())?;
                        Ok(meta_of(&st, x))
                    });
                let ok = match top_meta {
                    Ok(meta) => w.send(Ok(Item {
                        path: Vec::new(),
                        kind: Kind::Dir,
                        meta,
                        held: 0,
                    })),
                    Err(e) => w.send(Err(e)),
                };
                if ok {
                    if let Err(e) = w.walk(top, dir, &mut Vec::new()) {
                        w.send(Err(e));
                    }
                }
                w.hand_over();
            });
            let _close = CloseOnDrop(&budget);
            let r = self.consume(rx, &budget);
            if r.is_err() {
                // A host error between entries: nothing of the tree stays.
                self.fail(false);
            }
            r
        })
    }

    /// Adds what the walking thread sends until it is done or an entry
    /// fails.
    fn consume(
        &mut self,
        rx: Receiver<Vec<Result<Item, Ext4Error>>>,
        budget: &Budget,
    ) -> Result<(), Ext4Error> {
        let mut room = false;
        for item in rx.into_iter().flatten() {
            let item = item?;
            if item.held > 0 {
                budget.give(item.held);
            }
            let kind = match item.kind {
                Kind::Dir => EntryKind::Dir,
                Kind::Bytes(b) => EntryKind::File(Contents::Bytes(b)),
                Kind::File(f) => EntryKind::File(Contents::Host(f)),
                Kind::Symlink(t) => EntryKind::Symlink(t),
                Kind::Node(n) => EntryKind::Node(n),
                Kind::HardLink(t) => EntryKind::HardLink(t),
            };
            let entry = Entry {
                path: item.path,
                kind,
                meta: item.meta,
            };
            match self.add(entry) {
                Ok(()) => {}
                Err(Ext4Error::NoSpace { .. } | Ext4Error::NoFreeInodes) => room = true,
                Err(e) => return Err(e),
            }
        }
        if room {
            return Err(self.shortfall());
        }
        Ok(())
    }
}

/// The walking thread.
struct Walker<'b> {
    tx: SyncSender<Vec<Result<Item, Ext4Error>>>,
    budget: &'b Budget,
    /// First path of each multiply-linked file, by (device, inode).
    links: HashMap<(u64, u64), Vec<u8>>,
    /// Items not handed over yet: they go in batches, as each hand-over
    /// may wake the other thread (a system call).
    batch: Vec<Result<Item, Ext4Error>>,
    batch_bytes: u64,
}

/// Items per hand-over, at most.
const BATCH: usize = 64;

impl Walker<'_> {
    /// Queues `item` for the consumer, handing the batch over when it is
    /// full (or holds a quarter of [`BUDGET`], or is an error); false when
    /// the consumer has gone.
    fn send(&mut self, item: Result<Item, Ext4Error>) -> bool {
        let last = item.is_err();
        self.batch_bytes += item.as_ref().map_or(0, |i| i.held);
        self.batch.push(item);
        if last || self.batch.len() >= BATCH || self.batch_bytes >= BUDGET / 4 {
            return self.hand_over();
        }
        true
    }

    /// Hands the batch over; false when the consumer has gone.
    fn hand_over(&mut self) -> bool {
        self.batch_bytes = 0;
        if self.batch.is_empty() {
            return true;
        }
        self.tx.send(std::mem::take(&mut self.batch)).is_ok()
    }

    /// Reserves `n` bytes of [`BUDGET`] (handing the batch over first if
    /// the walk must wait: the consumer must see those bytes to give them
    /// back); false when the consumer has gone.
    fn reserve(&mut self, n: u64) -> bool {
        if !self.budget.fits(n) && !self.hand_over() {
            return false;
        }
        self.budget.take(n)
    }

    /// Walks directory `dir` (open as `fd`; relative path `rel`): its names
    /// in byte order, each entry sent, directories walked after their
    /// entry. Entries are reached from the directory's descriptor (one
    /// name looked up, not the whole path), and a regular file or a
    /// directory is opened first and then asked for its status and xattrs
    /// through the descriptor, so each costs one lookup. Returns the
    /// directory's descriptor: while a subdirectory is walked its parent's
    /// is closed, and reopened from it (`..`) after, so a deep tree keeps
    /// two directories open, not one per level.
    fn walk(&mut self, fd: OwnedFd, dir: &Path, rel: &mut Vec<u8>) -> Result<OwnedFd, Ext4Error> {
        let mut fd = fd;
        for name in names_of(&fd, dir)? {
            let len = rel.len();
            if len > 0 {
                rel.push(b'/');
            }
            rel.extend_from_slice(name.name.as_bytes());
            let path = || dir.join(std::ffi::OsStr::from_bytes(name.name.as_bytes()));
            let (st, opened) = stat_entry(&fd, &name, &path)?;
            let target = match &opened {
                Some(f) => Target::Fd(f.as_raw_fd()),
                None => Target::path(&path())?,
            };
            let xattrs = xattrs_of(&target, &path)?;
            let meta = meta_of(&st, xattrs);
            let (kind, sub) = self.kind_of(opened, &fd, &name.name, &path, rel, &st)?;
            let held = match &kind {
                Kind::Bytes(b) => b.len() as u64,
                Kind::File(_) => FILE_HELD,
                _ => 0,
            };
            if held > 0 && !self.reserve(held) {
                return Ok(fd);
            }
            let item = Item {
                path: rel.clone(),
                kind,
                meta,
                held,
            };
            if !self.send(Ok(item)) {
                return Ok(fd);
            }
            // Only a directory comes back open from `kind_of`.
            if let Some(sub) = sub {
                drop(fd);
                let sub = self.walk(sub, &path(), rel)?;
                fd = open_at(&sub, c"..", libc::O_RDONLY | libc::O_DIRECTORY)
                    .map_err(|e| host_io("open", &dir.join(".."))(e))?;
            }
            rel.truncate(len);
        }
        Ok(fd)
    }

    /// What the entry `name` of directory `dirfd` is (`st` its status,
    /// `opened` its descriptor when it was opened), with its contents or
    /// target; and a directory's descriptor, to walk it.
    fn kind_of(
        &mut self,
        opened: Option<OwnedFd>,
        dirfd: &OwnedFd,
        name: &CStr,
        path: &dyn Fn() -> PathBuf,
        rel: &[u8],
        st: &libc::stat64,
    ) -> Result<(Kind, Option<OwnedFd>), Ext4Error> {
        let fmt = st.st_mode & libc::S_IFMT;
        if fmt != libc::S_IFDIR && st.st_nlink > 1 {
            match self.links.entry((st.st_dev, st.st_ino)) {
                std::collections::hash_map::Entry::Occupied(first) => {
                    return Ok((Kind::HardLink(first.get().clone()), None));
                }
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(rel.to_vec());
                }
            }
        }
        let kind = match fmt {
            libc::S_IFDIR => return Ok((Kind::Dir, opened)),
            libc::S_IFREG => {
                let f = match opened {
                    Some(fd) => fs::File::from(fd),
                    None => fs::File::from(
                        open_at(dirfd, name, libc::O_RDONLY)
                            .map_err(|e| host_io("open", &path())(e))?,
                    ),
                };
                if st.st_size as u64 > IN_MEMORY {
                    Kind::File(f)
                } else {
                    Kind::Bytes(
                        read_whole(&f, st.st_size as usize)
                            .map_err(|e| host_io("read", &path())(e))?,
                    )
                }
            }
            libc::S_IFLNK => Kind::Symlink(
                read_link_at(dirfd, name).map_err(|e| host_io("readlink", &path())(e))?,
            ),
            libc::S_IFCHR | libc::S_IFBLK => {
                let (major, minor) = (libc::major(st.st_rdev), libc::minor(st.st_rdev));
                if fmt == libc::S_IFCHR {
                    Kind::Node(NodeKind::Char { major, minor })
                } else {
                    Kind::Node(NodeKind::Block { major, minor })
                }
            }
            libc::S_IFIFO => Kind::Node(NodeKind::Fifo),
            _ => Kind::Node(NodeKind::Socket),
        };
        Ok((kind, None))
    }
}

/// The first `size` bytes of `f` (fewer if it ends sooner), read straight
/// into the vector's spare room (no zeroing), one `read` for a file that
/// has them all.
fn read_whole(f: &fs::File, size: usize) -> std::io::Result<Vec<u8>> {
    let mut b: Vec<u8> = Vec::with_capacity(size);
    while b.len() < size {
        let want = size - b.len();
        let spare = &mut b.spare_capacity_mut()[..want];
        // SAFETY: `f` is an open file; the kernel writes at most
        // `spare.len()` bytes into the vector's spare room.
        let r = unsafe { libc::read(f.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len()) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            break;
        }
        // SAFETY: `read` initialised the `r` bytes after the length, all
        // within the capacity (`r <= spare.len()`).
        unsafe { b.set_len(b.len() + r as usize) };
    }
    Ok(b)
}

/// One name of a host directory, and its type as the directory listing
/// gives it (`DT_UNKNOWN` where the file system does not say).
struct Name {
    name: CString,
    dtype: u8,
}

/// The names of directory `fd` (`.` and `..` left out), in byte order.
/// Read with `getdents64` on `fd` itself (its offset, which nothing else
/// uses, moves to the end): a `DIR` stream would cost a duplicate
/// descriptor and four more system calls per directory.
fn names_of(fd: &OwnedFd, dir: &Path) -> Result<Vec<Name>, Ext4Error> {
    let err = |e: std::io::Error| host_io("readdir", dir)(e);
    let bad = || {
        err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "malformed directory record",
        ))
    };
    let mut buf = std::vec![0u8; 32 << 10];
    let mut out = Vec::new();
    loop {
        // SAFETY: `fd` is an open descriptor; the kernel writes at most
        // `buf.len()` bytes of records into `buf` and returns how many.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                fd.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err(e));
        }
        if n == 0 {
            break;
        }
        // Records of `struct linux_dirent64`: inode (8 bytes), offset (8),
        // record length (2), type (1), then the NUL-terminated name.
        let mut rec = &buf[..n as usize];
        while !rec.is_empty() {
            if rec.len() < 20 {
                return Err(bad());
            }
            let len = usize::from(u16::from_ne_bytes([rec[16], rec[17]]));
            if len < 20 || len > rec.len() {
                return Err(bad());
            }
            let name = CStr::from_bytes_until_nul(&rec[19..len]).map_err(|_| bad())?;
            if name.to_bytes() != b"." && name.to_bytes() != b".." {
                out.push(Name {
                    name: CString::from(name),
                    dtype: rec[18],
                });
            }
            rec = &rec[len..];
        }
    }
    out.sort_unstable_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    Ok(out)
}

/// The status of entry `name` of directory `dirfd`, not following a
/// symlink; a regular file or a directory (as the listing says) is opened
/// first and its descriptor returned too. `path` names it in errors.
fn stat_entry(
    dirfd: &OwnedFd,
    name: &Name,
    path: &dyn Fn() -> PathBuf,
) -> Result<(libc::stat64, Option<OwnedFd>), Ext4Error> {
    let flags = match name.dtype {
        libc::DT_REG => libc::O_RDONLY | libc::O_NONBLOCK,
        libc::DT_DIR => libc::O_RDONLY | libc::O_DIRECTORY,
        _ => 0,
    };
    if flags != 0 {
        match open_at(dirfd, &name.name, flags) {
            Ok(fd) => {
                let st = fstat(&fd).map_err(|e| host_io("fstat", &path())(e))?;
                return Ok((st, Some(fd)));
            }
            // Replaced by a symlink, a socket or something else since the
            // listing, or a file under a lease that a non-blocking open
            // does not wait for: its status as it is now, below (a regular
            // file is then opened blocking, as `kind_of` does).
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ELOOP | libc::ENOTDIR | libc::ENXIO | libc::EWOULDBLOCK)
                ) => {}
            Err(e) => return Err(host_io("open", &path())(e)),
        }
    }
    let st = lstat_at(dirfd, &name.name).map_err(|e| host_io("lstat", &path())(e))?;
    // A listing without types: open what is to be walked.
    let opened = match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => Some(
            open_at(dirfd, &name.name, libc::O_RDONLY | libc::O_DIRECTORY)
                .map_err(|e| host_io("open", &path())(e))?,
        ),
        _ => None,
    };
    Ok((st, opened))
}

/// `openat(dirfd, name, flags)`, never following a symlink, close-on-exec.
fn open_at(dirfd: &OwnedFd, name: &CStr, flags: libc::c_int) -> std::io::Result<OwnedFd> {
    // SAFETY: `dirfd` is an open descriptor and `name` NUL-terminated.
    let fd = unsafe {
        libc::openat(
            dirfd.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `openat` returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens host directory `dir` for a walk.
fn open_dir(dir: &Path) -> Result<OwnedFd, Ext4Error> {
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| host_io("open", dir)(std::io::ErrorKind::InvalidInput.into()))?;
    // SAFETY: `c` is NUL-terminated.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(host_io("open", dir)(std::io::Error::last_os_error()));
    }
    // SAFETY: `open` returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fstat` of an open descriptor.
fn fstat(fd: &OwnedFd) -> std::io::Result<libc::stat64> {
    let mut st = core::mem::MaybeUninit::<libc::stat64>::uninit();
    // SAFETY: `fd` is open; `st` is writable for one `stat64`.
    if unsafe { libc::fstat64(fd.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fstat64` succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// `fstatat(dirfd, name)` not following a symlink.
fn lstat_at(dirfd: &OwnedFd, name: &CStr) -> std::io::Result<libc::stat64> {
    let mut st = core::mem::MaybeUninit::<libc::stat64>::uninit();
    // SAFETY: `dirfd` is open, `name` NUL-terminated, `st` writable for one
    // `stat64`.
    let r = unsafe {
        libc::fstatat64(
            dirfd.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fstatat64` succeeded, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// The target of symlink `name` in directory `dirfd`.
fn read_link_at(dirfd: &OwnedFd, name: &CStr) -> std::io::Result<Vec<u8>> {
    let mut buf = std::vec![0u8; 256];
    loop {
        // SAFETY: `dirfd` is open, `name` NUL-terminated, `buf` writable
        // for its length.
        let n = unsafe {
            libc::readlinkat(
                dirfd.as_raw_fd(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if (n as usize) < buf.len() {
            buf.truncate(n as usize);
            return Ok(buf);
        }
        // Perhaps cut short: again with more room.
        buf.resize(buf.len() * 4, 0);
    }
}

/// Permission bits, owner and times of status `st`, with `xattrs`.
fn meta_of(st: &libc::stat64, xattrs: Vec<(String, Vec<u8>)>) -> Meta {
    let t = |secs: i64, nanos: i64| Timestamp {
        secs,
        nanos: nanos as u32,
    };
    Meta {
        perm: (st.st_mode & 0o7777) as u16,
        uid: st.st_uid,
        gid: st.st_gid,
        atime: t(st.st_atime, st.st_atime_nsec),
        mtime: t(st.st_mtime, st.st_mtime_nsec),
        ctime: t(st.st_ctime, st.st_ctime_nsec),
        xattrs,
    }
}

/// Where extended attributes are read from: an open descriptor, or a path
/// (not following a symlink).
enum Target {
    Fd(RawFd),
    Path(CString),
}

impl Target {
    /// The target for host path `p`.
    fn path(p: &Path) -> Result<Target, Ext4Error> {
        CString::new(p.as_os_str().as_bytes())
            .map(Target::Path)
            .map_err(|_| host_io("llistxattr", p)(std::io::ErrorKind::InvalidInput.into()))
    }

    /// `flistxattr` or `llistxattr` into `buf`: the list's length, or -1.
    fn list(&self, buf: &mut [u8]) -> isize {
        match self {
            // SAFETY: `fd` is an open descriptor and `buf` is writable for
            // the length passed; the kernel writes at most that many bytes.
            Target::Fd(fd) => unsafe { libc::flistxattr(*fd, buf.as_mut_ptr().cast(), buf.len()) },
            // SAFETY: as above, for a NUL-terminated path.
            Target::Path(c) => unsafe {
                libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
            },
        }
    }

    /// `fgetxattr` or `lgetxattr` of `name` into `buf`: the value's
    /// length, or -1.
    fn get(&self, name: &CStr, buf: &mut [u8]) -> isize {
        match self {
            // SAFETY: `fd` is open, `name` NUL-terminated and `buf`
            // writable for the length passed.
            Target::Fd(fd) => unsafe {
                libc::fgetxattr(*fd, name.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
            },
            // SAFETY: as above, for a NUL-terminated path.
            Target::Path(c) => unsafe {
                libc::lgetxattr(
                    c.as_ptr(),
                    name.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            },
        }
    }

    /// The names of the list and get calls, for errors.
    fn calls(&self) -> (&'static str, &'static str) {
        match self {
            Target::Fd(_) => ("flistxattr", "fgetxattr"),
            Target::Path(_) => ("llistxattr", "lgetxattr"),
        }
    }
}

/// The extended attributes of `target`, sorted by name; none where the
/// host file system has none. `path` names it in errors.
fn xattrs_of(
    target: &Target,
    path: &dyn Fn() -> PathBuf,
) -> Result<Vec<(String, Vec<u8>)>, Ext4Error> {
    let (list_call, get_call) = target.calls();
    // Most files have none: a small list on the stack first.
    let mut small = [0u8; 256];
    let mut big = Vec::new();
    let mut n = target.list(&mut small);
    while n < 0 {
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ERANGE) => {
                big.resize((big.len() * 4).max(4096), 0);
                n = target.list(&mut big);
            }
            Some(libc::ENOTSUP) => return Ok(Vec::new()),
            _ => return Err(host_io(list_call, &path())(e)),
        }
    }
    let names = if big.is_empty() { &small[..] } else { &big[..] };
    let mut out = Vec::new();
    for name in names[..n as usize]
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
    {
        let Ok(key) = std::str::from_utf8(name) else {
            continue;
        };
        let cname = CString::new(name).unwrap_or_default();
        let mut val = std::vec![0u8; 256];
        let len = loop {
            let r = target.get(&cname, &mut val);
            if r >= 0 {
                break Some(r as usize);
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ERANGE) => val.resize(val.len() * 4, 0),
                // Gone since the listing, or not readable: skipped.
                Some(libc::ENODATA) => break None,
                _ => return Err(host_io(get_call, &path())(e)),
            }
        };
        if let Some(len) = len {
            val.truncate(len);
            out.push((key.to_string(), val));
        }
    }
    out.sort();
    Ok(out)
}
