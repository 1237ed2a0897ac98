#!/usr/bin/python3
"""Create/release churn (issue 4): CYCLES (200) cycles at CONCURRENCY (4),
each renter in its own thread doing

  POST /v1/instances -> SSH banner on its port -> release -> state released

against the real suanlid and suanli-node (simulated GPUs, real runc, loop
disks, CNI). Reports throughput, p50/p95 of a whole cycle and of
create -> banner, and the leak count afterwards: every released instance is
checked for mounts, loop devices, netns, runc containers, iptables rules,
cgroups and its directory (host_leftovers), and the node as a whole for
mounts and loop devices under its data directory, network namespaces, veths
on the bench's bridge, iptables rules and IP leases of the bench's subnet,
and files left in instances/, runc/ and net/results/. Must be 0.

Runs on its own bridge, subnet and ports (BENCH_BRIDGE, BENCH_SUBNET,
BENCH_PORTS; default suanlib0, 10.95.0.0/16, 35000-35999) so it can run beside
the integration tests. Prints a markdown table and writes
bench/results/cycles.md. Needs root.
"""
import ipaddress
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import conftest  # noqa: E402  the integration harness: Server, Node, Cluster

CYCLES = int(os.environ.get("CYCLES", "200"))
CONCURRENCY = int(os.environ.get("CONCURRENCY", "4"))
BRIDGE = os.environ.get("BENCH_BRIDGE", "suanlib0")
SUBNET = os.environ.get("BENCH_SUBNET", "10.95.0.0/16")
PORTS = os.environ.get("BENCH_PORTS", "35000-35999").split("-")
PREFIX = str(ipaddress.ip_network(SUBNET).network_address).rsplit(".", 2)[0] + "."  # "10.95."
# The floor's own bridge and subnet, so its leftovers can never be the run's
FLOOR_CYCLES = int(os.environ.get("FLOOR_CYCLES", "60"))
FLOOR_BRIDGE = os.environ.get("FLOOR_BRIDGE", "suanlif0")
FLOOR_SUBNET = os.environ.get("FLOOR_SUBNET", "10.96.0.0/16")
CNI_PATH = "/usr/lib/cni"


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


def cgroups_of(iid):
    root = "/sys/fs/cgroup"
    dirs = [root] + [os.path.join(root, c) for c in os.listdir(root)]
    return [p for p in (os.path.join(d, "suanli", iid) for d in dirs) if os.path.exists(p)]


def leaks(data, released):
    """[what] left on the host by the released (id, port) pairs and on the
    bench's node, bridge and subnet."""
    left = []
    for iid, port in released:
        left += [f"{iid}: {w}" for w in conftest.host_leftovers(data, iid, port)]
        left += [f"{iid}: cgroup {p}" for p in cgroups_of(iid)]
    with open("/proc/self/mountinfo") as f:
        # DATA/lxcfs is the node's (node/lxcfs.h), there while it runs
        left += [f"mount {line.split()[4]}" for line in f
                 if line.split()[4].startswith(data + "/") and line.split()[4] != data + "/lxcfs"]
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    left += [f"loop {line}" for line in loops.splitlines() if data + "/" in line]
    ids = {iid for iid, _ in released}
    netns = [n for d in conftest.NETNS_PIN_DIRS
             for n in (os.listdir(d) if os.path.isdir(d) else [])]
    left += [f"netns {n}" for n in netns if n[len("suanli-"):] in ids]
    veths = subprocess.run(["ip", "-o", "link", "show", "master", BRIDGE], capture_output=True,
                           text=True).stdout
    left += [f"veth {v.split(':')[1].strip()}" for v in veths.splitlines() if v.strip()]
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    # the node's own metadata rules (one DNAT and one exception per bridge,
    # there while the agent runs) are no instance's, as in t280
    left += [f"rule {r}" for r in rules.splitlines() if r.startswith("-A ") and PREFIX in r
             and "169.254.169.254" not in r]
    ipam = os.path.join(data, "net", "ipam")
    for net in os.listdir(ipam) if os.path.isdir(ipam) else []:
        for name in os.listdir(os.path.join(ipam, net)):
            if name[:1].isdigit():
                left.append(f"lease {name}")
    for sub in ("instances", "runc", os.path.join("net", "results")):
        p = os.path.join(data, sub)
        left += [f"file {sub}/{x}" for x in (os.listdir(p) if os.path.isdir(p) else [])]
    return left


TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid, children=True):
    """CPU seconds of a process (and the programs it ran and waited for)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    t = int(fields[11]) + int(fields[12])  # utime, stime
    if children:
        t += int(fields[13]) + int(fields[14])  # cutime, cstime
    return t / TICK


def machine_cpu():
    """CPU seconds the whole machine spent busy (all CPUs), from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / TICK  # less idle and iowait


