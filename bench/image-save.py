#!/usr/bin/python3
"""Saved-image figures (issue 14, item 1), once each, on the integration
harness's fleet (real suanlid, three suanli-node hosts in network
namespaces, real runc, disks and overlayfs):

  save      an instance with 1 GiB of changes on its system disk (random
            bytes: nothing compresses), stopped: POST /v1/instances/ID/image
            until the image is ready (capture, upload to suanlid, stacked on
            the saving host)
  start     that image on another host, layer fetch included: POST
            /v1/instances until sshd answers there

each beside floors measured in the same run, on the same machine:

  tar        `tar -cf - DIR | cat > /dev/null` of the same 1 GiB (reading it
             and making a tar stream: what the capture cannot avoid)
  cp         `cp` of the 1 GiB file to a new file and `sync` (one more write
             of it: what the upload and the extraction each cost at least)
  base start the same create on the same host from the base image, which it
             holds already (what any start costs)

Prints a markdown table and writes bench/results/image-save.md. Needs root.
Run it alone: the machine's load moves every figure.
"""
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))

import pytest  # noqa: E402

from conftest import IMAGE, cluster, fleet, wait_for  # noqa: E402,F401  fixtures used below

RESULTS = []


def timed(fn):
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def test_figures(fleet):  # noqa: F811  the fixture imported above
    a, b = fleet.nodes[0], fleet.nodes[1]
    user = fleet.renter()
    made = []
    try:
        src = fleet.create(user, gpus=1, data_disk_gib=5, host=a.node_id)
        made.append(src["id"])
        fleet.ssh(user, src, "head -c 1G /dev/urandom > /root/big.bin && sync", timeout=600)
        assert fleet.verb(user, src["id"], "stop").status == 200
        fleet.wait_state(user, src["id"], "stopped", timeout=120)

        # floors: the same 1 GiB on the data directory's file system
        d = tempfile.mkdtemp(dir=a.data_dir)
        try:
            subprocess.run(["head", "-c", "1G", "/dev/urandom"], stdout=open(f"{d}/big.bin", "wb"),
                           check=True)
            subprocess.run(["sync"], check=True)
            subprocess.run(["sh", "-c", "echo 3 > /proc/sys/vm/drop_caches"], check=False)
            tar = timed(lambda: subprocess.run(["sh", "-c", f"tar -cf - -C {d} big.bin | cat"
                                                " > /dev/null"], check=True))
            cp = timed(lambda: subprocess.run(["sh", "-c", f"cp {d}/big.bin {d}/copy.bin && sync"],
                                              check=True))
        finally:
            subprocess.run(["rm", "-rf", d])

        name = f"bench-{int(time.time())}"

        def save():
            r = fleet.server.request("POST", f"/v1/instances/{src['id']}/image", {"name": name},
                                     token=user["token"])
            assert r.status == 202, r

            def ready():
                img = fleet.server.request("GET", f"/v1/images/{name}",
                                           token=user["token"]).json
                assert img["state"] != "failed", img
                return img if img["state"] == "ready" else None
            return wait_for(ready, timeout=1200, interval=0.2, what="the save")
        subprocess.run(["sh", "-c", "echo 3 > /proc/sys/vm/drop_caches"], check=False)
        saved = timed(save)

        def start(image):
            inst = fleet.create(user, gpus=1, image=image, data_disk_gib=5, host=b.node_id)
            made.append(inst["id"])
            fleet.ssh(user, inst, "true", timeout=60)
            return inst
        def on_b():
            hosts = fleet.server.request("GET", f"/v1/admin/images/{name}/hosts",
                                         token=fleet.server.admin_token).json["items"]
            mine = [h for h in hosts if h["node_id"] == b.node_id]
            assert mine and mine[0]["state"] != "failed", mine
            return mine[0]["state"] == "ready"
        # the other host fetches the layer as soon as the image is ready:
        # counted from the moment the save was ready
        fetched = timed(lambda: wait_for(on_b, timeout=1200, interval=0.2,
                                         what="the layer on the other host"))
        base = timed(lambda: start(IMAGE))
        other = timed(lambda: start(name))
        RESULTS[:] = [
            ("save: 1 GiB of changes, stopped instance, until ready", saved,
             f"tar of the same 1 GiB: {tar:.1f} s; cp + sync: {cp:.1f} s"),
            ("the other host fetches and stacks the 1 GiB layer (after ready)", fetched,
             f"cp + sync of the same 1 GiB: {cp:.1f} s"),
            ("then a start from it on that host, until SSH", other,
             f"start from the base image on that host: {base:.1f} s"),
            ("start on another host, layer fetch included", fetched + other,
             f"tar + cp + base start: {tar + cp + base:.1f} s"),
        ]
        report()
    finally:
        for iid in made:
            fleet.verb(user, iid, "release")
        for iid in made:
            fleet.wait_state(user, iid, "released", timeout=300)


def report():
    """The table, printed and written (pytest runs this file as another
    module: the test writes it itself)."""
    lines = ["| path | seconds | floor (same run) |", "|---|---|---|"]
    lines += [f"| {what} | {t:.1f} | {floor} |" for what, t, floor in RESULTS]
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "image-save.md"), "w") as f:
        f.write(text)


def main():
    return pytest.main([os.path.abspath(__file__), "-q", "-s", "-p", "no:cacheprovider",
                        "--rootdir", os.path.join(HERE, "..", "tests", "integration")])


if __name__ == "__main__":
    sys.exit(main())
