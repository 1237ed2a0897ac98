"""Placement under contention: 100 concurrent creates against a host with 8
GPUs end with exactly 8 instances on distinct GPUs and distinct SSH ports,
and a clear refusal for every other request. A host promises instance disks
only as far as it can hold them, also under concurrent creates."""
import os
from concurrent.futures import ThreadPoolExecutor

from conftest import ApiHost, Cluster, host_leftovers, wait_for


def test_100_concurrent_creates_on_8_gpus(cluster):
    renters = [cluster.renter() for _ in range(4)]
    body = {"gpu_model": "RTX 4090", "gpus": 1, "image": "debian-12", "data_disk_gib": 5}

    def create(i):
        user = renters[i % len(renters)]
        return user, cluster.server.request("POST", "/v1/instances", body, token=user["token"])

    with ThreadPoolExecutor(max_workers=100) as pool:
        results = list(pool.map(create, range(100)))
    made = [(u, r.json) for u, r in results if r.status == 201]
    refused = [r for _, r in results if r.status != 201]
    try:
        assert len(made) == 8, [r for _, r in results][:3]
        assert len(refused) == 92
        for r in refused:
            assert r.status == 409 and r.code == "no_capacity", r
            assert "RTX 4090" in r.json["error"]["message"]
        gpus = [g for _, inst in made for g in inst["gpu_indices"]]
        assert sorted(gpus) == list(range(8))
        ports = {inst["ssh"]["port"] for _, inst in made}
        assert len(ports) == 8
        running = [cluster.wait_state(u, inst["id"], "running", timeout=120) for u, inst in made]
        # every one of them is a real machine answering on its own port
        for (u, _), inst in zip(made, running):
            assert cluster.ssh(u, inst, "hostname").stdout.strip() == inst["id"]
        nodes = cluster.server.request("GET", "/v1/admin/nodes",
                                       token=cluster.server.admin_token).json["items"]
        assert nodes[0]["gpus_free"] == 0
    finally:
        for u, inst in made:
            cluster.verb(u, inst["id"], "release")
        for u, inst in made:
            cluster.wait_state(u, inst["id"], "released", timeout=120)
    for _, inst in made:
        assert host_leftovers(cluster.node.data_dir, inst["id"], inst["ssh"]["port"]) == []
    nodes = cluster.server.request("GET", "/v1/admin/nodes",
                                   token=cluster.server.admin_token).json["items"]
    assert nodes[0]["gpus_free"] == 8


# ---------------------------------------------------------------------------
# Disk promises (issue 10, item 4). Instance disks are sparse files: a host
# that promised more than it holds lets one renter filling their disk break
# every instance there. Placement keeps the promises (system + data disks of
# the instances not released) within what the host reports it can hold:
# free bytes + bytes its disk files already take, less the reserve, plus the
# overcommit.

GIB = 1 << 30
SYSTEM = 30  # instances.system_disk_gib


def create(server, user, data_disk_gib, image):
    return server.request("POST", "/v1/instances",
                          {"gpu_model": "RTX 4090", "gpus": 1, "image": image,
                           "data_disk_gib": data_disk_gib}, token=user["token"])


