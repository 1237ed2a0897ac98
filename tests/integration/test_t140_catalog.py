"""T140: the catalog: the sample seed, admin regions and GPU models, price
history, region overrides, storage and no-GPU prices."""
import json
import uuid

import pytest

from conftest import SAMPLE_CATALOG


def assert_error(r, status, code=None):
    assert r.status == status, r
    if code:
        assert r.code == code, r
    assert r.json["error"]["message"], r


@pytest.fixture(scope="module")
def renter(server):
    return server.register()


@pytest.fixture(scope="module")
def sample():
    with open(SAMPLE_CATALOG) as f:
        return json.load(f)


def by_name(items):
    return {m["name"]: m for m in items}


def market_region(server, token, region):
    r = server.request("GET", f"/v1/market?region={region}", token=token)
    assert r.status == 200, r
    assert len(r.json["items"]) == 1, r
    return r.json["items"][0]


def test_sample_catalog_visible_and_flagged(server, renter, sample):
    t = renter["token"]
    regions = server.request("GET", "/v1/regions", token=t)
    assert regions.status == 200
    ids = {r["id"]: r for r in regions.json["items"]}
    for reg in sample["regions"]:
        assert reg["id"] in ids
        assert ids[reg["id"]]["sample"] is True
        assert ids[reg["id"]]["name"] == reg["name"]

    models = by_name(server.request("GET", "/v1/gpu-models", token=t).json["items"])
    for m in sample["gpu_models"]:
        got = models[m["name"]]
        assert got["sample"] is True
        assert got["vram_mib"] == m["vram_mib"]
        assert got["price_per_hour_micros"] == m["price_per_hour_micros"]
        assert got["id"].startswith("gpu-")

    market = server.request("GET", "/v1/market", token=t)
    assert market.status == 200
    assert market.json["currency"] == "CNY"
    reg = [x for x in market.json["items"] if x["region"] == sample["regions"][0]["id"]][0]
    assert reg["sample"] is True
    mm = by_name(reg["gpu_models"])
    for m in sample["gpu_models"]:
        assert mm[m["name"]]["price_per_hour_micros"] == m["price_per_hour_micros"]
        assert mm[m["name"]]["sample"] is True
        assert mm[m["name"]]["gpus_free"] >= 0
    p = sample["prices"]
    assert reg["nogpu_price_per_hour_micros"] == p["nogpu_per_hour_micros"]
    assert reg["data_disk"] == {"price_per_gib_day_micros": p["data_disk_per_gib_day_micros"],
                                "free_gib": p["data_disk_free_gib"]}
    assert reg["file_storage"] == {"price_per_gib_day_micros":
                                   p["file_storage_per_gib_day_micros"],
                                   "free_gib": p["file_storage_free_gib"]}
    # the catalog needs a login
    assert server.request("GET", "/v1/market").status == 401


def test_no_seed_means_empty_catalog(make_server):
    s = make_server(seed_catalog=False)
    u = s.register()
    assert s.request("GET", "/v1/regions", token=u["token"]).json["items"] == []
    assert s.request("GET", "/v1/gpu-models", token=u["token"]).json["items"] == []
    assert s.request("GET", "/v1/market", token=u["token"]).json["items"] == []


def test_seed_loads_once(make_server, sample):
    s = make_server()
    r = s.request("PATCH", "/v1/admin/gpu-models/" + by_name(
        s.request("GET", "/v1/gpu-models", token=s.admin_token).json["items"])["RTX 4090"]["id"],
        {"price_per_hour_micros": 1}, token=s.admin_token)
    assert r.status == 200, r
    s.restart()
    models = s.request("GET", "/v1/gpu-models", token=s.admin_token).json["items"]
    assert len([m for m in models if m["name"] == "RTX 4090"]) == 1
    assert by_name(models)["RTX 4090"]["price_per_hour_micros"] == 1
    assert len(models) == len(sample["gpu_models"])


