#!/usr/bin/env python3
"""End to end: the real Minerva app driven as a person uses it, through tauri-driver and
WebKitWebDriver (run under a display: xvfb-run). Screenshots of each screen go to --out.

  python3 tests/e2e/app.py --app target/debug/minerva-app --model .cache/models/X.gguf --out DIR

Steps: open a model by its path and see its card; load it and see the progress; cancel a load;
chat and see the reply stream in; stop a long reply; regenerate; drop a broken file (the same
event a real drop produces) and see the error while the app stays up; drop a model; close the
window in the middle of a reply; restart the app and find the conversation with its messages and
stats, less the reply the close cut short.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.common.options import ArgOptions
from selenium.webdriver.remote.file_detector import UselessFileDetector
from selenium.webdriver.support.ui import WebDriverWait as _Wait

DRIVER_URL = "http://127.0.0.1:4444"


def WebDriverWait(d, timeout):
    """Waits that look again when the UI redrew an element between finding and reading it."""
    return _Wait(d, timeout, poll_frequency=0.1,
                 ignored_exceptions=[StaleElementReferenceException])
# SmolLM2's reply to "What is the capital of France?" starts on a near tie ("L" against "The")
# that the CPU's 8-bit products decide for "L", as llama.cpp's do. Asked this way, the f32 and
# the 8-bit paths both reply "The capital of France is Paris.", each token at least 1.0 ahead
# of the next in log-probability.
QUESTION = "Name the capital of France."


def start_driver(env):
    proc = subprocess.Popen(["tauri-driver"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            urllib.request.urlopen(DRIVER_URL + "/status", timeout=1)
            return proc
        except Exception:
            time.sleep(0.1)
    proc.terminate()
    sys.exit("tauri-driver did not answer on " + DRIVER_URL)


def session(app):
    opts = ArgOptions()
    opts.set_capability("browserName", "wry")
    opts.set_capability("tauri:options", {"application": app})
    started = time.monotonic()
    d = webdriver.Remote(command_executor=DRIVER_URL, options=opts)
    # Typed paths are text for the app, not files to upload to the driver.
    d.file_detector = UselessFileDetector()
    # The page is up when the Models heading is drawn.
    WebDriverWait(d, 30).until(lambda d: d.find_elements(By.XPATH, "//h1[text()='Models']"))
    print(f"launch to window: {(time.monotonic() - started) * 1000:.0f} ms")
    return d


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


def wait_text(d, xpath, text, timeout=60, ignore_case=False):
    def has(e):
        return text.lower() in e.text.lower() if ignore_case else text in e.text

    def ok(d):
        els = d.find_elements(By.XPATH, xpath)
        return els if any(has(e) for e in els) else False
    return WebDriverWait(d, timeout).until(ok)


def button(d, label):
    return d.find_element(By.XPATH, f"//button[normalize-space()='{label}']")


def drop(d, paths):
    """The event the window sends when files are dropped on it."""
    d.execute_script(
        "return window.__TAURI_INTERNALS__.invoke('plugin:event|emit', "
        "{event: 'tauri://drag-drop', payload: {paths: arguments[0], position: {x: 200, y: 200}}});",
        paths)


def open_path(d, path):
    box = d.find_element(By.CSS_SELECTOR, "input[aria-label='Model path']")
    box.clear()
    box.send_keys(path)
    button(d, "Open path").click()


def models_screen(d):
    d.find_element(By.TAG_NAME, "body").send_keys(Keys.CONTROL, "1")
    WebDriverWait(d, 10).until(lambda d: d.find_elements(By.XPATH, "//h1[text()='Models']"))


def chat_screen(d):
    d.find_element(By.TAG_NAME, "body").send_keys(Keys.CONTROL, "2")
    WebDriverWait(d, 10).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "textarea[aria-label='Message']"))


def send(d, text):
    box = d.find_element(By.CSS_SELECTOR, "textarea[aria-label='Message']")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def set_number(d, label, value):
    box = d.find_element(
        By.XPATH, f"//aside[@aria-label='Chat settings']//label[contains(., '{label}')]//input")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(str(value), Keys.TAB)


def replies(d):
    return d.find_elements(By.CSS_SELECTOR, "article.msg.assistant")


def first_run(d, args, shot):
    # Open by path: the card.
    open_path(d, args.model)
    wait_text(d, "//section[contains(@class,'card')]", "gguf")
    card = d.find_element(By.CSS_SELECTOR, "section.card").text
    assert "llama" in card.lower(), card
    shot(d, "01-models-card")
    # The backend choices: auto, gpu, cpu, then each adapter by name.
    options = [o.get_attribute("value") for o in d.find_elements(By.CSS_SELECTOR, "section.card select option")]
    adapters = d.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "window.__TAURI_INTERNALS__.invoke('call', {command: 'adapters'}).then((a) => done(a.map((x) => x.name)));")
    assert options == ["auto", "gpu", "cpu"] + adapters, (options, adapters)

    # A load cancelled as soon as it starts (Load, and Cancel on the next frame, as fast as a
    # person could not): the bar says so and nothing is loaded.
    state = d.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const byText = (sel, text) =>
            [...document.querySelectorAll(sel)].find((b) => b.textContent.trim() === text);
        byText('section.card button', 'Load').click();
        requestAnimationFrame(() => {
            const cancel = byText('section.load button', 'Cancel');
            if (!cancel) return done('no Cancel button');
            cancel.click();
            setTimeout(() => window.__TAURI_INTERNALS__.invoke('call', {command: 'loaded_models'}).then(
                (m) => done({bar: document.querySelector('section.load').innerText, loaded: m.length})), 1000);
        });""")
    assert isinstance(state, dict) and "Cancelled loading" in state["bar"] and state["loaded"] == 0, state
    shot(d, "02-models-load-cancelled")

    # Load it for real.
    button(d, "Load").click()
    seen_bar = bool(WebDriverWait(d, 30).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "section.load")))
    shot(d, "02-models-loading")
    # Loaded: the status bar names it (and the app moves on to the chat).
    wait_text(d, "//footer | //*[contains(@class,'status')]", "SmolLM2", timeout=120)
    models_screen(d)
    wait_text(d, "//section[@aria-label='Loaded models']", "SmolLM2", timeout=30)
    shot(d, "03-models-loaded")
    assert seen_bar

    # A broken file dropped on the window: an error naming it, and the app stays up.
    broken = os.path.join(args.tmp, "broken.gguf")
    with open(broken, "wb") as f:
        f.write(b"GGUF" + b"\xff" * 60)
    drop(d, [broken])
    wait_text(d, "//*[@role='alert' or contains(@class,'error')]", "broken.gguf", timeout=30)
    shot(d, "04-models-broken-drop")
    # Still working: a dropped model shows its card.
    drop(d, [args.model])
    wait_text(d, "//section[contains(@class,'card')]", "gguf", timeout=30)

    # Chat: greedy replies of at most 200 tokens (the settings panel), then the reply streams
    # in and says Paris.
    chat_screen(d)
    button(d, "Chat settings").click()
    set_number(d, "Temperature", 0)
    set_number(d, "Max tokens", 200)
    shot(d, "05-chat-settings")
    button(d, "Close").click()
    send(d, QUESTION)
    WebDriverWait(d, 120).until(lambda d: any("Paris" in r.text for r in replies(d)))
    WebDriverWait(d, 120).until(
        lambda d: d.find_elements(By.XPATH, "//button[normalize-space()='Regenerate']"))
    shot(d, "06-chat-reply")
    stats = replies(d)[-1].text
    assert "tok/s" in stats, stats

    # Regenerate: greedy or not, a reply comes back in place of the old one.
    button(d, "Regenerate").click()
    WebDriverWait(d, 120).until(
        lambda d: d.find_elements(By.XPATH, "//button[normalize-space()='Regenerate']"))
    assert len(replies(d)) == 1, [r.text for r in replies(d)]

    # Stop a long reply once text has arrived.
    send(d, "Write a very long story about a dragon and a castle, with many chapters.")
    WebDriverWait(d, 60).until(lambda d: d.find_elements(By.XPATH, "//button[normalize-space()='Stop']"))
    WebDriverWait(d, 60).until(lambda d: len(replies(d)) == 2 and len(replies(d)[-1].text) > 20)
    shot(d, "07-chat-streaming")
    button(d, "Stop").click()
    WebDriverWait(d, 60).until(
        lambda d: not d.find_elements(By.XPATH, "//button[normalize-space()='Stop']"))
    WebDriverWait(d, 30).until(lambda d: "stopped by you" in replies(d)[-1].text)
    shot(d, "08-chat-stopped")

    # Close the window in the middle of a reply: the app ends, and (below) that reply alone is
    # lost.
    send(d, "Now tell me another long story, about a knight.")
    WebDriverWait(d, 60).until(lambda d: len(replies(d)) == 3 and len(replies(d)[-1].text) > 20)
    d.close()


