"""Shared harness of the integration tests: start the real suanlid on a private
port and data directory, talk to it over real HTTP, run the real CLI.

SUANLI_BUILD names the build directory (default: build/)."""
import atexit
import contextlib
import ipaddress
import json
import os
import re
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


def sample_catalog():
    """etc/catalog.sample.json, which every test server is seeded with: tests
    take its prices from here, never from copies."""
    with open(SAMPLE_CATALOG) as f:
        return json.load(f)


# SUANLI_TEST_STORE=postgres: every Server keeps its data in a PostgreSQL
# database of its own (named after its data directory, so a restart finds
# it again) on the server SUANLI_TEST_PG, a libpq URI (scripts/pg-test.sh
# starts one); else in SQLite, DATA_DIR/suanli.db.
TEST_STORE = os.environ.get("SUANLI_TEST_STORE", "sqlite")


def pg_store_uri(data_dir):
    """A database for data_dir on SUANLI_TEST_PG, made on first use."""
    import hashlib
    base = os.environ["SUANLI_TEST_PG"]
    name = "it_" + hashlib.sha256(os.path.abspath(data_dir).encode()).hexdigest()[:20]
    made = subprocess.run(["psql", "-qAt", base, "-c", f"CREATE DATABASE {name}"],
                          capture_output=True, text=True)
    if made.returncode != 0 and "already exists" not in made.stderr:
        raise RuntimeError(f"unable to make database {name}: {made.stderr}")
    head, sep, query = base.partition("?")
    return re.sub(r"/[^/]*$", "/" + name, head) + sep + query


class StoreError(Exception):
    """A statement Server.db_execute ran that the database refused."""


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

    def __init__(self, data_dir, settings=None, seed_catalog=True, extra_args=None,
                 host="127.0.0.1"):
        """host: the address it listens on (a fleet's listens on its link's)."""
        self.data_dir = data_dir
        self.extra_args = list(extra_args or [])
        self.host = host
        self.port = free_port()
        self.url = f"http://{host}:{self.port}"
        self.settings = dict(settings or {})
        if seed_catalog:
            self.settings.setdefault("catalog_seed", SAMPLE_CATALOG)
        # every test registers from 127.0.0.1: the per-address limit (10 an
        # hour by default) is tested on its own in t380
        self.settings.setdefault("auth.register_max_per_address", "1000000")
        # Instance disks are sparse files: a host promises them only as far
        # as it can hold them (nodes.disk_*, docs/operations.md). A test box
        # has some tens of GB free and the tests' instances write little, so
        # their servers let a host promise 100 times more; the disk check's
        # own tests (test_t220_placement.py) set these themselves.
        self.settings.setdefault("nodes.disk_reserve_gib", "2")
        self.settings.setdefault("nodes.disk_overcommit_percent", "10000")
        if TEST_STORE == "postgres":
            self.settings.setdefault("store", pg_store_uri(data_dir))
        self.proc = None
        self.log_path = os.path.join(data_dir, "suanlid.log")
        self._admin_token = None

    def start(self, timeout=15):
        args = [SUANLID, "--data-dir", self.data_dir, "--listen", f"{self.host}:{self.port}"]
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

    def db_execute(self, sql, params=()):
        """Runs one statement (?N parameters) on the server's store, SQLite
        or PostgreSQL (TEST_STORE), outside suanlid, the way a test reaches
        behind it: returns (rows, rowcount); a refusal raises StoreError with
        the database's message. Rows of PostgreSQL are strings."""
        if "store" not in self.settings or TEST_STORE != "postgres":
            import sqlite3
            db = sqlite3.connect(os.path.join(self.data_dir, "suanli.db"))
            try:
                with db:
                    cur = db.execute(sql, params)
                    return cur.fetchall(), cur.rowcount
            except sqlite3.DatabaseError as e:
                raise StoreError(str(e)) from e
            finally:
                db.close()

        def literal(v):
            if v is None:
                return "NULL"
            if isinstance(v, int):
                return str(v)
            return "'" + str(v).replace("'", "''") + "'"
        for i in range(len(params), 0, -1):
            sql = sql.replace(f"?{i}", literal(params[i - 1]))
        run = subprocess.run(["psql", "-X", "-At", "-v", "ON_ERROR_STOP=1",
                              self.settings["store"], "-c", sql],
                             capture_output=True, text=True)
        if run.returncode != 0:
            raise StoreError(run.stderr.strip())
        lines = run.stdout.splitlines()
        if sql.lstrip().upper().startswith("SELECT"):
            rows = [tuple(line.split("|")) for line in lines]
            return rows, len(rows)
        tag = lines[-1].split() if lines else ["0"]
        return [], int(tag[-1]) if tag[-1].isdigit() else -1

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


