"""Migrate (issue 12, item 3): a stopped instance moves to another host under
its own id and name, with its SSH port when that is free there and its SSH
host keys (the same machine, elsewhere). Its disks are copied agent to agent
as a clone's are; the row moves to the target when the copy starts and back
when it fails, and the first host deletes its copy only once the target
says the copy is whole. A drain with --migrate moves a host's stopped
instances away. The API tests use hosts that speak the node API (no
containers); the last ones use the real agents of the fleet."""
import hashlib
import json
import os

from conftest import Cli, wait_for
from test_t440_clone import (TRANSFER_PORT, CopyHost, api_get, api_renter, api_stopped,
                             files_of, release)


def migrate(server, user, iid, **body):
    return server.request("POST", f"/v1/instances/{iid}/migrate", body, token=user["token"])


def events_of(server, user, iid, kind):
    r = server.request("GET", f"/v1/instances/{iid}/events", token=user["token"])
    return [e for e in r.json["items"] if e["kind"] == kind]


def test_api_what_each_host_is_told_while_an_instance_moves(server):
    a, b, c = CopyHost(server, gpus=2), CopyHost(server, gpus=2), CopyHost(server, gpus=2)
    user = api_renter(server)
    iid = api_stopped(server, user, a)
    before = api_get(server, user, iid)
    # the move's refusals: its own host, a stranger, a node's token
    r = migrate(server, user, iid, host=a.node_id)
    assert r.status == 400 and "already" in r.json["error"]["message"], r
    assert migrate(server, api_renter(server), iid).status == 404
    assert migrate(server, user, iid, host=b.node_id, bogus=1).status == 400
    assert server.request("POST", f"/v1/instances/{iid}/migrate", {},
                          token=a.token).status == 401
    r = migrate(server, user, iid, host=b.node_id)
    assert r.status == 200, r
    got = r.json
    assert got["id"] == iid and got["name"] == before["name"], got
    assert got["state"] == "migrating" and got["node_id"] == b.node_id, got
    assert got["ssh"]["port"] == before["ssh"]["port"], got  # free there: kept
    assert got["migration"]["from_node"] == a.node_id and got["migration"]["to_node"] == \
        b.node_id and got["migration"]["state"] == "copying", got
    # the target: where from and the token; the source: the hash only, and
    # no longer the instance
    cf = b.item(iid)["copy_from"]
    assert cf["url"] == f"http://192.0.2.1:{TRANSFER_PORT}" and cf["instance"] == iid, cf
    assert b.item(iid)["desired"] == "stopped"
    assert a.desired()["exports"] == [{"instance": iid, "clone": iid, "token_sha256":
                                       hashlib.sha256(cf["token"].encode()).hexdigest()}]
    assert a.item(iid) is None and cf["token"] not in json.dumps(a.desired())
    # while it moves: no start, no clone, no second move
    for verb, code in (("start", "being_migrated"), ("clone", "being_migrated"),
                       ("migrate", "being_migrated")):
        r = server.request("POST", f"/v1/instances/{iid}/{verb}", {}, token=user["token"])
        assert r.status == 409 and r.code == code, (verb, r)
    # a host that is neither end says nothing that counts
    c.heartbeat([{"id": iid, "state": "absent"}])
    c.heartbeat([{"id": iid, "state": "failed", "message": "lies"}])
    assert api_get(server, user, iid)["migration"]["state"] == "copying"
    # progress, then the copy whole: the source host is told to drop its copy
    total = 35 << 30
    b.heartbeat([{"id": iid, "state": "stopped", "copy": {"bytes_done": total // 4,
                                                          "bytes_total": total}}])
    got = api_get(server, user, iid)
    assert got["state"] == "migrating" and got["migration"]["bytes_done"] == total // 4, got
    assert [e["message"] for e in events_of(server, user, iid, "migrate")] == [
        f"copied 25% ({(total // 4) >> 20} of {total >> 20} MiB)"]
    b.heartbeat([{"id": iid, "state": "stopped", "copy": {"done": True}}])
    got = api_get(server, user, iid)
    assert got["state"] == "stopped" and got["migration"]["state"] == "done", got
    assert got["node_id"] == b.node_id and got["ssh"]["host"] == "192.0.2.1"
    assert events_of(server, user, iid, "migrated"), got
    assert "copy_from" not in b.item(iid) and not a.desired()["exports"]
    gone = a.item(iid)
    assert gone["desired"] == "released" and gone["ssh_port"] == before["ssh"]["port"], gone
    a.heartbeat([{"id": iid, "state": "absent"}])
    assert a.item(iid) is None
    # it starts on its new host
    r = server.request("POST", f"/v1/instances/{iid}/start", {}, token=user["token"])
    assert r.status == 200 and r.json["node_id"] == b.node_id, r
    assert b.item(iid)["desired"] == "running"