def second_run(d, args, shot):
    # After a restart: the conversation, its messages and their stats are still there.
    chat_screen(d)
    # (WebKit leaves an ellipsized title out of an element's visible text: find it by its text.)
    title = "//aside[@aria-label='Conversations']//button[contains(text(),'Name the capital')]"
    WebDriverWait(d, 30).until(lambda d: d.find_elements(By.XPATH, title))
    d.find_element(By.XPATH, title).click()
    WebDriverWait(d, 30).until(lambda d: any("Paris" in r.text for r in replies(d)))
    assert len(replies(d)) == 2
    assert "tok/s" in replies(d)[0].text
    # The message sent before the window closed is there; its unfinished reply is not.
    users = d.find_elements(By.CSS_SELECTOR, "article.msg.user")
    assert len(users) == 3 and "knight" in users[-1].text, [u.text for u in users]
    shot(d, "09-chat-after-restart")

    # The catalogue (models.toml) lists its models found on this disk: here the fixtures and
    # the SmolLM2 copy of the repository.
    models_screen(d)
    # (Row names may be ellipsized, which WebKit leaves out of visible text: match the text.)
    for name in ["Tiny llama (test fixture) · llama-Q4_0", "SmolLM2 135M Instruct"]:
        row = f"//section[@aria-label='Catalogue']//*[contains(text(),'{name}')]"
        WebDriverWait(d, 30).until(lambda d: d.find_elements(By.XPATH, row))
    shot(d, "10-models-catalogue")

    # A model that reasons before it answers: the reasoning is folded above the answer.
    drop(d, [args.thinking])
    wait_text(d, "//section[contains(@class,'card')]", "safetensors", timeout=30)
    button(d, "Load").click()
    WebDriverWait(d, 60).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "textarea[aria-label='Message']"))
    send(d, "What is two plus two?")
    WebDriverWait(d, 60).until(lambda d: any("Hello there" in r.text for r in replies(d)))
    reply = replies(d)[-1]
    fold = reply.find_element(By.CSS_SELECTOR, "details.reasoning")
    inside = fold.find_element(By.CSS_SELECTOR, ".reasoning-text")
    assert fold.get_attribute("open") is None and not inside.is_displayed(), "reasoning starts folded"
    fold.find_element(By.TAG_NAME, "summary").click()
    WebDriverWait(d, 10).until(lambda d: inside.is_displayed())
    assert "the tiny model can return four" in inside.text, inside.text
    shot(d, "11-chat-reasoning")

    # Close the window while a model loads: the app ends (below, it starts again unharmed).
    models_screen(d)
    open_path(d, args.model)
    wait_text(d, "//section[contains(@class,'card')]", "gguf", timeout=30)
    d.execute_script(
        "[...document.querySelectorAll('section.card button')]"
        ".find((b) => b.textContent.trim() === 'Load').click();")
    WebDriverWait(d, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "section.load"))
    d.close()


