#!/usr/bin/env python3
"""End to end: the real Minerva app with a remote engine, driven as a person uses it through
tauri-driver and WebKitWebDriver (run under a display: xvfb-run). A second `minerva serve` with
the model stands in for the remote OpenAI-compatible engine. Screenshots go to --out.

  python3 tests/e2e/remote_app.py --app target/debug/minerva-app --minerva target/debug/minerva \\
      --model .cache/models/X.gguf --out DIR

Checks: the engine, added by its URL on the Models screen, lists its model; the model shows
among the remote models with the engine's host; clicking its name loads it without a card, and
the load ends with a model on the "remote" backend at `<engine url>#<model id>`; the app opens a
new chat with it, which, asked "Name the capital of France." with temperature 0, replies with
Paris; the status bar says remote, and the Models screen lists it as loaded. The server and the
app are stopped whatever happens; a failed step leaves remote-app-failure.png and exits with 1.
"""
import argparse
import json
import os
import sys
import tempfile
import time

from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.by import By

from app import (QUESTION, Shots, WebDriverWait, button, models_screen, replies, send,
                 set_number, starts, wait_text)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from serving import Server  # noqa: E402

# Every load-done event from now on, kept in the page for the test to read.
RECORD_LOADS = """
const done = arguments[arguments.length - 1];
const tauri = window.__TAURI_INTERNALS__;
window.loadsDone = [];
tauri.invoke('plugin:event|listen', {
    event: 'load-done',
    target: {kind: 'Any'},
    handler: tauri.transformCallback((e) => window.loadsDone.push(e.payload)),
}).then(() => done(null), (e) => done(String(e)));
"""


def served_models(server, timeout=120):
    """The ids the engine lists on /v1/models, once it lists any (its model loads as it starts)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.alive(), "minerva serve exited"
        ids = [m["id"] for m in json.loads(server.get("/v1/models"))["data"]]
        if ids:
            return ids
        time.sleep(0.5)
    raise AssertionError(f"minerva serve listed no model on /v1/models after {timeout} s")


def remote_chat(d, server, model_id, shot):
    url = f"{server.url}/v1"
    host = f"127.0.0.1:{server.port}"

    # Add the engine: it is listed with its one model.
    models_screen(d)
    box = d.find_element(By.CSS_SELECTOR, "input[aria-label='Remote engine URL']")
    box.clear()
    box.send_keys(url)
    button(d, "Add engine").click()
    # (The URL may be ellipsized, which WebKit leaves out of visible text: find it by its title.)
    engine = f"//section[@aria-label='Remote engines']//li[span[@title='{url}']]"
    try:
        wait_text(d, engine, "1 model", timeout=60)
    except TimeoutException:
        rows = [r.text for r in d.find_elements(By.XPATH, "//section[@aria-label='Remote engines']//li")]
        raise AssertionError(f"the engine at {url} is not listed with its model: {rows}")

    # Its model is among the remote models: the "remote" badge, and the host for a size.
    row = ("//section[@aria-label='Remote models']//li"
           "[.//span[contains(@class,'badge') and text()='remote']]"
           f"[.//span[text()='{host}']][.//button[text()='{model_id}']]")
    WebDriverWait(d, 30).until(lambda d: d.find_elements(By.XPATH, row))
    # Both lists in the picture: the remote models, and the engines below them.
    d.execute_script("arguments[0].scrollIntoView({block: 'end'})",
                     d.find_element(By.XPATH, "//section[@aria-label='Remote engines']"))
    shot(d, "20-app-remote-models")

    # Clicking its name loads it (a remote model has no card): the load ends on the remote
    # backend, the engine's URL for an adapter.
    assert d.execute_async_script(RECORD_LOADS) is None, "could not listen to load-done"
    d.find_element(By.XPATH, row + f"//button[text()='{model_id}']").click()
    WebDriverWait(d, 60).until(lambda d: d.execute_script("return window.loadsDone.length"))
    model = d.execute_script("return window.loadsDone[0].model")
    assert model["backend"] == "remote", model
    assert model["path"] == f"{url}#{model_id}" and model["adapter"] == url, model

    # The app opens a new chat with it: empty, its title tip the model's path.
    WebDriverWait(d, 30).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "textarea[aria-label='Message']"))
    heading = "//section[@aria-label='Conversation']//h1"
    WebDriverWait(d, 30).until(
        lambda d: d.find_element(By.XPATH, heading).get_attribute("title") == model["path"])
    assert not replies(d), [r.text for r in replies(d)]

    # Greedy replies of at most 200 tokens, then the question: the reply says Paris.
    button(d, "Chat settings").click()
    set_number(d, "Temperature", 0)
    set_number(d, "Max tokens", 200)
    button(d, "Close").click()
    send(d, QUESTION)
    try:
        WebDriverWait(d, 120).until(lambda d: any("Paris" in r.text for r in replies(d)))
    except TimeoutException:
        raise AssertionError(f"no reply saying Paris: {[r.text for r in replies(d)]}")
    WebDriverWait(d, 120).until(
        lambda d: d.find_elements(By.XPATH, "//button[normalize-space()='Regenerate']"))
    assert len(replies(d)) == 1, [r.text for r in replies(d)]
    status = wait_text(d, "//footer[@aria-label='Status']", "remote", timeout=10)[0].text
    assert model_id in status, status
    shot(d, "21-app-remote-chat")

    # Back on the Models screen: the model is loaded, and no card was opened for it.
    models_screen(d)
    wait_text(d, "//section[@aria-label='Loaded models']", model_id, timeout=30)
    assert not d.find_elements(By.CSS_SELECTOR, "section.card"), "a card was opened"


def main():
    p = argparse.ArgumentParser(description="the app with a remote engine, end to end")
    p.add_argument("--app", required=True, help="the app binary")
    p.add_argument("--minerva", required=True, help="the minerva CLI binary, the remote engine")
    p.add_argument("--model", required=True, help="a small GGUF chat model (SmolLM2)")
    p.add_argument("--out", required=True, help="folder for the screenshots")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    shot = Shots(args.out)
    try:
        server = Server(os.path.abspath(args.minerva), ["--model", os.path.abspath(args.model)])
        with server:
            model_id = served_models(server)[0]
            tmp = tempfile.mkdtemp(prefix="minerva-e2e-remote-")
            starts(args.app, tmp, shot, [lambda d: remote_chat(d, server, model_id, shot)],
                   failure="remote-app-failure")
    except AssertionError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