# ---------------------------------------------------------------------------
# GPU hosts: the real suanli-node agent with simulated GPUs (this machine has
# none), real runc containers, real disks, real CNI networking.

SUANLI_NODE = os.path.join(BUILD, "suanli-node")
# distinct per concurrent test run on one machine (each has its own IP leases)
TEST_BRIDGE = os.environ.get("SUANLI_TEST_BRIDGE", "suanlit0")
TEST_SUBNET = os.environ.get("SUANLI_TEST_SUBNET", "10.89.0.0/16")
TEST_PORTS = os.environ.get("SUANLI_TEST_PORTS", "30000-30999").split("-")
IMAGE = "debian-12"


class Node:
    """One suanli-node process enrolled with a server. The join token reaches
    it as an operator gives it: in a file only root reads (join_via="file",
    DATA/join-token) or on stdin (join_via="stdin"), never on the command
    line, where the process list shows it."""

    def __init__(self, server, data_dir, join_token, gpus="8:RTX 4090", extra=None,
                 proxy_port=None, join_via="file", network=None, address="127.0.0.1",
                 netns=None):
        """address: the host's address as renters reach it; netns: the
        network namespace the agent runs in (a fleet's host), None for this
        machine's own."""
        self.server = server
        self.address = address
        self.netns = netns
        # (bridge, subnet): the shared cluster's unless side_network() gives
        # the node one of its own
        self.bridge, self.subnet = network[:2] if network else (TEST_BRIDGE, TEST_SUBNET)
        self.data_dir = data_dir
        self.join_token = join_token
        self.join_via = join_via
        self.gpus = gpus
        self.extra = list(extra or [])
        # the service ports' nginx: a private port, not the default 8080
        self.proxy_port = proxy_port or free_port()
        # the agent's Prometheus /metrics (node/metrics.h): a private port on
        # every address of the host, which the bridge's firewall must keep
        # from the instances (t720)
        self.metrics_port = free_port()
        self.proc = None
        self.log_path = os.path.join(data_dir, "agent.log")
        self.node_id = None

    def start(self, timeout=15):
        os.makedirs(self.data_dir, exist_ok=True)
        join = "-"
        if self.join_via == "file":
            join = os.path.join(self.data_dir, "join-token")
            fd = os.open(join, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(self.join_token + "\n")
        # a relative --data-dir, as `make run` gives it (paths must still work)
        # nsenter joins the host's network namespace only: mounts, runc
        # and /run stay this machine's, as on a real host
        wrap = ["nsenter", f"--net=/run/netns/{self.netns}", "--"] if self.netns else []
        args = [*wrap, SUANLI_NODE, "--data-dir", os.path.basename(self.data_dir),
                "--server", self.server.url,
                "--join", join,
                # gpus=None: the host's real GPUs through NVML (bench/gpu-check.sh)
                *(["--simulate-gpus", self.gpus] if self.gpus else []),
                "--address", self.address, "--set", f"network.bridge={self.bridge}",
                "--set", f"network.subnet={self.subnet}", "--set", "stop_grace_ms=3000",
                "--set", f"proxy.listen={self.address}:{self.proxy_port}",
                "--set", f"metrics.listen=0.0.0.0:{self.metrics_port}",
                "--set", "metrics.interval_s=3",
                *self.extra]
        self.log = open(self.log_path, "ab")
        stdin = subprocess.PIPE if join == "-" else subprocess.DEVNULL
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=stdin, cwd=os.path.dirname(self.data_dir))
        if join == "-":
            self.proc.stdin.write((self.join_token + "\n").encode())
            self.proc.stdin.close()
        deadline = time.time() + timeout
        ident = os.path.join(self.data_dir, "node.json")
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("suanli-node exited: " + self.log_text()[-3000:])
            if os.path.exists(ident):
                with open(ident) as f:
                    self.node_id = json.load(f)["node_id"]
                return self
            time.sleep(0.05)
        raise RuntimeError("suanli-node did not enroll in time: " + self.log_text()[-3000:])

    def log_text(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if getattr(self, "log", None):
            self.log.close()


def side_network(index, tag):
    """(bridge, subnet, address prefix) of a node started beside the shared
    cluster's, so that neither touches the other's bridge, rules or leases
    (cleanup_host(DIR, bridge, prefix) after it): the index-th /24 from the
    end of TEST_SUBNET (t280 takes 1, t320 2, the nodes of t200, t381 and
    t385 3) and a bridge named with a two-letter tag."""
    net = ipaddress.ip_network(TEST_SUBNET)
    subnet = str(list(net.subnets(new_prefix=max(net.prefixlen + 1, 24)))[-index])
    return TEST_BRIDGE[:12] + tag, subnet, subnet.rsplit(".", 1)[0] + "."


def wait_for(fn, timeout=60, interval=0.05, what="condition"):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def wait_heartbeats(server, node_id, count=1, timeout=30):
    """Waits until the node has reported count more times: its
    last_heartbeat (whole seconds; the agent reports every few) moved on
    that often. What a test waits for instead of sleeping through "a
    heartbeat or two". Returns the last one seen."""
    def last():
        r = server.request("GET", f"/v1/admin/nodes/{node_id}", token=server.admin_token)
        assert r.status == 200, r
        return r.json["last_heartbeat"]
    seen = last()
    for n in range(count):
        before = seen
        seen = wait_for(lambda: (lambda v: v if v != before else None)(last()), timeout=timeout,
                        interval=0.1, what=f"heartbeat {n + 1} of {count} from {node_id}")
    return seen


class ApiHost:
    """A host that the test enrolls and reports for through the node API
    itself, with the disk figures it chooses: for placement tests, which
    need no container. It reports `image` ready (made by the admin)."""

    GIB = 1 << 30
    terminals = False  # whether it says it serves the browser's terminal (subclasses too)

    def __init__(self, server, gpus=8, free_gib=1000, disks_gib=0, image="api-host-image",
                 terminals=False):
        self.server, self.image = server, image
        self.terminals = terminals
        admin = server.admin_token
        r = server.request("POST", "/v1/admin/join-tokens", {"region": "sample-1"}, token=admin)
        assert r.status == 201, r
        self.gpus = [{"index": i, "uuid": f"GPU-api-{uuid.uuid4().hex[:8]}-{i}",
                      "name": "NVIDIA GeForce RTX 4090", "vram_mib": 24564, "simulated": True}
                     for i in range(gpus)]
        self.free_bytes, self.disks_bytes = free_gib * self.GIB, disks_gib * self.GIB
        r = server.request("POST", "/v1/nodes/enroll", {
            "join_token": r.json["token"], "hostname": "api-host", "address": "192.0.2.1",
            "inventory": self.inventory()})
        assert r.status == 201, r
        self.node_id, self.token = r.json["node_id"], r.json["node_token"]
        known = [i for i in server.request("GET", "/v1/images", token=admin).json["items"]
                 if i["name"] == image]
        r = server.request("POST", "/v1/admin/images", {"name": image, "recipe": "base"},
                           token=admin)
        # the first host of a server defines the image, later ones find it
        assert (r.status, r.code) == ((409, "image_exists") if known else (201, None)), r
        self.heartbeat()

    def inventory(self):
        return {"cpu_cores": 64, "memory_mib": 512 * 1024, "disk_total_gib": 4096,
                "disk_free_gib": self.free_bytes // self.GIB,
                "disk_free_bytes": self.free_bytes, "instance_disks_bytes": self.disks_bytes,
                "gpus": self.gpus}

    def heartbeat(self, instances=()):
        r = self.server.request("POST", f"/v1/nodes/{self.node_id}/heartbeat", {
            "inventory": self.inventory(), "instances": list(instances),
            "images": [{"name": self.image, "state": "ready"}], "terminals": self.terminals},
            token=self.token)
        assert r.status == 200, r

    def disk(self):
        r = self.server.request("GET", f"/v1/admin/nodes/{self.node_id}",
                                token=self.server.admin_token)
        assert r.status == 200, r
        return r.json["disk"]


# where agents pin instances' network namespaces: their own directory, and
# /run/netns, where agents before it did (node/net.c)
NETNS_PIN_DIRS = ("/run/suanli-node/netns", "/run/netns")


def host_leftovers(data_dir, instance_id, port):
    """What of a released instance is still on the host (empty when none)."""
    left = []
    with open("/proc/self/mountinfo") as f:
        if instance_id in f.read():
            left.append("mount")
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    if instance_id in loops:
        left.append("loop device")
    if any(os.path.exists(f"{d}/suanli-{instance_id}") for d in NETNS_PIN_DIRS):
        left.append("netns")
    runc = subprocess.run(["runc", "--root", os.path.join(data_dir, "runc"), "list", "-q"],
                          capture_output=True, text=True).stdout
    if instance_id in runc.split():
        left.append("runc container")
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    if instance_id in rules or f"--dport {port} " in rules or f"dpt:{port} " in rules:
        left.append("iptables rule")
    # its port's chain in the bridge's nftables table (node/firewall.h); nft
    # is installed by scripts/deps.sh and required
    if instance_id in subprocess.run(
            ["nft", "list", "ruleset", "bridge"], capture_output=True, text=True).stdout:
        left.append("nft chain")
    if os.path.exists(os.path.join(data_dir, "instances", instance_id)):
        left.append("instance directory")
    return left


def cleanup_host(data_dir, bridge=TEST_BRIDGE, prefix=None):
    """Safety net after a test session: whatever a failed test left running.
    bridge, prefix: a node's own bridge and address prefix (see
    cleanup_test_rules), when not the tests' shared ones."""
    cleanup_node_state(data_dir)
    cleanup_test_rules(prefix)
    subprocess.run([os.path.join(ROOT, "scripts", "cleanup-host-net.sh"), bridge],
                   capture_output=True)


def cleanup_node_state(data_dir):
    """What cleanup_host does outside the network: the node's nginx, runc
    containers, mounts, loop devices and instance namespaces. A fleet host's
    network goes with its namespace."""
    stop_proxy(data_dir)
    stop_lxcfs(data_dir)
    runc_root = os.path.join(data_dir, "runc")
    if os.path.isdir(runc_root):
        out = subprocess.run(["runc", "--root", runc_root, "list", "-q"],
                             capture_output=True, text=True).stdout.split()
        for cid in out:
            subprocess.run(["runc", "--root", runc_root, "delete", "--force", cid],
                           capture_output=True)
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split()[4] for line in f if data_dir in line.split()[4]]
    for m in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", m], capture_output=True)
    for line in subprocess.run(["losetup", "-a"], capture_output=True,
                               text=True).stdout.splitlines():
        if data_dir in line:
            subprocess.run(["losetup", "-d", line.split(":")[0]], capture_output=True)
    for pins in NETNS_PIN_DIRS:
        for ns in os.listdir(pins) if os.path.isdir(pins) else []:
            if ns.startswith("suanli-i-") and os.path.exists(
                    os.path.join(data_dir, "instances", ns[len("suanli-"):])):
                subprocess.run(["umount", "-l", os.path.join(pins, ns)], capture_output=True)
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(pins, ns))
    # the terminal server's socket, left by an agent killed with -9
    with contextlib.suppress(OSError, ValueError, KeyError):
        with open(os.path.join(data_dir, "node.json")) as f:
            node_id = json.load(f)["node_id"]
        os.unlink(f"/run/suanli-node/terminal-{node_id}.sock")


