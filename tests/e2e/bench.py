#!/usr/bin/env python3
"""End to end: the Benchmark and Settings screens of the real Minerva app, driven as a person
uses them through tauri-driver and WebKitWebDriver (under xvfb-run). Screenshots go to --out.

  python3 tests/e2e/bench.py --app target/debug/minerva-app --report R.json --out DIR

First start: the settings screen; a benchmark of the tiny fixture model in three formats from
the catalogue (live progress, then the verdicts, the table and a chart per figure); its CSV;
a run cancelled midway (kept, marked as stopped early); a report made by `minerva bench` on
the GPU machine dropped on the window and imported. Second start: the runs are still there;
open one; compare two; set the adapter to CPU in the settings and see the next run use it.
File dialogs are the desktop's own windows, which WebDriver cannot reach: export goes through
the same command the Export button calls, import through a drop.
"""
import argparse
import csv
import os
import tempfile

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from app import Shots, WebDriverWait, button, drop, starts, wait_text

FORMATS = ["safetensors F32", "gguf Q4_0", "mlx 4-bit"]
FORM = "//form[@aria-label='Benchmark settings']"
RESULTS = "//section[@aria-label='Results']"
HISTORY = "//aside[@aria-label='Past runs']"


def tab(d, name, ready_xpath):
    button(d, name).click()
    WebDriverWait(d, 10).until(lambda d: d.find_elements(By.XPATH, ready_xpath))


def field(d, label):
    return d.find_element(By.XPATH, f"{FORM}//label[contains(., '{label}')]//input")


def fill(d, label, value):
    box = field(d, label)
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(str(value), Keys.TAB)


def invoke(d, command, args):
    return d.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "window.__TAURI_INTERNALS__.invoke('call', {command: arguments[0], args: arguments[1]})"
        ".then((v) => done({ok: v}), (e) => done({err: String(e)}));", command, args)


def history_rows(d):
    return d.find_elements(By.XPATH, f"{HISTORY}//li")


def choose_fixture(d):
    """The tiny fixture model from the catalogue, three of its formats ticked."""
    Select(d.find_element(By.XPATH, f"{FORM}//label[contains(., 'Model')]//select")) \
        .select_by_value("cat:tiny-llama-fixture")
    boxes = "//fieldset[legend='Formats']//label"
    WebDriverWait(d, 30).until(lambda d: len(d.find_elements(By.XPATH, boxes)) >= 3)
    for label in d.find_elements(By.XPATH, boxes):
        box = label.find_element(By.TAG_NAME, "input")
        name = label.find_element(By.XPATH, "./span[1]").text.strip()
        if (name in FORMATS) != box.is_selected():
            box.click()


def set_run(d, runs, backend=None):
    fill(d, "Prompt lengths", "8,16")
    fill(d, "Generated tokens", 4)
    fill(d, "Runs", runs)
    fill(d, "Quality tokens", 64)
    if backend:
        Select(d.find_element(By.XPATH, f"{FORM}//label[contains(., 'Backend')]//select")) \
            .select_by_value(backend)


def results(d, rows, timeout=300):
    """Waits for the results; checks the table's rows and a chart per column."""
    WebDriverWait(d, timeout).until(
        lambda d: len(d.find_elements(By.XPATH, f"{RESULTS}//tbody/tr")) == rows)
    section = d.find_element(By.XPATH, RESULTS)
    columns = len(section.find_elements(By.XPATH, ".//thead//th")) - 1
    charts = len(section.find_elements(By.CSS_SELECTOR, "svg.chart"))
    assert columns > 5 and charts == columns, (columns, charts)
    return section


def scroll_to(d, el):
    d.execute_script("arguments[0].scrollIntoView({block: 'start'});", el)


