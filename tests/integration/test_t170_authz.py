"""T170: authorisation over every route of `suanlid --print-routes`:
anonymous callers get 401 on every non-public route; a renter sees none of
the admin routes (404, no effect) and nothing of another renter."""
import base64
import io
import json
import os
import re
import struct
import subprocess
import tarfile

import pytest

from conftest import SUANLID, ApiHost

# routes anyone may call without logging in, and what they answer a caller
# with no credentials (or bad ones, which they ignore) and a body of {}: the
# three POSTs lack their required fields; the webhook is off on a server
# without payments.webhook_secret
PUBLIC = {
    ("GET", "/healthz"): (200, None),
    ("GET", "/metrics"): (200, None),
    ("POST", "/v1/users"): (400, "missing_field"),
    ("POST", "/v1/sessions"): (400, "missing_field"),
    ("POST", "/v1/payments/webhook"): (404, "payments_disabled"),
    ("POST", "/v1/nodes/enroll"): (400, "missing_field"),
}


def b_expects(method, pattern):
    """(status, code) renter B gets on a route, its ids filled with A's
    things and a body of {} (docs/api/openapi.yaml)."""
    if pattern.startswith("/v1/admin/"):
        return 404, "not_found"  # as for a route that does not exist
    if pattern.startswith("/v1/nodes/{id}"):
        return 401, "unauthenticated"  # a renter's token is no node's
    if pattern.startswith("/v1/front/"):
        return 401, "unauthenticated"  # nor the front door's
    if pattern.startswith("/v1/tokens/{id}"):
        return 404, "no_such_token"
    if pattern.startswith("/v1/ssh-keys/{id}"):
        return 404, "no_such_ssh_key"
    if pattern.startswith("/v1/notify/channels/{id}"):
        return 404, "no_such_channel"  # t710 tries B on A's real channels
    if pattern.startswith("/v1/instances/{id}"):
        return 404, "no_such_instance"
    if pattern == "/v1/images/{id}":
        return 404, "no_such_image"  # A's saved images are A's (t640)
    if (method, pattern) in PUBLIC:
        return PUBLIC[(method, pattern)]
    if pattern == "/v1/sessions/current":
        return 204, None
    if (method, pattern) == ("GET", "/v1/me/verification"):
        return 404, "no_verification"  # B never asked
    if method == "POST":
        return 400, "missing_field"  # B's own route, but {} is not a request
    return 200, None


def print_routes():
    out = subprocess.run([SUANLID, "--print-routes"], check=True, capture_output=True,
                         text=True).stdout
    return [tuple(line.split(None, 1)) for line in out.splitlines() if line.strip()]


ROUTES = print_routes()


def ed25519_line(comment):
    blob = (struct.pack(">I", 11) + b"ssh-ed25519" + struct.pack(">I", 32) + os.urandom(32))
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} {comment}"


def id_number():
    w = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2]
    first = "11010519900101" + f"{int.from_bytes(os.urandom(2), 'big') % 900 + 100}"
    return first + "10X98765432"[sum(int(c) * x for c, x in zip(first, w)) % 11]


@pytest.fixture(scope="module")
def world(server):
    admin = server.admin_token
    a = server.register(name="Alice Secret")
    b = server.register(name="Bob")
    tok = server.request("POST", "/v1/tokens", {"name": "alice-ci"}, token=a["token"]).json
    key = server.request("POST", "/v1/ssh-keys", {"public_key": ed25519_line("alice@laptop")},
                         token=a["token"]).json
    credit = server.credit(a["id"], 4_200_000, memo="alice money")
    ver = server.request("POST", "/v1/me/verification",
                         {"real_name": "爱丽丝", "id_number": id_number()}, token=a["token"])
    assert ver.status == 201, ver
    gpu = server.request("GET", "/v1/gpu-models", token=admin).json["items"][0]
    a.update(token_id=tok["id"], token_secret=tok["token"], key_id=key["id"],
             fingerprint=key["fingerprint"], txn_id=credit["txn_id"],
             verification_id=ver.json["id"], masked=ver.json["id_number_masked"])
    # what B must never be shown
    secrets = {a["id"], a["email"], tok["id"], tok["token"], tok["hint"], key["id"],
               key["fingerprint"], key["public_key"].split()[1], credit["txn_id"],
               ver.json["id"], ver.json["id_number_masked"], "Alice Secret", "爱丽丝",
               "alice money", "alice@laptop", a["token"]}
    return {"a": a, "b": b, "gpu": gpu, "secrets": secrets}


def fill(pattern, world):
    a = world["a"]
    if pattern.startswith("/v1/tokens/"):
        v = a["token_id"]
    elif pattern.startswith("/v1/ssh-keys/"):
        v = a["key_id"]
    elif pattern.startswith("/v1/admin/gpu-models/"):
        v = world["gpu"]["id"]
    else:
        v = a["id"]
    return pattern.replace("{id}", v).replace("{image}", "authz-image")


