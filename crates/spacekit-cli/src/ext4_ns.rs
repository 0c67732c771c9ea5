//! `spacekit ext4` verbs over names and inodes, as debugfs names them:
//! `mkdir`, `rmdir`, `ln` (`-s`), `mv`, `mknod`, `chmod`, `chown`, `touch`,
//! `readlink`, `xattr list|get|set|rm`. Each change is one flush; a refused
//! one says why and changes nothing (exit status 1).

use clap::{Args, Subcommand};
use serde_json::{json, Value};
use spacekit::ext4::{Ext4Error, FileTimes, Image, NodeKind, OpenMode, Timestamp};

use crate::ext4_args::{open, print_json, put_bytes, Common, PathArgs};

#[derive(Subcommand, Debug)]
pub enum NsCommand {
    /// Make directory PATH (`.` and `..`, the parent's link count + 1).
    Mkdir(ModeArgs),
    /// Remove the empty directory PATH.
    Rmdir(PathArgs),
    /// Make PATH a hard link to the inode at TARGET, or with `-s` a
    /// symlink whose text is TARGET (fast in the inode up to 59 bytes).
    Ln(LnArgs),
    /// Rename FROM to TO with rename(2)'s rules (a file replaces a file, a
    /// directory an empty directory; `..` follows a moved directory).
    Mv(MvArgs),
    /// Make a character (`c`) or block (`b`) device, a FIFO (`p`) or a
    /// socket (`s`) at PATH.
    Mknod(MknodArgs),
    /// Set PATH's permission bits (octal).
    Chmod(ChmodArgs),
    /// Set PATH's owner and group (`UID:GID`, 32-bit numbers).
    Chown(ChownArgs),
    /// Set PATH's access and modification times (`SECONDS[.NANOS]`, default
    /// now), creating an empty file if PATH does not exist.
    Touch(TouchArgs),
    /// Print the target of symlink PATH.
    Readlink(PathArgs),
    /// List, get, set or remove PATH's extended attributes (`user.`,
    /// `trusted.`, `security.`, `system.posix_acl_*` in getxattr's format).
    Xattr(XattrArgs),
}

#[derive(Args, Debug)]
pub struct ModeArgs {
    #[command(flatten)]
    file: PathArgs,
    /// Permission bits, in octal.
    #[arg(long, default_value = "755", value_parser = crate::args::parse_mode)]
    mode: u16,
}

#[derive(Args, Debug)]
pub struct LnArgs {
    #[command(flatten)]
    common: Common,
    /// The existing path (a hard link), or the symlink's text (`-s`).
    target: String,
    /// The new name.
    path: String,
    /// Make a symlink.
    #[arg(short = 's', long)]
    symbolic: bool,
}

#[derive(Args, Debug)]
pub struct MvArgs {
    #[command(flatten)]
    common: Common,
    from: String,
    to: String,
}

#[derive(Args, Debug)]
pub struct MknodArgs {
    #[command(flatten)]
    file: PathArgs,
    /// `c`, `b`, `p` or `s`.
    kind: char,
    /// Device major number (`c` and `b`).
    major: Option<u32>,
    /// Device minor number (`c` and `b`).
    minor: Option<u32>,
    /// Permission bits, in octal.
    #[arg(long, default_value = "644", value_parser = crate::args::parse_mode)]
    mode: u16,
}

#[derive(Args, Debug)]
pub struct ChmodArgs {
    #[command(flatten)]
    file: PathArgs,
    #[arg(value_parser = crate::args::parse_mode)]
    mode: u16,
}

#[derive(Args, Debug)]
pub struct ChownArgs {
    #[command(flatten)]
    file: PathArgs,
    /// `UID:GID`.
    owner: String,
}

#[derive(Args, Debug)]
pub struct TouchArgs {
    #[command(flatten)]
    file: PathArgs,
    /// `SECONDS[.NANOS]` since the epoch (default: now, or
    /// `SOURCE_DATE_EPOCH`).
    #[arg(long, value_name = "TIME")]
    time: Option<String>,
}

