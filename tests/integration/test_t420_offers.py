"""Offers per host (docs/design/control-plane.md, "Offers per host"): a
host's CPU and memory, less the operator's reserve, are divided among its
GPUs; an instance gets its GPUs' share and never more than the host has. The
market lists one offer per host and GPU model, with filters; create pins a
host with `host`; placement checks CPU and memory, not only GPUs. Hosts here
speak the node API with chosen inventories and run no containers; the
instance-side checks (free, nproc, /proc/meminfo, an OOM kill) use the real
cluster."""
import json
import os
import re
import signal
import time
import uuid

import pytest

from conftest import (PASSWORD, ApiHost, Cli, Cluster, chrooted, process_alive,
                      sample_catalog, wait_for)

RESERVE = {"nodes.cpu_reserve_millicores": "1000", "nodes.memory_reserve_mib": "4096"}
MODEL = "RTX 4090"


class Host(ApiHost):
    """An ApiHost with the CPU, memory, host name and CUDA version a test
    chooses."""

    def __init__(self, server, cores, memory_mib, gpus=8, hostname=None, cuda="12.2",
                 image="api-host-image", free_gib=1000):
        """ApiHost's enrollment, with the host name given."""
        self.cores, self.memory_mib, self.cuda = cores, memory_mib, cuda
        self.name = hostname or "h-" + uuid.uuid4().hex[:8]
        self.server, self.image = server, image
        admin = server.admin_token
        r = server.request("POST", "/v1/admin/join-tokens", {"region": "sample-1"}, token=admin)
        assert r.status == 201, r
        self.gpus = [{"index": i, "uuid": f"GPU-t420-{uuid.uuid4().hex[:8]}-{i}",
                      "name": "NVIDIA GeForce RTX 4090", "vram_mib": 24564, "simulated": True}
                     for i in range(gpus)]
        self.free_bytes, self.disks_bytes = free_gib * self.GIB, 0
        r = server.request("POST", "/v1/nodes/enroll", {
            "join_token": r.json["token"], "hostname": self.name, "address": "192.0.2.1",
            "inventory": self.inventory()})
        assert r.status == 201, r
        self.node_id, self.token = r.json["node_id"], r.json["node_token"]
        r = server.request("POST", "/v1/admin/images", {"name": image, "recipe": "base"},
                           token=admin)
        assert r.status == 201 or r.code == "image_exists", r
        self.heartbeat()

    def inventory(self):
        inv = super().inventory()
        inv.update({"cpu_cores": self.cores, "memory_mib": self.memory_mib,
                    "driver_version": "550.54.15" if self.cuda != "simulated" else "simulated",
                    "cuda_version": self.cuda})
        return inv

    def desired(self):
        r = self.server.request("GET", f"/v1/nodes/{self.node_id}/desired", token=self.token)
        assert r.status == 200, r
        return {i["id"]: i for i in r.json["instances"]}

    def report(self, iid, state):
        """Reports instance iid in state at the generation asked for."""
        gen = self.desired()[iid]["generation"]
        self.heartbeat([{"id": iid, "state": state, "generation": gen}])


def market(server, token, query=""):
    r = server.request("GET", "/v1/market" + query, token=token)
    assert r.status == 200, r
    return r


def offers(server, token, query=""):
    return {(o["node_id"], o["gpu_model"]): o
            for reg in market(server, token, query).json["items"] for o in reg["hosts"]}


@pytest.fixture
def world(make_server):
    """A server with a reserve, two hosts of different sizes and a renter."""
    server = make_server(RESERVE)
    small = Host(server, cores=10, memory_mib=36 * 1024, gpus=8)
    big = Host(server, cores=64, memory_mib=512 * 1024, gpus=4, cuda="11.8")
    renter = Cluster(server, None).renter()
    return server, small, big, renter


def create(server, renter, host_image, **body):
    return server.request("POST", "/v1/instances",
                          {"gpu_model": MODEL, "gpus": 1, "image": host_image,
                           "data_disk_gib": 10, **body}, token=renter["token"])


