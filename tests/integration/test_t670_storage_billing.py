"""t670: file storage is billed (issue 14, item 4; docs/design/billing.md,
"Storage meters"): the use of /root/storage over the free size, per GiB-day
in whole MiB, by a renter-wide meter that follows the host's samples. On
the shared cluster: the real suanlid, agent, runc container and SSH.

A renter writes 64 MiB into /root/storage; the next sample opens (or
raises) their file_storage meter at that second; the settlements are
charges of kind file_storage with no instance, in the bill, `suanli bill`
and the ledger; deleting the file lowers the meter; the books check; and
another renter is never charged for it."""
import calendar
import time

from conftest import Cli, wait_for

MIB = 1024 * 1024
REGION = "sample-1"
# micros per GiB-day: one MiB then costs 1 micro per second
PRICE = 1024 * 86400


def epoch(t):
    return calendar.timegm(time.strptime(t, "%Y-%m-%dT%H:%M:%SZ")) if t else None


def set_price(s, free_gib, amount=PRICE):
    r = s.request("POST", "/v1/admin/prices",
                  {"item": "file_storage", "region": REGION, "amount_micros": amount,
                   "free_gib": free_gib}, token=s.admin_token)
    assert r.status == 201, r


def run_billing(s):
    r = s.request("POST", "/v1/admin/billing/run", {}, token=s.admin_token)
    assert r.status == 200, r


def pages(s, user, path):
    items, cursor = [], None
    while True:
        sep = "&" if "?" in path else "?"
        r = s.request("GET", path + (f"{sep}cursor={cursor}" if cursor else ""),
                      token=user["token"])
        assert r.status == 200, r
        items += r.json["items"]
        cursor = r.json["next_cursor"]
        if not cursor:
            return items


def storage_of(s, user):
    r = s.request("GET", "/v1/storage", token=user["token"])
    assert r.status == 200, r
    return next((x for x in r.json["items"] if x["region"] == REGION), None)


def chain_holds(s, user):
    """The renter's file storage meters follow one another: each ends at
    the second the next starts, none overlaps, none leaves a gap."""
    ms = sorted((m for m in pages(s, user, "/v1/meters") if m["kind"] == "file_storage"),
                key=lambda m: m["seq"])
    for a, b in zip(ms, ms[1:]):
        assert a["ended_at"] == b["started_at"], (a, b)
    return ms


def open_meter(s, user):
    live = [m for m in pages(s, user, "/v1/meters")
            if m["kind"] == "file_storage" and m["ended_at"] is None]
    assert len(live) <= 1, live
    return live[0] if live else None


