//! `spacekit ext4`: look at and change the block groups of a real ext4
//! image: `info`, `verify`, `free-extents`, `alloc`, `free`; and its files:
//! `ls` (`-l`), `stat`, `fallocate`, `truncate`, `rm`, `write`, `cat`, `get`,
//! `rdump`, and (in `ext4_ns.rs`) the verbs over names, inodes and
//! attributes.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde_json::{json, Value};
use spacekit::ext4::{
    AllocRequest, ExportOptions, ExportReport, Ext4Error, Image, OpenMode, COPY_CHUNK,
};

use crate::args::{parse_size, parse_u64, type_char};
use crate::ext4_args::{open, print_json, put_bytes, Common, PathArgs};

/// Arguments of `spacekit ext4`.
#[derive(Args, Debug)]
pub struct Ext4Args {
    #[command(subcommand)]
    command: Ext4Command,
}

#[derive(Subcommand, Debug)]
enum Ext4Command {
    /// The superblock's geometry and features, free counts, and per group
    /// the descriptor (bitmap and inode table locations, free counts,
    /// flags, checksums).
    Info(Common),
    /// Recompute every checksum e2fsprogs keeps (superblock, descriptors,
    /// block and inode bitmaps, 16-bit forms with 32-byte descriptors),
    /// the bitmaps' padding bits and the free counts; list each mismatch.
    /// Exit status 1 if anything disagrees.
    Verify(Common),
    /// The free extents of every group (or one), as dumpe2fs's "Free
    /// blocks:" lists, and a histogram of free extent lengths.
    FreeExtents(FreeExtentsArgs),
    /// Allocate a contiguous range of blocks (inside one group; first fit
    /// from the goal, wrapping through the groups), with full accounting:
    /// bitmap, bitmap checksum (updated incrementally), group and
    /// superblock free counts and checksums; a BLOCK_UNINIT group's bitmap
    /// is materialised. Written through a redo log (crash-safe). Prints the
    /// first block. Low-level: the blocks belong to no file, so e2fsck
    /// reports them as a leak ("Block bitmap differences") until they are
    /// freed; use `fallocate` to give blocks to a file.
    Alloc(AllocArgs),
    /// Free the blocks START..START+LEN with full accounting (the reverse of
    /// alloc). Freeing a block that is already free is an error and
    /// changes nothing. Low-level: freeing a block a file uses makes
    /// e2fsck report the file's blocks as claimed but free; use `rm` or
    /// `truncate` for files.
    Free(FreeArgs),
    /// List a directory (default `/`) as `debugfs ls -l`: inode, mode,
    /// links, size, name. With `-l`, as `ls -l` lists it: type and
    /// permissions (`drwxr-xr-x`, `crw-rw----`, `lrwxrwxrwx`,
    /// `prw-r--r--`, `srwx------`, with s/S/t/T), links, owner, group,
    /// size (`major, minor` for a device), mtime in UTC with nanoseconds,
    /// name and `-> target` for a symlink.
    Ls(LsArgs),
    /// A file's inode: mode, size, block count (512-byte units), flags,
    /// links and its extent tree as `debugfs ex` lists it.
    Stat(PathArgs),
    /// Allocate unwritten blocks for bytes 0..SIZE of PATH (created if
    /// missing), from the goal ext4 uses, skipping blocks already mapped;
    /// e2fsck-clean, written through the redo log.
    Fallocate(SizeArgs),
    /// Set PATH's size, freeing whole blocks past the new end. The block
    /// that ends the file is zeroed past the end, so bytes cut off never
    /// come back and a grown file reads zeros after its old end.
    Truncate(SizeArgs),
    /// Remove the regular file PATH and free its blocks and inode.
    Rm(PathArgs),
    /// Create the regular file PATH (it must not exist, as with debugfs
    /// `write`) holding the bytes of a host file (`--from`, sparse-aware:
    /// only its data ranges are read and holes stay holes) or of standard
    /// input. One flush at the end: on any error the file system is as
    /// before (new bytes may remain in blocks it counts as free).
    Write(WriteArgs),
    /// Print the bytes of the regular file PATH on standard output.
    Cat(PathArgs),
    /// Copy the regular file PATH out to a host file (sparse: blocks of
    /// zeros become holes).
    Get(GetArgs),
    /// Copy PATH and everything under it into the existing host directory
    /// DEST, as debugfs's `rdump`: DEST/<name of PATH> (for `/`, the
    /// root's entries go into DEST itself).
    ///
    /// Every kind of inode is made (regular files sparse, directories,
    /// symlinks, devices, FIFOs, sockets) with its mode (setuid, setgid,
    /// sticky), owner (as root), atime and mtime to the nanosecond and
    /// extended attributes and ACLs; a file with several names is copied
    /// once and its other names made hard links to the copy. An existing
    /// host entry is never replaced: the copy stops there (exit status 1).
    /// What the host refuses to a user (a device node, a `trusted.` or
    /// `security.` attribute) is left out and listed, unless `--strict`.
    /// Counts go to standard error every second on long copies.
    Rdump(RdumpArgs),
    /// Build a host directory's tree (`--from`, as `mke2fs -d`) or a tar
    /// archive (`--tar`, as `mke2fs -d` with a tarball) into an existing
    /// image: every kind of inode, contents (sparse), modes, owners,
    /// nanosecond times, hard links and xattrs. Names go in byte order
    /// (a tar's in archive order), so the same source gives the same
    /// image; `--mtime` (or
    /// SOURCE_DATE_EPOCH) clamps times. One transaction and one flush: on
    /// any error (no space: the message says how much is missing; else it
    /// names the entry) the file system is as before: every file,
    /// directory, count and checksum; blocks and inode slots it counts as
    /// free may keep bytes written before the error. Images with the
    /// `quota` feature are refused before any change.
    Populate(crate::ext4_populate::PopulateArgs),
    #[command(flatten)]
    Ns(crate::ext4_ns::NsCommand),
}

