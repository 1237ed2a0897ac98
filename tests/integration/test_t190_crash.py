"""T190: kill -9 of suanlid in the middle of a burst of credits, several
times: no acknowledged credit is lost, balances equal their ledgers, and
retrying every request under its Idempotency-Key never credits twice."""
import http.client
import random
import threading
import time
import urllib.error
import uuid

THREADS = 4
PER_THREAD = 100
CYCLES = 5


def all_ledger(s, token):
    items, cursor = [], None
    while True:
        r = s.request("GET", "/v1/ledger?limit=37" + (f"&cursor={cursor}" if cursor else ""),
                      token=token)
        assert r.status == 200, r
        items += r.json["items"]
        cursor = r.json["next_cursor"]
        if cursor is None:
            return items


def send_credit(s, admin, req, timeout=10):
    return s.request("POST", f"/v1/admin/users/{req['user']}/credit",
                     {"amount_micros": req["amount"], "memo": req["key"]}, token=admin,
                     headers={"Idempotency-Key": req["key"]}, timeout=timeout)


def burst(s, admin, users, rng):
    """Starts THREADS threads sending PER_THREAD credits each; returns
    (requests, acked dict key -> txn_id, threads, ack counter)."""
    reqs = [[{"key": f"crash-{uuid.uuid4()}", "user": rng.choice(users)["id"],
              "amount": rng.randint(1, 10**9)} for _ in range(PER_THREAD)]
            for _ in range(THREADS)]
    acked = {}
    lock = threading.Lock()
    errors = []

    def worker(batch):
        for req in batch:
            try:
                r = send_credit(s, admin, req)
            except (OSError, urllib.error.URLError, http.client.HTTPException):
                return  # the server is gone: the rest are never sent (retried later)
            if r.status >= 500:
                errors.append(r)
                continue
            if r.status != 201:
                errors.append(r)
                continue
            with lock:
                acked[req["key"]] = r.json["txn_id"]

    threads = [threading.Thread(target=worker, args=(b,)) for b in reqs]
    for t in threads:
        t.start()
    return [r for b in reqs for r in b], acked, threads, errors


def check_consistent(s, admin, users):
    chk = s.request("GET", "/v1/admin/ledger/check", token=admin)
    assert chk.status == 200 and chk.json["ok"] is True, chk
    by_user = {}
    for u in users:
        entries = all_ledger(s, u["token"])
        seqs = [e["seq"] for e in entries]
        assert seqs == sorted(seqs, reverse=True) and len(set(seqs)) == len(seqs)
        bal = s.request("GET", "/v1/balance", token=u["token"]).json["balance_micros"]
        assert bal == sum(e["amount_micros"] for e in entries), u["id"]
        if entries:
            assert entries[0]["balance_after_micros"] == bal
        by_user[u["id"]] = entries
    return by_user


def test_kill9_during_credit_burst(make_server):
    rng = random.Random()
    seed = rng.randrange(2**32)
    rng.seed(seed)
    s = make_server({"http.threads": "4"})
    admin = s.admin_token
    users = [s.register() for _ in range(3)]
    all_reqs = []
    all_acked = {}
    kills_mid_burst = 0

    for cycle in range(CYCLES):
        reqs, acked, threads, errors = burst(s, admin, users, rng)
        # kill at a random moment: after a random number of acknowledgements
        target = rng.randint(5, THREADS * PER_THREAD * 3 // 4)
        deadline = time.time() + 60
        while len(acked) < target and any(t.is_alive() for t in threads) \
                and time.time() < deadline:
            time.sleep(0.001)
        time.sleep(rng.random() * 0.02)  # the random moment is the test
        if any(t.is_alive() for t in threads):
            kills_mid_burst += 1
        s.kill9()
        for t in threads:
            t.join(30)
            assert not t.is_alive()
        if errors:
            with open(s.log_path, errors="replace") as f:
                log = [line for line in f if "error" in line.lower()]
            raise AssertionError(f"seed {seed} cycle {cycle}: {len(errors)} refused: {errors[:3]}\n"
                                 + "".join(log[-10:]))
        s.start()
        all_reqs += reqs
        all_acked.update(acked)

        # 1. every acknowledged credit is in its user's ledger, once
        by_user = check_consistent(s, admin, users)
        txns = {}
        for entries in by_user.values():
            for e in entries:
                txns.setdefault(e["txn_id"], []).append(e)
        user_of = {r["key"]: r for r in all_reqs}
        for key, txn in all_acked.items():
            assert txn in txns, (seed, cycle, key, "acknowledged credit lost")
            assert len(txns[txn]) == 1
            e = txns[txn][0]
            assert e["memo"] == key and e["amount_micros"] == user_of[key]["amount"]

        # 2. retrying every request of this cycle (acknowledged or not) acts at most once
        for req in reqs:
            r = send_credit(s, admin, req, timeout=30)
            assert r.status == 201, (seed, cycle, r)
            if req["key"] in all_acked:
                assert r.headers.get("Idempotent-Replayed") == "true", (seed, r)
                assert r.json["txn_id"] == all_acked[req["key"]], (seed, req, r)
            all_acked[req["key"]] = r.json["txn_id"]
        # a second round of retries changes nothing
        for req in rng.sample(reqs, 50):
            r = send_credit(s, admin, req, timeout=30)
            assert r.status == 201 and r.json["txn_id"] == all_acked[req["key"]]
            assert r.headers.get("Idempotent-Replayed") == "true"

        # 3. now each request ever sent is exactly one ledger entry of its user
        by_user = check_consistent(s, admin, users)
        memos = {}
        for uid, entries in by_user.items():
            for e in entries:
                assert e["memo"] not in memos, (seed, "credited twice", e)
                memos[e["memo"]] = (uid, e)
        assert set(memos) == {r["key"] for r in all_reqs}, seed
        for r in all_reqs:
            uid, e = memos[r["key"]]
            assert uid == r["user"] and e["amount_micros"] == r["amount"]
            assert e["txn_id"] == all_acked[r["key"]]
        total = sum(r["amount"] for r in all_reqs)
        assert sum(s.request("GET", "/v1/balance", token=u["token"]).json["balance_micros"]
                   for u in users) == total

    assert kills_mid_burst >= 2, f"the kills came after the bursts ended (seed {seed})"
    with open(s.log_path, errors="replace") as f:
        assert "internal error" not in f.read()
