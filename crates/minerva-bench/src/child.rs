//! One measurement in a fresh bench child process ([`crate::measure`]): its JSON line, its peak
//! resident memory (its own VmHWM), the driver's figure for its GPU memory, and a way to stop it when the user
//! presses Ctrl-C.

use crate::driver_memory::{Driver, DriverMemory};
use crate::measure::Once;
use std::ffi::OsString;
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

    /// The flag a stop sets, for work that watches one (a remote engine's request).
    pub fn flag(&self) -> &AtomicBool {
        &self.requested
    }
}

/// What one child measured.
pub struct Outcome {
    pub json: serde_json::Value,
    pub peak_rss_bytes: u64,
    pub driver: Option<DriverMemory>,
}

/// Runs one child to its end: `command` (a program and its first arguments, see
/// [`crate::measure::this_binary`]) with the measurement's arguments. `Ok(None)` when the user
/// stopped it.
pub fn run(
    command: &[OsString],
    once: &Once,
    driver: Option<&Driver>,
    stop: &Stop,
) -> Result<Option<Outcome>, String> {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    if stop.requested() {
        return Ok(None);
    }
    let [program, first @ ..] = command else {
        return Err("no bench child command".into());
    };
    let mut cmd = Command::new(program);
    cmd.args(first).args(once.args());
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
        .map_err(|e| format!("{}: {e}", Path::new(program).display()))?;
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
            "{}: the measurement failed: {}",
            once.model.display(),
            stderr.trim()
        ));
    }
    let json: serde_json::Value = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| format!("{}: the measurement printed no JSON", once.model.display()))?;
    // The child's own high-water mark; rusage's only where it gives none (ru_maxrss counts
    // what a forked child inherited from this process, and is in KiB on Linux).
    let peak_rss_bytes = json["peak_rss_bytes"]
        .as_u64()
        .unwrap_or(usage.ru_maxrss.max(0) as u64 * 1024);
    Ok(Some(Outcome {
        json,
        peak_rss_bytes,
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