def test_api_a_failed_copy_moves_it_back_and_a_release_drops_both(server):
    a, b = CopyHost(server, gpus=2), CopyHost(server, gpus=2)
    user = api_renter(server)
    # b's lowest SSH port is taken: the mover gets another there
    taken = api_stopped(server, user, b)
    iid = api_stopped(server, user, a)
    port = api_get(server, user, iid)["ssh"]["port"]
    assert api_get(server, user, taken)["ssh"]["port"] == port
    r = migrate(server, user, iid, host=b.node_id)
    assert r.status == 200 and r.json["ssh"]["port"] != port, r
    b.heartbeat([{"id": iid, "state": "failed", "message": "copy the disks: refused"}])
    got = api_get(server, user, iid)
    assert got["state"] == "stopped" and got["node_id"] == a.node_id, got
    assert got["ssh"]["port"] == port and got["migration"]["state"] == "failed", got
    assert "refused" in got["state_message"] and events_of(server, user, iid, "migrate_failed")
    assert b.item(iid) is None and not a.desired()["exports"]
    assert a.item(iid)["desired"] == "stopped"
    # released while copying: both hosts drop what they have
    r = migrate(server, user, iid, host=b.node_id)
    assert r.status == 200, r
    r = server.request("POST", f"/v1/instances/{iid}/release", {}, token=user["token"])
    assert r.status == 200, r
    assert b.item(iid)["desired"] == "released" and "copy_from" not in b.item(iid)
    assert a.item(iid)["desired"] == "released" and not a.desired()["exports"]
    b.heartbeat([{"id": iid, "state": "absent"}])
    a.heartbeat([{"id": iid, "state": "absent"}])
    got = api_get(server, user, iid)
    assert got["state"] == "released" and got["migration"]["state"] == "canceled", got
    assert a.item(iid) is None and b.item(iid) is None


