"""T130: money: admin credits, balance, the ledger and its check, the signed
payment webhook, and the append-only ledger table."""
import hashlib
import hmac
import json
import time
import uuid

import pytest

from conftest import StoreError

SECRET = "whsec_test_0123456789abcdef"


def assert_error(r, status, code=None):
    assert r.status == status, r
    if code:
        assert r.code == code, r
    assert r.json["error"]["message"], r


def all_ledger(server, token, limit=None):
    items, cursor = [], None
    while True:
        q = "/v1/ledger?" + (f"limit={limit}&" if limit else "") + (f"cursor={cursor}" if cursor else "")
        r = server.request("GET", q, token=token)
        assert r.status == 200, r
        items += r.json["items"]
        cursor = r.json["next_cursor"]
        if cursor is None:
            return items


@pytest.fixture(scope="module")
def renter(server):
    return server.register()


def test_credit_balance_ledger(server, renter):
    admin = server.admin_token
    b0 = server.request("GET", "/v1/balance", token=renter["token"])
    assert b0.status == 200, b0
    assert b0.json["balance_micros"] == 0
    assert b0.json["currency"] == "CNY"
    assert "covers_seconds" in b0.json

    r = server.request("POST", f"/v1/admin/users/{renter['id']}/credit",
                       {"amount_micros": 12_500_000, "memo": "welcome bonus"}, token=admin)
    assert r.status == 201, r
    assert r.json["balance_micros"] == 12_500_000
    assert r.json["amount_micros"] == 12_500_000
    assert r.json["user_id"] == renter["id"]
    assert r.json["txn_id"].startswith("txn-")
    t1 = r.json["txn_id"]
    r = server.request("POST", f"/v1/admin/users/{renter['id']}/credit",
                       {"amount_micros": 1}, token=admin)
    assert r.status == 201 and r.json["balance_micros"] == 12_500_001
    t2 = r.json["txn_id"]

    b = server.request("GET", "/v1/balance", token=renter["token"]).json
    assert b["balance_micros"] == 12_500_001
    assert isinstance(b["balance_micros"], int)

    led = server.request("GET", "/v1/ledger", token=renter["token"]).json["items"]
    assert [e["txn_id"] for e in led[:2]] == [t2, t1]  # newest first
    assert led[1]["memo"] == "welcome bonus"
    assert led[1]["amount_micros"] == 12_500_000
    assert led[1]["kind"] == "credit"
    assert led[0]["balance_after_micros"] == 12_500_001
    assert led[1]["balance_after_micros"] == 12_500_000

    chk = server.request("GET", "/v1/admin/ledger/check", token=admin)
    assert chk.status == 200 and chk.json["ok"] is True, chk
    assert chk.json["transactions"] >= 2


def test_credit_bounds(server, renter):
    admin = server.admin_token
    before = server.request("GET", "/v1/balance", token=renter["token"]).json["balance_micros"]
    path = f"/v1/admin/users/{renter['id']}/credit"
    for bad in (0, -1, -10**6, 1.5, 1.0, "100", None, True, [1], {"a": 1}, 10**15 + 1,
                2**63 - 1):
        r = server.request("POST", path, {"amount_micros": bad, "memo": "bad"}, token=admin)
        assert_error(r, 400)
    for raw in (b'{"amount_micros": 9223372036854775808}', b'{"amount_micros": 1e6}',
                b'{"amount_micros": -9223372036854775809}', b'{"amount_micros": 100'):
        r = server.request("POST", path, raw=raw, token=admin)
        assert_error(r, 400)
    r = server.request("POST", path, {"amount_micros": 5, "memo": "x" * 201}, token=admin)
    assert_error(r, 400)
    r = server.request("POST", path, {"amount_micros": 5, "extra": 1}, token=admin)
    assert_error(r, 400, "unknown_field")
    after = server.request("GET", "/v1/balance", token=renter["token"]).json["balance_micros"]
    assert after == before
    # the largest allowed credit (10^15 micros) passes
    r = server.request("POST", path, {"amount_micros": 10**15, "memo": "max"}, token=admin)
    assert r.status == 201, r
    assert r.json["balance_micros"] == before + 10**15
    # unknown user
    r = server.request("POST", "/v1/admin/users/u-nobody/credit", {"amount_micros": 5},
                       token=admin)
    assert_error(r, 404, "no_such_user")
    assert server.request("GET", "/v1/admin/ledger/check", token=admin).json["ok"] is True


