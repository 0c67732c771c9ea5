//! Temporary files a command writes beside its output (`.OUT.sk-tmp.PID.N`,
//! `.OUT.check.PID`), removed when Ctrl-C or SIGTERM stops the command:
//! the output itself is only ever replaced by a rename of a complete file,
//! so what an interruption leaves behind is the temporary file, which can
//! be as large as a guest's memory.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once, PoisonError};

/// The outputs whose temporary files an interruption removes.
static OUTPUTS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// What else an interruption runs first (the benchmarks' scratch).
static ALSO: Mutex<Vec<fn()>> = Mutex::new(Vec::new());

/// Runs `f` if Ctrl-C or SIGTERM ends the process from now on.
pub fn on_interrupt_run(f: fn()) {
    ALSO.lock().unwrap_or_else(PoisonError::into_inner).push(f);
    install();
}

/// Exit status after an interruption (128 + SIGINT, as a shell reports
/// a process SIGINT ended).
const INTERRUPTED: i32 = 130;

/// Removes `out`'s temporary files of this process if Ctrl-C or SIGTERM
/// ends it from now on.
pub fn on_interrupt(out: &Path) {
    OUTPUTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(out.to_path_buf());
    install();
}

fn install() {
    static HANDLER: Once = Once::new();
    HANDLER.call_once(|| {
        // Without a handler (one already set), an interruption ends the
        // process as before: the temporary files stay, as after a kill.
        let _ = ctrlc::set_handler(|| {
            for f in ALSO.lock().unwrap_or_else(PoisonError::into_inner).iter() {
                f();
            }
            remove_temporaries();
            eprintln!("interrupted");
            std::process::exit(INTERRUPTED);
        });
    });
}

/// Removes every registered output's temporary files of this process:
/// `.OUT.sk-tmp.PID` (ext4 get), `.OUT.sk-tmp.PID.N` (snapshots) and
/// `.OUT.check.PID` (migrate's check).
fn remove_temporaries() {
    let pid = std::process::id();
    for out in OUTPUTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
    {
        let name = out.file_name().unwrap_or_default().to_string_lossy();
        let dir = out.parent().filter(|d| !d.as_os_str().is_empty());
        let (tmp, check) = (
            format!(".{name}.sk-tmp.{pid}"),
            format!(".{name}.check.{pid}"),
        );
        let numbered = format!("{tmp}.");
        for e in std::fs::read_dir(dir.unwrap_or(Path::new(".")))
            .into_iter()
            .flatten()
            .flatten()
        {
            let f = e.file_name().to_string_lossy().into_owned();
            if f == tmp || f == check || f.starts_with(&numbered) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}
