"""t600: bigger data disks (issue 14, item 6). `suanli disk resize ID --data N`
(POST /v1/instances/{id}/disk) grows a running instance's data disk online
(resize2fs on the mounted ext4: `df` inside sees it without a restart) and a
stopped one's at its next start; what was on it stays; a smaller size, a
size out of range, a host without the room, a balance without a day of the
growth, an instance in the wrong state and a stranger are refused; the data
disk's meter is split at the resize second.

The real agent and containers are the session's cluster; the refusals and
the billing split use hosts that report through the node API (ApiHost), whose
disk figures and reports the test chooses."""
import json
import os

import pytest
import yaml

from conftest import ApiHost, Cli, Cluster, sample_catalog, wait_for
from test_t101_openapi import SPEC_PATH, check

GIB = 1 << 30
CATALOG = sample_catalog()
DISK_PRICE = CATALOG["prices"]["data_disk_per_gib_day_micros"]
DISK_FREE = CATALOG["prices"]["data_disk_free_gib"]
GPU_PRICE = next(m["price_per_hour_micros"] for m in CATALOG["gpu_models"]
                 if m["name"] == "RTX 4090")
TEMPLATE = "/v1/instances/{id}/disk"


@pytest.fixture(scope="module")
def spec():
    with open(SPEC_PATH) as f:
        return yaml.safe_load(f)


def resize(server, user, iid, gib, spec=None, status=None):
    r = server.request("POST", f"/v1/instances/{iid}/disk", {"data_disk_gib": gib},
                       token=user["token"])
    if spec is not None:
        check(spec, r, "POST", f"/v1/instances/{iid}/disk", status, TEMPLATE)
    return r


def renter_cli(cluster, user, tmp_path):
    cli = Cli(cluster.server, str(tmp_path))
    run = cli.run

    def wrapped(*args, env=None, **kw):
        return run(*args, env={"SUANLI_TOKEN": user["token"], **(env or {})}, **kw)
    cli.run = wrapped
    return cli


def data_mib(cluster, user, inst):
    """The size of /root/data as df sees it inside, in MiB."""
    p = cluster.ssh(user, inst, "df -B1M --output=size /root/data | tail -n 1")
    return int(p.stdout.strip())


def events(server, user, iid, kind):
    r = server.request("GET", f"/v1/instances/{iid}/events", token=user["token"])
    assert r.status == 200, r
    return [e for e in r.json["items"] if e["kind"] == kind]


def host_file(cluster, iid, name):
    return os.path.join(cluster.node.data_dir, "instances", iid, name)


def agent_resizes_online(cluster):
    """Whether the agent may grow a mounted ext4: the kernel's online resize
    wants CAP_SYS_RESOURCE, which a sandboxed CI machine may withhold (then
    the disk grows at the next start, and the instance says so)."""
    with open(f"/proc/{cluster.node.proc.pid}/status") as f:
        caps = next(int(line.split()[1], 16) for line in f if line.startswith("CapEff:"))
    return bool(caps >> 24 & 1)


# --- the real agent: online and offline ----------------------------------------