#[derive(Args, Debug)]
struct WriteArgs {
    #[command(flatten)]
    file: PathArgs,
    /// The host file to copy in (default: standard input).
    #[arg(long, value_name = "FILE")]
    from: Option<PathBuf>,
    /// The new file's permission bits, in octal.
    #[arg(long, default_value = "644", value_parser = crate::args::parse_mode)]
    mode: u16,
}

#[derive(Args, Debug)]
struct GetArgs {
    #[command(flatten)]
    file: PathArgs,
    /// The host file to write (replaced if it exists).
    out: PathBuf,
}

#[derive(Args, Debug)]
struct LsArgs {
    #[command(flatten)]
    common: Common,
    /// The directory (absolute path).
    #[arg(default_value = "/")]
    dir: String,
    /// The long listing of `ls -l`.
    #[arg(short = 'l', long = "long")]
    long: bool,
}

#[derive(Args, Debug)]
struct RdumpArgs {
    #[command(flatten)]
    file: PathArgs,
    /// The host directory to copy into (it must exist).
    dest: PathBuf,
    /// Fail (exit status 1) instead of leaving out what the host refuses.
    #[arg(long)]
    strict: bool,
    /// Leave extended attributes and ACLs out.
    #[arg(long)]
    no_xattrs: bool,
}

#[derive(Args, Debug)]
struct SizeArgs {
    #[command(flatten)]
    file: PathArgs,
    /// The size in bytes (suffixes K, M, G, T: powers of 1024).
    #[arg(long)]
    size: String,
    /// fallocate only: leave the file's size as it is.
    #[arg(long)]
    keep_size: bool,
}

#[derive(Args, Debug)]
struct FreeExtentsArgs {
    #[command(flatten)]
    common: Common,
    /// Only this group.
    #[arg(long, value_name = "G")]
    group: Option<u32>,
}

#[derive(Args, Debug)]
struct AllocArgs {
    #[command(flatten)]
    common: Common,
    /// Number of blocks (all in one group).
    #[arg(long, value_name = "N")]
    blocks: u32,
    /// Block to start looking from (default: the start of group 0).
    #[arg(long, value_name = "B", value_parser = parse_u64)]
    goal: Option<u64>,
    /// The first block must be a multiple of A (a power of two; absolute
    /// block numbers).
    #[arg(long, value_name = "A", default_value_t = 1)]
    align: u32,
}

