"""File storage (issue 14, item 4; docs/design/node-runtime.md, "File
storage"): the renter's directory of the region, read-write at /root/storage
in every instance of theirs there, behind a per-region backend table. On the
shared cluster (one host, the `local` backend: one ext4 image per renter,
the quota's size). The real suanlid, agent, runc containers and SSH.

The attacker is a renter with root inside an instance: another renter's
directory must be out of reach (no path, link or '..' leads there), a write
past the quota must stop at ENOSPC inside and touch nothing else (other
renters, the instance's own data disk, the host's disk), and links planted
in the storage must never be followed by the agent or suanlid."""
import json
import os
import subprocess

from conftest import Cli, wait_for

MIB = 1024 * 1024
GIB = 1024 * MIB
REGION = "sample-1"


def set_backend(cluster, **body):
    return cluster.server.request("POST", "/v1/admin/storage", {"region": REGION, **body},
                                  token=cluster.server.admin_token)


def storage_of(cluster, user):
    r = cluster.server.request("GET", "/v1/storage", token=user["token"])
    assert r.status == 200, r
    return next((s for s in r.json["items"] if s["region"] == REGION), None)


def release(cluster, user, inst):
    cluster.verb(user, inst["id"], "release")
    cluster.wait_state(user, inst["id"], "released")


def test_backend_table_refuses_bad_input(cluster, tmp_path):
    s = cluster.server
    cases = [
        ({"kind": "nfs"}, "kind must be local, mount or glusterfs"),
        ({"kind": "local", "spec": "/srv"}, "takes no spec"),
        ({"kind": "mount", "spec": "relative/dir"}, "absolute path"),
        ({"kind": "mount", "spec": "/"}, "absolute path"),
        ({"kind": "mount", "spec": "/mnt/../etc"}, "'..'"),
        ({"kind": "mount", "spec": "/mnt/a b"}, "spaces"),
        ({"kind": "glusterfs", "spec": "/mnt/gv0"}, "SERVER:/VOLUME"),
        ({"quota_gib": 0}, "quota_gib"),
    ]
    for body, says in cases:
        r = set_backend(cluster, **body)
        assert r.status == 400 and says in r.json["error"]["message"], (body, r)
    r = s.request("POST", "/v1/admin/storage", {"region": "nowhere-9", "kind": "local"},
                  token=s.admin_token)
    assert r.status == 404 and r.json["error"]["code"] == "no_such_region", r
    # renters neither read nor set it (admin routes are not there for them)
    user = s.register()
    assert s.request("GET", "/v1/admin/storage", token=user["token"]).status == 404
    assert s.request("POST", "/v1/admin/storage", {"region": REGION, "kind": "local"},
                     token=user["token"]).status == 404
    # the default: local, 200 GiB, the catalog's 20 GiB free
    r = s.request("GET", "/v1/admin/storage", token=s.admin_token)
    row = next(x for x in r.json["items"] if x["region"] == REGION)
    assert row["kind"] == "local" and row["free_gib"] == 20, row
    p = Cli(s, str(tmp_path / "admin")).run("admin", "storage", "ls",
                                            env={"SUANLI_TOKEN": s.admin_token})
    assert p.returncode == 0 and REGION in p.stdout and "local" in p.stdout, p
    p = Cli(s, str(tmp_path / "admin")).run("admin", "storage", "set", REGION,
                                            env={"SUANLI_TOKEN": s.admin_token})
    assert p.returncode == 2 and "--kind" in p.stderr, p