def test_online_grow_is_seen_inside_without_a_restart_and_keeps_the_data(cluster, tmp_path):
    user = cluster.renter()
    other = cluster.renter()
    inst = cluster.create(user, data_disk_gib=5)
    neighbour = cluster.create(other, data_disk_gib=5)
    iid = inst["id"]
    try:
        cluster.ssh(user, inst, "head -c 8M /dev/urandom > /root/data/keep && "
                    "sha256sum /root/data/keep > /root/keep.sum && sync")
        before = data_mib(cluster, user, inst)
        assert before <= 5 * 1024, before
        first = cluster.get(user, iid)
        cli = renter_cli(cluster, user, tmp_path)
        p = cli.run("disk", "resize", iid, "--data", "12")
        assert p.returncode == 0, p
        assert "grown from 5 to 12 GiB" in p.stdout and "df -h /root/data" in p.stdout, p
        assert cluster.get(user, iid)["data_disk_gib"] == 12

        def grown():
            mib = data_mib(cluster, user, inst)
            return mib if mib > 11 * 1024 else None
        if agent_resizes_online(cluster):
            after = wait_for(grown, timeout=60, interval=0.5, what="df inside to see 12 GiB")
            # the same container all along
            now = cluster.get(user, iid)
            assert now["state"] == "running" and now["generation"] == first["generation"]
        else:
            # the host cannot grow a mounted disk: the instance says so, keeps
            # running as it was, and a restart has the bigger disk
            def told():
                i = cluster.get(user, iid)
                return i if "grows at the next start" in i["state_message"] else None
            now = wait_for(told, timeout=60, interval=0.5, what="the state message")
            assert "cannot grow a mounted disk" in now["state_message"], now
            assert now["state"] == "running" and data_mib(cluster, user, inst) <= 5 * 1024
            assert os.stat(host_file(cluster, iid, "data.img")).st_size == 5 * GIB
            assert cluster.verb(user, iid, "restart").status == 200
            inst = cluster.wait_state(user, iid, "running")
            after = wait_for(grown, timeout=60, interval=0.5, what="df inside to see 12 GiB")
            wait_for(lambda: cluster.get(user, iid)["state_message"] == "", timeout=30,
                     what="the state message to go")
        assert after <= 12 * 1024, after
        # the data intact, and the disk writable past the old size
        cluster.ssh(user, inst, "sha256sum -c /root/keep.sum")
        cluster.ssh(user, inst, "fallocate -l 6G /root/data/big && rm /root/data/big")
        # the host's file is the new size, still sparse; the neighbour's is not touched
        st = os.stat(host_file(cluster, iid, "data.img"))
        assert st.st_size == 12 * GIB and st.st_blocks * 512 < 2 * GIB
        assert os.stat(host_file(cluster, neighbour["id"], "data.img")).st_size == 5 * GIB
        assert data_mib(cluster, other, neighbour) <= 5 * 1024
        ev = events(cluster.server, user, iid, "disk_resize")
        assert [e["message"] for e in ev] == ["data disk grown from 5 to 12 GiB"], ev
        assert ev[0]["reason"] == "user" and ev[0]["state"] == "running"

        # smaller is refused with the way out, and changes nothing
        p = cli.run("disk", "resize", iid, "--data", "8")
        assert p.returncode == 1, p
        assert "only grows" in p.stderr and "suanli create --data-disk 8" in p.stderr, p
        assert cluster.get(user, iid)["data_disk_gib"] == 12
        # the same size: nothing to do, said so
        p = cli.run("disk", "resize", iid, "--data", "12")
        assert p.returncode == 0 and "12 GiB already" in p.stdout, p
        assert len(events(cluster.server, user, iid, "disk_resize")) == 1
        # a stranger's instance does not exist for them
        p = renter_cli(cluster, other, str(tmp_path) + "-other").run(
            "disk", "resize", iid, "--data", "20")
        assert p.returncode == 4, p
        assert cluster.get(user, iid)["data_disk_gib"] == 12
    finally:
        cluster.verb(user, iid, "release")
        cluster.verb(other, neighbour["id"], "release")
        cluster.wait_state(user, iid, "released")
        cluster.wait_state(other, neighbour["id"], "released")


