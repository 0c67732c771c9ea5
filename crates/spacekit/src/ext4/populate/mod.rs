//! Building a tree into an image: [`Populate`] (its docs say how).

pub(super) mod host;
mod need;
mod node;
#[cfg(feature = "tar")]
mod tar;

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::io::Read;
use std::string::String;
use std::vec::Vec;

use crate::ext4::error::{invalid, Ext4Error};
use crate::ext4::flags::S_IFREG;

/// Directory type bits.
const S_IFDIR: u16 = 0x4000;
use crate::ext4::image::Image;
use crate::ext4::namespace::{NodeKind, Timestamp};
use need::Need;

/// One thing to create, at `path` under the populate's directory.
pub struct Entry<'a> {
    /// The path under the populate's directory: names separated by `/`,
    /// without a leading `/`, `.` or `..` (a tar's `./a/b` is given as
    /// `a/b`). Empty for the populate's directory itself, whose metadata
    /// the entry then sets.
    pub path: Vec<u8>,
    /// What it is.
    pub kind: EntryKind<'a>,
    /// Its permission bits, owner, times and extended attributes (unused
    /// for a hard link).
    pub meta: Meta,
}

/// The kinds of [`Entry`].
pub enum EntryKind<'a> {
    /// A directory. Onto a directory that exists, only its metadata is set.
    Dir,
    /// A regular file with these contents.
    File(Contents<'a>),
    /// A symbolic link to this target.
    Symlink(Vec<u8>),
    /// A device, FIFO or socket.
    Node(NodeKind),
    /// Another name for the file an earlier entry made at this path (under
    /// the populate's directory); not for directories.
    HardLink(Vec<u8>),
}

/// What a regular file holds.
pub enum Contents<'a> {
    /// These bytes; blocks of zeros become holes.
    Bytes(Vec<u8>),
    /// These bytes, borrowed for the call (the caller keeps its buffer to
    /// fill again); blocks of zeros become holes.
    Borrowed(&'a [u8]),
    /// A host file, copied sparsely ([`Image::copy_in`]: its holes stay
    /// holes, ranges of 1 MiB and more are copied by the kernel).
    Host(std::fs::File),
    /// `size` bytes read from a stream (a tar entry); blocks of zeros become
    /// holes.
    Reader {
        /// The bytes.
        reader: &'a mut dyn Read,
        /// How many bytes to read (exactly; fewer is an error).
        size: u64,
    },
    /// A sparse file of `size` bytes (a sparse tar entry): its data are
    /// `pieces`, read back to back from `reader`, and the rest is holes.
    /// Only the pieces' bytes are read and written, so the time and space
    /// taken follow the data, not the size; blocks of zeros in a piece
    /// become holes too.
    Pieces {
        /// The pieces' bytes, one after another.
        reader: &'a mut dyn Read,
        /// `(offset, length)` of each piece in the file, in order and
        /// not overlapping, each within `size`.
        pieces: Vec<(u64, u64)>,
        /// The file's size.
        size: u64,
    },
}

impl Contents<'_> {
    /// The bytes of [`Contents::Bytes`] or [`Contents::Borrowed`].
    fn in_memory(&self) -> Option<&[u8]> {
        match self {
            Contents::Bytes(b) => Some(b),
            Contents::Borrowed(b) => Some(b),
            _ => None,
        }
    }
}

/// An entry's attributes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// Permission bits with setuid, setgid and sticky (`mode & 0o7777`).
    pub perm: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Last access.
    pub atime: Timestamp,
    /// Last change of the contents.
    pub mtime: Timestamp,
    /// Last change of the inode.
    pub ctime: Timestamp,
    /// Extended attributes by full name (`user.x`, `security.selinux`,
    /// `system.posix_acl_access` in the form `getxattr(2)` gives), in the
    /// order to set them.
    pub xattrs: Vec<(String, Vec<u8>)>,
}

/// How a populate rewrites what the source says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PopulateOptions {
    /// Every inode owned by this `(uid, gid)` (`--owner`; `(0, 0)` is
    /// `--squash-owner`, building a root-owned image without root).
    pub owner: Option<(u32, u32)>,
    /// The reproducible-builds clamp (`SOURCE_DATE_EPOCH`): mtimes after it
    /// become it, and atime, ctime and crtime equal the clamped mtime.
    pub clamp: Option<i64>,
}

