"""Placement under contention: 100 concurrent creates against a host with 8
GPUs end with exactly 8 instances on distinct GPUs and distinct SSH ports,
and a clear refusal for every other request."""
from concurrent.futures import ThreadPoolExecutor

from conftest import host_leftovers


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
