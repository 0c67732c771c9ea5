//! What the benchmarks that race peer tools as whole processes share
//! (`ext4-write`, `ext4-populate`): finding the tools and the `spacekit`
//! binary, running a command to its end (optionally with its peak memory),
//! a scratch directory, `sync -f` and `e2fsck -fn`, and timed rounds in
//! which every variant runs once in turn after an untimed setup.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::Rng;

use crate::context::BenchError;
use crate::harness::{median, progress, Medians, Report};

/// The program `name` (`mkfs.ext4`, `debugfs`, `cp`), if installed: on
/// `PATH`, or in the sbin and bin folders (e2fsprogs lives in sbin, often
/// not on a user's `PATH`).
pub fn tool(name: &str) -> Option<PathBuf> {
    let dirs = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    dirs.into_iter()
        .chain(["/sbin", "/usr/sbin", "/bin", "/usr/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The `spacekit` binary, when this process is it (run from another
/// binary, such as a test harness, the benchmarks call the library
/// in-process instead).
pub fn spacekit_exe() -> Option<PathBuf> {
    std::env::current_exe()
        .ok()
        .filter(|p| p.file_stem().is_some_and(|s| s == "spacekit"))
}

/// The tools every ext4 benchmark runs (e2fsprogs, `cp`, `sync`) and
/// the `spacekit` binary.
pub struct Ext4Tools {
    /// `mkfs.ext4`.
    pub mkfs: PathBuf,
    /// `debugfs`.
    pub debugfs: PathBuf,
    /// `e2fsck`.
    pub e2fsck: PathBuf,
    /// `cp`.
    pub cp: PathBuf,
    /// `cat`.
    pub cat: PathBuf,
    /// `sync`.
    pub sync: PathBuf,
    /// The `spacekit` binary, when this process is it.
    pub spacekit: Option<PathBuf>,
}

impl Ext4Tools {
    /// The tools, or the name of the first one missing.
    pub fn find() -> Result<Ext4Tools, &'static str> {
        Ok(Ext4Tools {
            mkfs: need("mkfs.ext4")?,
            debugfs: need("debugfs")?,
            e2fsck: need("e2fsck")?,
            cp: need("cp")?,
            cat: need("cat")?,
            sync: need("sync")?,
            spacekit: spacekit_exe(),
        })
    }

    /// How spacekit runs: `process` (the `spacekit` binary) or
    /// `in-process` (the library, from another binary).
    pub fn run_kind(&self) -> &'static str {
        if self.spacekit.is_some() {
            "process"
        } else {
            "in-process"
        }
    }
}

/// [`tool`], or its name as the error.
pub fn need(name: &'static str) -> Result<PathBuf, &'static str> {
    tool(name).ok_or(name)
}

/// The report of benchmark `bench` skipped because tool `missing` is not
/// installed: one line, and the note `skipped: ...`.
pub fn skipped(bench: &str, missing: &str) -> Report {
    println!("{bench}: skipped: {missing} not found");
    let mut report = Report::default();
    report.note(format!("skipped: {missing} not found"));
    report
}

/// A scratch directory, removed with everything in it when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// `spacekit-bench-NAME-PID-SEED` in the temporary directory (the file
    /// system a user's images would be on), created.
    pub fn new(name: &str, seed: u64) -> Result<Scratch, BenchError> {
        let dir = std::env::temp_dir().join(format!(
            "spacekit-bench-{name}-{}-{seed}",
            std::process::id()
        ));
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// For a run interrupted before its scratch directories were dropped
/// (Ctrl-C): unmounts this process's loop mounts under them and removes
/// every `spacekit-bench-*-PID-*` entry of the temporary directory and of
/// `/dev/shm` (images, copies, a migration socket).
pub fn remove_scratch() {
    let pid = std::process::id();
    let ours =
        |name: &str| name.starts_with("spacekit-bench-") && name.contains(&format!("-{pid}-"));
    // Mounts first: a mounted directory cannot be removed.
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    for point in mounts.lines().filter_map(|l| l.split(' ').nth(1)) {
        if point.split('/').any(ours) {
            // Lazily: the run may still be reading it.
            let _ = Command::new("umount").arg("-l").arg(point).output();
        }
    }
    for dir in [std::env::temp_dir(), PathBuf::from("/dev/shm")] {
        for e in fs::read_dir(&dir).into_iter().flatten().flatten() {
            if ours(&e.file_name().to_string_lossy()) {
                let p = e.path();
                let _ = if p.is_dir() {
                    fs::remove_dir_all(&p)
                } else {
                    fs::remove_file(&p)
                };
            }
        }
    }
}

/// A host error on `path` as a [`BenchError`].
pub fn io_err(path: &Path) -> impl Fn(std::io::Error) -> BenchError + '_ {
    move |e| BenchError(format!("{}: {e}", path.display()))
}

/// Set by [`interrupt`]: no further command starts.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Stops the run at its next command or round (Ctrl-C): it then fails
/// with "interrupted", and its scratch directories and mounts are dropped
/// on the way out.
pub fn interrupt() {
    INTERRUPTED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether [`interrupt`] was called.
pub fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::Relaxed)
}

fn check_interrupt() -> Result<(), BenchError> {
    if interrupted() {
        return Err(BenchError("interrupted".into()));
    }
    Ok(())
}

/// Runs `cmd` to its end; fails unless it exits 0.
pub fn run_cmd(cmd: &mut Command, what: &str) -> Result<Output, BenchError> {
    check_interrupt()?;
    let out = cmd
        .output()
        .map_err(|e| BenchError(format!("cannot run {what}: {e}")))?;
    if !out.status.success() {
        return Err(BenchError(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out)
}

/// A child's peak resident memory, from `wait4`'s `ru_maxrss`.
///
/// Linux counts in it the spawning process's own peak at the moment the
/// child execs (`exec_mmap` keeps the old address space's high-water mark,
/// and a spawned child starts on a copy of ours, or on ours itself with
/// vfork). So the figure is the child's own peak when it is above this
/// process's peak (`exact`), and only an upper bound of it otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peak {
    /// Bytes.
    pub bytes: u64,
    /// Whether `bytes` is the child's own peak (else: at most that).
    pub exact: bool,
}

impl Peak {
    /// The larger of two.
    pub fn max(self, other: Peak) -> Peak {
        if other.bytes > self.bytes {
            other
        } else {
            self
        }
    }
}

/// This process's own peak resident memory in bytes.
pub fn self_peak() -> u64 {
    // SAFETY: `rusage` is a plain C struct of integers, for which all
    // zero bytes is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is valid and writable for the call.
    let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if r == 0 {
        usage.ru_maxrss.max(0) as u64 * 1024
    } else {
        0
    }
}

/// Runs `cmd` to its end (standard output discarded) and returns its peak
/// resident memory ([`Peak`]: `ru_maxrss` of `wait4`, this process alone,
/// not its children); fails unless it exits 0.
pub fn run_peak(cmd: &mut Command, what: &str) -> Result<Peak, BenchError> {
    check_interrupt()?;
    let ours = self_peak();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| BenchError(format!("cannot run {what}: {e}")))?;
    // Read standard error to its end first (the child blocks on a full
    // pipe otherwise); it ends when the child exits.
    let mut err = Vec::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_end(&mut err);
    }
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: `rusage` is a plain C struct of integers, for which all
    // zero bytes is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = loop {
        // SAFETY: `pid` is our own child, not yet waited for (`child` is
        // never waited on: dropping a `Child` does not wait); `status` and
        // `usage` are valid, writable and live for the call.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break r;
        }
    };
    if r < 0 {
        return Err(BenchError(format!(
            "{what}: wait4: {}",
            std::io::Error::last_os_error()
        )));
    }
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        return Err(BenchError(format!(
            "{what} failed (wait status {status:#x}): {}",
            String::from_utf8_lossy(&err).trim()
        )));
    }
    // ru_maxrss is in KiB on Linux.
    let bytes = usage.ru_maxrss.max(0) as u64 * 1024;
    Ok(Peak {
        bytes,
        exact: bytes > ours,
    })
}