def process_alive(pid):
    """Whether pid runs (a zombie, exited but not reaped yet, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def chrooted():
    """Why lxcfs cannot serve instances here, or None: in a chroot (as
    ../shared/tools/fresh-machine runs the suite) lxcfs setns()es back into
    its mount namespace, which puts it at the namespace's root, outside the
    chroot, where the mount point the agent names does not exist. The agent
    then warns and instances see the host's figures; a real host is never
    chrooted."""
    mine = os.stat("/")
    ns_root = subprocess.run(["nsenter", "--mount=/proc/self/ns/mnt", "stat", "-c", "%d:%i", "/"],
                             capture_output=True, text=True, check=True).stdout.strip()
    if ns_root != f"{mine.st_dev}:{mine.st_ino}":
        return "lxcfs cannot mount inside a chroot (it setns()es out of it)"
    return None


def stop_lxcfs(data_dir):
    """Stops the lxcfs the node started at DATA/lxcfs (node/lxcfs.h): it
    outlives the agent on purpose, for the instances that read it."""
    try:
        with open(os.path.join(data_dir, "lxcfs.pid")) as f:
            pid = int(f.read().split()[0])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"lxcfs" in f.read():
                os.kill(pid, signal.SIGTERM)
                wait_for(lambda: not process_alive(pid), timeout=10,
                         what=f"lxcfs {pid} to exit")
    except (OSError, ValueError, IndexError):
        pass
    subprocess.run(["umount", "-l", os.path.join(data_dir, "lxcfs")], capture_output=True)


def stop_proxy(data_dir):
    """Stops the node's nginx (service ports) that a killed agent left."""
    try:
        with open(os.path.join(data_dir, "proxy", "nginx.pid")) as f:
            pid = int(f.read().strip())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if os.path.join(data_dir, "proxy").encode() not in f.read():
                return
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        pass


