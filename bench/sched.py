#!/usr/bin/python3
"""Placement at fleet scale (issue 12): HOSTS (1,000) hosts enrolled and
reporting through the node API itself, as suanli-node does (no containers:
a host here is its enrollment, its inventory of simulated GPUs and a
heartbeat that says the image is ready), then INSTANCES (10,000) one-GPU
instances created by USERS renters over CONCURRENCY keep-alive connections.

Reports placements per second, p50/p99 of POST /v1/instances, and checks
that no GPU was given twice (every instance holds exactly its GPUs, and the
GPUs held equal the instances made). Beside it, in the same run, the floor
of any API write: empty write transactions per second on a SQLite database
in the same directory with suanlid's settings (WAL, synchronous=FULL: one
fsync per commit), since each placement commits once.

Prints a markdown table and writes bench/results/sched.md.
"""
import json
import multiprocessing
import os
import shutil
import sqlite3
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
CONCURRENCY = int(os.environ.get("CONCURRENCY", "8"))
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


def place(args):
    """Creates n instances for the renters' tokens in turn; returns the
    latencies and any failure."""
    url, tokens, n, worker = args
    c = Conn(url)
    lat, failures = [], []
    for k in range(n):
        token = tokens[k % len(tokens)]
        t0 = time.perf_counter()
        st, r = c.call("POST", "/v1/instances", {"gpu_model": "RTX 4090", "gpus": 1,
                                                 "image": IMAGE, "data_disk_gib": 1,
                                                 "name": f"w{worker}-{k}"}, token=token)
        lat.append(time.perf_counter() - t0)
        if st != 201:
            failures.append((st, r))
    return lat, failures


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


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))]


def main():
    d = tempfile.mkdtemp(prefix="suanli-bench-sched-")
    server = conftest.Server(os.path.join(d, "suanlid"), {
        # the hosts report once: silent for the run, they stay online
        "nodes.offline_after": "1h", "instances.max_per_user": str(INSTANCES),
        "nodes.ssh_port_min": "20000", "nodes.ssh_port_max": "40000",
        "log_level": "warn"})
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
        t0 = time.time()
        with multiprocessing.Pool(CONCURRENCY) as pool:
            results = pool.map(place, jobs)
        place_s = time.time() - t0
        lat = [x for r in results for x in r[0]]
        failures = [f for r in results for f in r[1]]
        db = sqlite3.connect(f"file:{server.data_dir}/suanli.db?mode=ro", uri=True)
        held = db.execute("SELECT COUNT(*) FROM gpus WHERE instance_id IS NOT NULL").fetchone()[0]
        made = db.execute("SELECT COUNT(*) FROM instances").fetchone()[0]
        twice = db.execute(
            "SELECT COUNT(*) FROM instances i WHERE i.gpus !="
            " (SELECT COUNT(*) FROM gpus g WHERE g.instance_id = i.id)").fetchone()[0]
        db.close()
        floor = write_floor(d)
    finally:
        server.stop()
    ok = not failures and held == made == INSTANCES and twice == 0
    rate = INSTANCES / place_s
    rows = [
        ("hosts enrolled and reported (enroll + heartbeat)", f"{HOSTS} in {enroll_s:.1f} s"),
        ("instances placed", f"{made} ({len(failures)} refused)"),
        ("placements per second", f"{rate:,.0f}"),
        ("POST /v1/instances p50 / p99", f"{pct(lat, .5) * 1000:.1f} / {pct(lat, .99) * 1000:.1f} ms"),
        ("GPUs held = instances, none twice", "yes" if held == made and twice == 0 else
         f"NO: {held} held, {made} made, {twice} instances without exactly their GPUs"),
        ("floor: empty SQLite write transactions/s (WAL, synchronous=FULL)", f"{floor:,.0f}"),
    ]
    out = [f"# Placement: {HOSTS} hosts x {GPUS_PER_HOST} GPUs, {INSTANCES} instances, "
           f"concurrency {CONCURRENCY} ({time.strftime('%Y-%m-%d')})", "",
           "| measure | value |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows]
    if failures:
        out += ["", f"first refusal: {failures[0]}"]
    text = "\n".join(out) + "\n"
    print(text)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "sched.md"), "w") as f:
        f.write(text)
    shutil.rmtree(d, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
