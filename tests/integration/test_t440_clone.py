"""Clones across hosts (issue 12, item 3): a stopped instance's system and
data disks copied agent to agent into a new instance on another host,
checked block by block and resumable; the source untouched. The transfer
endpoint serves an export only to the bearer of its one-time token: not to
a renter's instance, a rogue node or the holder of another export's token.
A copy that cannot finish leaves nothing half-made."""
import hashlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from conftest import ApiHost, Cli, wait_for

TRANSFER_PORT = 8790


def clone(fleet, user, iid, **body):
    return fleet.server.request("POST", f"/v1/instances/{iid}/clone", body, token=user["token"])


def stopped_source(fleet, user, node, data_disk_gib=5, setup=None):
    inst = fleet.create(user, gpus=1, data_disk_gib=data_disk_gib, host=node.node_id)
    assert inst["node_id"] == node.node_id, inst
    if setup:
        fleet.ssh(user, inst, setup, timeout=300)
    r = fleet.verb(user, inst["id"], "stop")
    assert r.status == 200, r
    fleet.wait_state(user, inst["id"], "stopped")
    return inst


def transfer_get(node, path, token=None, timeout=10):
    """GET on a host's transfer endpoint: (status, headers, body)."""
    req = urllib.request.Request(f"http://{node.address}:{TRANSFER_PORT}{path}")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def node_token(node):
    with open(os.path.join(node.data_dir, "node.json")) as f:
        return json.load(f)["node_token"]


def desired(fleet, node):
    r = fleet.server.request("GET", f"/v1/nodes/{node.node_id}/desired",
                             token=node_token(node))
    assert r.status == 200, r
    return r.json


def copy_from(fleet, node, iid):
    for d in desired(fleet, node)["instances"]:
        if d["id"] == iid:
            return d.get("copy_from")
    return None


def files_of(node, iid):
    d = os.path.join(node.data_dir, "instances", iid)
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def release(fleet, user, *iids):
    for iid in iids:
        fleet.verb(user, iid, "release")
    for iid in iids:
        fleet.wait_state(user, iid, "released", timeout=120)