def instances_cpu():
    """CPU seconds of the instances' cgroups (cgroup v1 cpuacct, or v2), all
    agents' of this host: the parent counts its removed children's too."""
    for path, scale in (("/sys/fs/cgroup/cpuacct/suanli/cpuacct.usage", 1e-9),
                        ("/sys/fs/cgroup/suanli/cpu.stat", 1e-6)):
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            continue
        if path.endswith("cpu.stat"):
            text = [l.split()[1] for l in text.splitlines() if l.startswith("usage_usec")][0]
        return int(text) * scale
    return 0.0


def worker(cluster, user, take, results, errors):
    s = cluster.server
    body = {"gpu_model": "RTX 4090", "gpus": 1, "image": conftest.IMAGE, "data_disk_gib": 1}
    while take():
        try:
            t0 = time.time()
            r = s.request("POST", "/v1/instances", body, token=user["token"])
            assert r.status == 201, r
            iid, port = r.json["id"], r.json["ssh"]["port"]
            assert banner(port, t0 + 60), f"no banner from {iid} on {port}"
            t_banner = time.time()
            r = cluster.verb(user, iid, "release")
            assert r.status == 200, r
            conftest.wait_for(lambda: s.request("GET", f"/v1/instances/{iid}",
                                                token=user["token"]).json["state"] == "released",
                              timeout=60, interval=0.01, what=f"{iid} released")
            results.append((iid, port, t_banner - t0, time.time() - t0))
        except Exception as e:  # noqa: BLE001  counted and reported
            errors.append(repr(e))


