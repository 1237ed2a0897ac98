"""t662: the renter's File storage page in the web console (issue 14, item
4), in Debian's chromium driven by tests/browser/t662_storage.mjs against the
real suanlid and the shared cluster's agent: a renter with an instance and
50 MiB in /root/storage finds the page in the menu and reads their use,
quota and free size there, and how it is billed."""
from conftest import PASSWORD, wait_for
from test_t510_console_renter import browse

REGION = "sample-1"


def test_storage_page_shows_the_use(cluster):
    s = cluster.server
    user = cluster.renter()
    inst = cluster.create(user, data_disk_gib=5)
    try:
        cluster.ssh(user, inst, "head -c 50M /dev/zero > /root/storage/data.bin && sync")

        def used():
            items = s.request("GET", "/v1/storage", token=user["token"]).json["items"]
            return items if items and items[0]["used_bytes"] >= 50 << 20 else None
        wait_for(used, timeout=60, interval=0.5, what="the use to be reported")
        out = browse("tests/browser/t662_storage.mjs",
                     {"SUANLI_URL": s.url, "SUANLI_EMAIL": user["email"],
                      "SUANLI_PASSWORD": PASSWORD}, timeout=300)
        res = out["results"]
        assert "/storage" in res["nav"], res["nav"]
        assert res["headers"][:5] == ["Region", "Path inside", "Used", "Quota", "Free size"], res
        row = next(x for x in res["rows"] if x[0] == REGION)
        assert row[1] == "/root/storage" and row[2].endswith("MiB") and \
            50 <= float(row[2].split()[0]) < 60, row
        assert row[4] == "20 GiB", row
        assert res["headers"][6] == "Cost per day now", res
        assert row[6].endswith("0.00"), row  # 50 MiB, within the free 20 GiB
        assert res["note"].startswith("The use over the free size is billed per GiB·day"), res
    finally:
        cluster.verb(user, inst["id"], "release")
        cluster.wait_state(user, inst["id"], "released")