impl PopulateOptions {
    /// The clamp from `SOURCE_DATE_EPOCH` when it is set to a number
    /// (`None` when it is not: a program that must not build without its
    /// clamp checks the variable itself, as the CLI does).
    pub fn clamp_from_env() -> Option<i64> {
        std::env::var("SOURCE_DATE_EPOCH")
            .ok()
            .and_then(|v| v.trim().parse().ok())
    }
}

/// What a populate made, so far or in all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PopulateReport {
    /// Regular files created.
    pub files: u64,
    /// Directories created.
    pub dirs: u64,
    /// Symbolic links created.
    pub symlinks: u64,
    /// Devices, FIFOs and sockets created.
    pub nodes: u64,
    /// Hard links added (names beyond a file's first).
    pub hard_links: u64,
    /// Extended attributes set.
    pub xattrs: u64,
    /// Bytes of file contents the source gave (holes included).
    pub bytes: u64,
    /// Entries that replaced an earlier entry of the same path in the same
    /// populate (a tar member appended again: the later one wins, as tar
    /// extracts). Each is counted above too, as the earlier one was.
    pub replaced: u64,
}

impl PopulateReport {
    /// Every entry: files, directories, symlinks, nodes and hard links.
    pub fn entries(&self) -> u64 {
        self.files + self.dirs + self.symlinks + self.nodes + self.hard_links
    }
}

/// What [`Populate::replace`] found at a path an entry names again.
enum Way {
    /// The earlier entry is gone: make the new one.
    Made,
    /// A hard link to the inode the name already names: nothing to do.
    Linked,
    /// A directory, or a name that was there before: `Exists`.
    Refused,
}

/// A progress callback.
type Progress<'i> = std::boxed::Box<dyn FnMut(&PopulateReport) + 'i>;

/// A populate in progress, building a tree into an image: it adds entries — from a host
/// directory ([`Populate::add_dir`]), from entries a program makes
/// ([`Populate::add`]) or, with the `tar` feature, from a tar stream — under
/// one directory of an image, as one transaction.
///
/// # One transaction
///
/// Everything a populate changes is one undo unit and one flush: file data
/// goes straight to free blocks as it comes (those blocks stay free in the
/// bitmaps until the flush commits them), metadata stays in the block cache,
/// and [`Populate::finish`] writes it through the redo log with one flush.
/// Past the cache's budget ([`Image::set_cache_budget`], 512 KiB by
/// default) the metadata the committed image cannot see (new directory
/// and extent blocks in free space, inode-table blocks past the used
/// inodes) follows the file data early, so memory stays bounded however
/// big the tree; after the flush every block in use is the same. (That
/// needs a populate that starts with nothing pending: after unflushed
/// changes every block waits for the flush, since a roll-back must return
/// to them.)
/// An error at any entry (no space, a bad source, an I/O error) puts every
/// in-memory change back, so the image is as it was before the populate;
/// dropping a [`Populate`] without `finish` does the same. A crash before
/// the flush leaves the image as it was; one during the flush is replayed
/// by the next read-write open (see [`Image::flush`]).
///
/// When space or inodes run out, the rest of the source is still read (not
/// written) so the error says how much the whole populate needs:
/// [`Ext4Error::PopulateNoSpace`].
///
/// # Reproducible
///
/// Entries are created in the order they come; [`Populate::add_dir`] walks a
/// host directory in byte order of names (depth first), never in `readdir`
/// order, so the same tree gives the same inode numbers, the same directory
/// blocks and the same extents. Nothing reads the wall clock: every inode's
/// times come from its entry. With [`PopulateOptions::clamp`] (the
/// `SOURCE_DATE_EPOCH` rule of reproducible-builds.org) an mtime after the
/// clamp becomes the clamp, and atime, ctime and crtime equal the clamped
/// mtime (a source's atime and ctime change when it is read or copied).
/// With the same empty image (`mkfs.ext4 -U UUID -E hash_seed=UUID` and
/// `E2FSPROGS_FAKE_TIME`), two populates of the same source give
/// byte-identical images.
pub struct Populate<'i> {
    img: &'i mut Image,
    /// The directory entries go under.
    at: u32,
    /// Its path in the image, without a trailing `/` (empty for the
    /// root): errors name image paths.
    at_path: String,
    opts: PopulateOptions,
    /// Inode of every directory made or met, by path.
    made: HashMap<Vec<u8>, u32>,
    /// The inode of every other entry made, by a hash of its path: enough
    /// to know that a name is new (the common case) without keeping every
    /// path; a hit is confirmed in the image, and must name that inode
    /// (see [`Populate::made_file`]).
    files: HashMap<u64, u32>,
    /// Directories this populate created: their names need no lookup.
    fresh: std::collections::HashSet<u32>,
    /// The names of directories that were there before, read on first use
    /// (a lookup per entry would scan the directory each time).
    names: HashMap<u32, HashMap<Vec<u8>, u32>>,
    report: PopulateReport,
    /// Set once an entry failed (the changes are rolled back): `true` when
    /// for lack of room, and [`Need`] is still counted.
    failed: Option<bool>,
    /// The path of the entry that failed, if one did.
    failed_at: Option<Vec<u8>>,
    need: Need,
    /// [`Image::flushes`] when the populate began.
    flushes_at_start: u64,
    /// Whether this populate opened the image's undo (and must close it).
    owns_undo: bool,
    progress: Option<Progress<'i>>,
}

