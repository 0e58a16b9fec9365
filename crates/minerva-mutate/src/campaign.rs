//! The supervisor and worker sides of a campaign, and the saved form of a failing case.

use minerva_mutate::mutate::{self, Case};
use minerva_mutate::rng::Rng;
use minerva_mutate::run;
use minerva_mutate::seeds::{self, Seed, SeedFormat, Workspace};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(clap::Parser)]
#[command(
    about = "Mutation campaign over the fixture models: readers, spec, card, tokenizer, template, load and a forward step"
)]
pub struct Args {
    /// Stop after this many seconds (default 60 unless --cases is given).
    #[arg(long)]
    seconds: Option<f64>,
    /// Stop after this many cases in all.
    #[arg(long)]
    cases: Option<u64>,
    /// Seed of the run (default: from the clock; printed either way).
    #[arg(long)]
    seed: Option<u64>,
    /// Worker processes (default: one per core).
    #[arg(long)]
    workers: Option<usize>,
    /// The fixtures folder holding the seed models.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures"))]
    fixtures: PathBuf,
    /// Where failing inputs are saved.
    #[arg(long, default_value = "target/mutate-failures")]
    out: PathBuf,
    /// A case running longer than this many seconds is a hang.
    #[arg(long, default_value_t = 10.0)]
    case_timeout: f64,
    /// Write the counts as JSON to this file too.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Run one saved case (a folder written under --out) and print how it ends.
    #[arg(long)]
    replay: Option<PathBuf>,
    #[arg(long, hide = true)]
    worker: Option<u64>,
    #[arg(long, hide = true, default_value_t = 0)]
    start: u64,
    #[arg(long, hide = true, default_value_t = u64::MAX)]
    max_cases: u64,
    #[arg(long, hide = true, default_value_t = u64::MAX)]
    until_ms: u64,
    #[arg(long, hide = true)]
    work: Option<PathBuf>,
}

/// Counts keyed by (format, mutation kind, outcome label).
type Counts = BTreeMap<(String, String, String), u64>;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub fn main(args: Args) -> i32 {
    if let Some(dir) = &args.replay {
        return replay(dir);
    }
    let seeds = match seeds::load(&args.fixtures) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("minerva-mutate: cannot read the seed models: {e}");
            return 2;
        }
    };
    match args.worker {
        Some(w) => worker(&args, w, &seeds),
        None => supervise(&args, &seeds),
    }
}

fn replay(dir: &Path) -> i32 {
    let gguf = dir.join("model.gguf");
    let path = if gguf.is_file() {
        gguf
    } else {
        dir.join("model")
    };
    let outcome = run::run_case(&path);
    println!("{outcome:?}");
    i32::from(outcome.is_failure())
}

/// Where a worker's status (case index, start time) and counts live.
fn status_path(work: &Path, w: u64) -> PathBuf {
    work.join(format!("status-{w}"))
}

fn worker(args: &Args, w: u64, seeds: &[Seed]) -> i32 {
    // Panics are caught and saved with their message; printing each would flood the output.
    std::panic::set_hook(Box::new(|_| {}));
    let work = args.work.clone().expect("the supervisor passes --work");
    let space = match Workspace::create(work.join(format!("w{w}")), seeds) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("worker {w}: cannot write its workspace: {e}");
            return 2;
        }
    };
    let seed = args.seed.expect("the supervisor passes --seed");
    let status = File::create(status_path(&work, w)).expect("status file");
    let counts_file = work.join(format!("counts-{w}-{}.json", args.start));
    let mut counts = Counts::new();
    let flush = |counts: &Counts| {
        let rows: Vec<_> = counts.iter().map(|((f, k, o), n)| (f, k, o, n)).collect();
        let _ = std::fs::write(&counts_file, serde_json::to_vec(&rows).unwrap_or_default());
    };
    let mut index = args.start;
    let mut dirty: Option<(usize, String)> = None;
    while index - args.start < args.max_cases && now_ms() < args.until_ms {
        let mut state = [0u8; 16];
        state[..8].copy_from_slice(&index.to_le_bytes());
        state[8..].copy_from_slice(&now_ms().to_le_bytes());
        let _ = status.write_at(&state, 0);
        let case = mutate::make(seeds, &mut Rng::for_case(seed, w, index));
        let s = &seeds[case.seed];
        // The file the last case damaged is put back only when this case writes another:
        // a GGUF case always rewrites the whole file, so most cases skip one write.
        if let Some((d, f)) = dirty
            .take()
            .filter(|(d, f)| (*d, f.as_str()) != (case.seed, case.file.as_str()))
        {
            let _ = space.restore(&seeds[d], &f);
        }
        dirty = Some((case.seed, case.file.clone()));
        let outcome = match space.write(s, &case.file, &case.bytes) {
            Ok(()) => run::run_case(&space.model_path(s)),
            Err(e) => {
                eprintln!("worker {w}: cannot write a case: {e}");
                return 2;
            }
        };
        if outcome.is_failure() {
            save(
                &args.out,
                seeds,
                &case,
                seed,
                w,
                index,
                outcome.label(),
                &format!("{outcome:?}"),
            );
        }
        *counts
            .entry((
                s.format.name().into(),
                case.kind.into(),
                outcome.label().into(),
            ))
            .or_insert(0) += 1;
        index += 1;
        if index % 256 == 0 {
            flush(&counts);
        }
    }
    flush(&counts);
    let _ = status.write_at(&[0u8; 16], 0);
    0
}

