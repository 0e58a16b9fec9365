#!/usr/bin/env python3
"""End to end in a browser: `minerva serve --ui` driven through Debian's headless Chromium and
chromedriver with Selenium, as a person uses the page. Screenshots go to --out.

  python3 tests/e2e/browser.py --minerva target/debug/minerva --model .cache/models/X.gguf --out DIR

Checks: the server starts with the model loaded and answers /health; the page it serves talks to
it over HTTP (commands and server-sent events); a new chat asked "Name the capital of
France." streams back a reply saying Paris; the Models screen lists the loaded model. Then a
second server (no UI) stands in for a remote OpenAI-compatible engine: added by its URL on the
Models screen, its model shows among the remote models with its host, loads, and answers the
same question with Paris. Both servers are stopped whatever happens; a failed step leaves
browser-failure.png and exits with 1.
"""
import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
import time
import urllib.error

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

import app
from app import (QUESTION, Shots, WebDriverWait, chat_screen, models_screen, replies, send,
                 set_number)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from serving import Server  # noqa: E402

STOP = "//button[normalize-space()='Stop']"


class Failure(Exception):
    """A step that did not go as it should, in words."""


# ---- the page ----------------------------------------------------------------------------

def browser(chromium, chromedriver):
    opts = Options()
    opts.binary_location = chromium
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,800"]:
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(chromedriver), options=opts)


def wait_text(d, xpath, text, timeout=60):
    """Waits for an element at `xpath` whose text holds `text` (case ignored): those that do."""
    try:
        els = app.wait_text(d, xpath, text, timeout, ignore_case=True)
    except Exception as e:
        raise Failure(f"no {xpath} saying {text!r} within {timeout} s") from e
    return [e for e in els if text.lower() in e.text.lower()]


def button(d, label, within=None):
    return (within or d).find_element(By.XPATH, f".//button[normalize-space()='{label}']")


def greedy(d):
    """Greedy replies of at most 200 tokens for the open conversation: a tiny model then says Paris."""
    button(d, "Chat settings").click()
    set_number(d, "Temperature", 0)
    set_number(d, "Max tokens", 200)
    button(d, "Close").click()


def ask(d, shot, name):
    """Sends the question, waits for the whole reply, checks it says Paris, and screenshots it."""
    send(d, QUESTION)
    try:
        WebDriverWait(d, 120).until(lambda d: any("Paris" in r.text for r in replies(d)))
        WebDriverWait(d, 120).until(lambda d: not d.find_elements(By.XPATH, STOP))
    except Exception as e:
        said = [r.text for r in replies(d)]
        raise Failure(f"no reply saying Paris within 120 s; replies: {said}") from e
    shot(d, name)


# ---- the steps ---------------------------------------------------------------------------

