//! The whole-process part of `bench ext4-fallocate`: what a user who
//! reserves space for a VM disk or a database file in an image pays, start
//! to finish, with spacekit's command against debugfs's.
//!
//! A 6 GiB file is fallocated in a fresh 8 GiB image (made before every
//! run, untimed, by `mkfs.ext4` with its defaults, journal included, and a
//! fixed UUID and hash seed; then `sync -f`), at 1 KiB, 4 KiB and 64 KiB
//! blocks (4 KiB only with `--quick`). Each variant is one process, timed
//! from spawn to exit:
//! * `spacekit`: `spacekit ext4 fallocate --keep-size --size 6G IMG /big`
//!   (creates `/big`, allocates its unwritten extents, one crash-safe
//!   flush; the running `spacekit` binary, or the same library calls
//!   in-process when run from another binary, such as the test harness,
//!   and then the rows say `"run": "in-process"` and no bar is checked);
//! * `debugfs`: `debugfs -w -f SCRIPT IMG`, the script `write /dev/null
//!   big` then `fallocate big 0 LAST` (debugfs's `fallocate` keeps the
//!   size, hence `--keep-size`).
//!
//! Before anything is timed, each block size's pair of images must pass
//! `e2fsck -fn` and hold the same file: the same leaf extents (logical,
//! physical, length, unwritten) as `debugfs ex` lists them, the same
//! `i_blocks` and the same free block count. Then [`reps`] rounds run
//! debugfs and spacekit in turn; medians are reported.
//!
//! JSON rows: case `fallocate-process`, variants `debugfs` and `spacekit`,
//! fields `block_size`, `bytes` (the file's, 6 GiB), `image_bytes`,
//! `extents`, `run`, `reps`, `median_ns`. Bar: at 4 KiB blocks spacekit
//! is no slower than debugfs (medians).

use std::fs;
use std::path::Path;
use std::process::Command;

use spacekit::ext4::{Ext4Error, Image, OpenMode};

use super::procs::{
    e2fsck, fresh_image, io_err, run_cmd, run_debugfs, settle, time_rounds, Ext4Tools as Tools,
    Job, Scratch,
};
use crate::context::{BenchError, Ctx, Mode};
use crate::harness::{fmt_ns, progress, verify, Bars, Report, Row, Table};

const NAME: &str = "ext4-fallocate";

/// The file's bytes and the image's.
const FILE: u64 = 6 << 30;
const IMAGE: u64 = 8 << 30;

const UUID: &str = "5b0c2f5e-6d1a-4c3e-8f7a-0123456789cd";

/// Rounds of each variant per block size.
fn reps(mode: Mode) -> usize {
    match mode {
        Mode::Quick => 3,
        Mode::Default => 15,
        Mode::Full => 31,
    }
}

/// A fresh image at `img` (mkfs.ext4 defaults, journal included, fixed
/// UUID, hash seed and time).
fn make_image(t: &Tools, img: &Path, block: u64) -> Result<(), BenchError> {
    let args = [
        "-b".to_string(),
        block.to_string(),
        "-E".into(),
        format!("hash_seed={UUID}"),
    ];
    fresh_image(&t.mkfs, img, IMAGE, UUID, args)
}

/// spacekit's run: the `spacekit` binary, or what it does in-process.
fn spacekit(t: &Tools, img: &Path) -> Result<(), BenchError> {
    if let Some(bin) = &t.spacekit {
        let mut cmd = Command::new(bin);
        cmd.args(["ext4", "fallocate", "--keep-size", "--size"])
            .arg(FILE.to_string())
            .arg(img)
            .arg("/big");
        return run_cmd(&mut cmd, "spacekit ext4 fallocate").map(drop);
    }
    let err = |e: Ext4Error| BenchError(format!("{}: /big: {e}", img.display()));
    let mut im = Image::open(img, OpenMode::ReadWrite).map_err(err)?;
    let ino = im.create("/big", 0o644).map_err(err)?;
    im.fallocate(ino, 0, FILE, true).map_err(err)?;
    im.flush().map_err(err)
}