#[derive(Args, Debug)]
pub struct XattrArgs {
    #[command(flatten)]
    file: PathArgs,
    /// `list`, `get`, `set` or `rm`.
    action: String,
    /// The attribute's full name (`user.comment`).
    name: Option<String>,
    /// The value for `set`: the argument's bytes; `0x…` for hex (an even
    /// number of hex digits); `"…"` (quoted, as getfattr prints text) for
    /// text that itself starts with `0x`.
    value: Option<String>,
}

/// Runs one of the verbs.
pub fn run(cmd: &NsCommand) -> Result<(), String> {
    match cmd {
        NsCommand::Mkdir(a) => change(&a.file.common, &a.file.path, |img| {
            let ino = img.mkdir(&a.file.path, a.mode)?;
            Ok(json!({"made": a.file.path, "inode": ino}))
        }),
        NsCommand::Rmdir(a) => change(&a.common, &a.path, |img| {
            img.rmdir(&a.path)?;
            Ok(json!({"removed": a.path}))
        }),
        NsCommand::Ln(a) => change(&a.common, &a.path, |img| {
            if a.symbolic {
                let ino = img.symlink(&a.path, a.target.as_bytes())?;
                return Ok(json!({"symlink": a.path, "inode": ino, "target": a.target}));
            }
            img.link(&a.target, &a.path)?;
            Ok(json!({"link": a.path, "to": a.target}))
        }),
        NsCommand::Mv(a) => change(&a.common, &a.from, |img| {
            img.rename(&a.from, &a.to)?;
            Ok(json!({"renamed": a.from, "to": a.to}))
        }),
        NsCommand::Mknod(a) => {
            let dev = |f: fn(u32, u32) -> NodeKind| match (a.major, a.minor) {
                (Some(major), Some(minor)) => Ok(f(major, minor)),
                _ => Err("a device needs MAJOR and MINOR".to_string()),
            };
            let kind = match a.kind {
                'c' => dev(|major, minor| NodeKind::Char { major, minor })?,
                'b' => dev(|major, minor| NodeKind::Block { major, minor })?,
                'p' | 's' if a.major.is_some() || a.minor.is_some() => {
                    return Err(format!(
                        "mknod: a {} has no device number: give no MAJOR or MINOR",
                        if a.kind == 'p' { "FIFO" } else { "socket" }
                    ))
                }
                'p' => NodeKind::Fifo,
                's' => NodeKind::Socket,
                k => return Err(format!("mknod: type {k:?} is not c, b, p or s")),
            };
            change(&a.file.common, &a.file.path, |img| {
                let ino = img.mknod(&a.file.path, kind, a.mode)?;
                Ok(json!({"made": a.file.path, "inode": ino}))
            })
        }
        NsCommand::Chmod(a) => change(&a.file.common, &a.file.path, |img| {
            let ino = img.lookup(&a.file.path)?;
            img.chmod(ino, a.mode)?;
            Ok(json!({"path": a.file.path, "mode": format!("{:o}", a.mode)}))
        }),
        NsCommand::Chown(a) => {
            let ids = a
                .owner
                .split_once(':')
                .and_then(|(u, g)| Some((u.parse().ok()?, g.parse().ok()?)));
            let (uid, gid): (u32, u32) =
                ids.ok_or_else(|| format!("chown: {:?} is not UID:GID", a.owner))?;
            change(&a.file.common, &a.file.path, |img| {
                let ino = img.lookup(&a.file.path)?;
                img.chown(ino, uid, gid)?;
                Ok(json!({"path": a.file.path, "uid": uid, "gid": gid}))
            })
        }
        NsCommand::Touch(a) => {
            let t = a.time.as_deref().map(parse_time).transpose()?;
            change(&a.file.common, &a.file.path, |img| {
                let ino = match img.lookup(&a.file.path) {
                    Ok(i) => i,
                    Err(Ext4Error::NotFound { .. }) => img.create(&a.file.path, 0o644)?,
                    Err(e) => return Err(e),
                };
                if let Some(t) = t {
                    img.set_times(
                        ino,
                        FileTimes {
                            atime: Some(t),
                            mtime: Some(t),
                            ..FileTimes::default()
                        },
                    )?;
                }
                Ok(json!({"touched": a.file.path, "inode": ino}))
            })
        }
        NsCommand::Readlink(a) => {
            let mut img = open(&a.common, OpenMode::ReadOnly)?;
            let err = |e| format!("{}: {}: {e}", a.common.image.display(), a.path);
            let ino = img.lookup(&a.path).map_err(err)?;
            let t = img.read_link(ino).map_err(err)?;
            if a.common.json {
                // JSON holds text: a target that is not UTF-8 also comes
                // as its bytes in hex.
                let mut v = json!({"path": a.path, "inode": ino});
                put_bytes(&mut v, "target", &t);
                print_json(&v);
                return Ok(());
            }
            // The target's bytes as they are (a name need not be UTF-8).
            let mut out = std::io::stdout().lock();
            std::io::Write::write_all(&mut out, &t)
                .and_then(|()| std::io::Write::write_all(&mut out, b"\n"))
                .map_err(|e| format!("{}: {e}", a.path))
        }
        NsCommand::Xattr(a) => xattr(a),
    }
}

