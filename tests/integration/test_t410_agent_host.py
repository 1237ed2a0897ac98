"""An agent its host cannot knock over, and a faster one (issue 12, items 6
and 7): instance namespace pins where no other tool mounts over them
(`ip netns add` beside running instances), found again from the
container's process when a pin is gone, an older agent's pins in /run/netns
adopted; a stop that keeps failing backs off and says why; the desired
state reaches the agent by long-poll the moment it changes; instances
converge concurrently; SSH keys reach running instances within a second,
and nothing the renter plants inside redirects the agent's write.

One suanlid and one agent of this module's own (poll_ms at 3 s, so that
anything that arrives faster came by long-poll, and a runc wrapper that
can make one container's start slow), on a side network of its own."""
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import (IMAGE, TEST_PORTS, Cluster, Node, Server, cleanup_host, host_leftovers,
                      side_network, wait_for)

BRIDGE, SUBNET, PREFIX = side_network(5, "ah")
PORT_MAX = int(TEST_PORTS[1]) - 100
PORT_MIN = PORT_MAX - 99
POLL_MS = 3000
PINS = "/run/suanli-node/netns"
SLOW_GIB = 2  # an instance with a data disk of this size starts 8 s late


def sh(*args, check=True):
    return subprocess.run(args, capture_output=True, text=True, check=check)


class Host:
    def __init__(self, root, image_src):
        self.root = root
        self.data = os.path.join(root, "node")
        self.wrapper = os.path.join(root, "runc-slow")
        os.makedirs(os.path.join(self.data, "images"))
        os.makedirs(os.path.join(self.data, "layers", "sha256"))
        with open(os.path.join(image_src, "images", IMAGE + ".json")) as f:
            layers = json.load(f)["layers"]
        for layer in layers:
            sh("cp", "-a", os.path.join(image_src, "layers", "sha256", layer),
               os.path.join(self.data, "layers", "sha256", layer))
        shutil.copy(os.path.join(image_src, "images", IMAGE + ".json"),
                    os.path.join(self.data, "images"))
        # a start that takes long, as a large image pull or disk copy does:
        # `runc run` of an instance with a data disk of SLOW_GIB waits first
        with open(self.wrapper, "w") as f:
            f.write("#!/bin/sh\n"
                    "prev=; bundle=\n"
                    "for a in \"$@\"; do [ \"$prev\" = --bundle ] && bundle=$a; prev=$a; done\n"
                    "if [ -n \"$bundle\" ] && [ \"$(stat -c %s \"$bundle/../data.img\" 2>/dev/null)\""
                    f" = {SLOW_GIB << 30} ]; then sleep 8; fi\n"
                    "exec /usr/sbin/runc \"$@\"\n")
        os.chmod(self.wrapper, 0o755)
        self.server = Server(os.path.join(root, "suanlid"),
                             {"nodes.ssh_port_min": PORT_MIN, "nodes.ssh_port_max": PORT_MAX})
        self.node = None
        os.makedirs(self.server.data_dir)
        self.server.start()
        try:
            self.start_node()
        except BaseException:
            # a set-up that fails leaves no suanlid, agent or rule behind
            self.close()
            raise

    def start_node(self):
        admin = self.server.admin_token
        r = self.server.request("POST", "/v1/admin/join-tokens", {"region": "sample-1"},
                                token=admin)
        assert r.status == 201, r
        self.node = Node(self.server, self.data, r.json["token"],
                         network=(BRIDGE, SUBNET), extra=[
                             "--set", f"runtime={self.wrapper}",
                             "--set", f"poll_ms={POLL_MS}"])
        # the image first: a node that reported its copy of it before would
        # hold the name for an image this server never had (409
        # image_name_held, seen on a fresh machine)
        r = self.server.request("POST", "/v1/admin/images", {"name": IMAGE, "recipe": "base"},
                                token=admin)
        assert r.status == 201, r
        self.node.start()

        def ready():
            items = self.server.request("GET", "/v1/images", token=admin).json["items"]
            return [i for i in items if i["name"] == IMAGE and i["state"] == "ready"]
        wait_for(ready, timeout=30, what="the copied image to be reported ready")
        self.cluster = Cluster(self.server, self.node)
        with open(os.path.join(self.data, "node.json")) as f:
            self.node_token = json.load(f)["node_token"]

    def close(self):
        if self.node:
            self.node.stop()
        self.server.stop()
        cleanup_host(self.data, bridge=BRIDGE, prefix=PREFIX)
        shutil.rmtree(self.root, ignore_errors=True)

    def log(self):
        return self.node.log_text()

    def wait_log(self, text, timeout=30, after=0):
        wait_for(lambda: text in self.log()[after:], timeout=timeout, interval=0.01,
                 what=f"'{text}' in the agent's log")

    @contextlib.contextmanager
    def paused(self):
        """The agent stopped (SIGSTOP) while the test changes the host."""
        self.node.proc.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            self.node.proc.send_signal(signal.SIGCONT)


