"""T180: Idempotency-Key on POSTs: a retry replays the stored answer, a
different request under the same key is refused, keys belong to their user,
concurrent duplicates act once, refusals replay too."""
import base64
import os
import struct
import threading
import uuid

import pytest


def ed25519_line(comment="k"):
    blob = struct.pack(">I", 11) + b"ssh-ed25519" + struct.pack(">I", 32) + os.urandom(32)
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} {comment}"


def ledger(server, user):
    items, cursor = [], None
    while True:
        r = server.request("GET", "/v1/ledger?limit=500" + (f"&cursor={cursor}" if cursor else ""),
                           token=user["token"]).json
        items += r["items"]
        cursor = r["next_cursor"]
        if cursor is None:
            return items


def balance(server, user):
    return server.request("GET", "/v1/balance", token=user["token"]).json["balance_micros"]


def credit(server, user_id, body, key, token=None):
    return server.request("POST", f"/v1/admin/users/{user_id}/credit", body,
                          token=token or server.admin_token, headers={"Idempotency-Key": key})


def replayed(r):
    return r.headers.get("Idempotent-Replayed") == "true"


@pytest.fixture(scope="module")
def users(server):
    return server.register(), server.register()


def test_retry_replays_once(server, users):
    a, _ = users
    key = str(uuid.uuid4())
    body = {"amount_micros": 3_000_000, "memo": "idem"}
    r1 = credit(server, a["id"], body, key)
    assert r1.status == 201, r1
    assert not replayed(r1)
    r2 = credit(server, a["id"], body, key)
    assert r2.status == r1.status
    assert r2.json == r1.json
    assert r2.body == r1.body
    assert replayed(r2), r2.headers
    r3 = credit(server, a["id"], body, key)
    assert r3.body == r1.body and replayed(r3)
    entries = [e for e in ledger(server, a) if e["txn_id"] == r1.json["txn_id"]]
    assert len(entries) == 1
    assert len([e for e in ledger(server, a) if e["memo"] == "idem"]) == 1
    assert balance(server, a) == r1.json["balance_micros"] == 3_000_000

    # without a key each request acts
    r4 = server.request("POST", f"/v1/admin/users/{a['id']}/credit", body, token=server.admin_token)
    r5 = server.request("POST", f"/v1/admin/users/{a['id']}/credit", body, token=server.admin_token)
    assert r4.json["txn_id"] != r5.json["txn_id"]
    assert not replayed(r4) and not replayed(r5)
    assert balance(server, a) == 9_000_000


def test_same_key_other_request_is_422(server, users):
    a, b = users
    key = str(uuid.uuid4())
    before = balance(server, a)
    r1 = credit(server, a["id"], {"amount_micros": 100, "memo": "first"}, key)
    assert r1.status == 201
    for other_body, uid in (({"amount_micros": 101, "memo": "first"}, a["id"]),
                            ({"amount_micros": 100, "memo": "second"}, a["id"]),
                            ({"amount_micros": 100, "memo": "first"}, b["id"])):
        r = credit(server, uid, other_body, key)
        assert r.status == 422, r
        assert r.code == "idempotency_key_reused"
        assert r.json["error"]["message"]
    # another route under the same key
    r = server.request("POST", "/v1/admin/regions", {"id": "idem-x", "name": "x"},
                       token=server.admin_token, headers={"Idempotency-Key": key})
    assert r.status == 422 and r.code == "idempotency_key_reused", r
    assert "idem-x" not in server.request("GET", "/v1/regions", token=a["token"]).body
    assert balance(server, a) == before + 100
    assert balance(server, b) == 0
    # the original still replays
    assert credit(server, a["id"], {"amount_micros": 100, "memo": "first"}, key).body == r1.body


def test_keys_are_per_user(server, users):
    a, b = users
    key = "shared-" + uuid.uuid4().hex
    line = ed25519_line("shared")
    ra = server.request("POST", "/v1/ssh-keys", {"public_key": line}, token=a["token"],
                        headers={"Idempotency-Key": key})
    assert ra.status == 201, ra
    # B sends the very same request with the same key: B's own new key
    rb = server.request("POST", "/v1/ssh-keys", {"public_key": line}, token=b["token"],
                        headers={"Idempotency-Key": key})
    assert rb.status == 201, rb
    assert not replayed(rb)
    assert rb.json["id"] != ra.json["id"]
    assert ra.json["id"] not in rb.body
    # B with another body under A's key: no 422 either (B never used it)
    key2 = "shared2-" + uuid.uuid4().hex
    assert server.request("POST", "/v1/ssh-keys", {"public_key": ed25519_line()},
                          token=a["token"], headers={"Idempotency-Key": key2}).status == 201
    rb2 = server.request("POST", "/v1/ssh-keys", {"public_key": ed25519_line()},
                         token=b["token"], headers={"Idempotency-Key": key2})
    assert rb2.status == 201 and not replayed(rb2), rb2
    keys_b = [k["id"] for k in server.request("GET", "/v1/ssh-keys", token=b["token"]).json["items"]]
    assert rb.json["id"] in keys_b and ra.json["id"] not in keys_b
    # each replays its own
    assert server.request("POST", "/v1/ssh-keys", {"public_key": line}, token=a["token"],
                          headers={"Idempotency-Key": key}).json["id"] == ra.json["id"]
    assert server.request("POST", "/v1/ssh-keys", {"public_key": line}, token=b["token"],
                          headers={"Idempotency-Key": key}).json["id"] == rb.json["id"]