def test_t420_each_host_offers_its_own_share_per_gpu(world):
    server, small, big, renter = world
    cap = [m for m in sample_catalog()["gpu_models"] if m["name"] == MODEL][0]
    got = offers(server, renter["token"])
    a, b = got[(small.node_id, MODEL)], got[(big.node_id, MODEL)]
    # (10 cores - 1 reserved) / 8 GPUs; (36 GiB - 4 GiB reserved) / 8
    assert a["cpu_millicores_per_gpu"] == 1125 and a["cpu_cores_per_gpu"] == 1.125
    assert a["memory_mib_per_gpu"] == 4096
    assert (a["gpus_total"], a["gpus_free"]) == (8, 8)
    # (64 - 1) / 4 = 15.75 cores; (512 - 4) GiB / 4 = 127 GiB, over the
    # catalog's 120 GiB per GPU: the catalog's promise is the most
    assert b["cpu_millicores_per_gpu"] == 15750
    assert b["memory_mib_per_gpu"] == cap["memory_mib_per_gpu"] < (512 * 1024 - 4096) // 4
    for o, h in ((a, small), (b, big)):
        assert o["hostname"] == h.name and o["region"] == "sample-1"
        assert o["price_per_hour_micros"] == cap["price_per_hour_micros"]
        assert o["vram_mib"] == cap["vram_mib"] and o["simulated"] is True
        assert o["data_disk_free_gib"] > 0
    assert (a["driver_version"], a["cuda_version"]) == ("550.54.15", "12.2")
    assert b["cuda_version"] == "11.8"
    # a renter learns no address and no token of a host
    text = json.dumps(market(server, renter["token"]).json)
    assert "192.0.2.1" not in text and small.token not in text and "address" not in text

    # an instance gets its GPUs' share of its host, in what the host is told
    r = create(server, renter, small.image, gpus=2, host=small.node_id)
    assert r.status == 201, r
    assert r.json["node_id"] == small.node_id
    assert (r.json["cpu_cores"], r.json["memory_mib"]) == (2.25, 8192)
    d = small.desired()[r.json["id"]]
    assert (d["cpu_millicores"], d["memory_mib"]) == (2250, 8192)
    assert offers(server, renter["token"])[(small.node_id, MODEL)]["gpus_free"] == 6


def test_t421_market_filters(world):
    server, small, big, renter = world
    t = renter["token"]
    sim = Host(server, cores=8, memory_mib=16 * 1024, gpus=2, cuda="simulated")
    hosts = lambda q: {n for (n, _) in offers(server, t, q)}  # noqa: E731
    assert hosts("") >= {small.node_id, big.node_id, sim.node_id}
    assert hosts("?min_free=5") == {small.node_id}
    assert hosts("?cuda=12") == {small.node_id}
    assert hosts("?cuda=11.8") == {small.node_id, big.node_id}
    assert hosts("?cuda=12.3") == set()
    # a 24 GB card is 24564 MiB: 24 takes it, 25 does not
    assert hosts("?min_vram_gib=24") >= {small.node_id, big.node_id}
    assert hosts("?min_vram_gib=25") == set()
    assert hosts("?gpu_model=rtx%204090&region=sample-1&min_free=4") == {small.node_id,
                                                                       big.node_id}
    only = market(server, t, "?gpu_model=A100%2080GB").json["items"][0]
    assert [m["name"] for m in only["gpu_models"]] == ["A100 80GB"] and only["hosts"] == []
    assert sim.node_id in hosts("?gpu_model=RTX%204090")
    for q, status, code in (("?min_free=-1", 400, "invalid_parameter"),
                            ("?min_free=two", 400, "invalid_parameter"),
                            ("?min_vram_gib=1e3", 400, "invalid_parameter"),
                            ("?cuda=twelve", 400, "invalid_parameter"),
                            ("?cuda=12.", 400, "invalid_parameter"),
                            ("?cuda=-1", 400, "invalid_parameter"),
                            ("?gpu_model=GTX%209999", 404, "no_such_gpu_model"),
                            ("?region=nowhere", 404, "no_such_region")):
        r = server.request("GET", "/v1/market" + q, token=t)
        assert (r.status, r.code) == (status, code), (q, r)
        assert q.split("=")[0][1:] in r.json["error"]["message"] or status == 404, r


