#!/usr/bin/env python3
"""End to end in a browser: `minerva serve --ui` driven through Debian's headless Chromium and
chromedriver with Selenium, as a person uses the page. Screenshots go to --out.

  python3 tests/e2e/browser.py --minerva target/debug/minerva --model .cache/models/X.gguf --out DIR

Checks: the server starts with the model loaded and answers /health; the page it serves talks to
it over HTTP (commands and server-sent events); a new chat asked "What is the capital of
France?" streams back a reply saying Paris; the Models screen lists the loaded model. Then a
second server (no UI) stands in for a remote OpenAI-compatible engine: added by its URL on the
Models screen, its model shows among the remote models with its host, loads, and answers the
same question with Paris. Both servers are stopped whatever happens; a failed step leaves
browser-failure.png and exits with 1.
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait as _Wait

QUESTION = "What is the capital of France?"
STOP = "//button[normalize-space()='Stop']"


class Failure(Exception):
    """A step that did not go as it should, in words."""


def WebDriverWait(d, timeout):
    """Waits that look again when the UI redrew an element between finding and reading it."""
    return _Wait(d, timeout, poll_frequency=0.1,
                 ignored_exceptions=[StaleElementReferenceException])


# ---- the servers ---------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A `minerva serve` process, its output in files (a pipe nobody reads would fill and stall it)."""

    def __init__(self, name, argv, env, tmp):
        self.name = name
        self.port = int(argv[argv.index("--port") + 1])
        self.base = f"http://127.0.0.1:{self.port}"
        self.err_path = os.path.join(tmp, name + ".stderr")
        with open(os.path.join(tmp, name + ".stdout"), "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err)

    def stderr(self):
        with open(self.err_path, errors="replace") as f:
            return f.read()[-4000:]

    def wait_healthy(self, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise Failure(f"{self.name} server exited with {self.proc.returncode}:\n{self.stderr()}")
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        raise Failure(f"{self.name} server gave no 200 on /health in {timeout} s:\n{self.stderr()}")

    def call(self, command, args=None):
        """A command of the service over HTTP, as the page sends it."""
        req = urllib.request.Request(
            f"{self.base}/api/call/{command}", data=json.dumps(args or {}).encode(),
            headers={"content-type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.load(r)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---- the page ----------------------------------------------------------------------------

def browser(chromium, chromedriver):
    opts = Options()
    opts.binary_location = chromium
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,800"]:
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(chromedriver), options=opts)


class Shots:
    def __init__(self, out):
        self.out = out
        self.names = []

    def __call__(self, d, name):
        path = os.path.join(self.out, name + ".png")
        # Two animation frames: what the last change drew is on screen before the picture.
        d.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "requestAnimationFrame(() => requestAnimationFrame(() => done()));")
        d.save_screenshot(path)
        self.names.append(path)


def wait_text(d, xpath, text, timeout=60):
    """Waits for an element at `xpath` whose text holds `text` (case ignored)."""
    def ok(d):
        els = d.find_elements(By.XPATH, xpath)
        return [e for e in els if text.lower() in e.text.lower()] or False
    try:
        return WebDriverWait(d, timeout).until(ok)
    except Exception as e:
        raise Failure(f"no {xpath} saying {text!r} within {timeout} s") from e


def button(d, label, within=None):
    return (within or d).find_element(By.XPATH, f".//button[normalize-space()='{label}']")


def models_screen(d):
    d.find_element(By.TAG_NAME, "body").send_keys(Keys.CONTROL, "1")
    WebDriverWait(d, 10).until(lambda d: d.find_elements(By.XPATH, "//h1[text()='Models']"))


def chat_screen(d):
    d.find_element(By.TAG_NAME, "body").send_keys(Keys.CONTROL, "2")
    WebDriverWait(d, 10).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "textarea[aria-label='Message']"))


def set_number(d, label, value):
    box = d.find_element(
        By.XPATH, f"//aside[@aria-label='Chat settings']//label[contains(., '{label}')]//input")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(str(value), Keys.TAB)


def greedy(d):
    """Greedy replies of at most 200 tokens for the open conversation: a tiny model then says Paris."""
    button(d, "Chat settings").click()
    set_number(d, "Temperature", 0)
    set_number(d, "Max tokens", 200)
    button(d, "Close").click()


def replies(d):
    return d.find_elements(By.CSS_SELECTOR, "article.msg.assistant")


