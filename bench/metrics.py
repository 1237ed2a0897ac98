#!/usr/bin/python3
"""Metrics per instance (issue 15, items 1 and 6; docs/design/metrics.md):
the two figures of the issue, each beside its floor measured in the same run.

1. The agent's collection CPU with INSTANCES (default 50) running instances.
   The instances are what the collector reads of one, made for real: a
   cgroup in each hierarchy (cgroup v1: cpuacct, cpu, memory, pids; or the
   v2 tree) named /suanli/bench-N with a CPU quota and a memory limit, a
   process in it in a network namespace of its own, and two loop-mounted
   ext4 disks at DATA/instances/bench-N/{sys,data}. No runc: 50 containers
   do not fit a test machine, and the collector never talks to the
   runtime. bench/metrics-collect.c runs the agent's collector
   (node/metrics.c, the real code) on them for SECONDS at a 1 s interval
   and reports the CPU its thread used (CLOCK_THREAD_CPUTIME_ID); the floor
   is the same files read, stat'ed and statvfs'ed in a plain loop, as many
   passes, nothing parsed. The figure is the cost of one pass over all the
   instances, and that as a share of one core at metrics.interval_s = 10
   (the default) and 2 (the least).

2. A month of one instance through the API: GET /v1/instances/{id}/metrics
   for 30 days at 5 minutes (8,640 points of each of 17 series, the coarse
   tier) on a real suanlid, beside GET /v1/instances/{id} on the same
   server (the API's floor: authentication, one instance read, JSON). The
   month is written into the store in the format suanlid writes
   (instance-metrics.h), since suanlid only takes samples of the last day.

Prints a markdown table and writes bench/results/metrics.md. Needs root.
The machine's load moves every figure: say what it was.
"""
import http.client
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))

from conftest import BUILD, ApiHost, Cluster, Server  # noqa: E402

INSTANCES = int(os.environ.get("INSTANCES", "50"))
SECONDS = int(os.environ.get("SECONDS_", "30"))
CG = "/sys/fs/cgroup"


def sh(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw)


def v1_dirs(name):
    dirs = []
    for ctl in ("cpuacct", "cpu", "memory", "pids"):
        for mount in (ctl, "cpu,cpuacct"):
            if os.path.isdir(f"{CG}/{mount}") and (ctl in mount.split(",")):
                dirs.append(f"{CG}/{mount}/suanli/{name}")
                break
    return sorted(set(dirs))


class Instances:
    """INSTANCES instances' worth of cgroups, processes and disks."""

    def __init__(self, n):
        self.v2 = os.path.exists(f"{CG}/cgroup.controllers")
        self.data = tempfile.mkdtemp(prefix="suanli-bench-metrics-", dir="/var/tmp")
        self.procs, self.cgroups, self.mounts = [], [], []
        for i in range(n):
            name = f"bench-{i}"
            dirs = [f"{CG}/suanli/{name}"] if self.v2 else v1_dirs(name)
            for d in dirs:
                os.makedirs(d, exist_ok=True)
                self.cgroups.append(d)
                for f, v in (("cpu.cfs_quota_us", "200000"), ("cpu.max", "200000 100000"),
                             ("memory.limit_in_bytes", str(256 << 20)),
                             ("memory.max", str(256 << 20))):
                    if os.path.exists(f"{d}/{f}"):
                        with open(f"{d}/{f}", "w") as fh:
                            fh.write(v)
            procs = " ".join(f"{d}/cgroup.procs" for d in dirs)
            p = subprocess.Popen(["sh", "-c", f"for f in {procs}; do echo $$ > $f; done; "
                                  "exec unshare -n sleep 3600"])
            self.procs.append(p)
            base = f"{self.data}/instances/{name}"
            for disk in ("sys", "data"):
                img, mnt = f"{base}/{disk}.img", f"{base}/{disk}"
                os.makedirs(mnt)
                sh("truncate", "-s", "64M", img)
                sh("mkfs.ext4", "-q", "-F", img)
                sh("mount", "-o", "loop", img, mnt)
                self.mounts.append(mnt)

    def remove(self):
        for p in self.procs:
            p.kill()
            p.wait()
        for m in self.mounts:
            subprocess.run(["umount", m], capture_output=True)
        for d in self.cgroups:
            for _ in range(50):
                try:
                    os.rmdir(d)
                    break
                except OSError:
                    time.sleep(0.1)
        shutil.rmtree(self.data, ignore_errors=True)


def collection():
    driver = os.path.join(BUILD, "bench", "metrics-collect")
    if not os.path.exists(driver):
        sh("make", f"BUILD={BUILD}", driver, cwd=os.path.join(HERE, ".."))
    inst = Instances(INSTANCES)
    try:
        time.sleep(1)
        out = sh(driver, inst.data, CG, str(INSTANCES), str(SECONDS), "1000").stdout
    finally:
        inst.remove()
    r = json.loads(out)
    per_pass = r["collector_cpu_s"] / r["passes"]
    floor = r["floor_cpu_s"] / r["passes"]
    return r, per_pass, floor


