//! A tree of the image copied out to the host ([`Image::export_tree`],
//! what debugfs calls `rdump`); in `export/list.rs`, what it and `ls -l`
//! read of an inode: its times with nanoseconds ([`Inode::times`]) and a
//! directory's long listing ([`Image::list`]).
//!
//! How it copies, in what order and where is [`Image::export_tree`]'s
//! documentation.

use std::boxed::Box;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CString, OsStr};
use std::fmt;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::string::{String, ToString};
use std::vec::Vec;

use super::error::{corrupt, host_io, invalid, Ext4Error};
use super::image::Image;
use super::inode::Inode;
use super::namespace::Timestamp;
use super::stat::ROOT_INO;

mod list;

pub use list::ListEntry;
use list::{S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK};

/// How [`Image::export_tree`] copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportOptions {
    /// Stop with [`Ext4Error::Io`] when the host refuses something for
    /// lack of privilege or support (a device node, an owner, an extended
    /// attribute) instead of skipping it and listing it in
    /// [`ExportReport::skipped`]. Default `false`.
    pub strict: bool,
    /// Copy extended attributes and ACLs. Default `true`.
    pub xattrs: bool,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            strict: false,
            xattrs: true,
        }
    }
}

/// What [`Image::export_tree`] made, counted as it goes (the progress
/// callback of [`Image::export_tree_with`] sees it grow).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportReport {
    /// Directories made (not counting `dest` itself for `/`).
    pub dirs: u64,
    /// Regular files written.
    pub files: u64,
    /// Bytes of the regular files (their sizes, holes included).
    pub bytes: u64,
    /// Symlinks made.
    pub symlinks: u64,
    /// Character and block devices made.
    pub devices: u64,
    /// FIFOs made.
    pub fifos: u64,
    /// Sockets made.
    pub sockets: u64,
    /// Names made as hard links to an inode's first copy.
    pub hard_links: u64,
    /// Extended attributes (ACLs included) set.
    pub xattrs: u64,
    /// Whether owners were set (the process runs as root).
    pub owners_set: bool,
    /// What the host refused and was left out (never with
    /// [`ExportOptions::strict`]).
    pub skipped: Vec<Skipped>,
}

impl ExportReport {
    /// Host entries made so far (hard links included).
    pub fn entries(&self) -> u64 {
        self.dirs
            + self.files
            + self.symlinks
            + self.devices
            + self.fifos
            + self.sockets
            + self.hard_links
    }
}

/// Something [`Image::export_tree`] left out, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// The host path.
    pub path: PathBuf,
    /// What was left out.
    pub what: Skip,
    /// The host's error (`Operation not permitted (os error 1)`).
    pub reason: String,
}

/// What [`Skipped`] left out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// The whole entry: a device node the host would not make.
    Node,
    /// The entry's owner and group.
    Owner,
    /// One extended attribute (its full name).
    Xattr(String),
}

/// `device node`, `owner`, `xattr user.comment`.
impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::Node => write!(f, "device node"),
            Skip::Owner => write!(f, "owner"),
            Skip::Xattr(name) => write!(f, "xattr {name}"),
        }
    }
}

/// `out/dev/null: device node left out: Operation not permitted (os error 1)`.
impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} left out: {}",
            self.path.display(),
            self.what,
            self.reason
        )
    }
}

/// One line: `3 directories, 5 files (1234 bytes), 2 symlinks, 2 devices,
/// 1 FIFO, 1 socket, 1 hard link, 4 xattrs; owners kept; 2 left out`
/// (counts that are 0 left out of it).
impl fmt::Display for ExportReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let counts = [
            (self.dirs, "directory", "directories"),
            (self.files, "file", "files"),
            (self.symlinks, "symlink", "symlinks"),
            (self.devices, "device", "devices"),
            (self.fifos, "FIFO", "FIFOs"),
            (self.sockets, "socket", "sockets"),
            (self.hard_links, "hard link", "hard links"),
            (self.xattrs, "xattr", "xattrs"),
        ];
        let mut first = true;
        for (n, one, many) in counts {
            if n == 0 {
                continue;
            }
            let sep = if first { "" } else { ", " };
            first = false;
            write!(f, "{sep}{n} {}", if n == 1 { one } else { many })?;
            if one == "file" {
                write!(f, " ({} bytes)", self.bytes)?;
            }
        }
        if first {
            write!(f, "nothing")?;
        }
        write!(
            f,
            "; owners {}",
            if self.owners_set {
                "set"
            } else {
                "kept (not root)"
            }
        )?;
        if !self.skipped.is_empty() {
            write!(f, "; {} left out", self.skipped.len())?;
        }
        Ok(())
    }
}

