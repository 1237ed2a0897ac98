"""GET /v1/events/stream (docs/design/control-plane.md, "The event stream"):
a renter's browser hears of their instances, events and balance as they
change, and of nothing that is another renter's; Last-Event-ID resumes with
nothing lost and no event twice; a user holds at most
events.max_streams_per_user streams; the session cookie works only from the
API's own pages; a stopping server ends its streams."""
import http.client
import json
import socket
import threading
import time

import pytest

from conftest import wait_for


class Stream:
    """One text/event-stream connection, read by a thread into messages:
    {"event", "id", "data"} (data parsed as JSON), plus comments."""

    def __init__(self, server, token=None, cookie=None, headers=None):
        self.conn = http.client.HTTPConnection(server.host, server.port, timeout=60)
        h = {"Accept": "text/event-stream", **(headers or {})}
        if token:
            h["Authorization"] = f"Bearer {token}"
        if cookie:
            h["Cookie"] = f"suanli_session={cookie}"
        self.conn.request("GET", "/v1/events/stream", headers=h)
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.headers = {k.lower(): v for k, v in self.resp.getheaders()}
        self.messages, self.comments, self.ids = [], [], []
        self.ended = threading.Event()
        self.lock = threading.Lock()
        if self.status != 200:
            self.body = json.loads(self.resp.read() or b"null")
            self.conn.close()
            self.ended.set()
            return
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        fields = {}
        try:
            while True:
                line = self.resp.readline()
                if not line:
                    break
                line = line.decode().rstrip("\n")
                if line == "":
                    with self.lock:
                        if "id" in fields:
                            self.ids.append(fields["id"])
                        if "data" in fields:
                            self.messages.append({"event": fields.get("event", "message"),
                                                  "id": fields.get("id"),
                                                  "data": json.loads(fields["data"])})
                    fields = {}
                elif line.startswith(":"):
                    with self.lock:
                        self.comments.append(line)
                else:
                    name, _, value = line.partition(":")
                    fields[name] = value[1:] if value.startswith(" ") else value
        except (OSError, ValueError, AttributeError, http.client.HTTPException):
            pass  # closed by close(), or by the server
        self.ended.set()

    def of(self, kind):
        with self.lock:
            return [m for m in self.messages if m["event"] == kind]

    def last_id(self):
        with self.lock:
            return self.ids[-1] if self.ids else None

    def close(self):
        try:
            self.conn.sock and self.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()
        self.ended.wait(10)


@pytest.fixture
def streams():
    made = []

    def open_(*args, **kw):
        s = Stream(*args, **kw)
        made.append(s)
        return s
    yield open_
    for s in made:
        s.close()


def ready(stream):
    """The first id (the stream's starting point) arrived."""
    wait_for(stream.last_id, timeout=10, what="the stream's first id")
    return stream.last_id()


def balance_of(server, user):
    r = server.request("GET", "/v1/balance", token=user["token"])
    assert r.status == 200, r
    return r.json["balance_micros"]