def ask(d, shot, name):
    """Sends the question, waits for the whole reply, checks it says Paris, and screenshots it."""
    box = d.find_element(By.CSS_SELECTOR, "textarea[aria-label='Message']")
    box.send_keys(QUESTION)
    box.send_keys(Keys.ENTER)
    try:
        WebDriverWait(d, 120).until(lambda d: any("Paris" in r.text for r in replies(d)))
        WebDriverWait(d, 120).until(lambda d: not d.find_elements(By.XPATH, STOP))
    except Exception as e:
        said = [r.text for r in replies(d)]
        raise Failure(f"no reply saying Paris within 120 s; replies: {said}") from e
    shot(d, name)


# ---- the steps ---------------------------------------------------------------------------

def wait_loaded(server, timeout=120):
    """The server loads --model as it starts: wait until the service lists it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise Failure(f"{server.name} server exited with {server.proc.returncode}:\n{server.stderr()}")
        if server.call("loaded_models"):
            return
        time.sleep(0.5)
    raise Failure(f"{server.name} server had no model loaded after {timeout} s:\n{server.stderr()}")


def wait_models(server, timeout=120):
    """An engine is of use once its /v1/models lists a model."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise Failure(f"{server.name} server exited with {server.proc.returncode}:\n{server.stderr()}")
        try:
            with urllib.request.urlopen(server.base + "/v1/models", timeout=5) as r:
                if json.load(r).get("data"):
                    return
        except (urllib.error.URLError, OSError, ValueError):
            pass
        time.sleep(0.5)
    raise Failure(f"{server.name} server listed no model on /v1/models after {timeout} s:\n{server.stderr()}")


def local_chat(d, ui, hint, shot):
    d.get(ui.base + "/")
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
    url = f"{remote.base}/v1"
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


def main():
    p = argparse.ArgumentParser(description="minerva serve --ui in headless Chromium, end to end")
    p.add_argument("--minerva", required=True, help="the minerva CLI binary")
    p.add_argument("--model", required=True, help="a small GGUF chat model (SmolLM2)")
    p.add_argument("--out", required=True, help="folder for the screenshots")
    p.add_argument("--chromium", default="/usr/bin/chromium")
    p.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    args = p.parse_args()
    minerva = os.path.abspath(args.minerva)
    model = os.path.abspath(args.model)
    os.makedirs(args.out, exist_ok=True)
    # The model's name as the UI shows it starts like its file: "SmolLM2-…" → "smollm2".
    hint = re.split(r"[-_. ]", os.path.basename(model))[0]

    tmp = tempfile.mkdtemp(prefix="minerva-browser-")
    env = dict(os.environ)
    # An empty home: no models found on disk, nothing from earlier runs.
    env["HOME"] = tmp
    shot = Shots(args.out)
    servers = []
    d = None
    failed = None
    try:
        ui = Server("ui", [minerva, "serve", "--ui", "--model", model, "--host", "127.0.0.1",
                           "--port", str(free_port()), "--backend", "cpu"],
                    dict(env, MINERVA_DB=os.path.join(tmp, "db.sqlite")), tmp)
        servers.append(ui)
        ui.wait_healthy()
        wait_loaded(ui)

        d = browser(args.chromium, args.chromedriver)
        local_chat(d, ui, hint, shot)

        # The stand-in for a remote engine: its own database, no UI.
        remote = Server("remote", [minerva, "serve", "--model", model, "--host", "127.0.0.1",
                                   "--port", str(free_port()), "--backend", "cpu"],
                        dict(env, MINERVA_DB=os.path.join(tmp, "remote-db.sqlite")), tmp)
        servers.append(remote)
        remote.wait_healthy()
        wait_models(remote)
        remote_chat(d, remote, shot)
    except Exception as e:  # any failure: say what, keep a picture of the page, exit 1
        failed = f"{type(e).__name__}: {e}"
        if d is not None:
            try:
                shot(d, "browser-failure")
            except Exception:
                pass
    finally:
        if d is not None:
            try:
                d.quit()
            except Exception:
                pass
        for s in servers:
            s.stop()
        if failed:
            for s in servers:
                print(f"--- {s.name} server stderr (end) ---\n{s.stderr()}", file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)

    if failed:
        print(f"FAILED: {failed}", file=sys.stderr)
        sys.exit(1)
    print("screenshots:", " ".join(shot.names))


if __name__ == "__main__":
    main()
