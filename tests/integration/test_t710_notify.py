"""Notifications (issue 15, item 4; docs/design/notifications.md): a renter's
webhooks (HMAC-signed, retried with backoff) and confirmed email addresses
(through a real SMTP server, aiosmtpd) hear of what happens to their
instances; a storm is digested; a kind can be turned off; a restart does not
resend; webhooks to non-public addresses are refused unless the operator
allows them; another renter sees none of it.

Instances here live on an ApiHost (conftest): the test reports their states
through the node API, so no container runs."""
import email
import email.policy
import hashlib
import hmac
import http.server
import json
import threading
import time

import pytest

from conftest import ApiHost, Cli, Cluster, free_port, sample_catalog, wait_for

MODEL = "RTX 4090"


class Receiver:
    """A webhook receiver on 127.0.0.1: keeps each POST (headers, body) and
    answers `status`."""

    def __init__(self, status=200):
        self.status = status
        self.posts = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.posts.append((dict(self.headers), body))
                self.send_response(receiver.status)
                self.end_headers()
                self.wfile.write(b"receiver says no" if receiver.status >= 300 else b"ok")

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def bodies(self):
        return [json.loads(b) for _, b in self.posts]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class Smtp:
    """A real SMTP server (aiosmtpd) on 127.0.0.1 that keeps each message."""

    def __init__(self):
        from aiosmtpd.controller import Controller
        self.messages = []
        smtp = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                smtp.messages.append((envelope.rcpt_tos,
                                      email.message_from_bytes(envelope.content,
                                                               policy=email.policy.default)))
                return "250 OK"

        self.port = free_port()
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self.controller.start()
        self.url = f"smtp://127.0.0.1:{self.port}"

    def to(self, addr):
        return [m for rcpt, m in self.messages if addr in rcpt]

    def close(self):
        self.controller.stop()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def smtp():
    s = Smtp()
    yield s
    s.close()


def lab(make_server, smtp=None, **settings):
    """A server whose webhooks may reach this machine's loopback receivers,
    a host and a renter."""
    s = {"notify.webhook_allow_private": "true", "notify.interval": "1s",
         "notify.retry_base": "1s", "notify.digest_window": "6s"}
    if smtp:
        s.update({"notify.smtp_url": smtp.url, "notify.smtp_from": "suanli@example.com"})
    s.update(settings)
    server = make_server(s)
    host = ApiHost(server, gpus=8)
    return server, host, Cluster(server, None).renter()


def create(server, host, user):
    r = server.request("POST", "/v1/instances",
                       {"gpu_model": MODEL, "gpus": 1, "image": host.image, "data_disk_gib": 10},
                       token=user["token"])
    assert r.status == 201, r
    return r.json["id"]


def report(host, iid, state, **extra):
    host.heartbeat([{"id": iid, "state": state, "generation": 1000, **extra}])


def add(server, user, kind, target):
    return server.request("POST", "/v1/notify/channels", {"kind": kind, "target": target},
                          token=user["token"])


def log(server, user):
    r = server.request("GET", "/v1/notify/log?limit=500", token=user["token"])
    assert r.status == 200, r
    return r.json["items"]


