"""Shared harness of the integration tests: start the real suanlid on a private
port and data directory, talk to it over real HTTP, run the real CLI.

SUANLI_BUILD names the build directory (default: build/)."""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.abspath(os.environ.get("SUANLI_BUILD", os.path.join(ROOT, "build")))
SUANLID = os.path.join(BUILD, "suanlid")
SUANLI = os.path.join(BUILD, "suanli")
SAMPLE_CATALOG = os.path.join(ROOT, "etc", "catalog.sample.json")
PASSWORD = "correct horse battery"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unique_email(prefix="renter"):
    return f"{prefix}-{uuid.uuid4().hex[:10]}@example.com"


class Response:
    def __init__(self, status, body, headers):
        self.status = status
        self.body = body
        self.headers = headers
        try:
            self.json = json.loads(body) if body else None
        except ValueError:
            self.json = None

    @property
    def code(self):
        """The stable error code, or None."""
        if isinstance(self.json, dict) and isinstance(self.json.get("error"), dict):
            return self.json["error"].get("code")
        return None

    def __repr__(self):
        return f"<Response {self.status} {self.body[:300]!r}>"


class Server:
    """One suanlid process with its own data directory and port."""

    def __init__(self, data_dir, settings=None, seed_catalog=True, extra_args=None):
        self.data_dir = data_dir
        self.extra_args = list(extra_args or [])
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.settings = dict(settings or {})
        if seed_catalog:
            self.settings.setdefault("catalog_seed", SAMPLE_CATALOG)
        self.proc = None
        self.log_path = os.path.join(data_dir, "suanlid.log")
        self._admin_token = None

    def start(self, timeout=15):
        args = [SUANLID, "--data-dir", self.data_dir, "--listen", f"127.0.0.1:{self.port}"]
        for k, v in self.settings.items():
            args += ["--set", f"{k}={v}"]
        args += self.extra_args
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"suanlid exited with {self.proc.returncode}: "
                                   + open(self.log_path, errors="replace").read()[-3000:])
            try:
                if self.request("GET", "/healthz").status == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("suanlid did not answer /healthz in time")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if getattr(self, "log", None):
            self.log.close()

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None
        self.log.close()

    def restart(self):
        self.stop()
        return self.start()

    @property
    def admin_password(self):
        with open(os.path.join(self.data_dir, "admin-password")) as f:
            return f.read().strip()

    def request(self, method, path, body=None, token=None, headers=None, raw=None, timeout=30):
        """body: a JSON-able object; raw: bytes sent as they are."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return Response(r.status, r.read().decode("utf-8", "replace"), dict(r.headers))
        except urllib.error.HTTPError as e:
            return Response(e.code, e.read().decode("utf-8", "replace"), dict(e.headers))

    def login(self, email, password=PASSWORD):
        r = self.request("POST", "/v1/sessions", {"email": email, "password": password})
        assert r.status == 201, r
        return r.json["token"]

    @property
    def admin_token(self):
        if not self._admin_token:
            self._admin_token = self.login("admin@localhost", self.admin_password)
        return self._admin_token

    def register(self, email=None, password=PASSWORD, name="Test Renter"):
        """Registers a renter and logs in: returns {"id", "email", "token"}."""
        email = email or unique_email()
        r = self.request("POST", "/v1/users", {"email": email, "password": password, "name": name})
        assert r.status == 201, r
        return {"id": r.json["id"], "email": email, "token": self.login(email, password)}

    def credit(self, user_id, amount_micros, memo="test credit"):
        r = self.request("POST", f"/v1/admin/users/{user_id}/credit",
                         {"amount_micros": amount_micros, "memo": memo}, token=self.admin_token)
        assert r.status == 201, r
        return r.json


class Cli:
    """Runs the real `suanli` binary with its own HOME (so its config file is
    private to the test) against a server."""

    def __init__(self, server, home):
        self.server = server
        self.home = home

    def run(self, *args, input=None, env=None, check=False, timeout=60):
        e = {"HOME": self.home, "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
             "SUANLI_URL": self.server.url, "LANG": "C.UTF-8"}
        e.update(env or {})
        p = subprocess.run([SUANLI, *args], input=input, capture_output=True, text=True,
                           env=e, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"suanli {' '.join(args)} exited {p.returncode}:\n"
                                 f"{p.stdout}\n{p.stderr}")
        return p


@pytest.fixture(scope="module")
def server():
    d = tempfile.mkdtemp(prefix="suanli-test-")
    s = Server(d).start()
    yield s
    s.stop()
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def make_server():
    """Factory for tests that need their own server (settings, restarts)."""
    made = []

    def make(settings=None, seed_catalog=True, start=True):
        d = tempfile.mkdtemp(prefix="suanli-test-")
        s = Server(d, settings, seed_catalog)
        made.append(s)
        return s.start() if start else s

    yield make
    for s in made:
        s.stop()
        shutil.rmtree(s.data_dir, ignore_errors=True)


@pytest.fixture
def cli(server, tmp_path):
    return Cli(server, str(tmp_path))