def third_run(d, shot):
    # After a close in the middle of a load: the app starts, nothing is loaded, and both
    # conversations are there.
    wait_text(d, "//section[@aria-label='Loaded models']", "", timeout=30)
    loaded = d.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "window.__TAURI_INTERNALS__.invoke('call', {command: 'loaded_models'}).then((m) => done(m.length));")
    assert loaded == 0, loaded
    chat_screen(d)
    titles = ("//aside[@aria-label='Conversations']//button"
              "[contains(text(),'Name the capital') or contains(text(),'What is two')]")
    WebDriverWait(d, 30).until(lambda d: len(d.find_elements(By.XPATH, titles)) == 2)
    models_screen(d)
    shot(d, "12-models-after-close-during-load")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--app", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--thinking", required=True, help="a model folder that reasons before it answers")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    args.model = os.path.abspath(args.model)
    args.thinking = os.path.abspath(args.thinking)
    os.makedirs(args.out, exist_ok=True)
    args.tmp = tempfile.mkdtemp(prefix="minerva-e2e-")
    shot = Shots(args.out)
    starts(args.app, args.tmp, shot, (lambda d: first_run(d, args, shot),
                                      lambda d: second_run(d, args, shot),
                                      lambda d: third_run(d, shot)))


def starts(app, tmp, shot, runs, failure="failure"):
    """Starts the app once per run (each run a function of the session), with its database in
    `tmp` and `tmp` as an empty home; a failure is saved as a screenshot and exits with 1."""
    env = dict(os.environ)
    env["MINERVA_DB"] = os.path.join(tmp, "minerva.sqlite")
    # An empty home: no models found on disk, no window state from earlier runs.
    env["HOME"] = tmp
    driver = start_driver(env)
    try:
        for run in runs:
            d = session(os.path.abspath(app))
            try:
                run(d)
            except (AssertionError, WebDriverException):
                shot(d, failure)
                raise
            finally:
                try:
                    d.quit()
                except WebDriverException:
                    pass  # the window was closed, and the app with it
    except (AssertionError, WebDriverException) as e:
        print(f"FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        driver.send_signal(signal.SIGTERM)
        driver.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    print("screenshots:", " ".join(shot.names))

if __name__ == "__main__":
    main()
