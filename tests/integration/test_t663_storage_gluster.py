"""t663: file storage on a Gluster volume (issue 14, item 4; backend
`glusterfs`, docs/design/node-runtime.md, "File storage"). A real glusterd
(Debian's glusterfs-server) runs in a network namespace of its own on the
fleet's link, with one volume whose brick is a directory of the test; the
fleet's hosts (each a suanli-node in its own network namespace) mount it
with Gluster's FUSE client, and the operator's quota hook
(scripts/gluster-quota-hook.sh) runs beside glusterd, as on a Gluster server.

The attacker is a renter with root inside an instance: another renter's
directory must be out of reach (no path, '..', mount or link leads there,
and the Gluster server itself cannot be reached from inside, where the
host's address would pass the volume's auth.allow), a write past the quota
must fail inside with EDQUOT and touch nothing else, and the files must
outlive a restart of the storage server."""
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import uuid

import pytest

from conftest import ROOT, TEST_BRIDGE, ip, process_alive, wait_for

MIB = 1024 * 1024
GIB = 1024 * MIB
REGION = "sample-1"
HOOK = os.path.join(ROOT, "scripts", "gluster-quota-hook.sh")


def why_not():
    """Why glusterd cannot run here, or None. What scripts/deps.sh installs
    is required, never a reason to skip."""
    for prog, pkg in (("glusterd", "glusterfs-server"), ("glusterfs", "glusterfs-client"),
                      ("gluster", "glusterfs-server"), ("setfattr", "attr")):
        assert shutil.which(prog), f"{prog} is not installed: scripts/deps.sh test installs {pkg}"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse: the kernel's FUSE is needed for Gluster's client"
    # a brick keeps its metadata in trusted.* extended attributes
    d = tempfile.mkdtemp(prefix="suanli-t663-probe-", dir="/var/tmp")
    try:
        p = subprocess.run(["setfattr", "-n", "trusted.suanli-probe", "-v", "1", d],
                           capture_output=True, text=True)
        if p.returncode != 0:
            return f"the file system of /var/tmp keeps no trusted.* attributes: {p.stderr.strip()}"
    finally:
        os.rmdir(d)
    return None