def test_offline_grow_takes_effect_at_the_next_start(cluster, tmp_path):
    user = cluster.renter()
    inst = cluster.create(user, data_disk_gib=5)
    iid = inst["id"]
    try:
        cluster.ssh(user, inst, "head -c 8M /dev/urandom > /root/data/keep && "
                    "sha256sum /root/data/keep > /root/keep.sum && sync")
        assert cluster.verb(user, iid, "stop").status == 200
        cluster.wait_state(user, iid, "stopped")
        cli = renter_cli(cluster, user, tmp_path)
        p = cli.run("disk", "resize", iid, "--data", "9")
        assert p.returncode == 0, p
        assert "grown from 5 to 9 GiB" in p.stdout and "next start" in p.stdout, p
        # nothing runs, nothing is touched on the host until the start
        assert os.stat(host_file(cluster, iid, "data.img")).st_size == 5 * GIB
        ev = events(cluster.server, user, iid, "disk_resize")
        assert [e["message"] for e in ev] == [
            "data disk grown from 5 to 9 GiB (at the next start)"], ev
        assert cluster.verb(user, iid, "start").status == 200
        inst = cluster.wait_state(user, iid, "running")
        mib = data_mib(cluster, user, inst)
        assert 8 * 1024 < mib <= 9 * 1024, mib
        cluster.ssh(user, inst, "sha256sum -c /root/keep.sum")
        assert os.stat(host_file(cluster, iid, "data.img")).st_size == 9 * GIB
    finally:
        cluster.verb(user, iid, "release")
        cluster.wait_state(user, iid, "released")


# --- hosts that report through the API: refusals and billing -------------------

def running_on(server, h, user, data_disk_gib, **extra):
    """An instance placed on host h and reported running there."""
    r = server.request("POST", "/v1/instances",
                       {"gpu_model": "RTX 4090", "gpus": 1, "image": h.image,
                        "data_disk_gib": data_disk_gib, **extra}, token=user["token"])
    assert r.status == 201, r
    iid = r.json["id"]
    report(server, h, user, iid, "running")
    return iid


def report(server, host, user, iid, state):
    r = server.request("GET", f"/v1/nodes/{host.node_id}/desired", token=host.token)
    assert r.status == 200, r
    want = next(i for i in r.json["instances"] if i["id"] == iid)
    host.heartbeat([{"id": iid, "state": state, "generation": want["generation"]}])
    r = server.request("GET", f"/v1/instances/{iid}", token=user["token"])
    assert r.status == 200, r
    return r.json


def test_sizes_states_and_strangers_are_refused(make_server, spec):
    server = make_server()
    host = ApiHost(server, free_gib=5000)
    user = Cluster(server, None).renter()
    stranger = Cluster(server, None).renter()
    r = server.request("POST", "/v1/instances",
                       {"gpu_model": "RTX 4090", "gpus": 1, "image": host.image,
                        "data_disk_gib": 20}, token=user["token"])
    assert r.status == 201, r
    iid = r.json["id"]
    # creating: not yet
    r = resize(server, user, iid, 30, spec, 409)
    assert r.code == "invalid_state" and "running (online) or stopped" in r.json["error"]["message"]
    assert report(server, host, user, iid, "running")["state"] == "running"

    for bad in (0, -5, 4097, 10 ** 12, "30", 30.5, True):
        r = resize(server, user, iid, bad, spec, 400)
        assert r.code == "invalid_field", (bad, r)
    r = resize(server, user, iid, 0, spec, 400)
    assert "from 1 to 4096" in r.json["error"]["message"], r
    for body in ({}, {"data_disk_gib": None}):
        r = server.request("POST", f"/v1/instances/{iid}/disk", body, token=user["token"])
        assert r.status == 400 and r.code == "missing_field", r
    r = server.request("POST", f"/v1/instances/{iid}/disk", {"data_disk_gib": 30, "x": 1},
                       token=user["token"])
    assert r.status == 400 and r.code == "unknown_field", r
    # a stranger, and no token at all
    r = resize(server, stranger, iid, 30, spec, 404)
    assert r.code == "no_such_instance"
    r = server.request("POST", f"/v1/instances/{iid}/disk", {"data_disk_gib": 30})
    assert r.status == 401, r

    r = resize(server, user, iid, 30, spec, 200)
    assert r.json["data_disk_gib"] == 30
    r = resize(server, user, iid, 29, spec, 409)
    assert r.code == "disk_shrink", r
    r = resize(server, user, iid, 30, spec, 200)  # the size it has: nothing to do
    assert len(events(server, user, iid, "disk_resize")) == 1
    # the new size is in the host's desired state
    r = server.request("GET", f"/v1/nodes/{host.node_id}/desired", token=host.token)
    assert next(i for i in r.json["instances"] if i["id"] == iid)["data_disk_gib"] == 30

    # racing a stop: refused while it stops, fine once stopped (at the next start)
    assert server.request("POST", f"/v1/instances/{iid}/stop", token=user["token"]).status == 200
    r = resize(server, user, iid, 40, spec, 409)
    assert r.code == "invalid_state", r
    assert report(server, host, user, iid, "stopped")["state"] == "stopped"
    r = resize(server, user, iid, 40, spec, 200)
    assert events(server, user, iid, "disk_resize")[-1]["message"] == \
        "data disk grown from 30 to 40 GiB (at the next start)"
    # racing a release: refused
    r = server.request("POST", f"/v1/instances/{iid}/release", token=user["token"])
    assert r.status == 200, r
    r = resize(server, user, iid, 50, spec, 409)
    assert r.code == "invalid_state", r
    assert server.request("GET", f"/v1/instances/{iid}",
                          token=user["token"]).json["data_disk_gib"] == 40