impl<'i> Populate<'i> {
    /// Starts populating directory `at` (an absolute path, `/` for the root)
    /// of `img`.
    ///
    /// # Errors
    /// As [`Image::lookup`]; [`Ext4Error::NotADirectory`];
    /// [`Ext4Error::ReadOnly`]; [`Ext4Error::Unsupported`] for a directory
    /// spacekit does not write (casefolded, encrypted).
    pub fn new(img: &'i mut Image, at: &str, opts: PopulateOptions) -> Result<Self, Ext4Error> {
        img.check_writable()?;
        let ino = img.lookup(at)?;
        if !img.inode(ino)?.is_dir() {
            return Err(Ext4Error::NotADirectory { path: at.into() });
        }
        img.check_dir_writable(ino)?;
        let owns_undo = img.begin_undo();
        let flushes_at_start = img.flushes;
        let mut made = HashMap::new();
        made.insert(Vec::new(), ino);
        Ok(Populate {
            img,
            at: ino,
            at_path: at.trim_end_matches('/').into(),
            opts,
            made,
            files: HashMap::new(),
            fresh: Default::default(),
            names: HashMap::new(),
            report: PopulateReport::default(),
            failed: None,
            failed_at: None,
            need: Need::default(),
            flushes_at_start,
            owns_undo,
            progress: None,
        })
    }

    /// Calls `f` with the counts so far every 256 entries and once at the
    /// end (for a progress line).
    pub fn on_progress(&mut self, f: impl FnMut(&PopulateReport) + 'i) {
        self.progress = Some(std::boxed::Box::new(f));
    }

    /// The counts so far.
    pub fn report(&self) -> PopulateReport {
        self.report
    }

    /// Adds one entry. Its parent directories must exist (made by earlier
    /// entries, or already in the image); missing ones are made with mode
    /// 0755 and the entry's owner and times, as `tar` does.
    ///
    /// # Errors
    /// [`Ext4Error::Exists`] for a name that is already there (but a
    /// directory onto a directory, and an entry this populate made, not a
    /// directory, which the later entry replaces:
    /// [`PopulateReport::replaced`]); [`Ext4Error::InvalidArgument`] for a
    /// bad path, a hard link to a path not made, or contents shorter than
    /// said; [`Ext4Error::Io`] reading the source; as the operations that
    /// make each kind ([`Image::create`], [`Image::write`],
    /// [`Image::set_xattr`], …). After an error the populate is rolled
    /// back (the image is as before [`Populate::new`]). When the error was
    /// [`Ext4Error::NoSpace`] or [`Ext4Error::NoFreeInodes`], later `add`s
    /// only count what the source needs, for [`Populate::shortfall`];
    /// after any other error they fail with
    /// [`Ext4Error::InvalidArgument`] (`what: "populate"`).
    pub fn add(&mut self, entry: Entry<'_>) -> Result<(), Ext4Error> {
        let mut entry = entry;
        let path = core::mem::take(&mut entry.path);
        self.add_at(&path, entry)
    }