def test_local_storage_is_shared_by_a_renters_instances_and_holds_its_quota(cluster, tmp_path):
    s = cluster.server
    p = Cli(s, str(tmp_path / "admin")).run("admin", "storage", "set", REGION, "--kind", "local",
                                            "--quota-gib", "1",
                                            env={"SUANLI_TOKEN": s.admin_token})
    assert p.returncode == 0 and "1 GiB per renter" in p.stdout, p
    alice, bob = cluster.renter(), cluster.renter()
    # the shared cluster's other renters have images of their own (at the
    # default quota): only those made from here on are alice's and bob's
    images = os.path.join(cluster.node.data_dir, "storage")
    before = set(os.listdir(images)) if os.path.isdir(images) else set()
    insts = []
    try:
        a1 = cluster.create(alice, data_disk_gib=5)
        insts.append((alice, a1))
        b1 = cluster.create(bob, data_disk_gib=5)
        insts.append((bob, b1))

        # a mount of its own, read-write, nosuid, nodev, the quota's size
        line = cluster.ssh(alice, a1, "grep ' /root/storage ' /proc/mounts").stdout.split()
        assert line and line[2] == "ext4", line
        opts = line[3].split(",")
        assert "rw" in opts and "nosuid" in opts and "nodev" in opts, line
        size = int(cluster.ssh(alice, a1, "python3 -c \"import os; v = os.statvfs("
                               "'/root/storage'); print(v.f_blocks * v.f_frsize)\"").stdout)
        assert 0.8 * GIB < size <= GIB, size
        # the AutoDL path leads there (item 7)
        cluster.ssh(alice, a1, "echo from-a1 > /root/autodl-fs/note.txt")

        # a second instance of alice's sees the same files
        a2 = cluster.create(alice, data_disk_gib=5)
        insts.append((alice, a2))
        assert cluster.ssh(alice, a2, "cat /root/storage/note.txt").stdout == "from-a1\n"

        # bob's is another one: alice's file is nowhere he can reach
        assert cluster.ssh(bob, b1, "ls -A /root/storage").stdout.split() == ["lost+found"]
        found = cluster.ssh(bob, b1, "find / -xdev -name note.txt 2>/dev/null; "
                            "find /root /mnt /media /srv /tmp /var -name note.txt 2>/dev/null; "
                            "ls /root/storage/.. /root/storage/../.. 2>&1", check=False).stdout
        assert "note.txt" not in found, found
        # links he plants point into his own container, never at the host
        cluster.ssh(bob, b1, "ln -s / /root/storage/root-link && "
                    "ln -s ../../../../../../.. /root/storage/up-link && "
                    "ls /root/storage/up-link/ | grep -q etc")
        out = cluster.ssh(bob, b1, "cat /root/storage/up-link/root/storage/note.txt 2>&1",
                          check=False)
        assert out.returncode != 0, out.stdout

        # past the quota: ENOSPC inside, and nothing else is touched
        out = cluster.ssh(alice, a1, "dd if=/dev/zero of=/root/storage/fill bs=1M count=1200 "
                          "2>&1; sync", check=False, timeout=120)
        assert "No space left on device" in out.stdout, out.stdout
        out = cluster.ssh(alice, a1, "python3 -c \"import os; fd = os.open("
                          "'/root/storage/more', os.O_CREAT | os.O_WRONLY); "
                          "os.posix_fallocate(fd, 0, 512 << 20)\" 2>&1", check=False)
        assert out.returncode != 0 and "No space left" in out.stdout, out.stdout
        # the instance's own data disk, the other instance and bob still write
        cluster.ssh(alice, a1, "head -c 50M /dev/zero > /root/data/ok && rm /root/data/ok")
        cluster.ssh(bob, b1, "head -c 50M /dev/zero > /root/storage/bob.bin")
        # on the host, each renter's image holds at most its quota
        ours = [x for x in os.listdir(images) if x.endswith(".img") and x not in before]
        assert len(ours) == 2, (ours, before)
        for name in ours:
            st = os.stat(os.path.join(images, name))
            assert st.st_size == GIB and st.st_blocks * 512 <= st.st_size, (name, st)

        # usage read from the file system, reported and shown
        def used(user, at_least):
            st = storage_of(cluster, user)
            return st if st and st["used_bytes"] >= at_least else None
        st = wait_for(lambda: used(alice, 900 * MIB), timeout=60, what="alice's usage")
        assert st["quota_bytes"] == GIB and st["free_bytes"] == 20 * GIB, st
        assert st["path"] == "/root/storage" and st["over_free_gib"] == 0, st
        st = wait_for(lambda: used(bob, 50 * MIB), timeout=60, what="bob's usage")
        # bob's links were not followed: his use is his 50 MiB, not the host's /
        assert st["used_bytes"] < 200 * MIB, st
        p = Cli(s, str(tmp_path / "alice")).run("storage", env={"SUANLI_TOKEN": alice["token"]})
        assert p.returncode == 0, p
        row = next(x for x in p.stdout.splitlines() if x.startswith(REGION))
        assert "/root/storage" in row and "1 GiB" in row and "20 GiB" in row, row
        p = Cli(s, str(tmp_path / "alice")).run("-o", "json", "storage",
                                                env={"SUANLI_TOKEN": alice["token"]})
        assert json.loads(p.stdout)["items"][0]["region"] == REGION, p

        # files stay across a release of every instance and a new one
        cluster.ssh(alice, a1, "rm -f /root/storage/fill /root/storage/more")
        for user, inst in insts:
            release(cluster, user, inst)
        insts = []
        a3 = cluster.create(alice, data_disk_gib=5)
        insts.append((alice, a3))
        assert cluster.ssh(alice, a3, "cat /root/storage/note.txt").stdout == "from-a1\n"

        # a bigger quota grows the image: online where the agent may (it
        # needs CAP_SYS_RESOURCE), else once no instance here runs with it
        r = set_backend(cluster, quota_gib=2)
        assert r.status == 200 and r.json["quota_gib"] == 2, r
        cluster.verb(alice, a3["id"], "stop")
        cluster.wait_state(alice, a3["id"], "stopped")
        wait_for(lambda: any(os.stat(os.path.join(images, x)).st_size == 2 * GIB
                             for x in os.listdir(images) if x not in before), timeout=180,
                 what="alice's image to grow to 2 GiB")
        cluster.verb(alice, a3["id"], "start")
        a3 = cluster.wait_state(alice, a3["id"], "running")
        size = int(cluster.ssh(alice, a3, "python3 -c \"import os; v = os.statvfs("
                               "'/root/storage'); print(v.f_blocks * v.f_frsize)\"").stdout)
        assert size > 1.8 * GIB, size
        assert cluster.ssh(alice, a3, "cat /root/storage/note.txt").stdout == "from-a1\n"
    finally:
        for user, inst in insts:
            release(cluster, user, inst)
        set_backend(cluster, kind="local", quota_gib=200)


