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
//! are read whole on the walking thread, one after another into their
//! batch's buffer (no allocation per file; the consumer lends the bytes to
//! the image and hands the emptied buffer back); larger ones are copied by
//! [`Image::copy_in`] (holes stay holes, the kernel copies big ranges).
//! The walking thread stays at most [`BUDGET`] bytes ahead, a larger file
//! (handed over open) counting as [`FILE_HELD`] bytes, so at most a few
//! of them are open at once; when it must wait for the consumer and has
//! read [`IDLE_WRITEBACK`] bytes of small files since it last did, it
//! first asks the kernel to start writing back the image file's new data
//! (work the image otherwise asks for from the consuming thread, which
//! then finds less to do). The host system calls are in `host/sys.rs`.

use std::collections::HashMap;
use std::ffi::CStr;
use std::fs;
use std::ops::Range;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::string::ToString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Condvar, Mutex};
use std::vec::Vec;

use crate::ext4::error::{host_io, Ext4Error};

mod sys;
use crate::ext4::namespace::NodeKind;
use crate::ext4::populate::{Contents, Entry, EntryKind, Meta, Populate};
use sys::{
    fstat, meta_of, names_of, open_at, open_dir, read_link_at, read_whole, stat_entry, xattrs_of,
    Target,
};

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
    /// A small file: where its bytes are in its batch's [`Batch::bytes`].
    Bytes(Range<usize>),
    File(fs::File),
    Symlink(Vec<u8>),
    Node(NodeKind),
    HardLink(Vec<u8>),
}

/// One walked entry (its path relative to the top: where it is in its
/// batch's [`Batch::paths`]).
struct Item {
    path: Range<usize>,
    kind: Kind,
    meta: Meta,
    /// Bytes of contents held in memory, or [`FILE_HELD`] for a file
    /// handed over open (counted against [`BUDGET`]).
    held: u64,
}

/// Items handed over at once, and the bytes of their small files, read
/// one after another into one buffer (no allocation per file on the
/// walking thread, no free per file on the other). The consumer hands
/// emptied buffers back through the [`Spare`] pool.
struct Batch {
    items: Vec<Result<Item, Ext4Error>>,
    bytes: Vec<u8>,
    /// The items' paths, one after another.
    paths: Vec<u8>,
}

/// Emptied batch buffers, back from the consumer for the walking thread to
/// fill again (at most [`SPARE`]: their pages stay mapped, so the next
/// batches reuse them instead of faulting fresh ones in).
type Spare = Mutex<Vec<Vec<u8>>>;

/// Batch buffers kept for reuse, at most.
const SPARE: usize = 1;

/// The bytes the walking thread holds ahead, whether the consumer has
/// gone, and whether the walking thread waits (so the consumer wakes it
/// only then: a wake-up is a system call).
#[derive(Default)]
struct Budget {
    state: Mutex<Held>,
    cond: Condvar,
    /// The walking thread asked for write-back of the image file since
    /// the consumer last looked (so the image need not ask again soon).
    wrote_back: AtomicBool,
}

#[derive(Default)]
struct Held {
    bytes: u64,
    gone: bool,
    waiting: bool,
}