def test_a_renter_hears_only_their_own(cluster, streams):
    """A creates, stops and is credited; A's stream (the cookie, as a
    browser) carries each instance state, the events and the balance, each
    exactly as the API shows it; B's stream, open all along, carries none of
    it: not the instance, not an event, not the balance."""
    s = cluster.server
    a, b = cluster.renter(), cluster.renter(credit_micros=50_000_000)
    sa = streams(s, cookie=a["token"], headers={"Origin": s.url})
    sb = streams(s, token=b["token"])
    assert sa.status == sb.status == 200
    assert sa.headers["content-type"].startswith("text/event-stream")
    assert sa.headers["cache-control"] == "no-store"
    ready(sa)
    ready(sb)

    inst = cluster.create(a)
    iid = inst["id"]

    def states():
        return [m["data"]["state"] for m in sa.of("instance") if m["data"]["id"] == iid]
    wait_for(lambda: "running" in states(), timeout=30, what="running on A's stream")
    running = [m["data"] for m in sa.of("instance") if m["data"]["state"] == "running"][-1]
    get = cluster.get(a, iid)
    # the object GET /v1/instances/{id} gives (the owner's view, password too)
    assert set(running) == set(get), set(running) ^ set(get)
    for key in ("id", "name", "user_id", "node_id", "gpus", "gpu_indices", "mode", "plan", "ssh"):
        assert running[key] == get[key], key

    s.credit(a["id"], 7_000_000)
    want = balance_of(s, a)
    wait_for(lambda: any(m["data"] == {"balance_micros": want} for m in sa.of("balance")),
             timeout=10, what="A's new balance on A's stream")

    assert cluster.verb(a, iid, "stop").status == 200
    wait_for(lambda: "stopped" in states(), timeout=60, what="stopped on A's stream")
    # every event A's list holds since the stream opened, in order, once
    listed = s.request("GET", "/v1/events?limit=500", token=a["token"]).json["items"]
    mine = [e for e in listed if e["instance_id"] == iid]
    wait_for(lambda: len([m for m in sa.of("event") if m["data"]["instance_id"] == iid])
             >= len(mine), timeout=10, what="A's events on A's stream")
    heard = [m["data"] for m in sa.of("event") if m["data"]["instance_id"] == iid]
    assert heard[:len(mine)] == mine

    # B heard nothing of A's (B's stream began with B's own balance); B's
    # own credit reaches B alone
    s.credit(b["id"], 1_000_000)
    wait_for(lambda: len(sb.of("balance")) == 2, timeout=10, what="B's balance on B's stream")
    assert [m["data"] for m in sb.of("balance")] == [{"balance_micros": 50_000_000},
                                                     {"balance_micros": 51_000_000}]
    assert sb.of("instance") == [] and sb.of("event") == []
    assert all(m["data"]["balance_micros"] >= 99_000_000 for m in sa.of("balance"))
    text = json.dumps(sb.messages)
    assert iid not in text and a["id"] not in text

    # a stream opened now begins with the state now: the instance, the balance
    fresh = streams(s, token=a["token"])
    wait_for(lambda: fresh.of("balance"), timeout=10, what="the fresh stream's state")
    assert [m["data"]["id"] for m in fresh.of("instance")] == [iid]
    assert fresh.of("instance")[0]["data"]["state"] == "stopped"
    assert fresh.of("balance")[0]["data"] == {"balance_micros": balance_of(s, a)}
    assert fresh.of("event") == []
    cluster.verb(a, iid, "release")


def test_a_settlement_reaches_the_stream(cluster, streams):
    """A settlement pass charges the running instance: the owner's stream
    carries the instance with its new charged_micros (its revision is
    bumped once per settled chunk, not by a trigger per settlement)."""
    s = cluster.server
    a = cluster.renter()
    inst = cluster.create(a)
    iid = inst["id"]
    try:
        sa = streams(s, token=a["token"])
        ready(sa)
        wait_for(lambda: [m for m in sa.of("instance") if m["data"]["id"] == iid],
                 timeout=10, what="the instance on the stream")
        before = cluster.get(a, iid)["charged_micros"]

        def charged_on_stream():
            r = s.request("POST", "/v1/admin/billing/run", {}, token=s.admin_token)
            assert r.status == 200, r
            seen = [m["data"]["charged_micros"] for m in sa.of("instance")
                    if m["data"]["id"] == iid]
            return seen and seen[-1] > before and seen[-1]
        got = wait_for(charged_on_stream, timeout=60, interval=1,
                       what="a settlement's charge on the stream")
        # what the stream said is what the API says (or behind a later pass)
        assert got <= cluster.get(a, iid)["charged_micros"]
    finally:
        cluster.verb(a, iid, "release")


