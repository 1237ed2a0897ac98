"""Operators run a fleet (issue 12, item 4; docs/operations.md, "A fleet"):
a cordoned host takes nothing new while another host does; a drain stops the
pay-as-you-go instances with a notice their renters see and leaves plans
running; a host is removed only once nothing lives there, and its token dies
with it; a host silent past nodes.lost_after shows its instances host_lost,
bills nothing, and gives them back their states when it reports again."""
import json
import time

from conftest import IMAGE, ApiHost, Cli, Cluster, wait_for

MODEL = "RTX 4090"


def create(server, user, image, **extra):
    return server.request("POST", "/v1/instances",
                          {"gpu_model": MODEL, "gpus": 1, "image": image, "data_disk_gib": 10,
                           **extra}, token=user["token"])


def admin(server, method, node_id, verb=None, body=None, token=None):
    path = f"/v1/admin/nodes/{node_id}" + (f"/{verb}" if verb else "")
    return server.request(method, path, body, token=token or server.admin_token)


def report(host, *states):
    """The ApiHost reports (instance id, state) pairs; a generation past any
    asked for, so a running report counts."""
    host.heartbeat([{"id": i, "state": s, "generation": 1000} for i, s in states])


def get(server, user, iid):
    r = server.request("GET", f"/v1/instances/{iid}", token=user["token"])
    assert r.status == 200, r
    return r.json


def events(server, user, iid):
    r = server.request("GET", f"/v1/instances/{iid}/events", token=user["token"])
    assert r.status == 200, r
    return r.json["items"]


def market_hosts(server, user):
    """The node ids the market offers (GET /v1/market's per-host offers)."""
    r = server.request("GET", "/v1/market", token=user["token"])
    assert r.status == 200, r
    return {h["node_id"] for item in r.json["items"] for h in item.get("hosts", [])}


def two_hosts(make_server, settings=None):
    """A small host (2 GPUs: best fit fills it first) and a big one."""
    server = make_server(settings)
    small, big = ApiHost(server, gpus=2), ApiHost(server, gpus=8)
    return server, small, big, Cluster(server, None).renter()


def test_t430_cordon_stops_placement_while_another_host_takes_it(make_server, tmp_path):
    server, small, big, user = two_hosts(make_server)
    r = create(server, user, small.image)
    assert r.status == 201 and r.json["node_id"] == small.node_id, r
    first = r.json["id"]

    r = admin(server, "POST", small.node_id, "cordon", {"reason": "disk swap until 18:00"})
    assert r.status == 200 and r.json["cordoned"] and not r.json["draining"], r
    assert r.json["cordon_reason"] == "disk swap until 18:00", r
    r = create(server, user, small.image)
    assert r.status == 201 and r.json["node_id"] == big.node_id, r
    # the market offers the other host only
    assert market_hosts(server, user) == {big.node_id}
    # pinned to the cordoned host: refused, saying why and the way out
    r = create(server, user, small.image, host=small.node_id)
    if r.code != "unknown_field":  # create's `host` is item 2's, landing beside this
        assert r.status == 409 and r.code == "host_unavailable", r
        msg = r.json["error"]["message"]
        assert "disk swap until 18:00" in msg and "suanli market" in msg, msg
    # its instance stays where it is
    assert get(server, user, first)["desired"] == "running"
    # every host cordoned: no capacity, said as such
    assert admin(server, "POST", big.node_id, "cordon").status == 200
    r = create(server, user, small.image)
    assert r.status == 409 and r.code == "no_capacity", r
    assert admin(server, "POST", big.node_id, "uncordon").status == 200

    ops = Cli(server, str(tmp_path))
    env = {"SUANLI_TOKEN": server.admin_token}
    p = ops.run("admin", "node", "ls", env=env, check=True)
    line = next(x for x in p.stdout.splitlines() if small.node_id in x)
    assert "online, cordoned" in line, p.stdout
    p = ops.run("admin", "node", "show", small.node_id, env=env, check=True)
    assert "disk swap until 18:00" in p.stdout and "1: i-" in p.stdout, p.stdout
    p = ops.run("admin", "node", "uncordon", small.node_id, env=env, check=True)
    assert "uncordoned" in p.stdout, p.stdout
    r = create(server, user, small.image)
    assert r.status == 201 and r.json["node_id"] == small.node_id, r
    assert market_hosts(server, user) == {small.node_id, big.node_id}
    p = ops.run("admin", "node", "cordon", "n-nope", env=env)
    assert p.returncode != 0 and "no node 'n-nope'" in p.stderr, p