@pytest.fixture(scope="module")
def host(cluster):
    h = Host(tempfile.mkdtemp(prefix="suanli-t410-", dir="/var/tmp"), cluster.node.data_dir)
    try:
        yield h
    finally:
        h.close()


def new(c, user, wait=True, data_disk_gib=1):
    """A small instance (1 GPU, a 1 GiB data disk); wait: until it runs."""
    r = c.create(user, data_disk_gib=data_disk_gib, wait=False)
    assert r.status == 201, r
    return c.wait_state(user, r.json["id"], "running") if wait else r.json


def is_nsfs(path):
    return sh("stat", "-f", "-c", "%T", path, check=False).stdout.strip() == "nsfs"


def release_clean(host, user, *insts):
    """Releases the instances and checks that nothing of them is left."""
    c = host.cluster
    for inst in insts:
        assert c.verb(user, inst["id"], "release").status == 200
    for inst in insts:
        c.wait_state(user, inst["id"], "released")
    for inst in insts:
        wait_for(lambda: not host_leftovers(host.data, inst["id"], inst["ssh"]["port"]),
                 timeout=20, what=f"nothing of {inst['id']} left")
        assert not os.path.exists(f"/run/netns/suanli-{inst['id']}")
    veths = sh("ip", "-o", "link", "show", "master", BRIDGE, check=False).stdout
    assert not veths.strip(), veths


def ssh_with(inst, key, command="true"):
    return subprocess.run(
        ["ssh", "-i", key, "-p", str(inst["ssh"]["port"]), "-o", "StrictHostKeyChecking=no",
         "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes",
         "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=5",
         f"root@{inst['ssh']['host']}", command],
        capture_output=True, text=True, timeout=30)


# -- item 7: the host cannot knock the agent over ---------------------------


def test_ip_netns_add_beside_running_instances_then_stop_and_release(host):
    c = host.cluster
    user = c.renter()
    a, b = new(c, user), new(c, user)
    for inst in (a, b):
        assert is_nsfs(f"{PINS}/suanli-{inst['id']}")
    other = f"t410-{os.getpid()}"
    sh("ip", "netns", "add", other)
    try:
        assert is_nsfs(f"{PINS}/suanli-{a['id']}") and is_nsfs(f"{PINS}/suanli-{b['id']}")
        assert c.verb(user, a["id"], "stop").status == 200
        c.wait_state(user, a["id"], "stopped")
        release_clean(host, user, a, b)
    finally:
        sh("ip", "netns", "del", other, check=False)
    assert "unknown FS magic" not in host.log()


def test_pin_gone_under_a_running_instance_is_found_from_its_process(host):
    """What `ip netns add` did to the pins of an agent that kept them in a
    directory another tool mounts over: the pin's mount is gone, the file
    stays, the container runs on in its namespace."""
    c = host.cluster
    user = c.renter()
    a = new(c, user)
    pin = f"{PINS}/suanli-{a['id']}"
    with host.paused():  # no pass of the agent between the two steps
        sh("umount", pin)
        assert os.path.exists(pin) and not is_nsfs(pin)
    host.wait_log(f"agent: {a['id']}: network namespace pinned again (from its process)",
                  timeout=POLL_MS / 1000 * 3)
    assert is_nsfs(pin)
    # and once more right before a stop, which must find it by itself
    sh("umount", pin)
    assert c.verb(user, a["id"], "stop").status == 200
    c.wait_state(user, a["id"], "stopped")
    release_clean(host, user, a)
    assert "unknown FS magic" not in host.log()