def cleanup_test_rules(prefix=None):
    """Drops the iptables rules CNI made for containers on the tests' subnet
    (or whose addresses start with prefix) that a failed test never released
    (a released one has none left)."""
    import shlex
    prefix = prefix or TEST_SUBNET.split("0.0/")[0]  # "10.89."
    for table in ("nat", "filter"):
        lines = subprocess.run(["iptables-save", "-t", table], capture_output=True,
                               text=True).stdout.splitlines()
        chains = {}
        for line in lines:
            if line.startswith("-A "):
                chains.setdefault(line.split()[1], []).append(line)
        # per-container chains: named by hash, holding a rule about the subnet
        doomed = {c for c, rules in chains.items()
                  if c.startswith("CNI-") and c not in ("CNI-FORWARD", "CNI-ADMIN")
                  and not c.startswith("CNI-HOSTPORT") and any(prefix in r for r in rules)}
        for line in lines:
            if not line.startswith("-A "):
                continue
            target = line.split(" -j ")[-1].split()[0] if " -j " in line else ""
            chain = line.split()[1]
            if chain in doomed:
                continue
            if target in doomed or (chain == "CNI-FORWARD" and prefix in line):
                subprocess.run(["iptables", "-t", table, "-D", *shlex.split(line)[1:]],
                               capture_output=True)
        for c in doomed:
            subprocess.run(["iptables", "-t", table, "-F", c], capture_output=True)
            subprocess.run(["iptables", "-t", table, "-X", c], capture_output=True)