def month_query():
    d = tempfile.mkdtemp(prefix="suanli-bench-metrics-", dir="/var/tmp")
    s = Server(os.path.join(d, "suanlid"))
    os.makedirs(s.data_dir)
    s.start()
    try:
        host = ApiHost(s)
        user = Cluster(s, None).renter()
        r = s.request("POST", "/v1/instances", {"gpu_model": "RTX 4090", "gpus": 1,
                                                "image": host.image}, token=user["token"])
        assert r.status == 201, r
        iid = r.json["id"]
        now = int(time.time())
        db = sqlite3.connect(os.path.join(s.data_dir, "suanli.db"), timeout=30)
        rows = []
        for k in range(30 * 288 + 288):
            t = now - now % 300 - k * 300
            vals = [(2000 + k % 997, 3000, 30), (5000, 9000, 30), (3 << 30, 4 << 30, 30),
                    (8 << 30, 8 << 30, 30), (40, 52, 30), (9 << 30, 9 << 30, 30),
                    (30 << 30, 30 << 30, 30), (20 << 30, 20 << 30, 30), (50 << 30, 50 << 30, 30),
                    (1 << 20, 9 << 20, 30), (2 << 20, 7 << 20, 30), (5 << 10, 90 << 10, 30),
                    (3 << 10, 40 << 10, 30), (9300, 10000, 30), (20 << 30, 23 << 30, 30),
                    (71, 80, 30), (350000, 420000, 30)]
            rows.append((iid, 1, t, 30, ",".join(f"{a * 30}:{b}:{c}" for a, b, c in vals)))
        for k in range(8640):
            t = now - now % 10 - k * 10
            rows.append((iid, 0, t, 1, ",".join(str(2000 + k % 997) for _ in range(17))))
        db.executemany("INSERT INTO instance_metrics (instance_id, tier, t, n, data)"
                       " VALUES (?, ?, ?, ?, ?)", rows)
        db.execute("INSERT INTO instance_metrics_latest (instance_id, node_id, t, data, absent)"
                   " VALUES (?, ?, ?, ?, '{}')", (iid, host.node_id, now, rows[-1][4]))
        db.commit()
        db.close()
        tok = user["token"]
        conn = http.client.HTTPConnection(s.host, s.port, timeout=60)

        def timed(p, n=25):
            """Milliseconds to the last byte of each of n answers on one
            connection, as curl's time_total (nothing parsed)."""
            out = []
            for _ in range(n):
                t0 = time.perf_counter()
                conn.request("GET", p, headers={"Authorization": f"Bearer {tok}"})
                resp = conn.getresponse()
                body = resp.read()
                out.append((time.perf_counter() - t0) * 1000)
                assert resp.status == 200, (resp.status, body[:300])
            return json.loads(body), len(body), out
        month = f"/v1/instances/{iid}/metrics?from={now - 30 * 86400}&to={now}"
        chart, chart_size, chart_ms = timed(month)  # the default step: about 300 points
        full, full_size, full_ms = timed(month + "&step=5m")
        assert len(full["series"]) == 17 and len(full["series"]["cpu_cores"]) >= 30 * 288
        _, _, floor = timed(f"/v1/instances/{iid}")
        conn.close()
        return [(f"a month, default step ({chart['step_seconds']} s: "
                 f"{len(chart['series']['cpu_cores'])} points x 17 series, {chart_size // 1024} KiB)",
                 chart_ms),
                (f"a month, 5 min steps ({len(full['series']['cpu_cores'])} points x 17 series, "
                 f"{full_size // 1024} KiB)", full_ms)], floor
    finally:
        s.stop()
        shutil.rmtree(d, ignore_errors=True)


def main():
    load = os.getloadavg()[0]
    r, per_pass, floor = collection()
    queries, qfloor = month_query()
    med = statistics.median

    def p90(v):
        return sorted(v)[int(len(v) * 0.9)]
    lines = [
        f"machine: {os.cpu_count()} CPUs, load average {load:.1f} at the start",
        "",
        "| figure | value | floor (same run) | target |",
        "|---|---|---|---|",
        f"| collector CPU per pass, {INSTANCES} instances ({r['passes']} passes) | "
        f"{per_pass * 1000:.2f} ms | {floor * 1000:.2f} ms (the same reads, unparsed) | |",
        f"| as a share of one core, metrics.interval_s = 10 (default) | "
        f"{per_pass / 10 * 100:.3f} % | {floor / 10 * 100:.3f} % | < 1 % |",
        f"| as a share of one core, metrics.interval_s = 2 (least) | "
        f"{per_pass / 2 * 100:.3f} % | {floor / 2 * 100:.3f} % | |",
    ]
    for what, ms in queries:
        lines.append(f"| GET {what}: median / p90 of 25 | {med(ms):.1f} / {p90(ms):.1f} ms | "
                     f"{med(qfloor):.1f} / {p90(qfloor):.1f} ms (GET /v1/instances/ID) | "
                     f"< 50 ms |")
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "metrics.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