def test_t422_create_pins_a_host(world):
    server, small, big, renter = world
    r = create(server, renter, small.image, gpus=4, host=big.name)
    assert r.status == 201 and r.json["node_id"] == big.node_id, r
    assert (r.json["cpu_cores"], r.json["memory_mib"]) == (63.0, 4 * 122880)
    # the host is full now: a clear 409 that names a way out
    r = create(server, renter, small.image, host=big.node_id)
    assert (r.status, r.code) == (409, "host_full"), r
    msg = r.json["error"]["message"]
    assert big.node_id in msg and "suanli market --gpu-model 'RTX 4090' --min-free 1" in msg, r
    for host, status, code in (("n-nosuchhost", 404, "no_such_host"),
                               ("", 201, None)):
        r = create(server, renter, small.image, host=host)
        assert (r.status, r.code) == (status, code), r
    # the region asked and the host's must agree
    admin = server.admin_token
    assert server.request("POST", "/v1/admin/regions", {"id": "t422-x", "name": "x"},
                          token=admin).status == 201
    r = create(server, renter, small.image, host=small.node_id, region="t422-x")
    assert (r.status, r.code) == (400, "invalid_field") and "t422-x" in r.json["error"]["message"]
    # two hosts of one name: pin by node id
    twin1 = Host(server, cores=8, memory_mib=16384, gpus=2, hostname="twin")
    twin2 = Host(server, cores=8, memory_mib=16384, gpus=2, hostname="twin")
    r = create(server, renter, small.image, host="twin")
    assert (r.status, r.code) == (400, "ambiguous_host"), r
    r = create(server, renter, small.image, host=twin2.node_id)
    assert r.status == 201 and r.json["node_id"] == twin2.node_id, r
    # a host gone silent is not pinned to
    server.stop()
    server.settings["nodes.offline_after"] = "2s"
    server.start()
    time.sleep(2.5)
    small.heartbeat()
    r = create(server, renter, small.image, host=twin1.node_id)
    assert (r.status, r.code) == (409, "host_offline"), r
    r = create(server, renter, small.image, host=small.node_id)
    assert r.status == 201, r


def test_t423_placement_refuses_when_cpu_is_given_out(make_server):
    """A host's CPU held by an instance in no-GPU mode is not there for new
    GPUs: they stay free, yet no instance gets them."""
    server = make_server(RESERVE)
    # 3 cores - 1 reserved = 2, 1 per GPU; memory plenty
    host = Host(server, cores=3, memory_mib=64 * 1024, gpus=2)
    renter = Cluster(server, None).renter()
    t = renter["token"]
    r = create(server, renter, host.image, host=host.node_id)
    assert r.status == 201, r
    iid = r.json["id"]
    assert r.json["cpu_cores"] == 1.0
    host.report(iid, "running")
    assert server.request("POST", f"/v1/instances/{iid}/stop", {}, token=t).status == 200
    host.report(iid, "stopped")
    assert offers(server, t)[(host.node_id, MODEL)]["gpus_free"] == 2
    r = server.request("POST", f"/v1/instances/{iid}/start", {"mode": "nogpu"}, token=t)
    assert r.status == 200, r
    # no-GPU mode holds half a core (instances.nogpu_millicores) of the 2
    assert host.desired()[iid]["cpu_millicores"] == 500
    o = offers(server, t)[(host.node_id, MODEL)]
    assert (o["gpus_total"], o["gpus_free"]) == (2, 1)
    assert offers(server, t, "?min_free=2") == {}
    r = create(server, renter, host.image, gpus=2)
    assert (r.status, r.code) == (409, "insufficient_cpu"), r
    assert "most one host can give now is 1" in r.json["error"]["message"], r
    r = create(server, renter, host.image, gpus=2, host=host.node_id)
    assert (r.status, r.code) == (409, "insufficient_cpu"), r
    r = create(server, renter, host.image, gpus=1)
    assert r.status == 201, r