def storage_mounts(cluster):
    top = os.path.join(cluster.node.data_dir, "storage", "mnt") + "/"
    with open("/proc/self/mountinfo") as f:
        return {x.split()[4] for x in f if x.split()[4].startswith(top)}


def test_the_renter_sees_no_directory_of_the_host_and_nothing_stays(cluster):
    """The bind source is the renter's own image: the host's directory of
    images and mounts (DATA/storage) is nowhere inside. Once no instance of
    the renter is on the host, their image is unmounted and its loop device
    detached: nothing stays mounted for a renter who left."""
    before = storage_mounts(cluster)
    user = cluster.renter()
    inst = cluster.create(user, data_disk_gib=5)
    released = False
    try:
        mounts = cluster.ssh(user, inst, "cat /proc/self/mountinfo").stdout
        line = next(x for x in mounts.splitlines() if " /root/storage " in x)
        # the root of the renter's own file system is what is bound
        assert line.split()[3] == "/", line
        assert os.path.join(cluster.node.data_dir, "storage") not in mounts, mounts
        mine = storage_mounts(cluster) - before
        assert len(mine) == 1, mine
        image = os.path.join(cluster.node.data_dir, "storage",
                             os.path.basename(mine.pop()) + ".img")
        release(cluster, user, inst)
        released = True
        wait_for(lambda: storage_mounts(cluster) <= before, timeout=60,
                 what="the renter's storage to be unmounted")
        wait_for(lambda: image not in subprocess.run(["losetup", "-a"], capture_output=True,
                                                     text=True).stdout,
                 timeout=60, what="its loop device to be detached")
        assert os.path.exists(image)  # the files stay for the next instance
    finally:
        if not released:
            release(cluster, user, inst)
