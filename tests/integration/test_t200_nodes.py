"""Hosts: join tokens, enrollment of the real agent, simulated GPUs shown as
such, heartbeats, offline detection, and the market's supply."""
import os
import shutil
import tempfile

from conftest import Node, cleanup_host, side_network, wait_for

NET = side_network(3, "nd")


def market_model(server, token, name="RTX 4090"):
    r = server.request("GET", "/v1/market", token=token)
    assert r.status == 200, r
    return [m for m in r.json["items"][0]["gpu_models"] if m["name"] == name][0]


def test_enroll_heartbeat_offline_and_market(make_server):
    server = make_server({"nodes.offline_after": "2s", "nodes.heartbeat_interval": "1s"})
    admin = server.admin_token
    renter = server.register()
    assert market_model(server, renter["token"])["gpus_total"] == 0

    r = server.request("POST", "/v1/admin/join-tokens", {"region": "sample-1"}, token=admin)
    assert r.status == 201 and r.json["token"].startswith("sl_"), r
    listed = server.request("GET", "/v1/admin/join-tokens", token=admin).json["items"]
    assert [t["id"] for t in listed] == [r.json["id"]] and "token" not in listed[0]
    assert (listed[0]["uses"], listed[0]["max_uses"]) == (0, 1)

    d = tempfile.mkdtemp(prefix="suanli-node-", dir="/var/tmp")
    node = Node(server, d, r.json["token"], gpus="4:RTX 4090", network=NET)
    try:
        node.start()
        nodes = server.request("GET", "/v1/admin/nodes", token=admin).json["items"]
        assert len(nodes) == 1
        n = nodes[0]
        assert n["id"] == node.node_id and n["state"] == "online"
        assert n["simulated"] is True and n["gpus_total"] == 4 and n["gpus_free"] == 4
        assert all(g["simulated"] and g["model"] == "RTX 4090" for g in n["gpus"])
        assert n["cpu_cores"] >= 1 and n["memory_mib"] > 0 and n["disk_total_gib"] > 0
        # what it can hold for instance disks (placement keeps promises in it)
        vfs = os.statvfs(d)
        assert abs(n["disk"]["free_bytes"] - vfs.f_bavail * vfs.f_frsize) < 2 << 30, n["disk"]
        assert n["disk"]["instance_disks_bytes"] == 0 and n["disk"]["promised_gib"] == 0
        assert n["driver_version"] == "simulated"
        # the identity is kept, secret, for restarts
        assert os.stat(os.path.join(d, "node.json")).st_mode & 0o777 == 0o600

        m = market_model(server, renter["token"])
        assert (m["gpus_total"], m["gpus_free"], m["hosts"], m["simulated_gpus"]) == (4, 4, 1, 4)

        # heartbeats keep it online; silence makes it offline and leaves the market
        first = n["last_heartbeat"]
        wait_for(lambda: server.request("GET", f"/v1/admin/nodes/{node.node_id}",
                                        token=admin).json["last_heartbeat"] != first,
                 timeout=10, what="a new heartbeat")
        node.stop()
        wait_for(lambda: server.request("GET", f"/v1/admin/nodes/{node.node_id}",
                                        token=admin).json["state"] == "offline",
                 timeout=10, what="offline")
        assert market_model(server, renter["token"])["gpus_total"] == 0

        # a restarted agent keeps its identity: no second node
        node.join_token = "not-needed-any-more"
        node.start()
        wait_for(lambda: server.request("GET", f"/v1/admin/nodes/{node.node_id}",
                                        token=admin).json["state"] == "online",
                 timeout=10, what="online again")
        assert len(server.request("GET", "/v1/admin/nodes", token=admin).json["items"]) == 1
    finally:
        node.stop()
        cleanup_host(d, bridge=NET[0], prefix=NET[2])
        shutil.rmtree(d, ignore_errors=True)


def test_bad_join_token_is_refused_clearly(server, tmp_path):
    node = Node(server, str(tmp_path / "node"), "sl_wrong", network=NET)
    try:
        node.start(timeout=10)
        raise AssertionError("the agent enrolled with a bad join token")
    except RuntimeError as e:
        assert "join token is not valid" in str(e), e
    finally:
        node.stop()


def test_node_routes_need_the_node_token(server):
    admin = server.admin_token
    r = server.request("POST", "/v1/admin/join-tokens", {"region": "sample-1", "max_uses": 3},
                       token=admin)
    inv = {"cpu_cores": 2, "memory_mib": 1024,
           "gpus": [{"index": 0, "uuid": "GPU-x", "name": "NVIDIA GeForce RTX 4090",
                     "vram_mib": 24564}]}
    a = server.request("POST", "/v1/nodes/enroll", {"join_token": r.json["token"],
                                                    "hostname": "a", "address": "127.0.0.1",
                                                    "inventory": inv})
    b = server.request("POST", "/v1/nodes/enroll", {"join_token": r.json["token"],
                                                    "hostname": "b", "address": "127.0.0.1",
                                                    "inventory": inv})
    assert a.status == b.status == 201
    # NVML's full name maps to the catalog model; it is not simulated
    g = a.json["node"]["gpus"][0]
    assert g["model"] == "RTX 4090" and g["simulated"] is False
    a_id, a_tok, b_tok = a.json["node_id"], a.json["node_token"], b.json["node_token"]
    hb = {"inventory": inv}
    assert server.request("POST", f"/v1/nodes/{a_id}/heartbeat", hb).status == 401
    assert server.request("POST", f"/v1/nodes/{a_id}/heartbeat", hb, token=b_tok).status == 404
    assert server.request("GET", f"/v1/nodes/{a_id}/desired", token=b_tok).status == 404
    assert server.request("POST", f"/v1/nodes/{a_id}/heartbeat", hb, token=a_tok).status == 200
    d = server.request("GET", f"/v1/nodes/{a_id}/desired", token=a_tok)
    assert d.status == 200 and d.json["instances"] == [] and d.json["revision"] >= 1
    # a node token is not a user's
    assert server.request("GET", "/v1/me", token=a_tok).status == 401
    # a revoked join token enrolls nothing more
    assert server.request("DELETE", f"/v1/admin/join-tokens/{r.json['id']}",
                          token=admin).status == 204
    c = server.request("POST", "/v1/nodes/enroll", {"join_token": r.json["token"],
                                                    "hostname": "c", "address": "127.0.0.1",
                                                    "inventory": inv})
    assert c.status == 401 and c.code == "invalid_join_token"
