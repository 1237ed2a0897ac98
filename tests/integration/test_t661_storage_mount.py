"""File storage on the `mount` backend (issue 14, item 4): an operator's own
shared mount (NFS, CephFS, JuiceFS, a GlusterFS volume) at the same path on
every host; each renter's directory is SPEC/<number> there, bound at
/root/storage. Here the "shared mount" is a tmpfs the test mounts: a file
system of its own, as the backend requires.

The attacker is a renter with root inside: links they plant in their
directory must not make the agent's usage walk leave it (it would count, and
so bill, the host's files), and an operator's path that is not mounted must
never make the renters' files land on the host's root disk."""
import os
import subprocess
import tempfile

from conftest import wait_for

MIB = 1024 * 1024
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


def test_mount_backend_directories_links_and_an_unmounted_path(cluster):
    share = tempfile.mkdtemp(prefix="suanli-t661-share-", dir="/var/tmp")
    plain = tempfile.mkdtemp(prefix="suanli-t661-plain-", dir="/var/tmp")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m,mode=0755", "t661", share],
                   check=True)
    alice, bob = cluster.renter(), cluster.renter()
    insts = []
    try:
        # a path on the host's root file system is no shared mount: refused
        # at the start, with the reason, and nothing is written there
        r = set_backend(cluster, kind="mount", spec=plain)
        assert r.status == 200 and r.json["kind"] == "mount", r
        r = cluster.create(alice, data_disk_gib=5, wait=False)
        assert r.status == 201, r
        insts.append((alice, r.json))
        failed = cluster.wait_state(alice, r.json["id"], "failed", timeout=90)
        assert "not on a shared mount" in failed["state_message"], failed
        assert os.listdir(plain) == []
        release(cluster, alice, r.json)
        insts = []

        r = set_backend(cluster, kind="mount", spec=share)
        assert r.status == 200 and r.json["spec"] == share, r
        a1 = cluster.create(alice, data_disk_gib=5)
        insts.append((alice, a1))
        b1 = cluster.create(bob, data_disk_gib=5)
        insts.append((bob, b1))
        cluster.ssh(alice, a1, "head -c 5M /dev/urandom > /root/storage/weights.bin && "
                    "echo alice > /root/autodl-fs/who")
        cluster.ssh(bob, b1, "echo bob > /root/storage/who")
        # one directory per renter, named by a number
        names = sorted(os.listdir(share))
        assert len(names) == 2 and all(n.isdigit() for n in names), names
        whos = {open(os.path.join(share, n, "who")).read() for n in names}
        assert whos == {"alice\n", "bob\n"}, whos
        assert cluster.ssh(bob, b1, "cat /root/storage/who").stdout == "bob\n"
        out = cluster.ssh(bob, b1, "ls /root/storage/../storage; ls -A /root/storage",
                          check=False).stdout
        assert "weights.bin" not in out, out
        line = cluster.ssh(bob, b1, "grep ' /root/storage ' /proc/mounts").stdout.split()
        assert "nosuid" in line[3] and "nodev" in line[3], line

        # links to the host's root and to alice's directory (by its host
        # path and by climbing): the walk counts bob's own bytes only
        other = next(n for n in names if "alice" in open(os.path.join(share, n, "who")).read())
        cluster.ssh(bob, b1, f"ln -s / /root/storage/root && ln -s {share}/{other} "
                    "/root/storage/alice && ln -s ../../../.. /root/storage/up && "
                    "mkdir -p /root/storage/d && ln -s /usr /root/storage/d/usr")
        cluster.ssh(bob, b1, "head -c 256K /dev/zero > /root/storage/after-links")

        def usage(user, low):
            st = storage_of(cluster, user)
            return st if st and st["used_bytes"] >= low else None
        st = wait_for(lambda: usage(alice, 5 * MIB), timeout=90, interval=1,
                      what="alice's usage")
        assert st["kind"] == "mount" and st["used_bytes"] < 8 * MIB, st
        # bob's, from a walk after his links were made: it counts the file
        # written after them, and none of what they point at
        st = wait_for(lambda: usage(bob, 256 * 1024), timeout=90, interval=1,
                      what="a walk of bob's storage after his links")
        assert st["used_bytes"] < 1 * MIB, st
        # the operator's file system holds the line: full is ENOSPC inside
        out = cluster.ssh(bob, b1, "dd if=/dev/zero of=/root/storage/fill bs=1M count=200 2>&1",
                          check=False, timeout=120)
        assert "No space left on device" in out.stdout, out.stdout
        cluster.ssh(bob, b1, "rm -f /root/storage/fill && head -c 1M /dev/zero > /root/data/x")
    finally:
        for user, inst in insts:
            release(cluster, user, inst)
        set_backend(cluster, kind="local", quota_gib=200)
        subprocess.run(["umount", "-l", share], capture_output=True)
        os.rmdir(share)
        subprocess.run(["rm", "-rf", plain])