impl Image {
    /// Copies `path` (absolute, in the image) and everything under it to
    /// the host directory `dest`, as debugfs's `rdump path dest` with
    /// every kind of inode, owners, modes, nanosecond times, extended
    /// attributes and hard links kept. The image is only read.
    ///
    /// # What it makes
    ///
    /// Every kind of inode becomes the same kind of host file: regular files
    /// (holes stay holes: [`Image::copy_out`] writes no block of zeros),
    /// directories, symlinks (the target's bytes as stored), character and
    /// block devices, FIFOs and sockets (`mknod(2)`). Each gets the image's
    /// permission bits (setuid, setgid and sticky included), its owner and
    /// group (`lchown(2)`, only when the process runs as root), its extended
    /// attributes (`lsetxattr(2)`: `user.`, `trusted.`, `security.` and the
    /// POSIX ACLs `system.posix_acl_access` / `_default`, in `getxattr(2)`'s
    /// form as [`Image::xattrs`] gives them; never `system.data`, which holds
    /// an inline-data file's bytes) and its access and modification times with
    /// nanoseconds (`utimensat(2)`). An inode with more than one name is
    /// copied once: its later names become hard links to the first copy
    /// (debugfs copies it again).
    ///
    /// The order per entry is: create, contents, owner, attributes, mode,
    /// times, so that `chown` does not clear a setuid bit or a file
    /// capability set after it, and a directory gets its mode, its default
    /// ACL and its times only after everything inside it is written (a
    /// directory without write permission can still be filled; its default
    /// ACL is not inherited by the copies made in it; its mtime is not moved
    /// by them). While a directory is being filled its mode is `0700`, so no
    /// other user can slip anything into the new tree.
    ///
    /// # Where it goes
    ///
    /// `export_tree("/a/b", dest)` makes `dest/b` (whatever `b` is: a file
    /// is fine too). For `/`, the root's entries go straight into `dest`, as
    /// debugfs's `rdump / dest` does; `dest`'s own mode, owner, times and
    /// attributes are left as they are (it is the caller's directory). `dest`
    /// must be an existing directory. Nothing on the host is ever replaced: an
    /// entry that already exists stops the export with [`Ext4Error::Exists`]
    /// naming the host path, before anything of that entry is written (it is
    /// made with `O_EXCL`, `mkdir`, `mknod`, `symlink` or `link`, which all
    /// refuse an existing name). Entries written before the error stay.
    ///
    /// # Without privileges
    ///
    /// What the host refuses for lack of privilege or support — a device node
    /// made without `CAP_MKNOD`, a `trusted.` or `security.` attribute set by
    /// a user, an attribute on a file system without them, an owner the
    /// host refuses — is by default skipped and listed in
    /// [`ExportReport::skipped`] with the host's reason; with
    /// [`ExportOptions::strict`] it stops the export with [`Ext4Error::Io`]
    /// instead. Owners are set only when the process runs as root
    /// ([`ExportReport::owners_set`]): for anyone else the copies belong to
    /// the caller, as with `cp -r`. FIFOs and sockets need no privilege.
    ///
    /// ```no_run
    /// use std::path::Path;
    /// use spacekit::ext4::{ExportOptions, Image, OpenMode};
    ///
    /// let mut img = Image::open("fs.img", OpenMode::ReadOnly)?;
    /// // Makes out/etc, with everything under /etc.
    /// let report = img.export_tree("/etc", Path::new("out"), ExportOptions::default())?;
    /// println!("{} entries, {} bytes", report.entries(), report.bytes);
    /// for s in &report.skipped {
    ///     println!("{s}"); // out/etc/x: xattr trusted.y left out: ...
    /// }
    /// # Ok::<(), spacekit::ext4::Ext4Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Image::lookup`] for `path`; [`Ext4Error::InvalidArgument`] for
    /// a `path` ending in `..`; [`Ext4Error::Exists`] for a host entry
    /// that already exists; [`Ext4Error::Io`] whose context names the host
    /// call and path, `"mknod out/dev/null"` (`dest` missing or not a directory, a full disk, and with
    /// [`ExportOptions::strict`] what the host refuses);
    /// [`Ext4Error::Corrupt`] for a name holding `/` or NUL, an unknown
    /// file type or a directory reached twice; as [`Image::read`],
    /// [`Image::read_dir`], [`Image::read_link`] and [`Image::xattrs`].
    /// Once the walk has begun, every error but [`Ext4Error::Exists`]
    /// comes as [`Ext4Error::At`], naming the entry in the image where it
    /// stopped (a bad name: its directory); [`Ext4Error::cause`] gives the
    /// error itself.
    pub fn export_tree(
        &mut self,
        path: &str,
        dest: &Path,
        opts: ExportOptions,
    ) -> Result<ExportReport, Ext4Error> {
        self.export_tree_with(path, dest, opts, &mut |_, _| {})
    }

