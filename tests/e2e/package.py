#!/usr/bin/env python3
"""The Debian package as a user gets it: unpacked with dpkg -x (what apt-get install puts on
disk, without root), its desktop entry and icon checked, and its binary started from there
under a virtual display (run under xvfb-run) through tauri-driver: the window opens and the UI
answers a command.

  python3 tests/e2e/package.py --deb target/debug/bundle/deb/Minerva_0.1.0_amd64.deb --out DIR
"""
import argparse
import configparser
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By

from app import Shots, WebDriverWait, button, session, start_driver


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--deb", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="minerva-deb-")
    root = os.path.join(tmp, "root")
    try:
        subprocess.run(["dpkg-deb", "-x", args.deb, root], check=True)
        info = subprocess.run(["dpkg-deb", "-f", args.deb, "Package", "Depends"],
                              check=True, capture_output=True, text=True).stdout
        print(info.strip())
        assert "libwebkit2gtk-4.1" in info and "libvulkan1" in info, info
        app = os.path.join(root, "usr/bin/minerva-app")
        assert os.access(app, os.X_OK), "usr/bin/minerva-app is missing"
        entries = [f for f in os.listdir(os.path.join(root, "usr/share/applications"))
                   if f.endswith(".desktop")]
        assert len(entries) == 1, entries
        desktop = configparser.ConfigParser(interpolation=None)
        desktop.read(os.path.join(root, "usr/share/applications", entries[0]))
        entry = desktop["Desktop Entry"]
        assert entry["Name"] == "Minerva" and entry["Exec"].startswith("minerva-app"), dict(entry)
        icons = [f for _, _, fs in os.walk(os.path.join(root, "usr/share/icons")) for f in fs]
        assert any(f.startswith("minerva-app") and f.endswith(".png") for f in icons), icons

        env = dict(os.environ)
        env["MINERVA_DB"] = os.path.join(tmp, "minerva.sqlite")
        env["HOME"] = tmp
        driver = start_driver(env)
        try:
            d = session(app)
            try:
                button(d, "Benchmark").click()
                WebDriverWait(d, 10).until(lambda d: d.find_elements(
                    By.XPATH, "//form[@aria-label='Benchmark settings']"))
                # The UI answers: a command goes to the installed binary and comes back.
                runs = d.execute_async_script(
                    "const done = arguments[arguments.length - 1];"
                    "window.__TAURI_INTERNALS__.invoke('call', {command: 'bench_runs'}).then(done, (e) => done(String(e)));")
                assert runs == [], runs
                Shots(args.out)(d, "21-installed-package")
            finally:
                d.quit()
        finally:
            driver.send_signal(signal.SIGTERM)
            driver.wait(10)
    except (AssertionError, WebDriverException, subprocess.CalledProcessError) as e:
        print(f"FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("the package installs and its app answers")


if __name__ == "__main__":
    main()
