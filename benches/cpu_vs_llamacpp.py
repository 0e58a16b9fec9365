#!/usr/bin/env python3
"""Minerva's CPU backend against llama.cpp's llama-bench, on the same GGUF files.

For each model, each engine runs --runs times, a fresh process each time, and the script prints
one Markdown table of the medians: prefill tok/s at 128 and 512 prompt tokens, decode tok/s after
a 128-token prompt, and the peak RSS of the process (taken per child with os.wait4), each as
"Minerva / llama.cpp (ratio×)", ratio = Minerva / llama.cpp. Every file is read once before
timing, so both engines start from the page cache.

Minerva runs twice per run (128 prompt + 64 generated tokens; 512 prompt + 1), its RSS being the
larger of the two. llama-bench runs `-p 128,512 -n 64 -d 128` in one process, so its prefill
tests also start after 128 tokens of context, where Minerva's start from an empty cache. Minerva's
context is 640 tokens, the size llama-bench gives its largest test (512 + 128).

The default models: .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf (scripts/setup.sh fetches it)
and random-weight GGUFs at the shapes of qwen3-0.6b and tinyllama-1.1b in Q4_K_M, Q4_0 and Q8_0,
written into --models-dir by `minerva synth` on first use. Extra GGUF files may be given as
arguments. A failing run shows in the table as the first line of its error.

Run from the repository root, after `cargo build --release`:

    python3 benches/cpu_vs_llamacpp.py                      # the whole set, 3 runs, 2 threads
    python3 benches/cpu_vs_llamacpp.py --only SmolLM2 --runs 1
    python3 benches/cpu_vs_llamacpp.py --threads 8 --json /tmp/cpu.json my-model.gguf

Python 3.11, standard library only; Linux (ru_maxrss is in KiB there).
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REAL_MODELS = [".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"]
SYNTH_SHAPES = ["qwen3-0.6b", "tinyllama-1.1b"]
SYNTH_QUANTS = ["q4_k_m", "q4_0", "q8_0"]
METRICS = ["prefill_128", "prefill_512", "decode", "rss_mib"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minerva", default="target/release/minerva")
    p.add_argument("--llama-bench", default="/tmp/peer-llamacpp/bin/llama-bench")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--models-dir", default=".cache/cpu-bench")
    p.add_argument("--only", help="keep only the models whose path contains this")
    p.add_argument("--json", dest="json_out", help="also write the raw results here")
    p.add_argument("files", nargs="*", help="extra GGUF files")
    return p.parse_args()


class RunError(Exception):
    """A run that failed; its message is the error's first line."""


def run_measured(cmd, env=None):
    """Runs cmd to completion; returns (stdout, stderr, peak RSS in MiB). Raises RunError."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        except OSError as e:
            raise RunError(f"{cmd[0]}: {e.strerror}") from e
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if proc.returncode != 0:
        raise RunError(error_line(stderr, stdout, proc.returncode))
    return stdout, stderr, usage.ru_maxrss / 1024


def error_line(stderr, stdout, code):
    """The first line that names an error, else the last line of output, else the exit status."""
    lines = [l.strip() for l in (stderr + "\n" + stdout).splitlines() if l.strip()]
    named = [l for l in lines if any(w in l.lower() for w in ("error", "panicked", "failed"))]
    line = named[0] if named else lines[-1] if lines else f"exit status {code}"
    return line[:160]


def run_minerva(exe, model, threads):
    """One run of each Minerva command; returns the metrics of this run."""
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    # llama-bench sizes each test's context to its tokens: 512 + 128 for its largest.
    base = [exe, "run", str(model), "--backend", "cpu", "--ignore-eos", "--json", "--ctx", "640"]
    out, _, rss = run_measured(base + ["--prompt-tokens", "128", "--max-tokens", "64"], env)
    short = last_json_line(out)
    out, _, rss512 = run_measured(base + ["--prompt-tokens", "512", "--max-tokens", "1"], env)
    long = last_json_line(out)
    return {
        "prefill_128": short["prefill_tokens_per_s"],
        "prefill_512": long["prefill_tokens_per_s"],
        "decode": short["decode_tokens_per_s"],
        "rss_mib": max(rss, rss512),
    }


def last_json_line(stdout):
    lines = [l for l in stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise RunError("no JSON object on stdout")
    return json.loads(lines[-1])


def run_llama(exe, model, threads):
    """One llama-bench process (pp128, pp512, tg64, all at depth 128); returns this run's metrics."""
    cmd = [exe, "-m", str(model), "-p", "128,512", "-n", "64", "-d", "128",
           "-t", str(threads), "-r", "1", "-o", "json"]
    out, _, rss = run_measured(cmd)
    records = json.loads(out)

    def ts(n_prompt, n_gen):
        for r in records:
            if r["n_prompt"] == n_prompt and r["n_gen"] == n_gen:
                return r["avg_ts"]
        raise RunError(f"llama-bench gave no record with n_prompt={n_prompt} n_gen={n_gen}")

    return {
        "prefill_128": ts(128, 0),
        "prefill_512": ts(512, 0),
        "decode": ts(0, 64),
        "rss_mib": rss,
        "build_commit": records[0].get("build_commit") if records else None,
    }


