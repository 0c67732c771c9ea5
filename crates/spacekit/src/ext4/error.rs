//! The typed errors of the ext4 module.

use std::borrow::Cow;
use std::boxed::Box;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::string::{String, ToString};

use crate::bitmap::BitmapError;

/// What went wrong opening, reading or changing an ext4 image.
///
/// Every error that comes from the image's contents names the on-disk field
/// (`s_blocks_per_group`, `bg_inode_table`, ...) or feature (`bigalloc`) at
/// fault, and an image that gives an error at open time is never written.
#[derive(Debug)]
#[non_exhaustive]
pub enum Ext4Error {
    /// An I/O error from the operating system (or from the fault-injection
    /// hook), with what spacekit was doing.
    Io {
        /// What was being done: `"read superblock"`, `"write image"`, ...;
        /// on the host side of [`Image::export_tree`](super::Image::export_tree)
        /// the call and the host path (`"mknod out/dev/null"`).
        context: Cow<'static, str>,
        /// The operating system's error.
        source: io::Error,
    },
    /// The image is not a valid ext4 file system: a field holds a value out of
    /// range or inconsistent with the others.
    Corrupt {
        /// The on-disk field, as the kernel's `struct ext4_super_block` /
        /// `struct ext4_group_desc` names it (`s_magic`, `bg_block_bitmap`).
        field: &'static str,
        /// The group whose descriptor holds the field, for descriptor fields.
        group: Option<u32>,
        /// The value found.
        value: u64,
        /// Why it is wrong.
        reason: &'static str,
    },
    /// The image uses a feature spacekit does not handle (`bigalloc`,
    /// `meta_bg`, `needs_recovery`, ...). For features that only matter when
    /// writing (`mmp`, `readonly`, `quota`, unknown `ro_compat` bits) the read-only open
    /// succeeds and the read-write open gives this error.
    Unsupported {
        /// The feature's name as `dumpe2fs` prints it.
        feature: &'static str,
    },
    /// Feature bits spacekit does not know (`incompat`, or `ro_compat` when
    /// opening read-write).
    UnknownFeatures {
        /// `"incompat"` or `"ro_compat"`.
        kind: &'static str,
        /// The unknown bits.
        bits: u32,
    },
    /// A read-only open found a complete redo log beside the image: a flush
    /// was interrupted after the log was written, so the image may be half
    /// updated. Open it read-write once to replay the log.
    PendingRedoLog {
        /// The log's path.
        path: PathBuf,
    },
    /// Another program has the image open: for writing (any open waits
    /// for nothing and is refused), or for reading (a read-write open is
    /// refused). One writer at a time, and no reader beside a writer: each
    /// open holds a lock on the image file (a POSIX record lock, exclusive
    /// for writing, shared for reading; see [`FileDevice::open`]). Also a
    /// read-write open of an image file a loop device is attached to (the
    /// kernel may have it mounted).
    ///
    /// [`FileDevice::open`]: super::FileDevice::open
    Busy {
        /// The image's path.
        path: PathBuf,
        /// Who holds it.
        by: String,
    },
    /// The redo log beside the image is complete but belongs to another file
    /// system (its UUID differs), writes outside the image, is of a newer
    /// format than this version reads, or records a flush cut short that
    /// another program has written over since (the image holds some of its
    /// sectors as before the flush, others as neither); nothing was written
    /// and the log is kept.
    RedoLogMismatch {
        /// The log's path.
        path: PathBuf,
        /// What disagrees.
        reason: &'static str,
    },
    /// A change asked of an image opened read-only.
    ReadOnly,
    /// Metadata fails its checksum, so spacekit refuses the change rather
    /// than skip the damage or silently re-sign it: a superblock or any
    /// group descriptor failing refuses every write to the image; a bitmap
    /// or inode failing refuses the change that would use it.
    BadChecksum {
        /// `"superblock"`, `"group descriptor"`, `"block bitmap"`,
        /// `"inode bitmap"`, `"inode"` or `"xattr block"`.
        what: &'static str,
        /// The group, for per-group metadata.
        group: Option<u32>,
    },
    /// An argument out of range: a zero length, an alignment that is not a
    /// power of two, a block or inode number outside the file system.
    InvalidArgument {
        /// The argument: `"len"`, `"align"`, `"goal"`, `"block"`, `"ino"`,
        /// `"group"`.
        what: &'static str,
        /// The value given; for `"name"`, `"target"`, `"link"` and
        /// `"value"` its length in bytes; for `"secs"` an `i64` as its bits.
        value: u64,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A path that does not start with `/` (paths in the image are
    /// absolute).
    NotAbsolute {
        /// The path given.
        path: String,
    },
    /// A path component that does not exist.
    NotFound {
        /// The path up to and including the missing component.
        path: String,
    },
    /// A path component, other than the last, that is not a directory (or
    /// a directory operation on something else).
    NotADirectory {
        /// The path up to and including that component.
        path: String,
    },
    /// A directory that still holds entries ([`Image::rmdir`](super::Image::rmdir),
    /// or one [`Image::rename`](super::Image::rename) would replace).
    NotEmpty {
        /// The directory.
        path: String,
    },
    /// A path component longer than 255 bytes.
    NameTooLong {
        /// The component's length in bytes.
        len: usize,
    },
    /// A file operation (`fallocate`, `truncate`, `unlink`) on something
    /// other than a regular file.
    NotARegularFile {
        /// The inode.
        ino: u32,
    },
    /// A path that names the root directory where a name in a directory
    /// is needed: `/` cannot be created, removed, linked, moved or
    /// replaced.
    IsRoot,
    /// A path whose last component is `.` or `..` where a name in a
    /// directory is needed (`rmdir d/.`, `rename d/.. x`): refused, as
    /// `rmdir(2)` and `rename(2)` refuse it.
    DotName {
        /// The path given.
        path: String,
    },
    /// A create whose name already exists: in the image, or on the host
    /// for [`Image::export_tree`](super::Image::export_tree) (which never
    /// replaces a host file).
    Exists {
        /// The path given (a host path shown with
        /// [`Path::display`](std::path::Path::display)).
        path: String,
    },
    /// A size or end offset past the largest file size ((2^32 - 1)
    /// blocks).
    FileTooBig {
        /// The size asked for, in bytes.
        size: u64,
        /// The largest file size, in bytes.
        max: u64,
    },
    /// Not enough free space: from [`Image::alloc_blocks`](super::Image::alloc_blocks),
    /// no group has `len` free blocks in a row at the asked alignment; from
    /// [`Image::fallocate`](super::Image::fallocate) and the writes, fewer
    /// free blocks than `len`: the data blocks and as many extent-tree
    /// blocks as they may need.
    NoSpace {
        /// Blocks asked for (with a write's or fallocate's tree blocks).
        len: u32,
        /// Alignment asked for.
        align: u32,
    },
    /// No group has a free inode.
    NoFreeInodes,
    /// A [`Populate`](super::Populate) ran out of blocks or inodes; it was
    /// rolled back (the image is as before). The needs are counted over
    /// the whole source, about (data blocks without holes, one block per
    /// directory; extent and xattr blocks not counted).
    PopulateNoSpace {
        /// Blocks the whole source needs.
        blocks_needed: u64,
        /// Blocks the image has free.
        blocks_free: u64,
        /// Inodes the whole source needs.
        inodes_needed: u64,
        /// Inodes the image has free.
        inodes_free: u64,
    },
    /// A source entry that cannot be read as what it claims: a damaged tar
    /// header, an entry type spacekit cannot make, a bad name.
    BadSource {
        /// The entry (its path as far as it is known).
        entry: String,
        /// What is wrong.
        reason: Cow<'static, str>,
    },
    /// An extended attribute that the inode does not have
    /// ([`Image::get_xattr`](super::Image::get_xattr) gives `None`
    /// instead; `ENODATA` to the kernel).
    NoXattr {
        /// The attribute's full name (`user.comment`).
        name: String,
    },
    /// An extended attribute whose value fits neither in the inode nor
    /// in the one xattr block a file may have (`ENOSPC` to the kernel);
    /// nothing was changed.
    XattrNoSpace {
        /// The attribute's full name.
        name: String,
        /// The value's length in bytes.
        len: usize,
    },
    /// Freeing a block that is already free; nothing was changed.
    BlockAlreadyFree {
        /// The first free block in the range.
        block: u64,
    },
    /// Freeing a block that holds file-system metadata (a superblock, group
    /// descriptors, reserved GDT blocks, a bitmap or an inode table); nothing
    /// was changed.
    MetadataBlock {
        /// The first metadata block in the range.
        block: u64,
    },
    /// Freeing an inode that is already free; nothing was changed.
    InodeAlreadyFree {
        /// The inode number.
        ino: u32,
    },
    /// A bitmap operation failed where the module's own checks should have
    /// ruled it out; reported instead of panicking.
    Bitmap(BitmapError),
    /// An error at one entry of a walk over the image
    /// ([`Image::export_tree`](super::Image::export_tree)): the entry's
    /// path in the image and the error there. [`Ext4Error::cause`] gives
    /// the error itself.
    At {
        /// The entry's path in the image (`/usr/share/doc`; a name that is
        /// not UTF-8 lossily).
        path: String,
        /// The error at that entry.
        source: Box<Ext4Error>,
    },
}

impl Ext4Error {
    /// The error itself, without the entry an [`Ext4Error::At`] names.
    pub fn cause(&self) -> &Ext4Error {
        match self {
            Ext4Error::At { source, .. } => source.cause(),
            e => e,
        }
    }
}

impl fmt::Display for Ext4Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ext4Error::Io { context, source } => write!(f, "ext4: {context}: {source}"),
            Ext4Error::Corrupt {
                field,
                group,
                value,
                reason,
            } => match group {
                Some(g) => write!(
                    f,
                    "ext4: corrupt image: group {g}: {field} = {value}: {reason}"
                ),
                None => write!(f, "ext4: corrupt image: {field} = {value}: {reason}"),
            },
            Ext4Error::Unsupported { feature } => {
                write!(f, "ext4: unsupported feature: {feature}")?;
                let why = match *feature {
                    "needs_recovery" => {
                        " (its journal holds changes not yet in place: the image is mounted, \
                         or was not unmounted cleanly; unmount it, or replay the journal with \
                         `e2fsck -fy`)"
                    }
                    "quota" => " (writes would leave the quota files' usage behind)",
                    "mmp" => " (multi-mount protection: another host may be writing it)",
                    _ => "",
                };
                f.write_str(why)
            }
            Ext4Error::UnknownFeatures { kind, bits } => {
                write!(f, "ext4: unknown {kind} feature bits {bits:#x}")
            }
            Ext4Error::PendingRedoLog { path } => write!(
                f,
                "ext4: a complete redo log {} is pending; open read-write to replay it",
                path.display()
            ),
            Ext4Error::RedoLogMismatch { path, reason } => {
                write!(f, "ext4: redo log {}: {reason}", path.display())
            }
            Ext4Error::Busy { path, by } => {
                write!(f, "ext4: {} is busy: {by}", path.display())
            }
            Ext4Error::ReadOnly => write!(f, "ext4: the image is open read-only"),
            Ext4Error::BadChecksum { what, group } => match group {
                Some(g) => write!(f, "ext4: group {g}: {what} fails its checksum"),
                None => write!(f, "ext4: {what} fails its checksum"),
            },
            Ext4Error::InvalidArgument {
                what,
                value,
                reason,
            } => match *what {
                // For these the value is a length, not the argument.
                "name" | "target" | "link" | "value" => {
                    write!(f, "ext4: invalid {what} ({value} bytes): {reason}")
                }
                // A time before 1970 is carried as its two's complement.
                "secs" => write!(f, "ext4: invalid secs {}: {reason}", *value as i64),
                "secs before 1970" => write!(f, "ext4: invalid secs -{value}: {reason}"),
                _ => write!(f, "ext4: invalid {what} {value}: {reason}"),
            },
            Ext4Error::NotAbsolute { path } => write!(
                f,
                "ext4: `{path}` is not an absolute path (paths start with '/')"
            ),
            Ext4Error::NotFound { path } => {
                write!(f, "ext4: {path}: no such file or directory")
            }
            Ext4Error::NotADirectory { path } => write!(f, "ext4: {path}: not a directory"),
            Ext4Error::NotEmpty { path } => write!(f, "ext4: {path}: directory not empty"),
            Ext4Error::NameTooLong { len } => write!(
                f,
                "ext4: a name of {len} bytes is too long (at most 255 bytes)"
            ),
            Ext4Error::NotARegularFile { ino } => {
                write!(f, "ext4: inode {ino} is not a regular file")
            }
            Ext4Error::IsRoot => write!(
                f,
                "ext4: `/` is the root directory: it has no name to create, remove, link, move or replace"
            ),
            Ext4Error::DotName { path } => write!(
                f,
                "ext4: {path}: ends in `.` or `..`, which names no entry to create, remove or move"
            ),
            Ext4Error::Exists { path } => write!(f, "ext4: {path}: already exists"),
            Ext4Error::FileTooBig { size, max } => write!(
                f,
                "ext4: a size of {size} bytes is past the largest file size ({max} bytes)"
            ),
            Ext4Error::NoSpace { len, align: 1 } => {
                write!(f, "ext4: not enough free space for {len} blocks")
            }
            Ext4Error::NoSpace { len, align } => write!(
                f,
                "ext4: no group has {len} free blocks in a row aligned to {align}"
            ),
            Ext4Error::NoFreeInodes => write!(f, "ext4: no free inode"),
            Ext4Error::PopulateNoSpace {
                blocks_needed,
                blocks_free,
                inodes_needed,
                inodes_free,
            } => {
                write!(
                    f,
                    "ext4: the source needs about {blocks_needed} blocks and {inodes_needed} inodes; the image has {blocks_free} blocks and {inodes_free} inodes free"
                )?;
                let (b, i) = (
                    blocks_needed.saturating_sub(*blocks_free),
                    inodes_needed.saturating_sub(*inodes_free),
                );
                if b > 0 || i > 0 {
                    write!(f, " ({b} blocks and {i} inodes short)")?;
                }
                write!(f, "; nothing was added")
            }
            Ext4Error::BadSource { entry, reason } => {
                write!(f, "ext4: source entry {entry}: {reason}")
            }
            Ext4Error::NoXattr { name } => write!(f, "ext4: no extended attribute {name}"),
            Ext4Error::XattrNoSpace { name, len } => write!(
                f,
                "ext4: extended attribute {name} ({len} bytes) fits neither in the inode nor in an xattr block"
            ),
            Ext4Error::BlockAlreadyFree { block } => {
                write!(f, "ext4: block {block} is already free")
            }
            Ext4Error::MetadataBlock { block } => {
                write!(f, "ext4: block {block} holds file-system metadata")
            }
            Ext4Error::InodeAlreadyFree { ino } => write!(f, "ext4: inode {ino} is already free"),
            Ext4Error::Bitmap(e) => write!(f, "ext4: internal bitmap error: {e}"),
            Ext4Error::At { path, source } => {
                let inner = source.to_string();
                let inner = inner.strip_prefix("ext4: ").unwrap_or(&inner);
                write!(f, "ext4: {path}: {inner}")
            }
        }
    }
}