/// Opens the image read-write, runs `f`, flushes, and reports what `f`
/// returned (JSON with `--json`, else one line on stderr).
fn change(
    c: &Common,
    path: &str,
    f: impl FnOnce(&mut Image) -> Result<Value, Ext4Error>,
) -> Result<(), String> {
    let mut img = open(c, OpenMode::ReadWrite)?;
    let err = |e| format!("{}: {path}: {e}", c.image.display());
    let mut v = f(&mut img).map_err(err)?;
    img.flush().map_err(err)?;
    v["image"] = json!(c.image.display().to_string());
    if c.json {
        print_json(&v);
    } else {
        eprintln!("{}", human(&v, path));
    }
    Ok(())
}

/// What a change's report names as done, when its value is the path.
const DONE: [&str; 6] = ["made", "removed", "symlink", "link", "renamed", "touched"];

/// The report of a change for a person, on one line: `IMAGE: PATH: `,
/// what was done (`made`, `removed`, ...), then the other fields as `name
/// value`, strings unquoted (`--json` prints the object itself).
fn human(v: &Value, path: &str) -> String {
    let text = |x: &Value| match x {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let fields: Vec<(&String, &Value)> = v
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| *k != "image" && *k != "path")
        .collect();
    let is_done = |k: &str, x: &Value| DONE.contains(&k) && x.as_str() == Some(path);
    let done = fields.iter().filter(|(k, x)| is_done(k, x));
    let rest = fields.iter().filter(|(k, x)| !is_done(k, x));
    let words: Vec<String> = done
        .map(|(k, _)| k.to_string())
        .chain(rest.map(|(k, x)| format!("{k} {}", text(x))))
        .collect();
    format!("{}: {path}: {}", text(&v["image"]), words.join(", "))
}

/// `SECONDS[.NANOS]`; a negative time counts back from the epoch,
/// fraction included, as GNU `touch -d @-1.25` does.
fn parse_time(s: &str) -> Result<Timestamp, String> {
    Timestamp::parse_decimal(s.as_bytes())
        .ok_or_else(|| format!("--time: {s:?} is not SECONDS[.NANOS]"))
}

