#!/usr/bin/python3
"""Instance start-up figures (issue 3): over RUNS runs each (default 20),
p50/p95 of

  create  -> SSH banner   POST /v1/instances until sshd answers on the port
  stop -> start -> banner POST .../start on a stopped instance until sshd answers
  bare runc run           `runc run` of the same image rootfs running /bin/true,
                          the floor any container start pays here

with the image already on the host. Runs the real suanlid and suanli-node
(simulated GPUs) with real runc, disks and CNI; prints a markdown table and
writes bench/results/instances.md. Needs root.
"""
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import conftest  # noqa: E402  the integration harness: Server, Node, Cluster

RUNS = int(os.environ.get("RUNS", "20"))


def banner(port, deadline):
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.settimeout(1)
                if s.recv(4) == b"SSH-":
                    return True
        except OSError:
            pass
        time.sleep(0.002)
    return False


def pct(values, p):
    values = sorted(values)
    k = (len(values) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def bare_runc(node_dir, runs):
    """runc run of the image's own rootfs, read-only, running /bin/true."""
    with open(os.path.join(node_dir, "images", conftest.IMAGE + ".json")) as f:
        layer = json.load(f)["layers"][0]
    rootfs = os.path.join(node_dir, "layers", "sha256", layer, "rootfs")
    bundle = tempfile.mkdtemp(prefix="suanli-bench-bundle-")
    root = tempfile.mkdtemp(prefix="suanli-bench-runc-")
    subprocess.run(["runc", "spec", "--bundle", bundle], check=True)
    with open(os.path.join(bundle, "config.json")) as f:
        spec = json.load(f)
    spec["root"] = {"path": rootfs, "readonly": True}
    spec["process"]["terminal"] = False
    spec["process"]["args"] = ["/bin/true"]
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(spec, f)
    times = []
    try:
        for i in range(runs):
            t0 = time.time()
            subprocess.run(["runc", "--root", root, "run", "--bundle", bundle, f"bench-{i}"],
                           check=True, stdin=subprocess.DEVNULL)
            times.append(time.time() - t0)
    finally:
        shutil.rmtree(bundle, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
    return times


def main():
    d = tempfile.mkdtemp(prefix="suanli-bench-", dir="/var/tmp")
    server = conftest.Server(os.path.join(d, "suanlid"))
    os.makedirs(server.data_dir)
    node = None
    try:
        server.start()
        admin = server.admin_token
        r = server.request("POST", "/v1/admin/join-tokens", {"region": "sample-1"}, token=admin)
        node = conftest.Node(server, os.path.join(d, "node"), r.json["token"]).start()
        server.request("POST", "/v1/admin/images", {"name": conftest.IMAGE}, token=admin)
        print("bench: building the image on the node first (mmdebstrap)...", file=sys.stderr)
        conftest.wait_for(lambda: [i for i in server.request("GET", "/v1/images", token=admin)
                                   .json["items"] if i["state"] == "ready"],
                          timeout=900, interval=1, what="the image")
        cluster = conftest.Cluster(server, node)
        user = cluster.renter(credit_micros=10_000_000_000)
        body = {"gpu_model": "RTX 4090", "gpus": 1, "image": conftest.IMAGE, "data_disk_gib": 50}

        create = []
        for _ in range(RUNS):
            t0 = time.time()
            r = server.request("POST", "/v1/instances", body, token=user["token"])
            assert r.status == 201, r
            assert banner(r.json["ssh"]["port"], t0 + 60), "no banner"
            create.append(time.time() - t0)
            cluster.verb(user, r.json["id"], "release")
            cluster.wait_state(user, r.json["id"], "released")

        inst = cluster.create(user, **{k: v for k, v in body.items() if k != "gpu_model"})
        restart = []
        for _ in range(RUNS):
            cluster.verb(user, inst["id"], "stop")
            cluster.wait_state(user, inst["id"], "stopped")
            t0 = time.time()
            r = cluster.verb(user, inst["id"], "start")
            assert r.status == 200, r
            assert banner(inst["ssh"]["port"], t0 + 60), "no banner"
            restart.append(time.time() - t0)
        cluster.verb(user, inst["id"], "release")
        cluster.wait_state(user, inst["id"], "released")

        floor = bare_runc(node.data_dir, RUNS)
    finally:
        if node:
            node.stop()
        server.stop()
        if node:
            conftest.cleanup_host(node.data_dir)
        shutil.rmtree(d, ignore_errors=True)

    cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")]
    rows = [("create → SSH banner", create), ("stop → start → SSH banner", restart),
            ("bare `runc run` (floor)", floor)]
    out = [f"# Instance start-up, {RUNS} runs each",
           "",
           f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}; machine: {os.cpu_count()} "
           f"CPUs ({cpu[0] if cpu else 'unknown'}), image already on the host, "
           "simulated GPUs, runc + loop-mounted ext4 + overlayfs + CNI.",
           "",
           "| path | p50 | p95 | × floor (p50) |",
           "|---|---|---|---|"]
    fp50 = statistics.median(floor)
    for name, v in rows:
        out.append(f"| {name} | {statistics.median(v) * 1000:.0f} ms | {pct(v, 0.95) * 1000:.0f} ms"
                   f" | {statistics.median(v) / fp50:.1f} |")
    text = "\n".join(out) + "\n"
    print(text)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "instances.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
