#!/usr/bin/env python3
"""`minerva serve` driven by the official `openai` Python client, as tools that speak the OpenAI
API drive it.

  python3 tests/server/openai_client.py --minerva target/debug/minerva --model SmolLM2.gguf

Starts a server with an API key and a small body limit, then checks: the model list; greedy
chat completions, whole and streamed, whose text equals `minerva run --chat`'s (usage in the
stream's last chunk); log-probabilities; stop strings; a plain completion; a stream the client
closes early frees the model for the next request; concurrent requests each get their own
answer; bad requests (invalid JSON, unknown model, oversized body, too many tokens, wrong or
missing key, unknown role) get their status and a JSON error, and the server stays up; /metrics
counts what happened. Exits 1 with the reason on the first failure.
"""
import argparse
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, __import__("os").path.dirname(__file__))
from serving import Server  # noqa: E402

import openai  # noqa: E402

# SmolLM2's reply to "What is the capital of France?" starts on a near tie ("L" against "The")
# that the CPU's 8-bit products decide for "L", as llama.cpp's do. Asked this way, the f32 and
# the 8-bit paths both reply "The capital of France is Paris.", each token at least 1.0 ahead
# of the next in log-probability.
QUESTION = "Name the capital of France."
KEY = "test-key-1234"


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def raw(server, path, body, key=KEY, content_type="application/json"):
    """A POST with a body as bytes; returns (status, parsed JSON body)."""
    req = urllib.request.Request(server.url + path, data=body, method="POST")
    req.add_header("content-type", content_type)
    if key:
        req.add_header("authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def minerva_run(binary, model, question, max_tokens):
    out = subprocess.run(
        [binary, "run", model, "--prompt", question, "--chat", "--temp", "0",
         "--max-tokens", str(max_tokens), "--backend", "cpu", "--json"],
        check=True, capture_output=True, text=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])["text"]