def test_a_resize_must_fit_the_host(make_server, spec):
    server = make_server({"nodes.disk_reserve_gib": "0", "nodes.disk_overcommit_percent": "0"})
    host = ApiHost(server, free_gib=140)  # 140 GiB for instance disks
    user = Cluster(server, None).renter()
    iid = running_on(server, host, user, 50)  # 30 + 50 promised: 60 left
    assert host.disk()["promised_gib"] == 80
    r = resize(server, user, iid, 111, spec, 409)
    assert r.code == "insufficient_disk", r
    msg = r.json["error"]["message"]
    assert "room for 60 more GiB" in msg and "can grow to there is 110 GiB" in msg, msg
    assert "suanli migrate" in msg, msg
    assert host.disk()["promised_gib"] == 80  # nothing promised by the refusal
    r = resize(server, user, iid, 110, spec, 200)
    assert host.disk()["promised_gib"] == 140
    r = resize(server, user, iid, 111, spec, 409)
    assert r.code == "insufficient_disk" and "no disk room left" in r.json["error"]["message"]
    # a huge size is out of range before anything else is judged
    r = resize(server, user, iid, 1 << 40, spec, 400)
    assert r.code == "invalid_field"


def test_growing_needs_a_day_of_the_growth_in_the_balance(make_server, spec):
    server = make_server()
    host = ApiHost(server, free_gib=5000)
    user = Cluster(server, None).renter(credit_micros=GPU_PRICE + 1_000_000)
    iid = running_on(server, host, user, DISK_FREE)
    # 1000 GiB more a day is 7.00 at the sample price: more than the balance
    r = resize(server, user, iid, DISK_FREE + 1000, spec, 409)
    assert r.code == "insufficient_balance", r
    assert "one day" in r.json["error"]["message"] and "top up" in r.json["error"]["message"]
    r = resize(server, user, iid, DISK_FREE + 10, spec, 200)  # 0.07 a day
    assert r.json["data_disk_gib"] == DISK_FREE + 10