def test_admin_creates_region_and_gpu_model(server, renter):
    admin = server.admin_token
    rid = "t-" + uuid.uuid4().hex[:6]
    r = server.request("POST", "/v1/admin/regions", {"id": rid, "name": "Test region"},
                       token=admin)
    assert r.status == 201, r
    assert r.json == {**r.json, "id": rid, "name": "Test region", "sample": False}
    assert_error(server.request("POST", "/v1/admin/regions", {"id": rid, "name": "again"},
                                token=admin), 409, "region_exists")
    for bad in ("BJ-1", "bj_1", "bj 1", "bj/1", "北京", "a.b", "", "x" * 33):
        r = server.request("POST", "/v1/admin/regions", {"id": bad, "name": "bad"}, token=admin)
        assert_error(r, 400)
    ids = [x["id"] for x in server.request("GET", "/v1/regions", token=renter["token"]).json["items"]]
    assert rid in ids
    assert "BJ-1" not in ids and "bj_1" not in ids
    assert rid in [x["id"] for x in
                   server.request("GET", "/v1/admin/regions", token=admin).json["items"]]
    # a renter may not create one
    r = server.request("POST", "/v1/admin/regions", {"id": rid + "x", "name": "no"},
                       token=renter["token"])
    assert r.status == 404
    assert rid + "x" not in server.request("GET", "/v1/regions", token=admin).body

    name = "Test GPU " + uuid.uuid4().hex[:6]
    body = {"name": name, "vram_mib": 49152, "cpu_cores_per_gpu": 10,
            "memory_mib_per_gpu": 65536, "price_per_hour_micros": 3_000_000}
    r = server.request("POST", "/v1/admin/gpu-models", body, token=admin)
    assert r.status == 201, r
    assert r.json["id"].startswith("gpu-")
    assert r.json["sample"] is False
    assert_error(server.request("POST", "/v1/admin/gpu-models", body, token=admin), 409,
                 "gpu_model_exists")
    for k, v in (("vram_mib", 0), ("price_per_hour_micros", -1), ("cpu_cores_per_gpu", "4"),
                 ("name", "")):
        r = server.request("POST", "/v1/admin/gpu-models", {**body, "name": name + "b", k: v},
                           token=admin)
        assert_error(r, 400)
    m = by_name(server.request("GET", "/v1/gpu-models", token=renter["token"]).json["items"])[name]
    assert m["price_per_hour_micros"] == 3_000_000 and m["vram_mib"] == 49152
    mk = market_region(server, renter["token"], rid)
    assert by_name(mk["gpu_models"])[name]["price_per_hour_micros"] == 3_000_000
    assert mk["sample"] is False


def test_price_change_keeps_history(server, renter):
    admin = server.admin_token
    name = "Hist GPU " + uuid.uuid4().hex[:6]
    g = server.request("POST", "/v1/admin/gpu-models",
                       {"name": name, "vram_mib": 1024, "cpu_cores_per_gpu": 1,
                        "memory_mib_per_gpu": 1024, "price_per_hour_micros": 1_000_000},
                       token=admin).json
    r = server.request("PATCH", f"/v1/admin/gpu-models/{g['id']}",
                       {"price_per_hour_micros": 2_500_000}, token=admin)
    assert r.status == 200, r
    assert r.json["price_per_hour_micros"] == 2_500_000
    m = by_name(server.request("GET", "/v1/gpu-models", token=renter["token"]).json["items"])[name]
    assert m["price_per_hour_micros"] == 2_500_000

    hist = []
    cursor = None
    while True:
        q = "/v1/admin/prices?limit=5" + (f"&cursor={cursor}" if cursor else "")
        p = server.request("GET", q, token=admin)
        assert p.status == 200, p
        hist += p.json["items"]
        cursor = p.json["next_cursor"]
        if cursor is None:
            break
    rows = [h for h in hist if h["item"] == f"gpu:{g['id']}"]
    assert [h["amount_micros"] for h in rows] == [1_000_000, 2_500_000]
    assert rows[0]["effective_from"] <= rows[1]["effective_from"]
    assert rows[0]["seq"] < rows[1]["seq"]
    assert all(h["region"] == "" for h in rows)
    assert rows[1]["created_by"]
    seqs = [h["seq"] for h in hist]
    assert len(seqs) == len(set(seqs))
    assert server.request("GET", "/v1/admin/prices", token=renter["token"]).status == 404

    # errors
    assert_error(server.request("PATCH", "/v1/admin/gpu-models/gpu-nope",
                                {"price_per_hour_micros": 1}, token=admin), 404)
    assert_error(server.request("PATCH", f"/v1/admin/gpu-models/{g['id']}",
                                {"price_per_hour_micros": -1}, token=admin), 400)
    assert_error(server.request("PATCH", f"/v1/admin/gpu-models/{g['id']}", {},
                                token=admin), 400)
    assert_error(server.request("PATCH", f"/v1/admin/gpu-models/{g['id']}",
                                {"price_per_hour_micros": 1, "region": "no-such"},
                                token=admin), 404)
    r = server.request("PATCH", f"/v1/admin/gpu-models/{g['id']}",
                       {"price_per_hour_micros": 1}, token=renter["token"])
    assert r.status == 404
    m = by_name(server.request("GET", "/v1/gpu-models", token=renter["token"]).json["items"])[name]
    assert m["price_per_hour_micros"] == 2_500_000