class Gluster:
    """glusterd with one started volume, in its own network namespace on a
    FleetLink's bridge (address PREFIX.9: the hosts' link, or for
    bench/storage.py one beside this machine's own host), and the quota hook
    running every second."""

    def __init__(self, link, quota_gib):
        self.dir = tempfile.mkdtemp(prefix="suanli-t663-", dir="/var/tmp")
        self.netns, self.veth = f"{TEST_BRIDGE}-glu", f"{TEST_BRIDGE[:10]}gs"
        self.address = link.prefix + "9"
        self.volume = "t663-" + uuid.uuid4().hex[:8]
        self.hook = None
        self.sockets = set()
        for sub in ("work", "run", "log", "brick"):
            os.makedirs(os.path.join(self.dir, sub))
        ip("netns", "add", self.netns)
        ip("link", "add", self.veth, "type", "veth", "peer", "name", "uplink", "netns",
           self.netns)
        ip("link", "set", self.veth, "master", link.bridge, "up")
        ip("link", "set", "lo", "up", netns=self.netns)
        ip("addr", "add", self.address + "/24", "dev", "uplink", netns=self.netns)
        ip("link", "set", "uplink", "up", netns=self.netns)
        self.volfile = os.path.join(self.dir, "glusterd.vol")
        with open(self.volfile, "w") as f:
            f.write(f"""volume management
    type mgmt/glusterd
    option working-directory {self.dir}/work
    option run-directory {self.dir}/run
    option glusterd-sockfile {self.dir}/run/glusterd.socket
    option transport-type socket
    option transport.socket.bind-address {self.address}
    option transport.socket.listen-port 24007
    option ping-timeout 0
    option event-threads 1
    option base-port 49152
    option max-port 49251
end-volume
""")
        self.start_glusterd()
        brick = f"{self.address}:{self.dir}/brick/b"
        self.cli("volume", "create", self.volume, brick, "force")
        self.cli("volume", "start", self.volume)
        # the hosts only (they reach it from their link's addresses)
        self.cli("volume", "set", self.volume, "auth.allow", link.prefix + "*")
        # a client finds a restarted brick soon
        self.cli("volume", "set", self.volume, "network.ping-timeout", "5")
        self.hook_log = open(os.path.join(self.dir, "log", "hook.log"), "ab")
        self.hook = subprocess.Popen(
            [*self.enter, HOOK, "-s", self.address, "-g", self.socket,
             "-e", "1", self.volume, str(quota_gib)],
            stdout=self.hook_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    @property
    def socket(self):
        return os.path.join(self.dir, "run", "glusterd.socket")

    @property
    def spec(self):
        return f"{self.address}:/{self.volume}"

    @property
    def enter(self):
        """The prefix that runs a command in the server's network namespace.
        Not `ip netns exec`: it also makes a mount namespace, a copy of this
        machine's mounts that a daemon keeps alive, and with them the disks
        of the instances running then (their loop devices would never
        detach)."""
        return ["nsenter", f"--net=/run/netns/{self.netns}", "--"]

    def start_glusterd(self):
        subprocess.run([*self.enter, "glusterd", "-f", self.volfile,
                        "-p", os.path.join(self.dir, "glusterd.pid"),
                        "-l", os.path.join(self.dir, "log", "glusterd.log")],
                       check=True, capture_output=True)
        wait_for(lambda: self.cli("volume", "list", check=False).returncode == 0, timeout=60,
                 interval=0.2, what="glusterd to answer")

    def restart(self):
        """The server back after a crash: glusterd, then the brick. glusterd
        alone did not always start the brick again here (its status
        offline, no brick process, about one run in three after the quota
        test); `volume start force` starts the bricks that are down, as an
        operator would."""
        self.start_glusterd()

        def brick_online():
            self.cli("volume", "start", self.volume, "force", check=False)
            out = self.cli("volume", "status", self.volume, "detail", check=False).stdout
            return any(x.split(":", 1)[-1].strip() == "Y" for x in out.splitlines()
                       if x.startswith("Online"))
        wait_for(brick_online, timeout=60, interval=1, what="the brick online again")

    def cli(self, *args, check=True):
        p = subprocess.run([*self.enter, "gluster", "--mode=script",
                            f"--glusterd-sock={self.socket}", *args],
                           capture_output=True, text=True, timeout=120)
        if check and p.returncode != 0:
            raise AssertionError(f"gluster {' '.join(args)}: {p.stdout}{p.stderr}")
        return p

    def processes(self):
        """glusterd, the brick and the quota daemon: every process whose
        command line names this test's directory."""
        out = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            with contextlib.suppress(OSError):
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read()
                if self.dir.encode() in cmd and b"gluster" in cmd and \
                        b"gluster-quota-hook" not in cmd:
                    out.append(int(pid))
                    # its socket in Gluster's own run directory
                    args = cmd.decode(errors="replace").split("\0")
                    self.sockets.update(args[i + 1] for i, x in enumerate(args[:-1])
                                        if x == "-S")
        return out

    def kill_server(self):
        pids = self.processes()
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not any(process_alive(p) for p in pids), timeout=30,
                 what="the Gluster server's processes to exit")
        return pids

    def remove(self):
        if self.hook and self.hook.poll() is None:
            self.hook.terminate()
            try:
                self.hook.wait(15)
            except subprocess.TimeoutExpired:
                self.hook.kill()
                self.hook.wait()
        self.processes()  # their sockets, before the stop ends the brick
        self.cli("volume", "stop", self.volume, "force", check=False)
        self.kill_server()
        # the helper mounts glusterd or a killed hook left, if any
        with open("/proc/self/mountinfo") as f:
            left = [x.split()[4] for x in f if self.dir in x.split()[4] or (
                self.volume in x and x.split()[4].startswith("/run/suanli-gluster-quota."))]
        for m in sorted(left, key=len, reverse=True):
            subprocess.run(["umount", "-l", m], capture_output=True)
        ip("netns", "del", self.netns, check=False)
        ip("link", "del", self.veth, check=False)
        # what Gluster keeps outside the working directory, named by the brick
        # or the volume
        bricklog = "/var/log/glusterfs/bricks/" + \
            (self.dir + "/brick/b").strip("/").replace("/", "-") + ".log"
        with contextlib.suppress(OSError):
            os.unlink(bricklog)
        for name in os.listdir("/var/run/gluster") if os.path.isdir("/var/run/gluster") else []:
            if self.volume in name:
                shutil.rmtree(os.path.join("/var/run/gluster", name), ignore_errors=True)
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join("/var/run/gluster", name))
        # the quota daemon's socket has a fixed name: ours unless another
        # glusterd runs on this machine
        others = subprocess.run(["pgrep", "-x", "glusterd"], capture_output=True,
                                text=True).stdout.split()
        if not any(process_alive(int(p)) for p in others):
            self.sockets.add("/var/run/gluster/quotad.socket")
        for path in self.sockets:
            with contextlib.suppress(OSError):
                os.unlink(path)
        self.hook_log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def set_backend(fleet, **body):
    return fleet.server.request("POST", "/v1/admin/storage", {"region": REGION, **body},
                                token=fleet.server.admin_token)


