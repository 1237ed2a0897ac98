"""T260: crash recovery (DESIGN.md section 1, issue 4 item 1). kill -9 of the
agent leaves instances and SSH sessions running and the restarted agent adopts
them; after a simulated host reboot the agent brings back exactly what should
run; kill -9 of suanlid never changes what runs on a node."""
import glob
import ipaddress
import json
import os
import re
import signal
import subprocess
import time

from conftest import NETNS_PIN_DIRS, TEST_BRIDGE, host_leftovers, wait_for


def runc(data_dir, *args):
    return subprocess.run(["runc", "--root", os.path.join(data_dir, "runc"), *args],
                          capture_output=True, text=True)


def container(data_dir, iid):
    """(status, init pid, init start time) of the instance's container, or None."""
    p = runc(data_dir, "state", iid)
    if p.returncode != 0:
        return None
    st = json.loads(p.stdout)
    start = None
    try:
        with open(f"/proc/{st['pid']}/stat") as f:
            start = f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, KeyError):
        pass
    return st["status"], st.get("pid"), start


def running_pid(data_dir, iid):
    c = container(data_dir, iid)
    return c[1] if c and c[0] == "running" else None


def wait_host(node, fn, what, timeout=30):
    try:
        return wait_for(fn, timeout, what=what)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{node.log_text()[-3000:]}") from None


def log_since(node, offset):
    return node.log_text()[offset:]


def leases(data_dir):
    """{ip: container id} of the host-local IPAM store."""
    out = {}
    for path in glob.glob(os.path.join(data_dir, "net", "ipam", "*", "*")):
        try:
            ipaddress.ip_address(os.path.basename(path))
        except ValueError:
            continue
        with open(path) as f:
            out[os.path.basename(path)] = f.read().split()[0]
    return out


def iptables_save():
    return subprocess.run(["iptables-save"], capture_output=True, text=True).stdout


def rules_of(iid, ip, port):
    """The iptables rules that belong to an instance, its address written
    as IP, sorted (duplicates kept: a duplicate shows as a longer list)."""
    lines = iptables_save().splitlines()
    mine = [line for line in lines if line.startswith("-A ") and (
        iid in line or re.search(rf"\b{re.escape(ip)}\b", line)
        or re.search(rf"--dports? {port}\b", line))]
    return sorted(re.sub(rf"\b{re.escape(ip)}\b", "IP", line) for line in mine)


def instance_ip(data_dir, iid):
    with open(os.path.join(data_dir, "net", "results", f"{iid}.json")) as f:
        return json.load(f)["ips"][0]["address"].split("/")[0]


def release_all(cluster, user, ids):
    for iid in ids:
        cluster.verb(user, iid, "release")
    for iid in ids:
        cluster.wait_state(user, iid, "released")