def test_older_agents_pin_in_run_netns_is_adopted(host):
    """An instance that ran across an upgrade: its pin in /run/netns."""
    c = host.cluster
    user = c.renter()
    a = new(c, user)
    pin, legacy = f"{PINS}/suanli-{a['id']}", f"/run/netns/suanli-{a['id']}"
    os.makedirs("/run/netns", exist_ok=True)
    with host.paused():
        open(legacy, "w").close()
        sh("mount", "--bind", pin, legacy)
        sh("umount", pin)
        os.unlink(pin)
    host.wait_log(f"agent: {a['id']}: network namespace pinned again (from /run/netns)",
                  timeout=POLL_MS / 1000 * 3)
    assert is_nsfs(pin) and not os.path.exists(legacy)
    assert c.ssh(user, a, "true").returncode == 0
    release_clean(host, user, a)


def test_a_stop_that_keeps_failing_backs_off_and_says_why(host):
    c = host.cluster
    user = c.renter()
    a = new(c, user)
    root = os.path.join(host.data, "instances", a["id"], "rootfs", "root")
    # a process on the host inside the instance's root: its overlay is busy
    holder = subprocess.Popen(["sleep", "600"], cwd=root)
    try:
        start = len(host.log())
        assert c.verb(user, a["id"], "stop").status == 200
        got = wait_for(lambda: (lambda i: i if "busy" in (i["state_message"] or "") else None)(
            c.get(user, a["id"])), timeout=20, what="the stop's failure in the state message")
        assert "stop failed" in got["state_message"] and "trying again" in got["state_message"]
        time.sleep(7)  # what a 200 ms retry would have logged 35 times
        tries = host.log()[start:].count(f"agent: stop {a['id']}:")
        assert tries == 1, host.log()[start:]
    finally:
        holder.kill()
        holder.wait()
    host.wait_log(f"agent: stop {a['id']}: done after earlier failures", timeout=70)
    wait_for(lambda: not c.get(user, a["id"])["state_message"], timeout=10,
             what="the failure's state message to go")
    release_clean(host, user, a)


# -- item 6: a faster agent -------------------------------------------------


def test_desired_state_by_long_poll(host):
    s, nid, tok = host.server, host.node.node_id, host.node_token
    r = s.request("GET", f"/v1/nodes/{nid}/desired", token=tok)  # the plain read still works
    assert r.status == 200 and r.json["revision"] >= 1, r
    rev = r.json["revision"]
    assert s.request("GET", f"/v1/nodes/{nid}/desired?after={rev - 1}", token=tok).status == 200
    assert s.request("GET", f"/v1/nodes/{nid}/desired?after={rev}", token=tok).status == 304
    t0 = time.monotonic()
    r = s.request("GET", f"/v1/nodes/{nid}/desired?after={rev}&wait=1", token=tok)
    assert r.status == 304 and 0.9 <= time.monotonic() - t0 < 3, (r, time.monotonic() - t0)
    for bad in ("after=-1", "after=x", "wait=61", "after=1&wait=-2"):
        r = s.request("GET", f"/v1/nodes/{nid}/desired?{bad}", token=tok)
        assert r.status == 400, (bad, r)
    # another node's desired state is not this node's to wait on
    assert s.request("GET", f"/v1/nodes/n-nobody/desired?after=0&wait=5",
                     token=tok).status == 404


def test_a_stop_reaches_the_agent_at_once(host):
    c = host.cluster
    user = c.renter()
    a = new(c, user)
    waits = []
    for _ in range(3):
        start = len(host.log())
        t0 = time.monotonic()
        assert c.verb(user, a["id"], "stop").status == 200
        host.wait_log(f"agent: stopping {a['id']}", after=start, timeout=10)
        waits.append(time.monotonic() - t0)
        c.wait_state(user, a["id"], "stopped")
        assert c.verb(user, a["id"], "start").status == 200
        c.wait_state(user, a["id"], "running")
    print(f"API stop -> agent's 'stopping' line: {', '.join(f'{w * 1000:.0f} ms' for w in waits)}"
          f" (poll_ms {POLL_MS})")
    # by long-poll: far under the agent's own poll interval
    assert max(waits) < 1.0, waits
    release_clean(host, user, a)


