"""t541: the operator's bills, GET /v1/admin/bills (issue 13, the usage
page's revenue per day): every renter's charges of a month summed per day,
kind, instance or user, in the shape of the renter's GET /v1/bills and equal
to the sum of the renters' own bills; GPU-hours as gpu_seconds (a gpu
charge's span times its meter's GPUs). A renter gets 404 and cannot group
its own bill by user; a bad month or grouping is a 400 that says what to
send. Runs on the shared cluster (a real agent and real containers)."""
import time

from conftest import wait_for


def run_billing(cluster):
    r = cluster.server.request("POST", "/v1/admin/billing/run", {},
                               token=cluster.server.admin_token)
    assert r.status == 200, r


def get(cluster, token, path):
    r = cluster.server.request("GET", path, token=token)
    assert r.status == 200, r
    return r.json


def pages(cluster, token, path):
    items, cursor = [], None
    while True:
        sep = "&" if "?" in path else "?"
        j = get(cluster, token, path + (f"{sep}cursor={cursor}" if cursor else ""))
        items += j["items"]
        cursor = j["next_cursor"]
        if not cursor:
            return items


def charged_and_released(cluster, user, gpus):
    """An instance of the renter's that ran, was charged, and was released
    with every meter settled to its end: its charges no longer change."""
    iid = cluster.create(user, gpus=gpus)["id"]

    def charged():
        run_billing(cluster)
        return get(cluster, user["token"], f"/v1/instances/{iid}")["charged_micros"] > 0
    wait_for(charged, timeout=30, interval=0.5, what=f"a charge for {iid}")
    r = cluster.verb(user, iid, "release")
    assert r.status == 200, r

    def settled():
        run_billing(cluster)
        ms = pages(cluster, user["token"], f"/v1/instances/{iid}/meters")
        return all(m["ended_at"] and m["settled_until"] == m["ended_at"] for m in ms)
    wait_for(settled, timeout=60, interval=0.5, what=f"{iid}'s meters settled")
    return iid


def gpu_seconds(cluster, user):
    """GPU-seconds of the renter's gpu charges this month, from the charges
    and their meters' quantities."""
    qty = {}
    total = 0
    for c in pages(cluster, user["token"], "/v1/bills/charges?kind=gpu"):
        if c["meter_seq"] is None:
            continue
        if c["instance_id"] not in qty:
            for m in pages(cluster, user["token"], f"/v1/instances/{c['instance_id']}/meters"):
                qty[m["seq"]] = m["quantity"]
            qty[c["instance_id"]] = True
        total += c["seconds"] * qty[c["meter_seq"]]
    return total