def test_t431_a_stopped_instance_starts_on_a_cordoned_host_only_without_new_gpus(make_server):
    server, small, big, user = two_hosts(make_server)
    iid = create(server, user, small.image).json["id"]
    report(small, (iid, "running"))
    r = server.request("POST", f"/v1/instances/{iid}/stop", {}, token=user["token"])
    assert r.status == 200, r
    report(small, (iid, "stopped"))
    assert get(server, user, iid)["state"] == "stopped"

    assert admin(server, "POST", small.node_id, "cordon").status == 200
    inst = get(server, user, iid)
    assert "takes no new work" in inst["state_message"], inst
    r = server.request("POST", f"/v1/instances/{iid}/start", {}, token=user["token"])
    assert r.status == 409 and r.code == "host_unavailable", r
    msg = r.json["error"]["message"]
    assert f"suanli start --no-gpu {iid}" in msg and f"suanli release {iid}" in msg, msg
    # the source's host serves copies while cordoned: a clone is a way out
    assert f"suanli clone {iid}" in msg, msg
    # no-GPU mode takes none of its GPUs: the renter reaches their data
    r = server.request("POST", f"/v1/instances/{iid}/start", {"mode": "nogpu"},
                       token=user["token"])
    assert r.status == 200 and r.json["state"] == "starting", r


def test_t432_drain_stops_pay_as_you_go_and_leaves_plans_running(make_server, tmp_path):
    server, small, big, user = two_hosts(make_server)
    payg = create(server, user, small.image).json["id"]
    plan = create(server, user, small.image, plan="day").json["id"]
    report(small, (payg, "running"), (plan, "running"))
    assert get(server, user, payg)["node_id"] == get(server, user, plan)["node_id"] \
        == small.node_id

    ops = Cli(server, str(tmp_path))
    p = ops.run("-o", "json", "admin", "node", "drain", small.node_id, "--reason", "new fans",
                env={"SUANLI_TOKEN": server.admin_token}, check=True)
    out = json.loads(p.stdout)
    assert out["stopped"] == [payg] and out["running_on_plan"] == [plan], out
    assert out["node"]["draining"] and out["node"]["cordoned"], out

    inst = get(server, user, payg)
    assert inst["state"] == "stopping" and inst["desired"] == "stopped", inst
    notice = [e for e in events(server, user, payg) if e["kind"] == "host_drain"]
    assert len(notice) == 1 and "new fans" in notice[0]["message"], notice
    assert f"suanli release {payg}" in notice[0]["message"], notice
    assert f"suanli clone {payg}" in notice[0]["message"], notice
    assert any(e["kind"] == "stop" and e["reason"] == "host_drain"
               for e in events(server, user, payg))
    report(small, (payg, "stopped"), (plan, "running"))
    inst = get(server, user, payg)
    assert inst["state"] == "stopped" and "drained for maintenance" in inst["state_message"], inst
    kept = get(server, user, plan)
    assert kept["state"] == "running" and "plan runs to its end" in kept["state_message"], kept
    assert any(e["kind"] == "host_drain" for e in events(server, user, plan))

    # nothing starts there, not even without GPUs: the host is being emptied
    for body in ({}, {"mode": "nogpu"}):
        r = server.request("POST", f"/v1/instances/{payg}/start", body, token=user["token"])
        assert r.status == 409 and r.code == "host_unavailable", r
        assert "drained for maintenance" in r.json["error"]["message"], r
    # a second drain stops nothing more and tells nobody twice
    r = admin(server, "POST", small.node_id, "drain")
    assert r.status == 200 and r.json["stopped"] == [], r
    assert len([e for e in events(server, user, payg) if e["kind"] == "host_drain"]) == 1

    assert admin(server, "POST", small.node_id, "uncordon").json["draining"] is False
    r = server.request("POST", f"/v1/instances/{payg}/start", {}, token=user["token"])
    assert r.status == 200, r
    assert get(server, user, payg)["state_message"] == ""