#[derive(Args, Debug)]
struct FreeArgs {
    #[command(flatten)]
    common: Common,
    /// First block to free.
    #[arg(value_parser = parse_u64)]
    start: u64,
    /// Number of blocks.
    #[arg(value_parser = parse_u64)]
    len: u64,
}

/// Runs `spacekit ext4`.
pub fn run(args: &Ext4Args) -> Result<(), String> {
    match &args.command {
        Ext4Command::Info(c) => info(c),
        Ext4Command::Verify(c) => verify(c),
        Ext4Command::FreeExtents(a) => free_extents(a),
        Ext4Command::Alloc(a) => alloc(a),
        Ext4Command::Free(a) => free(a),
        Ext4Command::Ls(a) => ls(a),
        Ext4Command::Stat(a) => stat(a, None),
        Ext4Command::Fallocate(a) => change(a, true),
        Ext4Command::Truncate(a) => change(a, false),
        Ext4Command::Rm(a) => rm(a),
        Ext4Command::Write(a) => write(a),
        Ext4Command::Cat(a) => read_out(&a.common, &a.path, None),
        Ext4Command::Get(a) => read_out(&a.file.common, &a.file.path, Some(&a.out)),
        Ext4Command::Rdump(a) => rdump(a),
        Ext4Command::Populate(a) => crate::ext4_populate::populate(a),
        Ext4Command::Ns(c) => crate::ext4_ns::run(c),
    }
}

fn info(c: &Common) -> Result<(), String> {
    let img = open(c, OpenMode::ReadOnly)?;
    let i = img.info();
    let err = |e| format!("{}: {e}", c.image.display());
    let mut groups = Vec::new();
    for g in 0..i.group_count {
        let d = img.group(g).map_err(err)?;
        groups.push(json!({
            "group": d.group, "first_block": d.first_block, "last_block": d.last_block,
            "has_super": d.has_super, "block_bitmap": d.block_bitmap, "inode_bitmap": d.inode_bitmap,
            "inode_table": d.inode_table, "free_blocks": d.free_blocks, "free_inodes": d.free_inodes,
            "used_dirs": d.used_dirs, "itable_unused": d.itable_unused, "flags": d.flags,
            "block_bitmap_csum": d.block_bitmap_csum, "inode_bitmap_csum": d.inode_bitmap_csum,
            "checksum": d.checksum,
        }));
    }
    let v = json!({
        "image": c.image.display().to_string(),
        "block_size": i.block_size, "blocks_count": i.blocks_count, "first_data_block": i.first_data_block,
        "blocks_per_group": i.blocks_per_group, "inodes_per_group": i.inodes_per_group,
        "inodes_count": i.inodes_count, "group_count": i.group_count, "desc_size": i.desc_size,
        "reserved_gdt_blocks": i.reserved_gdt_blocks, "checksums": format!("{:?}", i.checksums),
        "checksum_seed": i.checksum_seed, "64bit": i.has_64bit, "flex_bg": i.flex_bg,
        "sparse_super": i.sparse_super, "has_journal": i.has_journal,
        "free_blocks": img.free_blocks_count(), "free_inodes": img.free_inodes_count(),
        "groups": groups,
    });
    if c.json {
        print_json(&v);
        return Ok(());
    }
    println!(
        "{}: ext4, {} blocks of {} bytes, {} groups of {} blocks, {} inodes per group",
        c.image.display(),
        i.blocks_count,
        i.block_size,
        i.group_count,
        i.blocks_per_group,
        i.inodes_per_group
    );
    println!("features: checksums {:?} (seed {:#010x}), 64bit {}, flex_bg {}, sparse_super {}, journal {}; descriptors of {} bytes",
        i.checksums, i.checksum_seed, i.has_64bit, i.flex_bg, i.sparse_super, i.has_journal, i.desc_size);
    println!(
        "free: {} blocks, {} inodes",
        img.free_blocks_count(),
        img.free_inodes_count()
    );
    for g in v["groups"].as_array().into_iter().flatten() {
        println!(
            "group {:>4}: blocks {}-{}  bitmaps {} / {}  itable {}  free {} blocks {} inodes  flags {:#x}  csum {:#06x}",
            g["group"], g["first_block"], g["last_block"], g["block_bitmap"], g["inode_bitmap"],
            g["inode_table"], g["free_blocks"], g["free_inodes"], g["flags"].as_u64().unwrap_or(0),
            g["checksum"].as_u64().unwrap_or(0)
        );
    }
    Ok(())
}

