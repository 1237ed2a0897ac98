#!/usr/bin/python3
"""Instance start-up figures (issue 3): over RUNS runs each (default 20),
p50/p95 of

  create  -> SSH banner   POST /v1/instances until sshd answers on the port
  stop -> start -> banner POST .../start on a stopped instance until sshd answers
  bare runc run           `runc run` of the same image rootfs running /bin/true,
                          the floor any container start pays here: one run
                          before each run of the two paths (2 x RUNS), so it
                          sees the load they see

with the image already on the host. Runs the real suanlid and suanli-node
(simulated GPUs) with real runc, disks and CNI; prints a markdown table and
writes bench/results/instances.md. Needs root.

Where the time goes: the bench times the API call (POST until its answer)
and the banner itself; the agent writes each start's steps with monotonic
timestamps to DATA/instances/<id>/timing.json (node/steps.h: when it read
the desired state, when the worker began, then each step's duration), which
the bench reads after the banner. "sshd" is the bench's banner time minus
the end of `runc run` in the agent's trace: sshd starting inside, and the
port map on the way.
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


GROUPS = [("disks", ("disks (mkfs)", "mount disks")),
          ("overlay and files", ("overlay", "etc files", "boot dir", "host keys")),
          ("network (on the critical path: waited for)", ("network:",)),
          ("network (its own time, beside the above)", ("beside: network:",)),
          ("runc", ("runc state", "oci config", "runc run", "runc create", "runc start"))]


def trace(node_dir, iid, t0, deadline):
    """The agent's trace of the start that began after t0, or None."""
    path = os.path.join(node_dir, "instances", iid, "timing.json")
    while time.time() < deadline:
        try:
            with open(path) as f:
                t = json.load(f)
            if t["wall_us"] / 1e6 >= t0:
                return t
        except (OSError, ValueError):
            pass
        time.sleep(0.005)
    return None


def breakdown(t0, t_answer, t_banner, t):
    """{step: seconds} of one start: the API, the agent's steps, sshd."""
    b = {"API and placement": t_answer - t0}
    wall = t["wall_us"] / 1e6
    if t.get("desired_wall_us"):
        b["agent notified"] = t["desired_wall_us"] / 1e6 - t_answer
        b["worker started"] = wall - t["desired_wall_us"] / 1e6
    else:
        b["agent notified + worker started"] = wall - t_answer
    at = wall
    for name, us in t["steps"]:
        if name in ("sshd", "generation"):
            continue
        b[name] = b.get(name, 0) + us / 1e6
        at += us / 1e6
    for name, us in t.get("beside", []):  # the network's thread: overlaps the above
        b["beside: " + name] = b.get("beside: " + name, 0) + us / 1e6
    b["sshd (banner on the host port)"] = t_banner - at
    return b


class BareRunc:
    """runc run of the image's own rootfs, read-only, running /bin/true: one
    run beside each run of the paths above, so the floor sees the same load."""

    def __init__(self, node_dir):
        with open(os.path.join(node_dir, "images", conftest.IMAGE + ".json")) as f:
            layer = json.load(f)["layers"][0]
        rootfs = os.path.join(node_dir, "layers", "sha256", layer, "rootfs")
        self.bundle = tempfile.mkdtemp(prefix="suanli-bench-bundle-")
        self.root = tempfile.mkdtemp(prefix="suanli-bench-runc-")
        self.n = 0
        subprocess.run(["runc", "spec", "--bundle", self.bundle], check=True)
        with open(os.path.join(self.bundle, "config.json")) as f:
            spec = json.load(f)
        spec["root"] = {"path": rootfs, "readonly": True}
        spec["process"]["terminal"] = False
        spec["process"]["args"] = ["/bin/true"]
        with open(os.path.join(self.bundle, "config.json"), "w") as f:
            json.dump(spec, f)

    def run(self):
        self.n += 1
        t0 = time.time()
        subprocess.run(["runc", "--root", self.root, "run", "--bundle", self.bundle,
                        f"bench-{self.n}"], check=True, stdin=subprocess.DEVNULL)
        return time.time() - t0

    def close(self):
        shutil.rmtree(self.bundle, ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)