def test_resume_loses_nothing_and_repeats_nothing(cluster, streams):
    """Disconnect mid-way, change things, reconnect with Last-Event-ID: the
    events in between come once each, and the instance's latest state and the
    balance come too."""
    s = cluster.server
    a = cluster.renter()
    first = streams(s, token=a["token"])
    start = ready(first)
    inst = cluster.create(a)
    iid = inst["id"]
    wait_for(lambda: any(m["data"]["state"] == "running" for m in first.of("instance")),
             timeout=30, what="running")
    first.close()
    got = list(first.messages)
    cut = first.last_id()

    # meanwhile: a stop and a credit
    assert cluster.verb(a, iid, "stop").status == 200
    cluster.wait_state(a, iid, "stopped")
    s.credit(a["id"], 3_000_000)

    second = streams(s, token=a["token"], headers={"Last-Event-ID": cut})
    assert second.status == 200
    want_balance = balance_of(s, a)
    wait_for(lambda: any(m["data"]["state"] == "stopped" for m in second.of("instance")),
             timeout=15, what="the stopped state after resuming")
    wait_for(lambda: {"balance_micros": want_balance} in [m["data"] for m in second.of("balance")],
             timeout=15, what="the balance after resuming")
    seq0 = int(start.split(".")[0])
    listed = s.request("GET", f"/v1/events?cursor={seq0}&limit=500",
                       token=a["token"]).json["items"]

    def heard():
        return [m["data"] for m in got + second.of("event") if m["event"] == "event"]
    wait_for(lambda: len(heard()) >= len(listed), timeout=15, what="every event")
    seqs = [e["seq"] for e in heard()]
    assert len(seqs) == len(set(seqs)), seqs  # none twice
    assert heard()[:len(listed)] == listed  # none lost, in order, as listed
    assert any(e["state"] == "stopped" for e in listed), listed
    # ids only move forward
    ids = [tuple(map(int, i.split("."))) for i in first.ids + second.ids]
    assert all(all(x <= y for x, y in zip(p, q)) for p, q in zip(ids, ids[1:])), ids

    # a resume from the last id hears nothing again: by the time another
    # user's credit has gone out on theirs, its replay would have come
    third = streams(s, token=a["token"], headers={"Last-Event-ID": second.last_id()})
    ready(third)
    b = s.register()
    sb = streams(s, token=b["token"])
    ready(sb)
    s.credit(b["id"], 1)
    wait_for(lambda: sb.of("balance"), timeout=10, what="the other user's balance")
    assert third.messages == []
    cluster.verb(a, iid, "release")


def test_bad_last_event_id(server):
    user = server.register()
    for bad in ("x", "1.2", "1.2.3.4", "-1.0.0", "1..2", "99999999999999999999.0.0", "1.2.3 "):
        r = server.request("GET", "/v1/events/stream", token=user["token"],
                           headers={"Last-Event-ID": bad})
        assert (r.status, r.code) == (400, "invalid_last_event_id"), (bad, r)
        assert "leave it out" in r.json["error"]["message"]


def test_balance_and_keep_alive(make_server, streams):
    """Without an agent: the balance after a credit, and a comment every
    15 seconds on a quiet stream."""
    s = make_server()
    user = s.register()
    st = streams(s, token=user["token"])
    ready(st)
    s.credit(user["id"], 2_500_000)
    wait_for(lambda: len(st.of("balance")) == 2, timeout=10, what="the balance")
    # the state at the start, then the change
    assert [m["data"] for m in st.of("balance")] == [{"balance_micros": 0},
                                                     {"balance_micros": 2_500_000}]
    wait_for(lambda: st.comments, timeout=20, interval=0.2, what="a keep-alive comment")
    assert st.comments[0].startswith(":")


def test_at_most_n_streams_per_user(make_server, streams):
    s = make_server({"events.max_streams_per_user": "3"})
    user, other = s.register(), s.register()
    held = [streams(s, token=user["token"]) for _ in range(3)]
    assert [h.status for h in held] == [200] * 3
    extra = streams(s, token=user["token"])
    assert extra.status == 429, extra.status
    assert extra.body["error"]["code"] == "too_many_streams"
    assert "close another console tab" in extra.body["error"]["message"]
    # the same user's other credentials count too (one cap per user)
    assert streams(s, cookie=user["token"]).status == 429
    # another user is not affected
    assert streams(s, token=other["token"]).status == 200
    # a tab closed frees its place at once, though its connection is
    # parked (asked at the limit, not at the next keep-alive)
    held[0].close()
    wait_for(lambda: streams(s, token=user["token"]).status == 200, timeout=5, interval=0.2,
             what="the closed stream's place")