def test_t424_a_stopped_instance_starts_only_where_cpu_is_left(make_server):
    server = make_server(RESERVE)
    # (4 - 1) cores / 3 GPUs: 1 a GPU
    host = Host(server, cores=4, memory_mib=64 * 1024, gpus=3)
    renter = Cluster(server, None).renter()
    t = renter["token"]
    a, c = (create(server, renter, host.image).json["id"] for _ in range(2))
    for iid in (a, c):
        host.report(iid, "running")
        assert server.request("POST", f"/v1/instances/{iid}/stop", {}, token=t).status == 200
        host.report(iid, "stopped")
    assert server.request("POST", f"/v1/instances/{a}/start", {"mode": "nogpu"},
                          token=t).status == 200
    r = create(server, renter, host.image, gpus=2)
    assert r.status == 201, r
    # 2.5 of 3 cores held, 1 GPU free: c's start needs a core
    r = server.request("POST", f"/v1/instances/{c}/start", {}, token=t)
    assert (r.status, r.code) == (409, "insufficient_cpu"), r
    assert "no-GPU mode" in r.json["error"]["message"], r
    # no-GPU mode, the way to its data, starts: its half core shares the
    # cores (memory is checked; there is plenty)
    r = server.request("POST", f"/v1/instances/{c}/start", {"mode": "nogpu"}, token=t)
    assert r.status == 200, r


def test_t425_memory_is_checked_too(make_server):
    """Memory as CPU; and no-GPU mode, the way to one's data on a host whose
    GPUs are all rented, may use the reserve but never more than the host."""
    server = make_server({**RESERVE, "instances.nogpu_memory_mib": "8192"})
    # memory (20 - 4 reserved) / 2 = 8 GiB a GPU; CPU plenty
    host = Host(server, cores=64, memory_mib=20 * 1024, gpus=2)
    renter = Cluster(server, None).renter()
    t = renter["token"]
    a = create(server, renter, host.image).json["id"]
    host.report(a, "running")
    assert server.request("POST", f"/v1/instances/{a}/stop", {}, token=t).status == 200
    host.report(a, "stopped")
    r = create(server, renter, host.image, gpus=2)
    assert r.status == 201, r
    b = r.json["id"]
    # 16 GiB given, 4 GiB left with the reserve: not the 8 GiB it needs
    r = server.request("POST", f"/v1/instances/{a}/start", {"mode": "nogpu"}, token=t)
    assert (r.status, r.code) == (409, "insufficient_memory"), r
    assert server.request("POST", f"/v1/instances/{b}/release", {}, token=t).status == 200
    host.heartbeat([{"id": b, "state": "absent"}])
    assert server.request("POST", f"/v1/instances/{a}/start", {"mode": "nogpu"},
                          token=t).status == 200
    # a's 8 GiB in no-GPU mode leave 8 GiB: one GPU's worth, not two
    r = create(server, renter, host.image, gpus=2)
    assert (r.status, r.code) == (409, "insufficient_memory"), r
    assert create(server, renter, host.image, gpus=1).status == 201


