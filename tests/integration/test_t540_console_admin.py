"""t540: the operator's pages of the web console (issue 13, item 4) in real
chromium against the real suanlid and a real agent with simulated GPUs.

The admin logs in through the console's login form, sees the host with its
GPUs and simulated flag, approves a renter's verification (the renter made
through the API), credits the renter, creates and revokes a join token,
cordons, drains (with migrate) and uncordons the host (the last with the
keyboard only, at phone width); each change is checked through the API after
the browser made it. axe-core runs on every admin page and dialog; any
console error or request leaving the origin fails. A renter opening
/admin/hosts sees no fleet data. On the shared cluster, a renter's instance
runs and is charged, and the usage page shows today's revenue as GET
/v1/admin/bills has it. Screenshots land in
$SUANLI_BUILD/artifacts/t540-admin-*/."""
import glob
import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import (BUILD, PASSWORD, ROOT, TEST_PORTS, undocumented_calls, Node, Server, cleanup_host, free_port,
                      random_id_number, side_network, wait_for)

SCRIPT = os.path.join(ROOT, "tests", "browser", "admin.mjs")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# the host's own bridge and /24, beside the shared cluster's (whose node
# test_usage_shows_todays_revenue uses): neither touches the other's
NET = side_network(10, "ca")
INJECTED = '<img src="/x-injected" onerror="document.title=1">'  # a renter's name

pytestmark = [
    pytest.mark.skipif(not shutil.which("node") or not os.path.exists(CHROMIUM),
                       reason="node and chromium are needed (scripts/deps.sh installs them)"),
    pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, "console", "node_modules",
                                                       "puppeteer-core")),
                       reason="console/node_modules is missing: make console runs npm ci"),
]


@pytest.fixture(scope="module")
def site():
    """suanlid serving the console of SUANLI_BUILD, and one enrolled host
    with two simulated RTX 4090s."""
    if not os.path.exists(os.path.join(BUILD, "console", "index.html")):
        pytest.fail(f"{BUILD}/console is not built: run make BUILD={BUILD} console")
    # this run's screenshots only
    arts = os.environ.get("SUANLI_ARTIFACTS") or os.path.join(BUILD, "artifacts")
    for name in glob.glob(os.path.join(arts, "t540-admin-*")):
        shutil.rmtree(name, ignore_errors=True)
    d = tempfile.mkdtemp(prefix="suanli-t540-", dir="/var/tmp")
    proxy_port = free_port()
    server = Server(os.path.join(d, "suanlid"), {"nodes.ssh_port_min": TEST_PORTS[0],
                                                 "nodes.ssh_port_max": TEST_PORTS[1],
                                                 "services.proxy_port": proxy_port})
    os.makedirs(server.data_dir)
    server.start()
    node = None
    try:
        r = server.request("POST", "/v1/admin/join-tokens", {"region": "sample-1"},
                           token=server.admin_token)
        assert r.status == 201, r
        node = Node(server, os.path.join(d, "node"), r.json["token"], gpus="2:RTX 4090",
                    proxy_port=proxy_port, network=NET, extra=["--set", "hostname=t540-host"])
        node.start()
        wait_for(lambda: server.request("GET", f"/v1/admin/nodes/{node.node_id}",
                                        token=server.admin_token).json["state"] == "online",
                 what="the host online")
        yield server, node
    finally:
        if node:
            node.stop()
        server.stop()
        if node:
            cleanup_host(node.data_dir, bridge=NET[0], prefix=NET[2])
        shutil.rmtree(d, ignore_errors=True)


def browse(server, phase, email, password, **env):
    e = dict(os.environ)
    e.update({"SUANLI_URL": server.url, "SUANLI_EMAIL": email, "SUANLI_PASSWORD": password,
              "SUANLI_BUILD": BUILD, "ADMIN_PHASE": phase, "CHROMIUM": CHROMIUM})
    e.update({k: str(v) for k, v in env.items()})
    p = subprocess.run(["node", SCRIPT], capture_output=True, text=True, env=e, timeout=300)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"admin.mjs {phase} printed no result ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    out = json.loads(lines[-1])
    assert out["ok"], f"admin.mjs {phase}:\n" + "\n".join(out["failures"]) + "\n" + p.stderr[-3000:]
    assert p.returncode == 0, p.stderr
    # the pages call documented routes only
    calls = out["results"].get("api_calls", [])
    assert calls and not undocumented_calls(calls), undocumented_calls(calls)
    return out["results"]


def admin_get(server, path):
    r = server.request("GET", path, token=server.admin_token)
    assert r.status == 200, r
    return r.json