/// Saves a failing case as a folder: the damaged model and `why.txt`.
#[allow(clippy::too_many_arguments)]
fn save(
    out: &Path,
    seeds: &[Seed],
    case: &Case,
    seed: u64,
    w: u64,
    index: u64,
    label: &str,
    why: &str,
) {
    let s = &seeds[case.seed];
    let dir = out.join(format!(
        "{label}-{}-{}-s{seed}-w{w}-i{index}",
        s.name, case.kind
    ));
    let model = match s.format {
        SeedFormat::Gguf => dir.clone(),
        _ => dir.join("model"),
    };
    let _ = std::fs::create_dir_all(&model);
    for (f, b) in &s.files {
        let bytes = if *f == case.file { &case.bytes } else { b };
        let _ = std::fs::write(model.join(f), bytes);
    }
    if !s.files.iter().any(|(f, _)| *f == case.file) {
        let _ = std::fs::write(model.join(&case.file), &case.bytes);
    }
    let text = format!(
        "{why}\nseed {seed}, worker {w}, case {index}: {} of {}\nreplay: minerva-mutate --replay {}\n",
        case.kind,
        s.name,
        dir.display()
    );
    let _ = std::fs::write(dir.join("why.txt"), text);
}

struct Running {
    child: Child,
    start: u64,
    left: u64,
}

fn spawn(
    args: &Args,
    work: &Path,
    seed: u64,
    w: u64,
    start: u64,
    left: u64,
    until: u64,
) -> Running {
    let exe = std::env::current_exe().expect("own path");
    let child = Command::new(exe)
        .args(["--worker", &w.to_string(), "--seed", &seed.to_string()])
        .args([
            "--start",
            &start.to_string(),
            "--max-cases",
            &left.to_string(),
        ])
        .args(["--until-ms", &until.to_string()])
        .arg("--fixtures")
        .arg(&args.fixtures)
        .arg("--out")
        .arg(&args.out)
        .arg("--work")
        .arg(work)
        // One thread per worker: the workers already fill the cores.
        .env("RAYON_NUM_THREADS", "1")
        .spawn()
        .expect("start a worker");
    Running { child, start, left }
}

fn read_status(work: &Path, w: u64) -> Option<(u64, u64)> {
    let b = std::fs::read(status_path(work, w)).ok()?;
    let index = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
    let since = u64::from_le_bytes(b.get(8..16)?.try_into().ok()?);
    (since != 0).then_some((index, since))
}

