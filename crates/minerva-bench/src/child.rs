//! One measurement in a fresh `minerva run` process: its JSON line, its peak resident memory
//! (from `wait4`), the driver's figure for its GPU memory, and a way to stop it when the user
//! presses Ctrl-C.

use crate::driver_memory::{Driver, DriverMemory};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// A stop asked for by the user; the running child is ended with it.
#[derive(Default)]
pub struct Stop {
    requested: AtomicBool,
    child: AtomicI32,
}

impl Stop {
    /// Called from a signal handler's thread: marks the stop and ends the running child.
    pub fn request(&self) {
        self.requested.store(true, Ordering::SeqCst);
        let pid = self.child.load(Ordering::SeqCst);
        if pid > 0 {
            // SAFETY: sends a signal to our own child; a stale pid is reaped only by us, so it
            // cannot name another process before we clear it.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }

    pub fn requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }
}

/// What one child measured.
pub struct Outcome {
    pub json: serde_json::Value,
    pub peak_rss_bytes: u64,
    pub driver: Option<DriverMemory>,
}

/// The `minerva run` arguments of one measurement.
pub struct RunArgs<'a> {
    pub minerva: &'a Path,
    pub model: &'a Path,
    pub backend: &'a str,
    pub prompt_tokens: usize,
    pub gen_tokens: usize,
}

/// Runs one child to its end. `Ok(None)` when the user stopped it.
pub fn run(a: &RunArgs, driver: Option<&Driver>, stop: &Stop) -> Result<Option<Outcome>, String> {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    if stop.requested() {
        return Ok(None);
    }
    let mut cmd = Command::new(a.minerva);
    cmd.arg("run").arg(a.model);
    cmd.args(["--prompt-tokens", &a.prompt_tokens.to_string()]);
    cmd.args(["--max-tokens", &a.gen_tokens.to_string()]);
    cmd.args(["--ignore-eos", "--json", "--backend", a.backend]);
    // Its own process group: Ctrl-C in the terminal reaches only the bench, which ends the
    // child itself and keeps what was measured.
    cmd.process_group(0);
    // Output through a file: a pipe could fill while we sit in wait4.
    let out_file = temp_path();
    let err_file = temp_path();
    let open = |p: &PathBuf| std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()));
    cmd.stdout(open(&out_file)?);
    cmd.stderr(open(&err_file)?);
    let child = cmd
        .spawn()
        .map_err(|e| format!("{}: {e}", a.minerva.display()))?;
    let pid = child.id();
    stop.child.store(pid as i32, Ordering::SeqCst);
    if stop.requested() {
        stop.request();
    }
    let watch = driver.map(|d| d.watch(pid));
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid value; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
    stop.child.store(0, Ordering::SeqCst);
    let driver = watch.and_then(|w| w.finish());
    let read = |p: &PathBuf| {
        let text = std::fs::read_to_string(p).unwrap_or_default();
        let _ = std::fs::remove_file(p);
        text
    };
    let (stdout, stderr) = (read(&out_file), read(&err_file));
    if stop.requested() {
        return Ok(None);
    }
    if waited != pid as libc::pid_t || !std::process::ExitStatus::from_raw(status).success() {
        return Err(format!(
            "{}: minerva run failed: {}",
            a.model.display(),
            stderr.trim()
        ));
    }
    let json = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| format!("{}: minerva run printed no JSON", a.model.display()))?;
    Ok(Some(Outcome {
        json,
        // ru_maxrss is in KiB on Linux.
        peak_rss_bytes: usage.ru_maxrss.max(0) as u64 * 1024,
        driver,
    }))
}

fn temp_path() -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("minerva-bench-{}-{n}.out", std::process::id()))
}

/// Drops the page cache of every file of a model (no root needed), so the next load reads
/// from the disk.
pub fn drop_pages(files: &[PathBuf]) {
    use std::os::unix::io::AsRawFd;
    for f in files {
        if let Ok(file) = std::fs::File::open(f) {
            // SAFETY: a valid open descriptor; the call only advises the kernel.
            unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        }
    }
}
