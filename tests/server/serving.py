"""A `minerva serve` process for the server's tests: started on a free loopback port with its
own database, waited for until /health answers, and stopped (SIGTERM, then SIGKILL) on exit,
its stderr shown when something failed."""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary, args, backend="cpu"):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tmp = tempfile.TemporaryDirectory()
        self.log = open(os.path.join(self.tmp.name, "stderr.txt"), "w+")
        env = dict(os.environ, MINERVA_DB=os.path.join(self.tmp.name, "db.sqlite"))
        env.pop("MINERVA_API_KEY", None)
        self.proc = subprocess.Popen(
            [binary, "serve", "--port", str(self.port), "--backend", backend, *args],
            stdout=subprocess.DEVNULL, stderr=self.log, env=env)

    def __enter__(self):
        deadline = time.time() + 180
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"minerva serve exited ({self.proc.returncode}):\n{self.stderr()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"minerva serve did not answer /health:\n{self.stderr()}")

    def __exit__(self, kind, value, tb):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if kind is not None:
            print(f"--- minerva serve stderr ---\n{self.stderr()}", file=sys.stderr)
        self.log.close()
        self.tmp.cleanup()
        return False

    def alive(self):
        return self.proc.poll() is None

    def stderr(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-4000:]

    def get(self, path, key=None):
        req = urllib.request.Request(self.url + path)
        if key:
            req.add_header("authorization", f"Bearer {key}")
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read().decode()