def test_default_cap_is_eight(make_server, streams):
    s = make_server()
    user = s.register()
    assert [streams(s, token=user["token"]).status for _ in range(9)] == [200] * 8 + [429]


def test_cross_site_cookie_refused(make_server, streams):
    """Another site's page cannot read a renter's stream with their cookie:
    EventSource sends cookies cross-site when asked (withCredentials)."""
    s = make_server()
    user = s.register()
    for headers in ({"Origin": "https://evil.example"}, {"Origin": "null"},
                    {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"}):
        st = streams(s, cookie=user["token"], headers=headers)
        assert st.status == 403, headers
        assert st.body["error"]["code"] == "origin_not_allowed"
    # the API's own page, and a client that is not a browser
    assert streams(s, cookie=user["token"], headers={"Origin": s.url}).status == 200
    assert streams(s, cookie=user["token"],
                   headers={"Sec-Fetch-Site": "same-origin"}).status == 200
    assert streams(s, cookie=user["token"]).status == 200
    # no credentials, or bad ones
    assert streams(s).status == 401
    assert streams(s, token="sl_nope").status == 401


def test_server_stop_ends_streams(make_server, streams):
    s = make_server()
    users = [s.register() for _ in range(3)]
    open_ = [streams(s, token=u["token"]) for u in users]
    for st in open_:
        ready(st)
    t0 = time.time()
    s.stop()
    assert time.time() - t0 < 8
    for st in open_:
        assert st.ended.wait(5), "a stream outlived its server"


def test_first_id_tells_nothing_of_others(make_server, streams):
    """A stream starts from the user's own newest rows: its id does not
    count the other renters' events and postings."""
    s = make_server()
    busy, quiet = s.register(), s.register()
    for _ in range(3):
        s.credit(busy["id"], 1_000_000)
    assert ready(streams(s, token=quiet["token"])) == "0.0.0"
    first = ready(streams(s, token=busy["token"]))
    assert first.split(".")[:2] == ["0", "0"] and int(first.split(".")[2]) > 0


def test_revoked_credentials_end_the_stream(make_server, streams):
    """A logout, or a deleted API token, ends the streams opened with it:
    whoever held the credential hears nothing after."""
    s = make_server()
    user = s.register()
    by_cookie = streams(s, cookie=user["token"], headers={"Origin": s.url})
    ready(by_cookie)
    r = s.request("POST", "/v1/tokens", {"name": "stream"}, token=user["token"])
    assert r.status == 201, r
    api_token, api_token_id = r.json["token"], r.json["id"]
    by_token = streams(s, token=api_token)
    ready(by_token)

    assert s.request("DELETE", "/v1/sessions/current", token=user["token"]).status == 204
    s.credit(user["id"], 1_000_000)
    assert by_cookie.ended.wait(10), "the stream outlived its session"
    assert [m["data"] for m in by_cookie.of("balance")] == [{"balance_micros": 0}]
    # the API token's stream still runs, and heard the credit
    wait_for(lambda: len(by_token.of("balance")) == 2, timeout=10, what="the balance")

    fresh = s.login(user["email"])
    assert s.request("DELETE", f"/v1/tokens/{api_token_id}", token=fresh).status == 204
    s.credit(user["id"], 1_000_000)
    assert by_token.ended.wait(10), "the stream outlived its token"
    assert [m["data"]["balance_micros"] for m in by_token.of("balance")] == [0, 1_000_000]


def test_cap_holds_under_a_burst(make_server, streams):
    """Twenty streams asked for at once: exactly the limit is let in."""
    s = make_server({"events.max_streams_per_user": "3"})
    user = s.register()
    got, lock = [], threading.Lock()

    def one():
        st = streams(s, token=user["token"])
        with lock:
            got.append(st.status)
    threads = [threading.Thread(target=one) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == [200] * 3 + [429] * 17, got