def main():
    d = tempfile.mkdtemp(prefix="suanli-bench-", dir="/var/tmp")
    server = conftest.Server(os.path.join(d, "suanlid"),  # SUANLI_TEST_PORTS, as the tests
                             {"nodes.ssh_port_min": conftest.TEST_PORTS[0],
                              "nodes.ssh_port_max": conftest.TEST_PORTS[1]})
    os.makedirs(server.data_dir)
    node = bare = None
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

        bare = BareRunc(node.data_dir)
        floor = []
        create, create_steps = [], []
        for _ in range(RUNS):
            floor.append(bare.run())
            t0 = time.time()
            r = server.request("POST", "/v1/instances", body, token=user["token"])
            t_answer = time.time()
            assert r.status == 201, r
            assert banner(r.json["ssh"]["port"], t0 + 60), "no banner"
            create.append(time.time() - t0)
            t = trace(node.data_dir, r.json["id"], t0, time.time() + 10)
            if t:
                create_steps.append(breakdown(t0, t_answer, t0 + create[-1], t))
            cluster.verb(user, r.json["id"], "release")
            cluster.wait_state(user, r.json["id"], "released")

        inst = cluster.create(user, **{k: v for k, v in body.items() if k != "gpu_model"})
        restart, restart_steps = [], []
        for _ in range(RUNS):
            cluster.verb(user, inst["id"], "stop")
            cluster.wait_state(user, inst["id"], "stopped")
            floor.append(bare.run())
            t0 = time.time()
            r = cluster.verb(user, inst["id"], "start")
            t_answer = time.time()
            assert r.status == 200, r
            assert banner(inst["ssh"]["port"], t0 + 60), "no banner"
            restart.append(time.time() - t0)
            t = trace(node.data_dir, inst["id"], t0, time.time() + 10)
            if t:
                restart_steps.append(breakdown(t0, t_answer, t0 + restart[-1], t))
        cluster.verb(user, inst["id"], "release")
        cluster.wait_state(user, inst["id"], "released")

    finally:
        if bare:
            bare.close()
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
    out += ["", f"Where the time goes (p50 of each step over the runs, ms; "
            f"{len(create_steps)} and {len(restart_steps)} traces):", "",
            "| step | create → banner | stop → start → banner |", "|---|---|---|"]
    names = []
    for b in create_steps + restart_steps:
        names += [n for n in b if n not in names]

    def p50(steps, name):
        v = [b[name] for b in steps if name in b]
        return f"{statistics.median(v) * 1000:.1f}" if v else "—"
    for name in names:
        out.append(f"| {name} | {p50(create_steps, name)} | {p50(restart_steps, name)} |")
    out += ["", "The same, in the issue's groups (p50 of each group's sum per run, ms):", "",
            "| group | create → banner | stop → start → banner |", "|---|---|---|"]
    grouped = []
    for steps in (create_steps, restart_steps):
        g = []
        for b in steps:
            row = {"API and placement": b.get("API and placement", 0),
                   "agent notified": sum(v for n, v in b.items()
                                         if n.startswith("agent notified")
                                         or n == "worker started" or n == "check"
                                         or n == "stop before")}
            for gname, prefixes in GROUPS:
                row[gname] = sum(v for n, v in b.items() if n.startswith(prefixes)
                                 and (n.startswith("beside: ") == prefixes[0].startswith("beside: ")))
            row["sshd"] = b["sshd (banner on the host port)"]
            g.append(row)
        grouped.append(g)
    for gname in ["API and placement", "agent notified"] + [g for g, _ in GROUPS] + ["sshd"]:
        out.append(f"| {gname} | {p50(grouped[0], gname)} | {p50(grouped[1], gname)} |")
    text = "\n".join(out) + "\n"
    print(text)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "instances.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