class Cluster:
    """A suanlid, one suanli-node with 8 simulated RTX 4090s, and the default
    image built on it, shared by the instance tests of a session."""

    def __init__(self, server, node):
        self.server = server
        self.node = node

    def renter(self, credit_micros=100_000_000):
        """A verified renter with money and a fresh SSH key."""
        user = self.server.register()
        s = self.server
        r = s.request("POST", "/v1/me/verification",
                      {"real_name": "Test Renter", "id_number": random_id_number()},
                      token=user["token"])
        assert r.status == 201, r
        r = s.request("POST", f"/v1/admin/users/{user['id']}/verification", {"approve": True},
                      token=s.admin_token)
        assert r.status == 200, r
        if credit_micros:
            s.credit(user["id"], credit_micros)
        keydir = tempfile.mkdtemp(prefix="suanli-key-")
        # the renter's key lives as long as the test session, no longer
        atexit.register(shutil.rmtree, keydir, True)
        key = os.path.join(keydir, "id_ed25519")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
        with open(key + ".pub") as f:
            r = s.request("POST", "/v1/ssh-keys", {"public_key": f.read()}, token=user["token"])
        assert r.status == 201, r
        user["key"] = key
        return user

    def create(self, user, gpus=1, image=IMAGE, data_disk_gib=50, wait=True, **extra):
        body = {"gpu_model": "RTX 4090", "gpus": gpus, "image": image,
                "data_disk_gib": data_disk_gib, **extra}
        r = self.server.request("POST", "/v1/instances", body, token=user["token"])
        if not wait or r.status != 201:
            return r
        return self.wait_state(user, r.json["id"], "running")

    def get(self, user, iid):
        r = self.server.request("GET", f"/v1/instances/{iid}", token=user["token"])
        assert r.status == 200, r
        return r.json

    def wait_state(self, user, iid, state, timeout=60):
        def reached():
            inst = self.get(user, iid)
            if inst["state"] == "failed" and state != "failed":
                raise AssertionError(f"instance failed: {inst['state_message']}\n"
                                     + self.node.log_text()[-2000:])
            return inst if inst["state"] == state else None
        return wait_for(reached, timeout, what=f"{iid} {state}")

    def verb(self, user, iid, verb, body=None):
        return self.server.request("POST", f"/v1/instances/{iid}/{verb}", body or {},
                                   token=user["token"])

    def ssh(self, user, inst, command, check=True, timeout=30):
        p = subprocess.run(
            ["ssh", "-i", user["key"], "-p", str(inst["ssh"]["port"]),
             "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
             "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
             f"root@{inst['ssh']['host']}", command],
            capture_output=True, text=True, timeout=timeout)
        if check:
            assert p.returncode == 0, f"ssh {command!r}: {p.returncode}\n{p.stdout}\n{p.stderr}"
        return p


def random_id_number():
    """A valid 18-character PRC resident ID number (GB 11643 check digit)."""
    import random
    body = "110105" + f"{random.randint(1950, 2005)}" + f"{random.randint(1, 12):02d}" + \
        f"{random.randint(1, 28):02d}" + f"{random.randint(0, 999):03d}"
    weights = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2]
    return body + "10X98765432"[sum(int(c) * w for c, w in zip(body, weights)) % 11]