def wait_until(server, ready, what, timeout=120):
    """Polls `ready()` until it is true; a Failure when the server exits first, or saying `what`
    after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not server.alive():
            raise Failure(f"{server.name} exited with {server.proc.returncode}:\n{server.stderr()}")
        if ready():
            return
        time.sleep(0.5)
    raise Failure(f"{server.name} {what} after {timeout} s:\n{server.stderr()}")


def wait_loaded(server):
    """The server loads --model as it starts: wait until the service lists it."""
    wait_until(server, lambda: server.call("loaded_models"), "had no model loaded")


def wait_models(server):
    """An engine is of use once its /v1/models lists a model."""
    def listed():
        try:
            return json.loads(server.get("/v1/models")).get("data")
        except (urllib.error.URLError, OSError, ValueError):
            return False
    wait_until(server, listed, "listed no model on /v1/models")


def local_chat(d, ui, hint, shot):
    d.get(ui.url + "/")
    WebDriverWait(d, 30).until(lambda d: d.find_elements(By.XPATH, "//h1[text()='Models']"))
    # The page was served by the server: it must be on the HTTP transport, not the mock.
    meta = d.find_elements(By.CSS_SELECTOR, "meta[name='minerva-transport'][content='http']")
    if not meta:
        raise Failure("the served page has no <meta name='minerva-transport' content='http'>")
    wait_text(d, "//footer[@aria-label='Status']", hint, timeout=30)

    chat_screen(d)
    button(d, "New chat").click()
    WebDriverWait(d, 10).until(
        lambda d: d.find_elements(By.XPATH, "//aside[@aria-label='Conversations']//li[contains(@class,'current')]"))
    greedy(d)
    ask(d, shot, "browser-01-chat")

    models_screen(d)
    wait_text(d, "//section[@aria-label='Loaded models']", hint, timeout=30)
    shot(d, "browser-02-models")


def remote_chat(d, remote, shot):
    url = f"{remote.url}/v1"
    host = f"127.0.0.1:{remote.port}"
    models_screen(d)
    box = d.find_element(By.CSS_SELECTOR, "input[aria-label='Remote engine URL']")
    box.clear()
    box.send_keys(url)
    button(d, "Add engine").click()

    engines = "//section[@aria-label='Remote engines']//li"
    row = wait_text(d, engines, url, timeout=60)[0]
    if not re.search(r"\b[1-9]\d* models?\b", row.text):
        raise Failure(f"the remote engine lists no models: {row.text!r}")

    # Its model is among the remote models: the "remote" badge, and the host for a size.
    rows = "//section[@aria-label='Remote models']//li[.//span[contains(@class,'badge') and text()='remote']]"
    row = wait_text(d, rows, host, timeout=30)[0]
    button(d, "Load", within=row).click()

    # Loaded: the app opens a new chat with it (the conversation's title tip is its model's path,
    # `<engine url>#<model id>`).
    WebDriverWait(d, 120).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "textarea[aria-label='Message']"))
    heading = "//section[@aria-label='Conversation']//h1"
    try:
        WebDriverWait(d, 30).until(
            lambda d: (d.find_element(By.XPATH, heading).get_attribute("title") or "").startswith(url + "#"))
    except Exception as e:
        tip = d.find_element(By.XPATH, heading).get_attribute("title")
        raise Failure(f"the chat opened after the load is not with the remote model: {tip!r}") from e
    greedy(d)
    ask(d, shot, "browser-03-remote-chat")


def run(args, shot):
    minerva = os.path.abspath(args.minerva)
    model = os.path.abspath(args.model)
    # The model's name as the UI shows it starts like its file: "SmolLM2-…" → "smollm2".
    hint = re.split(r"[-_. ]", os.path.basename(model))[0]
    # Unwound last in, first out: the browser quits, then the servers stop (each saying what it
    # wrote on stderr if a step failed), then the home goes.
    with contextlib.ExitStack() as stack:
        # An empty home: no models found on disk, nothing from earlier runs.
        env = {"HOME": stack.enter_context(tempfile.TemporaryDirectory(prefix="minerva-browser-"))}
        ui = stack.enter_context(Server(minerva, ["--ui", "--model", model, "--host", "127.0.0.1"],
                                        env=env, name="ui server"))
        wait_loaded(ui)

        d = browser(args.chromium, args.chromedriver)
        stack.callback(quit_quietly, d)
        try:
            local_chat(d, ui, hint, shot)

            # The stand-in for a remote engine: its own database, no UI.
            remote = stack.enter_context(Server(minerva, ["--model", model, "--host", "127.0.0.1"],
                                                env=env, name="remote server"))
            wait_models(remote)
            remote_chat(d, remote, shot)
        except Exception:  # keep a picture of the page
            try:
                shot(d, "browser-failure")
            except Exception:
                pass
            raise


def quit_quietly(d):
    try:
        d.quit()
    except Exception:
        pass


def main():
    p = argparse.ArgumentParser(description="minerva serve --ui in headless Chromium, end to end")
    p.add_argument("--minerva", required=True, help="the minerva CLI binary")
    p.add_argument("--model", required=True, help="a small GGUF chat model (SmolLM2)")
    p.add_argument("--out", required=True, help="folder for the screenshots")
    p.add_argument("--chromium", default="/usr/bin/chromium")
    p.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    shot = Shots(args.out)
    try:
        run(args, shot)
    except Exception as e:  # any failure: say what, and exit 1
        print(f"FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    print("screenshots:", " ".join(shot.names))


if __name__ == "__main__":
    main()