def test_all_renters_bills_sum_to_each_renters_own(cluster):
    s = cluster.server
    a = cluster.renter()
    b = cluster.renter()
    charged_and_released(cluster, a, gpus=1)
    charged_and_released(cluster, b, gpus=2)
    month = time.strftime("%Y-%m", time.gmtime())
    own = {u["id"]: get(cluster, u["token"], f"/v1/bills?month={month}&by=day") for u in (a, b)}
    for u in (a, b):
        assert own[u["id"]]["total_micros"] > 0, own[u["id"]]

    per_user = get(cluster, s.admin_token, f"/v1/admin/bills?month={month}&by=user")
    per_day = get(cluster, s.admin_token, f"/v1/admin/bills?month={month}&by=day")
    assert per_user["month"] == month and per_user["by"] == "user"
    assert per_day["by"] == "day" and per_day["currency"] == own[a["id"]]["currency"]
    users = {r["user_id"]: r for r in per_user["rows"]}
    for u in (a, b):
        row = users[u["id"]]
        mine = own[u["id"]]
        assert row["key"] == u["id"] and row["email"] == u["email"], row
        assert row["amount_micros"] == mine["total_micros"], (row, mine)
        assert row["charges"] == sum(r["charges"] for r in mine["rows"])
        assert row["seconds"] == sum(r["seconds"] for r in mine["rows"])
        assert row["gpu_seconds"] == sum(r["gpu_seconds"] for r in mine["rows"])
        # GPU-seconds: the two-GPU instance counts each GPU
        assert row["gpu_seconds"] == gpu_seconds(cluster, u) > 0, row
    # the totals agree whichever way they are grouped
    assert per_day["total_micros"] == per_user["total_micros"] == \
        sum(r["amount_micros"] for r in per_user["rows"])
    assert sum(r["amount_micros"] for r in per_day["rows"]) == per_day["total_micros"]
    for by in ("kind", "instance"):
        j = get(cluster, s.admin_token, f"/v1/admin/bills?month={month}&by={by}")
        assert j["total_micros"] == per_day["total_micros"], (by, j)
    # per day: the two renters' own days summed; other renters of this
    # session (other test modules) may add to a day, never take from it
    days = {r["day"]: r for r in per_day["rows"]}
    ours = {}
    for mine in own.values():
        for r in mine["rows"]:
            ours[r["day"]] = ours.get(r["day"], 0) + r["amount_micros"]
    only_ours = set(users) == {a["id"], b["id"]}
    for day, amount in ours.items():
        assert day in days, (day, per_day)
        if only_ours:
            assert days[day]["amount_micros"] == amount, (day, days[day], amount)
        else:
            assert days[day]["amount_micros"] >= amount, (day, days[day], amount)
    if only_ours:
        assert set(days) == set(ours)
    # by kind: the two renters' gpu charges are in the fleet's gpu row
    kinds = {r["kind"]: r for r in get(cluster, s.admin_token,
                                       f"/v1/admin/bills?month={month}&by=kind")["rows"]}
    ours_gpu = sum(r["by_kind"].get("gpu", 0) for m in own.values() for r in m["rows"])
    assert kinds["gpu"]["amount_micros"] >= ours_gpu > 0


def test_a_renter_gets_404_and_no_one_elses_bill(cluster):
    s = cluster.server
    renter = cluster.renter(credit_micros=0)
    r = s.request("GET", "/v1/admin/bills", token=renter["token"])
    assert r.status == 404 and r.code == "not_found", r
    r = s.request("GET", "/v1/admin/bills?by=user", token=renter["token"])
    assert r.status == 404 and r.code == "not_found", r
    # the renter's own bill cannot be grouped by user (no other renter's
    # id or email comes out of it)
    r = s.request("GET", "/v1/bills?by=user", token=renter["token"])
    assert r.status == 400 and r.code == "invalid_parameter", r
    assert "by must be day, instance or kind (not 'user')" in r.json["error"]["message"], r
    # an empty month is an empty bill, not an error
    j = get(cluster, renter["token"], "/v1/bills?month=2020-01")
    assert j["rows"] == [] and j["total_micros"] == 0
    r = s.request("GET", "/v1/admin/bills")
    assert r.status == 401, r


def test_bad_month_and_grouping_are_400_with_the_way_out(cluster):
    s = cluster.server
    for month in ("2026-13", "2026-1", "26-11", "2026-11-01", "x", "2026-00"):
        r = s.request("GET", f"/v1/admin/bills?month={month}", token=s.admin_token)
        assert r.status == 400 and r.code == "invalid_parameter", (month, r)
        msg = r.json["error"]["message"]
        assert "month must be YYYY-MM, such as 2026-11" in msg and month in msg, r
    for by in ("week", "email", "DAY"):
        r = s.request("GET", f"/v1/admin/bills?by={by}", token=s.admin_token)
        assert r.status == 400 and r.code == "invalid_parameter", (by, r)
        assert f"by must be day, instance, kind or user (not '{by}')" in r.json["error"]["message"], r
    j = get(cluster, s.admin_token, "/v1/admin/bills?month=2020-01&by=user")
    assert j == {"month": "2020-01", "by": "user", "currency": j["currency"],
                 "total_micros": 0, "rows": []}
    # absent: this month, by day
    j = get(cluster, s.admin_token, "/v1/admin/bills")
    assert j["month"] == time.strftime("%Y-%m", time.gmtime()) and j["by"] == "day"