def test_disk_promises_stay_within_what_the_host_holds(make_server):
    server = make_server({"nodes.disk_reserve_gib": "10", "nodes.disk_overcommit_percent": "0"})
    host = ApiHost(server, free_gib=150)  # holds 140 GiB for instance disks
    user = Cluster(server, None).renter()
    assert host.disk() == {"free_bytes": 150 * GIB, "instance_disks_bytes": 0, "reserve_gib": 10,
                           "overcommit_percent": 0, "capacity_gib": 140, "promised_gib": 0}

    assert create(server, user, 50, host.image).status == 201  # 80 promised
    r = create(server, user, 50, host.image)  # 80 more: 160 > 140
    assert r.status == 409 and r.code == "insufficient_disk", r
    msg = r.json["error"]["message"]
    assert "the most that fits now is a 30 GiB data disk" in msg, msg
    assert "smaller data disk" in msg and "another region" in msg, msg
    assert create(server, user, 30, host.image).status == 201  # exactly full
    assert host.disk()["promised_gib"] == 140
    r = create(server, user, 1, host.image)
    assert r.status == 409 and r.code == "insufficient_disk", r
    assert "has disk room left for another instance" in r.json["error"]["message"], r
    # nothing half-made: the refused creates hold no GPU and no instance
    items = server.request("GET", "/v1/instances?state=all", token=user["token"]).json["items"]
    assert len(items) == 2

    # what the disk files take counts as held: the disks fill, the free
    # bytes shrink by as much, the promises still fit
    host.free_bytes, host.disks_bytes = 100 * GIB, 50 * GIB
    host.heartbeat()
    assert host.disk()["capacity_gib"] == 140
    # free space taken by something else (images, logs) is not the disks'
    host.free_bytes = 60 * GIB
    host.heartbeat()
    assert host.disk()["capacity_gib"] == 100

    r = create(server, user, 1, host.image)
    assert r.status == 409 and r.code == "insufficient_disk", r

    # an overcommit lets the host promise that much more: (100 + 50 - 10) x 1.5
    server.settings["nodes.disk_overcommit_percent"] = "50"
    server.restart()
    host.free_bytes = 100 * GIB
    host.heartbeat()
    assert host.disk()["capacity_gib"] == 210
    r = create(server, user, 41, host.image)
    assert r.status == 409 and "a 40 GiB data disk" in r.json["error"]["message"], r
    assert create(server, user, 40, host.image).status == 201
    assert host.disk()["promised_gib"] == 210


def test_concurrent_creates_cannot_overpromise_a_disk(make_server):
    server = make_server({"nodes.disk_reserve_gib": "0", "nodes.disk_overcommit_percent": "0"})
    host = ApiHost(server, free_gib=140)
    users = [Cluster(server, None).renter() for _ in range(3)]

    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(lambda i: create(server, users[i % 3], 15, host.image),
                                range(20)))
    made = [r for r in results if r.status == 201]
    assert len(made) == 3, results[:3]  # 3 x 45 GiB = 135 <= 140 < 180
    assert all(r.status == 409 and r.code == "insufficient_disk" for r in results
               if r.status != 201), results
    assert host.disk()["promised_gib"] == 135


def test_the_agent_reports_what_its_disk_holds(cluster):
    """The real agent's figures: its data directory's free bytes and what
    its instance disk files take (sparse: far less than their size)."""
    user = cluster.renter()
    inst = cluster.create(user, data_disk_gib=5)
    try:
        cluster.ssh(user, inst, "head -c 64M /dev/urandom > /root/data/fill && sync")
        d = cluster.node.data_dir

        def files_bytes():
            total = 0
            for iid in os.listdir(os.path.join(d, "instances")):
                for f in ("system.img", "data.img"):
                    p = os.path.join(d, "instances", iid, f)
                    if os.path.exists(p):
                        total += os.stat(p).st_blocks * 512
            return total

        def reported():
            n = cluster.server.request("GET", f"/v1/admin/nodes/{cluster.node.node_id}",
                                       token=cluster.server.admin_token).json
            disk = n["disk"]
            # the 64 MiB written reached the data disk's file
            return disk if abs(disk["instance_disks_bytes"] - files_bytes()) < 16 << 20 \
                and disk["instance_disks_bytes"] >= 64 << 20 else None
        disk = wait_for(reported, timeout=20, interval=0.5, what="the disk figures reported")
        vfs = os.statvfs(d)
        assert abs(disk["free_bytes"] - vfs.f_bavail * vfs.f_frsize) < 2 * GIB, disk
        # sparse: far less taken than promised
        assert disk["instance_disks_bytes"] < disk["promised_gib"] * GIB // 4, disk
        assert disk["promised_gib"] >= SYSTEM + 5
    finally:
        cluster.verb(user, inst["id"], "release")
        cluster.wait_state(user, inst["id"], "released", timeout=120)