    /// [`Populate::add`] of `entry` at `path` (its own `path` unused): a
    /// source that keeps its paths elsewhere (the host walk, many per
    /// buffer) lends them.
    pub(crate) fn add_at(&mut self, path: &[u8], entry: Entry<'_>) -> Result<(), Ext4Error> {
        self.count_need(path, &entry);
        match self.failed {
            Some(true) => return Ok(()),
            Some(false) => {
                return Err(invalid("populate", 0, "an earlier entry failed"));
            }
            None => {}
        }
        match self.add_entry(path, entry) {
            Ok(()) => {
                self.img.write_behind();
                if let Some(f) = self.progress.as_mut() {
                    if self.report.entries().is_multiple_of(256) {
                        f(&self.report);
                    }
                }
                Ok(())
            }
            Err(e) => {
                self.failed_at = Some(path.to_vec());
                // Everything since `new` goes back now.
                self.fail(matches!(
                    e,
                    Ext4Error::NoSpace { .. } | Ext4Error::NoFreeInodes
                ));
                Err(e)
            }
        }
    }

    /// Marks the populate failed for a reason outside any one entry (the
    /// source broke off between entries: a host I/O error, a damaged
    /// archive) and rolls it back, so [`Populate::finish`] cannot commit
    /// half a source. `room` as in [`Populate::add`]'s errors.
    pub(crate) fn fail(&mut self, room: bool) {
        if self.owns_undo {
            self.img.end_undo(false);
            self.owns_undo = false;
        }
        if self.failed.is_none() {
            self.failed = Some(room);
        }
    }

    /// Whether an [`Populate::add`] failed (the populate is rolled back).
    pub fn failed(&self) -> bool {
        self.failed.is_some()
    }

    /// The path (relative to the populate's directory, as
    /// [`Entry::path`]) of the entry whose [`Populate::add`] failed, if
    /// one did: for a message that names it.
    pub fn failed_at(&self) -> Option<&[u8]> {
        self.failed_at.as_deref()
    }

    /// [`Ext4Error::PopulateNoSpace`]: what every entry added so far
    /// (before and after the failure) needs, against what the image has
    /// free. Call it after feeding the rest of the source.
    pub fn shortfall(&self) -> Ext4Error {
        Ext4Error::PopulateNoSpace {
            blocks_needed: self.need.blocks,
            blocks_free: self.img.free_blocks_count(),
            inodes_needed: self.need.inodes,
            inodes_free: u64::from(self.img.free_inodes_count()),
        }
    }

    /// Commits everything added with one [`Image::flush`] and returns the
    /// counts.
    ///
    /// # Errors
    /// [`Ext4Error::InvalidArgument`] (`what: "populate"`) when an
    /// [`Populate::add`] failed (nothing is written); as [`Image::flush`].
    pub fn finish(mut self) -> Result<PopulateReport, Ext4Error> {
        if self.failed.is_some() {
            return Err(invalid("populate", 0, "an entry failed: nothing was added"));
        }
        if self.owns_undo {
            self.img.end_undo(true);
            self.owns_undo = false;
        }
        if let Some(f) = self.progress.as_mut() {
            f(&self.report);
        }
        self.img.flush()?;
        Ok(self.report)
    }

