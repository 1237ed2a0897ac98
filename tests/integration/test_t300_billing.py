"""Per-second billing with the real agent and real containers (DESIGN.md
section 4): a meter runs from the moment an instance runs until its stop is
asked for, each settlement is the floor formula to the micro and a ledger
transaction, storage is billed in every state but released, a start needs an
hour of balance, zero stops running instances and keeps their disks, a host's
silence is not billed, stopped instances are released after the configured
time, and a prepaid plan keeps its GPUs and refunds its unused part.

The seeded simulation (tests/unit/test-billing-sim.c) covers the same rules
over a million instance-hours with a fake clock; these tests show them on
the real processes."""
import calendar
import os
import signal
import time

import pytest

from conftest import sample_catalog, wait_for, wait_heartbeats

# the prices every test server is seeded with (etc/catalog.sample.json)
CATALOG = sample_catalog()
GPU_PRICE = next(m["price_per_hour_micros"] for m in CATALOG["gpu_models"]
                 if m["name"] == "RTX 4090")  # micros per hour
DISK_PRICE = CATALOG["prices"]["data_disk_per_gib_day_micros"]
DISK_FREE = CATALOG["prices"]["data_disk_free_gib"]


def units(micros):
    """Micros as suanlid writes an amount (lib/money.h): 2 to 6 decimals."""
    text = f"{micros // 1_000_000}.{micros % 1_000_000:06d}".rstrip("0")
    return text + "0" * (2 - len(text.split(".")[1]))


def epoch(t):
    return calendar.timegm(time.strptime(t, "%Y-%m-%dT%H:%M:%SZ")) if t else None


def run_billing(cluster):
    r = cluster.server.request("POST", "/v1/admin/billing/run", {},
                               token=cluster.server.admin_token)
    assert r.status == 200, r
    return r.json


def pages(cluster, user, path):
    items, cursor = [], None
    while True:
        sep = "&" if "?" in path else "?"
        r = cluster.server.request("GET", path + (f"{sep}cursor={cursor}" if cursor else ""),
                                   token=user["token"])
        assert r.status == 200, r
        items += r.json["items"]
        cursor = r.json["next_cursor"]
        if not cursor:
            return items


def meters(cluster, user, iid):
    return pages(cluster, user, f"/v1/instances/{iid}/meters")