def test_t433_remove_refuses_while_instances_live_there(make_server, tmp_path):
    server, small, big, user = two_hosts(make_server)
    iid = create(server, user, small.image).json["id"]
    report(small, (iid, "running"))

    r = admin(server, "DELETE", small.node_id)
    assert r.status == 409 and r.code == "node_not_empty", r
    msg = r.json["error"]["message"]
    assert f"{iid} (running, payg)" in msg and "suanli admin node drain" in msg, msg
    r = server.request("POST", f"/v1/instances/{iid}/release", {}, token=user["token"])
    assert r.status == 200, r
    r = admin(server, "DELETE", small.node_id)
    assert r.status == 409 and f"{iid} (releasing, payg)" in r.json["error"]["message"], r
    report(small, (iid, "absent"))
    assert get(server, user, iid)["state"] == "released"

    p = Cli(server, str(tmp_path)).run("admin", "node", "remove", small.node_id,
                                       env={"SUANLI_TOKEN": server.admin_token}, check=True)
    assert f"removed node {small.node_id}" in p.stdout, p.stdout
    # its token is dead, it is gone from the lists, its GPUs from placement
    r = server.request("POST", f"/v1/nodes/{small.node_id}/heartbeat",
                       {"inventory": small.inventory()}, token=small.token)
    assert r.status == 401, r
    r = server.request("GET", f"/v1/nodes/{small.node_id}/desired", token=small.token)
    assert r.status == 401, r
    assert admin(server, "GET", small.node_id).status == 404
    assert admin(server, "DELETE", small.node_id).status == 404
    ids = [n["id"] for n in server.request("GET", "/v1/admin/nodes",
                                           token=server.admin_token).json["items"]]
    assert ids == [big.node_id], ids
    r = create(server, user, small.image, host=small.node_id)
    if r.code != "unknown_field":  # create's `host` is item 2's, landing beside this
        assert r.status == 404 and r.code == "no_such_host", r
    for _ in range(3):
        r = create(server, user, small.image)
        assert r.status == 201 and r.json["node_id"] == big.node_id, r
    # the released instance keeps its history
    assert get(server, user, iid)["node_id"] == small.node_id


def test_t434_renters_and_nodes_cannot_run_the_fleet(make_server):
    server, small, big, user = two_hosts(make_server)
    for method, verb in (("POST", "cordon"), ("POST", "drain"), ("POST", "uncordon"),
                         ("DELETE", None)):
        # a renter: the admin routes do not exist for them (the API's rule)
        r = admin(server, method, small.node_id, verb, {} if verb else None, token=user["token"])
        assert r.status == 404 and r.code == "not_found", r
        # a node's token is no user's
        r = admin(server, method, small.node_id, verb, {} if verb else None, token=small.token)
        assert r.status == 401, r
        r = admin(server, method, big.node_id, verb, {} if verb else None, token=small.token)
        assert r.status == 401, r
    node = admin(server, "GET", small.node_id).json
    assert not node["cordoned"] and not node["draining"], node
    r = admin(server, "POST", small.node_id, "cordon", {"reason": "a\nb"})
    assert r.status == 400, r
    r = admin(server, "POST", small.node_id, "cordon", {"reason": "x" * 201})
    assert r.status == 400, r
    r = admin(server, "POST", small.node_id, "cordon", {"why": "x"})
    assert r.status == 400 and r.code == "unknown_field", r


def test_t435_a_lost_host_shows_host_lost_bills_nothing_and_comes_back(make_server, tmp_path):
    server, small, big, user = two_hosts(
        make_server, {"nodes.offline_after": "2s", "nodes.lost_after": "4s",
                      "instances.stop_check_interval": "1s"})
    iid = create(server, user, small.image).json["id"]
    other = create(server, user, small.image).json["id"]
    report(small, (iid, "running"), (other, "running"))
    r = server.request("POST", f"/v1/instances/{other}/stop", {}, token=user["token"])
    assert r.status == 200, r
    report(small, (iid, "running"), (other, "stopped"))

    inst = wait_for(lambda: (lambda j: j if j["state"] == "host_lost" else None)(
        get(server, user, iid)), timeout=20, what="host_lost")
    msg = inst["state_message"]
    assert "the instance was running" in msg and f"suanli release {iid}" in msg, msg
    assert "nothing is billed" in msg and "clone" not in msg, msg
    assert admin(server, "GET", small.node_id).json["state"] == "lost"
    lost = wait_for(lambda: [e for e in events(server, user, iid) if e["kind"] == "host_lost"],
                    timeout=10, what="host_lost event")
    assert len(lost) == 1 and f"suanli release {iid}" in lost[0]["message"], lost

    # the renter's list and the CLI say it too
    items = server.request("GET", "/v1/instances", token=user["token"]).json["items"]
    assert {i["id"]: i["state"] for i in items}[iid] == "host_lost", items
    renter = Cli(server, str(tmp_path))
    env = {"SUANLI_TOKEN": user["token"]}
    assert "host_lost" in renter.run("show", iid, env=env, check=True).stdout
    assert "host_lost" in renter.run("ls", env=env, check=True).stdout

    # nothing is billed while it is lost
    def charged():
        server.request("POST", "/v1/admin/billing/run", {}, token=server.admin_token)
        return get(server, user, iid)["charged_micros"]
    before = charged()
    time.sleep(2)
    assert charged() == before

    r = server.request("POST", f"/v1/instances/{other}/start", {}, token=user["token"])
    assert r.status == 409 and r.code == "host_lost", r
    assert f"suanli release {other}" in r.json["error"]["message"], r

    # back: the instances show their states again, and are told so
    report(small, (iid, "running"), (other, "stopped"))
    assert get(server, user, iid)["state"] == "running"
    assert get(server, user, other)["state"] == "stopped"
    assert admin(server, "GET", small.node_id).json["state"] == "online"
    assert any(e["kind"] == "host_back" for e in events(server, user, iid))
    # a second loss is told again
    wait_for(lambda: len([e for e in events(server, user, iid) if e["kind"] == "host_lost"]) == 2,
             timeout=20, what="second host_lost event")


