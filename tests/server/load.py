#!/usr/bin/env python3
"""A bounded load test of `minerva serve` on loopback: N requests from C concurrent clients
(each loop bounded in count and in time), greedy chat completions over a few questions whose
answers differ. Every answer must equal the answer its question gets alone, with its own
usage, and every response id must be unique: nothing lost, nothing mixed between clients.
Prints requests/s and the latency percentiles (and --json writes them).

  python3 tests/server/load.py --minerva target/release/minerva --model M.gguf [--requests 200]
      [--clients 8] [--max-tokens 8] [--backend cpu|gpu] [--json F]
"""
import argparse
import json
import statistics
import sys
import threading
import time
import os

sys.path.insert(0, os.path.dirname(__file__))
from serving import Server  # noqa: E402

import openai  # noqa: E402

QUESTIONS = ["What is the capital of France?", "What is 2 + 2?", "Name a colour.",
             "What is the capital of Italy?", "Say hello.", "What day comes after Monday?"]


def percentile(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minerva", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--time-limit", type=float, default=600, help="seconds for the whole run")
    ap.add_argument("--json")
    args = ap.parse_args()

    with Server(args.minerva, ["--model", args.model], backend=args.backend) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0,
                               timeout=120)
        model = client.models.list().data[0].id

        def ask(c, q):
            return c.chat.completions.create(
                model=model, messages=[{"role": "user", "content": q}], temperature=0,
                max_tokens=args.max_tokens)

        alone = {}
        for q in QUESTIONS:
            r = ask(client, q)
            alone[q] = (r.choices[0].message.content, r.usage.prompt_tokens,
                        r.usage.completion_tokens)
        if len({a[0] for a in alone.values()}) != len(QUESTIONS):
            sys.exit(f"the questions' answers must differ to tell a mix-up: {alone}")

        results, problems, lock = [], [], threading.Lock()
        per_client = [args.requests // args.clients + (i < args.requests % args.clients)
                      for i in range(args.clients)]
        deadline = time.time() + args.time_limit

        def client_loop(i):
            c = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0,
                              timeout=120)
            for n in range(per_client[i]):
                if time.time() > deadline:
                    with lock:
                        problems.append(f"client {i}: out of time after {n} requests")
                    return
                q = QUESTIONS[(i + n) % len(QUESTIONS)]
                t0 = time.perf_counter()
                try:
                    r = ask(c, q)
                except Exception as e:  # noqa: BLE001 - counted as lost
                    with lock:
                        problems.append(f"client {i} request {n}: {e}")
                    continue
                latency = time.perf_counter() - t0
                got = (r.choices[0].message.content, r.usage.prompt_tokens,
                       r.usage.completion_tokens)
                with lock:
                    results.append((r.id, latency))
                    if got != alone[q]:
                        problems.append(f"client {i} asked {q!r}, got {got}, alone {alone[q]}")

        start = time.perf_counter()
        threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start

    ids = [r[0] for r in results]
    latencies = [r[1] for r in results]
    if len(set(ids)) != len(ids):
        problems.append("response ids repeat")
    if len(results) != args.requests:
        problems.append(f"{len(results)} of {args.requests} requests answered")
    summary = {
        "requests": len(results),
        "clients": args.clients,
        "max_tokens": args.max_tokens,
        "backend": args.backend,
        "wall_s": round(wall, 2),
        "requests_per_s": round(len(results) / wall, 2),
        "latency_p50_ms": round(1000 * statistics.median(latencies), 1) if latencies else None,
        "latency_p99_ms": round(1000 * percentile(latencies, 99), 1) if latencies else None,
        "latency_max_ms": round(1000 * max(latencies), 1) if latencies else None,
    }
    print(json.dumps(summary))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    if problems:
        print("FAILED:\n" + "\n".join(problems[:20]), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