def bench(engine_fn, exe, model, args):
    """--runs runs of one engine on one model: {"runs": [...], "median": {...}} or {"error": str}."""
    if not executable(exe):
        return {"error": f"not found: {exe}"}
    runs = []
    try:
        for _ in range(args.runs):
            runs.append(engine_fn(exe, model, args.threads))
    except RunError as e:
        return {"error": str(e), "runs": runs}
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        return {"error": f"unexpected output ({type(e).__name__}: {e})", "runs": runs}
    median = {m: statistics.median(r[m] for r in runs) for m in METRICS}
    return {"runs": runs, "median": median}


def synth_models(exe, models_dir, only):
    """The synthetic GGUF paths (kept by --only), writing the missing ones with `minerva synth`."""
    paths = []
    for shape in SYNTH_SHAPES:
        wanted = {q: models_dir / shape / f"gguf-{q}" / f"{shape}-{q.upper()}.gguf" for q in SYNTH_QUANTS}
        wanted = {q: p for q, p in wanted.items() if not only or only in str(p)}
        missing = [q for q, p in wanted.items() if not p.is_file()]
        if missing and executable(exe):
            formats = ",".join(f"gguf:{q}" for q in missing)
            print(f"synth {shape} ({formats}) into {models_dir / shape}", file=sys.stderr)
            cmd = [exe, "synth", shape, "--out", str(models_dir / shape), "--formats", formats, "--seed", "1"]
            if subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode != 0:
                print(f"warning: {' '.join(cmd)} failed", file=sys.stderr)
        paths += wanted.values()
    return paths


def executable(path):
    return Path(path).is_file() and os.access(path, os.X_OK)


def warm_page_cache(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def cell(m, l, metric):
    """"Minerva / llama.cpp (ratio×)" for one metric; an engine's error stands in for its number."""
    digits = 0 if metric == "rss_mib" else 1

    def show(res):
        if "error" in res:
            return res["error"].replace("|", "\\|")
        return f"{res['median'][metric]:.{digits}f}"

    text = f"{show(m)} / {show(l)}"
    if "median" in m and "median" in l and l["median"][metric]:
        text += f" ({m['median'][metric] / l['median'][metric]:.2f}×)"
    return text


def table(results):
    rows = ["| model (file, MB) | prefill-128 tok/s Minerva / llama.cpp | prefill-512 tok/s Minerva / llama.cpp "
            "| decode tok/s after 128 tokens Minerva / llama.cpp | peak RSS MiB Minerva / llama.cpp |",
            "|---|---|---|---|---|"]
    for r in results:
        cells = [f"{Path(r['model']).name}, {r['bytes'] / 1e6:.0f}"]
        cells += [cell(r["minerva"], r["llama.cpp"], metric) for metric in METRICS]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def build_commit(results):
    for r in results:
        for run in r["llama.cpp"].get("runs", []):
            if run.get("build_commit"):
                return run["build_commit"]
    return "unknown"


def main():
    args = parse_args()
    missing = [(flag, exe) for flag, exe in (("--minerva", args.minerva), ("--llama-bench", args.llama_bench))
               if not executable(exe)]
    for flag, exe in missing:
        print(f"error: no executable at {exe} (build it, or pass {flag} PATH); its cells will say so",
              file=sys.stderr)
    if len(missing) == 2:
        return 2

    keep = lambda paths: [Path(p) for p in paths if not args.only or args.only in str(p)]
    synth = synth_models(args.minerva, Path(args.models_dir), args.only)
    models = keep(REAL_MODELS) + synth + keep(args.files)
    results = []
    for model in models:
        if not model.is_file():
            print(f"skipping {model}: no such file", file=sys.stderr)
            continue
        print(f"benchmarking {model}", file=sys.stderr)
        warm_page_cache(model)
        results.append({
            "model": str(model),
            "bytes": model.stat().st_size,
            "minerva": bench(run_minerva, args.minerva, model, args),
            "llama.cpp": bench(run_llama, args.llama_bench, model, args),
        })

    print(table(results))
    print(f"\n{cpu_model()}, {args.threads} threads, llama.cpp build {build_commit(results)}; "
          f"medians of {args.runs} run{'s' if args.runs != 1 else ''}.")
    if args.json_out:
        meta = {"cpu": cpu_model(), "threads": args.threads, "runs": args.runs,
                "llama_cpp_build_commit": build_commit(results)}
        Path(args.json_out).write_text(json.dumps({"machine": meta, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