def test_api_a_drain_with_migrate_moves_stopped_instances_away(server):
    a, b = CopyHost(server, gpus=2), CopyHost(server, gpus=2)
    user = api_renter(server)
    stopped = api_stopped(server, user, a)
    r = server.request("POST", "/v1/instances", {"gpu_model": "RTX 4090", "gpus": 1,
                                                 "image": a.image, "data_disk_gib": 5,
                                                 "host": a.node_id}, token=user["token"])
    running = r.json["id"]
    a.heartbeat([{"id": running, "state": "running", "generation": 1},
                 {"id": stopped, "state": "stopped", "generation": 1}])
    # every host but a and b cordoned: the moves go to b
    others = [n["id"] for n in server.request("GET", "/v1/admin/nodes?limit=100",
                                              token=server.admin_token).json["items"]
              if n["id"] not in (a.node_id, b.node_id) and not n.get("cordoned")]
    for n in others:
        server.request("POST", f"/v1/admin/nodes/{n}/cordon", {}, token=server.admin_token)
    try:
        r = server.request("POST", f"/v1/admin/nodes/{a.node_id}/drain", {"migrate": "yes"},
                           token=server.admin_token)
        assert r.status == 400, r
        r = server.request("POST", f"/v1/admin/nodes/{a.node_id}/drain", {"migrate": True},
                           token=server.admin_token)
        assert r.status == 200, r
        assert r.json["stopped"] == [running] and r.json["migrating"] == [stopped], r.json
        assert api_get(server, user, stopped)["migration"]["reason"] == "host_drain"
        assert b.item(stopped)["copy_from"]
        # the one the drain stopped moves once its host says it stopped
        assert api_get(server, user, running)["node_id"] == a.node_id
        a.heartbeat([{"id": running, "state": "stopped", "generation": 1}])
        got = api_get(server, user, running)
        assert got["state"] == "migrating" and got["node_id"] == b.node_id, got
        # the host is not removed while disks are copied from it
        r = server.request("DELETE", f"/v1/admin/nodes/{a.node_id}", token=server.admin_token)
        assert r.status == 409 and r.code == "node_not_empty", r
        for iid in (stopped, running):
            b.heartbeat([{"id": iid, "state": "stopped", "copy": {"done": True}}])
        a.heartbeat([{"id": stopped, "state": "absent"}, {"id": running, "state": "absent"}])
        r = server.request("DELETE", f"/v1/admin/nodes/{a.node_id}", token=server.admin_token)
        assert r.status in (200, 204), r
    finally:
        for n in others:
            server.request("POST", f"/v1/admin/nodes/{n}/uncordon", {},
                           token=server.admin_token)


# --- real agents ---------------------------------------------------------

def test_migrate_moves_the_same_machine_to_another_host(fleet, tmp_path):
    user = fleet.renter()
    a, b = fleet.nodes[0], fleet.nodes[2]
    inst = fleet.create(user, gpus=1, data_disk_gib=5, host=a.node_id)
    iid = inst["id"]
    try:
        fleet.ssh(user, inst, "echo system-$RANDOM$RANDOM > /root/on-system.txt &&"
                  " head -c 32M /dev/urandom > /root/data/on-data.bin && sync")
        sums = fleet.ssh(user, inst, "cd /root && sha256sum on-system.txt data/on-data.bin").stdout
        key = fleet.ssh(user, inst, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.strip()
        cli = Cli(fleet.server, str(tmp_path / "home"))
        env = {"SUANLI_TOKEN": user["token"]}
        p = cli.run("migrate", iid, "--host", b.node_id, env=env, timeout=60)
        assert p.returncode != 0 and f"suanli stop {iid}" in p.stderr, p
        assert fleet.verb(user, iid, "stop").status == 200
        fleet.wait_state(user, iid, "stopped")
        p = cli.run("migrate", inst["name"], "--host", b.node_id, env=env, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr + "".join(
            n.log_text()[-2000:] for n in (a, b))
        assert f"moved {iid} from host {a.node_id} to host {b.node_id}" in p.stdout, p.stdout
        got = fleet.get(user, iid)
        assert got["node_id"] == b.node_id and got["state"] == "stopped", got
        assert got["ssh"]["port"] == inst["ssh"]["port"] and got["ssh"]["host"] == b.address
        # the first host deletes its copy once the copy is whole
        wait_for(lambda: not files_of(a, iid), timeout=60, what="the first host's copy to go")
        wait_for(lambda: fleet.get(user, iid)["migration"]["state"] == "done", timeout=30,
                 what="the move to end")
        assert fleet.verb(user, iid, "start").status == 200
        got = fleet.wait_state(user, iid, "running", timeout=120)
        assert fleet.ssh(user, got, "cd /root && sha256sum on-system.txt data/on-data.bin"
                         ).stdout == sums
        # the same machine: its host keys came along
        assert fleet.ssh(user, got, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.strip() == key
        p = cli.run("show", iid, env=env)
        assert f"done, from host {a.node_id} to host {b.node_id}" in p.stdout, p.stdout
    finally:
        release(fleet, user, iid)
        wait_for(lambda: not files_of(a, iid) and not files_of(b, iid), timeout=60,
                 what="both hosts to hold nothing of it")
