"""Stops nobody clicks (DESIGN.md 3 and 5; docs/design/access.md): the metadata
endpoint http://169.254.169.254/ inside an instance and its `shutdown`
command, scheduled stops and idle stops, on the real suanlid, agent, runc
containers, CNI network and iptables rules."""
import calendar
import json
import subprocess
import time

from conftest import Cli, TEST_SUBNET, wait_for, wait_heartbeats


def epoch(t):
    return calendar.timegm(time.strptime(t, "%Y-%m-%dT%H:%M:%SZ"))


META = "http://169.254.169.254"
TOKEN = "$(cat /.suanli/metadata-token)"


def run_billing(cluster):
    r = cluster.server.request("POST", "/v1/admin/billing/run", {},
                               token=cluster.server.admin_token)
    assert r.status == 200, r


def events(cluster, user, iid):
    r = cluster.server.request("GET", f"/v1/instances/{iid}/events?limit=500",
                               token=user["token"])
    assert r.status == 200, r
    return r.json["items"]


def gpu_meter(cluster, user, iid):
    r = cluster.server.request("GET", f"/v1/instances/{iid}/meters", token=user["token"])
    assert r.status == 200, r
    return [m for m in r.json["items"] if m["kind"] == "gpu"][0]


def curl_inside(cluster, user, inst, args, check=True):
    """curl inside the instance; prints the body, then the status code."""
    p = cluster.ssh(user, inst, f"curl -sS --max-time 5 -w '\\n%{{http_code}}' {args}",
                    check=check)
    lines = p.stdout.rstrip("\n").split("\n")
    return int(lines[-1]) if lines[-1].isdigit() else 0, "\n".join(lines[:-1])


def suanli(cli, user, *args):
    return cli.run(*args, env={"SUANLI_TOKEN": user["token"]})


def test_metadata_answers_the_instance_itself(cluster):
    user = cluster.renter(credit_micros=100_000_000)
    inst = cluster.create(user)
    iid = inst["id"]
    # curl, as a renter's script would
    code, body = curl_inside(cluster, user, inst, f"-H \"Authorization: Bearer {TOKEN}\" {META}/")
    assert code == 200, body
    meta = json.loads(body)
    assert meta["instance_id"] == iid
    assert meta["state"] == "running"
    bal = cluster.server.request("GET", "/v1/balance", token=user["token"]).json
    assert meta["currency"] == bal["currency"]
    assert abs(meta["balance_micros"] - bal["balance_micros"]) < 1_000_000
    assert meta["spend_per_hour_micros"] > 0 and meta["covers_seconds"] > 3600
    assert "root_password" not in body and "password" not in body
    # python inside too, and the shutdown command's --status
    p = cluster.ssh(user, inst,
                    "python3 -c \"import json,urllib.request as u;"
                    "r=u.Request('http://169.254.169.254/instances/" + iid + "',"
                    "headers={'Authorization':'Bearer '+open('/.suanli/metadata-token').read()});"
                    "print(json.load(u.urlopen(r))['instance_id'])\"")
    assert p.stdout.strip() == iid
    p = cluster.ssh(user, inst, "shutdown --status")
    assert json.loads(p.stdout)["instance_id"] == iid
    # the token is the instance's and nobody else's: read-only, root's only
    p = cluster.ssh(user, inst, "stat -c %a /.suanli/metadata-token; "
                    "echo x > /.suanli/metadata-token || echo refused; "
                    "echo x > /usr/local/sbin/shutdown || echo refused")
    assert p.stdout.split() == ["600", "refused", "refused"], p.stdout
    cluster.verb(user, iid, "release")


def test_shutdown_inside_stops_the_instance_and_its_billing(cluster):
    user = cluster.renter(credit_micros=100_000_000)
    inst = cluster.create(user)
    iid = inst["id"]
    wait_heartbeats(cluster.server, cluster.node.node_id)  # billed up to a report while running
    # a training script that ends with shutdown
    p = cluster.ssh(user, inst, "python3 -c 'print(6*7)'; shutdown", check=False)
    assert "42" in p.stdout
    assert "stopping" in p.stdout, (p.stdout, p.stderr)
    cluster.wait_state(user, iid, "stopped")
    evs = events(cluster, user, iid)
    stop = [e for e in evs if e["kind"] == "stop"][-1]
    assert stop["reason"] == "user"
    assert any(e["kind"] == "shutdown" and "inside" in e["message"] for e in evs), evs
    run_billing(cluster)
    m = gpu_meter(cluster, user, iid)
    assert m["ended_at"] is not None
    charged = m["charged_micros"]
    wait_heartbeats(cluster.server, cluster.node.node_id)  # an open meter would grow with it
    run_billing(cluster)
    assert gpu_meter(cluster, user, iid)["charged_micros"] == charged
    cluster.verb(user, iid, "release")