def greedy(client, model, question, **kw):
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": question}],
        temperature=0, max_tokens=kw.pop("max_tokens", 40), **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minerva", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()

    with Server(args.minerva, ["--model", args.model, "--api-key", KEY,
                               "--max-body", "65536", "--ctx", "512"]) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)

        # The list names the loaded model; requests use that id.
        models = client.models.list().data
        check(len(models) == 1, f"one model listed, got {models}")
        model = models[0].id
        check(model.startswith("SmolLM2"), f"the model's id: {model}")

        # Greedy text equals `minerva run`'s, whole and streamed.
        want = minerva_run(args.minerva, args.model, QUESTION, 40).strip()
        check("Paris" in want, f"minerva run's answer: {want!r}")
        whole = greedy(client, model, QUESTION)
        check(whole.choices[0].message.content.strip() == want,
              f"whole: {whole.choices[0].message.content!r} != run's {want!r}")
        check(whole.choices[0].finish_reason == "stop", whole.choices[0].finish_reason)
        check(whole.usage.completion_tokens > 0 and whole.usage.prompt_tokens > 0, whole.usage)
        check(whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens,
              whole.usage)

        chunks = list(client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": QUESTION}], temperature=0,
            max_tokens=40, stream=True, stream_options={"include_usage": True}))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        check(text.strip() == want, f"streamed: {text!r} != {want!r}")
        check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens
              == whole.usage.completion_tokens, f"usage in the last chunk: {chunks[-1]}")
        check(any(c.choices and c.choices[0].finish_reason == "stop" for c in chunks),
              "a chunk with finish_reason stop")

        # Log-probabilities: one per token, the chosen token first among its alternatives.
        lp = greedy(client, model, QUESTION, max_tokens=5, logprobs=True, top_logprobs=3)
        content = lp.choices[0].logprobs.content
        check(len(content) == lp.usage.completion_tokens, f"{len(content)} logprobs")
        for t in content:
            check(len(t.top_logprobs) == 3, t)
            check(t.top_logprobs[0].token == t.token and t.logprob <= 0, t)

        # Stop strings and max_tokens.
        stopped = greedy(client, model, QUESTION, stop=[" is"])
        check(stopped.choices[0].message.content == want.split(" is")[0],
              f"stop ' is': {stopped.choices[0].message.content!r}")
        short = greedy(client, model, QUESTION, max_tokens=2)
        check(short.choices[0].finish_reason == "length" and short.usage.completion_tokens == 2,
              f"max_tokens 2: {short}")

        # A plain completion.
        c = client.completions.create(model=model, prompt="The capital of France is",
                                      max_tokens=4, temperature=0, logprobs=2)
        check(c.choices[0].text and c.usage.completion_tokens == 4, c)
        check(len(c.choices[0].logprobs.tokens) == 4, c.choices[0].logprobs)

        # A stream closed after its first chunks stops generating: the next request is answered.
        stream = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Write a very long story."}],
            temperature=0.8, max_tokens=400, stream=True)
        for i, _ in enumerate(stream):
            if i == 3:
                break
        stream.close()
        after = greedy(client, model, QUESTION)
        check(after.choices[0].message.content.strip() == want, "the request after a cancel")
        metrics = server.get("/metrics", KEY)
        check("minerva_running_requests 0" in metrics and "minerva_queued_requests 0" in metrics,
              "nothing left running or queued after the cancelled stream:\n" + metrics)

        # Concurrent requests each get their own answer: the same as each alone.
        questions = ["What is the capital of France?", "What is 2 + 2?",
                     "Name a colour.", "What is the capital of Italy?"]
        alone = {q: greedy(client, model, q, max_tokens=12).choices[0].message.content
                 for q in questions}
        together, errors = {}, []

        def ask(q):
            try:
                together[q] = greedy(client, model, q, max_tokens=12).choices[0].message.content
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(f"{q}: {e}")
        threads = [threading.Thread(target=ask, args=(q,)) for q in questions * 2]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        check(not errors, errors)
        check(together == alone, f"concurrent answers differ: {together} vs {alone}")

        # Bad requests: their status, a JSON error, and the server stays up.
        status, body = raw(server, "/v1/chat/completions", b"{not json")
        check(status == 400 and "message" in body["error"], (status, body))
        try:
            greedy(client, "no-such-model", QUESTION)
            check(False, "an unknown model was accepted")
        except openai.NotFoundError as e:
            check(e.status_code == 404 and "no-such-model" in e.message, e)
        big = json.dumps({"model": model, "messages": [
            {"role": "user", "content": "x" * 70000}]}).encode()
        status, body = raw(server, "/v1/chat/completions", big)
        check(status == 413 and "limit" in body["error"]["message"], (status, body))
        try:
            greedy(client, model, QUESTION, max_tokens=100000)
            check(False, "a request over the context was accepted")
        except openai.BadRequestError as e:
            check(e.status_code == 400 and "512" in e.message, e.message)
        try:
            client.chat.completions.create(model=model, temperature=0, max_tokens=5,
                                           messages=[{"role": "tool", "content": "x"}])
            check(False, "an unknown role was accepted")
        except openai.BadRequestError as e:
            check("role" in e.message, e.message)
        for key in ("wrong-key", None):
            status, body = raw(server, "/v1/chat/completions",
                               json.dumps({"model": model, "messages": []}).encode(), key=key)
            check(status == 401 and body["error"]["code"] == "invalid_api_key", (status, body))
        try:
            openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0).models.list()
            check(False, "a wrong key was accepted")
        except openai.AuthenticationError:
            pass
        check(greedy(client, model, QUESTION).choices[0].message.content.strip() == want,
              "the server answers after the bad requests")
        check(server.alive(), "the server is still running")

        metrics = server.get("/metrics", KEY)
        for line in ('minerva_requests_total{endpoint="/v1/chat/completions",status="413"} 1',
                     'minerva_requests_total{endpoint="/v1/chat/completions",status="401"} 2',
                     "minerva_time_to_first_token_seconds_count"):
            check(line in metrics, f"{line!r} in /metrics:\n{metrics}")
    print("openai client: all checks passed")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