def test_t426_the_cli_lists_hosts_and_pins_one(world, tmp_path):
    server, small, big, renter = world
    cli = Cli(server, str(tmp_path))
    cli.run("login", "--email", renter["email"], "--password-stdin", input=PASSWORD + "\n",
            check=True)
    p = cli.run("market", check=True)
    lines = p.stdout.splitlines()
    assert "HOST" in lines[0] and "CPU/GPU" in lines[0] and "CUDA" in lines[0], p.stdout
    row = [ln for ln in lines if small.node_id in ln][0]
    assert small.name in row and "1.12" in row and "4 GiB" in row and "8/8" in row, row
    assert "12.2" in row and "550.54.15" in row
    p = cli.run("market", "--min-free", "5", check=True)
    assert small.node_id in p.stdout and big.node_id not in p.stdout
    p = cli.run("-o", "json", "market", "--cuda", "12", "--gpu-model", MODEL, "--min-vram", "24",
                check=True)
    got = [o["node_id"] for reg in json.loads(p.stdout)["items"] for o in reg["hosts"]]
    assert got == [small.node_id]
    p = cli.run("market", "--cuda", "twelve")
    assert p.returncode != 0 and "cuda" in p.stderr, p
    p = cli.run("-o", "json", "create", "--gpu-model", MODEL, "--image", small.image,
                "--data-disk", "10", "--host", big.node_id, "--no-wait", check=True)
    assert json.loads(p.stdout)["node_id"] == big.node_id
    p = cli.run("create", "--gpu-model", MODEL, "--image", small.image, "--data-disk", "10",
                "--gpus", "8", "--host", big.node_id, "--no-wait")
    assert p.returncode != 0 and "suanli market" in p.stderr, p


# --- inside a real instance ------------------------------------------------

def meminfo_kib(text, key):
    return int(re.search(rf"^{key}:\s+(\d+) kB", text, re.M).group(1))


