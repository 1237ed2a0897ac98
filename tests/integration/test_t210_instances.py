"""Instances for real: a runc container on the agent's host, overlay root on a
sparse ext4 system disk, an ext4 data disk, SSH by key through the mapped
port, and the lifecycle of DESIGN.md section 3."""
import subprocess

from conftest import host_leftovers


def test_create_ssh_inside_and_lifecycle(cluster):
    user = cluster.renter()
    inst = cluster.create(user, gpus=2, data_disk_gib=20)
    iid, port = inst["id"], inst["ssh"]["port"]
    assert inst["state"] == "running" and inst["simulated_gpus"] is True
    assert len(inst["gpu_indices"]) == 2
    assert inst["ssh"]["command"] == f"ssh -p {port} root@127.0.0.1"
    # two GPUs' share of the host (docs/design/control-plane.md, "Offers per
    # host"): never more than it has, whatever the catalog says (16 cores and
    # 120 GiB a 4090)
    host = cluster.server.request("GET", f"/v1/admin/nodes/{inst['node_id']}",
                                  token=cluster.server.admin_token).json
    share_cpu = min(16000, host["cpu_cores"] * 1000 // 8)
    share_mem = min(122880, (host["memory_mib"] - 2048) // 8)
    assert inst["cpu_cores"] == 2 * share_cpu / 1000 and inst["memory_mib"] == 2 * share_mem

    out = cluster.ssh(user, inst, "hostname; findmnt -no FSTYPE /; findmnt -no FSTYPE /root/data;"
                      " df -BG --output=size /root/data | tail -1; df -BG --output=size / | tail -1;"
                      " echo NV=$NVIDIA_VISIBLE_DEVICES CUDA=$CUDA_VISIBLE_DEVICES").stdout.split()
    gpus = ",".join(str(i) for i in inst["gpu_indices"])
    assert out[0] == iid
    assert out[1] == "overlay" and out[2] == "ext4"
    assert 18 <= int(out[3].rstrip("G")) <= 20, out
    assert 28 <= int(out[4].rstrip("G")) <= 30, out
    assert out[5] == f"NV={gpus}" and out[6] == f"CUDA={gpus}"

    # SFTP works (VS Code Remote-SSH and scp use it)
    batch = subprocess.run(
        ["sftp", "-i", user["key"], "-P", str(port), "-o", "StrictHostKeyChecking=no",
         "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-b", "-",
         "root@127.0.0.1"], input="put /etc/hostname /root/data/uploaded\nls /root/data\n",
        capture_output=True, text=True, timeout=30)
    assert batch.returncode == 0 and "uploaded" in batch.stdout, batch.stderr

    # files anywhere and "installed" programs survive stop/start
    cluster.ssh(user, inst, "echo data > /root/data/keep; echo sys > /root/keep;"
                " printf '#!/bin/sh\\necho tool\\n' > /usr/local/bin/mytool;"
                " chmod +x /usr/local/bin/mytool")
    r = cluster.verb(user, iid, "stop")
    assert r.status == 200 and r.json["state"] in ("stopping", "stopped")
    stopped = cluster.wait_state(user, iid, "stopped")
    assert stopped["gpu_indices"] == []
    assert cluster.ssh(user, inst, "true", check=False).returncode != 0

    # no-GPU mode: no GPUs, a small CPU share, the same disks
    r = cluster.verb(user, iid, "start", {"mode": "nogpu"})
    assert r.status == 200, r
    inst2 = cluster.wait_state(user, iid, "running")
    assert inst2["mode"] == "nogpu" and inst2["gpu_indices"] == [] and inst2["cpu_cores"] == 0.5
    out = cluster.ssh(user, inst2, "cat /root/data/keep /root/keep; mytool;"
                      " echo NV=$NVIDIA_VISIBLE_DEVICES").stdout.split()
    assert out == ["data", "sys", "tool", "NV=void"]

    # restart keeps everything and comes back
    assert cluster.verb(user, iid, "restart").status == 200
    inst3 = cluster.wait_state(user, iid, "running")
    assert cluster.ssh(user, inst3, "cat /root/keep").stdout.strip() == "sys"

    # back to GPU mode
    assert cluster.verb(user, iid, "stop").status == 200
    cluster.wait_state(user, iid, "stopped")
    assert cluster.verb(user, iid, "start", {"mode": "gpu"}).status == 200
    inst4 = cluster.wait_state(user, iid, "running")
    assert inst4["mode"] == "gpu" and len(inst4["gpu_indices"]) == 2

    events = cluster.server.request("GET", f"/v1/instances/{iid}/events",
                                    token=user["token"]).json["items"]
    kinds = [e["kind"] for e in events]
    assert kinds[:2] == ["create", "running"] and "stopped" in kinds and "restart" in kinds
    assert all(e["reason"] in ("user", "node") for e in events)

    # release leaves nothing of it on the host
    assert cluster.verb(user, iid, "release").status == 200
    cluster.wait_state(user, iid, "released")
    assert host_leftovers(cluster.node.data_dir, iid, port) == []
    listed = cluster.server.request("GET", "/v1/instances", token=user["token"]).json["items"]
    assert iid not in [i["id"] for i in listed]
    every = cluster.server.request("GET", "/v1/instances?state=all",
                                   token=user["token"]).json["items"]
    assert iid in [i["id"] for i in every]


def test_start_without_free_gpus_names_the_ways_out(cluster):
    user = cluster.renter()
    small = cluster.create(user, gpus=1, data_disk_gib=5)
    assert cluster.verb(user, small["id"], "stop").status == 200
    cluster.wait_state(user, small["id"], "stopped")
    other = cluster.renter()
    big = cluster.create(other, gpus=8, data_disk_gib=5)
    try:
        r = cluster.verb(user, small["id"], "start")
        assert r.status == 409 and r.code == "gpus_unavailable", r
        msg = r.json["error"]["message"]
        assert "no-GPU mode" in msg and "wait" in msg and "clone" in msg
        assert cluster.get(user, small["id"])["state"] == "stopped"
        # the no-GPU way out works at once
        assert cluster.verb(user, small["id"], "start", {"mode": "nogpu"}).status == 200
        cluster.wait_state(user, small["id"], "running")
    finally:
        for u, i in ((other, big), (user, small)):
            cluster.verb(u, i["id"], "release")
            cluster.wait_state(u, i["id"], "released")
    assert host_leftovers(cluster.node.data_dir, small["id"], small["ssh"]["port"]) == []


def test_others_cannot_see_or_touch_an_instance(cluster):
    owner, stranger = cluster.renter(), cluster.renter(credit_micros=0)
    r = cluster.create(owner, gpus=1, data_disk_gib=5, wait=False)
    assert r.status == 201
    iid = r.json["id"]
    s = cluster.server
    try:
        for method, path in (("GET", f"/v1/instances/{iid}"),
                             ("GET", f"/v1/instances/{iid}/events"),
                             ("POST", f"/v1/instances/{iid}/stop"),
                             ("POST", f"/v1/instances/{iid}/release")):
            r = s.request(method, path, {} if method == "POST" else None,
                          token=stranger["token"])
            assert r.status == 404, (path, r)
        assert s.request("GET", "/v1/instances", token=stranger["token"]).json["items"] == []
        cluster.wait_state(owner, iid, "running")
    finally:
        cluster.verb(owner, iid, "release")
        cluster.wait_state(owner, iid, "released")