def formula(m):
    """The floor formula of DESIGN.md 4 at the meter's settled position."""
    return (m["amount_micros"] * (epoch(m["settled_until"]) - epoch(m["started_at"]))
            // m["period_seconds"])


def balance(cluster, user):
    r = cluster.server.request("GET", "/v1/balance", token=user["token"])
    assert r.status == 200, r
    return r.json


def check_books(cluster, user, credited):
    """Every meter is its formula; the instance's charges (each meter's
    whole days as rows, the rest as open pieces), the bills and the ledger
    agree; the balance is what was credited minus what was charged."""
    charges = pages(cluster, user, "/v1/bills/charges")
    ledger = pages(cluster, user, "/v1/ledger")
    by_txn = {e["txn_id"]: e["amount_micros"] for e in ledger}
    under = {}
    for c in charges:
        if c["meter_seq"] is None:  # a plan or a refund: a transaction of its own
            assert c["txn_id"] in by_txn and not c["open"], c
            under[c["txn_id"]] = under.get(c["txn_id"], 0) + c["amount_micros"]
        elif c["open"]:  # billed, its day not written yet
            assert c["seq"] is None and c["settlement"] is None and c["txn_id"] == "", c
        else:  # a day of a meter: its money moved with the passes that billed it
            assert c["settlement"] >= 1 and c["txn_id"] == "", c
    for txn, amount in under.items():  # a transaction moves exactly its charges
        assert by_txn[txn] == -amount, (txn, amount)
    usage = -sum(e["amount_micros"] for e in ledger if e["memo"].startswith("usage:"))
    assert usage == sum(c["amount_micros"] for c in charges if c["meter_seq"] is not None)
    total = sum(c["amount_micros"] for c in charges)
    assert balance(cluster, user)["balance_micros"] == credited - total
    r = cluster.server.request("GET", "/v1/admin/billing/check",
                               token=cluster.server.admin_token)
    assert r.status == 200 and r.json["ok"], r
    return charges


def events(cluster, user, kind=None):
    return pages(cluster, user, "/v1/events" + (f"?kind={kind}" if kind else ""))


def test_meter_runs_while_running_and_stops_when_asked(cluster):
    user = cluster.renter(credit_micros=100_000_000)
    inst = cluster.create(user)
    iid = inst["id"]
    ms = meters(cluster, user, iid)
    assert [m["kind"] for m in ms] == ["gpu"], ms  # the default disk is the free size
    gpu = ms[0]
    assert gpu["unit_price_micros"] == GPU_PRICE and gpu["quantity"] == 1
    assert gpu["rate_per_hour_micros"] == GPU_PRICE and gpu["ended_at"] is None
    assert cluster.get(user, iid)["rate_per_hour_micros"] == GPU_PRICE
    b = balance(cluster, user)
    assert b["spend_per_hour_micros"] == GPU_PRICE
    assert b["covers_seconds"] == b["balance_micros"] * 3600 // GPU_PRICE

    def charged():  # meters are charged up to the host's last report (every 3 s)
        run_billing(cluster)
        m = meters(cluster, user, iid)[0]
        return m if m["charged_micros"] > 0 else None
    gpu = wait_for(charged, timeout=20, interval=0.5, what="a first charge")
    assert gpu["charged_micros"] == formula(gpu), gpu
    # what it charged is in the bill: today's piece, open until the day is whole
    mine = pages(cluster, user, f"/v1/bills/charges?instance={iid}")
    assert sum(c["amount_micros"] for c in mine) == gpu["charged_micros"], mine
    assert gpu["settlements"] == len([c for c in mine if not c["open"]]), (gpu, mine)

    r = cluster.verb(user, iid, "stop")
    assert r.status == 200, r
    cluster.wait_state(user, iid, "stopped")
    def settled_to_its_end():  # after a heartbeat later than the stop
        run_billing(cluster)
        m = meters(cluster, user, iid)[0]
        return m if m["ended_at"] and m["settled_until"] == m["ended_at"] else None
    gpu = wait_for(settled_to_its_end, timeout=20, interval=0.5, what="the meter settled")
    assert gpu["charged_micros"] == formula(gpu)
    stopped = cluster.get(user, iid)
    assert stopped["charged_micros"] == gpu["charged_micros"]
    assert stopped["rate_per_hour_micros"] == 0
    assert stopped["release_at"] is not None
    assert epoch(stopped["release_at"]) - epoch(stopped["stopped_at"]) == 15 * 86400

    # nothing more while stopped, however often it settles: not after a
    # later heartbeat either (a meter left open would be charged to it)
    wait_heartbeats(cluster.server, cluster.node.node_id)
    run_billing(cluster)
    assert cluster.get(user, iid)["charged_micros"] == gpu["charged_micros"]
    charges = check_books(cluster, user, 100_000_000)
    assert {c["kind"] for c in charges} == {"gpu"}
    assert sum(c["amount_micros"] for c in charges) == gpu["charged_micros"]
    for c in charges:
        assert epoch(gpu["started_at"]) <= epoch(c["period_from"]) < epoch(c["period_to"])
        assert epoch(c["period_to"]) <= epoch(gpu["ended_at"])
    kinds = [e["kind"] for e in events(cluster, user) if e["instance_id"] == iid]
    assert kinds[:1] == ["create"] and "running" in kinds and "stop" in kinds
    assert cluster.verb(user, iid, "release").status == 200
    cluster.wait_state(user, iid, "released")


def test_data_disk_over_the_free_size_is_billed_in_every_state_but_released(cluster):
    user = cluster.renter(credit_micros=100_000_000)
    inst = cluster.create(user, data_disk_gib=DISK_FREE + 30)
    iid = inst["id"]
    disk = [m for m in meters(cluster, user, iid) if m["kind"] == "data_disk"]
    assert len(disk) == 1 and disk[0]["quantity"] == 30 and disk[0]["period_seconds"] == 86400
    assert disk[0]["amount_micros"] == 30 * DISK_PRICE
    assert cluster.verb(user, iid, "stop").status == 200
    cluster.wait_state(user, iid, "stopped")
    open_kinds = [m["kind"] for m in meters(cluster, user, iid) if m["ended_at"] is None]
    assert open_kinds == ["data_disk"]  # stopped: storage only
    assert balance(cluster, user)["spend_per_hour_micros"] == 30 * DISK_PRICE * 3600 // 86400
    assert cluster.verb(user, iid, "release").status == 200
    cluster.wait_state(user, iid, "released")
    assert all(m["ended_at"] for m in meters(cluster, user, iid))
    assert balance(cluster, user)["spend_per_hour_micros"] == 0
    run_billing(cluster)
    check_books(cluster, user, 100_000_000)


def test_a_start_needs_an_hour_of_balance(cluster):
    user = cluster.renter(credit_micros=GPU_PRICE - 1)
    r = cluster.create(user, wait=False)
    assert r.status == 409 and r.code == "insufficient_balance", r
    assert units(GPU_PRICE) in r.json["error"]["message"] and "top up at least 0.000001" in \
        r.json["error"]["message"], r
    listed = cluster.server.request("GET", "/v1/instances?state=all", token=user["token"])
    assert listed.json["items"] == []
    cluster.server.credit(user["id"], 1)
    inst = cluster.create(user)
    assert cluster.verb(user, inst["id"], "release").status == 200
    cluster.wait_state(user, inst["id"], "released")


def set_disk_price(cluster, amount):
    r = cluster.server.request("POST", "/v1/admin/prices",
                               {"item": "data_disk", "amount_micros": amount,
                                "free_gib": DISK_FREE},
                               token=cluster.server.admin_token)
    assert r.status == 201, r


def test_at_zero_running_instances_stop_and_keep_their_disks(cluster):
    # a data disk priced at 1.00 per GiB-second drains 30.00 in about 3 s
    set_disk_price(cluster, 86_400_000_000)
    try:
        user = cluster.renter(credit_micros=GPU_PRICE + 28_000_000)
        inst = cluster.create(user, data_disk_gib=DISK_FREE + 10)
    finally:
        set_disk_price(cluster, DISK_PRICE)
    iid = inst["id"]
    cluster.ssh(user, inst, "echo kept > /root/data/file")

    def stopped_for_balance():
        run_billing(cluster)
        return cluster.get(user, iid)["desired"] == "stopped"
    wait_for(stopped_for_balance, timeout=30, interval=0.5, what="the stop at zero")
    cluster.wait_state(user, iid, "stopped")
    ev = [e for e in events(cluster, user) if e["instance_id"] == iid]
    stop = [e for e in ev if e["kind"] == "stop"]
    assert stop and stop[-1]["reason"] == "balance", ev
    assert any(e["kind"] == "balance_stop" for e in ev), ev
    low = events(cluster, user, "balance_low")
    assert low and low[0]["instance_id"] == "" and "minutes" in low[0]["message"], low

    # never released for money; the disk keeps costing, the balance goes negative
    b1 = balance(cluster, user)["balance_micros"]
    assert b1 <= 0

    def went_down():  # meters charge up to the host's last report (every 3 s)
        run_billing(cluster)
        b = balance(cluster, user)["balance_micros"]
        return b if b < b1 else None
    b2 = wait_for(went_down, timeout=20, interval=0.5, what="the storage to go on costing")
    assert cluster.get(user, iid)["state"] == "stopped"
    r = cluster.verb(user, iid, "start")
    assert r.status == 409 and r.code == "insufficient_balance", r
    assert balance(cluster, user)["covers_seconds"] == 0

    # topped up, it starts again with its data
    cluster.server.credit(user["id"], 100_000_000 - b2)
    assert cluster.verb(user, iid, "start").status == 200
    inst = cluster.wait_state(user, iid, "running")
    assert cluster.ssh(user, inst, "cat /root/data/file").stdout.strip() == "kept"
    assert cluster.verb(user, iid, "release").status == 200
    cluster.wait_state(user, iid, "released")
    run_billing(cluster)
    check_books(cluster, user, GPU_PRICE + 28_000_000 + 100_000_000 - b2)


def test_a_plan_is_paid_up_front_keeps_its_gpus_and_refunds_the_rest(cluster):
    user = cluster.renter(credit_micros=200_000_000)
    poor = cluster.renter(credit_micros=GPU_PRICE * 2)
    r = cluster.create(poor, plan="day", wait=False)
    assert r.status == 409 and r.code == "insufficient_balance", r
    assert "day plan costs 45.144 up front" in r.json["error"]["message"], r

    inst = cluster.create(user, plan="day")
    iid = inst["id"]
    price = GPU_PRICE * 24 * 95 // 100
    assert inst["plan"] == "day" and inst["plan_price_micros"] == price
    assert [m["kind"] for m in meters(cluster, user, iid)] == []  # prepaid: no GPU meter
    assert balance(cluster, user)["balance_micros"] == 200_000_000 - price

    # stopped, it keeps its GPU: the host's GPU stays with it
    assert cluster.verb(user, iid, "stop").status == 200
    cluster.wait_state(user, iid, "stopped")
    node = cluster.server.request("GET", f"/v1/admin/nodes/{cluster.node.node_id}",
                                  token=cluster.server.admin_token).json
    assert [g["index"] for g in node["gpus"] if g["instance_id"] == iid] == \
        cluster.get(user, iid)["gpu_indices"]
    assert cluster.get(user, iid)["release_at"] is None  # a plan is not auto-released
    assert cluster.verb(user, iid, "start").status == 200
    cluster.wait_state(user, iid, "running")

    # back to pay-as-you-go: what comes back is the price less the time used
    # at the pay-as-you-go rate (no discount for part of a day); a start and
    # a stop now fit in the plan's first second, so wait for the clock to
    # pass it (whole seconds are billed)
    bought_at = epoch([c for c in pages(cluster, user, f"/v1/bills/charges?instance={iid}")
                       if c["kind"] == "plan"][0]["period_from"])
    wait_for(lambda: time.time() >= bought_at + 1.2, timeout=5, what="a second of the plan")
    r = cluster.server.request("POST", f"/v1/instances/{iid}/plan", {"plan": "payg"},
                               token=user["token"])
    assert r.status == 200 and r.json["plan"] == "payg", r
    charges = pages(cluster, user, f"/v1/bills/charges?instance={iid}")
    bought = [c for c in charges if c["kind"] == "plan"][0]
    refund = [c for c in charges if c["kind"] == "plan_refund"][0]
    used = epoch(refund["period_from"]) - epoch(bought["period_from"])
    assert used > 0
    assert -refund["amount_micros"] == price - GPU_PRICE * used // 3600
    assert [m["kind"] for m in meters(cluster, user, iid) if m["ended_at"] is None] == ["gpu"]
    ended = [e for e in events(cluster, user) if e["kind"] == "plan_ended"]
    assert len(ended) == 1 and f"pay-as-you-go rate ({units(GPU_PRICE)}/h)" in \
        ended[0]["message"], ended
    assert cluster.verb(user, iid, "release").status == 200
    cluster.wait_state(user, iid, "released")
    run_billing(cluster)
    check_books(cluster, user, 200_000_000)


@pytest.fixture
def fast_rules(cluster):
    """The cluster's suanlid with a 3 s offline limit, a 6 s stop-to-release
    time and a billing loop every second, for the length of one test."""
    s = cluster.server
    saved = dict(s.settings)
    s.settings.update({"nodes.offline_after": "3s", "billing.release_after": "6s",
                       "billing.settle_interval": "1s"})
    s.restart()
    try:
        yield cluster
    finally:
        s.settings = saved
        s.restart()


def test_a_silent_host_is_not_billed(fast_rules):
    cluster = fast_rules
    user = cluster.renter(credit_micros=100_000_000)
    inst = cluster.create(user)
    iid = inst["id"]
    node_id = cluster.node.node_id
    wait_heartbeats(cluster.server, node_id)  # billed up to a report while it runs
    os.kill(cluster.node.proc.pid, signal.SIGSTOP)
    try:
        # silent past nodes.offline_after (3 s) as suanlid counts it when the
        # host reports again: whole seconds since its last heartbeat, > 3
        def silent_long_enough():
            last = cluster.server.request("GET", f"/v1/admin/nodes/{node_id}",
                                          token=cluster.server.admin_token).json["last_heartbeat"]
            return time.time() >= epoch(last) + 4.1
        wait_for(silent_long_enough, timeout=15, interval=0.1,
                 what="a silence longer than nodes.offline_after")
    finally:
        os.kill(cluster.node.proc.pid, signal.SIGCONT)
    wait_for(lambda: any(e["kind"] == "host_back" for e in events(cluster, user)),
             timeout=15, what="the host_back event")
    wait_heartbeats(cluster.server, node_id)  # a report after the return
    run_billing(cluster)
    ms = meters(cluster, user, iid)
    backs = [e for e in events(cluster, user)
             if e["kind"] == "host_back" and e["instance_id"] == iid]
    # a meter per stretch the host was heard from: the stop above makes one
    # silence; a loaded machine may delay a heartbeat past the 3 s into
    # others, which are not billed either (the meter splits on a late report
    # even when no sweep saw the host offline, so no host_back names it)
    assert backs and len(ms) >= len(backs) + 1, (ms, backs)
    assert all(m["kind"] == "gpu" for m in ms), ms
    gaps = []
    for first, second in zip(ms, ms[1:]):
        gap = (epoch(first["ended_at"]), epoch(second["started_at"]))
        assert gap[1] - gap[0] > 3, ms
        assert first["settled_until"] == first["ended_at"]
        assert first["charged_micros"] == formula(first)
        assert second["amount_micros"] == first["amount_micros"]  # the same rates go on
        gaps.append(gap)
    for c in pages(cluster, user, f"/v1/bills/charges?instance={iid}"):
        for gap in gaps:
            assert epoch(c["period_to"]) <= gap[0] or epoch(c["period_from"]) >= gap[1], (c, gap)
    for back in backs:
        assert back["reason"] == "host_lost" and "not billed" in back["message"], back
    assert cluster.verb(user, iid, "release").status == 200
    cluster.wait_state(user, iid, "released")
    check_books(cluster, user, 100_000_000)


def test_stopped_instances_are_released_after_the_configured_time(fast_rules):
    cluster = fast_rules
    user = cluster.renter(credit_micros=100_000_000)
    inst = cluster.create(user, data_disk_gib=DISK_FREE + 5)
    iid = inst["id"]
    assert cluster.verb(user, iid, "stop").status == 200
    stopped = cluster.wait_state(user, iid, "stopped")
    assert epoch(stopped["release_at"]) == epoch(stopped["stopped_at"]) + 6
    released = cluster.wait_state(user, iid, "released", timeout=30)
    assert time.time() >= epoch(stopped["release_at"])
    ev = [e for e in events(cluster, user) if e["instance_id"] == iid]
    warn = [e for e in ev if e["kind"] == "release_warning"]
    assert warn and "will be released at" in warn[0]["message"], ev
    rel = [e for e in ev if e["kind"] == "release"]
    assert rel and rel[-1]["reason"] == "auto_release", ev
    assert all(m["ended_at"] for m in meters(cluster, user, iid))
    assert released["state"] == "released"
    check_books(cluster, user, 100_000_000)
