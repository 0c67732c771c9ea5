//! Temporary files a command writes beside its output (`.OUT.sk-tmp.PID.N`,
//! `.OUT.sk-tmp.PID.check`), removed when Ctrl-C or SIGTERM stops the command:
//! the output itself is only ever replaced by a rename of a complete file,
//! so what an interruption leaves behind is the temporary file, which can
//! be as large as a guest's memory.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once, PoisonError};

/// The outputs whose temporary files an interruption removes (`false`),
/// and files it removes as they are (`true`: a receiver's socket).
static OUTPUTS: Mutex<Vec<(PathBuf, bool)>> = Mutex::new(Vec::new());

/// What else an interruption runs first (the benchmarks' scratch).
static ALSO: Mutex<Vec<fn()>> = Mutex::new(Vec::new());

/// The signal that interrupted the command (0 before one arrives).
static SIGNAL: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// The exit status of an interrupted command: 128 + the signal, as a
/// shell reports a process the signal ended (130 for Ctrl-C, 143 for
/// SIGTERM, 129 for SIGHUP; 130 if none was seen).
pub fn interrupted_status() -> i32 {
    match SIGNAL.load(std::sync::atomic::Ordering::SeqCst) {
        0 => 130,
        s => 128 + s,
    }
}

/// Runs `f` if Ctrl-C or SIGTERM ends the process from now on.
pub fn on_interrupt_run(f: fn()) {
    ALSO.lock().unwrap_or_else(PoisonError::into_inner).push(f);
    install();
}

/// Removes `path` itself if Ctrl-C or SIGTERM ends the process from now on.
pub fn remove_on_interrupt(path: &Path) {
    register(path, true);
}

/// Removes `out`'s temporary files of this process if Ctrl-C or SIGTERM
/// ends it from now on.
pub fn on_interrupt(out: &Path) {
    register(out, false);
}

fn register(path: &Path, itself: bool) {
    let mut v = OUTPUTS.lock().unwrap_or_else(PoisonError::into_inner);
    v.push((path.to_path_buf(), itself));
    drop(v);
    install();
}

fn install() {
    static HANDLER: Once = Once::new();
    HANDLER.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        // Without the handlers (they could not be set), an interruption
        // ends the process as before: the temporary files stay, as after a
        // kill.
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
            return;
        };
        // The signal is handled on this thread, outside the handler: the
        // cleaning takes locks and touches files.
        let _ = std::thread::Builder::new()
            .name("spacekit-signals".into())
            .spawn(move || {
                if let Some(sig) = signals.forever().next() {
                    SIGNAL.store(sig, std::sync::atomic::Ordering::SeqCst);
                    for f in ALSO.lock().unwrap_or_else(PoisonError::into_inner).iter() {
                        f();
                    }
                    remove_temporaries();
                    eprintln!("interrupted");
                    std::process::exit(interrupted_status());
                }
            });
    });
}

/// Removes every registered output's temporary files of this process:
/// `.OUT.sk-tmp.PID` (ext4 get), `.OUT.sk-tmp.PID.N` (snapshots) and
/// `.OUT.sk-tmp.PID.check` (migrate's check).
fn remove_temporaries() {
    for (out, itself) in OUTPUTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
    {
        match itself {
            true => drop(std::fs::remove_file(out)),
            false => spacekit::snapshot::remove_temporaries(out),
        }
    }
}