/// Runs debugfs: it exits 0 even when a command fails, so anything on
/// standard error besides its version banner is a failure.
pub fn run_debugfs(cmd: &mut Command, what: &str) -> Result<(), BenchError> {
    check_interrupt()?;
    let out = run_cmd(cmd, what)?;
    let err = String::from_utf8_lossy(&out.stderr);
    let bad: Vec<&str> = err
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("debugfs "))
        .take(3)
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(BenchError(format!("{what}: {}", bad.join("; "))))
    }
}

/// A fresh image at `img`, `bytes` long: `mkfs.ext4 -F -q -U UUID ARGS
/// IMG` (`mkfs` is the path of the tool) at a fixed time
/// (`E2FSPROGS_FAKE_TIME`), so two runs make the same image.
pub fn fresh_image<A: AsRef<std::ffi::OsStr>>(
    mkfs: &Path,
    img: &Path,
    bytes: u64,
    uuid: &str,
    args: impl IntoIterator<Item = A>,
) -> Result<(), BenchError> {
    let _ = fs::remove_file(img);
    fs::File::create(img)
        .and_then(|f| f.set_len(bytes))
        .map_err(io_err(img))?;
    let mut cmd = Command::new(mkfs);
    cmd.env("E2FSPROGS_FAKE_TIME", "1700000000")
        .args(["-F", "-q", "-U", uuid])
        .args(args)
        .arg(img);
    run_cmd(&mut cmd, "mkfs.ext4").map(drop)
}