fn xattr(a: &XattrArgs) -> Result<(), String> {
    let (c, path) = (&a.file.common, &a.file.path);
    let name = || {
        a.name
            .clone()
            .ok_or_else(|| format!("xattr {}: needs NAME", a.action))
    };
    match a.action.as_str() {
        "list" | "get" => {
            let mut img = open(c, OpenMode::ReadOnly)?;
            let err = |e| format!("{}: {path}: {e}", c.image.display());
            let ino = img.lookup(path).map_err(err)?;
            let mut all = img.xattrs(ino).map_err(err)?;
            // Inline data's own attribute holds file bytes, not an xattr:
            // hidden, as the kernel's listxattr hides it.
            all.retain(|(k, _)| k != "system.data");
            if a.action == "get" {
                let n = name()?;
                all.retain(|(k, _)| *k == n);
                if all.is_empty() {
                    return Err(format!("{path}: no attribute {n}"));
                }
            }
            if c.json {
                let list: Vec<Value> = all
                    .iter()
                    .map(|(k, v)| json!({"name": k, "value": hex(v)}))
                    .collect();
                print_json(
                    &json!({"image": c.image.display().to_string(), "path": path, "xattrs": list}),
                );
            } else {
                for (k, v) in all {
                    println!("{k}={}", hex(&v));
                }
            }
            Ok(())
        }
        "set" => {
            let n = name()?;
            let v = a.value.as_deref().ok_or("xattr set: needs VALUE")?;
            let quoted = v.len() >= 2 && v.starts_with('"') && v.ends_with('"');
            let bytes = match v.strip_prefix("0x") {
                _ if quoted => v.as_bytes()[1..v.len() - 1].to_vec(),
                Some(h) if h.len() % 2 == 0 && h.bytes().all(|b| b.is_ascii_hexdigit()) => h
                    .as_bytes()
                    .chunks(2)
                    .map(|d| u8::from_str_radix(std::str::from_utf8(d).unwrap_or("x"), 16))
                    .collect::<Result<Vec<u8>, _>>()
                    .map_err(|e| format!("xattr set: {v:?}: {e}"))?,
                Some(_) => return Err(format!("xattr set: {v:?}: {HEX_RULE}")),
                None => v.as_bytes().to_vec(),
            };
            change(c, path, |img| {
                let ino = img.lookup(path)?;
                img.set_xattr(ino, &n, &bytes)?;
                Ok(json!({"path": path, "set": n, "len": bytes.len()}))
            })
        }
        "rm" => {
            let n = name()?;
            change(c, path, |img| {
                let ino = img.lookup(path)?;
                img.remove_xattr(ino, &n)?;
                Ok(json!({"path": path, "removed": n}))
            })
        }
        other => Err(format!("xattr: {other:?} is not list, get, set or rm")),
    }
}

/// What `xattr set` takes after `0x`.
const HEX_RULE: &str =
    "after 0x, an even number of hex digits (quote text that starts with 0x: '\"0x…\"')";

/// `0x` and the bytes in hex, as `getfattr -e hex` prints them.
fn hex(v: &[u8]) -> String {
    let mut s = String::from("0x");
    for b in v {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::parse_time;

    /// Times before 1970 count back, their fraction too, as GNU touch
    /// reads `@-1.25`; a fraction is digits only.
    #[test]
    fn negative_times_count_their_fraction_back() {
        for (s, secs, nanos) in [
            ("5.5", 5, 500_000_000),
            ("-3", -3, 0),
            ("-0.5", -1, 500_000_000),
            ("-1.25", -2, 750_000_000),
            ("-1000000000.999999999", -1_000_000_001, 1),
            ("-2.000000000", -2, 0),
            ("0.000000001", 0, 1),
            ("1.", 1, 0),
        ] {
            let t = parse_time(s).unwrap();
            assert_eq!((t.secs, t.nanos), (secs, nanos), "{s}");
        }
        for s in ["1.+5", "1.5.5", "x", "-", ".5x"] {
            assert!(parse_time(s).is_err(), "{s}");
        }
    }
}
