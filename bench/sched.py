#!/usr/bin/python3
"""Placement at fleet scale (issue 12): HOSTS (1,000) hosts enrolled and
reporting through the node API itself, as suanli-node does (no containers:
a host here is its enrollment, its inventory of simulated GPUs and a
heartbeat that says the image is ready), then INSTANCES (10,000) one-GPU
instances created by USERS renters over CONCURRENCY keep-alive connections.

Reports placements per second, p50/p99 of POST /v1/instances, and checks
that no GPU was given twice (every instance holds exactly its GPUs, and the
GPUs held equal the instances made) and that the free-GPU counts placement
reads agree with the GPUs. Beside it, measured in the same run, the floors
that bound it: empty write transactions per second on a SQLite database in
the same directory with suanlid's settings (WAL, synchronous=FULL: one fsync
per commit; group commit lets several placements share one), and SHA-512
crypt(3) hashes at 1,000 rounds per second on one CPU (each placement hashes
its root password once), with the CPU suanlid and this tool spent per
placement and the CPU-bound ceiling they make on this machine.

PERF=FILE records a profile of suanlid while it places (perf report -i FILE).
SUANLI_TEST_STORE=postgres (under scripts/pg-test.sh, as the integration
tests): suanlid on PostgreSQL; the table goes to bench/results/sched-pg.md.
SUANLID_SET="option=value ..." passes more options to suanlid.

Prints a markdown table and writes bench/results/sched.md.
"""
import json
import multiprocessing
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.parse
import http.client

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import conftest  # noqa: E402  the integration harness: Server

HOSTS = int(os.environ.get("HOSTS", "1000"))
GPUS_PER_HOST = int(os.environ.get("GPUS_PER_HOST", "12"))
INSTANCES = int(os.environ.get("INSTANCES", "10000"))
USERS = int(os.environ.get("USERS", "100"))
CONCURRENCY = int(os.environ.get("CONCURRENCY", "16"))
# suanlid's HTTP worker threads: with group commit, the requests in flight
# are what shares a commit (4, the default, gives some 1.6 per commit)
HTTP_THREADS = int(os.environ.get("HTTP_THREADS", "16"))
IMAGE = "sched-bench"


class Conn:
    """One keep-alive connection to suanlid."""

    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)

    def call(self, method, path, body=None, token=None):
        h = {"Content-Type": "application/json"} if body is not None else {}
        if token:
            h["Authorization"] = f"Bearer {token}"
        self.c.request(method, path, json.dumps(body) if body is not None else None, h)
        r = self.c.getresponse()
        data = r.read()
        return r.status, (json.loads(data) if data else None)


def inventory(index):
    return {"cpu_cores": 8 * GPUS_PER_HOST, "memory_mib": 64 * 1024 * GPUS_PER_HOST,
            "disk_total_gib": 100000, "disk_free_gib": 100000,
            "disk_free_bytes": 100000 << 30, "instance_disks_bytes": 0,
            "gpus": [{"index": i, "uuid": f"GPU-bench-{index:05d}-{i:02d}",
                      "name": "NVIDIA GeForce RTX 4090", "vram_mib": 24564, "simulated": True}
                     for i in range(GPUS_PER_HOST)]}


def enroll(args):
    """Enrolls hosts [lo, hi) with a join token good for them all, and
    sends each one heartbeat; returns the seconds it took."""
    url, join, lo, hi = args
    c = Conn(url)
    t0 = time.time()
    for i in range(lo, hi):
        st, r = c.call("POST", "/v1/nodes/enroll", {
            "join_token": join, "hostname": f"bench-host-{i}", "address": f"198.18.{i // 250}.{i % 250 + 1}",
            "inventory": inventory(i)})
        assert st == 201, (st, r)
        st, hb = c.call("POST", f"/v1/nodes/{r['node_id']}/heartbeat", {
            "inventory": inventory(i), "instances": [],
            "images": [{"name": IMAGE, "state": "ready"}]}, token=r["node_token"])
        assert st == 200, (st, hb)
    return time.time() - t0


class RawConn:
    """A keep-alive connection that sends prepared requests and reads only
    the status and body of each answer: the load tool shares the CPUs with
    suanlid, so it spends as little of them as it can (http.client and a
    JSON parse of every answer cost some 0.3 ms per request)."""

    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.s = socket.create_connection((u.hostname, u.port), timeout=60)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.host = f"{u.hostname}:{u.port}"
        self.buf = b""

    def post(self, path, body, token, key=None):
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\n"
                f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
                + (f"Idempotency-Key: {key}\r\n" if key else "")
                + f"Content-Length: {len(body)}\r\n\r\n")
        self.s.sendall(head.encode() + body)
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.recv()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        while len(self.buf) < length:
            self.buf += self.recv()
        body, self.buf = self.buf[:length], self.buf[length:]
        return status, body

    def recv(self):
        data = self.s.recv(65536)
        if not data:
            raise ConnectionError("suanlid closed the connection")
        return data