# The recipe images the slow tests use (t330 jupyter, t630 pytorch and venv,
# t650 desktop), with the names they give them: the shared cluster's agent
# builds them one at a time from the session's start, beside the other tests,
# instead of each test waiting minutes for its own (make test: some 8 minutes
# shorter). A test that comes first makes its image itself; each accepts an
# image made before it (409 image_exists).
RECIPE_IMAGES = (("jupyter", "jupyter"), ("pytorch-debian", "pytorch"),
                 ("python-venv", "venv"), ("xfce-desktop", "desktop"))


def prebuild_recipe_images(server, stop):
    """In a thread: each of RECIPE_IMAGES in turn, waiting until it is
    ready (or failed: its test says why) before the next. A request that
    fails (a test restarts suanlid, or holds its connections) is tried
    again; the thread ends with the session."""
    def ask(method, path, body=None):
        while not stop.is_set():
            try:
                return server.request(method, path, body, token=server.admin_token)
            except Exception:
                stop.wait(3)
        return None

    for name, recipe in RECIPE_IMAGES:
        deadline = time.monotonic() + 1500
        made = False
        while not stop.is_set() and time.monotonic() < deadline:
            if not made:
                r = ask("POST", "/v1/admin/images", {"name": name, "recipe": recipe})
                made = r is not None and r.status in (201, 409)
            r = ask("GET", "/v1/images")
            items = r.json["items"] if r is not None and r.status == 200 else []
            if [i for i in items if i["name"] == name and i["state"] in ("ready", "failed")]:
                break
            stop.wait(3)


@pytest.fixture(scope="session")
def cluster():
    d = tempfile.mkdtemp(prefix="suanli-cluster-", dir="/var/tmp")
    proxy_port = free_port()
    server = Server(os.path.join(d, "suanlid"), {"nodes.ssh_port_min": TEST_PORTS[0],
                                                 "nodes.ssh_port_max": TEST_PORTS[1],
                                                 "services.proxy_port": proxy_port})
    os.makedirs(server.data_dir)
    server.start()
    r = server.request("POST", "/v1/admin/join-tokens", {"region": "sample-1"},
                       token=server.admin_token)
    assert r.status == 201, r
    node = Node(server, os.path.join(d, "node"), r.json["token"], proxy_port=proxy_port)
    prebuild = None
    try:
        node.start()
        r = server.request("POST", "/v1/admin/images", {"name": IMAGE, "recipe": "base"},
                           token=server.admin_token)
        assert r.status == 201, r

        def image_ready():
            items = server.request("GET", "/v1/images", token=server.admin_token).json["items"]
            img = [i for i in items if i["name"] == IMAGE][0]
            return img if img["state"] == "ready" else None
        wait_for(image_ready, timeout=600, interval=1, what="the default image to build")
        if os.environ.get("SUANLI_SKIP_JUPYTER") != "1":
            import threading
            stop = threading.Event()
            prebuild = threading.Thread(target=prebuild_recipe_images, args=(server, stop),
                                        daemon=True)
            prebuild.start()
        yield Cluster(server, node)
    finally:
        if prebuild:
            stop.set()
            prebuild.join(timeout=30)
        node.stop()
        server.stop()
        cleanup_host(node.data_dir)
        shutil.rmtree(d, ignore_errors=True)


# ---------------------------------------------------------------------------
# A fleet: one suanlid and FLEET_SIZE hosts, each a suanli-node in a network
# namespace of its own with its own address, bridge, firewall and nginx, as
# separate machines would be. The hosts reach suanlid, each other and the
# tests over one link each: a veth from the host's namespace to a bridge in
# this machine's, which carries suanlid's address. cut() takes a host's link
# down (the host goes silent, its instances run on), restore() brings it back.

FLEET_SIZE = 3