/// debugfs's run.
fn debugfs(t: &Tools, img: &Path, script: &Path) -> Result<(), BenchError> {
    run_debugfs(
        Command::new(&t.debugfs)
            .arg("-w")
            .arg("-f")
            .arg(script)
            .arg(img),
        "debugfs -w",
    )
}

/// What an image holds, as e2fsprogs reads it: e2fsck's exit code, the
/// leaf extents of `/big` (`debugfs ex`: logical range, physical range,
/// length, flags), its `i_blocks`, the free block count.
#[derive(Debug, PartialEq)]
struct Held {
    e2fsck_exit: i32,
    leaf_extents: Vec<String>,
    blockcount: String,
    free_blocks: String,
}

/// The leaf lines of `debugfs ex` ("LEVEL/DEPTH ENTRY/ENTRIES LOGICAL
/// PHYSICAL LENGTH FLAGS", a leaf's level equal to the depth) without
/// their first two fields: how the leaves are packed is left out, the
/// extents kept.
fn leaf_extents(ex: &str) -> Vec<String> {
    ex.lines()
        .filter_map(|l| {
            // "%2d/%2d %3d/%3d": spaces may follow a '/' or not.
            let line = l.split('/').map(str::trim).collect::<Vec<_>>().join("/");
            let mut w = line.split_whitespace();
            let (lv, depth) = w.next()?.split_once('/')?;
            w.next()?;
            (lv == depth).then(|| w.collect::<Vec<_>>().join(" "))
        })
        .collect()
}