def test_concurrent_duplicates_credit_once(server):
    u = server.register()
    admin = server.admin_token
    key = str(uuid.uuid4())
    body = {"amount_micros": 777_000, "memo": "race"}
    n = 12
    results = [None] * n
    barrier = threading.Barrier(n)

    def go(i):
        barrier.wait()
        results[i] = credit(server, u["id"], body, key, token=admin)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.status == 201 for r in results), results
    assert len({r.json["txn_id"] for r in results}) == 1
    assert sum(not replayed(r) for r in results) == 1
    entries = ledger(server, u)
    assert len(entries) == 1 and entries[0]["amount_micros"] == 777_000
    assert balance(server, u) == 777_000
    assert server.request("GET", "/v1/admin/ledger/check", token=admin).json["ok"] is True


def test_concurrent_distinct_keys_all_act(server):
    u = server.register()
    n = 10
    results = [None] * n
    barrier = threading.Barrier(n)

    def go(i):
        barrier.wait()
        results[i] = credit(server, u["id"], {"amount_micros": 1000 + i}, str(uuid.uuid4()))

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.status == 201 for r in results), results
    assert balance(server, u) == sum(1000 + i for i in range(n))
    assert len(ledger(server, u)) == n


def test_refusal_is_replayed(server, users):
    a, _ = users
    before = balance(server, a)
    key = str(uuid.uuid4())
    r1 = credit(server, a["id"], {"amount_micros": 0}, key)
    assert r1.status == 400, r1
    r2 = credit(server, a["id"], {"amount_micros": 0}, key)
    assert r2.status == 400 and r2.body == r1.body and replayed(r2), r2
    # a 404 (no such user) replays as the 404, even once the body would be fine elsewhere
    key = str(uuid.uuid4())
    r1 = credit(server, "u-nosuchuser", {"amount_micros": 5}, key)
    assert r1.status == 404, r1
    r2 = credit(server, "u-nosuchuser", {"amount_micros": 5}, key)
    assert r2.status == 404 and r2.body == r1.body and replayed(r2)
    # a conflict (duplicate region) replays as the conflict
    rid = "idem-" + uuid.uuid4().hex[:6]
    assert server.request("POST", "/v1/admin/regions", {"id": rid, "name": "x"},
                          token=server.admin_token).status == 201
    key = str(uuid.uuid4())
    r1 = server.request("POST", "/v1/admin/regions", {"id": rid, "name": "x"},
                        token=server.admin_token, headers={"Idempotency-Key": key})
    assert r1.status == 409
    r2 = server.request("POST", "/v1/admin/regions", {"id": rid, "name": "x"},
                        token=server.admin_token, headers={"Idempotency-Key": key})
    assert r2.status == 409 and r2.body == r1.body and replayed(r2)
    assert balance(server, a) == before


def test_bad_keys_refused(server, users):
    a, _ = users
    before = balance(server, a)
    for key in ("a b", "k" * 300, "tab\there"):
        r = credit(server, a["id"], {"amount_micros": 5}, key)
        assert r.status == 400 and r.code == "invalid_idempotency_key", (key, r)
    assert balance(server, a) == before


def test_secrets_are_never_replayed(server, users):
    """Token creation and login ignore the key: a stored copy would keep a
    secret in the database, and a replay would hand it out again."""
    a, _ = users
    key = str(uuid.uuid4())
    t1 = server.request("POST", "/v1/tokens", {"name": "idem"}, token=a["token"],
                        headers={"Idempotency-Key": key})
    t2 = server.request("POST", "/v1/tokens", {"name": "idem"}, token=a["token"],
                        headers={"Idempotency-Key": key})
    assert t1.status == t2.status == 201
    assert t1.json["token"] != t2.json["token"]
    assert not replayed(t2)
    s1 = server.request("POST", "/v1/sessions", {"email": a["email"],
                                                 "password": "correct horse battery"},
                        headers={"Idempotency-Key": key})
    s2 = server.request("POST", "/v1/sessions", {"email": a["email"],
                                                 "password": "correct horse battery"},
                        headers={"Idempotency-Key": key})
    assert s1.status == s2.status == 201
    assert s1.json["token"] != s2.json["token"]


def test_replay_survives_restart(make_server):
    s = make_server()
    u = s.register()
    key = str(uuid.uuid4())
    r1 = credit(s, u["id"], {"amount_micros": 42}, key)
    assert r1.status == 201
    s.kill9()
    s.start()
    s._admin_token = None
    u["token"] = s.login(u["email"])
    r2 = credit(s, u["id"], {"amount_micros": 42}, key)
    assert r2.status == 201 and r2.body == r1.body and replayed(r2)
    assert balance(s, u) == 42