def image_archive(node_dir, image, out):
    """The node's image `image` packed as `docker save` packs one (a single
    layer), for an admin to import: how a fleet's hosts get the image the
    shared cluster built, with no apt mirror reachable from their
    namespaces."""
    import hashlib
    import io
    import tarfile
    with open(os.path.join(node_dir, "images", image + ".json")) as f:
        base = json.load(f)["layers"][0]
    rootfs = os.path.join(node_dir, "layers", "sha256", base, "rootfs")
    layer = out + ".layer"
    subprocess.run(["tar", "-C", rootfs, "--numeric-owner", "-cf", layer, "."], check=True)
    h = hashlib.sha256()
    with open(layer, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                                            "/usr/bin:/sbin:/bin"]},
                         "rootfs": {"type": "layers",
                                    "diff_ids": ["sha256:" + h.hexdigest()]}}).encode()
    manifest = json.dumps([{"Config": "config.json", "RepoTags": [image + ":fleet"],
                            "Layers": ["l1/layer.tar"]}]).encode()
    with tarfile.open(out, "w") as t:
        t.add(layer, "l1/layer.tar")
        for name, data in (("config.json", config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    os.unlink(layer)
    return out


def ip(*args, netns=None, check=True):
    cmd = ["ip", *(["-n", netns] if netns else []), *args]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.strip()}")
    return p


class FleetLink:
    """The fleet's side of the world in this machine's namespace: a bridge
    holding suanlid's address, and per host a namespace joined to it by a
    veth. Names and the link's /24 come from the tests' bridge and subnet
    (side_network's 4th /24 from the end), so concurrent runs differ."""

    def __init__(self):
        self.bridge, net, self.prefix = side_network(4, "fl")
        self.gateway = self.prefix + "1"
        self.hosts = []
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", self.gateway + "/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")

    def names(self, i):
        """(namespace, this side's veth) of host i (1-based)."""
        return f"{TEST_BRIDGE}-host{i}", f"{TEST_BRIDGE[:10]}h{i}"

    def add_host(self, i):
        """Makes host i's namespace with its link; returns its address."""
        netns, veth = self.names(i)
        address = f"{self.prefix}{10 + i}"
        ip("netns", "add", netns)
        self.hosts.append(i)
        ip("link", "add", veth, "type", "veth", "peer", "name", "uplink", "netns", netns)
        ip("link", "set", veth, "master", self.bridge, "up")
        ip("link", "set", "lo", "up", netns=netns)
        ip("addr", "add", address + "/24", "dev", "uplink", netns=netns)
        ip("link", "set", "uplink", "up", netns=netns)
        ip("route", "add", "default", "via", self.gateway, netns=netns)
        return netns, address

    def cut(self, i):
        ip("link", "set", self.names(i)[1], "down")

    def restore(self, i):
        ip("link", "set", self.names(i)[1], "up")

    def remove(self):
        for i in self.hosts:
            ip("netns", "del", self.names(i)[0], check=False)
        ip("link", "del", self.bridge, check=False)


def nginx_conf(directory, http):
    """Writes DIRECTORY/nginx.conf for a test's own nginx (in the
    foreground, its pid, logs and temporary files in directory) with http
    inside its http block; returns its path."""
    os.makedirs(os.path.join(directory, "tmp"), exist_ok=True)
    conf = os.path.join(directory, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""daemon off;
worker_processes 1;
pid {directory}/nginx.pid;
error_log {directory}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {directory}/tmp/body;
    proxy_temp_path {directory}/tmp/proxy;
    fastcgi_temp_path {directory}/tmp/fastcgi;
    uwsgi_temp_path {directory}/tmp/uwsgi;
    scgi_temp_path {directory}/tmp/scgi;
{http}}}
""")
    return conf


class FrontDoor:
    """The fleet's front door for service ports: Debian's nginx running the
    configuration `suanlid front-config` prints, beside suanlid."""

    def __init__(self, server, directory, listen):
        self.dir, self.listen = directory, listen
        self.port = int(listen.rsplit(":", 1)[1])
        os.makedirs(os.path.join(directory, "tmp"), exist_ok=True)
        p = subprocess.run([SUANLID, "front-config", "--data-dir", server.data_dir,
                            "--server", server.url, "--listen", listen],
                           capture_output=True, text=True, check=True)
        with open(os.path.join(directory, "front.conf"), "w") as f:
            f.write(p.stdout)
        conf = nginx_conf(directory, f"    include {directory}/front.conf;\n")
        self.proc = subprocess.Popen(["nginx", "-c", conf, "-p", directory],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        host, port = listen.rsplit(":", 1)

        def listening():
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                return True
            except OSError:
                assert self.proc.poll() is None, open(f"{directory}/error.log").read()
                return False
        wait_for(listening, timeout=15, what="the front door to listen")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Fleet(Cluster):
    """suanlid and FLEET_SIZE real hosts (2 simulated RTX 4090s each, so
    that three 2-GPU instances land on three hosts) with the default image
    imported on each. nodes[i].address is host i's address, as renters
    reach it (SSH) and as the other hosts do."""

    def __init__(self, server, nodes, link):
        super().__init__(server, nodes[0])
        self.nodes, self.link = nodes, link

    def node_of(self, inst):
        return next(n for n in self.nodes if n.node_id == inst["node_id"])

    def cut(self, node):
        self.link.cut(self.nodes.index(node) + 1)

    def restore(self, node):
        self.link.restore(self.nodes.index(node) + 1)

    def in_host(self, node, *cmd, **kw):
        """Runs cmd in the host's network namespace."""
        return subprocess.run(["ip", "netns", "exec", node.netns, *cmd], capture_output=True,
                              text=True, **kw)

    def wait_state(self, user, iid, state, timeout=60):
        try:
            return super().wait_state(user, iid, state, timeout)
        except AssertionError as e:
            logs = "".join(f"\n--- host {n.node_id}:\n{n.log_text()[-1500:]}" for n in self.nodes)
            raise AssertionError(f"{e}{logs}") from None