def gluster_mounts(node):
    """The host's mounts of a Gluster volume under its data directory."""
    with open("/proc/self/mountinfo") as f:
        return [x.split()[4] for x in f if " - fuse.glusterfs " in x
                and x.split()[4].startswith(os.path.realpath(node.data_dir) + "/")]


@pytest.fixture(scope="module")
def gluster(fleet):
    reason = why_not()
    if reason:
        pytest.skip(reason)
    g = Gluster(fleet.link, quota_gib=1)
    try:
        r = set_backend(fleet, kind="glusterfs", spec=g.spec, quota_gib=1)
        assert r.status == 200 and r.json["kind"] == "glusterfs", r
        yield g
    finally:
        set_backend(fleet, kind="local", quota_gib=200)
        for node in fleet.nodes:
            # the agents unmount it once the backend is another (detached:
            # an instance still stopping keeps its own)
            with contextlib.suppress(AssertionError):
                wait_for(lambda: not gluster_mounts(node), timeout=30,
                         what="the agent to unmount the volume")
            for m in gluster_mounts(node):
                subprocess.run(["umount", "-l", m], capture_output=True)
            fleet.in_host(node, "iptables", "-w", "-D", "SUANLI-FORWARD", "-d",
                          g.address + "/32", "-j", "DROP")
        g.remove()


def storage_of(fleet, user):
    r = fleet.server.request("GET", "/v1/storage", token=user["token"])
    assert r.status == 200, r
    return next((s for s in r.json["items"] if s["region"] == REGION), None)


def release(fleet, user, inst):
    fleet.verb(user, inst["id"], "release")
    fleet.wait_state(user, inst["id"], "released", timeout=120)


def test_backend_spec_is_checked(fleet):
    for spec, says in (("/mnt/gv0", "SERVER:/VOLUME"), ("srv:/vol/sub", "letters, digits"),
                       ("srv x:/vol", "host name"), ("srv:/", "SERVER:/VOLUME")):
        r = set_backend(fleet, kind="glusterfs", spec=spec)
        assert r.status == 400 and says in r.json["error"]["message"], (spec, r)