/// What `spacekit ext4 populate IMG --from SRC` does, in-process (for a
/// benchmark not run from the spacekit binary).
pub fn populate_in_process(img: &Path, src: &Path) -> Result<(), BenchError> {
    use spacekit::ext4::{Image, OpenMode, Populate, PopulateOptions};
    let err = |e| BenchError(format!("{}: populate: {e}", img.display()));
    let mut im = Image::open(img, OpenMode::ReadWrite).map_err(err)?;
    let mut pop = Populate::new(&mut im, "/", PopulateOptions::default()).map_err(err)?;
    pop.add_dir(src).map_err(err)?;
    pop.finish().map(drop).map_err(err)
}

/// `sync -f DIR` (`sync` is the path of the tool): the file system's dirty
/// pages written back, so no write-back of an earlier variant lands in the
/// next one's time (untimed).
pub fn settle(sync: &Path, dir: &Path) -> Result<(), BenchError> {
    run_cmd(Command::new(sync).arg("-f").arg(dir), "sync -f").map(drop)
}

/// `e2fsck -fn`'s exit code (0: clean); `e2fsck` is the path of the tool.
pub fn e2fsck(e2fsck: &Path, img: &Path) -> Result<i32, BenchError> {
    let out = Command::new(e2fsck)
        .arg("-fn")
        .arg(img)
        .output()
        .map_err(|e| BenchError(format!("cannot run e2fsck: {e}")))?;
    Ok(out.status.code().unwrap_or(-1))
}

/// Pseudo-random bytes with no zero byte (no block of zeros a sparse copy
/// could skip).
pub fn random_bytes(rng: &mut SmallRng, buf: &mut [u8]) {
    rng.fill(buf);
    for b in buf.iter_mut() {
        *b |= (*b == 0) as u8;
    }
}

/// One timed job: an untimed setup, then the work timed.
pub struct Job<'a> {
    name: &'static str,
    setup: Box<dyn FnMut() -> Result<(), BenchError> + 'a>,
    work: Box<dyn FnMut() -> Result<(), BenchError> + 'a>,
}

impl<'a> Job<'a> {
    /// Variant `name`: `setup` (untimed), then `work` (timed).
    pub fn new(
        name: &'static str,
        setup: impl FnMut() -> Result<(), BenchError> + 'a,
        work: impl FnMut() -> Result<(), BenchError> + 'a,
    ) -> Job<'a> {
        Job {
            name,
            setup: Box::new(setup),
            work: Box::new(work),
        }
    }
}

/// `reps` rounds, each running every job once in turn (setup untimed);
/// the median time of each. `bench` and `what` name the progress lines.
pub fn time_rounds(
    bench: &str,
    reps: usize,
    what: &str,
    jobs: &mut [Job<'_>],
) -> Result<Medians, BenchError> {
    let mut samples = vec![Vec::with_capacity(reps); jobs.len()];
    for round in 0..reps {
        progress(bench, &format!("{what}: round {} of {reps}", round + 1));
        for (j, s) in jobs.iter_mut().zip(&mut samples) {
            check_interrupt()?;
            (j.setup)()?;
            let t = Instant::now();
            (j.work)()?;
            s.push(t.elapsed().as_nanos() as f64);
        }
    }
    let pairs: Vec<(&'static str, f64)> = jobs
        .iter()
        .zip(&mut samples)
        .map(|(j, s)| (j.name, median(s)))
        .collect();
    Ok(Medians::from_pairs(&pairs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn random_bytes_have_no_zero() {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut buf = vec![0u8; 1 << 16];
        random_bytes(&mut rng, &mut buf);
        assert!(buf.iter().all(|&b| b != 0));
    }

    #[test]
    fn run_peak_reports_memory_and_failure() {
        let Some(sh) = tool("sh") else {
            return;
        };
        let peak = run_peak(Command::new(&sh).args(["-c", "exit 0"]), "sh").unwrap();
        assert!(peak.bytes > 0 && peak.bytes < 1 << 30, "{peak:?}");
        // A child that takes more than this process ever did: exact.
        let big = self_peak() + (64 << 20);
        let script = format!("x=$(head -c {big} /dev/zero | tr '\\0' a); echo ${{#x}} >/dev/null");
        let peak = run_peak(Command::new(&sh).args(["-c", &script]), "sh").unwrap();
        assert!(peak.exact && peak.bytes >= big, "{peak:?}");
        let e = run_peak(
            Command::new(&sh).args(["-c", "echo nope >&2; exit 3"]),
            "sh",
        )
        .unwrap_err();
        assert!(e.0.contains("nope"), "{e}");
    }

    #[test]
    fn time_rounds_runs_every_job_each_round() {
        let (mut a, mut b) = (0, 0);
        let m = time_rounds(
            "test",
            3,
            "jobs",
            &mut [
                Job::new(
                    "a",
                    || Ok(()),
                    || {
                        a += 1;
                        Ok(())
                    },
                ),
                Job::new(
                    "b",
                    || Ok(()),
                    || {
                        b += 1;
                        Ok(())
                    },
                ),
            ],
        )
        .unwrap();
        assert_eq!((a, b), (3, 3));
        assert_eq!(m.names(), ["a", "b"]);
    }
}
