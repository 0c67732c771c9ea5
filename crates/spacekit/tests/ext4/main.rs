//! Integration tests for `spacekit::ext4` against e2fsprogs.
//!
//! Every image is made at test time by `mkfs.ext4` (fixed UUID, hash seed and
//! `E2FSPROGS_FAKE_TIME`, so runs are reproducible) in a temporary directory
//! that is removed afterwards. The oracles: `dumpe2fs` (checksums, free
//! counts, "Free blocks:" lists), `e2freefrag` (the free-extent histogram),
//! `debugfs -w` (an allocation with full accounting, compared byte for byte)
//! and `e2fsck -fn` (clean after allocate-then-free; "Block bitmap
//! differences" after an allocation no inode references). Without
//! `mkfs.ext4` each test prints a notice and passes; CI installs e2fsprogs.
//!
//! * `fixtures` — temporary directories, the tools, the mkfs.ext4
//!   configurations, opening and editing images;
//! * `oracles` — e2fsck, debugfs, dumpe2fs and e2freefrag, parsed;
//! * `read` — what spacekit reads equals dumpe2fs's and e2freefrag's;
//! * `alloc` — block allocation and freeing, against debugfs and e2fsck;
//! * `inodes` — inode allocation and freeing;
//! * `inodes_read` — inodes read against `debugfs stat`, their checksums,
//!   changed through the block cache (e2fsck-clean, crash-safe);
//! * `damage` — damage behind spacekit's back, reported by `verify`;
//! * `refused` — corrupt and unsupported images, never written;
//! * `arguments` — bad arguments, refused without a change;
//! * `crash` — injected write failures, the redo log, retries;
//! * `contents` — file bytes written and read, against debugfs and the
//!   kernel;
//! * `namespace` — every kind of inode (directories, links, symlinks,
//!   devices, FIFOs, sockets) and their attributes, against debugfs, e2fsck
//!   and the kernel;
//! * `indexed` — a linear directory that outgrows its one block becomes an
//!   htree as the kernel makes it, under every hash and block size, against
//!   e2fsck, debugfs `htree_dump`/`ls`/`stat`, and the kernel's readdir,
//!   lookups and `lsattr`;
//! * `found` — defects users found on `mke2fs -d` images, casefolded
//!   directories and damaged descriptors, checked with debugfs, e2fsck and
//!   (where a loop mount is allowed) the kernel.
//! * `export` — trees copied out to the host (`rdump`) and long listings
//!   (`ls -l`), against the source tree of `mke2fs -d`, debugfs's `rdump`
//!   and the kernel;
//! * `populate` — host trees with every kind of entry built into images
//!   (`Populate`), against the kernel's read (a loop mount) or debugfs and
//!   e2fsck; reproducible images, `mke2fs -d`'s, `--at`, refusals that
//!   change nothing, faults at every write step;
//! * `xattr` — extended attributes (in the inode and the xattr block, POSIX
//!   ACLs) set, replaced and removed, against debugfs, e2fsck and the
//!   kernel's `getfattr` / `setfattr` / `setfacl` on a loop mount.
//! * `populate_tar` — trees archived by GNU tar (GNU and PAX formats,
//!   gzip, zstd) populated with `Populate::add_tar`, against e2fsck, the
//!   source read through a loop mount and a directory populate; bad
//!   archives refused with the image unchanged.

#![cfg(feature = "ext4")]

#[macro_use]
mod fixtures;
mod oracles;

mod alloc;
mod arguments;
mod contents;
mod crash;
mod damage;
mod export;
mod files;
mod found;
mod indexed;
mod inodes;
mod inodes_read;
mod namespace;
mod populate;
mod populate_tar;
mod read;
mod refused;
mod xattr;