fn verify(c: &Common) -> Result<(), String> {
    let img = open(c, OpenMode::ReadOnly)?;
    let report = img
        .verify()
        .map_err(|e| format!("{}: {e}", c.image.display()))?;
    if c.json {
        let list: Vec<Value> = report
            .mismatches
            .iter()
            .map(|m| json!({"check": format!("{:?}", m.what), "group": m.group, "stored": m.stored, "computed": m.computed}))
            .collect();
        print_json(
            &json!({"image": c.image.display().to_string(), "clean": report.is_clean(), "mismatches": list}),
        );
    } else if report.is_clean() {
        println!(
            "{}: every checksum, padding bit and free count agrees",
            c.image.display()
        );
    } else {
        for m in &report.mismatches {
            println!("{m}");
        }
    }
    let n = report.mismatches.len();
    (n == 0)
        .then_some(())
        .ok_or_else(|| format!("{}: {n} mismatch(es)", c.image.display()))
}

fn free_extents(a: &FreeExtentsArgs) -> Result<(), String> {
    let c = &a.common;
    let img = open(c, OpenMode::ReadOnly)?;
    let err = |e| format!("{}: {e}", c.image.display());
    let n = img.info().group_count;
    let groups: Vec<u32> = match a.group {
        Some(g) if g >= n => return Err(format!("group {g} does not exist ({n} groups)")),
        Some(g) => vec![g],
        None => (0..n).collect(),
    };
    let mut out = Vec::new();
    for g in groups {
        let ext = img.free_extents(g).map_err(err)?;
        out.push((g, ext));
    }
    let hist = img.free_histogram().map_err(err)?;
    if c.json {
        let groups: Vec<Value> = out
            .iter()
            .map(|(g, e)| json!({"group": g, "free": e.iter().map(|(a, b)| json!([a, b])).collect::<Vec<_>>()}))
            .collect();
        let buckets: Vec<Value> = hist
            .buckets
            .iter()
            .enumerate()
            .filter(|(_, b)| b.extents > 0)
            .map(
                |(k, b)| json!({"min_blocks": 1u64 << k, "extents": b.extents, "blocks": b.blocks}),
            )
            .collect();
        print_json(&json!({
            "image": c.image.display().to_string(), "groups": groups,
            "histogram": {"free_blocks": hist.free_blocks, "extents": hist.extents,
                "min_extent": hist.min_extent, "max_extent": hist.max_extent, "buckets": buckets},
        }));
        return Ok(());
    }
    for (g, e) in &out {
        let list: Vec<String> = e
            .iter()
            .map(|(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}-{b}")
                }
            })
            .collect();
        println!("Group {g}: Free blocks: {}", list.join(", "));
    }
    print!("\n{hist}");
    Ok(())
}

fn alloc(a: &AllocArgs) -> Result<(), String> {
    let c = &a.common;
    let mut img = open(c, OpenMode::ReadWrite)?;
    let err = |e| format!("{}: {e}", c.image.display());
    let first = img
        .alloc_blocks(AllocRequest {
            goal: a.goal,
            len: a.blocks,
            align: a.align,
        })
        .map_err(err)?;
    img.flush().map_err(err)?;
    if c.json {
        print_json(
            &json!({"image": c.image.display().to_string(), "start": first, "len": a.blocks, "free_blocks": img.free_blocks_count()}),
        );
    } else {
        println!("{first}");
        eprintln!(
            "allocated blocks {first}-{} ({} blocks); {} blocks free",
            first + u64::from(a.blocks) - 1,
            a.blocks,
            img.free_blocks_count()
        );
    }
    Ok(())
}

fn free(a: &FreeArgs) -> Result<(), String> {
    let c = &a.common;
    let mut img = open(c, OpenMode::ReadWrite)?;
    let err = |e| format!("{}: {e}", c.image.display());
    img.free_blocks(a.start, a.len).map_err(err)?;
    img.flush().map_err(err)?;
    if c.json {
        print_json(
            &json!({"image": c.image.display().to_string(), "start": a.start, "len": a.len, "free_blocks": img.free_blocks_count()}),
        );
    } else {
        eprintln!(
            "freed blocks {}..+{}; {} blocks free",
            a.start,
            a.len,
            img.free_blocks_count()
        );
    }
    Ok(())
}

