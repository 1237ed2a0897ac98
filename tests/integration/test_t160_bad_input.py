"""T160: hostile request bodies on every POST/PATCH route of
`suanlid --print-routes`: each gets a 4xx with {"error":{"code","message"}},
never a 5xx, and the server keeps answering."""
import copy
import hashlib
import hmac
import json
import re
import socket
import subprocess
import threading
import time

import pytest

from conftest import SUANLID, ApiHost, Cluster, Server

SECRET = "t160-webhook-secret"

# a body that would be accepted (or nearly) on each known route; the tests
# break one thing at a time. Routes added later get the generic template.
TEMPLATES = {
    "POST /v1/users": {"email": "t160@example.com", "password": "long enough pw", "name": "x"},
    "POST /v1/sessions": {"email": "nobody-t160@example.com", "password": "long enough pw"},
    "POST /v1/me/verification": {"real_name": "张三", "id_number": "11010519491231002X"},
    "POST /v1/tokens": {"name": "t", "expires_in_days": 1},
    "POST /v1/ssh-keys": {"name": "k", "public_key": "ssh-ed25519 AAAA x"},
    "POST /v1/notify/channels": {"kind": "email", "target": "a@example.com"},
    "POST /v1/notify/kinds/{kind}": {"enabled": True},
    "POST /v1/payments/webhook": {"transaction_id": "gw-1", "user_id": "u-x",
                                  "amount_micros": 1, "currency": "CNY"},
    "POST /v1/admin/users/{id}/credit": {"amount_micros": 1, "memo": "m"},
    "POST /v1/admin/users/{id}/verification": {"approve": False, "reason": "r"},
    "POST /v1/admin/regions": {"id": "t160", "name": "n"},
    "POST /v1/admin/gpu-models": {"name": "T160", "vram_mib": 1, "cpu_cores_per_gpu": 1,
                                  "memory_mib_per_gpu": 1, "price_per_hour_micros": 1},
    "PATCH /v1/admin/gpu-models/{id}": {"price_per_hour_micros": 1, "region": "sample-1"},
    "POST /v1/admin/prices": {"item": "nogpu", "region": "sample-1", "amount_micros": 1,
                              "free_gib": 0},
    "POST /v1/instances": {"gpu_model": "RTX 4090", "gpus": 1, "image": "debian-12",
                           "data_disk_gib": 50, "name": "t160", "region": "sample-1",
                           "plan": "day", "auto_renew": True},
    "POST /v1/instances/{id}/plan": {"plan": "day", "auto_renew": False},
    "POST /v1/instances/{id}/ports": {"port": 6006, "public": True},
    "POST /v1/instances/{id}/stop": {"in_seconds": 3600},
    "POST /v1/instances/{id}/idle-stop": {"after_seconds": 1800},
    "POST /v1/me/idle-stop": {"after_seconds": 1800},
    # takes no body, or {} (the nodes' reason is optional: t430 tries it)
    "POST /v1/admin/billing/run": {},
    "POST /v1/admin/nodes/{id}/cordon": {},
    "POST /v1/admin/nodes/{id}/drain": {},
    "POST /v1/admin/nodes/{id}/uncordon": {},
}
GENERIC = {"name": "x", "amount_micros": 1, "enabled": True}
# fields a route accepts without: leaving them out is no error, so not tried
OPTIONAL = {
    "POST /v1/users": {"name"},
    "POST /v1/tokens": {"expires_in_days"},
    "POST /v1/ssh-keys": {"name"},
    "POST /v1/admin/users/{id}/credit": {"memo"},
    "POST /v1/admin/users/{id}/verification": {"reason"},
    "PATCH /v1/admin/gpu-models/{id}": {"region"},
    "POST /v1/admin/prices": {"region", "free_gib"},
    "POST /v1/instances": {"gpus", "data_disk_gib", "name", "region", "plan", "auto_renew"},
    "POST /v1/instances/{id}/plan": {"auto_renew"},
    "POST /v1/instances/{id}/ports": {"public"},
    "POST /v1/instances/{id}/stop": {"in_seconds"},
    "POST /v1/instances/{id}/idle-stop": {"after_seconds"},
}


def print_routes():
    out = subprocess.run([SUANLID, "--print-routes"], check=True, capture_output=True,
                         text=True).stdout
    routes = [tuple(line.split(None, 1)) for line in out.splitlines() if line.strip()]
    assert len(routes) > 10
    return routes