impl core::error::Error for Ext4Error {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Ext4Error::Io { source, .. } => Some(source),
            Ext4Error::Bitmap(e) => Some(e),
            Ext4Error::At { source, .. } => Some(&**source),
            _ => None,
        }
    }
}

impl From<BitmapError> for Ext4Error {
    fn from(e: BitmapError) -> Self {
        Ext4Error::Bitmap(e)
    }
}

/// Shorthand for a [`Ext4Error::Corrupt`].
pub(crate) fn corrupt(
    field: &'static str,
    group: Option<u32>,
    value: u64,
    reason: &'static str,
) -> Ext4Error {
    Ext4Error::Corrupt {
        field,
        group,
        value,
        reason,
    }
}

/// Shorthand for an [`Ext4Error::InvalidArgument`].
pub(crate) fn invalid(what: &'static str, value: u64, reason: &'static str) -> Ext4Error {
    Ext4Error::InvalidArgument {
        what,
        value,
        reason,
    }
}

/// Wraps an I/O error with its context.
/// An error opening the image file at `path`
/// ([`FileDevice::open`](super::FileDevice::open)): [`Ext4Error::Busy`]
/// when another program holds it, else [`Ext4Error::Io`].
pub(crate) fn opening(path: &std::path::Path, e: io::Error) -> Ext4Error {
    match super::device::Busy::of(&e) {
        Some(b) => Ext4Error::Busy {
            path: path.to_path_buf(),
            by: b.0.clone(),
        },
        None => io("open image")(e),
    }
}

pub(crate) fn io(context: &'static str) -> impl FnOnce(io::Error) -> Ext4Error {
    move |source| Ext4Error::Io {
        context: Cow::Borrowed(context),
        source,
    }
}

/// Wraps an I/O error on host path `path` with the call that failed:
/// the context reads `"{call} {path}"`.
pub(crate) fn host_io(call: &str, path: &Path) -> impl FnOnce(io::Error) -> Ext4Error {
    let context = Cow::Owned(std::format!("{call} {}", path.display()));
    move |source| Ext4Error::Io { context, source }
}