def test_operator_day_in_the_browser(site):
    server, node = site
    admin = ("admin@localhost", server.admin_password)
    # a renter, made through the API, waiting for verification
    # a renter's own words are shown as text, never as markup
    renter = server.register(name=INJECTED)
    r = server.request("POST", "/v1/me/verification",
                       {"real_name": INJECTED, "id_number": random_id_number()},
                       token=renter["token"])
    assert r.status == 201, r
    other = server.register()
    r = server.request("POST", "/v1/me/verification",
                       {"real_name": "Li Si", "id_number": random_id_number()},
                       token=other["token"])
    assert r.status == 201, r
    ids = {"NODE_ID": node.node_id, "RENTER_ID": renter["id"], "RENTER_EMAIL": renter["email"],
           "RENTER2_ID": other["id"]}

    res = browse(server, "fleet", *admin, **ids)
    # the host as the page showed it
    assert res["host"]["state"] == "online"
    assert res["host"]["gpus"] == "0 / 2"
    assert res["host"]["simulated"] is True
    assert "t540-host" in res["host"]["text"] and "RTX 4090" in res["host"]["text"]
    assert res["injected"]["requests"] == [] and res["injected"]["shown"] == 2, res["injected"]
    assert res["injected"]["images"] == 0, res["injected"]
    assert "RTX 4090" in res["details"]
    # the approval, through the API
    users = admin_get(server, "/v1/admin/users?email=" + renter["email"])["items"]
    assert users[0]["verification"] == "approved"
    r = server.request("GET", "/v1/me", token=renter["token"])
    assert r.json["can_start_instances"] is True
    r = server.request("GET", "/v1/me/verification", token=other["token"])
    assert r.json["state"] == "rejected", r
    assert r.json["reason"] == "the name does not match the ID number", r
    # the credit, with its memo in the renter's ledger
    assert users[0]["balance_micros"] == 123_450_000
    ledger = server.request("GET", "/v1/ledger", token=renter["token"]).json["items"]
    assert any(e["amount_micros"] == 123_450_000 and e["memo"] == "console test credit"
               for e in ledger), ledger
    assert "123.45" in res["balanceShown"]
    # the retry after a lost answer credited nothing more
    keys = res["creditKeys"]
    assert len(keys) == 2 and keys[0] and keys[0] == keys[1], keys
    assert len([e for e in ledger if e["memo"] == "console test credit"]) == 1, ledger
    # the prices: RTX 4090's default, no-GPU mode in sample-1, in the history
    models = {m["name"]: m for m in admin_get(server, "/v1/admin/gpu-models")["items"]}
    assert models["RTX 4090"]["price_per_hour_micros"] == 2_500_000
    market = admin_get(server, "/v1/market?region=sample-1")["items"][0]
    assert market["nogpu_price_per_hour_micros"] == 200_000
    history = admin_get(server, "/v1/admin/prices?limit=500")["items"]
    admin_id = admin_get(server, "/v1/admin/users?email=admin@localhost")["items"][0]["id"]
    assert any(p["item"] == "gpu:" + models["RTX 4090"]["id"] and p["amount_micros"] == 2_500_000
               and p["region"] == "" and p["created_by"] == admin_id for p in history), history
    assert any(p["item"] == "nogpu" and p["amount_micros"] == 200_000 and p["region"] == "sample-1"
               for p in history), history
    assert "RTX 4090 / GPU-hour" in res["prices"] and "in effect" in res["prices"]
    # an API error is shown as the server's message
    assert "gpu_model_exists" in res["apiError"], res["apiError"]
    # the join token, shown once, listed with its two uses
    tok = res["joinToken"]
    assert tok["token"].startswith("sl_")
    listed = {j["id"]: j for j in admin_get(server, "/v1/admin/join-tokens?limit=500")["items"]}
    assert tok["id"] in listed and listed[tok["id"]]["max_uses"] == 2
    assert "2" in res["usage"]

    browse(server, "revoke-cordon", *admin, JOIN_ID=tok["id"], **ids)
    listed = {j["id"] for j in admin_get(server, "/v1/admin/join-tokens?limit=500")["items"]}
    assert tok["id"] not in listed
    # the revoked secret enrolls nothing
    r = server.request("POST", "/v1/nodes/enroll",
                       {"join_token": tok["token"], "hostname": "x", "address": "127.0.0.1",
                        "inventory": {"cpu_cores": 1, "memory_mib": 1024}})
    assert r.status == 401, r
    n = admin_get(server, f"/v1/admin/nodes/{node.node_id}")
    assert n["cordoned"] is True and n["draining"] is False
    assert n["cordon_reason"] == "maintenance from the console"

    res = browse(server, "drain", *admin, **ids)
    n = admin_get(server, f"/v1/admin/nodes/{node.node_id}")
    assert n["draining"] is True
    assert "Drain of t540-host" in res["drainResult"]

    res = browse(server, "uncordon", *admin, **ids)
    n = admin_get(server, f"/v1/admin/nodes/{node.node_id}")
    assert n["cordoned"] is False and n["draining"] is False
    assert res["overflow"] <= 1, "the hosts page scrolls sideways at phone width"
    assert all(v <= 1 for v in res["overflows"].values()), res["overflows"]