@pytest.mark.skipif(chrooted() is not None, reason=str(chrooted()))
def test_t427_an_instance_sees_its_own_cpu_and_memory(cluster):
    user = cluster.renter()
    inst = cluster.create(user, data_disk_gib=5)
    try:
        mib, cores = inst["memory_mib"], inst["cpu_cores"]
        out = cluster.ssh(user, inst, "cat /proc/meminfo; echo ===; nproc; echo ===; free -m; "
                          "echo ===; grep -c ^processor /proc/cpuinfo").stdout
        meminfo, nproc, free, cpuinfo = out.split("===\n")
        assert meminfo_kib(meminfo, "MemTotal") == mib * 1024, meminfo
        assert int(nproc) == max(1, -(-int(cores * 1000) // 1000)), (nproc, cores)
        total = int(free.splitlines()[1].split()[1])
        assert total == mib, free
        assert int(cpuinfo) == int(nproc)
    finally:
        cluster.verb(user, inst["id"], "release")
    # lxcfs outlives nothing it must: killed, it is started again for the
    # next instance (node/lxcfs.h), which sees its own figures
    pidfile = os.path.join(cluster.node.data_dir, "lxcfs.pid")
    with open(pidfile) as f:
        old = int(f.read().split()[0])
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: not process_alive(old), timeout=10, what="lxcfs to die")
    again = cluster.create(user, data_disk_gib=5)
    try:
        out = cluster.ssh(user, again, "cat /proc/meminfo").stdout
        assert meminfo_kib(out, "MemTotal") == again["memory_mib"] * 1024, out
        with open(pidfile) as f:
            assert int(f.read().split()[0]) != old
    finally:
        cluster.verb(user, again["id"], "release")


@pytest.mark.skipif(chrooted() is not None, reason=str(chrooted()))
def test_t427_neighbours_each_see_their_own_figures(cluster):
    """Two instances on one host with different shares (1 and 2 GPUs): each
    sees its own memory and CPUs, not the other's nor the host's, at once."""
    user = cluster.renter()
    one = cluster.create(user, gpus=1, data_disk_gib=5)
    two = cluster.create(user, gpus=2, data_disk_gib=5)
    try:
        assert one["memory_mib"] != two["memory_mib"], (one, two)
        for inst in (one, two, one):
            out = cluster.ssh(user, inst, "cat /proc/meminfo; echo ===; nproc").stdout
            meminfo, nproc = out.split("===\n")
            assert meminfo_kib(meminfo, "MemTotal") == inst["memory_mib"] * 1024, (inst, meminfo)
            assert int(nproc) == max(1, -(-int(inst["cpu_cores"] * 1000) // 1000)), (inst, nproc)
    finally:
        cluster.verb(user, one["id"], "release")
        cluster.verb(user, two["id"], "release")


def test_t428_a_memory_hog_is_oom_killed_inside(cluster):
    user = cluster.renter()
    inst = cluster.create(user, data_disk_gib=5)
    try:
        mib = inst["memory_mib"]
        # python is not in the image: a shell doubling a string grows past
        # any limit; the kernel kills it inside the instance's cgroup
        hog = ("x=x; while :; do x=$x$x; done")
        p = cluster.ssh(user, inst, f"timeout 120 sh -c '{hog}'; echo rc=$?", check=False,
                        timeout=180)
        assert "rc=137" in p.stdout, (p.stdout, p.stderr, mib)
        # the instance and its sshd live on
        assert cluster.ssh(user, inst, "echo alive").stdout.strip() == "alive"
        # the kill was its cgroup's, at its own limit, which the host can give
        assert mib * 1024 * 1024 <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        with open(f"/sys/fs/cgroup/memory/suanli/{inst['id']}/memory.limit_in_bytes") as f:
            assert int(f.read()) == mib << 20

        def oom_event():
            r = cluster.server.request("GET", f"/v1/instances/{inst['id']}/events",
                                       token=user["token"])
            return [e for e in r.json["items"] if e["kind"] == "oom"]
        wait_for(oom_event, timeout=30, what="the instance's oom event")
    finally:
        cluster.verb(user, inst["id"], "release")


# --- across real hosts -----------------------------------------------------

def test_t429_the_market_across_real_agents_and_a_pinned_host(fleet):
    """Three real agents: each is an offer of its own, with what its agent
    reports (its name, simulated driver and CUDA, its share per GPU); an
    instance pinned to the second lands there, with that share, and sees it
    inside; a full host is refused with the way to one that has room."""
    user = fleet.renter()
    got = offers(fleet.server, user["token"], "?gpu_model=RTX%204090")
    mine = {n.node_id: got[(n.node_id, MODEL)] for n in fleet.nodes}
    for node in fleet.nodes:
        o = mine[node.node_id]
        host = fleet.server.request("GET", f"/v1/admin/nodes/{node.node_id}",
                                    token=fleet.server.admin_token).json
        assert o["hostname"] == host["hostname"] and o["gpus_total"] == 2, o
        assert (o["driver_version"], o["cuda_version"], o["simulated"]) == \
            ("simulated", "simulated", True)
        # a real host's share: its cores and memory less the default 2 GiB
        # reserve, between its 2 GPUs, at most the catalog's
        assert o["cpu_millicores_per_gpu"] == min(16000, host["cpu_cores"] * 1000 // 2), o
        assert o["memory_mib_per_gpu"] == min(122880, (host["memory_mib"] - 2048) // 2), o
    # the CUDA filter leaves simulated hosts out
    assert not any(n for (n, _) in offers(fleet.server, user["token"], "?cuda=11")
                   if n in mine)
    target = fleet.nodes[1]
    name = mine[target.node_id]["hostname"]
    r = fleet.create(user, gpus=2, data_disk_gib=5, host=name, wait=False)
    assert r.status == 201 and r.json["node_id"] == target.node_id, r
    inst = fleet.wait_state(user, r.json["id"], "running", timeout=120)
    try:
        o = mine[target.node_id]
        assert inst["memory_mib"] == 2 * o["memory_mib_per_gpu"]
        assert inst["cpu_cores"] * 1000 == 2 * o["cpu_millicores_per_gpu"]
        if not chrooted():
            out = fleet.ssh(user, inst, "cat /proc/meminfo").stdout
            assert meminfo_kib(out, "MemTotal") == inst["memory_mib"] * 1024, out
        assert offers(fleet.server, user["token"])[(target.node_id, MODEL)]["gpus_free"] == 0
        r = fleet.create(user, gpus=1, data_disk_gib=5, host=target.node_id, wait=False)
        assert (r.status, r.code) == (409, "host_full"), r
        assert "suanli market --gpu-model 'RTX 4090' --min-free 1" in r.json["error"]["message"]
    finally:
        fleet.verb(user, inst["id"], "release")
        fleet.wait_state(user, inst["id"], "released", timeout=120)
