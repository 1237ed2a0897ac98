"""Whether a host serves the terminal in the browser (issue 13, item 3;
docs/design/access.md, "Terminal").

An agent without nginx, or in a chroot (where the runtime's exec would put
the shell on the host's root), serves no terminals. Its heartbeat says so;
the instance shows `terminal: false`, and a ticket is refused with 409
`terminal_unavailable` and a pointer to SSH, not handed out for a websocket
nginx would then refuse. Runs everywhere, in a chroot too (t530 and t531,
which open real terminals, skip there)."""
import sqlite3

from conftest import ApiHost, chrooted
from test_t440_clone import api_renter


def ticket(server, user, iid):
    return server.request("POST", f"/v1/instances/{iid}/terminal", {}, token=user["token"])


def test_a_host_without_terminals_refuses_tickets(server):
    host = ApiHost(server, gpus=1, terminals=False)
    user = api_renter(server)
    r = server.request("POST", "/v1/instances", {"gpu_model": "RTX 4090", "gpus": 1,
                                                 "image": host.image, "data_disk_gib": 5,
                                                 "host": host.node_id}, token=user["token"])
    assert r.status == 201, r
    iid = r.json["id"]
    host.heartbeat([{"id": iid, "state": "running", "generation": 1}])
    inst = server.request("GET", f"/v1/instances/{iid}", token=user["token"]).json
    assert inst["state"] == "running" and inst["terminal"] is False, inst
    r = ticket(server, user, iid)
    assert r.status == 409 and r.code == "terminal_unavailable", r
    assert f"suanli ssh {iid}" in r.json["error"]["message"], r
    # no ticket was made for it
    db = sqlite3.connect(f"file:{server.data_dir}/suanli.db?mode=ro", uri=True)
    try:
        tickets = db.execute("SELECT COUNT(*) FROM terminal_tickets WHERE instance_id = ?",
                             (iid,)).fetchall()
    finally:
        db.close()
    assert tickets == [(0,)], tickets

    # the host's agent serves them now (nginx came up): the instance says so
    # and a ticket is made
    host.terminals = True
    host.heartbeat([{"id": iid, "state": "running", "generation": 1}])
    inst = server.request("GET", f"/v1/instances/{iid}", token=user["token"]).json
    assert inst["terminal"] is True, inst
    r = ticket(server, user, iid)
    assert r.status == 201, r
    # and back: a heartbeat without the field is a host that serves none
    r = server.request("POST", f"/v1/nodes/{host.node_id}/heartbeat", {
        "inventory": host.inventory(), "instances": [{"id": iid, "state": "running",
                                                      "generation": 1}]}, token=host.token)
    assert r.status == 200, r
    r = ticket(server, user, iid)
    assert r.status == 409 and r.code == "terminal_unavailable", r
    # a bad value is refused, not read as either
    r = server.request("POST", f"/v1/nodes/{host.node_id}/heartbeat", {
        "inventory": host.inventory(), "terminals": "yes"}, token=host.token)
    assert r.status == 400, r


def test_a_real_agent_says_whether_it_serves_terminals(cluster):
    """The cluster's agent: it serves terminals on a real host, none in a
    chroot (as under fresh-machine)."""
    owner = cluster.renter()
    inst = cluster.create(owner)
    try:
        got = cluster.server.request("GET", f"/v1/instances/{inst['id']}",
                                     token=owner["token"]).json
        assert got["terminal"] is (chrooted() is None), got
        r = ticket(cluster.server, owner, inst["id"])
        if chrooted():
            assert r.status == 409 and r.code == "terminal_unavailable", r
        else:
            assert r.status == 201, r
    finally:
        cluster.verb(owner, inst["id"], "release")