def test_an_instance_cannot_read_or_stop_another(cluster):
    user = cluster.renter(credit_micros=200_000_000)
    other = cluster.renter(credit_micros=100_000_000)
    a = cluster.create(user)
    b = cluster.create(other)
    b_token = cluster.ssh(other, b, "cat /.suanli/metadata-token").stdout.strip()
    assert len(b_token) == 64
    a_token = cluster.ssh(user, a, "cat /.suanli/metadata-token").stdout.strip()
    assert a_token != b_token
    # another instance's token from this one's address
    for path, method in (("/", "GET"), ("/stop", "POST")):
        code, body = curl_inside(cluster, user, a,
                                 f"-X {method} -H 'Authorization: Bearer {b_token}' {META}{path}")
        assert code == 403, body
    # another instance's id with this one's token
    code, body = curl_inside(cluster, user, a, f"-H \"Authorization: Bearer {TOKEN}\" "
                             f"{META}/instances/{b['id']}")
    assert code == 404, body
    code, body = curl_inside(cluster, user, a, f"-X POST -H \"Authorization: Bearer {TOKEN}\" "
                             f"{META}/instances/{b['id']}/stop")
    assert code == 404, body
    # no token, a malformed one
    code, body = curl_inside(cluster, user, a, f"{META}/")
    assert code == 403, body
    code, body = curl_inside(cluster, user, a, f"-H 'Authorization: Bearer x' {META}/")
    assert code == 403, body
    # the agent's port itself is not open to instances, only 169.254.169.254:80
    gateway = TEST_SUBNET.split("/")[0].rsplit(".", 1)[0] + ".1"
    code, body = curl_inside(cluster, user, a, f"http://{gateway}:8775/", check=False)
    assert code == 0, body
    # from the host (not an instance's address) with the right token
    p = subprocess.run(["curl", "-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}",
                        "-H", f"Authorization: Bearer {a_token}", f"http://{gateway}:8775/"],
                       capture_output=True, text=True)
    assert p.stdout == "403", p
    # nothing happened to either
    assert cluster.get(other, b["id"])["state"] == "running"
    assert cluster.get(user, a["id"])["state"] == "running"
    for u, i in ((user, a), (other, b)):
        cluster.verb(u, i["id"], "release")


def test_scheduled_stop_fires_and_can_be_cancelled(cluster, tmp_path):
    user = cluster.renter(credit_micros=100_000_000)
    cli = Cli(cluster.server, str(tmp_path))
    inst = cluster.create(user)
    iid = inst["id"]
    p = suanli(cli, user, "stop", iid, "--in", "3h")
    assert p.returncode == 0, p
    assert "stops at" in p.stdout
    shown = suanli(cli, user, "show", iid).stdout
    assert "stop at" in shown and ("(in 2h 59m" in shown or "(in 3h" in shown), shown
    assert cluster.get(user, iid)["stop_at"] is not None
    p = suanli(cli, user, "stop", iid, "--cancel")
    assert p.returncode == 0, p
    assert cluster.get(user, iid)["stop_at"] is None
    # --at with a full time; then --in a few seconds, which fires
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 7200))
    assert suanli(cli, user, "stop", iid, "--at", at).returncode == 0
    assert cluster.get(user, iid)["stop_at"] == at
    assert suanli(cli, user, "stop", iid, "--in", "3s").returncode == 0
    started = time.time()
    cluster.wait_state(user, iid, "stopped", timeout=30)
    assert time.time() - started < 20
    evs = events(cluster, user, iid)
    assert [e for e in evs if e["kind"] == "stop"][-1]["reason"] == "schedule"
    assert any(e["kind"] == "stop_scheduled" for e in evs)
    assert any(e["kind"] == "stop_schedule_cancelled" for e in evs)
    inst = cluster.get(user, iid)
    assert inst["stop_at"] is None
    # a stopped instance starts again without a stale schedule stopping it
    assert cluster.verb(user, iid, "start").status == 200
    cluster.wait_state(user, iid, "running")
    # the duration is the condition: longer than one pass of the stops loop
    # (instances.stop_check_interval, 5 s), which would act on a stale stop
    time.sleep(6)
    assert cluster.get(user, iid)["state"] == "running"
    cluster.verb(user, iid, "release")