def first_run(d, args, shot):
    tab(d, "Settings", "//h1[text()='Settings']")
    assert "minerva" in d.find_element(By.TAG_NAME, "main").text.lower()
    shot(d, "13-settings")

    tab(d, "Benchmark", FORM)
    choose_fixture(d)
    set_run(d, 2, "cpu")
    button(d, "Run").click()
    WebDriverWait(d, 60).until(lambda d: d.find_elements(
        By.XPATH, "//section[@aria-label='Benchmark in progress']//progress"))
    shot(d, "14-bench-progress")
    section = results(d, 3)
    text = section.text
    assert "(reference)" in text and "gguf Q4_0:" in text and "KL" in text, text
    scroll_to(d, section)
    shot(d, "15-bench-results")
    scroll_to(d, section.find_element(By.CSS_SELECTOR, "svg.chart"))
    shot(d, "15-bench-charts")

    # Export: the command behind the Export CSV button, to a file of ours.
    runs = invoke(d, "bench_runs", {})["ok"]
    out = os.path.join(args.tmp, "run.csv")
    assert invoke(d, "export_bench_run", {"id": runs[0]["id"], "format": "csv", "path": out}) \
        == {"ok": None}
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    # 3 formats × 2 runs × 2 prompt lengths, every row with its figures.
    assert len(rows) == 12, len(rows)
    assert {r["format"] for r in rows} == set(FORMATS), rows
    assert all(float(r["decode_tokens_per_s"]) > 0 for r in rows), rows

    # A run stopped midway is kept with what it measured.
    fill(d, "Runs", 100)
    button(d, "Run").click()
    wait_text(d, "//section[@aria-label='Benchmark in progress']", "run 2/100", timeout=120)
    button(d, "Cancel").click()
    WebDriverWait(d, 60).until(lambda d: len(history_rows(d)) == 2)
    wait_text(d, HISTORY, "stopped early", timeout=30)
    scroll_to(d, results(d, 3))
    shot(d, "16-bench-cancelled")

    # A report made by `minerva bench` on the GPU machine, dropped on the window.
    drop(d, [args.report])
    WebDriverWait(d, 30).until(lambda d: len(history_rows(d)) == 3)
    wait_text(d, HISTORY, "imported", timeout=30)
    section = results(d, 4)
    assert "NVIDIA" in d.find_element(By.XPATH, HISTORY).text
    scroll_to(d, section)
    shot(d, "17-bench-imported")
    scroll_to(d, section.find_element(By.CSS_SELECTOR, "svg.chart"))
    shot(d, "17-bench-imported-charts")


def second_run(d, args, shot):
    tab(d, "Benchmark", FORM)
    WebDriverWait(d, 30).until(lambda d: len(history_rows(d)) == 3)
    # Open the first run (the oldest, last in the list).
    history_rows(d)[-1].find_element(By.XPATH, ".//button[normalize-space()='Open']").click()
    scroll_to(d, results(d, 3))
    shot(d, "18-bench-history-open")

    # Compare the complete run with the one stopped early.
    rows = history_rows(d)
    rows[-1].find_element(By.TAG_NAME, "input").click()
    rows[-2].find_element(By.TAG_NAME, "input").click()
    button(d, "Compare").click()
    section = results(d, 6)
    assert "A · gguf Q4_0" in section.text and "B · gguf Q4_0" in section.text, section.text
    scroll_to(d, section.find_element(By.TAG_NAME, "table"))
    shot(d, "19-bench-compare")

    # The adapter set to CPU in the settings is what the next run uses.
    backend = f"{FORM}//label[contains(., 'Backend')]//select"
    assert Select(d.find_element(By.XPATH, backend)).first_selected_option \
        .get_attribute("value") == "auto"
    tab(d, "Settings", "//h1[text()='Settings']")
    Select(d.find_element(By.XPATH, "//label[contains(., 'GPU adapter')]//select")) \
        .select_by_value("cpu")
    WebDriverWait(d, 10).until(lambda d: invoke(d, "app_settings", {})["ok"]["adapter"] == "cpu")
    shot(d, "20-settings-cpu")
    tab(d, "Benchmark", FORM)
    assert Select(d.find_element(By.XPATH, backend)).first_selected_option \
        .get_attribute("value") == "cpu"
    choose_fixture(d)
    set_run(d, 1)
    button(d, "Run").click()
    WebDriverWait(d, 300).until(lambda d: len(history_rows(d)) == 4)
    newest = invoke(d, "bench_runs", {})["ok"][0]
    assert newest["backend"] == "cpu" and newest["device"] == "cpu", newest
    results(d, 3)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--app", required=True)
    p.add_argument("--report", required=True, help="a minerva bench --json report to import")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    args.report = os.path.abspath(args.report)
    os.makedirs(args.out, exist_ok=True)
    args.tmp = tempfile.mkdtemp(prefix="minerva-e2e-bench-")
    shot = Shots(args.out)
    starts(args.app, args.tmp, shot, (lambda d: first_run(d, args, shot),
                                      lambda d: second_run(d, args, shot)), "bench-failure")


if __name__ == "__main__":
    main()