def test_a_slow_start_does_not_hold_up_another(host):
    c = host.cluster
    user = c.renter()
    slow = new(c, user, wait=False, data_disk_gib=SLOW_GIB)
    t0 = time.monotonic()
    quick = new(c, user)  # waits for running
    took = time.monotonic() - t0
    assert c.get(user, slow["id"])["state"] != "running"
    c.wait_state(user, slow["id"], "running", timeout=60)
    print(f"the quick start beside a slow one: {took * 1000:.0f} ms")
    release_clean(host, user, slow, quick)


def test_ssh_keys_reach_running_instances(host):
    c, s = host.cluster, host.server
    user = c.renter()
    a = new(c, user)
    keydir = tempfile.mkdtemp(prefix="suanli-t410-key-")
    try:
        key = os.path.join(keydir, "id_new")
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key)
        assert ssh_with(a, key).returncode != 0
        with open(key + ".pub") as f:
            r = s.request("POST", "/v1/ssh-keys", {"public_key": f.read()}, token=user["token"])
        assert r.status == 201, r
        t0 = time.monotonic()
        wait_for(lambda: ssh_with(a, key).returncode == 0, timeout=5, interval=0.1,
                 what="the added key to be accepted")
        added = time.monotonic() - t0
        assert c.get(user, a["id"])["state"] == "running"  # no restart
        r = s.request("DELETE", f"/v1/ssh-keys/{r.json['id']}", token=user["token"])
        assert r.status == 204, r
        t0 = time.monotonic()
        wait_for(lambda: ssh_with(a, key).returncode != 0, timeout=5, interval=0.1,
                 what="the removed key to be refused")
        print(f"key added -> accepted {added * 1000:.0f} ms; removed -> refused "
              f"{(time.monotonic() - t0) * 1000:.0f} ms")
        assert c.ssh(user, a, "true").returncode == 0  # the other key still works
    finally:
        shutil.rmtree(keydir, ignore_errors=True)
    release_clean(host, user, a)


def test_a_planted_symlink_does_not_redirect_the_keys_write(host):
    """The renter is root inside: /root/.ssh becomes a symlink to an
    absolute path, which the host would resolve on the host if it wrote
    through the instance's root. The agent writes the keys into the boot
    directory on the host only."""
    c, s = host.cluster, host.server
    user = c.renter()
    a = new(c, user)
    canary = f"/var/tmp/t410-canary-{os.getpid()}"
    shutil.rmtree(canary, ignore_errors=True)
    c.ssh(user, a, f"rm -rf /root/.ssh && ln -s {canary} /root/.ssh &&"
          f" mkdir -p /root/k && ln -sf /etc/shadow /root/k/authorized_keys")
    keydir = tempfile.mkdtemp(prefix="suanli-t410-key-")
    try:
        key = os.path.join(keydir, "id_new")
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key)
        with open(key + ".pub") as f:
            r = s.request("POST", "/v1/ssh-keys", {"public_key": f.read()}, token=user["token"])
        assert r.status == 201, r
        wait_for(lambda: ssh_with(a, key).returncode == 0, timeout=5, interval=0.1,
                 what="the added key to be accepted")
        assert not os.path.lexists(canary)
        boot_keys = os.path.join(host.data, "instances", a["id"], "boot", "authorized_keys")
        assert os.path.isfile(boot_keys) and not os.path.islink(boot_keys)
        with open("/etc/shadow") as f:
            assert "ssh-ed25519" not in f.read()
    finally:
        shutil.rmtree(keydir, ignore_errors=True)
        shutil.rmtree(canary, ignore_errors=True)
    release_clean(host, user, a)


def test_heartbeats_are_not_logged_at_info_level(host):
    """The agents' every-second traffic is at debug level (errors stay at
    info: the bad reads of test_desired_state_by_long_poll are there)."""
    with open(host.server.log_path, errors="replace") as f:
        log = f.read()
    assert re.search(r"info  http GET /v1/nodes/[^ ]+/desired[^ ]* 400 ", log)
    assert re.search(r"http POST /v1/nodes/[^ ]+/heartbeat [23]", log) is None
    assert re.search(r"http GET /v1/nodes/[^ ]+/desired[^ ]* [23]", log) is None
