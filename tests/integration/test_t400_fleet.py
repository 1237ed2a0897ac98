"""Several hosts for real (issue 12, item 1): the fleet harness itself.
Three suanli-node agents, each in a network namespace of its own with its
own address, bridge, firewall and nginx, against one suanlid; instances
placed across them answer SSH at their own host's address; a host whose
link is cut goes silent, its instances run on, and what was asked of it
while it was away reaches it when the link comes back."""
import os
import subprocess

from conftest import FLEET_SIZE, wait_for


def admin_node(fleet, node):
    r = fleet.server.request("GET", f"/v1/admin/nodes/{node.node_id}",
                             token=fleet.server.admin_token)
    assert r.status == 200, r
    return r.json


def runc_status(node, iid):
    p = subprocess.run(["runc", "--root", os.path.join(node.data_dir, "runc"), "state", iid],
                       capture_output=True, text=True)
    return "absent" if p.returncode else __import__("json").loads(p.stdout)["status"]


def test_every_host_is_a_machine_of_its_own(fleet):
    addresses = set()
    for node in fleet.nodes:
        n = admin_node(fleet, node)
        assert n["state"] == "online" and n["gpus_total"] == 2, n
        assert n["address"] == node.address and n["hostname"].startswith("fleet-host-"), n
        addresses.add(n["address"])
        # its nginx lives in its namespace, not in this machine's
        listening = fleet.in_host(node, "ss", "-Htln").stdout
        assert f"{node.address}:{node.proxy_port}" in listening, listening
        # the host reaches suanlid over its link
        assert node.server.url.startswith(f"http://{fleet.link.gateway}:")
    assert len(addresses) == FLEET_SIZE
    mine = subprocess.run(["ss", "-Htln"], capture_output=True, text=True).stdout
    assert not any(f"{n.address}:" in mine for n in fleet.nodes), mine


def test_instances_spread_over_hosts_answer_at_their_hosts_address(fleet):
    user = fleet.renter()
    made = []
    try:
        # two GPUs a host: each 2-GPU instance needs a host of its own
        for _ in range(FLEET_SIZE):
            r = fleet.create(user, gpus=2, data_disk_gib=5, wait=False)
            assert r.status == 201, r
            made.append(r.json["id"])
        insts = [fleet.wait_state(user, iid, "running") for iid in made]
        assert len({i["node_id"] for i in insts}) == FLEET_SIZE
        for inst in insts:
            node = fleet.node_of(inst)
            assert inst["ssh"]["host"] == node.address, inst
            assert fleet.ssh(user, inst, "hostname").stdout.strip() == inst["id"]
            # the container runs on that host: in its runc, on the bridge
            # and subnet of the host's own namespace
            assert runc_status(node, inst["id"]) == "running"
            addr = fleet.in_host(node, "ip", "-4", "-o", "addr", "show", node.bridge).stdout
            assert node.subnet.rsplit(".", 1)[0] + "." in addr, addr
        # a fourth finds no host with two free GPUs
        r = fleet.create(user, gpus=2, data_disk_gib=5, wait=False)
        assert r.status == 409, r
    finally:
        for iid in made:
            fleet.verb(user, iid, "release")
        for iid in made:
            fleet.wait_state(user, iid, "released")


def test_a_cut_host_goes_silent_and_hears_what_was_asked_when_it_returns(fleet):
    user = fleet.renter()
    inst = fleet.create(user, gpus=1, data_disk_gib=5)
    node = fleet.node_of(inst)
    try:
        fleet.cut(node)
        wait_for(lambda: admin_node(fleet, node)["state"] == "offline", timeout=90,
                 interval=0.5, what="suanlid to see the host offline")
        # neither SSH nor anything else crosses a cut link
        p = fleet.ssh(user, inst, "true", check=False, timeout=30)
        assert p.returncode != 0
        r = fleet.verb(user, inst["id"], "stop")
        assert r.status in (200, 202), r
        # the host has not heard: its instance runs on
        assert runc_status(node, inst["id"]) == "running"
        fleet.restore(node)
        wait_for(lambda: runc_status(node, inst["id"]) != "running", timeout=60,
                 what="the stop to reach the host once its link is back")
        fleet.wait_state(user, inst["id"], "stopped")
        assert admin_node(fleet, node)["state"] == "online"
        # started again, it is the same instance on the same host
        assert fleet.verb(user, inst["id"], "start").status in (200, 202)
        again = fleet.wait_state(user, inst["id"], "running")
        assert again["node_id"] == node.node_id
        assert fleet.ssh(user, again, "hostname").stdout.strip() == inst["id"]
    finally:
        fleet.restore(node)
        fleet.verb(user, inst["id"], "release")
        fleet.wait_state(user, inst["id"], "released")
