//! Temporary files a command writes beside its output (`.OUT.sk-tmp.PID.N`,
//! `.OUT.check.PID`), removed when Ctrl-C or SIGTERM stops the command:
//! the output itself is only ever replaced by a rename of a complete file,
//! so what an interruption leaves behind is the temporary file, which can
//! be as large as a guest's memory.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once, PoisonError};

/// The outputs whose temporary files an interruption removes.
static OUTPUTS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Exit status after an interruption (128 + SIGINT, as a shell reports
/// a process SIGINT ended).
const INTERRUPTED: i32 = 130;

/// Removes `out`'s temporary files of this process if Ctrl-C or SIGTERM
/// ends it from now on.
pub fn on_interrupt(out: &Path) {
    static HANDLER: Once = Once::new();
    HANDLER.call_once(|| {
        // Without a handler (one already set), an interruption ends the
        // process as before: the temporary files stay, as after a kill.
        let _ = ctrlc::set_handler(|| {
            remove_temporaries();
            eprintln!("interrupted");
            std::process::exit(INTERRUPTED);
        });
    });
    OUTPUTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(out.to_path_buf());
}

/// Removes every registered output's temporary files of this process.
fn remove_temporaries() {
    let pid = std::process::id();
    for out in OUTPUTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
    {
        let Some(name) = out.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            continue;
        };
        let dir = match out.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        // `.OUT.sk-tmp.PID` (ext4 get), `.OUT.sk-tmp.PID.N` (snapshots),
        // `.OUT.check.PID` (migrate's check): this process's only.
        let tmp = format!(".{name}.sk-tmp.{pid}");
        let check = format!(".{name}.check.{pid}");
        let ours = |f: &str| {
            f == tmp
                || f == check
                || f.strip_prefix(tmp.as_str())
                    .is_some_and(|r| r.starts_with('.'))
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            let file = e.file_name();
            let file = file.to_string_lossy();
            if ours(&file) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}