def test_agent_kill9_adopts_instances_and_ssh_sessions_live_on(cluster):
    node, data = cluster.node, cluster.node.data_dir
    user = cluster.renter()
    inst = cluster.create(user, gpus=1, data_disk_gib=5)
    iid = inst["id"]
    stopped = cluster.create(user, gpus=1, data_disk_gib=5)
    assert cluster.verb(user, stopped["id"], "stop").status == 200
    cluster.wait_state(user, stopped["id"], "stopped")
    before = container(data, iid)
    assert before[0] == "running" and before[2]
    events_before = cluster.server.request("GET", f"/v1/instances/{iid}/events",
                                           token=user["token"]).json["items"]

    # an SSH session open across the kill
    session = subprocess.Popen(
        ["ssh", "-i", user["key"], "-p", str(inst["ssh"]["port"]),
         "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
         "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", f"root@{inst['ssh']['host']}",
         "echo started; sleep 8; echo alive"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert session.stdout.readline().strip() == "started"
        offset = len(node.log_text())
        node.stop(signal.SIGKILL)
        assert container(data, iid) == before  # nothing noticed the agent die
        node.start()
        wait_host(node, lambda: f"adopted {iid}" in log_since(node, offset),
                  "the restarted agent to adopt the instance")
        assert session.poll() is None  # still open after the agent came back
        out, err = session.communicate(timeout=30)
        assert session.returncode == 0 and out.strip() == "alive", (out, err)
    finally:
        if session.poll() is None:
            session.kill()
            session.wait()

    log = log_since(node, offset)
    assert f"starting {iid}" not in log and f"restarting {iid}" not in log, log
    assert stopped["id"] not in log, log  # a stopped instance is left alone
    assert container(data, iid) == before  # same init (sshd), same start time
    assert container(data, stopped["id"]) is None
    assert cluster.get(user, iid)["state"] == "running"
    assert cluster.get(user, stopped["id"])["state"] == "stopped"
    assert cluster.ssh(user, inst, "echo ok").stdout.strip() == "ok"
    events = cluster.server.request("GET", f"/v1/instances/{iid}/events",
                                    token=user["token"]).json["items"]
    assert len(events) == len(events_before)

    release_all(cluster, user, [iid, stopped["id"]])
    assert host_leftovers(data, iid, inst["ssh"]["port"]) == []
    assert host_leftovers(data, stopped["id"], stopped["ssh"]["port"]) == []


def simulate_reboot(data_dir, leave_runc_state=()):
    """What a host reboot loses: every container process, every mount and loop
    device, the network namespaces and the bridge. What it keeps: the data
    directory (disk files, runc's and CNI's state, now stale) and, as on a
    host that restores its firewall at boot, the iptables rules. Containers in
    leave_runc_state die without runc deleting them (runc lists them
    "stopped", as after a real reboot)."""
    for cid in runc(data_dir, "list", "-q").stdout.split():
        if cid in leave_runc_state:
            os.kill(running_pid(data_dir, cid), signal.SIGKILL)
            wait_for(lambda: container(data_dir, cid)[0] == "stopped", timeout=10,
                     what=f"{cid} to die")
        else:
            runc(data_dir, "kill", cid, "KILL")
            assert runc(data_dir, "delete", "--force", cid).returncode == 0
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split()[4] for line in f
                  if line.split()[4].startswith(os.path.join(data_dir, "instances") + "/")]
    for m in sorted(set(mounts), key=len, reverse=True):  # overlays before disks
        subprocess.run(["umount", m], check=True)
    for line in subprocess.run(["losetup", "-a"], capture_output=True,
                               text=True).stdout.splitlines():
        if data_dir in line:
            subprocess.run(["losetup", "-d", line.split(":")[0]], check=True)
    for iid in os.listdir(os.path.join(data_dir, "instances")):
        for pins in NETNS_PIN_DIRS:
            ns = f"{pins}/suanli-{iid}"
            if os.path.exists(ns):
                subprocess.run(["umount", ns], check=True)
                os.unlink(ns)
    subprocess.run(["ip", "link", "del", TEST_BRIDGE], capture_output=True)


def test_host_reboot_brings_back_exactly_what_should_run(cluster):
    node, data = cluster.node, cluster.node.data_dir
    user = cluster.renter()
    a, b, c, d, e = (cluster.create(user, gpus=1, data_disk_gib=5) for _ in range(5))
    cluster.ssh(user, a, "echo a-data > /root/data/keep; echo a-sys > /root/keep")
    cluster.ssh(user, b, "echo b-data > /root/data/keep; echo b-sys > /root/keep")
    assert cluster.verb(user, b["id"], "stop").status == 200
    assert cluster.verb(user, c["id"], "release").status == 200
    cluster.wait_state(user, b["id"], "stopped")
    cluster.wait_state(user, c["id"], "released")
    a_ip = instance_ip(data, a["id"])
    a_rules = rules_of(a["id"], a_ip, a["ssh"]["port"])
    a_pid = running_pid(data, a["id"])
    assert a_rules and a_pid

    node.stop()
    offset = len(node.log_text())
    # while the agent is down: d is stopped, e released
    assert cluster.verb(user, d["id"], "stop").status == 200
    assert cluster.verb(user, e["id"], "release").status == 200
    d_ip, e_ip = instance_ip(data, d["id"]), instance_ip(data, e["id"])
    simulate_reboot(data, leave_runc_state=(a["id"],))
    assert container(data, a["id"])[0] == "stopped"
    assert set(leases(data).values()) >= {f"suanli-{x['id']}" for x in (a, d, e)}  # stale

    node.start()
    wait_host(node, lambda: running_pid(data, a["id"]) not in (None, a_pid), "a to run again")
    cluster.wait_state(user, d["id"], "stopped")
    cluster.wait_state(user, e["id"], "released")
    # (the agent converges instances concurrently: d and e may be done
    # before a's sshd answers)
    wait_host(node, lambda: cluster.ssh(user, a, "true", check=False).returncode == 0,
              "a's sshd to answer")
    # running comes back with its data, on a fresh address, with one set of rules
    assert cluster.ssh(user, a, "cat /root/data/keep /root/keep").stdout.split() == \
        ["a-data", "a-sys"]
    assert cluster.get(user, a["id"])["state"] == "running"
    new_ip = instance_ip(data, a["id"])
    assert rules_of(a["id"], new_ip, a["ssh"]["port"]) == a_rules
    if new_ip != a_ip:  # none for the old address
        assert not re.search(rf"\b{re.escape(a_ip)}\b", iptables_save())
    # one lease per running container, none of the others
    running = set(runc(data, "list", "-q").stdout.split())
    assert sorted(leases(data).values()) == sorted(f"suanli-{x}" for x in running)
    assert f"suanli-{a['id']}" in leases(data).values()
    # stopped ones stay stopped with their disks; released ones stay gone
    for x, ip in ((b, None), (d, d_ip)):
        assert container(data, x["id"]) is None
        assert os.path.exists(os.path.join(data, "instances", x["id"], "data.img"))
        assert host_leftovers(data, x["id"], x["ssh"]["port"]) == ["instance directory"]
        if ip:
            assert rules_of(x["id"], ip, x["ssh"]["port"]) == []
    assert host_leftovers(data, c["id"], c["ssh"]["port"]) == []
    assert host_leftovers(data, e["id"], e["ssh"]["port"]) == []
    assert rules_of(e["id"], e_ip, e["ssh"]["port"]) == []
    log = log_since(node, offset)
    assert f"starting {b['id']}" not in log and c["id"] not in log, log
    assert f"cleaning up {d['id']}" in log, log  # its dead container, lease and rules

    # the stopped one starts with its data
    assert cluster.verb(user, b["id"], "start").status == 200
    b2 = cluster.wait_state(user, b["id"], "running")
    assert cluster.ssh(user, b2, "cat /root/data/keep /root/keep").stdout.split() == \
        ["b-data", "b-sys"]

    release_all(cluster, user, [a["id"], b["id"], d["id"]])
    for x in (a, b, c, d, e):
        assert host_leftovers(data, x["id"], x["ssh"]["port"]) == []
    assert not any(x["id"] in v for v in leases(data).values() for x in (a, b, c, d, e))


def test_suanlid_kill9_changes_nothing_on_the_node(cluster):
    node, data, s = cluster.node, cluster.node.data_dir, cluster.server
    user = cluster.renter()
    a, b = cluster.create(user, gpus=1, data_disk_gib=5), cluster.create(user, gpus=1,
                                                                          data_disk_gib=5)
    before = {x["id"]: container(data, x["id"]) for x in (a, b)}
    offset = len(node.log_text())

    s.kill9()
    wait_for(lambda: "cannot read the desired state" in log_since(node, offset), timeout=10,
             what="the agent to notice")
    # a whole heartbeat interval (3 s) and many polls with the API gone: the
    # duration is the condition (no event marks it: the agent logs only the
    # first failure)
    deadline = time.time() + 3.5
    while time.time() < deadline:
        assert {x: container(data, x) for x in before} == before
        time.sleep(0.2)
    assert cluster.ssh(user, a, "echo ok").stdout.strip() == "ok"

    s.start()
    wait_host(node, lambda: "desired state readable again" in log_since(node, offset),
              "the agent to reconnect", timeout=10)
    log = log_since(node, offset)
    assert log.count("cannot read the desired state") == 1, log
    assert "heartbeat" not in log, log  # failed heartbeats say nothing more
    assert {x: container(data, x) for x in before} == before
    for x in (a, b):
        assert cluster.get(user, x["id"])["state"] == "running"

    # a stop acknowledged just before suanlid dies is carried out after it returns
    assert cluster.verb(user, b["id"], "stop").status == 200
    s.kill9()
    s.start()
    cluster.wait_state(user, b["id"], "stopped")
    assert container(data, b["id"]) is None
    assert container(data, a["id"]) == before[a["id"]]
    assert cluster.get(user, a["id"])["state"] == "running"
    release_all(cluster, user, [a["id"], b["id"]])
    for x in (a, b):
        assert host_leftovers(data, x["id"], x["ssh"]["port"]) == []


def test_an_instance_stopped_midway_through_its_boot_boots_again(cluster):
    """An instance stopped (or its host crashed) while chpasswd held the
    account files' lock leaves /etc/passwd.lock on its system disk; the next
    boot's chpasswd finds the pid in it alive again in a new pid namespace
    and refuses, and with it the whole boot, on every later start (found by
    t280's late runc failures). And a host key made halfway is not kept."""
    user = cluster.renter()
    inst = cluster.create(user)
    iid = inst["id"]
    # pid 1 is alive in every boot: the worst stale lock there can be
    cluster.ssh(user, inst, "echo 1 > /etc/passwd.lock && echo 1 > /etc/shadow.lock && "
                "rm /etc/ssh/ssh_host_ed25519_key* && echo half > /etc/ssh/ed25519.tmp")
    assert cluster.verb(user, iid, "stop").status == 200
    cluster.wait_state(user, iid, "stopped")
    assert cluster.verb(user, iid, "start").status == 200
    cluster.wait_state(user, iid, "running")
    p = cluster.ssh(user, inst, "ls /etc/passwd.lock /etc/shadow.lock /etc/ssh/ed25519.tmp; "
                    "ssh-keygen -l -f /etc/ssh/ssh_host_ed25519_key.pub", check=False)
    assert "No such file" in p.stderr and p.stderr.count("No such file") == 3, p
    assert "ED25519" in p.stdout, p
    assert cluster.verb(user, iid, "release").status == 200
    cluster.wait_state(user, iid, "released")