def place(args):
    """Creates n instances for the renters' tokens in turn, with an
    Idempotency-Key on each when IDEMPOTENCY=1 (as the CLI sends); returns
    the latencies, any failure and this worker's CPU seconds."""
    url, tokens, n, worker = args
    c = RawConn(url)
    lat, failures = [], []
    keys = os.environ.get("IDEMPOTENCY") == "1"
    cpu0 = time.process_time()
    for k in range(n):
        token = tokens[k % len(tokens)]
        body = ('{"gpu_model":"RTX 4090","gpus":1,"image":"%s","data_disk_gib":1,"name":"w%d-%d"}'
                % (IMAGE, worker, k)).encode()
        t0 = time.perf_counter()
        st, r = c.post("/v1/instances", body, token, f"sched-{worker}-{k}" if keys else None)
        lat.append(time.perf_counter() - t0)
        if st != 201:
            failures.append((st, r[:300]))
    return lat, failures, time.process_time() - cpu0


def store_counters(url):
    """suanlid's write transactions and commits so far (GET /metrics)."""
    c = Conn(url)
    c.c.request("GET", "/metrics")
    text = c.c.getresponse().read().decode()
    values = dict(line.split() for line in text.splitlines()
                  if line.startswith("suanli_store_"))
    return (int(values.get("suanli_store_transactions_total", 0)),
            int(values.get("suanli_store_commits_total", 0)))