    /// Adds what `entry` (at `path`) needs to [`Need`] (about: data blocks
    /// without holes or extent blocks, one block per directory and long
    /// symlink, and a block each time its directory's records pass three
    /// quarters of one: a new directory's first names go in the block
    /// its entry counted).
    fn count_need(&mut self, path: &[u8], entry: &Entry<'_>) {
        let bs = u64::from(self.img.info.block_size);
        let (blocks, inodes) = match &entry.kind {
            EntryKind::Dir => (1, 1),
            EntryKind::File(c) => {
                let size = match c {
                    Contents::Bytes(b) => b.len() as u64,
                    Contents::Borrowed(b) => b.len() as u64,
                    // What the host file has allocated (its holes stay
                    // holes), at most its length.
                    Contents::Host(f) => f
                        .metadata()
                        .map(|m| {
                            m.len()
                                .min(std::os::unix::fs::MetadataExt::blocks(&m) * 512)
                        })
                        .unwrap_or(0),
                    Contents::Reader { size, .. } => *size,
                    // The blocks each piece touches (a piece may start
                    // inside a block); a bad list is refused later.
                    Contents::Pieces { pieces, .. } => {
                        let blocks = pieces.iter().fold(0u64, |n, &(off, len)| {
                            let stop = off.saturating_add(len);
                            n.saturating_add(stop.div_ceil(bs).saturating_sub(off / bs))
                        });
                        blocks.saturating_mul(bs)
                    }
                };
                (size.div_ceil(bs), 1)
            }
            EntryKind::Symlink(t) => (u64::from(t.len() >= 60), 1),
            EntryKind::Node(_) => (0, 1),
            EntryKind::HardLink(_) => (0, 0),
        };
        let dir = matches!(entry.kind, EntryKind::Dir);
        self.need.add(bs, path, blocks, inodes, dir);
    }

    /// [`Populate::add`] without the error handling: `path` is the
    /// entry's (its own `path` field is not read).
    fn add_entry(&mut self, path: &[u8], entry: Entry<'_>) -> Result<(), Ext4Error> {
        check_path(path)?;
        let meta = self.rewrite(entry.meta);
        if path.is_empty() {
            if !matches!(entry.kind, EntryKind::Dir) {
                return Err(invalid("path", 0, "only a directory can be the top"));
            }
            self.merge_xattrs(self.at, &meta)?;
            return self.img.stamp(self.at, &meta);
        }
        let (parent_path, name) = match path.iter().rposition(|&b| b == b'/') {
            Some(i) => (&path[..i], &path[i + 1..]),
            None => (&path[..0], path),
        };
        let parent = self.parent(parent_path, &meta)?;
        let existing = self.lookup_in(parent, name, path)?;
        if let Some(ino) = existing {
            if matches!(entry.kind, EntryKind::Dir) && self.img.inode(ino)?.is_dir() {
                self.merge_xattrs(ino, &meta)?;
                self.img.stamp(ino, &meta)?;
                self.made.insert(path.to_vec(), ino);
                return Ok(());
            }
            // A freed inode's dtime: the entry's ctime, as its other
            // times (the kernel's range of a 32-bit time).
            let t = meta.ctime.secs.clamp(1, i64::from(u32::MAX)) as u32;
            match self.replace(parent, name, path, ino, &entry.kind, t)? {
                Way::Made => {}
                Way::Linked => return Ok(()),
                Way::Refused => {
                    return Err(Ext4Error::Exists {
                        path: std::format!("{}/{}", self.at_path, String::from_utf8_lossy(path)),
                    })
                }
            }
        }
        let symlink = matches!(entry.kind, EntryKind::Symlink(_));
        let ino = match entry.kind {
            EntryKind::Dir => {
                let ino = self
                    .img
                    .pop_extents(parent, name, S_IFDIR | (meta.perm & 0o7777))?;
                self.fresh.insert(ino);
                self.report.dirs += 1;
                ino
            }
            EntryKind::File(ref c) if meta.xattrs.is_empty() && c.in_memory().is_some() => {
                // Written whole, stamped too: done here.
                let b = c.in_memory().unwrap_or_default();
                let ino = self.img.pop_file(parent, name, b, &meta)?;
                self.report.bytes += b.len() as u64;
                self.report.files += 1;
                self.named(parent, name, ino);
                self.files.insert(path_hash(path), ino);
                return Ok(());
            }
            EntryKind::File(c) => {
                let ino = self
                    .img
                    .pop_extents(parent, name, S_IFREG | (meta.perm & 0o7777))?;
                self.report.bytes += self.img.pop_contents(ino, c)?;
                self.report.files += 1;
                ino
            }
            EntryKind::Symlink(t) => {
                self.report.symlinks += 1;
                self.img.pop_symlink(parent, name, &t, meta.perm)?
            }
            EntryKind::Node(kind) => {
                self.report.nodes += 1;
                self.img.pop_mknod(parent, name, kind, meta.perm)?
            }
            EntryKind::HardLink(target) => {
                let ino = self.made_file(&target)?.ok_or_else(|| {
                    invalid(
                        "link",
                        target.len() as u64,
                        "a hard link to a path not made",
                    )
                })?;
                self.img.pop_link(parent, name, ino)?;
                self.named(parent, name, ino);
                self.report.hard_links += 1;
                self.files.insert(path_hash(path), ino);
                return Ok(());
            }
        };
        for (k, v) in &meta.xattrs {
            if symlink && k.starts_with("system.posix_acl_") {
                // A symlink has no ACL (the kernel refuses one, and tar
                // extracting an archive that has one warns and goes on).
                continue;
            }
            self.img.set_xattr(ino, k, v)?;
            self.report.xattrs += 1;
        }
        self.img.stamp(ino, &meta)?;
        self.named(parent, name, ino);
        if self.fresh.contains(&ino) {
            self.made.insert(path.to_vec(), ino);
        } else {
            self.files.insert(path_hash(path), ino);
        }
        Ok(())
    }