fn held(t: &Tools, img: &Path) -> Result<Held, BenchError> {
    let request = |req: &str| -> Result<String, BenchError> {
        let out = run_cmd(
            Command::new(&t.debugfs).arg("-R").arg(req).arg(img),
            "debugfs -R",
        )?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let leaf_extents = leaf_extents(&request("ex /big")?);
    let stat = request("stat /big")?;
    let blockcount = stat
        .split_once("Blockcount:")
        .and_then(|(_, r)| r.split_whitespace().next())
        .unwrap_or("")
        .to_string();
    let sb = request("stats -h")?;
    let free_blocks = sb
        .lines()
        .find_map(|l| l.strip_prefix("Free blocks:"))
        .unwrap_or("")
        .trim()
        .to_string();
    if blockcount.is_empty() || free_blocks.is_empty() {
        return Err(BenchError(format!(
            "{}: no Blockcount in debugfs stat or no Free blocks in stats -h (a debugfs whose output this benchmark does not read)",
            img.display()
        )));
    }
    Ok(Held {
        e2fsck_exit: e2fsck(&t.e2fsck, img)?,
        leaf_extents,
        blockcount,
        free_blocks,
    })
}

/// Runs the race and adds its table, rows and bar.
pub fn run(ctx: &Ctx, report: &mut Report, bars: &mut Bars) -> Result<(), BenchError> {
    let t = match Tools::find() {
        Ok(t) => t,
        Err(missing) => {
            progress(
                NAME,
                &format!("whole-process race skipped: {missing} not found"),
            );
            report.note(format!("whole-process race skipped: {missing} not found"));
            return Ok(());
        }
    };
    let scratch = Scratch::new("fallocate-race", ctx.seed)?;
    let dir = &scratch.0;
    let (img_d, img_s) = (dir.join("debugfs.img"), dir.join("spacekit.img"));
    let script = dir.join("script");
    let blocks: &[u64] = match ctx.mode {
        Mode::Quick => &[4096],
        _ => &[1024, 4096, 65536],
    };
    let reps = reps(ctx.mode);
    let mut table = Table::new(
        "one 6 GiB fallocate in a fresh 8 GiB image (mkfs.ext4 defaults), whole process: spacekit ext4 fallocate vs debugfs -w (write + fallocate), medians",
        &["block size", "extents", "debugfs", "spacekit", "debugfs/spacekit"],
    );
    for &bs in blocks {
        let last = FILE / bs - 1;
        fs::write(
            &script,
            format!("write /dev/null big\nfallocate big 0 {last}\n"),
        )
        .map_err(io_err(&script))?;
        progress(
            NAME,
            &format!("whole process, {} KiB blocks: verifying", bs >> 10),
        );
        make_image(&t, &img_d, bs)?;
        make_image(&t, &img_s, bs)?;
        debugfs(&t, &img_d, &script)?;
        spacekit(&t, &img_s)?;
        let want = held(&t, &img_d)?;
        let got = held(&t, &img_s)?;
        if want.e2fsck_exit != 0 || want.leaf_extents.is_empty() {
            return Err(BenchError(format!(
                "debugfs's {} KiB image: e2fsck -fn exit {}, {} extents",
                bs >> 10,
                want.e2fsck_exit,
                want.leaf_extents.len()
            )));
        }
        let extents = want.leaf_extents.len();
        verify(
            &format!("the 6 GiB file at {} KiB blocks as e2fsprogs reads it (e2fsck -fn, leaf extents, i_blocks, free blocks)", bs >> 10),
            &[("debugfs", want), ("spacekit", got)],
        )?;
        let settle_dir = || settle(&t.sync, dir);
        let m = time_rounds(
            NAME,
            reps,
            &format!("whole process, {} KiB blocks", bs >> 10),
            &mut [
                Job::new(
                    "debugfs",
                    || make_image(&t, &img_d, bs).and_then(|()| settle_dir()),
                    || debugfs(&t, &img_d, &script),
                ),
                Job::new(
                    "spacekit",
                    || make_image(&t, &img_s, bs).and_then(|()| settle_dir()),
                    || spacekit(&t, &img_s),
                ),
            ],
        )?;
        m.rows(report, |v| {
            Row::new("fallocate-process", v)
                .field("block_size", bs)
                .field("bytes", FILE)
                .field("image_bytes", IMAGE)
                .field("extents", extents as u64)
                .field("run", t.run_kind())
                .field("reps", reps as u64)
        });
        table.row(vec![
            format!("{}k", bs >> 10),
            extents.to_string(),
            m.cell("debugfs"),
            m.cell("spacekit"),
            m.ratio_cell("debugfs", "spacekit"),
        ]);
        if bs == 4096 && t.spacekit.is_some() {
            bars.check(
                m.ns("spacekit") <= m.ns("debugfs"),
                format!(
                    "6 GiB fallocate in an 8 GiB image, 4 KiB blocks, whole process: spacekit {} vs debugfs {} (bar: no slower than debugfs)",
                    fmt_ns(m.ns("spacekit")),
                    fmt_ns(m.ns("debugfs"))
                ),
            );
        }
    }
    for p in [&img_d, &img_s] {
        let _ = fs::remove_file(p);
    }
    report.table(table);
    report.note(format!(
        "whole process: median of {reps} rounds, debugfs then spacekit, each after a fresh mkfs.ext4 and sync -f (untimed); spacekit {}",
        if t.spacekit.is_some() {
            "is the spacekit binary run as a process"
        } else {
            "in-process (not run from the spacekit binary): no bar"
        }
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_extents_keep_the_leaves_and_drop_the_index() {
        let ex = "Level Entries       Logical      Physical Length Flags
 0/ 1   1/  2     0 - 2416289   74050           2416290
 1/ 1   1/ 84     0 -  5776    2416 -    8192   5777 Uninit
 1/ 1  84/ 84  5777 - 21839    8514 -   24576  16063 Uninit
 0/ 1   2/  2 21840 - 4294967295  4601       4294945456
 1/ 1   1/100 21840 - 37902   24898 -   40960  16063
";
        assert_eq!(
            leaf_extents(ex),
            [
                "0 - 5776 2416 - 8192 5777 Uninit",
                "5777 - 21839 8514 - 24576 16063 Uninit",
                "21840 - 37902 24898 - 40960 16063",
            ]
        );
        // A file in the inode itself: depth 0, every line a leaf.
        let flat = "Level Entries Logical Physical Length Flags
 0/ 0   1/  1     0 -  1197  4385 -  5582   1198 Uninit
";
        assert_eq!(leaf_extents(flat), ["0 - 1197 4385 - 5582 1198 Uninit"]);
    }
}
