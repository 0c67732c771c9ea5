//! Extended attributes: what spacekit sets, replaces and removes (in the
//! inode and in the xattr block, user., trusted., security. names and
//! POSIX ACLs) is what `debugfs ea_list` / `ea_get` and the kernel (a loop
//! mount, `getfattr`) read, and `e2fsck -fn` is clean after every flush;
//! what debugfs, `setfattr` and `setfacl` wrote reads identically through
//! spacekit; a random sequence agrees with a model; a shared block is
//! copied on write and released by unlink; a failed set changes nothing;
//! bad input and `ea_inode` values are refused.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Command;

use spacekit::ext4::{Ext4Error, Image};
use spacekit::testing::Validate;
use spacekit_testkit::rng::Rng;

use crate::fixtures::*;
use crate::oracles::*;

/// 4 KiB blocks, 256-byte inodes, metadata_csum_seed.
const K4: Config = Config {
    name: "4k",
    size: "16M",
    args: &[
        "-b",
        "4096",
        "-N",
        "512",
        "-O",
        "^has_journal,metadata_csum_seed",
    ],
};

/// 128-byte inodes, 4 KiB blocks, no checksums.
const K4_I128_NOCSUM: Config = Config {
    name: "4k-i128-nocsum",
    size: "16M",
    args: &[
        "-b",
        "4096",
        "-N",
        "512",
        "-I",
        "128",
        "-O",
        "^has_journal,^metadata_csum",
    ],
};

/// 1 and 4 KiB blocks, 256- and 128-byte inodes, with and without
/// metadata_csum.
fn configs() -> [Config; 5] {
    [K1, K1_NOCSUM, K4, K1_I128, K4_I128_NOCSUM]
}

/// Attributes by full name.
type Model = BTreeMap<String, Vec<u8>>;

const ACL_USER_OBJ: u16 = 0x01;
const ACL_USER: u16 = 0x02;
const ACL_GROUP_OBJ: u16 = 0x04;
const ACL_GROUP: u16 = 0x08;
const ACL_MASK: u16 = 0x10;
const ACL_OTHER: u16 = 0x20;
const NO_ID: u32 = u32::MAX;

/// A POSIX ACL in the form `getxattr(2)` gives.
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// `u::rw-,u:1000:rw-,g::r--,g:50:r--,m::rw-,o::r--`.
fn access_acl() -> Vec<u8> {
    acl(&[
        (ACL_USER_OBJ, 6, NO_ID),
        (ACL_USER, 6, 1000),
        (ACL_GROUP_OBJ, 4, NO_ID),
        (ACL_GROUP, 4, 50),
        (ACL_MASK, 6, NO_ID),
        (ACL_OTHER, 4, NO_ID),
    ])
}

/// `u::rwx,g::r-x,o::r-x`.
fn default_acl() -> Vec<u8> {
    acl(&[
        (ACL_USER_OBJ, 7, NO_ID),
        (ACL_GROUP_OBJ, 5, NO_ID),
        (ACL_OTHER, 5, NO_ID),
    ])
}

/// A `vfs_cap_data` revision 2 value: `cap_net_bind_service+ep`.
fn capability() -> Vec<u8> {
    let mut v = Vec::new();
    for w in [0x0200_0001u32, 1 << 10, 0, 0, 0] {
        v.extend_from_slice(&w.to_le_bytes());
    }
    v
}

const SELINUX: &[u8] = b"system_u:object_r:etc_t:s0\0";

/// An ACL with the ids of its unnamed entries set to `ACL_UNDEFINED_ID`
/// (debugfs gives 0 there, the kernel and spacekit `0xFFFFFFFF`).
fn normalise_acl(v: &[u8]) -> Vec<u8> {
    let mut v = v.to_vec();
    for at in (4..v.len()).step_by(8) {
        let tag = u16::from_le_bytes([v[at], v[at + 1]]);
        if tag != ACL_USER && tag != ACL_GROUP && at + 8 <= v.len() {
            v[at + 4..at + 8].copy_from_slice(&NO_ID.to_le_bytes());
        }
    }
    v
}

fn is_acl(name: &str) -> bool {
    name.starts_with("system.posix_acl_")
}