def body_for(method):
    return {} if method in ("POST", "PATCH", "PUT") else None


@pytest.mark.parametrize("method,pattern", ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
def test_anonymous(server, world, method, pattern):
    path = fill(pattern, world)
    for headers in ({}, {"Authorization": "Bearer sl_not_a_real_token"},
                    {"Cookie": "suanli_session=sl_forged"}):
        r = server.request(method, path, body_for(method), headers=headers)
        if (method, pattern) in PUBLIC:
            assert (r.status, r.code) == PUBLIC[(method, pattern)], (method, path, headers, r)
            continue
        assert r.status == 401, (method, path, headers, r)
        assert r.json["error"]["code"] and r.json["error"]["message"], r
        for s in world["secrets"]:
            if s not in path:
                assert s not in r.body, (s, r)


def test_every_non_public_route_needs_login(world):
    # guard against a PUBLIC table that is out of date
    for m, p in PUBLIC:
        assert (m, p) in ROUTES, f"{m} {p} is no longer a route"


def read_stream(server, token, seconds=2):
    """GET /v1/events/stream replayed from the beginning (Last-Event-ID
    0.0.0) and read for a while: it never ends by itself."""
    import http.client
    import time
    from conftest import Response
    c = http.client.HTTPConnection(server.host, server.port, timeout=seconds)
    c.request("GET", "/v1/events/stream",
              headers={"Authorization": f"Bearer {token}", "Last-Event-ID": "0.0.0"})
    resp, body = c.getresponse(), b""
    deadline = time.time() + seconds
    try:
        while time.time() < deadline:
            chunk = resp.read1(65536)
            if not chunk:
                break
            body += chunk
    except TimeoutError:
        pass
    c.close()
    return Response(resp.status, body.decode("utf-8", "replace"), dict(resp.getheaders()))


def leaks(world, r, sent):
    return [s for s in world["secrets"] if s not in sent and s in r.body]


@pytest.mark.parametrize("method,pattern", ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
def test_renter_b_sees_nothing_of_a(server, world, method, pattern):
    b = world["b"]
    path = fill(pattern, world)
    token = b["token"]
    if pattern == "/v1/sessions/current":
        token = server.login(b["email"])  # do not log B's main session out
    if (method, pattern) == ("GET", "/v1/events/stream"):
        r = read_stream(server, token)  # all B may replay: none of it A's
    else:
        r = server.request(method, path, body_for(method), token=token)
    assert (r.status, r.code) == b_expects(method, pattern), (method, path, r)
    if pattern.startswith("/v1/admin/"):
        # indistinguishable from a route that does not exist
        ghost = server.request(method, "/v1/admin/no-such-thing", body_for(method), token=token)
        assert r.code == ghost.code, (r, ghost)
    sent = path + json.dumps(body_for(method))
    assert not leaks(world, r, sent), (method, path, leaks(world, r, sent), r)


def test_b_lists_only_its_own(server, world):
    b = world["b"]
    for path in ("/v1/me", "/v1/tokens", "/v1/ssh-keys", "/v1/balance", "/v1/ledger",
                 "/v1/me/verification", "/v1/regions", "/v1/gpu-models", "/v1/market",
                 "/v1/tokens?limit=500", "/v1/ledger?limit=500", "/v1/ssh-keys?cursor=0"):
        r = server.request("GET", path, token=b["token"])
        # B never asked to be verified: that one alone is a 404 (no_verification)
        if path == "/v1/me/verification":
            assert (r.status, r.code) == (404, "no_verification"), (path, r)
        else:
            assert r.status == 200, (path, r)
        assert not leaks(world, r, path), (path, leaks(world, r, path))
    assert server.request("GET", "/v1/balance", token=b["token"]).json["balance_micros"] == 0


def test_b_cannot_delete_a_token_or_key(server, world):
    a, b = world["a"], world["b"]
    r = server.request("DELETE", f"/v1/tokens/{a['token_id']}", token=b["token"])
    assert r.status == 404 and r.code == "no_such_token", r
    r = server.request("DELETE", f"/v1/ssh-keys/{a['key_id']}", token=b["token"])
    assert r.status == 404 and r.code == "no_such_ssh_key", r
    # the same answer as for ids that do not exist at all
    assert server.request("DELETE", "/v1/tokens/tok-doesnotexist", token=b["token"]).status == 404
    # both still exist and work
    assert server.request("GET", "/v1/me", token=a["token_secret"]).json["id"] == a["id"]
    keys = server.request("GET", "/v1/ssh-keys", token=a["token"]).json["items"]
    assert a["key_id"] in [k["id"] for k in keys]
    toks = server.request("GET", "/v1/tokens", token=a["token"]).json["items"]
    assert a["token_id"] in [t["id"] for t in toks]
    # A's login session cannot be deleted through the tokens route by B either
    sess = [t for t in toks if t["current"]][0]
    r = server.request("DELETE", f"/v1/tokens/{sess['id']}", token=b["token"])
    assert r.status == 404
    assert server.request("GET", "/v1/me", token=a["token"]).status == 200


def tiny_tar():
    """A tar of one file, as bytes."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as t:
        info = tarfile.TarInfo("etc/hostname")
        info.size = 4
        t.addfile(info, io.BytesIO(b"box\n"))
    return out.getvalue()


def send(server, method, path, body, **kw):
    """A request whose body is JSON, or bytes sent as they are."""
    if isinstance(body, bytes):
        return server.request(method, path, raw=body, **kw)
    return server.request(method, path, body, **kw)


def admin_writes(server, world):
    """(method, path, body, check) for each admin write: check(server) is true
    while the write has not happened."""
    a, b = world["a"], world["b"]
    admin = server.admin_token
    gpu = world["gpu"]

    def bal(u):
        return server.request("GET", "/v1/balance", token=u["token"]).json["balance_micros"]

    a_bal, b_bal = bal(a), bal(b)
    regions = lambda: [r["id"] for r in server.request("GET", "/v1/regions", token=admin).json["items"]]
    models = lambda: {m["name"]: m for m in server.request("GET", "/v1/gpu-models", token=admin).json["items"]}
    market = lambda: server.request("GET", "/v1/market?region=sample-1", token=admin).json["items"][0]
    nogpu = market()["nogpu_price_per_hour_micros"]
    join_tokens = lambda: [t["id"] for t in server.request("GET", "/v1/admin/join-tokens",
                                                           token=admin).json["items"]]
    images = lambda: [i["name"] for i in server.request("GET", "/v1/images",
                                                        token=admin).json["items"]]
    kept = server.request("POST", "/v1/admin/join-tokens", {"region": "sample-1"},
                          token=admin).json["id"]

    def billing_passes():
        """Billing passes run through the API: a pass over no instances
        changes nothing else that can be seen."""
        m = re.search(r'suanli_http_requests_total\{method="POST",'
                      r'route="/v1/admin/billing/run",code="2xx"\} (\d+)',
                      server.request("GET", "/metrics").body)
        return int(m.group(1)) if m else 0

    passes = billing_passes()
    # a host to cordon and drain, and one the admin cordoned to uncordon and remove
    host, held = ApiHost(server, image="authz-image"), ApiHost(server, image="authz-image")
    r = server.request("POST", f"/v1/admin/nodes/{held.node_id}/cordon", {}, token=admin)
    assert r.status == 200, r
    # an image for the admin to delete
    r = server.request("POST", "/v1/admin/images", {"name": "authz-doomed"}, token=admin)
    assert r.status == 201, r
    # a public dataset for the admin to delete (no host holds it: pending)
    r = server.request("POST", "/v1/admin/datasets",
                       {"name": "authz-doomed-data", "path": "/srv/authz"}, token=admin)
    assert r.status == 201, r

    def datasets():
        return [d["name"] for d in server.request("GET", "/v1/admin/datasets",
                                                  token=admin).json["items"]]

    def node(h):
        return server.request("GET", f"/v1/admin/nodes/{h.node_id}", token=admin)

    def storage():
        return server.request("GET", "/v1/admin/storage", token=admin).json
    storage_before = storage()
    n_join = len(join_tokens())
    return [
        ("POST", "/v1/admin/join-tokens", {"region": "sample-1"},
         lambda: len(join_tokens()) == n_join),
        ("DELETE", f"/v1/admin/join-tokens/{kept}", None, lambda: kept in join_tokens()),
        ("POST", "/v1/admin/images", {"name": "evil-image"}, lambda: "evil-image" not in images()),
        # a small rootfs tarball: suanlid refuses what is not a tar (t620)
        ("PUT", "/v1/admin/images/evil-upload/archive", tiny_tar(),
         lambda: "evil-upload" not in images()),
        ("DELETE", "/v1/admin/images/authz-doomed", None, lambda: "authz-doomed" in images()),
        ("POST", "/v1/admin/datasets", {"name": "evil-data", "path": "/srv/evil"},
         lambda: "evil-data" not in datasets()),
        ("PUT", "/v1/admin/datasets/evil-upload-data/archive", tiny_tar(),
         lambda: "evil-upload-data" not in datasets()),
        ("DELETE", "/v1/admin/datasets/authz-doomed-data", None,
         lambda: "authz-doomed-data" in datasets()),
        ("POST", f"/v1/admin/users/{a['id']}/credit", {"amount_micros": 1_000_000, "memo": "x"},
         lambda: bal(a) == a_bal),
        ("POST", f"/v1/admin/users/{b['id']}/credit", {"amount_micros": 1_000_000, "memo": "x"},
         lambda: bal(b) == b_bal),
        ("POST", f"/v1/admin/users/{a['id']}/verification", {"approve": True},
         lambda: server.request("GET", "/v1/me", token=a["token"]).json["verification"] == "pending"),
        ("POST", "/v1/admin/regions", {"id": "evil-1", "name": "evil"},
         lambda: "evil-1" not in regions()),
        ("POST", "/v1/admin/gpu-models", {"name": "Evil GPU", "vram_mib": 1, "cpu_cores_per_gpu": 1,
                                          "memory_mib_per_gpu": 1, "price_per_hour_micros": 1},
         lambda: "Evil GPU" not in models()),
        ("PATCH", f"/v1/admin/gpu-models/{gpu['id']}", {"price_per_hour_micros": 1},
         lambda: models()[gpu["name"]]["price_per_hour_micros"] == gpu["price_per_hour_micros"]),
        ("POST", "/v1/admin/prices", {"item": "nogpu", "amount_micros": 1},
         lambda: market()["nogpu_price_per_hour_micros"] == nogpu),
        ("POST", "/v1/admin/billing/run", {}, lambda: billing_passes() == passes),
        ("POST", f"/v1/admin/nodes/{host.node_id}/cordon", {},
         lambda: not node(host).json["cordoned"]),
        ("POST", f"/v1/admin/nodes/{host.node_id}/drain", {},
         lambda: not node(host).json["draining"]),
        ("POST", f"/v1/admin/nodes/{held.node_id}/uncordon", {},
         lambda: node(held).json["cordoned"]),
        ("DELETE", f"/v1/admin/nodes/{held.node_id}", None, lambda: node(held).status == 200),
        ("POST", "/v1/admin/storage", {"region": "sample-1", "kind": "local", "quota_gib": 1},
         lambda: storage() == storage_before),
    ]


def test_renter_admin_writes_have_no_effect(server, world):
    b = world["b"]
    writes = admin_writes(server, world)
    admin_routes = {(m, p) for m, p in ROUTES if p.startswith("/v1/admin/") and m != "GET"}
    covered = set()
    for method, path, body, unchanged in writes:
        for m, p in admin_routes:
            if m == method and len(p.split("/")) == len(path.split("/")) and all(
                    x == y or x == "{id}" for x, y in zip(p.split("/"), path.split("/"))):
                covered.add((m, p))
        for token in (b["token"],
                      server.request("POST", "/v1/tokens", {"name": "b-api"},
                                     token=b["token"]).json["token"]):
            r = send(server, method, path, body, token=token)
            assert r.status == 404, (method, path, r)
            r = send(server, method, path, body, token=token,
                     headers={"Idempotency-Key": "evil-" + path})
            assert r.status == 404, (method, path, r)
        assert unchanged(), (method, path, "changed by a renter")
    assert covered == admin_routes, f"admin writes not tried: {admin_routes - covered}"
    # the same requests as the admin do take effect: the checks above are real
    for method, path, body, unchanged in writes:
        r = send(server, method, path, body, token=server.admin_token)
        assert 200 <= r.status < 300, (method, path, r)
        assert not unchanged(), (method, path, "admin write had no visible effect")


def test_instance_metadata_routes_are_the_nodes_own(server, world):
    """GET/POST /v1/nodes/{id}/instances/{instance}/...: only a node agent,
    only about itself, only about an instance it holds (t340 has the
    instance side: 169.254.169.254 answers each instance about itself)."""
    admin = server.admin_token
    r = server.request("POST", "/v1/admin/join-tokens", {"region": "sample-1"}, token=admin)
    inv = {"cpu_cores": 2, "memory_mib": 1024,
           "gpus": [{"index": 0, "uuid": "GPU-t170", "name": "NVIDIA GeForce RTX 4090",
                     "vram_mib": 24564}]}
    n = server.request("POST", "/v1/nodes/enroll", {"join_token": r.json["token"],
                                                   "hostname": "t170", "address": "127.0.0.1",
                                                   "inventory": inv}).json
    me, tok = n["node_id"], n["node_token"]
    for method, verb in (("GET", "metadata"), ("POST", "stop")):
        body = {} if method == "POST" else None
        path = f"/v1/nodes/{me}/instances/i-notonthisnode/{verb}"
        assert server.request(method, path, body, token=tok).status == 404
        assert server.request(method, path, body, token=world["b"]["token"]).status == 401
        assert server.request(method, path, body, token=admin).status == 401
        other = f"/v1/nodes/n-someoneelse/instances/i-notonthisnode/{verb}"
        assert server.request(method, other, body, token=tok).status == 404