    /// Makes way at `path` (`name` in directory `parent`, naming inode
    /// `ino`) for a later entry of `kind`, when this populate made what is
    /// there and it is not a directory: a tar archive may hold a path
    /// twice (`tar -r` appends a newer copy), and tar extracting replaces
    /// the earlier one. A freed inode's `dtime` is `time`.
    fn replace(
        &mut self,
        parent: u32,
        name: &[u8],
        path: &[u8],
        ino: u32,
        kind: &EntryKind<'_>,
        time: u32,
    ) -> Result<Way, Ext4Error> {
        if self.img.inode(ino)?.is_dir() || self.made_file(path)? != Some(ino) {
            return Ok(Way::Refused);
        }
        if let EntryKind::HardLink(target) = kind {
            if self.made_file(target)? == Some(ino) {
                return Ok(Way::Linked);
            }
        }
        // Every block of an inode this populate made was allocated since
        // it began; since the last flush too when none came since (one
        // comes before a data write after frees the populate did not
        // make, such as an existing directory's xattr block).
        let uncommitted = self.img.flushes == self.flushes_at_start;
        self.img.unlink_in(parent, name, time, uncommitted)?;
        self.files.remove(&path_hash(path));
        if let Some(m) = self.names.get_mut(&parent) {
            m.remove(name);
        }
        self.report.replaced += 1;
        Ok(Way::Made)
    }

    /// Gives directory `ino`, which was there before, `meta`'s extended
    /// attributes, as `cp -a` does onto an existing directory: each one
    /// set (replacing one of the same name), and its POSIX ACLs replaced by
    /// the source's (removed when the source has none, so the ACL agrees
    /// with the new mode); other attributes it had stay.
    fn merge_xattrs(&mut self, ino: u32, meta: &Meta) -> Result<(), Ext4Error> {
        for acl in ["system.posix_acl_access", "system.posix_acl_default"] {
            let theirs = meta.xattrs.iter().any(|(k, _)| k == acl);
            if !theirs && self.img.get_xattr(ino, acl)?.is_some() {
                self.img.remove_xattr(ino, acl)?;
            }
        }
        for (k, v) in &meta.xattrs {
            self.img.set_xattr(ino, k, v)?;
            self.report.xattrs += 1;
        }
        Ok(())
    }

    /// The inode `name` names in directory `parent` (`path` under the
    /// populate's directory), if any: from [`Populate::made`] in a
    /// directory this populate created, else from the directory's names,
    /// read once (after checking that spacekit may change it).
    fn lookup_in(
        &mut self,
        parent: u32,
        name: &[u8],
        path: &[u8],
    ) -> Result<Option<u32>, Ext4Error> {
        if self.fresh.contains(&parent) {
            if let Some(&ino) = self.made.get(path) {
                return Ok(Some(ino));
            }
            if !self.files.contains_key(&path_hash(path)) {
                return Ok(None);
            }
            return Ok(self.img.find_entry(parent, name)?.map(|(e, _)| e.inode));
        }
        if !self.names.contains_key(&parent) {
            self.img.check_dir_writable(parent)?;
            let names = self
                .img
                .read_dir(parent)?
                .into_iter()
                .filter(|e| e.name != b"." && e.name != b"..")
                .map(|e| (e.name, e.inode))
                .collect();
            self.names.insert(parent, names);
        }
        Ok(self.names.get(&parent).and_then(|m| m.get(name)).copied())
    }