def test_idle_stop_fires_when_idle_and_not_during_ssh(cluster, tmp_path):
    user = cluster.renter(credit_micros=200_000_000)
    cli = Cli(cluster.server, str(tmp_path))
    idle = cluster.create(user)
    busy = cluster.create(user)
    # an SSH session that lasts longer than the idle period
    session = subprocess.Popen(
        ["ssh", "-i", user["key"], "-p", str(busy["ssh"]["port"]),
         "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
         "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", f"root@{busy['ssh']['host']}",
         "sleep 40"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: cluster.ssh(user, busy, "pgrep -x sleep", check=False).returncode == 0,
                 timeout=20, interval=0.2, what="the SSH session to run in the busy instance")
        for inst in (idle, busy):
            p = suanli(cli, user, "idle-stop", inst["id"], "--after", "15s")
            assert p.returncode == 0, p
            assert "after 15s idle" in p.stdout
        started = time.time()
        cluster.wait_state(user, idle["id"], "stopped", timeout=60)
        assert time.time() - started >= 10
        evs = events(cluster, user, idle["id"])
        kinds = [e["kind"] for e in evs]
        assert "idle_warning" in kinds and "idle_stop" in kinds, kinds
        assert kinds.index("idle_warning") < kinds.index("idle_stop")
        assert [e for e in evs if e["kind"] == "stop"][-1]["reason"] == "idle"
        # the one with an SSH session open runs on: two more heartbeats
        # report its session, and it is not idle
        last = wait_heartbeats(cluster.server, cluster.node.node_id, count=2)
        shown = cluster.get(user, busy["id"])
        # each report with the session starts its idle period again
        assert shown["state"] == "running", shown
        assert epoch(shown["idle_since"]) >= epoch(last) - 1, (shown, last)
        assert "idle_warning" not in [e["kind"] for e in events(cluster, user, busy["id"])]
    finally:
        session.kill()
        session.wait()
    # once the session ends it goes idle and stops too; --off keeps it running
    cluster.wait_state(user, busy["id"], "stopped", timeout=60)
    assert cluster.verb(user, busy["id"], "start").status == 200
    cluster.wait_state(user, busy["id"], "running")
    assert suanli(cli, user, "idle-stop", busy["id"], "--off").returncode == 0
    # the duration is the condition: longer than the 15 s idle period it had
    time.sleep(20)
    assert cluster.get(user, busy["id"])["state"] == "running"
    # the account default applies to instances that follow it
    p = suanli(cli, user, "idle-stop", "--default", "1h")
    assert p.returncode == 0 and "after 1h" in p.stdout, p
    assert suanli(cli, user, "idle-stop", busy["id"], "--inherit").returncode == 0
    inst = cluster.get(user, busy["id"])
    assert inst["idle_stop_after_seconds"] == 3600 and inst["idle_stop_source"] == "account"
    assert "after 1h 0m idle (the account's default)" in suanli(cli, user, "show",
                                                                busy["id"]).stdout
    for inst in (idle, busy):
        cluster.verb(user, inst["id"], "release")


def test_bad_input_is_refused_with_what_to_do(cluster, tmp_path):
    user = cluster.renter(credit_micros=100_000_000)
    stranger = cluster.renter(credit_micros=0)
    cli = Cli(cluster.server, str(tmp_path))
    inst = cluster.create(user)
    iid = inst["id"]
    s = cluster.server

    def stop(body, who=user):
        return s.request("POST", f"/v1/instances/{iid}/stop", body, token=who["token"])
    past = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60))
    r = stop({"at": past})
    assert r.status == 400 and "in the past" in r.json["error"]["message"], r
    r = stop({"at": "tomorrow"})
    assert r.status == 400 and "RFC 3339" in r.json["error"]["message"], r
    r = stop({"at": "2030-02-30T01:00:00Z"})
    assert r.status == 400, r
    r = stop({"in_seconds": 0})
    assert r.status == 400, r
    r = stop({"in_seconds": 10 ** 10})
    assert r.status == 400 and "at most" in r.json["error"]["message"], r
    r = stop({"in_seconds": 60, "cancel": True})
    assert r.status == 400 and "one of" in r.json["error"]["message"], r
    r = stop({"in_seconds": 60}, who=stranger)
    assert r.status == 404, r
    r = s.request("POST", f"/v1/instances/{iid}/idle-stop", {"after_seconds": 1},
                  token=user["token"])
    assert r.status == 400 and "from 10s" in r.json["error"]["message"], r
    r = s.request("POST", f"/v1/instances/{iid}/idle-stop", {"after_seconds": 10 ** 9},
                  token=user["token"])
    assert r.status == 400, r
    r = s.request("POST", f"/v1/instances/{iid}/idle-stop", {}, token=user["token"])
    assert r.status == 400 and "inherit" in r.json["error"]["message"], r
    r = s.request("POST", f"/v1/instances/{iid}/idle-stop", {"after_seconds": 60},
                  token=stranger["token"])
    assert r.status == 404, r
    r = s.request("POST", "/v1/me/idle-stop", {"after_seconds": 3}, token=user["token"])
    assert r.status == 400, r
    # the CLI says what it wants before asking
    for args in (["stop", iid, "--at", "25:00"], ["stop", iid, "--in", "soon"],
                 ["stop", iid, "--in", "1h", "--cancel"], ["idle-stop", iid, "--after", "x"],
                 ["idle-stop", iid, "--off", "--after", "1h"]):
        p = suanli(cli, user, *args)
        assert p.returncode == 2, (args, p)
        assert p.stderr.startswith("suanli: "), p.stderr
    p = suanli(cli, user, "stop", iid, "--at", past)
    assert p.returncode == 1 and "in the past" in p.stderr, p
    # a stopped instance has nothing to schedule
    assert cluster.verb(user, iid, "stop").status == 200
    cluster.wait_state(user, iid, "stopped")
    r = stop({"in_seconds": 60})
    assert r.status == 409 and "only a running instance" in r.json["error"]["message"], r
    cluster.verb(user, iid, "release")