fn supervise(args: &Args, seeds: &[Seed]) -> i32 {
    let seed = args.seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let workers = args
        .workers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
        as u64;
    let seconds = args.seconds.unwrap_or(if args.cases.is_some() {
        f64::INFINITY
    } else {
        60.0
    });
    let until = if seconds.is_finite() {
        now_ms() + (seconds * 1000.0) as u64
    } else {
        u64::MAX
    };
    let per_worker = args.cases.map_or(u64::MAX, |c| c.div_ceil(workers));
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let work = base.join(format!("minerva-mutate-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&work);
    let _ = std::fs::create_dir_all(&args.out);
    println!(
        "minerva-mutate: seed {seed}, {workers} workers, {} seeds, failing inputs to {}",
        seeds.len(),
        args.out.display()
    );
    let began = Instant::now();
    let mut extra = Counts::new();
    let mut running: Vec<Option<Running>> = (0..workers)
        .map(|w| Some(spawn(args, &work, seed, w, 0, per_worker, until)))
        .collect();
    let timeout_ms = (args.case_timeout * 1000.0) as u64;
    while running.iter().any(Option::is_some) {
        std::thread::sleep(Duration::from_millis(100));
        for w in 0..workers {
            let Some(r) = running[w as usize].as_mut() else {
                continue;
            };
            let status = read_status(&work, w);
            let hung = status.filter(|&(_, since)| now_ms().saturating_sub(since) > timeout_ms);
            let exited = r.child.try_wait().ok().flatten();
            let lost = match (exited, hung) {
                (Some(code), _) if code.success() => {
                    running[w as usize] = None;
                    continue;
                }
                (Some(_), _) => status.map(|(i, _)| (i, "abort")),
                (None, Some((i, _))) => {
                    let _ = r.child.kill();
                    let _ = r.child.wait();
                    Some((i, "hang"))
                }
                (None, None) => continue,
            };
            let Some((index, label)) = lost else {
                running[w as usize] = None;
                continue;
            };
            let case = mutate::make(seeds, &mut Rng::for_case(seed, w, index));
            let s = &seeds[case.seed];
            save(&args.out, seeds, &case, seed, w, index, label, label);
            *extra
                .entry((s.format.name().into(), case.kind.into(), label.into()))
                .or_insert(0) += 1;
            let done = index + 1 - r.start;
            let left = r.left.saturating_sub(done);
            let _ = std::fs::remove_file(status_path(&work, w));
            running[w as usize] = (left > 0 && now_ms() < until)
                .then(|| spawn(args, &work, seed, w, index + 1, left, until));
        }
    }
    let mut counts = extra;
    for entry in std::fs::read_dir(&work).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if !name.starts_with("counts-") {
            continue;
        }
        let rows: Vec<(String, String, String, u64)> = std::fs::read(entry.path())
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        for (f, k, o, n) in rows {
            *counts.entry((f, k, o)).or_insert(0) += n;
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    report(args, &counts, seed, workers, began.elapsed())
}

fn report(args: &Args, counts: &Counts, seed: u64, workers: u64, took: Duration) -> i32 {
    let mut rows: BTreeMap<(String, String), BTreeMap<String, u64>> = BTreeMap::new();
    for ((f, k, o), n) in counts {
        *rows
            .entry((f.clone(), k.clone()))
            .or_default()
            .entry(o.clone())
            .or_insert(0) += n;
    }
    let total: u64 = counts.values().sum();
    let failures: u64 = counts
        .iter()
        .filter(|((_, _, o), _)| o != "ran" && o != "refused")
        .map(|(_, n)| n)
        .sum();
    println!(
        "\n{:<12} {:<20} {:>10} {:>10} {:>10} {:>8}",
        "format", "mutation", "cases", "refused", "ran", "failed"
    );
    for ((f, k), by) in &rows {
        let all: u64 = by.values().sum();
        let get = |o: &str| by.get(o).copied().unwrap_or(0);
        println!(
            "{f:<12} {k:<20} {all:>10} {:>10} {:>10} {:>8}",
            get("refused"),
            get("ran"),
            all - get("refused") - get("ran")
        );
    }
    let secs = took.as_secs_f64();
    println!(
        "\n{total} cases in {secs:.0} s ({:.0}/s) on {workers} workers, seed {seed}: {failures} failed",
        total as f64 / secs.max(1e-9)
    );
    for ((f, k, o), n) in counts
        .iter()
        .filter(|((_, _, o), _)| o != "ran" && o != "refused")
    {
        println!("  {o}: {n} ({f}, {k})");
    }
    if let Some(path) = &args.json {
        let rows: Vec<_> = counts.iter().map(|((f, k, o), n)| serde_json::json!({"format": f, "mutation": k, "outcome": o, "cases": n})).collect();
        let doc = serde_json::json!({"seed": seed, "workers": workers, "seconds": secs, "cases": total, "failed": failures, "counts": rows});
        let _ = std::fs::write(path, serde_json::to_vec_pretty(&doc).unwrap_or_default());
    }
    i32::from(failures > 0)
}