def test_file_storage_over_the_free_size_is_billed(cluster, tmp_path):
    s = cluster.server
    user, other = cluster.renter(), cluster.renter()
    inst = cluster.create(user, data_disk_gib=5)
    # nothing free: even the file system's own blocks count, so the meter
    # opens at the first sample; restored (new rows) at the end
    set_price(s, 0)
    try:
        def sampled_after(t):
            st = storage_of(s, user)
            return st if st and st["used_at"] and epoch(st["used_at"]) > t else None
        t0 = int(time.time())
        st = wait_for(lambda: sampled_after(t0), timeout=60, interval=0.5,
                      what="a sample at the new price")
        assert st["billed"] is True and st["price_per_gib_day_micros"] == PRICE, st
        # a fresh file system holds next to nothing: a meter only when a
        # whole MiB is over
        base = open_meter(s, user)
        assert abs((base["quantity"] if base else 0) - st["used_bytes"] // MIB) <= 1, (base, st)
        before = base["quantity"] if base else 0

        # 64 MiB more: a meter at the higher use from its sample
        cluster.ssh(user, inst, "head -c 64M /dev/urandom > /root/storage/big.bin && sync")
        grown = wait_for(lambda: (lambda m: m if m and m["quantity"] >= before + 64
                                  else None)(open_meter(s, user)),
                         timeout=60, interval=0.5, what="the meter to follow the write")
        assert grown["region"] == REGION and grown["unit_price_micros"] == PRICE, grown
        assert grown["amount_micros"] == grown["quantity"] * PRICE, grown
        assert grown["period_seconds"] == 1024 * 86400, grown
        chain_holds(s, user)
        st = storage_of(s, user)
        assert st["over_free_mib"] >= 64 and st["per_day_micros"] > 0, st

        # settled: charges of kind file_storage, no instance, in the bill
        def charged():
            run_billing(s)
            cs = [c for c in pages(s, user, "/v1/bills/charges?kind=file_storage")]
            return cs if cs and sum(c["amount_micros"] for c in cs) > 0 else None
        charges = wait_for(charged, timeout=60, interval=1, what="file storage charges")
        assert all(c["instance_id"] == "" and c["kind"] == "file_storage" for c in charges)
        meters = [m for m in pages(s, user, "/v1/meters") if m["kind"] == "file_storage"]
        for m in meters:
            want = m["amount_micros"] * (epoch(m["settled_until"]) - epoch(m["started_at"])) \
                // m["period_seconds"]
            assert m["charged_micros"] == want, m
            got = sum(c["amount_micros"] for c in charges if c["meter_seq"] == m["seq"])
            assert got <= m["charged_micros"], (m, got)  # a pass may land between reads
        bill = s.request("GET", "/v1/bills?by=kind", token=user["token"]).json
        assert any(r["kind"] == "file_storage" and r["amount_micros"] > 0
                   for r in bill["rows"]), bill
        cli = Cli(s, str(tmp_path / "cli"))
        env = {"SUANLI_TOKEN": user["token"]}
        out = cli.run("bill", "--by", "kind", env=env)
        assert out.returncode == 0 and "\nfile_storage " in out.stdout, out.stdout
        out = cli.run("bill", env=env)  # by day: a column per kind
        assert out.returncode == 0 and "STORAGE" in out.stdout.splitlines()[1], out.stdout
        out = cli.run("storage", env=env)
        assert out.returncode == 0 and "PER DAY" in out.stdout, out.stdout
        assert "billed per GiB-day" in out.stderr, out.stderr

        # the spend per hour counts the meter: 1 micro per MiB-second
        bal = s.request("GET", "/v1/balance", token=user["token"]).json
        assert bal["spend_per_hour_micros"] >= grown["quantity"] * 3600, bal

        # deleted: the meter falls to the use left, dated to the sample before
        cluster.ssh(user, inst, "rm /root/storage/big.bin && sync")

        def fell():
            m = open_meter(s, user)
            if m is None:
                return {"quantity": 0}  # under a MiB left: no meter at all
            return m if m["quantity"] < grown["quantity"] - 32 else None
        low = wait_for(fell, timeout=60, interval=0.5, what="the meter to follow the delete")
        ms = chain_holds(s, user)
        # a fall is dated back to the sample before it: never later than
        # the sample that saw it
        fall = ms[-2]["ended_at"] if "seq" in low else ms[-1]["ended_at"]
        assert fall and epoch(fall) <= epoch(storage_of(s, user)["used_at"]), ms

        # the other renter has no such meter and no such charge
        assert not [m for m in pages(s, other, "/v1/meters")], "another renter's meter"
        assert not pages(s, other, "/v1/bills/charges?kind=file_storage")
        # and the books hold
        run_billing(s)
        check = s.request("GET", "/v1/admin/billing/check", token=s.admin_token)
        assert check.status == 200, check
        assert check.json["ok"] is True, check.json
        assert check.json["charges_total_micros"] == check.json["ledger_charges_micros"], check.json
    finally:
        set_price(s, 20, 5000)
        cluster.verb(user, inst["id"], "release")
        cluster.wait_state(user, inst["id"], "released")


def test_meters_route_is_the_callers_own(cluster):
    s = cluster.server
    assert s.request("GET", "/v1/meters").status == 401
    user = s.register()
    r = s.request("GET", "/v1/meters", token=user["token"])
    assert r.status == 200 and r.json["items"] == [], r