def test_t436_removing_a_lost_host_finishes_what_its_renters_released(make_server):
    server, small, big, user = two_hosts(
        make_server, {"nodes.offline_after": "2s", "nodes.lost_after": "2s"})
    gone = create(server, user, small.image).json["id"]
    kept = create(server, user, small.image).json["id"]
    report(small, (gone, "running"), (kept, "running"))
    assert server.request("POST", f"/v1/instances/{gone}/release", {},
                          token=user["token"]).status == 200
    wait_for(lambda: admin(server, "GET", small.node_id).json["state"] == "lost", timeout=20,
             what="lost")
    r = admin(server, "DELETE", small.node_id)
    assert r.status == 409 and kept in r.json["error"]["message"], r
    assert gone not in r.json["error"]["message"], r
    assert server.request("POST", f"/v1/instances/{kept}/release", {},
                          token=user["token"]).status == 200
    assert admin(server, "DELETE", small.node_id).status == 204
    for iid in (gone, kept):
        assert get(server, user, iid)["state"] == "released"


def test_t437_drain_with_a_real_agent(cluster):
    server, node = cluster.server, cluster.node
    user = cluster.renter()
    inst = cluster.create(user)
    try:
        r = admin(server, "POST", node.node_id, "drain", {"reason": "kernel update"})
        # the shared cluster's node may hold other tests' pay-as-you-go
        # instances too: the drain stops them all
        assert r.status == 200 and inst["id"] in r.json["stopped"], r
        stopped = cluster.wait_state(user, inst["id"], "stopped")
        assert "kernel update" in stopped["state_message"], stopped
        r = cluster.verb(user, inst["id"], "start")
        assert r.status == 409 and r.code == "host_unavailable", r
        r = create(server, user, IMAGE)
        assert r.status == 409, r
    finally:
        assert admin(server, "POST", node.node_id, "uncordon").status == 200
    try:
        assert cluster.verb(user, inst["id"], "start").status == 200
        cluster.wait_state(user, inst["id"], "running")
    finally:
        assert cluster.verb(user, inst["id"], "release").status == 200
        cluster.wait_state(user, inst["id"], "released")


def test_t438_a_cut_host_is_lost_then_back_with_real_agents(fleet):
    """Three real hosts; one's link is cut past nodes.lost_after: its
    instance shows host_lost while the other hosts' do not, and shows
    running again, unbilled for the gap, once the link is back."""
    server = fleet.server
    saved = dict(server.settings)
    server.settings.update({"nodes.lost_after": "12s", "instances.stop_check_interval": "1s"})
    server.restart()
    user = fleet.renter()
    made = []
    try:
        for _ in range(2):
            made.append(fleet.create(user, gpus=2, data_disk_gib=5))
        lost_inst, other = made
        node = fleet.node_of(lost_inst)
        assert fleet.node_of(other) is not node
        fleet.cut(node)
        inst = wait_for(lambda: (lambda j: j if j["state"] == "host_lost" else None)(
            get(server, user, lost_inst["id"])), timeout=90, interval=0.5, what="host_lost")
        assert "the instance was running" in inst["state_message"], inst
        assert get(server, user, other["id"])["state"] == "running"
        assert admin(server, "GET", node.node_id).json["state"] == "lost"
        wait_for(lambda: any(e["kind"] == "host_lost"
                             for e in events(server, user, lost_inst["id"])),
                 timeout=20, what="the host_lost event")
        fleet.restore(node)
        fleet.wait_state(user, lost_inst["id"], "running")
        assert admin(server, "GET", node.node_id).json["state"] == "online"
        back = [e for e in events(server, user, lost_inst["id"]) if e["kind"] == "host_back"]
        assert back and "is not billed" in back[-1]["message"], back
        assert fleet.ssh(user, lost_inst, "hostname").stdout.strip() == lost_inst["id"]
    finally:
        for n in fleet.nodes:
            fleet.restore(n)
        for i in made:
            fleet.verb(user, i["id"], "release")
        for i in made:
            fleet.wait_state(user, i["id"], "released")
        server.settings.clear()
        server.settings.update(saved)
        server.restart()