    /// [`Image::export_tree`], calling `progress` after each entry of the
    /// image is handled (made, linked, or left out as in
    /// [`ExportReport::skipped`]) with the counts so far and the entry's
    /// host path.
    ///
    /// # Errors
    /// As [`Image::export_tree`].
    pub fn export_tree_with(
        &mut self,
        path: &str,
        dest: &Path,
        opts: ExportOptions,
        progress: &mut dyn FnMut(&ExportReport, &Path),
    ) -> Result<ExportReport, Ext4Error> {
        let ino = self.lookup(path)?;
        let meta = std::fs::metadata(dest).map_err(host_io("stat", dest))?;
        if !meta.is_dir() {
            let e = io::Error::from_raw_os_error(libc::ENOTDIR);
            return Err(host_io("export into", dest)(e));
        }
        // SAFETY: geteuid(2) takes nothing, cannot fail and touches no
        // memory of ours.
        let root = unsafe { libc::geteuid() } == 0;
        // The image path of `dest`'s contents: `/` for the root, else the
        // directory holding `path`'s last name.
        let base = match Path::new(path).parent() {
            Some(p) if ino != ROOT_INO => p.to_path_buf(),
            _ => PathBuf::from("/"),
        };
        let mut x = Export {
            img: self,
            opts,
            dest: dest.to_path_buf(),
            base,
            report: ExportReport {
                owners_set: root,
                ..ExportReport::default()
            },
            links: BTreeMap::new(),
            dirs: BTreeSet::new(),
            progress,
        };
        let mut stack = Vec::new();
        if ino == ROOT_INO {
            x.dirs.insert(ROOT_INO);
            x.push_children(ROOT_INO, dest, &mut stack)
                .map_err(|e| x.at(dest, e))?;
        } else {
            let name = path
                .rsplit('/')
                .find(|c| !c.is_empty() && *c != ".")
                .unwrap_or("");
            if name == ".." {
                return Err(invalid("path", 0, "ends in ..: name the directory itself"));
            }
            stack.push(Step::Enter(ino, dest.join(name)));
        }
        x.run(stack)?;
        Ok(x.report)
    }
}

/// One step of the walk.
enum Step {
    /// Make the host entry for inode `.0` at `.1` (a directory: then push
    /// its `Finish` and its entries).
    Enter(u32, PathBuf),
    /// A directory's entries are all made: its owner, attributes, mode
    /// and times.
    Finish(Inode, PathBuf),
}

/// The state of one [`Image::export_tree`].
struct Export<'a> {
    img: &'a mut Image,
    opts: ExportOptions,
    report: ExportReport,
    /// The first host path of each inode with more than one link.
    links: BTreeMap<u32, PathBuf>,
    /// Directories entered: one reached twice is a loop in a damaged
    /// image.
    dirs: BTreeSet<u32>,
    progress: &'a mut dyn FnMut(&ExportReport, &Path),
    /// The host directory the export goes into.
    dest: PathBuf,
    /// The image path of `dest`'s contents.
    base: PathBuf,
}

