#!/usr/bin/python3
"""File storage figures (issue 14, item 4), once each, on the integration
harness's cluster (real suanlid, one suanli-node, real runc, loop devices):
sequential write (dd, 1 MiB blocks, fsync at the end) and read (page cache
dropped first) of SIZE_MIB (default 1024) from inside an instance

  storage   /root/storage on the `local` backend (the renter's ext4 image,
            loop-mounted, bound into the container)
  data      /root/data, the instance's own data disk (also ext4 on a loop
            device): what storage should match

beside the floor measured in the same run: the same dd on the host, in the
agent's data directory (the disk both images live on). Then the distributed
backend, `glusterfs`: a real glusterd (as t663 starts it: its own network
namespace, a brick directory on the same disk) whose volume the agent
mounts with Gluster's FUSE client,

  gluster   /root/storage on the `glusterfs` backend, inside
  floor     the same dd on the host, in the agent's own mount of the volume
            (DATA/storage/glusterfs): what the instance's bind should match

Prints a markdown table and writes bench/results/storage.md. Needs root.
Run it alone: the machine's load moves every figure.
"""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))

import pytest  # noqa: E402

from conftest import FleetLink, cluster, wait_for  # noqa: E402,F401  the fixture used below
from test_t663_storage_gluster import Gluster, gluster_mounts  # noqa: E402

SIZE_MIB = int(os.environ.get("SIZE_MIB", "1024"))
RESULTS = []


def mb_per_s(dd_output):
    """dd's last line: '... copied, 2.3 s, 466 MB/s' -> bytes / seconds in MB/s."""
    m = re.search(r"^(\d+) bytes.*copied, ([\d.]+) s", dd_output, re.M)
    assert m, dd_output
    return int(m.group(1)) / float(m.group(2)) / 1e6


def drop_caches():
    subprocess.run(["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"], check=False)


def dd_pair(run, directory):
    """(write MB/s, read MB/s) of SIZE_MIB in directory, run(cmd) -> output."""
    f = f"{directory}/bench.bin"
    w = mb_per_s(run(f"dd if=/dev/zero of={f} bs=1M count={SIZE_MIB} conv=fsync 2>&1"))
    drop_caches()
    r = mb_per_s(run(f"dd if={f} of=/dev/null bs=1M 2>&1"))
    run(f"rm -f {f}")
    return w, r


def test_figures(cluster):  # noqa: F811  the fixture imported above
    s = cluster.server
    r = s.request("POST", "/v1/admin/storage", {"region": "sample-1", "kind": "local",
                                                "quota_gib": 200}, token=s.admin_token)
    assert r.status == 200, r
    user = cluster.renter()
    inst = cluster.create(user, data_disk_gib=5 + SIZE_MIB // 1024)
    try:
        def inside(cmd):
            return cluster.ssh(user, inst, cmd, timeout=600).stdout

        def host(cmd):
            return subprocess.run(["sh", "-c", cmd], capture_output=True, text=True,
                                  check=True).stdout
        d = tempfile.mkdtemp(dir=cluster.node.data_dir)
        try:
            floor = dd_pair(host, d)
        finally:
            subprocess.run(["rm", "-rf", d])
        storage = dd_pair(inside, "/root/storage")
        data = dd_pair(inside, "/root/data")
        RESULTS[:] = [("host disk (agent's data directory): the floor", floor),
                      ("/root/storage, local backend, inside", storage),
                      ("/root/data, the instance's data disk, inside", data)]
        write_results()
    finally:
        cluster.verb(user, inst["id"], "release")
        cluster.wait_state(user, inst["id"], "released", timeout=300)
    RESULTS.extend(gluster_figures(cluster))
    write_results()


def gluster_figures(cluster):
    s = cluster.server
    link = FleetLink()
    g = None
    try:
        g = Gluster(link, quota_gib=200)
        r = s.request("POST", "/v1/admin/storage", {"region": "sample-1", "kind": "glusterfs",
                                                    "spec": g.spec, "quota_gib": 200},
                      token=s.admin_token)
        assert r.status == 200, r
        user = cluster.renter()
        inst = cluster.create(user, data_disk_gib=5)
        try:
            def inside(cmd):
                return cluster.ssh(user, inst, cmd, timeout=600).stdout

            def host(cmd):
                return subprocess.run(["sh", "-c", cmd], capture_output=True, text=True,
                                      check=True).stdout
            top = gluster_mounts(cluster.node)[0]
            d = tempfile.mkdtemp(prefix="bench-", dir=top)
            try:
                floor = dd_pair(host, d)
            finally:
                subprocess.run(["rm", "-rf", d])
            inner = dd_pair(inside, "/root/storage")
        finally:
            cluster.verb(user, inst["id"], "release")
            cluster.wait_state(user, inst["id"], "released", timeout=300)
        return [("the Gluster volume from the host (its FUSE mount): the floor", floor),
                ("/root/storage, glusterfs backend, inside", inner)]
    finally:
        s.request("POST", "/v1/admin/storage", {"region": "sample-1", "kind": "local",
                                                "quota_gib": 200}, token=s.admin_token)
        wait_for(lambda: not gluster_mounts(cluster.node), timeout=60,
                 what="the agent to unmount the volume")
        if g:
            subprocess.run(["iptables", "-w", "-D", "SUANLI-FORWARD", "-d", g.address + "/32",
                            "-j", "DROP"], capture_output=True)
            g.remove()
        link.remove()


def write_results():
    lines = [f"| where ({SIZE_MIB} MiB, dd bs=1M) | write MB/s (fsync) | read MB/s (cold) |",
             "|---|---|---|"]
    lines += [f"| {what} | {w:.0f} | {r:.0f} |" for what, (w, r) in RESULTS]
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "storage.md"), "w") as f:
        f.write(text)


def main():
    # pytest imports this file as a module of its own: the test writes the
    # table (its RESULTS are not this process's __main__ ones)
    rc = pytest.main([os.path.abspath(__file__), "-q", "-s", "-p", "no:cacheprovider",
                      "--rootdir", os.path.join(HERE, "..", "tests", "integration")])
    return 1 if rc != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