def verify(secret, headers, body):
    """What a receiver does (docs/design/notifications.md)."""
    ts = headers["X-Suanli-Timestamp"]
    mac = hmac.new(secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    assert abs(int(ts) - time.time()) < 300
    return hmac.compare_digest(headers["X-Suanli-Signature"], "v1=" + mac)


def code_of(message):
    text = message.get_body(("plain",)).get_content()
    return text.split("The code is ")[1].split(":")[0]


def test_t710_failure_reaches_signed_webhook_and_confirmed_email(make_server, receiver, smtp,
                                                                 tmp_path):
    server, host, user = lab(make_server, smtp)
    cli = Cli(server, str(tmp_path))
    r = add(server, user, "webhook", receiver.url)
    assert r.status == 201 and r.json["secret"].startswith("whsec_"), r
    hook, secret = r.json["id"], r.json["secret"]
    # the secret is shown once: never listed again
    r = server.request("GET", "/v1/notify/channels", token=user["token"])
    assert r.status == 200 and "secret" not in r.body and secret not in r.body, r
    addr = "renter-mail@example.com"
    r = add(server, user, "email", addr)
    assert r.status == 201 and r.json["confirmed"] is False and "secret" not in r.json, r
    mail = r.json["id"]
    confirm = wait_for(lambda: smtp.to(addr), timeout=30, what="the confirmation email")[0]
    assert "confirm" in confirm["Subject"]

    # before the address is confirmed, only the webhook hears of an event
    first = create(server, host, user)
    report(host, first, "running")
    report(host, first, "running", oom_kills=1)
    wait_for(lambda: [b for b in receiver.bodies() if b["kind"] == "oom"], timeout=30,
             what="the oom webhook")
    assert len(smtp.to(addr)) == 1

    r = server.request("POST", f"/v1/notify/channels/{mail}/confirm", {"code": "00000000"},
                       token=user["token"])
    assert (r.status, r.code) == (400, "wrong_code"), r
    r = server.request("POST", f"/v1/notify/channels/{mail}/confirm",
                       {"code": code_of(confirm)}, token=user["token"])
    assert r.status == 200 and r.json["confirmed"] is True, r

    iid = create(server, host, user)
    report(host, iid, "failed")
    posts = wait_for(lambda: [(h, b) for h, b in receiver.posts
                              if json.loads(b)["kind"] == "instance_failed"],
                     timeout=30, what="the failure's webhook")
    headers, body = posts[0]
    assert verify(secret, headers, body)
    assert not verify("whsec_" + "0" * 64, headers, body)
    doc = json.loads(body)
    assert doc["instance_id"] == iid and doc["event"]["kind"] == "failed"
    assert headers["X-Suanli-Event"] == "instance_failed"
    assert headers["X-Suanli-Delivery"] == doc["id"]
    msgs = wait_for(lambda: [m for m in smtp.to(addr) if iid in m["Subject"]], timeout=30,
                    what="the failure's email")
    m = msgs[0]
    assert "an instance failed" in m["Subject"]
    assert m["Message-ID"].startswith("<ntf-") and m["Date"] and m["From"]
    assert iid in m.get_body(("plain",)).get_content()
    # each row is marked sent just after its receiver answers
    want = sorted([(hook, "sent"), (mail, "sent")])
    wait_for(lambda: sorted((e["channel_id"], e["state"]) for e in log(server, user)
                            if e["instance_id"] == iid) == want, timeout=30,
             what="both deliveries logged as sent")
    out = cli.run("notify", "log", env={"SUANLI_TOKEN": user["token"]}, check=True).stdout
    assert "instance_failed" in out and "sent" in out and iid in out, out


def test_t710_failing_receiver_is_retried_then_marked_failed(make_server, receiver):
    receiver.status = 500
    server, host, user = lab(make_server, **{"notify.attempts": "3"})
    r = add(server, user, "webhook", receiver.url)
    assert r.status == 201, r
    iid = create(server, host, user)
    report(host, iid, "failed")
    wait_for(lambda: any(e["state"] == "retrying" for e in log(server, user)), timeout=30,
             what="a retry")
    e = wait_for(lambda: [e for e in log(server, user) if e["state"] == "failed"], timeout=60,
                 what="the delivery given up")[0]
    assert e["attempts"] == 3 and "HTTP 500" in e["last_error"], e
    assert len(receiver.posts) == 3
    # the answer's body is kept as a short excerpt only
    assert len(e["last_error"]) < 300


def test_t710_a_storm_is_digested(make_server, receiver):
    server, host, user = lab(make_server)
    assert add(server, user, "webhook", receiver.url).status == 201
    iid = create(server, host, user)
    report(host, iid, "running")
    report(host, iid, "running", oom_kills=12)
    wait_for(lambda: [b for b in receiver.bodies() if b["kind"] == "oom"], timeout=30,
             what="the first oom message")
    digested = [e for e in log(server, user) if e["state"] == "digested"]
    assert len(digested) == 11, digested
    ooms = [b for b in receiver.bodies() if b["kind"] == "oom"]
    assert len(ooms) == 1 and ooms[0]["held_back"] == 0, ooms
    # when the window (6 s here, an hour by default) ends, what was held
    # back is counted into one more message
    summary = wait_for(lambda: [b for b in receiver.bodies() if b.get("held_back") == 11],
                       timeout=30, what="the digest's summary")[0]
    assert summary["kind"] == "oom" and summary["instance_id"] == iid
    assert len([b for b in receiver.bodies() if b["kind"] == "oom"]) == 2


def test_t710_opt_out_holds(make_server, receiver, tmp_path):
    server, host, user = lab(make_server)
    assert add(server, user, "webhook", receiver.url).status == 201
    cli = Cli(server, str(tmp_path))
    env = {"SUANLI_TOKEN": user["token"]}
    out = cli.run("notify", "off", "instance_failed", env=env, check=True).stdout
    assert "off" in out
    listed = cli.run("notify", "ls", env=env, check=True).stdout
    assert any(line.split()[:2] == ["instance_failed", "off"] for line in listed.splitlines()), \
        listed
    r = server.request("GET", "/v1/notify/kinds", token=user["token"])
    assert {k["kind"]: k["enabled"] for k in r.json["items"]}["instance_failed"] is False
    p = cli.run("notify", "off", "no_such_kind", env=env)
    assert p.returncode != 0 and "not a notification kind" in p.stderr
    a = create(server, host, user)
    report(host, a, "failed")
    b = create(server, host, user)
    report(host, b, "running")
    report(host, b, "running", oom_kills=1)
    wait_for(lambda: [x for x in receiver.bodies() if x["kind"] == "oom"], timeout=30,
             what="the oom webhook, a kind left on")
    assert not [x for x in receiver.bodies() if x["kind"] == "instance_failed"]
    assert not [e for e in log(server, user) if e["kind"] == "instance_failed"]
    cli.run("notify", "on", "instance_failed", env=env, check=True)
    c = create(server, host, user)
    report(host, c, "failed")
    wait_for(lambda: [x for x in receiver.bodies() if x["instance_id"] == c], timeout=30,
             what="the failure once turned on again")


def test_t710_restart_neither_loses_nor_resends(make_server, receiver):
    # the first run's notifier would pass only after an hour: the event
    # recorded then is still unsent when suanlid stops
    server, host, user = lab(make_server, **{"notify.interval": "1h"})
    assert add(server, user, "webhook", receiver.url).status == 201
    a = create(server, host, user)
    report(host, a, "failed")
    server.settings["notify.interval"] = "1s"
    server.restart()
    wait_for(lambda: receiver.posts, timeout=30, what="the event recorded before the restart")
    server.restart()
    b = create(server, host, user)
    report(host, b, "failed")
    wait_for(lambda: [x for x in receiver.bodies() if x["instance_id"] == b], timeout=30,
             what="the delivery after the second restart")
    ids = [x["id"] for x in receiver.bodies()]
    assert len(ids) == len(set(ids)) == 2, receiver.bodies()
    assert [x["instance_id"] for x in receiver.bodies()] == [a, b]
    # the row is marked sent just after the receiver answers
    wait_for(lambda: [e["state"] for e in log(server, user)] == ["sent", "sent"], timeout=30,
             what="both deliveries logged as sent")


REFUSED = ["http://127.0.0.1:9/hook", "http://169.254.169.254/latest/meta-data/",
           "http://10.1.2.3/hook", "http://[::1]:9/hook", "http://localhost:9/hook",
           "http://192.168.1.1/", "http://[fd00::1]/", "http://0.0.0.0:9/",
           "http://[::ffff:127.0.0.1]:9/", "http://224.0.0.1/"]


def test_t710_webhooks_to_private_addresses_are_refused(make_server, receiver):
    server = make_server()
    user = server.register()
    for url in REFUSED:
        r = add(server, user, "webhook", url)
        assert (r.status, r.code) == (400, "webhook_refused"), (url, r)
    for url in ("ftp://example.com/", "http://user:pw@example.com/", "not a url"):
        r = add(server, user, "webhook", url)
        assert (r.status, r.code) == (400, "invalid_webhook"), (url, r)
    r = server.request("GET", "/v1/notify/channels", token=user["token"])
    assert r.json["items"] == []
    # checked again at delivery: a webhook added while a lab allowed it is
    # not sent once the operator turns that off
    lab_server, host, renter = lab(make_server)
    assert add(lab_server, renter, "webhook", receiver.url).status == 201
    lab_server.settings["notify.webhook_allow_private"] = "false"
    lab_server.restart()
    iid = create(lab_server, host, renter)
    report(host, iid, "failed")
    e = wait_for(lambda: [e for e in log(lab_server, renter) if e["attempts"] > 0], timeout=30,
                 what="the refused delivery")[0]
    assert "not a public address" in e["last_error"] and e["state"] == "failed", e
    assert receiver.posts == []


def test_t710_email_needs_a_confirmation_and_is_rate_limited(make_server, smtp):
    server, host, user = lab(make_server, smtp, **{"notify.manual_per_hour": "2"})
    a = add(server, user, "email", "one@example.com")
    assert a.status == 201, a
    for bad in ("no-at-sign", "a@b\r\nBcc: x@example.com", "<x@example.com>", "a b@example.com"):
        r = add(server, user, "email", bad)
        assert r.status == 400, (bad, r)
    assert add(server, user, "email", "two@example.com").status == 201
    r = add(server, user, "email", "three@example.com")
    assert (r.status, r.code) == (429, "too_many_messages"), r
    r = server.request("POST", f"/v1/notify/channels/{a.json['id']}/test", token=user["token"])
    assert (r.status, r.code) == (409, "not_confirmed"), r
    for _ in range(5):
        r = server.request("POST", f"/v1/notify/channels/{a.json['id']}/confirm",
                           {"code": "12345678"}, token=user["token"])
    r = server.request("POST", f"/v1/notify/channels/{a.json['id']}/confirm",
                       {"code": code_of(wait_for(lambda: smtp.to("one@example.com"),
                                                 timeout=30, what="the code")[0])},
                       token=user["token"])
    assert (r.status, r.code) == (409, "too_many_tries"), r
    # nothing but the two codes went out
    wait_for(lambda: len(smtp.messages) == 2, timeout=30, what="two codes")
    iid = create(server, host, user)
    report(host, iid, "failed")
    # unconfirmed addresses get nothing of it: a webhook added after it
    # hears of a later failure, so the notifier has passed this one
    hook = Receiver()
    try:
        assert add(server, user, "webhook", hook.url).status == 201
        later = create(server, host, user)
        report(host, later, "failed")
        wait_for(lambda: [b for b in hook.bodies() if b["instance_id"] == later], timeout=30,
                 what="the later failure's webhook")
    finally:
        hook.close()
    assert not [e for e in log(server, user)
                if e["kind"] == "instance_failed" and e["channel_kind"] == "email"]
    assert len(smtp.messages) == 2


def test_t710_another_renter_sees_nothing(make_server, receiver):
    server, host, user = lab(make_server)
    r = add(server, user, "webhook", receiver.url)
    ch = r.json["id"]
    iid = create(server, host, user)
    report(host, iid, "failed")
    wait_for(lambda: [e for e in log(server, user) if e["state"] == "sent"], timeout=30,
             what="a delivery")
    other = server.register()
    assert log(server, other) == []
    r = server.request("GET", "/v1/notify/channels", token=other["token"])
    assert r.json["items"] == []
    for method, path, body in (("DELETE", f"/v1/notify/channels/{ch}", None),
                               ("POST", f"/v1/notify/channels/{ch}/test", None),
                               ("POST", f"/v1/notify/channels/{ch}/confirm", {"code": "1"})):
        r = server.request(method, path, body, token=other["token"])
        assert (r.status, r.code) == (404, "no_such_channel"), (path, r)
    # the owner still has it
    r = server.request("GET", "/v1/notify/channels", token=user["token"])
    assert [c["id"] for c in r.json["items"]] == [ch]


def test_t710_answers_match_the_schemas(make_server, receiver, smtp):
    import yaml
    from test_t101_openapi import SPEC_PATH, check
    with open(SPEC_PATH) as f:
        spec = yaml.safe_load(f)
    server, host, user = lab(make_server, smtp)
    tok = user["token"]
    base = "/v1/notify/channels"
    hook = check(spec, add(server, user, "webhook", receiver.url), "POST", base, 201)
    mail = check(spec, add(server, user, "email", "schema@example.com"), "POST", base, 201)
    check(spec, add(server, user, "webhook", "http://x:y@example.com/"), "POST", base, 400)
    check(spec, add(server, user, "webhook", receiver.url), "POST", base, 409)
    check(spec, server.request("GET", base, token=tok), "GET", base, 200)
    path = f"{base}/{hook['id']}/test"
    check(spec, server.request("POST", path, token=tok), "POST", path, 202,
          f"{base}/{{id}}/test")
    path = f"{base}/{mail['id']}/test"
    check(spec, server.request("POST", path, token=tok), "POST", path, 409,
          f"{base}/{{id}}/test")
    code = code_of(wait_for(lambda: smtp.to("schema@example.com"), timeout=30,
                            what="the code")[0])
    path = f"{base}/{mail['id']}/confirm"
    check(spec, server.request("POST", path, {"code": "x"}, token=tok), "POST", path, 400,
          f"{base}/{{id}}/confirm")
    check(spec, server.request("POST", path, {"code": code}, token=tok), "POST", path, 200,
          f"{base}/{{id}}/confirm")
    check(spec, server.request("GET", "/v1/notify/kinds", token=tok), "GET", "/v1/notify/kinds",
          200)
    path = "/v1/notify/kinds/oom"
    check(spec, server.request("POST", path, {"enabled": False}, token=tok), "POST", path, 200,
          "/v1/notify/kinds/{kind}")
    path = "/v1/notify/kinds/nope"
    check(spec, server.request("POST", path, {"enabled": False}, token=tok), "POST", path, 404,
          "/v1/notify/kinds/{kind}")
    wait_for(lambda: any(e["kind"] == "test" and e["state"] == "sent" for e in log(server, user)),
             timeout=30, what="the test message sent")
    check(spec, server.request("GET", "/v1/notify/log", token=tok), "GET", "/v1/notify/log", 200)
    path = f"{base}/{hook['id']}"
    r = server.request("DELETE", path, token=tok)
    assert r.status == 204, r
    check(spec, server.request("DELETE", path, token=tok), "DELETE", path, 404, f"{base}/{{id}}")


def test_t710_a_renters_own_event_notifies(make_server, receiver):
    """balance_low belongs to the renter, not to one instance."""
    server, host, _ = lab(make_server)
    price = [m for m in sample_catalog()["gpu_models"]
             if m["name"] == MODEL][0]["price_per_hour_micros"]
    # a balance of exactly the hour that starting needs: once it runs, it
    # covers less than an hour
    other = Cluster(server, None).renter(credit_micros=price)
    assert add(server, other, "webhook", receiver.url).status == 201
    iid = create(server, host, other)
    report(host, iid, "running")

    def warned():
        report(host, iid, "running")  # the meter charges up to the host's last report
        r = server.request("POST", "/v1/admin/billing/run", {}, token=server.admin_token)
        assert r.status == 200, r
        return [b for b in receiver.bodies() if b["kind"] == "balance_low"]
    low = wait_for(warned, timeout=60, interval=0.5, what="the balance_low webhook")[0]
    assert low["instance_id"] == "" and "minutes" in low["event"]["message"], low