def cpu_seconds(pid):
    """User + system CPU seconds of process pid so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_floor(directory, seconds=3.0):
    """Empty write transactions per second with suanlid's SQLite settings."""
    db = sqlite3.connect(os.path.join(directory, "floor.db"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t (v INTEGER)")
    n, t0 = 0, time.time()
    while time.time() - t0 < seconds:
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO t VALUES (?)", (n,))
        db.execute("COMMIT")
        n += 1
    db.close()
    return n / (time.time() - t0)


def crypt_floor(seconds=2.0):
    """SHA-512 crypt(3) hashes at 1,000 rounds per CPU second: the root
    password's hash each placement makes (instance-passwords.c)."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt
    salt = crypt.mksalt(crypt.METHOD_SHA512, rounds=1000)
    n, t0 = 0, time.process_time()
    while time.process_time() - t0 < seconds:
        crypt.crypt("0123456789abcdef", salt)
        n += 1
    return n / (time.process_time() - t0)


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))]


def main():
    d = tempfile.mkdtemp(prefix="suanli-bench-sched-")
    server = conftest.Server(os.path.join(d, "suanlid"), {
        # the hosts report once: silent for the run, they stay online
        "nodes.offline_after": "1h", "instances.max_per_user": str(INSTANCES),
        "nodes.ssh_port_min": "20000", "nodes.ssh_port_max": "40000",
        "log_level": "warn", "http.threads": str(HTTP_THREADS),
        # SUANLID_SET="http.threads=8 ...": more of suanlid's options
        **dict(kv.split("=", 1) for kv in os.environ.get("SUANLID_SET", "").split())})
    os.makedirs(server.data_dir)
    server.start()
    try:
        admin = server.admin_token
        c = Conn(server.url)
        st, img = c.call("POST", "/v1/admin/images", {"name": IMAGE, "recipe": "base"},
                         token=admin)
        assert st == 201, img
        per = 10000
        joins = []
        for lo in range(0, HOSTS, per):
            st, j = c.call("POST", "/v1/admin/join-tokens", {"region": "sample-1",
                                                               "max_uses": per}, token=admin)
            assert st == 201, j
            joins.append(j["token"])
        chunks = [(server.url, joins[lo // per], lo, min(lo + 50, HOSTS))
                  for lo in range(0, HOSTS, 50)]
        t0 = time.time()
        with multiprocessing.Pool(CONCURRENCY) as pool:
            pool.map(enroll, chunks)
        enroll_s = time.time() - t0
        tokens = []
        for _ in range(USERS):
            user = server.register()
            st, r = c.call("POST", "/v1/me/verification",
                           {"real_name": "Bench Renter",
                            "id_number": conftest.random_id_number()}, token=user["token"])
            assert st == 201, r
            st, r = c.call("POST", f"/v1/admin/users/{user['id']}/verification",
                           {"approve": True}, token=admin)
            assert st == 200, r
            server.credit(user["id"], 10 ** 12)
            tokens.append(user["token"])
        share = [INSTANCES // CONCURRENCY + (1 if w < INSTANCES % CONCURRENCY else 0)
                 for w in range(CONCURRENCY)]
        jobs = [(server.url, tokens[w::CONCURRENCY] or tokens, share[w], w)
                for w in range(CONCURRENCY)]
        perf = None
        if os.environ.get("PERF"):
            # where suanlid's time goes while it places (perf report -i PERF)
            perf = subprocess.Popen(["perf", "record", "--call-graph", "dwarf,16384", "-F", "400", "-q", "-o", os.environ["PERF"],
                                     "-p", str(server.proc.pid)])
            time.sleep(0.5)
        cpu0, load0 = cpu_seconds(server.proc.pid), os.getloadavg()[0]
        tx0, commits0 = store_counters(server.url)
        t0 = time.time()
        with multiprocessing.Pool(CONCURRENCY) as pool:
            results = pool.map(place, jobs)
        place_s = time.time() - t0
        server_cpu = cpu_seconds(server.proc.pid) - cpu0
        tx1, commits1 = store_counters(server.url)
        load = max(load0, os.getloadavg()[0])
        if perf:
            perf.send_signal(signal.SIGINT)
            perf.wait()
        lat = [x for r in results for x in r[0]]
        failures = [f for r in results for f in r[1]]
        client_cpu = sum(r[2] for r in results)
        def one(sql):  # on either store (conftest's Server.db_execute)
            return int(server.db_execute(sql)[0][0][0])
        held = one("SELECT COUNT(*) FROM gpus WHERE instance_id IS NOT NULL")
        made = one("SELECT COUNT(*) FROM instances")
        twice = one("SELECT COUNT(*) FROM instances i WHERE i.gpus !="
                    " (SELECT COUNT(*) FROM gpus g WHERE g.instance_id = i.id)")
        # the free counts placement reads (gpu_free, kept by triggers) match
        # the GPUs themselves
        counts_off = one(
            "SELECT COUNT(*) FROM gpu_free f WHERE f.free != (SELECT COUNT(*) FROM gpus g"
            " WHERE g.node_id = f.node_id AND g.gpu_model_id = f.gpu_model_id"
            " AND g.instance_id IS NULL)")
        floor = write_floor(d)
        hashes = crypt_floor()
    finally:
        server.stop()
    ok = not failures and held == made == INSTANCES and twice == 0 and counts_off == 0
    rate = INSTANCES / place_s
    rows = [
        ("hosts enrolled and reported (enroll + heartbeat)", f"{HOSTS} in {enroll_s:.1f} s"),
        ("instances placed", f"{made} ({len(failures)} refused)"),
        ("placements per second", f"{rate:,.0f}"),
        ("POST /v1/instances p50 / p99", f"{pct(lat, .5) * 1000:.1f} / {pct(lat, .99) * 1000:.1f} ms"),
        ("GPUs held = instances, none twice", "yes" if held == made and twice == 0 else
         f"NO: {held} held, {made} made, {twice} instances without exactly their GPUs"),
        ("free-GPU counts per host = free GPUs", "yes" if counts_off == 0 else
         f"NO: {counts_off} hosts' counts differ"),
        ("write transactions per commit (group commit; each commit one fsync)",
         f"{(tx1 - tx0) / (commits1 - commits0):.2f} ({commits1 - commits0:,} commits)"
         if commits1 > commits0 else "not reported by this suanlid"),
        ("CPU per placement: suanlid / this tool's clients",
         f"{server_cpu / INSTANCES * 1000:.2f} / {client_cpu / INSTANCES * 1000:.2f} ms "
         f"({os.cpu_count()} CPUs; load average {load:.1f})"),
        ("floor: empty SQLite write transactions/s (WAL, synchronous=FULL)", f"{floor:,.0f}"),
        ("floor: SHA-512 crypt hashes/s at 1,000 rounds on one CPU (one per placement)",
         f"{hashes:,.0f}: {os.cpu_count()} CPUs hashing only would place {hashes * os.cpu_count():,.0f}/s"),
        ("ceiling from the CPU this run spent: CPUs / (suanlid + tool CPU per placement)",
         f"{os.cpu_count() / ((server_cpu + client_cpu) / INSTANCES):,.0f}/s"),
    ]
    out = [f"# Placement: {HOSTS} hosts x {GPUS_PER_HOST} GPUs, {INSTANCES} instances, "
           f"concurrency {CONCURRENCY}, http.threads {HTTP_THREADS}"
           f"{', Idempotency-Key on each' if os.environ.get('IDEMPOTENCY') == '1' else ''}"
           f", store {conftest.TEST_STORE} ({time.strftime('%Y-%m-%d')})", "",
           "| measure | value |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows]
    if failures:
        out += ["", f"first refusal: {failures[0]}"]
    text = "\n".join(out) + "\n"
    print(text)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    name = "sched-pg.md" if conftest.TEST_STORE == "postgres" else "sched.md"
    with open(os.path.join(HERE, "results", name), "w") as f:
        f.write(text)
    shutil.rmtree(d, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