fn ls(a: &LsArgs) -> Result<(), String> {
    let c = &a.common;
    let mut img = open(c, OpenMode::ReadOnly)?;
    let err = |e| format!("{}: {}: {e}", c.image.display(), a.dir);
    let ino = img.lookup(&a.dir).map_err(err)?;
    if a.long {
        let rows = img.list(ino).map_err(err)?;
        if !c.json {
            print!(
                "{}",
                rows.iter().map(|r| format!("{r}\n")).collect::<String>()
            );
            return Ok(());
        }
        let rows: Vec<Value> = rows
            .iter()
            .map(|r| {
                let mut v = json!({
            "inode": r.ino, "mode": r.mode, "mode_string": r.mode_string(),
            "links": r.links, "uid": r.uid, "gid": r.gid, "size": r.size,
            "device": r.device.map(|(major, minor)| json!({"major": major, "minor": minor})),
            "mtime": r.mtime.to_string(), "mtime_secs": r.mtime.secs, "mtime_nanos": r.mtime.nanos,
            "target": null});
                put_bytes(&mut v, "name", &r.name);
                if let Some(t) = &r.target {
                    put_bytes(&mut v, "target", t);
                }
                v
            })
            .collect();
        print_json(&json!({"image": c.image.display().to_string(), "dir": a.dir, "entries": rows}));
        return Ok(());
    }
    let mut rows = Vec::new();
    for e in img.read_dir(ino).map_err(err)? {
        let i = img.inode(e.inode).map_err(err)?;
        let mut v =
            json!({"inode": e.inode, "mode": i.mode, "links": i.links_count, "size": i.size});
        put_bytes(&mut v, "name", &e.name);
        rows.push(v);
    }
    if c.json {
        print_json(&json!({"image": c.image.display().to_string(), "dir": a.dir, "entries": rows}));
        return Ok(());
    }
    for r in &rows {
        let mode = r["mode"].as_u64().unwrap_or(0) as u16;
        let t = type_char(mode);
        println!(
            "{:>8} {t}{:04o} {:>3} {:>12} {}",
            r["inode"].as_u64().unwrap_or(0),
            mode & 0o7777,
            r["links"].as_u64().unwrap_or(0),
            r["size"].as_u64().unwrap_or(0),
            r["name"].as_str().unwrap_or("")
        );
    }
    Ok(())
}

/// Prints PATH's stat; `img` is the image already open (after a change).
fn stat(a: &PathArgs, img: Option<Image>) -> Result<(), String> {
    let c = &a.common;
    let mut img = img.map_or_else(|| open(c, OpenMode::ReadOnly), Ok)?;
    let err = |e| format!("{}: {}: {e}", c.image.display(), a.path);
    let ino = img.lookup(&a.path).map_err(err)?;
    let st = img.stat(ino).map_err(err)?;
    if c.json {
        let tree: Vec<Value> = st
            .tree
            .iter()
            .map(|e| {
                json!({
            "level": e.level, "depth": e.depth, "index": e.index, "entries": e.entries,
            "logical": e.logical, "logical_end": e.logical_end, "physical": e.physical,
            "len": e.len, "unwritten": e.unwritten, "is_index": e.is_index})
            })
            .collect();
        print_json(&json!({
            "image": c.image.display().to_string(), "path": a.path, "inode": ino, "mode": st.mode,
            "size": st.size, "blocks": st.blocks, "flags": st.flags, "links": st.links,
            "depth": st.depth, "extents": tree, "free_blocks": img.free_blocks_count()}));
        return Ok(());
    }
    println!(
        "Inode: {ino}   Type: {}   Mode: {:04o}   Flags: {:#x}",
        type_char(st.mode),
        st.mode & 0o7777,
        st.flags
    );
    println!(
        "Links: {}   Size: {}   Blockcount: {}",
        st.links, st.size, st.blocks
    );
    if st.flags & 0x1000_0000 != 0 {
        // EXT4_INLINE_DATA_FL: no extents, as debugfs shows it.
        println!("Size of inline data: {}", st.size);
        return Ok(());
    }
    // One write for the whole listing (stdout is line-buffered).
    let rows: String = st.tree.iter().map(|e| format!("{e}\n")).collect();
    print!("Level Entries       Logical      Physical Length Flags\n{rows}");
    Ok(())
}

