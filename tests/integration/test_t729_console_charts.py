"""t729: an instance's charts and hints in the web console (issue 15, items 2
and 3), in Debian's chromium driven by tests/browser/t729_charts.mjs against
the shared cluster: a busy instance whose system disk is full shows drawn
CPU and memory charts from GET /v1/instances/ID/metrics (uPlot, its own
chunk), the reason its simulated GPU has no series, the 1-day window on a
click, and the system disk hint."""
import os
import time

from conftest import PASSWORD, ROOT, wait_for
from test_t510_console_renter import browse

SCRIPT = os.path.join(ROOT, "tests", "browser", "t729_charts.mjs")


def test_t729_instance_charts_and_hints(cluster):
    s = cluster.server
    user = cluster.renter()
    inst = cluster.create(user, data_disk_gib=5)
    iid = inst["id"]
    try:
        cluster.ssh(user, inst, "nohup sh -c 'while :; do :; done' >/dev/null 2>&1 &")
        size = int(cluster.ssh(user, inst, "df -B1 --output=size / | tail -1").stdout)
        used = int(cluster.ssh(user, inst, "df -B1 --output=used / | tail -1").stdout)
        cluster.ssh(user, inst, f"fallocate -l {int(size * 0.95) - used} /root/big.bin")

        def ready():
            now = int(time.time())
            r = s.request("GET", f"/v1/instances/{iid}/metrics?from={now - 300}&to={now}&step=10",
                          token=user["token"])
            hints = cluster.get(user, iid)["hints"]
            return len(r.json["series"].get("cpu_cores", [])) >= 2 and hints
        wait_for(ready, timeout=120, interval=1, what="samples and the disk hint")

        out = browse(SCRIPT, {"SUANLI_URL": s.url, "SUANLI_EMAIL": user["email"],
                              "SUANLI_PASSWORD": PASSWORD, "SUANLI_INSTANCE": iid})
        r = out["results"]
        assert "charts.cpu" in r["charts"] and "charts.memory" in r["charts"], r
        assert "charts.gpu" not in r["charts"], r
        assert any("simulated GPU: no NVML" in a for a in r["absent"]), r
        assert r["colours"] > 2, r
        assert [h["kind"] for h in r["hints"]] == ["system_disk"], r
        assert "move data to /root/data" in r["hints"][0]["text"], r
        assert r["window_1d"], r
    finally:
        cluster.verb(user, iid, "release")
        cluster.wait_state(user, iid, "released")