def test_ledger_pagination(server):
    u = server.register()
    for i in range(7):
        server.credit(u["id"], 1000 + i, memo=f"c{i}")
    pages = []
    cursor = None
    while True:
        q = "/v1/ledger?limit=3" + (f"&cursor={cursor}" if cursor else "")
        r = server.request("GET", q, token=u["token"]).json
        pages.append(r["items"])
        cursor = r["next_cursor"]
        if cursor is None:
            break
    flat = [e for p in pages for e in p]
    assert [len(p) for p in pages][:2] == [3, 3]
    assert [e["memo"] for e in flat] == [f"c{i}" for i in range(6, -1, -1)]
    seqs = [e["seq"] for e in flat]
    assert seqs == sorted(seqs, reverse=True) and len(set(seqs)) == 7
    assert sum(e["amount_micros"] for e in flat) == \
        server.request("GET", "/v1/balance", token=u["token"]).json["balance_micros"]
    # another user's ledger is not visible
    other = server.register()
    assert server.request("GET", "/v1/ledger", token=other["token"]).json["items"] == []


# ---- payment webhook ---------------------------------------------------------

def sign(secret, ts, body):
    return "v1=" + hmac.new(secret.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()


def deliver(server, payload, secret=SECRET, ts=None, headers=None, raw=None):
    body = raw if raw is not None else json.dumps(payload).encode()
    ts = int(time.time()) if ts is None else ts
    h = {"X-Suanli-Timestamp": str(ts), "X-Suanli-Signature": sign(secret, ts, body)}
    if headers is not None:
        h = headers
    return server.request("POST", "/v1/payments/webhook", raw=body, headers=h)


@pytest.fixture(scope="module")
def pay_server(tmp_path_factory):
    from conftest import Server
    s = Server(str(tmp_path_factory.mktemp("pay")), {"payments.webhook_secret": SECRET}).start()
    yield s
    s.stop()


def balance(server, user):
    return server.request("GET", "/v1/balance", token=user["token"]).json["balance_micros"]


def test_webhook_credits_once(pay_server):
    s = pay_server
    u = s.register()
    txn = "gw-" + uuid.uuid4().hex
    payload = {"transaction_id": txn, "user_id": u["id"], "amount_micros": 50_000_000,
               "currency": "CNY"}
    r = deliver(s, payload)
    assert r.status == 201, r
    assert r.json["duplicate"] is False
    assert r.json["transaction_id"] == txn
    assert balance(s, u) == 50_000_000
    led = s.request("GET", "/v1/ledger", token=u["token"]).json["items"]
    assert led[0]["kind"] == "topup" and led[0]["amount_micros"] == 50_000_000
    assert led[0]["txn_id"] == r.json["ledger_txn_id"]

    # the same delivery again (even re-signed later) is a duplicate
    for _ in range(2):
        r2 = deliver(s, payload)
        assert r2.status == 200, r2
        assert r2.json["duplicate"] is True
        assert r2.json["ledger_txn_id"] == r.json["ledger_txn_id"]
    assert balance(s, u) == 50_000_000

    # same transaction id with another amount or user: conflict, nothing moves
    r3 = deliver(s, dict(payload, amount_micros=60_000_000))
    assert_error(r3, 409, "transaction_conflict")
    v = s.register()
    r3 = deliver(s, dict(payload, user_id=v["id"]))
    assert_error(r3, 409, "transaction_conflict")
    assert balance(s, u) == 50_000_000
    assert balance(s, v) == 0
    assert len(s.request("GET", "/v1/ledger", token=u["token"]).json["items"]) == 1
    assert s.request("GET", "/v1/admin/ledger/check", token=s.admin_token).json["ok"] is True


def test_webhook_refusals(pay_server):
    s = pay_server
    u = s.register()

    def payload():
        return {"transaction_id": "gw-" + uuid.uuid4().hex, "user_id": u["id"],
                "amount_micros": 1_000_000, "currency": "CNY"}

    # wrong secret
    assert_error(deliver(s, payload(), secret="not-the-secret"), 401, "bad_signature")
    # signature over another body
    p = payload()
    body = json.dumps(p).encode()
    ts = int(time.time())
    other = json.dumps(dict(p, amount_micros=9_000_000)).encode()
    r = s.request("POST", "/v1/payments/webhook", raw=other,
                  headers={"X-Suanli-Timestamp": str(ts), "X-Suanli-Signature": sign(SECRET, ts, body)})
    assert_error(r, 401, "bad_signature")
    # signed with another timestamp than the header's
    r = s.request("POST", "/v1/payments/webhook", raw=body,
                  headers={"X-Suanli-Timestamp": str(ts), "X-Suanli-Signature": sign(SECRET, ts - 1, body)})
    assert_error(r, 401, "bad_signature")
    # no v1= prefix / garbage
    for sig in (sign(SECRET, ts, body)[3:], "v1=", "v2=" + sign(SECRET, ts, body)[3:], "v1=zz"):
        r = s.request("POST", "/v1/payments/webhook", raw=body,
                      headers={"X-Suanli-Timestamp": str(ts), "X-Suanli-Signature": sig})
        assert_error(r, 401, "bad_signature")
    # a captured request replayed 10 minutes later
    old = int(time.time()) - 600
    assert_error(deliver(s, payload(), ts=old), 401, "stale_signature")
    assert_error(deliver(s, payload(), ts=int(time.time()) + 600), 401, "stale_signature")
    # timestamp not a number
    r = s.request("POST", "/v1/payments/webhook", raw=body,
                  headers={"X-Suanli-Timestamp": "yesterday", "X-Suanli-Signature": sign(SECRET, "yesterday", body)})
    assert_error(r, 401)
    # missing headers
    assert_error(deliver(s, payload(), headers={}), 401, "missing_signature")
    assert_error(deliver(s, payload(), headers={"X-Suanli-Timestamp": str(ts)}), 401,
                 "missing_signature")
    assert_error(deliver(s, payload(), headers={"X-Suanli-Signature": sign(SECRET, ts, body)}),
                 401, "missing_signature")
    # wrong currency: authentic but unprocessable
    assert_error(deliver(s, dict(payload(), currency="USD")), 422, "wrong_currency")
    # unknown user
    assert_error(deliver(s, dict(payload(), user_id="u-nobody")), 422)
    # bad amounts and bodies, correctly signed
    for bad in (0, -5, 1.5, "100", 10**13 + 1):
        assert_error(deliver(s, dict(payload(), amount_micros=bad)), 400)
    assert_error(deliver(s, None, raw=b"not json"), 400)
    assert_error(deliver(s, None, raw=b"[]"), 400)
    assert_error(deliver(s, dict(payload(), extra=1)), 400)
    assert balance(s, u) == 0
    assert s.request("GET", "/v1/ledger", token=u["token"]).json["items"] == []


def test_webhook_disabled_without_secret(server, renter):
    body = json.dumps({"transaction_id": "gw-x", "user_id": renter["id"],
                       "amount_micros": 1, "currency": "CNY"}).encode()
    ts = int(time.time())
    r = server.request("POST", "/v1/payments/webhook", raw=body,
                       headers={"X-Suanli-Timestamp": str(ts),
                                "X-Suanli-Signature": sign("", ts, body)})
    assert_error(r, 404)


# ---- append-only ledger ------------------------------------------------------

def test_ledger_is_append_only(make_server):
    s = make_server()
    u = s.register()
    s.credit(u["id"], 777, memo="keep me")
    s.stop()
    n = int(s.db_execute("SELECT COUNT(*) FROM ledger_entries")[0][0][0])
    assert n >= 2
    for sql in ("UPDATE ledger_entries SET amount_micros = amount_micros * 2",
                "DELETE FROM ledger_entries",
                "UPDATE ledger_txns SET memo = 'forged'",
                "DELETE FROM ledger_txns"):
        with pytest.raises(StoreError, match="append-only"):
            s.db_execute(sql)
    assert int(s.db_execute("SELECT COUNT(*) FROM ledger_entries")[0][0][0]) == n
    # inserting is still allowed (that is what append-only means)
    assert int(s.db_execute("SELECT COUNT(*) FROM ledger_txns WHERE memo = 'keep me'")[0][0][0]) == 1
    s.start()
    assert s.request("GET", "/v1/balance", token=s.login(u["email"])).json["balance_micros"] == 777