/// The names `debugfs ea_list` prints for `file`, in its order.
fn debugfs_names(img: &Path, file: &str) -> Vec<String> {
    let out = e2fs("debugfs")
        .arg("-R")
        .arg(format!("ea_list {file}"))
        .arg(img)
        .output()
        .unwrap();
    assert!(out.status.success(), "debugfs ea_list {file}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("  "))
        .map(|l| l.split(" (").next().unwrap().to_string())
        .collect()
}

/// The value `debugfs ea_get` gives (an ACL normalised).
fn debugfs_value(img: &Path, dir: &TempDir, file: &str, name: &str) -> Vec<u8> {
    let out = dir.path("ea_value");
    let _ = fs::remove_file(&out);
    let st = e2fs("debugfs")
        .arg("-R")
        .arg(format!("ea_get -f {} {file} {name}", out.display()))
        .arg(img)
        .output()
        .unwrap();
    assert!(st.status.success(), "debugfs ea_get {file} {name}");
    let v = fs::read(&out).unwrap_or_else(|e| panic!("debugfs ea_get {file} {name}: {e}"));
    if is_acl(name) {
        normalise_acl(&v)
    } else {
        v
    }
}

/// After a flush: e2fsck is clean, and for every file spacekit's list is
/// the model, in debugfs's order, with debugfs's values.
fn check(path: &Path, dir: &TempDir, files: &BTreeMap<String, Model>, what: &str) {
    assert_fsck_clean(path, what);
    let mut img = open_ro(path);
    for (file, model) in files {
        let ino = img.lookup(file).unwrap();
        let ours = img.xattrs(ino).unwrap();
        let names: Vec<String> = ours.iter().map(|(n, _)| n.clone()).collect();
        let as_map: Model = ours.into_iter().collect();
        assert_eq!(&as_map, model, "{what}: {file}: spacekit's list");
        assert_eq!(
            names,
            debugfs_names(path, file),
            "{what}: {file}: names and order against debugfs ea_list"
        );
        for (name, want) in model {
            assert_eq!(
                &debugfs_value(path, dir, file, name),
                want,
                "{what}: {file}: {name}: debugfs ea_get"
            );
            assert_eq!(img.get_xattr(ino, name).unwrap().as_ref(), Some(want));
        }
    }
}

/// Sets `name` on `file` in the image and the model.
fn set(img: &mut Image, files: &mut BTreeMap<String, Model>, file: &str, name: &str, value: &[u8]) {
    let ino = img.lookup(file).unwrap();
    img.set_xattr(ino, name, value)
        .unwrap_or_else(|e| panic!("set {file} {name}: {e}"));
    img.validate().unwrap();
    files
        .entry(file.into())
        .or_default()
        .insert(name.into(), value.to_vec());
}

/// Removes `name` from `file` in the image and the model.
fn remove(img: &mut Image, files: &mut BTreeMap<String, Model>, file: &str, name: &str) {
    let ino = img.lookup(file).unwrap();
    img.remove_xattr(ino, name)
        .unwrap_or_else(|e| panic!("remove {file} {name}: {e}"));
    img.validate().unwrap();
    files.get_mut(file).unwrap().remove(name);
}

#[test]
fn set_replace_remove_agree_with_debugfs_and_e2fsck() {
    require_e2fsprogs!();
    for cfg in configs() {
        let what = cfg.name;
        let dir = TempDir::new("xattr-set");
        let path = mkfs(&dir, &cfg);
        debugfs_w(&path, &dir, "mkdir d\n");
        let mut img = open_rw(&path);
        let small_inodes = img.info().inode_size == 128;
        let bs = u64::from(img.info().block_size);
        let free0 = img.free_blocks_count();
        let f = img.create("/f", 0o644).unwrap();
        let d = img.lookup("/d").unwrap();
        let ctime0 = img.inode(f).unwrap().ctime;
        let mut files = BTreeMap::new();
        files.insert("/d".to_string(), Model::new());
        // Small values: in the inode when it has room.
        set(&mut img, &mut files, "/f", "user.small", b"v");
        let inode = img.inode(f).unwrap();
        assert_eq!(inode.file_acl != 0, small_inodes, "{what}: in the inode");
        assert!(inode.ctime >= ctime0);
        set(&mut img, &mut files, "/f", "trusted.t", b"trusted value");
        set(&mut img, &mut files, "/f", "security.selinux", SELINUX);
        set(
            &mut img,
            &mut files,
            "/f",
            "security.capability",
            &capability(),
        );
        set(
            &mut img,
            &mut files,
            "/f",
            "system.posix_acl_access",
            &access_acl(),
        );
        set(&mut img, &mut files, "/f", "user.empty", b"");
        set(
            &mut img,
            &mut files,
            "/d",
            "system.posix_acl_default",
            &default_acl(),
        );
        set(&mut img, &mut files, "/d", "user.dir", b"a directory");
        img.flush().unwrap();
        check(&path, &dir, &files, &format!("{what}: set"));
        // A value that needs the block.
        let big: Vec<u8> = (0..600u32).map(|i| (i * 7) as u8).collect();
        set(&mut img, &mut files, "/f", "user.small", &big);
        let inode = img.inode(f).unwrap();
        assert_ne!(inode.file_acl, 0, "{what}: a block for 600 bytes");
        assert_eq!(inode.blocks, bs / 512, "{what}: i_blocks counts the block");
        img.flush().unwrap();
        check(
            &path,
            &dir,
            &files,
            &format!("{what}: replaced by 600 bytes"),
        );
        // And back: small again, in the inode if it has room.
        set(&mut img, &mut files, "/f", "user.small", b"w");
        set(
            &mut img,
            &mut files,
            "/f",
            "trusted.t",
            b"another trusted value",
        );
        img.flush().unwrap();
        check(&path, &dir, &files, &format!("{what}: replaced again"));
        // Everything removed: the blocks are freed, i_file_acl cleared.
        let names: Vec<String> = files["/f"].keys().cloned().collect();
        for name in names {
            remove(&mut img, &mut files, "/f", &name);
        }
        remove(&mut img, &mut files, "/d", "user.dir");
        remove(&mut img, &mut files, "/d", "system.posix_acl_default");
        assert!(matches!(
            img.remove_xattr(f, "user.small"),
            Err(Ext4Error::NoXattr { ref name }) if name == "user.small"
        ));
        for ino in [f, d] {
            let inode = img.inode(ino).unwrap();
            assert_eq!(inode.file_acl, 0, "{what}: inode {ino}: i_file_acl");
        }
        assert_eq!(img.inode(f).unwrap().blocks, 0, "{what}");
        assert_eq!(img.free_blocks_count(), free0, "{what}: blocks freed");
        img.flush().unwrap();
        check(&path, &dir, &files, &format!("{what}: removed"));
    }
}

#[test]
fn spacekit_reads_and_changes_what_debugfs_wrote() {
    require_e2fsprogs!();
    for cfg in configs() {
        let what = cfg.name;
        let dir = TempDir::new("xattr-debugfs");
        let path = mkfs(&dir, &cfg);
        let big: Vec<u8> = (0..500u32).map(|i| (i * 13 + 1) as u8).collect();
        for (name, bytes) in [
            ("big", &big[..]),
            ("acl", &access_acl()[..]),
            ("cap", &capability()[..]),
        ] {
            fs::write(dir.path(name), bytes).unwrap();
        }
        let p = |n: &str| dir.path(n).display().to_string();
        debugfs_w(
            &path,
            &dir,
            &format!(
                "write /dev/null f\n\
                 ea_set f user.a alpha\n\
                 ea_set f trusted.b beta\n\
                 ea_set -f {} f user.big\n\
                 ea_set -f {} f system.posix_acl_access\n\
                 ea_set -f {} f security.capability\n",
                p("big"),
                p("acl"),
                p("cap")
            ),
        );
        let mut files = BTreeMap::new();
        let mut m = Model::new();
        m.insert("user.a".into(), b"alpha".to_vec());
        m.insert("trusted.b".into(), b"beta".to_vec());
        m.insert("user.big".into(), big.clone());
        m.insert("system.posix_acl_access".into(), access_acl());
        m.insert("security.capability".into(), capability());
        files.insert("/f".to_string(), m);
        check(&path, &dir, &files, &format!("{what}: debugfs wrote"));
        // spacekit changes the attributes e2fsprogs laid out.
        let mut img = open_rw(&path);
        set(&mut img, &mut files, "/f", "user.a", b"changed by spacekit");
        remove(&mut img, &mut files, "/f", "trusted.b");
        set(&mut img, &mut files, "/f", "user.c", &big[..100]);
        img.flush().unwrap();
        check(&path, &dir, &files, &format!("{what}: spacekit changed"));
    }
}

/// `getfattr -d -m - -e hex` of `path`, by name.
fn getfattr(path: &Path) -> Model {
    let out = Command::new("getfattr")
        .args(["-d", "-m", "-", "-e", "hex", "--absolute-names"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "getfattr {}", path.display());
    let mut m = Model::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        if l.starts_with('#') || l.trim().is_empty() {
            continue;
        }
        let (name, v) = l.split_once('=').unwrap_or((l, ""));
        let hex = v.trim_start_matches("0x").trim_matches('"');
        let bytes = (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        m.insert(name.to_string(), bytes);
    }
    m
}

fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn hex(bytes: &[u8]) -> String {
    let mut s = "0x".to_string();
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Mounts `img` (read-write unless `ro`) on `mnt`, or says why not.
fn mount(img: &Path, mnt: &Path, ro: bool) -> bool {
    fs::create_dir_all(mnt).unwrap();
    let opts = if ro { "loop,ro" } else { "loop" };
    match Command::new("mount")
        .args(["-o", opts])
        .arg(img)
        .arg(mnt)
        .output()
    {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            println!(
                "skipping the kernel's side: mount -o {opts} failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            false
        }
        Err(e) => {
            println!("skipping the kernel's side: no mount: {e}");
            false
        }
    }
}

fn umount(mnt: &Path) {
    let st = Command::new("umount").arg(mnt).status();
    assert!(st.is_ok_and(|s| s.success()), "umount {}", mnt.display());
}

#[test]
fn the_kernel_and_spacekit_read_each_others_attributes() {
    require_e2fsprogs!();
    if Command::new("getfattr").arg("--version").output().is_err()
        || Command::new("setfacl").arg("--version").output().is_err()
    {
        println!("skipping: getfattr / setfacl not installed (packages attr, acl)");
        return;
    }
    for cfg in [K1, K1_I128, K4] {
        let what = cfg.name;
        let dir = TempDir::new("xattr-kernel");
        let path = mkfs(&dir, &cfg);
        let mnt = dir.path("mnt");
        if !mount(&path, &mnt, false) {
            return;
        }
        // The kernel writes.
        let k = mnt.join("k");
        let kd = mnt.join("kd");
        fs::write(&k, b"kernel").unwrap();
        fs::create_dir(&kd).unwrap();
        let big: Vec<u8> = (0..700u32).map(|i| (i * 3 + 5) as u8).collect();
        let ks = k.to_str().unwrap();
        run("setfattr", &["-n", "user.k", "-v", "0x6b65726e656c", ks]);
        run("setfattr", &["-n", "user.big", "-v", &hex(&big), ks]);
        run("setfattr", &["-n", "trusted.t", "-v", "0x7431", ks]);
        run(
            "setfattr",
            &["-n", "security.capability", "-v", &hex(&capability()), ks],
        );
        run("setfacl", &["-m", "u:1000:rw,g:50:r", ks]);
        run("setfacl", &["-d", "-m", "u:1000:rwx", kd.to_str().unwrap()]);
        let want_k = getfattr(&k);
        let want_kd = getfattr(&kd);
        umount(&mnt);
        assert!(want_k.contains_key("system.posix_acl_access"), "{want_k:?}");
        assert!(
            want_kd.contains_key("system.posix_acl_default"),
            "{want_kd:?}"
        );
        assert_fsck_clean(&path, what);
        let mut img = open_rw(&path);
        for (file, want) in [("/k", &want_k), ("/kd", &want_kd)] {
            let ino = img.lookup(file).unwrap();
            let got: Model = img.xattrs(ino).unwrap().into_iter().collect();
            assert_eq!(&got, want, "{what}: {file}: spacekit reads the kernel's");
        }
        // spacekit writes; the kernel reads.
        let s = img.create("/s", 0o644).unwrap();
        let kd_ino = img.lookup("/kd").unwrap();
        let mut want_s = Model::new();
        for (name, value) in [
            ("user.s", b"spacekit".to_vec()),
            ("user.big", big.clone()),
            ("security.capability", capability()),
            ("system.posix_acl_access", access_acl()),
            ("trusted.t", b"t2".to_vec()),
        ] {
            img.set_xattr(s, name, &value).unwrap();
            want_s.insert(name.into(), value);
        }
        let mut want_kd2 = want_kd.clone();
        img.set_xattr(kd_ino, "system.posix_acl_default", &default_acl())
            .unwrap();
        img.remove_xattr(kd_ino, "system.posix_acl_access").ok();
        want_kd2.remove("system.posix_acl_access");
        want_kd2.insert("system.posix_acl_default".into(), default_acl());
        img.flush().unwrap();
        drop(img);
        assert_fsck_clean(&path, what);
        assert!(mount(&path, &mnt, true), "mounted once already");
        let got_s = getfattr(&mnt.join("s"));
        let got_kd = getfattr(&mnt.join("kd"));
        umount(&mnt);
        assert_eq!(got_s, want_s, "{what}: the kernel reads spacekit's");
        assert_eq!(got_kd, want_kd2, "{what}: the kernel reads spacekit's ACL");
    }
}

/// The permission bits an access ACL gives (the group's from the mask),
/// and whether it has only the three base entries, worked out here from
/// the entries as the kernel's `posix_acl_equiv_mode` does.
fn acl_bits(value: &[u8]) -> (u16, bool) {
    let mut bits = 0u16;
    let mut base_only = true;
    for e in value[4..].chunks_exact(8) {
        let perm = u16::from_le_bytes([e[2], e[3]]);
        match u16::from_le_bytes([e[0], e[1]]) {
            ACL_USER_OBJ => bits |= perm << 6,
            ACL_GROUP_OBJ => bits |= perm << 3,
            ACL_MASK => {
                bits = (bits & !0o70) | perm << 3;
                base_only = false;
            }
            ACL_OTHER => bits |= perm,
            _ => base_only = false,
        }
    }
    (bits, base_only)
}

/// Valid ACLs for the random sequence.
fn some_acl(rng: &mut Rng) -> Vec<u8> {
    match rng.below(3) {
        0 => default_acl(),
        1 => access_acl(),
        _ => acl(&[
            (ACL_USER_OBJ, 7, NO_ID),
            (ACL_USER, rng.below(8) as u16, rng.below(5000) as u32),
            (ACL_GROUP_OBJ, 0, NO_ID),
            (ACL_MASK, 7, NO_ID),
            (ACL_OTHER, 1, NO_ID),
        ]),
    }
}

#[test]
fn random_sequence_matches_a_model() {
    require_e2fsprogs!();
    const NAMES: [&str; 7] = [
        "user.a",
        "user.bb",
        "user.a_rather_long_attribute_name_for_the_table",
        "trusted.t",
        "security.selinux",
        "security.capability",
        "system.posix_acl_access",
    ];
    for (cfg, seed) in [
        (K1, 1u64),
        (K1_I128, 2),
        (K4_I128_NOCSUM, 3),
        (K1_NOCSUM, 4),
    ] {
        let what = cfg.name;
        let dir = TempDir::new("xattr-random");
        let path = mkfs(&dir, &cfg);
        let mut img = open_rw(&path);
        let free0 = img.free_blocks_count();
        let names = ["/f0", "/f1", "/f2", "/f3"];
        let mut files: BTreeMap<String, Model> = BTreeMap::new();
        for n in names {
            img.create(n, 0o644).unwrap();
            files.insert(n.into(), Model::new());
        }
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed);
        for step in 0..400 {
            let file = names[rng.below(4) as usize];
            let ino = img.lookup(file).unwrap();
            let name = NAMES[rng.below(NAMES.len() as u64) as usize];
            let model = files.get_mut(file).unwrap();
            match rng.below(10) {
                0..=5 => {
                    let value = if name == "system.posix_acl_access" {
                        some_acl(&mut rng)
                    } else {
                        let len = match rng.below(10) {
                            0..=5 => rng.below(40),
                            6..=8 => 100 + rng.below(300),
                            _ => 700 + rng.below(400),
                        };
                        rng.bytes(len as usize)
                    };
                    match img.set_xattr(ino, name, &value) {
                        Ok(()) if name == "system.posix_acl_access" => {
                            // As the kernel sets it: the mode follows,
                            // and the three base entries alone are no ACL.
                            let (bits, base_only) = acl_bits(&value);
                            let mode = img.inode(ino).unwrap().mode & 0o777;
                            assert_eq!(mode, bits, "{what}: step {step}: mode");
                            if base_only {
                                model.remove(name);
                            } else {
                                model.insert(name.into(), value);
                            }
                        }
                        Ok(()) => {
                            model.insert(name.into(), value);
                        }
                        Err(Ext4Error::XattrNoSpace { .. }) => {}
                        Err(e) => panic!("{what}: step {step}: set {file} {name}: {e}"),
                    }
                }
                6..=8 => match img.remove_xattr(ino, name) {
                    Ok(()) => assert!(model.remove(name).is_some(), "{what}: step {step}"),
                    Err(Ext4Error::NoXattr { .. }) => assert!(!model.contains_key(name)),
                    Err(e) => panic!("{what}: step {step}: remove {file} {name}: {e}"),
                },
                _ => {
                    // Unlink releases the block; a new file has none.
                    img.unlink(file).unwrap();
                    img.create(file, 0o600).unwrap();
                    model.clear();
                }
            }
            img.validate().unwrap();
            let ino = img.lookup(file).unwrap();
            let got: Model = img.xattrs(ino).unwrap().into_iter().collect();
            assert_eq!(&got, &files[file], "{what}: step {step}: {file}");
            if step % 80 == 79 {
                img.flush().unwrap();
                check(&path, &dir, &files, &format!("{what}: step {step}"));
            }
        }
        // Everything removed, every block back.
        for n in names {
            let ino = img.lookup(n).unwrap();
            for name in files[n].keys() {
                img.remove_xattr(ino, name).unwrap();
            }
            files.get_mut(n).unwrap().clear();
        }
        for n in names {
            img.unlink(n).unwrap();
        }
        assert_eq!(img.free_blocks_count(), free0, "{what}");
        img.flush().unwrap();
        assert_fsck_clean(&path, &format!("{what}: emptied"));
    }
}

#[test]
fn a_shared_block_is_copied_on_write_and_released_by_unlink() {
    require_e2fsprogs!();
    for cfg in [K1, K1_NOCSUM, K4] {
        let what = cfg.name;
        let dir = TempDir::new("xattr-shared");
        let path = mkfs(&dir, &cfg);
        let big = vec![0x42u8; 600];
        let mut img = open_rw(&path);
        let free0 = img.free_blocks_count();
        let a = img.create("/a", 0o644).unwrap();
        for n in ["/b", "/c"] {
            img.create(n, 0o644).unwrap();
        }
        img.set_xattr(a, "user.big", &big).unwrap();
        let x = img.inode(a).unwrap().file_acl;
        let per_block = u64::from(img.info().block_size / 512);
        img.flush().unwrap();
        drop(img);
        // b and c point at a's block too; e2fsck sets its reference count
        // to 3 and re-signs it (as the kernel's mbcache shares a block).
        debugfs_w(
            &path,
            &dir,
            &format!(
                "sif b file_acl {x}\nsif b blocks {per_block}\n\
                 sif c file_acl {x}\nsif c blocks {per_block}\n"
            ),
        );
        let out = e2fs("e2fsck").arg("-fy").arg(&path).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("reference count"), "{what}: {text}");
        assert_fsck_clean(&path, &format!("{what}: shared"));
        let mut files = BTreeMap::new();
        let mut m = Model::new();
        m.insert("user.big".to_string(), big.clone());
        for n in ["/a", "/b", "/c"] {
            files.insert(n.to_string(), m.clone());
        }
        check(&path, &dir, &files, &format!("{what}: shared"));
        let mut img = open_rw(&path);
        // Unlinking c drops one reference; the block stays.
        img.unlink("/c").unwrap();
        files.remove("/c");
        assert!(img.block_in_use(x).unwrap());
        img.flush().unwrap();
        check(&path, &dir, &files, &format!("{what}: c unlinked"));
        // A change to a copies the block: a gets its own, b keeps x.
        set(&mut img, &mut files, "/a", "user.big", &big[..300]);
        set(&mut img, &mut files, "/a", "user.more", &big[..200]);
        let y = img.inode(a).unwrap().file_acl;
        let b = img.lookup("/b").unwrap();
        assert_ne!(y, x, "{what}: copied on write");
        assert_eq!(img.inode(b).unwrap().file_acl, x);
        img.flush().unwrap();
        check(&path, &dir, &files, &format!("{what}: a copied"));
        // b owns x alone now: changed in place, then freed.
        set(&mut img, &mut files, "/b", "user.b", &big[..200]);
        assert_eq!(img.inode(b).unwrap().file_acl, x, "{what}: in place");
        remove(&mut img, &mut files, "/b", "user.big");
        remove(&mut img, &mut files, "/b", "user.b");
        assert_eq!(img.inode(b).unwrap().file_acl, 0);
        assert!(!img.block_in_use(x).unwrap(), "{what}: x freed");
        img.flush().unwrap();
        check(&path, &dir, &files, &format!("{what}: b emptied"));
        // Unlinking a frees y.
        img.unlink("/a").unwrap();
        img.unlink("/b").unwrap();
        assert!(!img.block_in_use(y).unwrap(), "{what}: y freed");
        assert_eq!(img.free_blocks_count(), free0, "{what}");
        img.flush().unwrap();
        assert_fsck_clean(&path, &format!("{what}: all unlinked"));
    }
}

#[test]
fn a_failed_set_changes_nothing() {
    require_e2fsprogs!();
    for cfg in [K1, K1_NOCSUM] {
        let what = cfg.name;
        let dir = TempDir::new("xattr-faults");
        let path = mkfs(&dir, &cfg);
        let mut img = open_rw(&path);
        let f = img.create("/f", 0o644).unwrap();
        let g = img.create("/g", 0o644).unwrap();
        img.set_xattr(f, "user.a", b"small").unwrap();
        img.set_xattr(g, "user.big", &[1; 600]).unwrap();
        let xg = img.inode(g).unwrap().file_acl;
        img.flush().unwrap();
        drop(img);
        let before = fs::read(&path).unwrap();
        let bs = 1024u64;
        // The xattr block cannot be read.
        let (mut img, faults) = open_faulty(&path);
        faults.fail_read_at(Some(xg * bs));
        let e = img.set_xattr(g, "user.c", b"c").unwrap_err();
        assert!(matches!(e, Ext4Error::Io { .. }), "{what}: {e}");
        assert!(!img.is_dirty(), "{what}: a failed set left changes");
        assert!(img.xattrs(g).is_err());
        faults.fail_read_at(None);
        assert_eq!(img.xattrs(g).unwrap().len(), 1);
        drop(img);
        // The block bitmap cannot be read: user.a leaves the inode (256-
        // byte inodes: written first), then the block allocation fails,
        // and the change to the inode is undone.
        let (mut img, faults) = open_faulty(&path);
        let group = img.group(0).unwrap();
        faults.fail_read_at(Some(group.block_bitmap * bs));
        let e = img.set_xattr(f, "user.a", &[2; 700]).unwrap_err();
        assert!(matches!(e, Ext4Error::Io { .. }), "{what}: {e}");
        assert!(!img.is_dirty(), "{what}: a failed set left changes");
        assert_eq!(
            img.get_xattr(f, "user.a").unwrap().as_deref(),
            Some(&b"small"[..])
        );
        img.validate().unwrap();
        assert!(img.flush().is_ok());
        drop(img);
        assert_eq!(
            fs::read(&path).unwrap(),
            before,
            "{what}: the image changed"
        );
        // Without the fault, the same set succeeds.
        let (mut img, _faults) = open_faulty(&path);
        img.set_xattr(f, "user.a", &[2; 700]).unwrap();
        img.flush().unwrap();
        drop(img);
        assert_fsck_clean(&path, what);
    }
}

#[test]
fn bad_requests_are_refused_without_a_change() {
    require_e2fsprogs!();
    let dir = TempDir::new("xattr-refused");
    let path = mkfs(&dir, &K1);
    let mut img = open_rw(&path);
    let f = img.create("/f", 0o644).unwrap();
    img.set_xattr(f, "user.keep", b"kept").unwrap();
    img.flush().unwrap();
    let invalid = |e: Ext4Error| matches!(e, Ext4Error::InvalidArgument { .. });
    let three = acl(&[
        (ACL_USER_OBJ, 6, NO_ID),
        (ACL_GROUP_OBJ, 4, NO_ID),
        (ACL_OTHER, 4, NO_ID),
    ]);
    let no_mask = acl(&[
        (ACL_USER_OBJ, 6, NO_ID),
        (ACL_USER, 6, 7),
        (ACL_GROUP_OBJ, 4, NO_ID),
        (ACL_OTHER, 4, NO_ID),
    ]);
    let long = format!("user.{}", "x".repeat(251));
    for (name, value, ok) in [
        ("os2.x", &b"v"[..], invalid as fn(Ext4Error) -> bool),
        ("user.", b"v", invalid),
        ("user.a\0b", b"v", invalid),
        ("system.posix_acl_access", b"not an acl", invalid),
        ("system.posix_acl_access", &no_mask, invalid),
        (
            "system.posix_acl_access",
            &three[..three.len() - 1],
            invalid,
        ),
        // A default ACL belongs to a directory.
        ("system.posix_acl_default", &three, invalid),
        ("system.data", b"", |e| {
            matches!(e, Ext4Error::Unsupported { .. })
        }),
        ("system.richacl", b"", |e| {
            matches!(e, Ext4Error::Unsupported { .. })
        }),
        ("user.huge", &[0u8; 2000], |e| {
            matches!(e, Ext4Error::XattrNoSpace { len: 2000, .. })
        }),
        ("user.huger", &[0u8; 70_000], invalid),
        (&long, b"v", |e| {
            matches!(e, Ext4Error::NameTooLong { len: 256 })
        }),
    ] {
        let e = img.set_xattr(f, name, value).unwrap_err();
        assert!(ok(e), "set {name:?}");
        assert!(!img.is_dirty(), "set {name:?} changed something");
    }
    assert!(matches!(
        img.remove_xattr(f, "user.none"),
        Err(Ext4Error::NoXattr { .. })
    ));
    assert!(invalid(img.set_xattr(5000, "user.a", b"").unwrap_err()));
    // A free inode.
    let free = img.info().first_ino + 5;
    assert!(invalid(img.set_xattr(free, "user.a", b"").unwrap_err()));
    assert!(invalid(img.xattrs(free).unwrap_err()));
    // The value it has: nothing to do.
    img.set_xattr(f, "user.keep", b"kept").unwrap();
    assert!(!img.is_dirty());
    drop(img);
    let mut ro = open_ro(&path);
    assert!(matches!(
        ro.set_xattr(f, "user.keep", b"new"),
        Err(Ext4Error::ReadOnly)
    ));
    assert!(matches!(
        ro.remove_xattr(f, "user.keep"),
        Err(Ext4Error::ReadOnly)
    ));
    assert_eq!(ro.get_xattr(f, "user.keep").unwrap().unwrap(), b"kept");
    assert_eq!(ro.get_xattr(f, "user.none").unwrap(), None);
}

/// A value in an inode of its own is read; a change to that inode's
/// attributes, or its removal, is refused with nothing changed.
#[test]
fn values_in_inodes_of_their_own_are_read_not_changed() {
    require_e2fsprogs!();
    let dir = TempDir::new("xattr-ea-inode");
    let cfg = Config {
        name: "1k-ea_inode",
        size: "8M",
        args: &["-b", "1024", "-N", "256", "-O", "^has_journal,ea_inode"],
    };
    let path = mkfs(&dir, &cfg);
    fs::write(dir.path("big"), vec![7u8; 3000]).unwrap();
    debugfs_w(
        &path,
        &dir,
        &format!(
            "write /dev/null f\nea_set -f {} f user.big\n",
            dir.path("big").display()
        ),
    );
    let mut img = open_rw(&path);
    let f = img.lookup("/f").unwrap();
    let unsupported = |r: Result<(), Ext4Error>| matches!(r, Err(Ext4Error::Unsupported { .. }));
    // debugfs keeps at most a block of the value (its `ea_set -f`).
    let v = img.get_xattr(f, "user.big").unwrap().unwrap();
    assert!(v.len() >= 1024 && v.iter().all(|&b| b == 7), "{}", v.len());
    assert_eq!(img.xattrs(f).unwrap(), [("user.big".to_string(), v)]);
    assert!(unsupported(img.set_xattr(f, "user.small", b"s")));
    assert!(unsupported(img.unlink("/f")));
    assert!(!img.is_dirty());
}

/// An access ACL and the mode move together, as the kernel moves them:
/// setting an ACL sets the permission bits (the group's from the mask),
/// one of the three base entries alone is not kept, and a chmod rewrites
/// the ACL's base entries. The kernel does each to one file and spacekit
/// to another; the kernel then reads both alike (mode, `getfattr`).
#[test]
fn an_access_acl_and_the_mode_follow_each_other_as_in_the_kernel() {
    require_e2fsprogs!();
    if Command::new("getfattr").arg("--version").output().is_err() {
        println!("skipping: getfattr / setfattr not installed (package attr)");
        return;
    }
    let dir = TempDir::new("xattr-acl-mode");
    let path = mkfs(&dir, &K4);
    let mnt = dir.path("mnt");
    let full = access_acl();
    let base = default_acl();
    // The kernel's side: k1 gets the full ACL then chmod 0751; k2 the
    // base entries alone, over a file that had the full ACL.
    if !mount(&path, &mnt, false) {
        return;
    }
    for f in ["k1", "k2"] {
        fs::write(mnt.join(f), b"x").unwrap();
        let p = mnt.join(f);
        let p = p.to_str().unwrap();
        run("chmod", &["0604", p]);
        run(
            "setfattr",
            &["-n", "system.posix_acl_access", "-v", &hex(&full), p],
        );
    }
    run("chmod", &["0751", mnt.join("k1").to_str().unwrap()]);
    let k2 = mnt.join("k2");
    run(
        "setfattr",
        &[
            "-n",
            "system.posix_acl_access",
            "-v",
            &hex(&base),
            k2.to_str().unwrap(),
        ],
    );
    umount(&mnt);
    // spacekit's side, the same steps.
    let mut img = open_rw(&path);
    for f in ["/s1", "/s2"] {
        let ino = img.create(f, 0o604).unwrap();
        img.set_xattr(ino, "system.posix_acl_access", &full)
            .unwrap();
        assert_eq!(
            img.inode(ino).unwrap().mode & 0o777,
            0o664,
            "{f}: mask gives group"
        );
    }
    let s1 = img.lookup("/s1").unwrap();
    img.chmod(s1, 0o751).unwrap();
    let s2 = img.lookup("/s2").unwrap();
    img.set_xattr(s2, "system.posix_acl_access", &base).unwrap();
    // A symlink has no ACL (the kernel: EOPNOTSUPP).
    let l = img.symlink("/l", b"s1").unwrap();
    assert!(matches!(
        img.set_xattr(l, "system.posix_acl_access", &full),
        Err(Ext4Error::InvalidArgument { .. })
    ));
    img.flush().unwrap();
    drop(img);
    assert_fsck_clean(&path, "acl-mode");
    assert!(mount(&path, &mnt, true), "mounted once already");
    use std::os::unix::fs::PermissionsExt;
    let mode = |f: &str| fs::metadata(mnt.join(f)).unwrap().permissions().mode() & 0o7777;
    let read = [("k1", "s1"), ("k2", "s2")].map(|(k, s)| {
        (
            (mode(k), getfattr(&mnt.join(k))),
            (mode(s), getfattr(&mnt.join(s))),
        )
    });
    umount(&mnt);
    for (kernel, spacekit) in &read {
        assert_eq!(spacekit, kernel, "spacekit against the kernel");
    }
    assert_eq!(read[0].0 .0, 0o751, "chmod");
    assert!(read[0].0 .1.contains_key("system.posix_acl_access"));
    assert_eq!(read[1].0 .0, 0o755, "the base entries' bits");
    assert!(!read[1].0 .1.contains_key("system.posix_acl_access"));
}

/// A value debugfs put in an inode of its own (`ea_inode`) is read from
/// that inode, byte for byte what `debugfs ea_get` gives; the inode's
/// other attributes are read too. Changing that inode's attributes is
/// refused with nothing written (a rewrite would drop the value inode).
#[test]
fn values_in_their_own_inode_are_read() {
    require_e2fsprogs!();
    const EA: Config = Config {
        name: "eainode",
        size: "64M",
        args: &["-b", "4096", "-O", "ea_inode,^has_journal"],
    };
    let dir = TempDir::new("xattr-eainode");
    let path = mkfs(&dir, &EA);
    let src = dir.path("src");
    fs::write(&src, b"f\n").unwrap();
    let big = dir.path("big");
    fs::write(&big, random_bytes(4096, 9)).unwrap();
    for cmd in [
        format!("write {} f", src.display()),
        format!("ea_set -f {} /f user.big", big.display()),
        "ea_set /f user.small s".to_string(),
    ] {
        let o = e2fs("debugfs")
            .args(["-w", "-R", &cmd])
            .arg(&path)
            .output()
            .unwrap();
        assert!(o.status.success(), "{cmd}");
    }
    let want = dir.path("want");
    let o = e2fs("debugfs")
        .args(["-R", &format!("ea_get -f {} /f user.big", want.display())])
        .arg(&path)
        .output()
        .unwrap();
    assert!(o.status.success());
    let want = fs::read(&want).unwrap();
    assert_eq!(want.len(), 4096);
    let mut img = open_ro(&path);
    let f = img.lookup("/f").unwrap();
    let all = img.xattrs(f).unwrap();
    let names: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
    assert!(
        names.contains(&"user.big") && names.contains(&"user.small"),
        "{names:?}"
    );
    assert_eq!(img.get_xattr(f, "user.big").unwrap().unwrap(), want);
    assert_eq!(img.get_xattr(f, "user.small").unwrap().unwrap(), b"s");
    drop(img);
    let before = fs::read(&path).unwrap();
    let mut img = open_rw(&path);
    assert!(matches!(
        img.set_xattr(f, "user.new", b"x").unwrap_err(),
        Ext4Error::Unsupported { .. }
    ));
    assert!(matches!(
        img.remove_xattr(f, "user.small").unwrap_err(),
        Ext4Error::Unsupported { .. }
    ));
    // rdump: the value goes to the host, or, where the host's file system
    // has no room for it (ext4 without ea_inode holds a block's worth),
    // is left out and listed; the rest of the tree is copied either way.
    let out = dir.path("out");
    fs::create_dir_all(&out).unwrap();
    let report = img
        .export_tree("/", &out, spacekit::ext4::ExportOptions::default())
        .unwrap();
    assert_eq!(fs::read(out.join("f")).unwrap(), b"f\n");
    let skipped = report
        .skipped
        .iter()
        .any(|s| s.what == spacekit::ext4::Skip::Xattr("user.big".into()));
    let on_host = Command::new("getfattr")
        .args(["--only-values", "-n", "user.big"])
        .arg(out.join("f"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| o.stdout);
    assert!(
        skipped || on_host == Some(want),
        "neither copied nor listed"
    );
    img.flush().unwrap();
    drop(img);
    assert_eq!(fs::read(&path).unwrap(), before, "a refused change wrote");
}
