"""t671: saved images are billed (issue 14, item 1; docs/design/billing.md,
"Storage meters"): the renter's stored layers over a free size per renter,
per GiB-day in whole MiB, by a renter-wide image_storage meter that splits
at the second a layer is stored or an image deleted. With hosts the test
reports for (t641's SaveHost) and the real suanlid and CLI.

An image being saved costs nothing until its layer is stored; a second
one raises the meter, a delete lowers it at that second; the charges have
no instance; the price is one for every region; another renter pays
nothing; the books check."""
import calendar
import os
import time

from conftest import Cli, wait_for
from test_t440_clone import api_renter, api_stopped
from test_t641_image_save_api import SaveHost, put_layer, save

MIB = 1024 * 1024
PRICE = 1024 * 86400  # per GiB-day: one MiB costs 1 micro per second


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


def image_meters(s, user):
    ms = sorted((m for m in pages(s, user, "/v1/meters") if m["kind"] == "image_storage"),
                key=lambda m: m["seq"])
    for a, b in zip(ms, ms[1:]):  # end to start: no gap, no overlap
        assert a["ended_at"] == b["started_at"], (a, b)
    return ms


def live(ms):
    return [m for m in ms if m["ended_at"] is None]


def test_saved_images_over_the_free_size_are_billed(server, tmp_path):
    s = server
    admin = s.admin_token
    r = s.request("POST", "/v1/admin/prices", {"item": "image_storage", "region": "sample-1",
                                               "amount_micros": PRICE}, token=admin)
    assert r.status == 400 and "every region" in r.json["error"]["message"], r
    r = s.request("POST", "/v1/admin/prices", {"item": "image_storage", "amount_micros": PRICE,
                                               "free_gib": 0}, token=admin)
    assert r.status == 201, r

    a = SaveHost(s, gpus=2)
    user, stranger = api_renter(s), api_renter(s)
    src = api_stopped(s, user, a)
    name = f"bill-env-{int(time.time() * 1000) % 10**8}"

    # saving: nothing yet
    r = save(s, user, src, name)
    assert r.status == 202, r
    assert image_meters(s, user) == []
    assert put_layer(s, a, name, os.urandom(3 * MIB + 5)).status == 200
    ms = image_meters(s, user)
    assert len(ms) == 1 and ms[0]["quantity"] == 3 and ms[0]["region"] == "", ms
    assert ms[0]["unit_price_micros"] == PRICE and ms[0]["period_seconds"] == 1024 * 86400, ms

    # a second saved image: the meter splits at its second
    r = save(s, user, src, name + "-2")
    assert r.status == 202, r
    assert put_layer(s, a, name + "-2", os.urandom(2 * MIB)).status == 200
    ms = image_meters(s, user)
    assert [m["quantity"] for m in ms] == [3, 5] and live(ms) == [ms[-1]], ms

    # settled: charges of kind image_storage with no instance
    def charged():
        assert s.request("POST", "/v1/admin/billing/run", {}, token=admin).status == 200
        cs = pages(s, user, "/v1/bills/charges?kind=image_storage")
        return cs if sum(c["amount_micros"] for c in cs) > 0 else None
    cs = wait_for(charged, timeout=30, interval=1, what="image storage charges")
    assert all(c["instance_id"] == "" for c in cs), cs
    p = Cli(s, str(tmp_path / "cli")).run("bill", "--by", "kind",
                                         env={"SUANLI_TOKEN": user["token"]})
    assert p.returncode == 0 and "\nimage_storage " in p.stdout, p.stdout

    # deleted: lower at once, and none left after the last
    assert s.request("DELETE", f"/v1/images/{name}-2", token=user["token"]).status == 204
    ms = image_meters(s, user)
    assert live(ms)[0]["quantity"] == 3, ms
    assert s.request("DELETE", f"/v1/images/{name}", token=user["token"]).status == 204
    ms = image_meters(s, user)
    assert live(ms) == [] and all(m["ended_at"] for m in ms), ms

    # every meter charged its formula; the stranger has none; books hold
    assert s.request("POST", "/v1/admin/billing/run", {}, token=admin).status == 200
    for m in image_meters(s, user):
        t = lambda x: calendar.timegm(time.strptime(x, "%Y-%m-%dT%H:%M:%SZ"))  # noqa: E731
        assert m["charged_micros"] == m["amount_micros"] * (
            t(m["settled_until"]) - t(m["started_at"])) // m["period_seconds"], m
        assert m["settled_until"] == m["ended_at"], m
    assert image_meters(s, stranger) == []
    check = s.request("GET", "/v1/admin/billing/check", token=admin).json
    assert check["ok"] is True, check
    assert check["charges_total_micros"] == check["ledger_charges_micros"], check