def test_clone_to_another_host_copies_both_disks_and_is_a_new_machine(fleet, tmp_path):
    user = fleet.renter()
    a, b = fleet.nodes[0], fleet.nodes[1]
    src = fleet.create(user, gpus=1, data_disk_gib=5, host=a.node_id)
    made = [src["id"]]
    try:
        fleet.ssh(user, src, "echo system-disk-$RANDOM$RANDOM > /root/on-system.txt &&"
                  " head -c 64M /dev/urandom > /root/data/on-data.bin && sync")
        sums = fleet.ssh(user, src, "cd /root && sha256sum on-system.txt data/on-data.bin").stdout
        key = fleet.ssh(user, src, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.strip()
        # only a stopped instance is cloned: its disks must not change
        r = clone(fleet, user, src["id"], host=b.node_id)
        assert r.status == 409 and r.code == "instance_not_stopped", r
        assert f"suanli stop {src['id']}" in r.json["error"]["message"]
        # a stranger's instance is not there at all
        stranger = fleet.renter()
        r = clone(fleet, stranger, src["id"], host=b.node_id)
        assert r.status == 404 and r.code == "no_such_instance", r
        assert fleet.verb(user, src["id"], "stop").status == 200
        fleet.wait_state(user, src["id"], "stopped")

        cli = Cli(fleet.server, str(tmp_path / "home"))
        started = time.monotonic()
        p = cli.run("-o", "json", "clone", src["id"], "--host", b.node_id, "--name", "the-clone",
                    env={"SUANLI_TOKEN": user["token"]}, timeout=300)
        took = time.monotonic() - started
        assert p.returncode == 0, p.stdout + p.stderr + "".join(n.log_text()[-2000:]
                                                                for n in (a, b)) + \
            "".join(line for line in open(fleet.server.log_path, errors="replace")
                    if b.node_id in line and "heartbeat" in line)[-3000:]
        new = json.loads(p.stdout)
        made.append(new["id"])
        assert new["state"] == "running" and new["node_id"] == b.node_id, new
        assert new["name"] == "the-clone" and new["copy"]["source_id"] == src["id"], new
        assert new["copy"]["state"] == "done", new
        assert new["ssh"]["host"] == b.address
        # the same files on both disks, on another machine
        assert fleet.ssh(user, new, "cd /root && sha256sum on-system.txt data/on-data.bin"
                         ).stdout == sums
        assert fleet.ssh(user, new, "hostname").stdout.strip() == new["id"]
        new_key = fleet.ssh(user, new, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.strip()
        assert new_key and new_key != key
        print(f"\nclone of a 64 MiB data disk: running with SSH {took:.1f} s after the request")
        events = fleet.server.request("GET", f"/v1/instances/{new['id']}/events",
                                      token=user["token"]).json["items"]
        kinds = [e["kind"] for e in events]
        assert "copying" in kinds and "copied" in kinds, kinds
        # nothing of the copy is left beside the disks
        assert not [f for f in files_of(b, new["id"]) if f.endswith((".part", ".progress"))]
        # the export is gone: the token opens nothing any more
        status, _, body = transfer_get(a, f"/v1/exports/{src['id']}/system.img",
                                       token="sl_" + "x" * 43)
        assert status == 403, body

        # the source is untouched: stopped on its host, and starts as it was
        again = fleet.get(user, src["id"])
        assert again["state"] == "stopped" and again["node_id"] == a.node_id, again
        assert fleet.verb(user, src["id"], "start").status == 200
        again = fleet.wait_state(user, src["id"], "running")
        assert again["node_id"] == a.node_id
        assert fleet.ssh(user, again, "cd /root && sha256sum on-system.txt data/on-data.bin"
                         ).stdout == sums
        assert fleet.ssh(user, again, "cat /etc/ssh/ssh_host_ed25519_key.pub"
                         ).stdout.strip() == key
    finally:
        release(fleet, user, *made)


def test_a_planted_etc_ssh_link_does_not_steer_the_host_key_removal(fleet):
    """The renter's /etc/ssh is a link to /tmp/NAME: inside the instance a
    directory of its own disk, on the clone's host a host path. Removing the
    source's host keys from the copied tree follows no link, so the host's
    files of that name stay."""
    user = fleet.renter()
    a, b = fleet.nodes[0], fleet.nodes[1]
    name = f"suanli-canary-{os.getpid()}-{int(time.time())}"
    host_dir = os.path.join("/tmp", name)
    os.makedirs(host_dir)
    canary = os.path.join(host_dir, "ssh_host_canary_key")
    with open(canary, "w") as f:
        f.write("the host's, not the renter's\n")
    src = stopped_source(fleet, user, a, setup=f"cp -a /etc/ssh /tmp/{name} && rm -rf /etc/ssh"
                         f" && ln -s /tmp/{name} /etc/ssh && sync")
    made = [src["id"]]
    try:
        r = clone(fleet, user, src["id"], host=b.node_id)
        assert r.status == 201, r
        made.append(r.json["id"])
        new = fleet.wait_state(user, r.json["id"], "running", timeout=300)
        assert os.path.exists(canary), "the agent followed the renter's link onto the host"
        # the clone works: the link is the renter's own business
        assert fleet.ssh(user, new, "readlink /etc/ssh").stdout.strip() == f"/tmp/{name}"
    finally:
        release(fleet, user, *made)
        import shutil
        shutil.rmtree(host_dir, ignore_errors=True)


def test_a_copy_resumes_after_the_target_agent_is_killed_and_refuses_strangers(fleet):
    user = fleet.renter()
    a, b, c = fleet.nodes[0], fleet.nodes[1], fleet.nodes[2]
    # 1 GiB of random data: a copy that takes a while
    src = stopped_source(fleet, user, a, data_disk_gib=5,
                         setup="head -c 1G /dev/urandom > /root/data/big.bin && sync &&"
                               " sha256sum /root/data/big.bin > /root/big.sum")
    made = [src["id"]]
    # a neighbour: another renter's instance on the clone's host
    neighbour_user = fleet.renter()
    neighbour = fleet.create(neighbour_user, gpus=1, data_disk_gib=5, host=c.node_id)
    try:
        r = clone(fleet, user, src["id"], host=b.node_id)
        assert r.status == 201, r
        new = r.json
        made.append(new["id"])
        assert new["state"] == "copying", new
        progress = os.path.join(b.data_dir, "instances", new["id"], "data.img.progress")

        def recorded():
            try:
                with open(progress) as f:
                    size, nxt = map(int, f.read().split())
                return nxt if nxt >= 32 else None
            except (OSError, ValueError):
                return None
        wait_for(recorded, timeout=120, interval=0.02, what="the copy to record progress")
        b.stop(signal.SIGKILL)
        with open(progress) as f:
            at = int(f.read().split()[1])

        # while it copies, the source neither starts nor goes
        r = fleet.verb(user, src["id"], "start")
        assert r.status == 409 and r.code == "being_cloned", r
        assert new["id"] in r.json["error"]["message"]
        r = fleet.verb(user, src["id"], "release")
        assert r.status == 409 and r.code == "being_cloned", r
        # and it is shown
        shown = fleet.get(user, new["id"])
        assert shown["state"] == "copying" and shown["copy"]["state"] == "copying", shown

        # the export: nothing without the token, with a wrong one, with a
        # node's token, or for another instance with this token
        token = copy_from(fleet, b, new["id"])["token"]
        path = f"/v1/exports/{src['id']}/data.img/0"
        for t in (None, "", "sl_" + "A" * 43, token[:-1] + ("A" if token[-1] != "A" else "B"),
                  node_token(c), node_token(b)):
            status, headers, body = transfer_get(a, path, token=t)
            assert status == 403 and b"data" not in (headers.get("X-Suanli-Block") or "").encode()
            assert len(body) < 1000, (t, status)
        status, _, _ = transfer_get(a, f"/v1/exports/{neighbour['id']}/data.img/0", token=token)
        assert status in (403, 404)
        status, _, _ = transfer_get(a, f"/v1/exports/{src['id']}/../../node.json", token=token)
        assert status in (403, 404)
        status, _, _ = transfer_get(a, f"/v1/exports/{src['id']}/system.img.part", token=token)
        assert status == 404
        # the bearer reads, and the block's hash is its hash
        status, headers, body = transfer_get(a, path, token=token)
        assert status == 200
        if headers["X-Suanli-Block"] == "data":
            assert hashlib.blake2b(body, digest_size=32).hexdigest() == \
                headers["X-Suanli-Blake2b"]
        # a renter's instance on another host reaches the endpoint: and is refused
        out = fleet.ssh(neighbour_user, neighbour,
                        f"exec 3<>/dev/tcp/{a.address}/{TRANSFER_PORT} &&"
                        f" printf 'GET {path} HTTP/1.0\\r\\nAuthorization: Bearer sl_guess\\r\\n\\r\\n'"
                        " >&3 && head -c 200 <&3", check=False).stdout
        assert out.startswith("HTTP/1.") and " 403 " in out.splitlines()[0], out

        # the agent back: the copy goes on from where it was, and verifies
        b.start()
        # and the source's agent killed and back, mid-copy: the copy waits
        # for it (transfer.retry_s) and goes on
        wait_for(lambda: (recorded() or 0) >= at + 16, timeout=120, interval=0.02,
                 what="the copy to go on")
        a.stop(signal.SIGKILL)
        a.start()
        running = fleet.wait_state(user, new["id"], "running", timeout=300)
        log = b.log_text()
        resumed = [ln for ln in log.splitlines() if "resumes at block" in ln and new["id"] in log]
        assert resumed, log[-3000:]
        assert int(resumed[-1].split("resumes at block ")[1].split()[0]) >= at
        assert fleet.ssh(user, running, "sha256sum -c /root/big.sum").returncode == 0
        for line in log.splitlines():
            if "MB/s of data" in line and new["id"] in line:
                print("\n" + line.split("agent: ", 1)[-1])
        assert not [f for f in files_of(b, new["id"]) if f.endswith((".part", ".progress"))]
        assert fleet.verb(user, src["id"], "start").status == 200
        fleet.wait_state(user, src["id"], "running")
    finally:
        for n in (a, b):
            if n.proc is None:
                n.start()
        release(fleet, user, *made)
        release(fleet, neighbour_user, neighbour["id"])


def test_a_failed_copy_leaves_nothing_half_made(fleet):
    user = fleet.renter()
    a, b = fleet.nodes[0], fleet.nodes[1]
    src = stopped_source(fleet, user, a, data_disk_gib=5,
                         setup="head -c 512M /dev/urandom > /root/data/big.bin && sync")
    made = [src["id"]]
    try:
        r = clone(fleet, user, src["id"], host=b.node_id)
        assert r.status == 201, r
        new = r.json
        made.append(new["id"])
        progress = os.path.join(b.data_dir, "instances", new["id"], "data.img.progress")
        wait_for(lambda: os.path.exists(progress), timeout=120, interval=0.02,
                 what="the copy to start")
        # the source's host goes away for good (for longer than transfer.retry_s)
        a.stop(signal.SIGKILL)
        failed = wait_for(lambda: (lambda i: i if i["state"] == "failed" else None)(
            fleet.get(user, new["id"])), timeout=120, what="the clone to fail")
        assert "copy" in failed["state_message"], failed
        assert failed["copy"]["state"] == "failed", failed
        wait_for(lambda: not files_of(b, new["id"]), timeout=30,
                 what="the partial copy to go")
        # a clone whose copy failed does not start with empty disks
        r = fleet.verb(user, new["id"], "start")
        assert r.status == 409 and r.code == "copy_failed", r
        a.start()
        # the export is withdrawn; the source starts again on its host
        wait_for(lambda: not desired(fleet, a).get("exports"), timeout=30,
                 what="the export to be withdrawn")
        assert fleet.verb(user, src["id"], "start").status == 200
        fleet.wait_state(user, src["id"], "running", timeout=120)
    finally:
        if a.proc is None:
            a.start()
        release(fleet, user, *made)


def test_a_start_on_a_full_host_names_a_clone_to_a_host_with_room(fleet):
    user = fleet.renter()
    a = fleet.nodes[0]
    src = stopped_source(fleet, user, a)
    fill = fleet.create(user, gpus=2, data_disk_gib=5, host=a.node_id)
    try:
        r = fleet.verb(user, src["id"], "start")
        # its GPUs, or the CPU and memory that go with them (offers per host)
        assert r.status == 409 and r.code in ("gpus_unavailable", "insufficient_cpu",
                                              "insufficient_memory"), r
        msg = r.json["error"]["message"]
        assert f"suanli clone {src['id']} --host fleet-host-" in msg, msg
        host = msg.split("--host ")[1].split(";")[0].split(")")[0]
        assert host != "fleet-host-1", msg
        # and that host takes it
        r = clone(fleet, user, src["id"], host=host)
        assert r.status == 201, r
        new = fleet.wait_state(user, r.json["id"], "running", timeout=120)
        assert new["node_id"] != a.node_id
        release(fleet, user, new["id"])
    finally:
        release(fleet, user, src["id"], fill["id"])


# --- the control plane's side, with hosts that speak the node API (no
# containers): what each host is told, and what their reports do ---

class CopyHost(ApiHost):
    """An ApiHost whose agent serves disk copies (it reports transfer_port)."""

    def heartbeat(self, instances=()):
        r = self.server.request("POST", f"/v1/nodes/{self.node_id}/heartbeat", {
            "inventory": self.inventory(), "instances": list(instances),
            "transfer_port": TRANSFER_PORT,
            "images": [{"name": self.image, "state": "ready"}]}, token=self.token)
        assert r.status == 200, r

    def desired(self):
        r = self.server.request("GET", f"/v1/nodes/{self.node_id}/desired", token=self.token)
        assert r.status == 200, r
        return r.json

    def item(self, iid):
        return next((d for d in self.desired()["instances"] if d["id"] == iid), None)


def api_renter(server):
    user = server.register()
    server.request("POST", "/v1/me/verification",
                   {"real_name": "Test Renter", "id_number": __import__(
                       "conftest").random_id_number()}, token=user["token"])
    server.request("POST", f"/v1/admin/users/{user['id']}/verification", {"approve": True},
                   token=server.admin_token)
    server.credit(user["id"], 100_000_000)
    return user


def api_stopped(server, user, host):
    r = server.request("POST", "/v1/instances", {"gpu_model": "RTX 4090", "gpus": 1,
                                                 "image": host.image, "data_disk_gib": 5,
                                                 "host": host.node_id}, token=user["token"])
    assert r.status == 201, r
    iid = r.json["id"]
    host.heartbeat([{"id": iid, "state": "running", "generation": 1}])
    assert server.request("POST", f"/v1/instances/{iid}/stop", {},
                          token=user["token"]).status == 200
    host.heartbeat([{"id": iid, "state": "stopped", "generation": 1}])
    return iid


def api_get(server, user, iid):
    r = server.request("GET", f"/v1/instances/{iid}", token=user["token"])
    assert r.status == 200, r
    return r.json


def test_api_what_each_host_is_told_and_what_reports_do(server):
    a, b = CopyHost(server, gpus=2), CopyHost(server, gpus=2)
    user = api_renter(server)
    src = api_stopped(server, user, a)
    r = server.request("POST", f"/v1/instances/{src}/clone", {"host": b.node_id, "gpus": 1},
                       token=user["token"])
    assert r.status == 201, r
    new = r.json["id"]
    assert r.json["state"] == "copying" and r.json["node_id"] == b.node_id, r.json
    assert r.json["copy"] == {"source_id": src, "state": "copying", "bytes_done": 0,
                              "bytes_total": 0, "message": ""}, r.json
    # the clone's host: where from and the token; the source's: the hash only
    cf = b.item(new)["copy_from"]
    assert cf["url"] == f"http://192.0.2.1:{TRANSFER_PORT}" and cf["instance"] == src, cf
    assert not cf["failed"] and cf["token"].startswith("sl_"), cf
    ex = a.desired()["exports"]
    assert ex == [{"instance": src, "clone": new,
                   "token_sha256": hashlib.sha256(cf["token"].encode()).hexdigest()}], ex
    assert cf["token"] not in json.dumps(a.desired())
    assert not b.desired()["exports"]
    # a second clone of it waits for the first
    r = server.request("POST", f"/v1/instances/{src}/clone", {}, token=user["token"])
    assert r.status == 409 and r.code == "being_cloned", r
    # progress: an event at each quarter, shown in the instance
    total = 35 << 30
    b.heartbeat([{"id": new, "state": "absent", "copy": {"bytes_done": total // 2,
                                                         "bytes_total": total}}])
    got = api_get(server, user, new)
    assert got["state"] == "copying" and got["copy"]["bytes_done"] == total // 2, got
    events = server.request("GET", f"/v1/instances/{new}/events",
                            token=user["token"]).json["items"]
    assert [e["message"] for e in events if e["kind"] == "copy"] == [
        f"copied 50% ({(total // 2) >> 20} of {total >> 20} MiB)"], events
    # it runs: the copy is done, the export withdrawn, the source free again
    b.heartbeat([{"id": new, "state": "running", "generation": 1}])
    got = api_get(server, user, new)
    assert got["state"] == "running" and got["copy"]["state"] == "done", got
    assert "copy_from" not in b.item(new) and not a.desired()["exports"]
    r = server.request("POST", f"/v1/instances/{src}/start", {}, token=user["token"])
    assert r.status == 200, r


def test_api_a_failed_or_released_clone_withdraws_the_export(server):
    a, b = CopyHost(server, gpus=2), CopyHost(server, gpus=2)
    user = api_renter(server)
    src = api_stopped(server, user, a)
    new = server.request("POST", f"/v1/instances/{src}/clone", {"host": b.node_id},
                         token=user["token"]).json["id"]
    b.heartbeat([{"id": new, "state": "failed", "message": "copy the disks of 'x': refused"}])
    got = api_get(server, user, new)
    assert got["state"] == "failed" and got["copy"]["state"] == "failed", got
    assert not a.desired()["exports"]
    # the clone's host keeps copy_from (failed): it never starts it empty
    assert b.item(new)["copy_from"]["failed"] is True
    r = server.request("POST", f"/v1/instances/{new}/start", {}, token=user["token"])
    assert r.status == 409 and r.code == "copy_failed", r
    assert f"suanli release {new}" in r.json["error"]["message"]
    assert server.request("POST", f"/v1/instances/{src}/start", {},
                          token=user["token"]).status == 200
    a.heartbeat([{"id": src, "state": "running", "generation": 2}])
    server.request("POST", f"/v1/instances/{src}/stop", {}, token=user["token"])
    a.heartbeat([{"id": src, "state": "stopped", "generation": 2}])
    # released while copying: the export goes at once
    again = server.request("POST", f"/v1/instances/{src}/clone", {"host": b.node_id},
                           token=user["token"])
    assert again.status == 201, again
    assert a.desired()["exports"]
    r = server.request("POST", f"/v1/instances/{src}/release", {}, token=user["token"])
    assert r.status == 409 and r.code == "being_cloned", r
    assert server.request("POST", f"/v1/instances/{again.json['id']}/release", {},
                          token=user["token"]).status == 200
    assert not a.desired()["exports"]
    assert api_get(server, user, again.json["id"])["copy"]["state"] == "canceled"
    # a stranger's token, a node's: the route is the owner's only
    other = api_renter(server)
    r = server.request("POST", f"/v1/instances/{src}/clone", {}, token=other["token"])
    assert r.status == 404 and r.code == "no_such_instance", r
    r = server.request("POST", f"/v1/instances/{src}/clone", {}, token=a.token)
    assert r.status == 401, r


def test_api_a_start_refused_for_gpus_names_a_clone_to_a_host_with_room(server):
    a, b = CopyHost(server, gpus=2), CopyHost(server, gpus=2)
    user = api_renter(server)
    src = api_stopped(server, user, a)
    fillers = []
    for _ in range(2):
        r = server.request("POST", "/v1/instances", {"gpu_model": "RTX 4090", "gpus": 1,
                                                     "image": a.image, "data_disk_gib": 5,
                                                     "host": a.node_id}, token=user["token"])
        assert r.status == 201, r
        fillers.append(r.json["id"])
    r = server.request("POST", f"/v1/instances/{src}/start", {}, token=user["token"])
    assert r.status == 409 and r.code == "gpus_unavailable", r
    assert f"suanli clone {src} --host api-host" in r.json["error"]["message"], r
    # cordoned hosts are not named: with every other one cordoned, none is
    nodes = server.request("GET", "/v1/admin/nodes?limit=100", token=server.admin_token)
    for n in nodes.json["items"]:
        if n["id"] != a.node_id:
            r = server.request("POST", f"/v1/admin/nodes/{n['id']}/cordon", {},
                               token=server.admin_token)
            assert r.status == 200, r
    r = server.request("POST", f"/v1/instances/{src}/start", {}, token=user["token"])
    assert r.status == 409 and "suanli clone" not in r.json["error"]["message"], r
    for n in nodes.json["items"]:
        server.request("POST", f"/v1/admin/nodes/{n['id']}/uncordon", {},
                       token=server.admin_token)


@pytest.mark.skipif(not os.environ.get("SUANLI_CLONE_FIGURES"),
                    reason="the figures: SUANLI_CLONE_FIGURES=1 (writes and copies 2 GiB)")
def test_figures_a_2gib_data_disk_clone(fleet):
    user = fleet.renter()
    a, b = fleet.nodes[0], fleet.nodes[1]
    src = stopped_source(fleet, user, a, data_disk_gib=5,
                         setup="head -c 2G /dev/urandom > /root/data/big.bin && sync")
    made = [src["id"]]
    # the floor: this file system's synced write rate, in the same run
    floor = os.path.join(b.data_dir, "floor.bin")
    t = time.monotonic()
    subprocess.run(["dd", "if=/dev/urandom", f"of={floor}", "bs=4M", "count=256",
                    "conv=fdatasync", "status=none"], check=True)
    urandom = time.monotonic() - t
    os.unlink(floor)
    t = time.monotonic()
    subprocess.run(f"head -c 1G /dev/urandom > /dev/null", shell=True, check=True)
    write_mbs = 1073.741824 / max(0.001, urandom - (time.monotonic() - t))
    try:
        started = time.monotonic()
        r = clone(fleet, user, src["id"], host=b.node_id)
        assert r.status == 201, r
        made.append(r.json["id"])
        new = fleet.wait_state(user, r.json["id"], "running", timeout=600)
        fleet.ssh(user, new, "true")
        to_ssh = time.monotonic() - started
        line = [ln for ln in b.log_text().splitlines()
                if "MB/s of data" in ln and new["id"] in ln][-1]
        print(f"\nclone of a 2 GiB data disk: SSH on the new host {to_ssh:.1f} s after the "
              f"request; {line.split('agent: ', 1)[-1]}; floor: 1 GiB written and synced on the "
              f"same file system at {write_mbs:.1f} MB/s")
    finally:
        release(fleet, user, *made)