def test_region_price_overrides_default(server, renter):
    admin = server.admin_token
    ra, rb = "ov-a-" + uuid.uuid4().hex[:4], "ov-b-" + uuid.uuid4().hex[:4]
    for rid in (ra, rb):
        assert server.request("POST", "/v1/admin/regions", {"id": rid, "name": rid},
                              token=admin).status == 201
    name = "Ovr GPU " + uuid.uuid4().hex[:6]
    g = server.request("POST", "/v1/admin/gpu-models",
                       {"name": name, "vram_mib": 2048, "cpu_cores_per_gpu": 2,
                        "memory_mib_per_gpu": 2048, "price_per_hour_micros": 4_000_000},
                       token=admin).json
    r = server.request("PATCH", f"/v1/admin/gpu-models/{g['id']}",
                       {"price_per_hour_micros": 3_300_000, "region": ra}, token=admin)
    assert r.status == 200, r
    assert r.json["price_per_hour_micros"] == 3_300_000
    t = renter["token"]
    assert by_name(market_region(server, t, ra)["gpu_models"])[name]["price_per_hour_micros"] \
        == 3_300_000
    assert by_name(market_region(server, t, rb)["gpu_models"])[name]["price_per_hour_micros"] \
        == 4_000_000
    # the default list and gpu-models?region= agree
    assert by_name(server.request("GET", "/v1/gpu-models", token=t).json["items"])[name][
        "price_per_hour_micros"] == 4_000_000
    assert by_name(server.request("GET", f"/v1/gpu-models?region={ra}", token=t).json["items"])[
        name]["price_per_hour_micros"] == 3_300_000
    # the whole market lists both regions with their own prices
    full = {x["region"]: x for x in server.request("GET", "/v1/market", token=t).json["items"]}
    assert by_name(full[ra]["gpu_models"])[name]["price_per_hour_micros"] == 3_300_000
    assert by_name(full[rb]["gpu_models"])[name]["price_per_hour_micros"] == 4_000_000
    # unknown region in the query
    assert_error(server.request("GET", "/v1/market?region=nowhere", token=t), 404,
                 "no_such_region")
    assert_error(server.request("GET", "/v1/gpu-models?region=nowhere", token=t), 404,
                 "no_such_region")


def test_storage_and_nogpu_prices(server, renter):
    admin = server.admin_token
    rid = "st-" + uuid.uuid4().hex[:6]
    assert server.request("POST", "/v1/admin/regions", {"id": rid, "name": rid},
                          token=admin).status == 201
    t = renter["token"]
    base = market_region(server, t, rid)

    r = server.request("POST", "/v1/admin/prices",
                       {"item": "nogpu", "region": rid, "amount_micros": 150_000}, token=admin)
    assert r.status == 201, r
    r = server.request("POST", "/v1/admin/prices",
                       {"item": "data_disk", "region": rid, "amount_micros": 9_000,
                        "free_gib": 80}, token=admin)
    assert r.status == 201, r
    r = server.request("POST", "/v1/admin/prices",
                       {"item": "file_storage", "region": rid, "amount_micros": 6_000,
                        "free_gib": 30}, token=admin)
    assert r.status == 201, r
    mk = market_region(server, t, rid)
    assert mk["nogpu_price_per_hour_micros"] == 150_000
    assert mk["data_disk"] == {"price_per_gib_day_micros": 9_000, "free_gib": 80}
    assert mk["file_storage"] == {"price_per_gib_day_micros": 6_000, "free_gib": 30}
    # other regions keep the default
    sample = market_region(server, t, "sample-1")
    assert sample["nogpu_price_per_hour_micros"] == base["nogpu_price_per_hour_micros"]
    assert sample["data_disk"] == base["data_disk"]

    # refusals
    for body, status in (({"item": "gpu", "amount_micros": 1}, 400),
                         ({"item": "nogpu", "amount_micros": 1, "free_gib": 5}, 400),
                         ({"item": "nogpu", "amount_micros": -1}, 400),
                         ({"item": "data_disk", "amount_micros": 1, "free_gib": -1}, 400),
                         ({"item": "data_disk", "amount_micros": "1"}, 400),
                         ({"item": "data_disk"}, 400),
                         ({"item": "data_disk", "amount_micros": 1, "region": "nowhere"}, 404)):
        assert_error(server.request("POST", "/v1/admin/prices", body, token=admin), status)
    assert server.request("POST", "/v1/admin/prices", {"item": "nogpu", "amount_micros": 1},
                          token=t).status == 404
    mk2 = market_region(server, t, rid)
    assert mk2 == mk
    # the new rows are in the history
    hist = server.request("GET", "/v1/admin/prices?limit=500", token=admin).json["items"]
    mine = [(h["item"], h["amount_micros"], h["free_gib"]) for h in hist if h["region"] == rid]
    assert mine == [("nogpu", 150_000, 0), ("data_disk", 9_000, 80), ("file_storage", 6_000, 30)]