/// `fallocate` (`alloc`) or `truncate`, then one flush, then the stat.
fn change(a: &SizeArgs, alloc: bool) -> Result<(), String> {
    if a.keep_size && !alloc {
        return Err("truncate: --keep-size is fallocate's (a truncate sets the size)".into());
    }
    let c = &a.file.common;
    let size = parse_size(&a.size).map_err(|e| format!("--size: {e}"))?;
    let mut img = open(c, OpenMode::ReadWrite)?;
    let err = |e| format!("{}: {}: {e}", c.image.display(), a.file.path);
    let ino = match img.lookup(&a.file.path) {
        Ok(i) => i,
        Err(Ext4Error::NotFound { .. }) if alloc => img.create(&a.file.path, 0o644).map_err(err)?,
        Err(e) => return Err(err(e)),
    };
    if !alloc {
        img.truncate(ino, size).map_err(err)?;
    } else if size > 0 {
        img.fallocate(ino, 0, size, a.keep_size).map_err(err)?;
    }
    img.flush().map_err(err)?;
    stat(&a.file, Some(img))
}

fn rm(a: &PathArgs) -> Result<(), String> {
    let c = &a.common;
    let mut img = open(c, OpenMode::ReadWrite)?;
    let err = |e| format!("{}: {}: {e}", c.image.display(), a.path);
    img.unlink(&a.path).map_err(err)?;
    img.flush().map_err(err)?;
    if c.json {
        print_json(
            &json!({"image": c.image.display().to_string(), "removed": a.path, "free_blocks": img.free_blocks_count()}),
        );
    } else {
        eprintln!(
            "removed {}; {} blocks free",
            a.path,
            img.free_blocks_count()
        );
    }
    Ok(())
}

fn write(a: &WriteArgs) -> Result<(), String> {
    let c = &a.file.common;
    let mut img = open(c, OpenMode::ReadWrite)?;
    let err = |e| format!("{}: {}: {e}", c.image.display(), a.file.path);
    let ino = img.create(&a.file.path, a.mode).map_err(err)?;
    let bytes = match &a.from {
        Some(p) => {
            let f = std::fs::File::open(p).map_err(|e| format!("{}: {e}", p.display()))?;
            img.copy_in(ino, &f).map_err(err)?
        }
        None => {
            let mut input = std::io::stdin().lock();
            let mut w = std::io::BufWriter::with_capacity(COPY_CHUNK, img.file(ino).map_err(err)?);
            let n = std::io::copy(&mut input, &mut w).map_err(|e| {
                err(Ext4Error::Io {
                    context: "copy from standard input".into(),
                    source: e,
                })
            })?;
            w.into_inner()
                .map_err(|e| format!("{}: {}", a.file.path, e.error()))?;
            n
        }
    };
    img.flush().map_err(err)?;
    if c.json {
        print_json(
            &json!({"image": c.image.display().to_string(), "path": a.file.path, "inode": ino, "bytes": bytes, "free_blocks": img.free_blocks_count()}),
        );
    } else {
        eprintln!(
            "wrote {bytes} bytes to {} (inode {ino}); {} blocks free",
            a.file.path,
            img.free_blocks_count()
        );
    }
    Ok(())
}