def test_billing_is_split_at_the_resize(make_server, spec):
    server = make_server()
    host = ApiHost(server, free_gib=50000)
    user = Cluster(server, None).renter()
    iid = running_on(server, host, user, DISK_FREE + 1000)

    def meters():
        r = server.request("GET", f"/v1/instances/{iid}/meters", token=user["token"])
        assert r.status == 200, r
        return [m for m in r.json["items"] if m["kind"] == "data_disk"]

    def charged(n):
        def done():
            report(server, host, user, iid, "running")
            r = server.request("POST", "/v1/admin/billing/run", {}, token=server.admin_token)
            assert r.status == 200, r
            ms = meters()
            return ms if len(ms) == n and ms[-1]["charged_micros"] > 0 else None
        return wait_for(done, timeout=30, interval=0.5, what="a data disk charge")

    old, = charged(1)
    assert old["quantity"] == 1000 and old["ended_at"] is None
    r = resize(server, user, iid, DISK_FREE + 3000, spec, 200)
    ms = meters()
    assert len(ms) == 2, ms
    old, new = ms
    # one instant: the old size ends where the new one starts
    assert old["ended_at"] is not None and old["ended_at"] == new["started_at"], ms
    assert (old["quantity"], new["quantity"]) == (1000, 3000)
    assert new["unit_price_micros"] == DISK_PRICE and new["ended_at"] is None
    assert new["amount_micros"] == 3000 * DISK_PRICE
    old, new = charged(2)
    charges = []
    cursor = None
    while True:
        r = server.request("GET", "/v1/bills/charges" + (f"?cursor={cursor}" if cursor else ""),
                           token=user["token"])
        assert r.status == 200, r
        charges += r.json["items"]
        cursor = r.json["next_cursor"]
        if not cursor:
            break
    of_old = [c for c in charges if c["meter_seq"] == old["seq"]]
    of_new = [c for c in charges if c["meter_seq"] == new["seq"]]
    assert of_old and of_new, charges
    # nothing at the new size before the resize, nothing at the old after it
    assert all(c["period_to"] <= old["ended_at"] for c in of_old), of_old
    assert all(c["period_from"] >= new["started_at"] for c in of_new), of_new
    assert old["settled_until"] == old["ended_at"]
    assert sum(c["amount_micros"] for c in of_old) == old["charged_micros"]
    r = server.request("GET", "/v1/admin/billing/check", token=server.admin_token)
    assert r.status == 200 and r.json["ok"], r
    ev = events(server, user, iid, "disk_resize")
    assert [e["message"] for e in ev] == [
        f"data disk grown from {DISK_FREE + 1000} to {DISK_FREE + 3000} GiB"]


def test_no_resize_while_its_disks_are_copied(make_server, spec):
    """A clone of it copying, or its move: its disks must not change under
    the copy (409 being_cloned, being_migrated)."""
    server = make_server()
    host, other = ApiHost(server, free_gib=5000), ApiHost(server, free_gib=5000)
    user = Cluster(server, None).renter()
    iid = running_on(server, host, user, 20, host=host.node_id)
    assert server.request("POST", f"/v1/instances/{iid}/stop", token=user["token"]).status == 200
    assert report(server, host, user, iid, "stopped")["state"] == "stopped"

    def serve_copies(h, instances=()):  # a host that says it serves disk copies
        r = server.request("POST", f"/v1/nodes/{h.node_id}/heartbeat", {
            "inventory": h.inventory(), "instances": list(instances),
            "images": [{"name": h.image, "state": "ready"}], "transfer_port": 7443},
            token=h.token)
        assert r.status == 200, r
    serve_copies(host)
    serve_copies(other)
    r = server.request("POST", f"/v1/instances/{iid}/clone", {"host": other.node_id},
                       token=user["token"])
    assert r.status == 201, r
    clone = r.json["id"]
    r = resize(server, user, iid, 30, spec, 409)
    assert r.code == "being_cloned" and clone in r.json["error"]["message"], r
    # the clone released: its copy ends, the source grows again
    assert server.request("POST", f"/v1/instances/{clone}/release",
                          token=user["token"]).status == 200
    resize(server, user, iid, 30, spec, 200)

    r = server.request("POST", f"/v1/instances/{iid}/migrate", {"host": other.node_id},
                       token=user["token"])
    assert r.status == 200, r
    r = resize(server, user, iid, 40, spec, 409)
    assert r.code == "being_migrated", r
    assert server.request("GET", f"/v1/instances/{iid}",
                          token=user["token"]).json["data_disk_gib"] == 30
