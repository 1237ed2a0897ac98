#!/usr/bin/python3
"""Desktop figures (issue 14, item 3), once each, on the integration
harness's cluster (real suanlid, a suanli-node, real runc, CNI, nginx):

  build       the `desktop` recipe image with mmdebstrap, until ready
  size        its size beside the base image's
  start       create -> sshd answers (what cluster.create waits for), then
              -> noVNC's page answers through the node's proxy, then -> the
              Xfce session runs (xfdesktop)
  browser     noVNC connected, and the desktop drawn, in Debian's chromium
              (tests/browser/t650_desktop.mjs), from opening the link
  memory      the resident memory of the desktop's processes inside, beside
              the instance's limit

each beside floors measured in the same run, on the same machine:

  base build  the `base` recipe image built the same way (what any recipe
              costs: mmdebstrap of the default packages)
  base start  create -> sshd answers from the base image on the same host
  base memory the resident memory of a base instance's processes

Prints a markdown table and writes bench/results/desktop.md. Needs root.
Run it alone: the machine's load moves every figure.
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))

import pytest  # noqa: E402

from conftest import BUILD, IMAGE, PASSWORD, ROOT, cluster, wait_for  # noqa: E402,F401
import test_t650_desktop as t650  # noqa: E402

RESULTS = []
RSS = "ps -eo rss= | awk '{s += $1} END {print int(s / 1024)}'"


def build(cluster, name, recipe):
    s = cluster.server
    t0 = time.monotonic()
    r = s.request("POST", "/v1/admin/images", {"name": name, "recipe": recipe},
                  token=s.admin_token)
    assert r.status == 201, r

    def ready():
        img = [i for i in s.request("GET", "/v1/images", token=s.admin_token).json["items"]
               if i["name"] == name][0]
        assert img["state"] != "failed", img
        return img if img["state"] == "ready" else None
    img = wait_for(ready, timeout=1800, interval=2, what=f"the {recipe} image")
    return time.monotonic() - t0, img


def test_figures(cluster):  # noqa: F811  the fixture imported above
    base_s, base = build(cluster, "bench-base", "base")
    desk_s, desk = build(cluster, t650.IMAGE, "desktop")
    RESULTS.append(("build", f"{desk_s:.0f} s", "base build", f"{base_s:.0f} s"))
    RESULTS.append(("size", f"{desk['size_bytes'] / 1e6:.0f} MB", "base size",
                    f"{base['size_bytes'] / 1e6:.0f} MB"))

    owner, other = cluster.renter(), cluster.renter()
    t0 = time.monotonic()
    plain = cluster.create(owner, image=IMAGE)
    base_start = time.monotonic() - t0
    try:
        base_mib = int(cluster.ssh(owner, plain, RSS).stdout.strip())
    finally:
        cluster.verb(owner, plain["id"], "release")

    t0 = time.monotonic()
    inst = cluster.create(owner, image=t650.IMAGE)
    sshd = time.monotonic() - t0
    try:
        page = inst["desktop"]["url"].split("#")[0]
        wait_for(lambda: (lambda r: r[0] == 200 and "noVNC" in r[1])(t650.get(cluster, page)),
                 timeout=300, interval=0.2, what="noVNC")
        novnc = time.monotonic() - t0
        wait_for(lambda: cluster.ssh(owner, inst, "pgrep -x xfdesktop",
                                     check=False).returncode == 0,
                 timeout=300, interval=0.5, what="xfdesktop")
        xfce = time.monotonic() - t0
        RESULTS.append(("start: sshd", f"{sshd:.1f} s", "base start: sshd", f"{base_start:.1f} s"))
        RESULTS.append(("start: noVNC page", f"{novnc:.1f} s", "", ""))
        RESULTS.append(("start: Xfce session", f"{xfce:.1f} s", "", ""))

        env = dict(os.environ, SUANLI_BUILD=BUILD, CHROMIUM=t650.CHROMIUM,
                   SUANLI_URL=cluster.server.url, SUANLI_EMAIL=owner["email"],
                   SUANLI_PASSWORD=PASSWORD, SUANLI_OTHER_EMAIL=other["email"],
                   SUANLI_INSTANCE=inst["id"])
        p = subprocess.run(["node", t650.SCRIPT], capture_output=True, text=True, env=env,
                           timeout=900)
        out = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])
        assert out["ok"], out["failures"]
        res = out["results"]
        RESULTS.append(("browser: noVNC connected", f"{res['connect_ms'] / 1000:.1f} s", "", ""))
        RESULTS.append(("browser: desktop drawn", f"{res['drawn_ms'] / 1000:.1f} s", "",
                        f"{res['canvas']['colours']} colours"))
        desk_mib = int(cluster.ssh(owner, inst, RSS).stdout.strip())
        RESULTS.append(("memory (resident, all processes)", f"{desk_mib} MiB", "base memory",
                        f"{base_mib} MiB of {inst['memory_mib']} MiB"))
    finally:
        cluster.verb(owner, inst["id"], "release")
        report()


def report():
    """The table, printed and written (pytest runs this file as another
    module: the test writes it itself)."""
    lines = ["| figure | value | floor | value |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in RESULTS]
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "desktop.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    sys.exit(pytest.main([os.path.abspath(__file__), "-q", "-s", "-p", "no:cacheprovider",
                          "--rootdir", os.path.join(HERE, "..", "tests", "integration")]))