class Floor:
    """What any such cycle pays here before suanli does anything of its own:
    the programs DESIGN.md names for an instance's life, run bare, at the same
    concurrency, right after the cycles. Each floor cycle: a network
    namespace (unshare), the CNI chain the node uses (bridge with host-local,
    portmap, firewall) ADD, one `runc run` of the image's rootfs (/bin/true)
    in that namespace, the chain's DEL. No disks, no sshd, no API: a lower
    bound for a cycle, not a model of one."""

    def __init__(self, node_dir, work):
        with open(os.path.join(node_dir, "images", conftest.IMAGE + ".json")) as f:
            layer = json.load(f)["layers"][0]
        self.rootfs = os.path.join(node_dir, "layers", "sha256", layer, "rootfs")
        self.work = work
        self.root = os.path.join(work, "runc")
        self.ipam = os.path.join(work, "ipam")
        os.makedirs(self.root)
        self.n = 0
        self.lock = threading.Lock()
        subprocess.run(["runc", "spec", "--bundle", work], check=True)
        with open(os.path.join(work, "config.json")) as f:
            self.spec = json.load(f)
        os.unlink(os.path.join(work, "config.json"))
        self.spec["root"] = {"path": self.rootfs, "readonly": True}
        self.spec["process"]["terminal"] = False
        self.spec["process"]["args"] = ["/bin/true"]

    def plugins(self, port):
        return [{"type": "bridge", "bridge": FLOOR_BRIDGE, "isGateway": True, "ipMasq": True,
                 "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": FLOOR_SUBNET}]],
                          "routes": [{"dst": "0.0.0.0/0"}], "dataDir": self.ipam}},
                {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True,
                 "runtimeConfig": {"portMappings": [{"hostPort": port, "containerPort": 22,
                                                     "protocol": "tcp"}]}},
                {"type": "firewall", "backend": "iptables"}]

    def cni(self, command, plugin, cid, netns, prev):
        conf = dict(plugin, cniVersion="1.0.0", name="suanli-floor")
        if prev is not None:
            conf["prevResult"] = prev
        env = {"CNI_COMMAND": command, "CNI_CONTAINERID": cid, "CNI_NETNS": netns,
               "CNI_IFNAME": "eth0", "CNI_PATH": CNI_PATH, "PATH": os.environ["PATH"]}
        r = subprocess.run([os.path.join(CNI_PATH, plugin["type"])], input=json.dumps(conf),
                           capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise RuntimeError(f"CNI {plugin['type']} {command}: {r.stdout} {r.stderr}")
        return json.loads(r.stdout) if command == "ADD" else prev

    def cycle(self):
        with self.lock:
            self.n += 1
            n = self.n
        cid, port = f"floor-{n}", int(PORTS[0]) + n
        holder = subprocess.Popen(["unshare", "--net", "sleep", "600"])
        netns = f"/proc/{holder.pid}/ns/net"
        bundle = os.path.join(self.work, cid)
        try:
            conftest.wait_for(lambda: os.readlink(netns) != os.readlink("/proc/self/ns/net"),
                              timeout=10, interval=0.001, what="the floor's netns")
            plugins = self.plugins(port)
            result = None
            for p in plugins:
                result = self.cni("ADD", p, cid, netns, result)
            os.makedirs(bundle)
            spec = json.loads(json.dumps(self.spec))
            spec["linux"]["namespaces"] = [
                ns if ns["type"] != "network" else {"type": "network", "path": netns}
                for ns in spec["linux"]["namespaces"]]
            with open(os.path.join(bundle, "config.json"), "w") as f:
                json.dump(spec, f)
            subprocess.run(["runc", "--root", self.root, "run", "--bundle", bundle, cid],
                           check=True, stdin=subprocess.DEVNULL)
            for p in reversed(plugins):
                self.cni("DEL", p, cid, netns, result)
        finally:
            holder.kill()
            holder.wait()
            shutil.rmtree(bundle, ignore_errors=True)

    def run(self, cycles, concurrency):
        """(cycles/s, CPU seconds per cycle of the machine, of the programs)"""
        left = [cycles]
        lock = threading.Lock()
        errors = []

        def worker():
            while True:
                with lock:
                    left[0] -= 1
                    if left[0] < 0:
                        return
                try:
                    self.cycle()
                except Exception as e:  # noqa: BLE001  reported
                    errors.append(repr(e))
        self.cycle()  # the plugins' first run makes the bridge and chains
        ru0, m0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), machine_cpu(), time.time()
        threads = [threading.Thread(target=worker) for _ in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.time() - t0
        ru1, m1 = resource.getrusage(resource.RUSAGE_CHILDREN), machine_cpu()
        if errors:
            raise RuntimeError(f"floor: {len(errors)} cycles failed: {errors[0][:300]}")
        progs = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
        return cycles / wall, (m1 - m0) / cycles, progs / cycles

    def close(self):
        subprocess.run(["ip", "link", "del", FLOOR_BRIDGE], capture_output=True)
        prefix = str(ipaddress.ip_network(FLOOR_SUBNET).network_address).rsplit(".", 2)[0] + "."
        rules = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
        table = None
        for line in rules.splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith("-A ") and prefix in line:
                subprocess.run(["iptables", "-t", table, "-D"] + line.split()[1:],
                               capture_output=True)
        shutil.rmtree(self.work, ignore_errors=True)


def main():
    d = tempfile.mkdtemp(prefix="suanli-bench-cycles-", dir="/var/tmp")
    server = conftest.Server(os.path.join(d, "suanlid"), {"nodes.ssh_port_min": PORTS[0],
                                                          "nodes.ssh_port_max": PORTS[1]})
    os.makedirs(server.data_dir)
    node = None
    results, errors = [], []
    load_before = os.getloadavg()
    try:
        server.start()
        admin = server.admin_token
        r = server.request("POST", "/v1/admin/join-tokens", {"region": "sample-1"}, token=admin)
        node = conftest.Node(server, os.path.join(d, "node"), r.json["token"], extra=[
            "--set", f"network.bridge={BRIDGE}", "--set", f"network.subnet={SUBNET}"]).start()
        server.request("POST", "/v1/admin/images", {"name": conftest.IMAGE}, token=admin)
        print("bench: building the image on the node first (mmdebstrap)...", file=sys.stderr)
        conftest.wait_for(lambda: [i for i in server.request("GET", "/v1/images", token=admin)
                                   .json["items"] if i["state"] == "ready"],
                          timeout=900, interval=1, what="the image")
        cluster = conftest.Cluster(server, node)
        users = [cluster.renter(credit_micros=10_000_000_000) for _ in range(CONCURRENCY)]
        lock = threading.Lock()
        left = [CYCLES]

        def take():
            with lock:
                left[0] -= 1
                return left[0] >= 0
        print(f"bench: {CYCLES} cycles at concurrency {CONCURRENCY}...", file=sys.stderr)
        cpu0 = (proc_cpu(node.proc.pid), proc_cpu(server.proc.pid), proc_cpu(os.getpid(), False),
                instances_cpu(), machine_cpu())
        t0 = time.time()
        threads = [threading.Thread(target=worker, args=(cluster, u, take, results, errors))
                   for u in users]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.time() - t0
        cpu1 = (proc_cpu(node.proc.pid), proc_cpu(server.proc.pid), proc_cpu(os.getpid(), False),
                instances_cpu(), machine_cpu())
        used = [b - a for a, b in zip(cpu0, cpu1)]
        load_after = os.getloadavg()
        leftover = leaks(node.data_dir, [(iid, port) for iid, port, _, _ in results])
        print(f"bench: the floor, {FLOOR_CYCLES} bare cycles at concurrency {CONCURRENCY}...",
              file=sys.stderr)
        floor = Floor(node.data_dir, os.path.join(d, "floor"))
        try:
            floor_rate, floor_machine, floor_progs = floor.run(FLOOR_CYCLES, CONCURRENCY)
        finally:
            floor.close()
    finally:
        if node:
            node.stop()
            if os.environ.get("AGENT_LOG"):  # the agent's log, kept (with its traces)
                shutil.copy(node.log_path, os.environ["AGENT_LOG"])
        server.stop()
        if node:
            conftest.cleanup_host(node.data_dir, bridge=BRIDGE, prefix=PREFIX)
        shutil.rmtree(d, ignore_errors=True)

    cpu = [line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
           if line.startswith("model name")]
    cycle = [c for _, _, _, c in results]
    create = [b for _, _, b, _ in results]
    out = [f"# Create/release churn: {CYCLES} cycles at concurrency {CONCURRENCY}",
           "",
           f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}; machine: {os.cpu_count()} "
           f"CPUs ({cpu[0] if cpu else 'unknown'}), load average {load_before[0]:.1f} before, "
           f"{load_after[0]:.1f} after (the machine may be shared with other runs); "
           "image already on the host, simulated GPUs, runc + loop-mounted ext4 + overlayfs "
           f"+ CNI; {CONCURRENCY} renters, each: create (1 GPU, 1 GiB data disk) -> SSH banner "
           "-> release -> released.",
           "",
           "| figure | value |",
           "|---|---|",
           f"| cycles completed / failed | {len(results)} / {len(errors)} |",
           f"| wall time | {wall:.1f} s |",
           f"| throughput | {len(results) / wall:.2f} cycles/s |",
           f"| cycle p50 / p95 | {statistics.median(cycle) * 1000:.0f} ms / "
           f"{pct(cycle, 0.95) * 1000:.0f} ms |",
           f"| create → SSH banner p50 / p95 | {statistics.median(create) * 1000:.0f} ms / "
           f"{pct(create, 0.95) * 1000:.0f} ms |",
           f"| leaks afterwards | {len(leftover)} |",
           f"| the floor: {FLOOR_CYCLES} bare cycles (netns, CNI bridge+portmap+firewall ADD, "
           f"`runc run` /bin/true, CNI DEL), {CONCURRENCY} at a time | {floor_rate:.2f} "
           f"cycles/s; {floor_machine * 1000:.0f} ms of the machine's CPU per cycle, "
           f"{floor_progs * 1000:.0f} ms of it the programs' own |",
           f"| the cycles beside the floor | {len(results) / wall / floor_rate:.2f}× its "
           f"throughput; {used[4] / max(len(results), 1) / max(floor_machine, 1e-9):.1f}× its "
           "CPU per cycle |"]
    n = max(len(results), 1)
    agent, suanlid, bench, inst, total = used
    out += ["", f"CPU per cycle (ms; the machine has {os.cpu_count()} CPUs, so at most "
            f"{os.cpu_count() * 1000 / max(total / n * 1000, 1):.1f} cycles/s fit at this use "
            "of it, other work on the machine included):", "",
            "| who | CPU per cycle |", "|---|---|",
            f"| the agent and the programs it ran (runc, CNI plugins, nft, mkfs, ssh-keygen) "
            f"| {agent / n * 1000:.0f} ms |",
            f"| the instances (their cgroups: runc init, the init script, sshd; every agent's "
            f"on this host) | {inst / n * 1000:.0f} ms |",
            f"| suanlid | {suanlid / n * 1000:.0f} ms |",
            f"| this bench (its HTTP polls every 10 ms, banner probes every 2 ms) "
            f"| {bench / n * 1000:.0f} ms |",
            f"| everything else on the machine (the kernel's work for the above, other "
            f"users) | {(total - agent - inst - suanlid - bench) / n * 1000:.0f} ms |",
            f"| the whole machine | {total / n * 1000:.0f} ms |"]
    if errors:
        out += ["", "Errors:", ""] + [f"* {e[:300]}" for e in errors[:10]]
    if leftover:
        out += ["", "Leftovers:", ""] + [f"* {x}" for x in leftover[:30]]
    text = "\n".join(out) + "\n"
    print(text)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "cycles.md"), "w") as f:
        f.write(text)
    sys.exit(1 if errors or leftover else 0)


if __name__ == "__main__":
    main()