    /// The inode at `path` if this populate made it (a directory made or
    /// met, or another entry whose path hash it noted, found in its
    /// parent directory).
    fn made_file(&mut self, path: &[u8]) -> Result<Option<u32>, Ext4Error> {
        if let Some(&ino) = self.made.get(path) {
            return Ok(Some(ino));
        }
        let Some(&ino) = self.files.get(&path_hash(path)) else {
            return Ok(None);
        };
        let (up, name) = match path.iter().rposition(|&b| b == b'/') {
            Some(i) => (&path[..i], &path[i + 1..]),
            None => (&path[..0], path),
        };
        let Some(&parent) = self.made.get(up) else {
            return Ok(None);
        };
        // The name must still be there and name the inode made: a path
        // whose hash matches another's (or a name that was there before)
        // is not one this populate made.
        Ok(self
            .img
            .find_entry(parent, name)?
            .map(|(e, _)| e.inode)
            .filter(|&found| found == ino))
    }

    /// Notes a new name in a directory that was there before.
    fn named(&mut self, parent: u32, name: &[u8], ino: u32) {
        if let Some(m) = self.names.get_mut(&parent) {
            m.insert(name.to_vec(), ino);
        }
    }

    /// The directory at `path` (under the populate's), made with mode 0755
    /// and `like`'s owner and times when missing.
    fn parent(&mut self, path: &[u8], like: &Meta) -> Result<u32, Ext4Error> {
        if let Some(&ino) = self.made.get(path) {
            return Ok(ino);
        }
        let (up, name) = match path.iter().rposition(|&b| b == b'/') {
            Some(i) => (&path[..i], &path[i + 1..]),
            None => (&path[..0], path),
        };
        let parent = self.parent(up, like)?;
        let found = self.lookup_in(parent, name, path)?;
        let ino = match found {
            Some(ino) if self.img.inode(ino)?.is_dir() => ino,
            Some(_) => {
                return Err(Ext4Error::NotADirectory {
                    path: String::from_utf8_lossy(path).into_owned(),
                })
            }
            None => {
                let meta = Meta {
                    perm: 0o755,
                    xattrs: Vec::new(),
                    ..like.clone()
                };
                let ino = self
                    .img
                    .pop_extents(parent, name, S_IFDIR | (meta.perm & 0o7777))?;
                self.img.stamp(ino, &meta)?;
                self.fresh.insert(ino);
                self.named(parent, name, ino);
                self.report.dirs += 1;
                ino
            }
        };
        self.made.insert(path.to_vec(), ino);
        Ok(ino)
    }

    /// `meta` with the options applied (owner, clamp).
    fn rewrite(&self, mut meta: Meta) -> Meta {
        if let Some((u, g)) = self.opts.owner {
            meta.uid = u;
            meta.gid = g;
        }
        if let Some(c) = self.opts.clamp {
            if meta.mtime.secs >= c {
                meta.mtime = Timestamp { secs: c, nanos: 0 };
            }
            meta.atime = meta.mtime;
            meta.ctime = meta.mtime;
        }
        meta
    }
}

impl Drop for Populate<'_> {
    /// A populate never finished is rolled back.
    fn drop(&mut self) {
        if self.owns_undo {
            self.img.end_undo(false);
        }
    }
}

/// Checks a relative entry path: no leading or doubled `/`, no `.` or `..`
/// component, no NUL, names of at most 255 bytes.
fn check_path(path: &[u8]) -> Result<(), Ext4Error> {
    if path.is_empty() {
        return Ok(());
    }
    for c in path.split(|&b| b == b'/') {
        if c.is_empty() || c == b"." || c == b".." || c.contains(&0) {
            return Err(invalid(
                "path",
                path.len() as u64,
                "a relative path of names without ., .. or NUL",
            ));
        }
        if c.len() > 255 {
            return Err(Ext4Error::NameTooLong { len: c.len() });
        }
    }
    Ok(())
}

/// The hash [`Populate`] keeps of a path it made (SipHash with fixed
/// keys: the same for every run).
fn path_hash(path: &[u8]) -> u64 {
    BuildHasherDefault::<DefaultHasher>::default().hash_one(path)
}