/// `cat` (to standard output) or `get` (to a host file, sparse).
fn read_out(c: &Common, path: &str, out: Option<&PathBuf>) -> Result<(), String> {
    let mut img = open(c, OpenMode::ReadOnly)?;
    let err = |e| format!("{}: {path}: {e}", c.image.display());
    let ino = img.lookup(path).map_err(err)?;
    if let Some(p) = out {
        // A path that is no regular file is refused before OUT is touched.
        img.file(ino).map_err(err)?;
        crate::cleanup::on_interrupt(p);
        let size = replace_host_file(p, |dst| img.copy_out(ino, dst).map_err(err))?;
        if c.json {
            print_json(
                &json!({"image": c.image.display().to_string(), "path": path, "out": p.display().to_string(), "bytes": size}),
            );
        }
        return Ok(());
    }
    if c.json {
        return Err(
            "cat writes the file's bytes: --json has no meaning here (see `get --json`)".into(),
        );
    }
    let mut stdout = std::io::BufWriter::with_capacity(COPY_CHUNK, std::io::stdout().lock());
    std::io::copy(&mut img.file(ino).map_err(err)?, &mut stdout)
        .and_then(|_| std::io::Write::flush(&mut stdout))
        .map_err(|e| format!("{path}: {e}"))
        .map(drop)
}

/// Writes host file `dest` with `write`: a regular file (or a new one) is
/// written under a temporary name beside it, made with the old file's
/// permissions, and renamed over it only when `write` succeeded, so a
/// failure leaves `dest` as it was. Through a symlink the target is cut
/// and written in place, as `cp` writes it (a dangling one is refused, as
/// `cp` refuses it); anything else (a device) is written in place.
fn replace_host_file<T>(
    dest: &Path,
    write: impl FnOnce(&std::fs::File) -> Result<T, String>,
) -> Result<T, String> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let shown = |e: std::io::Error| format!("{}: {e}", dest.display());
    let old = std::fs::symlink_metadata(dest).ok();
    if let Some(m) = old.as_ref().filter(|m| !m.is_file()) {
        let target = std::fs::metadata(dest).map_err(|e| {
            format!(
                "{}: not writing through a dangling symlink: {e}",
                dest.display()
            )
        })?;
        let f = std::fs::OpenOptions::new()
            .write(true)
            // A regular target is cut first: the copy leaves holes and
            // zeros unwritten.
            .truncate(m.is_symlink() && target.is_file())
            .open(dest)
            .map_err(shown)?;
        return write(&f);
    }
    let name = dest.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dest.with_file_name(format!(".{name}.sk-tmp.{}", std::process::id()));
    let mode = old
        .as_ref()
        .map_or(0o666, |m| m.permissions().mode() & 0o777);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    let done = write(&f).and_then(|t| {
        if let Some(m) = &old {
            f.set_permissions(m.permissions()).map_err(shown)?;
        }
        std::fs::rename(&tmp, dest).map_err(shown)?;
        Ok(t)
    });
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done
}

/// `rdump`: the library's export, counts on stderr every second, the
/// report (JSON, or one line and what was left out on stderr).
fn rdump(a: &RdumpArgs) -> Result<(), String> {
    let c = &a.file.common;
    let mut img = open(c, OpenMode::ReadOnly)?;
    let err = |e| format!("{}: {}: {e}", c.image.display(), a.file.path);
    let opts = ExportOptions {
        strict: a.strict,
        xattrs: !a.no_xattrs,
    };
    let mut last = std::time::Instant::now();
    let mut progress = |r: &ExportReport, p: &std::path::Path| {
        if last.elapsed().as_secs() >= 1 {
            last = std::time::Instant::now();
            eprintln!(
                "rdump: {} entries, {} bytes so far ({})",
                r.entries(),
                r.bytes,
                p.display()
            );
        }
    };
    let r = img
        .export_tree_with(&a.file.path, &a.dest, opts, &mut progress)
        .map_err(err)?;
    if c.json {
        let skipped: Vec<Value> = r
            .skipped
            .iter()
            .map(|s| {
                json!({
            "path": s.path.display().to_string(), "what": s.what.to_string(), "reason": s.reason})
            })
            .collect();
        print_json(&json!({
            "image": c.image.display().to_string(), "path": a.file.path, "dest": a.dest.display().to_string(),
            "dirs": r.dirs, "files": r.files, "bytes": r.bytes, "symlinks": r.symlinks, "devices": r.devices,
            "fifos": r.fifos, "sockets": r.sockets, "hard_links": r.hard_links, "xattrs": r.xattrs,
            "owners_set": r.owners_set, "skipped": skipped}));
    } else {
        eprintln!("rdump {} to {}: {r}", a.file.path, a.dest.display());
        r.skipped.iter().for_each(|s| eprintln!("rdump: {s}"));
    }
    Ok(())
}