impl Budget {
    /// Waits until `n` more bytes fit (or nothing is held), calling `idle`
    /// once first (without the lock) if it must wait; false when the
    /// consumer has gone.
    fn take(&self, n: u64, idle: impl FnOnce()) -> bool {
        let must_wait = |s: &Held| !s.gone && s.bytes > 0 && s.bytes + n > BUDGET;
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if must_wait(&s) {
            drop(s);
            idle();
            s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        }
        while must_wait(&s) {
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
    /// order of names, depth first. A symlink `dir` is followed (as
    /// `mke2fs -d` follows it); symlinks under it are copied as symlinks.
    ///
    /// # Errors
    /// [`Ext4Error::Io`] reading the host tree (the context names the
    /// call and the path); [`Ext4Error::PopulateNoSpace`] when the image
    /// runs out of blocks or inodes (after the rest of the tree was
    /// counted); as [`Populate::add`]. After an error the populate is
    /// rolled back.
    pub fn add_dir(&mut self, dir: &Path) -> Result<(), Ext4Error> {
        // The top is followed if it is a symlink (as `mke2fs -d` and
        // `cp -a DIR/` take it); nothing below it is.
        let top = fs::metadata(dir).map_err(host_io("stat", dir))?;
        if !top.is_dir() {
            return Err(Ext4Error::NotADirectory {
                path: dir.display().to_string(),
            });
        }
        let top = open_dir(dir)?;
        let budget = Budget::default();
        let spare = Spare::default();
        // The image file's descriptor, for the walker's write-back hints.
        // Borrowed, not duplicated: closing a duplicate would release the
        // process's lock on the image (POSIX record locks go with any close).
        let image_file = self.img.dev.file();
        let image = image_file.and_then(|f| {
            use std::os::unix::fs::MetadataExt;
            f.metadata().ok().map(|m| (m.dev(), m.ino()))
        });
        let writeback = image_file.map(|f| {
            use std::os::fd::{AsRawFd, BorrowedFd};
            let fd = f.as_raw_fd();
            // SAFETY: `fd` is the image device's own file, which stays open
            // until the image is dropped; the image outlives this call and
            // so the scope below, the only place the borrow is used (for
            // `sync_file_range`, which changes nothing the image relies on).
            unsafe { BorrowedFd::borrow_raw(fd) }
        });
        let (tx, rx) = sync_channel::<Batch>(16);
        std::thread::scope(|s| {
            let (b, sp) = (&budget, &spare);
            s.spawn(move || {
                let mut w = Walker {
                    tx,
                    budget: b,
                    spare: sp,
                    links: HashMap::new(),
                    batch: Vec::with_capacity(BATCH),
                    bytes: Vec::with_capacity(ARENA),
                    paths: Vec::with_capacity(PATHS),
                    batch_bytes: 0,
                    dirents: Vec::new(),
                    writeback,
                    image,
                    unwritten: 0,
                    gone: false,
                };
                let top_meta = fstat(&top)
                    .map_err(|e| host_io("fstat", dir)(e))
                    .and_then(|st| {
                        let x = xattrs_of(&Target::Fd(top.as_raw_fd()), &|| dir.to_path_buf())?;
                        Ok(meta_of(&st, x))
                    });
                let ok = match top_meta {
                    Ok(meta) => w.send(Ok(Item {
                        path: 0..0,
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
            let r = self.consume(rx, &budget, &spare);
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
        rx: Receiver<Batch>,
        budget: &Budget,
        spare: &Spare,
    ) -> Result<(), Ext4Error> {
        let mut room = false;
        for Batch {
            items,
            mut bytes,
            paths,
        } in rx
        {
            debug_assert!(bytes.capacity() <= ARENA, "a batch buffer grew");
            for item in items {
                let item = item?;
                if item.held > 0 {
                    budget.give(item.held);
                }
                let kind = match item.kind {
                    Kind::Dir => EntryKind::Dir,
                    Kind::Bytes(r) => EntryKind::File(Contents::Borrowed(&bytes[r])),
                    Kind::File(f) => EntryKind::File(Contents::Host(f)),
                    Kind::Symlink(t) => EntryKind::Symlink(t),
                    Kind::Node(n) => EntryKind::Node(n),
                    Kind::HardLink(t) => EntryKind::HardLink(t),
                };
                let entry = Entry {
                    path: Vec::new(),
                    kind,
                    meta: item.meta,
                };
                match self.add_at(&paths[item.path], entry) {
                    Ok(()) => {}
                    Err(Ext4Error::NoSpace { .. } | Ext4Error::NoFreeInodes) => room = true,
                    Err(e) => return Err(e),
                }
            }
            if budget.wrote_back.swap(false, Ordering::Relaxed) {
                self.img.writeback_started();
            }
            if bytes.capacity() > 0 {
                bytes.clear();
                let mut s = spare.lock().unwrap_or_else(|e| e.into_inner());
                if s.len() < SPARE {
                    s.push(bytes);
                }
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
    tx: SyncSender<Batch>,
    budget: &'b Budget,
    spare: &'b Spare,
    /// First path of each multiply-linked file, by (device, inode).
    links: HashMap<(u64, u64), Vec<u8>>,
    /// Items not handed over yet: they go in batches, as each hand-over
    /// may wake the other thread (a system call).
    batch: Vec<Result<Item, Ext4Error>>,
    /// The batch's small files' bytes.
    bytes: Vec<u8>,
    /// The batch's items' paths.
    paths: Vec<u8>,
    batch_bytes: u64,
    /// The buffer directory records are read into, for every directory.
    dirents: Vec<u8>,
    /// The image file, to ask for write-back while the walk waits for the
    /// consumer, and the small files' bytes walked since it last asked.
    writeback: Option<std::os::fd::BorrowedFd<'b>>,
    /// The image file's (device, inode): a tree that holds the image
    /// cannot take a copy of it (it is being written).
    image: Option<(u64, u64)>,
    unwritten: u64,
    /// The consumer has gone (a hand-over failed).
    gone: bool,
}

/// Small files' bytes walked before a wait for the consumer asks for
/// write-back of the image file (see [`Walker::reserve`]).
const IDLE_WRITEBACK: u64 = 2 << 20;

/// Items per hand-over, at most.
const BATCH: usize = 64;

/// Bytes of paths a batch's buffer starts with room for.
const PATHS: usize = BATCH * 64;

/// A batch buffer's capacity: a batch is handed over once its files hold
/// a quarter of [`BUDGET`], or before a file that would not fit (at most
/// [`IN_MEMORY`] bytes: it fits an empty buffer).
const ARENA: usize = (BUDGET / 4) as usize;
const _: () = assert!(IN_MEMORY as usize <= ARENA);

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
        self.hand_over_from(self.bytes.len())
    }

    /// Hands the batch over with its buffer's bytes before `keep` (those
    /// of its items); the bytes from `keep` on (a file read for an item
    /// not queued yet) start the next batch's buffer. False when the
    /// consumer has gone.
    fn hand_over_from(&mut self, keep: usize) -> bool {
        self.batch_bytes = 0;
        if self.batch.is_empty() {
            // Nothing to hand over; the buffer holds no queued item's
            // bytes (at most those of the item being reserved, or of one
            // left unqueued when the consumer went).
            return true;
        }
        let items = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        // The batch's buffer goes with it; the next batch fills one the
        // consumer gave back, or a new one.
        let bytes = if keep == 0 {
            Vec::new()
        } else {
            let s = self.spare.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let mut next = s.unwrap_or_else(|| Vec::with_capacity(ARENA));
            next.extend_from_slice(&self.bytes[keep..]);
            self.bytes.truncate(keep);
            std::mem::replace(&mut self.bytes, next)
        };
        let paths = std::mem::replace(&mut self.paths, Vec::with_capacity(PATHS));
        if self
            .tx
            .send(Batch {
                items,
                bytes,
                paths,
            })
            .is_err()
        {
            self.gone = true;
        }
        !self.gone
    }

    /// Reserves the `n` bytes of [`BUDGET`] that `kind` holds (handing the
    /// batch over first if the walk must wait: the consumer must see those
    /// bytes to give them back; a small file's bytes then move to the
    /// next batch's buffer); false when the consumer has gone.
    fn reserve(&mut self, n: u64, kind: &mut Kind) -> bool {
        if !self.budget.fits(n) {
            let keep = match kind {
                Kind::Bytes(r) => r.start,
                _ => self.bytes.len(),
            };
            if !self.hand_over_from(keep) {
                return false;
            }
            if let Kind::Bytes(r) = kind {
                *r = r.start - keep..r.end - keep;
            }
        }
        // Ahead of the consumer: while it catches up, this thread asks the
        // kernel to start writing back the image's new data (work the
        // image would otherwise ask for from the consuming thread).
        let (writeback, unwritten) = (&self.writeback, &mut self.unwritten);
        let budget = self.budget;
        let taken = budget.take(n, || {
            if *unwritten >= IDLE_WRITEBACK {
                if let Some(f) = writeback {
                    // A hint: on an error the flush still syncs.
                    if crate::ext4::device::start_writeback(*f).is_ok() {
                        budget.wrote_back.store(true, Ordering::Relaxed);
                    }
                }
                *unwritten = 0;
            }
        });
        self.gone |= !taken;
        taken
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
        for name in names_of(&fd, dir, &mut self.dirents)? {
            if self.gone {
                // Nothing more reaches the consumer: no more reading.
                return Ok(fd);
            }
            let len = rel.len();
            if len > 0 {
                rel.push(b'/');
            }
            rel.extend_from_slice(name.name.as_bytes());
            let path = || dir.join(std::ffi::OsStr::from_bytes(name.name.as_bytes()));
            let (st, opened) = stat_entry(&fd, &name, &path)?;
            if st.st_mode & libc::S_IFMT == libc::S_IFREG
                && self.image == Some((st.st_dev, st.st_ino))
            {
                return Err(Ext4Error::BadSource {
                    entry: path().display().to_string(),
                    reason: "it is the image being populated (move it out of the tree)".into(),
                });
            }
            let target = match &opened {
                Some(f) => Target::Fd(f.as_raw_fd()),
                None => Target::path(&path())?,
            };
            let xattrs = xattrs_of(&target, &path)?;
            let meta = meta_of(&st, xattrs);
            let (mut kind, sub) = self.kind_of(opened, &fd, &name.name, &path, rel, &st)?;
            let held = match &kind {
                Kind::Bytes(r) => r.len() as u64,
                Kind::File(_) => FILE_HELD,
                _ => 0,
            };
            if held > 0 && !self.reserve(held, &mut kind) {
                return Ok(fd);
            }
            if let Kind::Bytes(r) = &kind {
                self.unwritten += r.len() as u64;
            }
            let at = self.paths.len();
            self.paths.extend_from_slice(rel);
            let item = Item {
                path: at..self.paths.len(),
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
                    // A batch's buffer never grows: a file that does not
                    // fit starts the next batch (if the consumer has gone,
                    // the item's own hand-over says so).
                    let size = st.st_size as usize;
                    if !self.bytes.is_empty() && self.bytes.len() + size > self.bytes.capacity() {
                        self.hand_over();
                    }
                    let r = read_whole(&f, size, &mut self.bytes)
                        .map_err(|e| host_io("read", &path())(e))?;
                    Kind::Bytes(r)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_is_idle_only_when_it_must_wait_for_the_consumer() {
        let b = Budget::default();
        let mut idle = 0;
        assert!(b.take(BUDGET / 2, || idle += 1));
        assert!(b.take(BUDGET / 2, || idle += 1));
        assert_eq!(idle, 0, "both fit: no wait");
        std::thread::scope(|s| {
            s.spawn(|| {
                // Gives the bytes back once the walk waits.
                while !b.state.lock().unwrap().waiting {
                    std::thread::yield_now();
                }
                b.give(BUDGET);
            });
            assert!(b.take(1, || idle += 1));
        });
        assert_eq!(idle, 1, "one idle call before the wait");
        b.close();
        assert!(!b.take(BUDGET, || idle += 1), "the consumer has gone");
        assert_eq!(idle, 1, "no wait once the consumer has gone");
    }
}