@pytest.fixture(scope="session")
def fleet(cluster):
    d = tempfile.mkdtemp(prefix="suanli-fleet-", dir="/var/tmp")
    link = FleetLink()
    # the hosts' proxies on one port; renters' links on the front door's
    proxy_port, front_port = free_port(), free_port()
    server = Server(os.path.join(d, "suanlid"), {"nodes.ssh_port_min": TEST_PORTS[0],
                                                 "nodes.ssh_port_max": TEST_PORTS[1],
                                                 "services.proxy_port": front_port,
                                                 "services.node_proxy_port": proxy_port,
                                                 # a cut link is seen in seconds
                                                 "nodes.offline_after": "10s"},
                    host=link.gateway)
    os.makedirs(server.data_dir)
    nodes = []
    front = None
    try:
        server.start()
        front = FrontDoor(server, os.path.join(d, "front"), f"{link.gateway}:{front_port}")
        for i in range(1, FLEET_SIZE + 1):
            netns, address = link.add_host(i)
            r = server.request("POST", "/v1/admin/join-tokens", {"region": "sample-1"},
                               token=server.admin_token)
            assert r.status == 201, r
            # each host's instances on a /24 of their own, on a bridge of
            # the tests' name inside the host's namespace
            subnet = side_network(4 + i, "xx")[1]
            node = Node(server, os.path.join(d, f"host{i}"), r.json["token"],
                        gpus="2:RTX 4090", proxy_port=proxy_port,
                        network=(TEST_BRIDGE, subnet), address=address, netns=netns,
                        extra=["--set", f"hostname=fleet-host-{i}",
                               # a clone's copy gives up on a silent source soon (t440)
                               "--set", "transfer.retry_s=15"])
            nodes.append(node)
            node.start()
        archive = image_archive(cluster.node.data_dir, IMAGE, os.path.join(d, "image.tar"))
        admin = Cli(server, os.path.join(d, "admin"))
        # the import waits until every host has it (or says why not)
        admin.run("admin", "image", "import", archive, "--name", IMAGE, check=True,
                  env={"SUANLI_TOKEN": server.admin_token}, timeout=900)
        os.unlink(archive)

        def on_every_host():
            items = server.request("GET", "/v1/images", token=server.admin_token).json["items"]
            img = [i for i in items if i["name"] == IMAGE][0]
            assert img["state"] != "failed", img
            return img if img["nodes"] == FLEET_SIZE else None
        wait_for(on_every_host, timeout=600, interval=1, what="the image on every host")
        fleet = Fleet(server, nodes, link)
        fleet.front = front
        yield fleet
    finally:
        if front:
            front.stop()
        for node in nodes:
            node.stop()
        server.stop()
        for node in nodes:
            cleanup_node_state(node.data_dir)
        link.remove()
        shutil.rmtree(d, ignore_errors=True)


# ---------------------------------------------------------------------------
# The console calls documented routes only: the browser tests record each
# API call (tests/browser/lib.mjs, results.api_calls: "METHOD /v1/path") and
# check them against docs/api/openapi.yaml's paths.

def undocumented_calls(calls):
    """The calls ("GET /v1/instances/i-x") no documented route matches."""
    import yaml
    with open(os.path.join(ROOT, "docs", "api", "openapi.yaml")) as f:
        paths = yaml.safe_load(f)["paths"]
    routes = []
    for template, ops in paths.items():
        rx = re.compile("^" + re.sub(r"\\\{[^/]+\\\}", "[^/]+", re.escape(template)) + "$")
        routes += [(method.upper(), rx) for method in ops]
    out = []
    for call in calls:
        method, _, path = call.partition(" ")
        if not any(m == method and rx.match(path) for m, rx in routes):
            out.append(call)
    return out