ROUTES = [r for r in print_routes() if r[0] in ("POST", "PATCH")]
ROUTE_IDS = [f"{m} {p}" for m, p in ROUTES]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp("t160")),
               {"payments.webhook_secret": SECRET,
                "auth.login_max_failures_per_ip": "100000"}).start()
    renter = s.register()
    gpu = s.request("GET", "/v1/gpu-models", token=s.admin_token).json["items"][0]["id"]
    ids = {"/v1/admin/gpu-models/{id}": gpu}
    # a host that reports through the API, for the node routes' bodies
    host = ApiHost(s)
    for verb in ("cordon", "drain", "uncordon"):
        ids[f"/v1/admin/nodes/{{id}}/{verb}"] = host.node_id
    yield {"server": s, "renter": renter, "ids": ids}
    s.stop()


def fill(env, pattern):
    uid = env["renter"]["id"]
    path = env["ids"].get(pattern)
    if path:
        return pattern.replace("{id}", path)
    return pattern.replace("{id}", uid)


def headers_for(pattern, body):
    if pattern == "/v1/payments/webhook":
        ts = str(int(time.time()))
        sig = hmac.new(SECRET.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
        return {"X-Suanli-Timestamp": ts, "X-Suanli-Signature": "v1=" + sig}
    return {}


# the codes of a body that cannot be used (docs/design/errors.md)
BODY_CODES = {"invalid_json", "missing_field", "unknown_field", "invalid_field"}


def body_refusal(pattern, what):
    """(status, codes) a broken body gets on a route, as the docs promise:
    400 with a body code; but a node route wants the node's token first (401)
    and an instance route a renter's instance first (404: the id the test
    fills in is a user's, never an instance)."""
    if pattern.startswith("/v1/nodes/{id}"):
        return 401, {"unauthenticated"}
    if pattern.startswith("/v1/instances/{id}"):
        return 404, {"no_such_instance"}
    if pattern.startswith("/v1/notify/channels/{id}"):
        # a body that is not JSON is refused before the channel is looked
        # for; the id filled in is a user's, never a channel (404)
        return None, BODY_CODES | {"no_such_channel"}
    if pattern == "/v1/instances" and what == "auto_renew='None'":
        # null is "not given" for an optional field: the body is fine, and
        # the image it names is not in this server's catalog
        return 404, {"no_such_image"}
    return 400, BODY_CODES


def assert_refused(r, what, status=None, codes=None):
    if status is None:
        assert 400 <= r.status < 500, (what, r)
    else:
        assert r.status == status, (what, r)
    assert isinstance(r.json, dict) and isinstance(r.json.get("error"), dict), (what, r)
    assert codes is None or r.json["error"].get("code") in codes, (what, r)
    err = r.json["error"]
    assert isinstance(err.get("code"), str) and err["code"], (what, r)
    assert isinstance(err.get("message"), str) and err["message"].strip(), (what, r)


def send(env, method, pattern, body):
    s = env["server"]
    path = fill(env, pattern)
    return s.request(method, path, raw=body, token=s.admin_token,
                     headers=headers_for(pattern, body))


def healthy(s):
    assert s.proc.poll() is None, "suanlid died"
    assert s.request("GET", "/healthz").status == 200


def raw_http(port, method, path, headers, body, chunked=False, timeout=30):
    """Sends a request while reading the answer (the server may answer 413
    before the body is all sent). Returns (status, headers, body)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    for k, v in headers.items():
        head += f"{k}: {v}\r\n"
    if chunked:
        head += "Transfer-Encoding: chunked\r\n"
    else:
        head += f"Content-Length: {len(body)}\r\n"
    head += "\r\n"

    def writer():
        try:
            sock.sendall(head.encode())
            if chunked:
                for i in range(0, len(body), 65536):
                    c = body[i:i + 65536]
                    sock.sendall(b"%x\r\n" % len(c) + c + b"\r\n")
                sock.sendall(b"0\r\n\r\n")
            else:
                sock.sendall(body)
        except OSError:
            pass  # the server answered and closed early: that is allowed

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
            if b"\r\n\r\n" in data:
                h, _, b = data.partition(b"\r\n\r\n")
                m = re.search(rb"\r\ncontent-length:\s*(\d+)", h, re.I)
                if m and len(b) >= int(m.group(1)):
                    break
    except ConnectionResetError:
        pass
    finally:
        t.join(timeout)
        sock.close()
    h, _, b = data.partition(b"\r\n\r\n")
    lines = h.decode("latin-1").split("\r\n")
    assert lines and lines[0].startswith("HTTP/1."), data[:200]
    status = int(lines[0].split()[1])
    hdrs = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return status, hdrs, b


def bad_bodies(template, optional=()):
    """(description, bytes) pairs, each a broken request body. An empty
    template is a route without fields: {} is right there."""
    out = [
        ("truncated", b'{"name": "x"'),
        ("lone brace", b"{"),
        ("single quotes", b"{'name': 'x'}"),
        ("trailing garbage", json.dumps(template).encode() + b" garbage"),
        ("two objects", json.dumps(template).encode() * 2),
        ("bare word", b"nul"),
        ("comment", b'{/* c */ "name": "x"}'),
        ("trailing comma", b'{"name": "x",}'),
        ("duplicate keys", b'{"name": "x", "name": "y"}'),
        ("NaN", b'{"amount_micros": NaN}'),
        ("deep nesting", b'{"a":' * 5000 + b"1" + b"}" * 5000),
        ("json array", json.dumps([template]).encode()),
        ("empty array", b"[]"),
        ("number", b"42"),
        ("string", b'"hello"'),
        ("null", b"null"),
        ("true", b"true"),
        *([] if not template else [("empty object", b"{}")]),
        ("unknown field", json.dumps({**template, "zz_unknown": 1}).encode()),
        ("unknown field only", b'{"zz_unknown": "x"}'),
        ("long unknown field", json.dumps({**template, "k" * 100000: 1}).encode()),
        ("invalid utf-8 key", b'{"\xff\xfe": 1}'),
        ("invalid utf-8 value", b'{"name": "\xc3\x28\xa0\xa1"}'),
        ("overlong utf-8", b'{"name": "\xc0\xaf"}'),
        ("utf-16 surrogate", b'{"name": "\xed\xa0\x80"}'),
        ("lone surrogate escape", b'{"name": "\\ud800"}'),
        ("raw NUL", b'{"name": "a\x00b"}'),
        ("NUL escape", b'{"name": "a\\u0000b"}'),
        ("utf-8 BOM", b"\xef\xbb\xbf" + json.dumps(template).encode()),
        ("huge int", b'{"amount_micros": 99999999999999999999999999999999}'),
    ]
    for k, v in template.items():
        def with_(val, k=k):
            d = copy.deepcopy(template)
            d[k] = val
            return d
        raw = lambda lit, k=k: (json.dumps({x: y for x, y in template.items() if x != k})[:-1]
                                + (", " if len(template) > 1 else "")
                                + f'"{k}": {lit}}}').encode()
        if isinstance(v, bool):
            wrong = ["true", 1, 0, None, [], {}]
        elif isinstance(v, int):
            wrong = [str(v), 1.5, float(v), True, [v], {"v": v}, "", -1, -(10**6)]
            out += [(f"{k}={lit}", raw(lit)) for lit in
                    ("9223372036854775808", "18446744073709551616", "-9223372036854775809",
                     "1e400", "-0.0", "1E3", "0x10", "01")]
            wrong += [2**63 - 1, -2**63]
        else:
            wrong = [123, 1.5, True, [v], {"v": v}, "x" * 100000, "a\u0000b", "\u0007bell",
                     "line\nbreak" if k != "public_key" else "\u0001", "\x7f"]
        for w in wrong:
            if w == "" and not isinstance(v, str):
                continue
            out.append((f"{k}={str(w)[:20]!r}", json.dumps(with_(w)).encode()))
        if k not in optional:
            out.append((f"{k} missing", json.dumps(
                {x: y for x, y in template.items() if x != k}).encode()))
            out.append((f"{k}=null", json.dumps(with_(None)).encode()))
    return out


@pytest.mark.parametrize("method,pattern", ROUTES, ids=ROUTE_IDS)
def test_bad_bodies_are_4xx(env, method, pattern):
    s = env["server"]
    key = f"{method} {pattern}"
    template = TEMPLATES.get(key, GENERIC)
    for what, body in bad_bodies(template, OPTIONAL.get(key, ())):
        r = send(env, method, pattern, body)
        assert_refused(r, what, *body_refusal(pattern, what))
    healthy(s)


@pytest.mark.parametrize("method,pattern", ROUTES, ids=ROUTE_IDS)
def test_oversized_bodies_are_413(env, method, pattern):
    s = env["server"]
    path = fill(env, pattern)
    hdrs = {"Authorization": f"Bearer {s.admin_token}", "Content-Type": "application/json"}
    just_over = b'{"name": "' + b"a" * (1024 * 1024) + b'"}'
    for what, body, chunked in (("1 MiB + a bit", just_over, False),
                                ("1 MiB + a bit, chunked", just_over, True)):
        h = dict(hdrs, **headers_for(pattern, body))
        status, rh, rb = raw_http(s.port, method, path, h, body, chunked)
        assert status == 413, (what, status, rb[:200])
        err = json.loads(rb)["error"]
        assert err["code"] and err["message"], (what, rb)
    healthy(s)


def test_ten_megabytes_with_content_length(env):
    s = env["server"]
    body = b'{"memo": "' + b"m" * (10 * 1024 * 1024) + b'"}'
    t0 = time.time()
    status, _, rb = raw_http(s.port, "POST", f"/v1/admin/users/{env['renter']['id']}/credit",
                             {"Authorization": f"Bearer {s.admin_token}",
                              "Content-Type": "application/json"}, body)
    assert status == 413, rb[:200]
    assert json.loads(rb)["error"]["message"]
    assert time.time() - t0 < 20
    # the claim alone is enough: a huge Content-Length is refused before any body
    status, _, rb = raw_http(s.port, "POST", "/v1/tokens",
                             {"Authorization": f"Bearer {s.admin_token}",
                              "Content-Length": str(10**12)}, b"", chunked=True)
    assert status == 413 and json.loads(rb)["error"]["code"] == "body_too_large", rb[:200]
    healthy(s)


def test_ten_megabytes_chunked(env):
    s = env["server"]
    body = b'{"name": "' + b"c" * (10 * 1024 * 1024) + b'"}'
    status, _, rb = raw_http(s.port, "POST", "/v1/tokens",
                             {"Authorization": f"Bearer {s.admin_token}",
                              "Content-Type": "application/json"}, body, chunked=True)
    assert status == 413, rb[:200]
    assert json.loads(rb)["error"]["message"]
    healthy(s)


def test_small_chunked_body_is_read(env):
    """A chunked body within the limit is read whole and handled."""
    s = env["server"]
    body = json.dumps({"name": "chunked token"}).encode()
    status, _, rb = raw_http(s.port, "POST", "/v1/tokens",
                             {"Authorization": f"Bearer {s.admin_token}",
                              "Content-Type": "application/json"}, body, chunked=True)
    assert status == 201, rb
    assert json.loads(rb)["name"] == "chunked token"
    status, _, rb = raw_http(s.port, "POST", "/v1/tokens",
                             {"Authorization": f"Bearer {s.admin_token}",
                              "Content-Type": "application/json"}, b'{"name": ', chunked=True)
    assert status == 400, rb
    assert json.loads(rb)["error"]["code"] == "invalid_json"


def test_no_side_effects(env):
    """None of the refused bodies changed anything."""
    s = env["server"]
    admin = s.admin_token
    assert s.request("GET", "/v1/balance", token=env["renter"]["token"]).json[
        "balance_micros"] == 0
    regions = [r["id"] for r in s.request("GET", "/v1/regions", token=admin).json["items"]]
    assert regions == ["sample-1"]
    models = [m["name"] for m in s.request("GET", "/v1/gpu-models", token=admin).json["items"]]
    assert "T160" not in models
    users = s.request("GET", "/v1/admin/users?limit=500", token=admin).json["items"]
    assert len(users) == 2
    assert s.request("GET", "/v1/admin/ledger/check", token=admin).json["ok"] is True
    with open(s.log_path, errors="replace") as f:
        log = f.read()
    assert " 500 " not in log and "internal error" not in log


def test_bad_query_strings_and_headers(env):
    s = env["server"]
    admin = s.admin_token
    for q in ("limit=-1", "limit=99999999999999999999", "cursor=%ff", "limit=1e3", "limit=",
              "cursor=9223372036854775808"):
        r = s.request("GET", f"/v1/admin/users?{q}", token=admin)
        assert_refused(r, q, 400, {"invalid_parameter"})
    for h in ({"Authorization": "Bearer"}, {"Authorization": "Basic abc"},
              {"Authorization": "Bearer " + "x" * 10000}, {"Cookie": "suanli_session=" + "y" * 5000}):
        r = s.request("GET", "/v1/me", headers=h)
        assert r.status == 401, (h, r)
    for key in ("", " ", "a b", "k" * 1000, "\u00e9"):
        try:
            r = s.request("POST", f"/v1/admin/users/{env['renter']['id']}/credit",
                          {"amount_micros": 1}, token=admin, headers={"Idempotency-Key": key})
        except (ValueError, UnicodeEncodeError):
            continue  # the client library refuses to send it
        assert r.status == 400, (key, r)
        assert r.code == "invalid_idempotency_key", (key, r)
    healthy(s)


ALL_ROUTES = print_routes()
ID_ROUTES = [(m, p) for m, p in ALL_ROUTES if "{id}" in p]


@pytest.mark.parametrize("method,pattern", ID_ROUTES, ids=[f"{m} {p}" for m, p in ID_ROUTES])
def test_hostile_path_ids(env, method, pattern):
    """Ids in the path that are not UTF-8, hold NUL or quotes, or are huge:
    a 4xx with an error object, never an empty or broken body."""
    s = env["server"]
    body = {} if method in ("POST", "PATCH") else None
    for bad in ("%ff%fe", "%c3%28", "%00", "a%00b", "%22%5c", "x" * 3000, "%e2%80%ae", ".."):
        path = pattern.replace("{id}", bad)
        # which check answers first (the route's token, the id, the body)
        # differs per route, so any 4xx with an error object; only the
        # admin routes promise one answer to a renter: 404, as for no route
        r = s.request(method, path, body, token=s.admin_token)
        assert_refused(r, (method, path[:80]))
        r = s.request(method, path, body, token=env["renter"]["token"])
        if pattern.startswith("/v1/admin/"):
            assert_refused(r, (method, path[:80]), 404, {"not_found"})
        else:
            assert_refused(r, (method, path[:80]))
    healthy(s)


def test_idle_and_stop_periods_out_of_range(env):
    """Scheduled and idle stops (docs/design/access.md): the bounds are in
    the message, so the renter knows what to send."""
    s, renter = env["server"], env["renter"]
    for after in (1, 9, 31 * 86400, 2**62):
        r = s.request("POST", "/v1/me/idle-stop", {"after_seconds": after}, token=renter["token"])
        assert r.status == 400 and "from 10s to 30d" in r.json["error"]["message"], r
    r = s.request("POST", "/v1/me/idle-stop", {"after_seconds": 0}, token=renter["token"])
    assert r.status == 200 and r.json["after_seconds"] is None, r
    r = s.request("POST", "/v1/me/idle-stop", {"after_seconds": 1800}, token=renter["token"])
    assert r.status == 200 and r.json["after_seconds"] == 1800, r
    assert s.request("GET", "/v1/me/idle-stop", token=renter["token"]).json["after_seconds"] == 1800
    # a stop's time is checked on an instance of the renter's own (another
    # id is a 404 before the body is read): one placed on a host that
    # reports through the API, no container needed
    host = ApiHost(s)
    owner = Cluster(s, None).renter(credit_micros=10_000_000)  # verified, with money
    r = s.request("POST", "/v1/instances", {"gpu_model": "RTX 4090", "image": host.image},
                  token=owner["token"])
    assert r.status == 201, r
    iid = r.json["id"]
    for body in ({"at": "02:00"}, {"at": "2030-02-30T00:00:00Z"}, {"in_seconds": 0},
                 {"in_seconds": 1, "at": "2030-01-01T00:00:00Z"}, {"cancel": False, "at": "x"}):
        r = s.request("POST", f"/v1/instances/{iid}/stop", body, token=owner["token"])
        assert r.status == 400, (body, r)
    r = s.request("POST", "/v1/instances/i-nosuchthing/stop", {"in_seconds": 60},
                  token=owner["token"])
    assert (r.status, r.code) == (404, "no_such_instance"), r
    healthy(s)