def test_image_import_from_the_browser(site, tmp_path):
    server, node = site
    # a rootfs tarball, as an operator might import one
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "os-release").write_text('PRETTY_NAME="t540 test rootfs"\nID=debian\n')
    archive = str(tmp_path / "rootfs.tar.gz")
    subprocess.run(["tar", "-C", str(root), "-czf", archive, "."], check=True)
    res = browse(server, "images", "admin@localhost", server.admin_password,
                 ARCHIVE=archive, IMAGE_NAME="t540-img", NODE_ID=node.node_id)
    assert "t540-img uploaded" in res["notice"]
    # the per-host dialog shows what the host reported (GET .../hosts)
    assert res["perHost"] == "ready", res
    images = {i["name"]: i for i in admin_get(server, "/v1/images?limit=500")["items"]}
    assert images["t540-img"]["description"] == "uploaded by t540"
    # the token the page made for the upload is gone
    tokens = admin_get(server, "/v1/tokens?limit=500")["items"]
    assert not [t for t in tokens if t["name"] == "console image upload"], tokens


def test_pages_in_chinese(site):
    server, node = site
    # the page shows the host's state as the API has it: online first (a
    # loaded machine has delayed a heartbeat past nodes.offline_after here)
    wait_for(lambda: admin_get(server, f"/v1/admin/nodes/{node.node_id}")["state"] == "online",
             what="the host online")
    res = browse(server, "zh", "admin@localhost", server.admin_password, NODE_ID=node.node_id)
    assert res["title"] == "主机" and res["state"] == "在线" and res["usageTitle"] == "用量与收入", res
    assert res["lang"] == "zh-CN"


def test_page_logic():
    """Money typed by an operator, usage and run rate, revenue per day, the
    price in effect (node --test, no browser)."""
    p = subprocess.run(["node", "--test", os.path.join(ROOT, "tests", "browser",
                                                       "admin-logic.test.mjs")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]


def test_usage_shows_todays_revenue(cluster):
    """The usage page's revenue per day comes from GET /v1/admin/bills: after
    a renter's instance ran and a billing pass charged it, today's row, bar
    and month total are the API's figures (on the shared cluster, which has
    an image to run)."""
    s = cluster.server
    user = cluster.renter()
    iid = cluster.create(user)["id"]

    def charged():
        r = s.request("POST", "/v1/admin/billing/run", {}, token=s.admin_token)
        assert r.status == 200, r
        return cluster.get(user, iid)["charged_micros"] > 0
    wait_for(charged, timeout=30, interval=0.5, what="a first charge")
    assert cluster.verb(user, iid, "release").status == 200

    def settled():  # its charges change no more
        s.request("POST", "/v1/admin/billing/run", {}, token=s.admin_token)
        ms = s.request("GET", f"/v1/instances/{iid}/meters", token=user["token"]).json["items"]
        return all(m["ended_at"] and m["settled_until"] == m["ended_at"] for m in ms)
    wait_for(settled, timeout=60, interval=0.5, what="the meters settled")

    def today():
        bill = admin_get(s, "/v1/admin/bills?by=day")
        return bill, {r["day"]: r["amount_micros"] for r in bill["rows"]}
    day = time.strftime("%Y-%m-%d", time.gmtime())
    before, days = today()
    assert days.get(day, 0) > 0, before
    res = browse(s, "revenue", "admin@localhost", s.admin_password, DAY=day)
    after, days_after = today()
    # the figure the page showed is the API's (another module's instance
    # of this session may have been charged meanwhile: either reading)
    assert res["today"]["amount"] in (days[day], days_after[day]), (res, before, after)
    assert res["bar"] == res["today"]["amount"]
    assert res["month"]["month"] == before["month"]
    assert res["month"]["total"] in (before["total_micros"], after["total_micros"]), res
    assert res["readings"] == [], "no revenue is kept in the browser any more"
    assert res["other"] == {"total": 0, "rows": 0}, res


def test_renter_sees_no_fleet(site):
    server, node = site
    renter = server.register()
    # the API hides the admin routes from a renter
    r = server.request("GET", "/v1/admin/nodes", token=renter["token"])
    assert r.status == 404 and r.code == "not_found", r
    res = browse(server, "renter", renter["email"], PASSWORD, NODE_ID=node.node_id)
    assert node.node_id not in res["text"] and "t540-host" not in res["text"], res["text"]
    assert res["rows"] == 0
    # and the console answered with a page, not a blank or a crash
    assert res["text"].strip(), res


def test_remove_host(site):
    """Last: the host leaves the fleet (its agent is refused from then on)."""
    server, node = site
    res = browse(server, "remove", "admin@localhost", server.admin_password, NODE_ID=node.node_id)
    assert "t540-host was removed" in res["text"]
    listed = [n["id"] for n in admin_get(server, "/v1/admin/nodes?limit=500")["items"]]
    assert node.node_id not in listed
