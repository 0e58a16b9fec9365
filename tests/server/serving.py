"""A `minerva serve` process for the server's tests: started on a free loopback port with its
own database, waited for until /health answers, and stopped (SIGTERM, then SIGKILL) on exit,
its stderr shown when something failed."""
import json
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
    """`args` go after `serve --port P --backend B`; `env` adds to (or overrides) the
    environment it runs in; `name` is what messages call it."""

    def __init__(self, binary, args, backend="cpu", env=None, name="minerva serve"):
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tmp = tempfile.TemporaryDirectory()
        # Its output in a file: a pipe nobody reads would fill and stall it.
        self.log = open(os.path.join(self.tmp.name, "stderr.txt"), "w+")
        full_env = dict(os.environ, MINERVA_DB=os.path.join(self.tmp.name, "db.sqlite"))
        full_env.pop("MINERVA_API_KEY", None)
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [binary, "serve", "--port", str(self.port), "--backend", backend, *args],
            stdout=subprocess.DEVNULL, stderr=self.log, env=full_env)

    def __enter__(self):
        deadline = time.time() + 180
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self._give_up(f"{self.name} exited ({self.proc.returncode})")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        self._give_up(f"{self.name} did not answer /health")

    def _give_up(self, why):
        # __exit__ is not called when __enter__ raises: stop it here.
        message = f"{why}:\n{self.stderr()}"
        self.stop()
        raise AssertionError(message)

    def __exit__(self, kind, value, tb):
        if kind is not None and not self.log.closed:
            print(f"--- {self.name} stderr ---\n{self.stderr()}", file=sys.stderr)
        self.stop()
        return False

    def stop(self):
        """Ends the process (SIGTERM, then SIGKILL) and removes its files; once is enough."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self.log.closed:
            self.log.close()
            self.tmp.cleanup()

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

    def call(self, command, args=None):
        """A command of the service over HTTP (`/api/call/…`), as the served page sends it."""
        req = urllib.request.Request(
            f"{self.url}/api/call/{command}", data=json.dumps(args or {}).encode(),
            headers={"content-type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.load(r)