def test_files_cross_hosts_quota_holds_and_renters_stay_apart(fleet, gluster):
    a, b = fleet.nodes[0], fleet.nodes[1]
    alice, bob = fleet.renter(), fleet.renter()
    insts = []
    try:
        a1 = fleet.create(alice, gpus=1, data_disk_gib=5, host=a.node_id)
        insts.append((alice, a1))
        a2 = fleet.create(alice, gpus=1, data_disk_gib=5, host=b.node_id)
        insts.append((alice, a2))
        b1 = fleet.create(bob, gpus=1, data_disk_gib=5, host=a.node_id)
        insts.append((bob, b1))
        # each host mounted the volume itself, with its own client
        assert gluster_mounts(a) and gluster_mounts(b), (gluster_mounts(a), gluster_mounts(b))

        # the Gluster mount, bound nosuid,nodev, the quota's size
        line = fleet.ssh(alice, a1, "grep ' /root/storage ' /proc/mounts").stdout.split()
        assert line and line[2] == "fuse.glusterfs", line
        assert "nosuid" in line[3] and "nodev" in line[3], line
        size = int(fleet.ssh(alice, a1, "python3 -c \"import os; v = os.statvfs("
                             "'/root/storage'); print(v.f_blocks * v.f_frsize)\"").stdout)
        assert size == GIB, size

        # written on host A, read on host B
        fleet.ssh(alice, a1, "echo from-host-a > /root/storage/note.txt && "
                  "head -c 3M /dev/urandom > /root/autodl-fs/blob && sync")
        sums = fleet.ssh(alice, a1, "md5sum /root/storage/blob").stdout.split()[0]
        assert fleet.ssh(alice, a2, "cat /root/storage/note.txt").stdout == "from-host-a\n"
        assert fleet.ssh(alice, a2, "md5sum /root/storage/blob").stdout.split()[0] == sums

        # bob, on host A beside alice: his own empty directory, and no way out
        assert fleet.ssh(bob, b1, "ls -A /root/storage").stdout.split() == []
        out = fleet.ssh(bob, b1, "ls -A /root/storage/.. /root/storage/../..; "
                        "find / -xdev -name note.txt 2>/dev/null; "
                        "find /root /mnt /tmp /var -name note.txt 2>/dev/null", check=False).stdout
        assert "note.txt" not in out, out
        mounts = fleet.ssh(bob, b1, "cat /proc/self/mountinfo").stdout
        line = next(x for x in mounts.splitlines() if " /root/storage " in x)
        # the root of what is bound is his directory of the volume, /<number>:
        # not the volume's top, nor anything of the host's
        assert line.split()[3].strip("/").isdigit() and a.data_dir not in line, line
        # mounting the volume, its top or his directory's parent: refused
        for cmd in (f"mount -t glusterfs {gluster.spec} /mnt",
                    "mount -t fuse.glusterfs x /mnt", "mount --bind /root/storage/.. /mnt",
                    "mount -o remount,rw,suid /root/storage", "unshare -m true"):
            p = fleet.ssh(bob, b1, cmd + " 2>&1", check=False)
            assert p.returncode != 0, (cmd, p.stdout)
        # the Gluster server is out of reach from inside (as the host, through
        # its masquerade, it would pass the volume's auth.allow)
        p = fleet.ssh(bob, b1, "python3 -c \"import socket; socket.create_connection(("
                      f"'{gluster.address}', 24007), timeout=5)\" 2>&1", check=False)
        assert p.returncode != 0, p.stdout
        # links he plants resolve inside his own container
        fleet.ssh(bob, b1, "ln -s / /root/storage/root-link && "
                  "ln -s ../../../../.. /root/storage/up && echo bob > /root/storage/who")
        assert "note.txt" not in fleet.ssh(bob, b1, "ls /root/storage/up/root/storage/",
                                           check=False).stdout

        # past the quota: EDQUOT inside, and nothing else is touched
        out = fleet.ssh(alice, a1, "dd if=/dev/zero of=/root/storage/fill bs=1M count=1200 "
                        "2>&1", check=False, timeout=300)
        assert "Disk quota exceeded" in out.stdout or "No space left" in out.stdout, out.stdout
        # from the other host as well: the brick holds the line for every client
        p = fleet.ssh(alice, a2, "head -c 64M /dev/zero > /root/storage/more",
                      check=False, timeout=120)
        said = p.stdout + p.stderr
        assert p.returncode != 0 and ("quota" in said or "space" in said), said
        fleet.ssh(alice, a1, "head -c 50M /dev/zero > /root/data/ok && rm /root/data/ok")
        fleet.ssh(bob, b1, "head -c 50M /dev/zero > /root/storage/bob.bin && sync", timeout=120)

        # usage from the directory's quota, reported by the hosts
        def used(user, low):
            st = storage_of(fleet, user)
            return st if st and st["used_bytes"] >= low else None
        st = wait_for(lambda: used(alice, 900 * MIB), timeout=90, interval=1,
                      what="alice's usage")
        assert st["kind"] == "glusterfs" and st["quota_bytes"] == GIB, st
        st = wait_for(lambda: used(bob, 50 * MIB), timeout=90, interval=1, what="bob's usage")
        assert st["used_bytes"] < 100 * MIB, st  # his links were not followed
    finally:
        for user, inst in insts:
            release(fleet, user, inst)


def test_a_storage_server_restart_is_survived(fleet, gluster):
    b, c = fleet.nodes[1], fleet.nodes[2]
    carol = fleet.renter()
    insts = []
    try:
        c1 = fleet.create(carol, gpus=1, data_disk_gib=5, host=b.node_id)
        insts.append(c1)
        fleet.ssh(carol, c1, "echo before-restart > /root/storage/kept.txt && sync")
        killed = gluster.kill_server()
        assert len(killed) >= 2, killed  # glusterd and the brick at least
        # while it is down, a read in the instance fails or waits; it never
        # reads the host's disk in its place
        p = fleet.ssh(carol, c1, "timeout 10 cat /root/storage/kept.txt 2>&1", check=False,
                      timeout=60)
        assert p.returncode != 0 or p.stdout == "before-restart\n", p.stdout
        gluster.restart()

        # the host's mount recovers by itself: the file is read, and written
        def back():
            p = fleet.ssh(carol, c1, "cat /root/storage/kept.txt && "
                          "echo after > /root/storage/after.txt 2>&1", check=False, timeout=60)
            return p.returncode == 0 and p.stdout.startswith("before-restart")
        wait_for(back, timeout=180, interval=2, what="the storage to come back after a restart")
        # and another host mounts it afresh
        c2 = fleet.create(carol, gpus=1, data_disk_gib=5, host=c.node_id)
        insts.append(c2)
        assert fleet.ssh(carol, c2, "cat /root/storage/kept.txt /root/storage/after.txt"
                         ).stdout == "before-restart\nafter\n"
    finally:
        for inst in insts:
            release(fleet, carol, inst)
