//! A host directory as a populate source ([`Populate::add_dir`]): walked
//! depth first with each directory's names in byte order (never `readdir`
//! order), on a second thread that also reads the files, so the image is
//! built while the next files are read.
//!
//! Each entry's type, permission bits (setuid, setgid and sticky too),
//! owner, times with nanoseconds and extended attributes (`llistxattr` /
//! `lgetxattr`: `user.*`, `security.*`, `trusted.*` as root, POSIX ACLs)
//! come from `lstat`. Files with more than one link become one inode and
//! hard links (by device and inode number). Files up to [`IN_MEMORY`] bytes
//! are read whole on the walking thread; larger ones are copied by
//! [`Image::copy_in`] (holes stay holes, the kernel copies big ranges).
//! The walking thread stays at most [`BUDGET`] bytes ahead.

use std::collections::HashMap;
use std::ffi::CString;
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
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
    /// Bytes of contents held in memory (counted against [`BUDGET`]).
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
                let top_meta = meta_of(dir, &top);
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
                    if let Err(e) = w.walk(dir, &mut Vec::new()) {
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
    /// full (or holds a quarter of [`BUDGET`], or is an error); false when the consumer has
    /// gone.
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

    /// Walks directory `dir` (relative path `rel`): its names in byte
    /// order, each entry sent, directories walked after their entry.
    fn walk(&mut self, dir: &Path, rel: &mut Vec<u8>) -> Result<(), Ext4Error> {
        let mut names: Vec<std::ffi::OsString> = Vec::new();
        for e in fs::read_dir(dir).map_err(host_io("readdir", dir))? {
            names.push(e.map_err(host_io("readdir", dir))?.file_name());
        }
        names.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        for name in names {
            let path = dir.join(&name);
            let len = rel.len();
            if len > 0 {
                rel.push(b'/');
            }
            rel.extend_from_slice(name.as_bytes());
            let st = fs::symlink_metadata(&path).map_err(host_io("lstat", &path))?;
            let (kind, held) = self.kind_of(&path, rel, &st)?;
            let is_dir = matches!(kind, Kind::Dir);
            let meta = meta_of(&path, &st)?;
            if held > 0 && !self.reserve(held) {
                return Ok(());
            }
            let item = Item {
                path: rel.clone(),
                kind,
                meta,
                held,
            };
            if !self.send(Ok(item)) {
                return Ok(());
            }
            if is_dir {
                self.walk(&path, rel)?;
            }
            rel.truncate(len);
        }
        Ok(())
    }

    /// What `path` is, with its contents or target, and the bytes held.
    fn kind_of(
        &mut self,
        path: &Path,
        rel: &[u8],
        st: &fs::Metadata,
    ) -> Result<(Kind, u64), Ext4Error> {
        let ft = st.file_type();
        if !ft.is_dir() && st.nlink() > 1 {
            match self.links.entry((st.dev(), st.ino())) {
                std::collections::hash_map::Entry::Occupied(first) => {
                    return Ok((Kind::HardLink(first.get().clone()), 0));
                }
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(rel.to_vec());
                }
            }
        }
        let kind = if ft.is_dir() {
            Kind::Dir
        } else if ft.is_file() {
            let mut f = fs::File::open(path).map_err(host_io("open", path))?;
            if st.len() > IN_MEMORY {
                Kind::File(f)
            } else {
                // The size `lstat` gave, in as few reads as the host
                // allows (`read_to_end` would stat and seek first).
                let mut b = std::vec![0u8; st.len() as usize];
                let mut n = 0;
                while n < b.len() {
                    match f.read(&mut b[n..]) {
                        Ok(0) => break,
                        Ok(k) => n += k,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(host_io("read", path)(e)),
                    }
                }
                b.truncate(n);
                return Ok((Kind::Bytes(b), n as u64));
            }
        } else if ft.is_symlink() {
            let t = fs::read_link(path).map_err(host_io("readlink", path))?;
            Kind::Symlink(t.as_os_str().as_bytes().to_vec())
        } else if ft.is_char_device() || ft.is_block_device() {
            let (major, minor) = (libc::major(st.rdev()), libc::minor(st.rdev()));
            if ft.is_char_device() {
                Kind::Node(NodeKind::Char { major, minor })
            } else {
                Kind::Node(NodeKind::Block { major, minor })
            }
        } else if ft.is_fifo() {
            Kind::Node(NodeKind::Fifo)
        } else {
            Kind::Node(NodeKind::Socket)
        };
        Ok((kind, 0))
    }
}

/// Permission bits, owner, times and xattrs of `path` (`st` its `lstat`).
fn meta_of(path: &Path, st: &fs::Metadata) -> Result<Meta, Ext4Error> {
    let t = |secs: i64, nanos: i64| Timestamp {
        secs,
        nanos: nanos as u32,
    };
    Ok(Meta {
        perm: (st.mode() & 0o7777) as u16,
        uid: st.uid(),
        gid: st.gid(),
        atime: t(st.atime(), st.atime_nsec()),
        mtime: t(st.mtime(), st.mtime_nsec()),
        ctime: t(st.ctime(), st.ctime_nsec()),
        xattrs: xattrs_of(path)?,
    })
}

/// The extended attributes of `path` (not following a symlink), sorted by
/// name; none where the host file system has none.
pub(crate) fn xattrs_of(path: &Path) -> Result<Vec<(String, Vec<u8>)>, Ext4Error> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| host_io("llistxattr", path)(std::io::ErrorKind::InvalidInput.into()))?;
    let mut names = std::vec![0u8; 1024];
    let n = loop {
        // SAFETY: `c` is a NUL-terminated path and `names` is a writable
        // buffer of the length passed; the kernel writes at most that many
        // bytes.
        let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
        if n >= 0 {
            break n as usize;
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ERANGE) => names.resize(names.len() * 4, 0),
            Some(libc::ENOTSUP) => return Ok(Vec::new()),
            _ => return Err(host_io("llistxattr", path)(e)),
        }
    };
    let mut out = Vec::new();
    for name in names[..n].split(|&b| b == 0).filter(|s| !s.is_empty()) {
        let Ok(key) = std::str::from_utf8(name) else {
            continue;
        };
        let cname = CString::new(name).unwrap_or_default();
        let mut val = std::vec![0u8; 256];
        let len = loop {
            // SAFETY: both strings are NUL-terminated; `val` is writable
            // for the length passed.
            let r = unsafe {
                libc::lgetxattr(
                    c.as_ptr(),
                    cname.as_ptr(),
                    val.as_mut_ptr().cast(),
                    val.len(),
                )
            };
            if r >= 0 {
                break Some(r as usize);
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ERANGE) => val.resize(val.len() * 4, 0),
                // Gone since the listing, or not readable: skipped.
                Some(libc::ENODATA) => break None,
                _ => return Err(host_io("lgetxattr", path)(e)),
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