impl Export<'_> {
    /// Runs the steps, depth first, entries in directory order. An error
    /// names the entry it stopped at ([`Ext4Error::At`]), except a host
    /// name already taken ([`Ext4Error::Exists`] names the host path).
    fn run(&mut self, mut stack: Vec<Step>) -> Result<(), Ext4Error> {
        while let Some(step) = stack.pop() {
            let (r, host) = match step {
                Step::Enter(ino, host) => (self.enter(ino, &host, &mut stack), host),
                Step::Finish(inode, host) => (self.attributes(&inode, &host), host),
            };
            r.map_err(|e| self.at(&host, e))?;
        }
        Ok(())
    }

    /// `e`, from the step that makes host entry `host`, as an error at
    /// the entry's image path.
    fn at(&self, host: &Path, e: Ext4Error) -> Ext4Error {
        if matches!(e, Ext4Error::Exists { .. }) {
            return e;
        }
        let rel = host.strip_prefix(&self.dest).unwrap_or(host);
        Ext4Error::At {
            path: self.base.join(rel).to_string_lossy().into_owned(),
            source: Box::new(e),
        }
    }

    /// Makes the host entry of inode `ino` at `host`: a directory (then
    /// its `Finish` and its entries go on the stack) or a leaf.
    fn enter(&mut self, ino: u32, host: &Path, stack: &mut Vec<Step>) -> Result<(), Ext4Error> {
        let inode = self.img.inode(ino)?;
        if inode.mode & S_IFMT == S_IFDIR {
            if !self.dirs.insert(ino) {
                return Err(corrupt(
                    "inode",
                    None,
                    ino.into(),
                    "a directory entry leads to a directory already copied (a loop)",
                ));
            }
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(host)
                .map_err(made("mkdir", host))?;
            self.report.dirs += 1;
            (self.progress)(&self.report, host);
            // Under the entries: popped after all of them.
            stack.push(Step::Finish(inode, host.to_path_buf()));
            self.push_children(ino, host, stack)
        } else {
            self.leaf(&inode, host)?;
            (self.progress)(&self.report, host);
            Ok(())
        }
    }

    /// Pushes a step for each entry of directory `dir` (not `.`, `..` or
    /// unused ones), the first on top.
    fn push_children(
        &mut self,
        dir: u32,
        host: &Path,
        stack: &mut Vec<Step>,
    ) -> Result<(), Ext4Error> {
        for e in self.img.read_dir(dir)?.into_iter().rev() {
            if e.inode == 0 || e.name == b"." || e.name == b".." {
                continue;
            }
            if e.name.is_empty() || e.name.contains(&b'/') || e.name.contains(&0) {
                return Err(corrupt(
                    "name",
                    None,
                    e.inode.into(),
                    "a directory entry's name is empty or holds '/' or NUL",
                ));
            }
            stack.push(Step::Enter(e.inode, host.join(OsStr::from_bytes(&e.name))));
        }
        Ok(())
    }

    /// Makes the host entry of non-directory `inode` at `host`, or a hard
    /// link to its first copy; then its attributes.
    fn leaf(&mut self, inode: &Inode, host: &Path) -> Result<(), Ext4Error> {
        let ino = inode.number;
        if let Some(first) = self.links.get(&ino) {
            std::fs::hard_link(first, host).map_err(made("link", host))?;
            self.report.hard_links += 1;
            return Ok(());
        }
        let kind = inode.mode & S_IFMT;
        match kind {
            S_IFREG => {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(host)
                    .map_err(made("create", host))?;
                self.report.bytes += self.img.copy_out(ino, &f)?;
                self.report.files += 1;
            }
            S_IFLNK => {
                let target = self.img.read_link(ino)?;
                std::os::unix::fs::symlink(OsStr::from_bytes(&target), host)
                    .map_err(made("symlink", host))?;
                self.report.symlinks += 1;
            }
            S_IFCHR | S_IFBLK | S_IFIFO | S_IFSOCK => {
                let dev = match kind {
                    S_IFCHR | S_IFBLK => {
                        let (major, minor) = self.img.device_number(ino)?;
                        libc::makedev(major, minor)
                    }
                    _ => 0,
                };
                let mode = libc::mode_t::from(kind) | 0o600;
                if let Err(e) = c_path(host).and_then(|p| {
                    // SAFETY: `p` is a NUL-terminated path that lives
                    // across the call; mknod(2) only reads it.
                    check(unsafe { libc::mknod(p.as_ptr(), mode, dev) })
                }) {
                    if e.kind() == io::ErrorKind::AlreadyExists {
                        return Err(made("mknod", host)(e));
                    }
                    return self.refused(e, "mknod", host, Skip::Node);
                }
                match kind {
                    S_IFCHR | S_IFBLK => self.report.devices += 1,
                    S_IFIFO => self.report.fifos += 1,
                    _ => self.report.sockets += 1,
                }
            }
            _ => {
                return Err(corrupt(
                    "i_mode",
                    None,
                    inode.mode.into(),
                    "not a known file type",
                ))
            }
        }
        if inode.links_count > 1 {
            self.links.insert(ino, host.to_path_buf());
        }
        self.attributes(inode, host)
    }

    /// Owner (as root), extended attributes, mode (not for a symlink) and
    /// times of the host entry `host` made for `inode`, in that order.
    fn attributes(&mut self, inode: &Inode, host: &Path) -> Result<(), Ext4Error> {
        let symlink = inode.mode & S_IFMT == S_IFLNK;
        if self.report.owners_set {
            let r = std::os::unix::fs::lchown(host, Some(inode.uid), Some(inode.gid));
            if let Err(e) = r {
                self.refused(e, "lchown", host, Skip::Owner)?;
            }
        }
        if self.opts.xattrs {
            let p = c_path(host).map_err(host_io("lsetxattr", host))?;
            for (name, value) in self.img.xattrs(inode.number)? {
                if name == "system.data" {
                    continue;
                }
                let n = CString::new(name.as_bytes())
                    .map_err(|_| corrupt("e_name", None, inode.number.into(), "a NUL in a name"))?;
                // SAFETY: `p` and `n` are NUL-terminated strings and
                // `value` a live buffer of `value.len()` bytes, all
                // alive across the call, which only reads them.
                let r = check(unsafe {
                    libc::lsetxattr(
                        p.as_ptr(),
                        n.as_ptr(),
                        value.as_ptr().cast(),
                        value.len(),
                        0,
                    )
                });
                match r {
                    Ok(()) => self.report.xattrs += 1,
                    Err(e) => self.refused(e, "lsetxattr", host, Skip::Xattr(name))?,
                }
            }
        }
        if !symlink {
            let perms = std::fs::Permissions::from_mode(u32::from(inode.mode & 0o7777));
            std::fs::set_permissions(host, perms).map_err(host_io("chmod", host))?;
        }
        let t = inode.times();
        let ts = |t: Option<Timestamp>| {
            let t = t.unwrap_or(Timestamp { secs: 0, nanos: 0 });
            libc::timespec {
                tv_sec: t.secs as libc::time_t,
                tv_nsec: t.nanos.into(),
            }
        };
        let times = [ts(t.atime), ts(t.mtime)];
        let p = c_path(host).map_err(host_io("utimensat", host))?;
        // SAFETY: `p` is a NUL-terminated path and `times` an array of the
        // two timespecs utimensat(2) reads; both live across the call.
        check(unsafe {
            libc::utimensat(
                libc::AT_FDCWD,
                p.as_ptr(),
                times.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })
        .map_err(host_io("utimensat", host))
    }

    /// The host refused `call` on `host` with `e`: for lack of privilege or
    /// support (without `strict`) noted in the report as `what` left out;
    /// any other error, or with `strict`, an [`Ext4Error::Io`].
    fn refused(
        &mut self,
        e: io::Error,
        call: &str,
        host: &Path,
        what: Skip,
    ) -> Result<(), Ext4Error> {
        let refusal = matches!(
            e.raw_os_error(),
            Some(libc::EPERM | libc::EACCES | libc::EOPNOTSUPP)
        ) || (what == Skip::Owner && e.raw_os_error() == Some(libc::EINVAL))
            // An attribute the host's file system has no room for (ext4
            // without ea_inode holds a value of at most a block).
            || (matches!(what, Skip::Xattr(_))
                && matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::E2BIG)));
        if self.opts.strict || !refusal {
            return Err(host_io(call, host)(e));
        }
        self.report.skipped.push(Skipped {
            path: host.to_path_buf(),
            what,
            reason: e.to_string(),
        });
        Ok(())
    }
}

/// The error of a host call that makes `host`: [`Ext4Error::Exists`] when
/// the name is taken, else [`Ext4Error::Io`].
fn made<'p>(call: &'p str, host: &'p Path) -> impl FnOnce(io::Error) -> Ext4Error + 'p {
    move |e| {
        if e.kind() == io::ErrorKind::AlreadyExists {
            Ext4Error::Exists {
                path: host.display().to_string(),
            }
        } else {
            host_io(call, host)(e)
        }
    }
}

/// `host` as a C string.
fn c_path(host: &Path) -> io::Result<CString> {
    CString::new(host.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// A libc return value: 0 or more is success, -1 the thread's `errno`.
fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
