"""T800: several suanlid replicas on one PostgreSQL database (issue 16 items 2
and 3; docs/design/control-plane.md, "Replicas and the leader").

Two replicas share a database on a PostgreSQL server of this module's own
(started as scripts/pg-test.sh starts one, so that a test may stop it), behind
Debian's nginx, which balances between them; the host (an agent speaking the
node API: enrollment, heartbeats, its desired state) and every client but
the ones asking a replica about itself talk to the balancer. Checked:

* calls through the balancer land on both replicas; exactly one leads, and
  only it runs background work (suanli_background_runs_total);
* a replica whose secret.key differs from the database's, or which has none,
  refuses to start and names the file to copy;
* a commit on one replica wakes, at once, an agent long-polling its desired
  state on the other, and an event stream open on the other;
* forced overlap (leader.always=true: both settle every second, and manual
  passes on both at once): no double charge, every meter equals its formula,
  billing and ledger checks pass (t320's checker, across replicas);
* kill -9 of the leader while it settles: the other leads within two settle
  intervals and settles on; the same checks pass;
* a replica that loses the database answers 503 on /healthz, and 200 (and
  leads again) when it returns."""
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import http.client

import pytest

from conftest import (TEST_PORTS, TEST_STORE, ApiHost, Cluster, Server, nginx_conf, wait_for)
from test_t320_billing_crash import CREDIT, Checker

pytestmark = pytest.mark.skipif(
    TEST_STORE != "postgres",
    reason="replicas share a PostgreSQL database: run with SUANLI_TEST_STORE=postgres "
           "under scripts/pg-test.sh")

PG_BIN = os.environ.get("SUANLI_PG_BIN", "/usr/lib/postgresql/15/bin")
SETTLE = 2  # billing.settle_interval of the replicas, seconds
NET_ERRORS = (OSError, urllib.error.URLError, http.client.HTTPException)


class PrivatePg:
    """A PostgreSQL server of the module's own, made as scripts/pg-test.sh
    makes one (Unix socket only, trust, as the user postgres), which the
    tests may stop and start."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="suanli-t800-pg-", dir="/tmp")
        os.chmod(self.dir, 0o755)
        shutil.chown(self.dir, "postgres")
        self.data = os.path.join(self.dir, "data")
        self.run("initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8",
                 "--locale=C.UTF-8")
        self.start()
        self.run("createdb", "-h", self.dir, "-U", "postgres", "suanli")
        self.uri = f"postgresql:///suanli?host={self.dir}&user=postgres"

    def run(self, tool, *args):
        gid = subprocess.run(["id", "-g", "postgres"], capture_output=True, text=True,
                             check=True).stdout.strip()
        p = subprocess.run(["setpriv", "--reuid=postgres", f"--regid={gid}", "--init-groups",
                            "--", os.path.join(PG_BIN, tool), *args],
                           capture_output=True, text=True)
        assert p.returncode == 0, (tool, p.stdout, p.stderr)

    def start(self):
        self.run("pg_ctl", "-D", self.data, "-l", os.path.join(self.dir, "server.log"), "-w",
                 "-t", "60", "-o", f"-c listen_addresses='' -c unix_socket_directories='{self.dir}'"
                 " -c fsync=off -c full_page_writes=off -c synchronous_commit=off", "start")

    def stop(self, mode="fast"):
        self.run("pg_ctl", "-D", self.data, "-m", mode, "-w", "stop")

    def destroy(self):
        subprocess.run(["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--",
                        os.path.join(PG_BIN, "pg_ctl"), "-D", self.data, "-m", "immediate", "-w",
                        "stop"], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def range_port(offset):
    """A free loopback port in the tests' range (its top hundred, below what
    other modules take from its top)."""
    import socket
    lo = int(TEST_PORTS[1]) - 300
    for port in range(lo + offset, lo + 100):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port in the tests' range")


class Balancer:
    """Debian's nginx, round robin over the replicas."""

    def __init__(self, directory, replicas):
        self.dir = directory
        self.port = range_port(0)
        os.makedirs(os.path.join(directory, "tmp"), exist_ok=True)
        # max_fails=0: a replica that refused a connection is not benched
        # (nginx's default is 10 s), so that killing one and then the other
        # leaves the live one in the rotation; failed connects still go on
        # to the next replica
        upstreams = "".join(f"        server 127.0.0.1:{r.port} max_fails=0;\n"
                            for r in replicas)
        conf = nginx_conf(directory, f"""    upstream suanlid {{
{upstreams}    }}
    server {{
        listen 127.0.0.1:{self.port};
        location / {{
            proxy_pass http://suanlid;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_connect_timeout 2s;
            proxy_read_timeout 120s;
        }}
    }}
""")
        self.proc = subprocess.Popen(["nginx", "-c", conf, "-p", directory],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

        probe = self.front(replicas[0])

        def answers():
            assert self.proc.poll() is None, open(f"{directory}/error.log").read()
            try:
                return probe.request("GET", "/healthz").status == 200
            except NET_ERRORS:
                return False
        wait_for(answers, timeout=15, what="the balancer to answer")

    def front(self, replica):
        """A Server-like handle whose calls go through the balancer (the
        admin's password is the first replica's)."""
        via = Server.__new__(Server)
        via.__dict__.update(replica.__dict__)
        via.url = f"http://127.0.0.1:{self.port}"
        via._admin_token = None
        return via

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def copy_secrets(src, dst):
    os.makedirs(dst, exist_ok=True)
    for name in ("secret.key", "front-token"):
        shutil.copy(os.path.join(src.data_dir, name), os.path.join(dst, name))


def health(replica):
    try:
        r = replica.request("GET", "/healthz", timeout=5)
    except NET_ERRORS:
        return None
    return r


def metric(replica, name):
    r = replica.request("GET", "/metrics", timeout=10)
    assert r.status == 200, r
    for line in r.body.splitlines():
        if line.startswith(name + " "):
            return int(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


def leaders(replicas):
    return [r for r in replicas if r.proc and (h := health(r)) and h.status == 200
            and h.json["leader"]]


class Agent(threading.Thread):
    """The host's heartbeats, every half second through the balancer: its
    instances as their desired state says (running ones run). Errors (a
    replica killed under it) are retried at the next beat."""

    def __init__(self, front, host):
        super().__init__(daemon=True)
        self.front, self.host = front, host
        self.stopping = threading.Event()

    def beat(self):
        r = self.front.request("GET", f"/v1/nodes/{self.host.node_id}/desired",
                               token=self.host.token, timeout=10)
        if r.status != 200:
            return
        report = [{"id": i["id"], "generation": i["generation"],
                   "state": {"running": "running", "stopped": "stopped"}.get(i["desired"],
                                                                            "absent")}
                  for i in r.json["instances"]]
        self.front.request("POST", f"/v1/nodes/{self.host.node_id}/heartbeat", {
            "inventory": self.host.inventory(), "instances": report,
            "images": [{"name": self.host.image, "state": "ready"}],
            "terminals": False}, token=self.host.token, timeout=10)

    def run(self):
        while not self.stopping.is_set():
            try:
                self.beat()
            except NET_ERRORS:
                pass
            self.stopping.wait(0.5)

    def stop(self):
        self.stopping.set()
        self.join(15)


@pytest.fixture(scope="module")
def replicas():
    d = tempfile.mkdtemp(prefix="suanli-t800-", dir="/var/tmp")
    pg = PrivatePg()
    settings = {"store": pg.uri, "billing.settle_interval": str(SETTLE),
                "nodes.heartbeat_interval": "1",
                "nodes.ssh_port_min": str(int(TEST_PORTS[1]) - 199),
                "nodes.ssh_port_max": str(int(TEST_PORTS[1]) - 100)}
    a = Server(os.path.join(d, "a"), settings)
    b = Server(os.path.join(d, "b"), settings)
    lb, agent = None, None
    try:
        os.makedirs(a.data_dir)
        a.start()
        copy_secrets(a, b.data_dir)
        b.start()
        # the admin's password, which only the first replica printed, for
        # the harness's logins on b
        shutil.copy(os.path.join(a.data_dir, "admin-password"), b.data_dir)
        lb = Balancer(os.path.join(d, "lb"), [a, b])
        front = lb.front(a)
        host = ApiHost(front, gpus=8, image="t800-image")
        agent = Agent(front, host)
        agent.start()
        yield {"a": a, "b": b, "pg": pg, "lb": lb, "front": front, "host": host,
               "dir": d, "settings": settings}
    finally:
        if agent:
            agent.stop()
        if lb:
            lb.stop()
        a.stop()
        b.stop()
        pg.destroy()
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def renters(replicas):
    """Three renters with CREDIT each and running instances (one of them
    also stopped: storage only), made through the balancer."""
    front = replicas["front"]
    c = Cluster(front, None)
    users = [c.renter(credit_micros=CREDIT) for _ in range(3)]
    for u, gpus in zip(users, (1, 2, 1)):
        r = c.create(u, gpus=gpus, image="t800-image", wait=False)
        assert r.status == 201, r
        c.wait_state(u, r.json["id"], "running", timeout=30)
    r = c.create(users[2], gpus=1, image="t800-image", data_disk_gib=200, wait=False)
    assert r.status == 201, r
    c.wait_state(users[2], r.json["id"], "running", timeout=30)
    assert c.verb(users[2], r.json["id"], "stop").status == 200
    c.wait_state(users[2], r.json["id"], "stopped", timeout=30)
    return users


def settled_at_least(front, users, t):
    """Every running meter of users is settled to t or later."""
    import calendar
    for u in users:
        r = front.request("GET", "/v1/instances?limit=500", token=u["token"])
        if r.status != 200:
            print(f"t800: through the balancer: {r}", flush=True)
            return False
        for inst in r.json["items"]:
            r = front.request("GET", f"/v1/instances/{inst['id']}/meters?limit=500",
                              token=u["token"])
            if r.status != 200:
                print(f"t800: through the balancer: {r}", flush=True)
                return False
            for m in r.json["items"]:
                if m["ended_at"] is None and calendar.timegm(
                        time.strptime(m["settled_until"], "%Y-%m-%dT%H:%M:%SZ")) < t:
                    return False
    return True


def test_one_leader_both_serve(replicas):
    a, b, front = replicas["a"], replicas["b"], replicas["front"]
    wait_for(lambda: len(leaders([a, b])) == 1, timeout=10, what="one leader")
    lead = leaders([a, b])[0]
    other = b if lead is a else a
    assert metric(lead, "suanli_leader") == 1 and metric(other, "suanli_leader") == 0
    # only the leader runs background work
    runs = {r.port: metric(r, "suanli_background_runs_total") for r in (a, b)}
    wait_for(lambda: metric(lead, "suanli_background_runs_total") > runs[lead.port] + 2,
             timeout=10, what="background runs in the leader")
    assert metric(other, "suanli_background_runs_total") == runs[other.port] == 0
    # calls through the balancer land on both
    marks = {r.port: os.path.getsize(r.log_path) for r in (a, b)}
    for _ in range(8):
        assert front.request("GET", "/v1/regions", token=front.admin_token).status == 200
    for r in (a, b):
        with open(r.log_path, errors="replace") as f:
            f.seek(marks[r.port])
            assert "GET /v1/regions 200" in f.read(), f"no call reached replica {r.url}"
    # both are healthy and say which leads
    for r in (a, b):
        h = health(r)
        assert h.status == 200 and h.json["leader"] == (r is lead), h


def test_replica_with_other_secrets_refuses(replicas):
    a = replicas["a"]
    c = Server(os.path.join(replicas["dir"], "c"), replicas["settings"])
    os.makedirs(c.data_dir)
    # no key at all: it must not make one of its own
    with pytest.raises(RuntimeError) as e:
        c.start()
    assert "secret.key" in str(e.value) and c.data_dir in str(e.value), e.value
    assert not os.path.exists(os.path.join(c.data_dir, "secret.key"))
    # another key: refused, with both fingerprints named
    with open(os.path.join(c.data_dir, "secret.key"), "wb") as f:
        f.write(os.urandom(32))
    os.chmod(os.path.join(c.data_dir, "secret.key"), 0o600)
    with pytest.raises(RuntimeError) as e:
        c.start()
    assert "not the key this database was made with" in str(e.value), e.value
    # the right one: it starts and serves
    copy_secrets(a, c.data_dir)
    try:
        c.start()
        assert health(c).json["leader"] is False
    finally:
        c.stop()


def test_commits_reach_the_other_replica(replicas, renters):
    """A commit on A wakes an agent waiting on B at once (not at its wait's
    end) and an event stream open on B."""
    a, b, host = replicas["a"], replicas["b"], replicas["host"]
    u = renters[0]
    path = f"/v1/nodes/{host.node_id}/desired"
    rev = b.request("GET", path, token=host.token).json["revision"]
    answer = {}

    def wait_on_b():
        t0 = time.time()
        r = b.request("GET", f"{path}?after={rev}&wait=25", token=host.token, timeout=40)
        answer.update(r=r, took=time.time() - t0)
    waiter = threading.Thread(target=wait_on_b)
    waiter.start()
    time.sleep(0.5)  # the long poll is parked in B (it answers at once otherwise)
    assert not answer, answer
    made = a.request("POST", "/v1/instances", {"gpu_model": "RTX 4090", "gpus": 1,
                                               "image": "t800-image", "data_disk_gib": 50},
                     token=u["token"])
    assert made.status == 201, made
    waiter.join(40)
    assert answer["r"].status == 200, answer
    assert made.json["id"] in {i["id"] for i in answer["r"].json["instances"]}
    assert answer["took"] < 3.5, f"B's waiting agent heard of A's commit after {answer['took']}s"

    # an event stream on B sees A's change (the new instance's release)
    conn = http.client.HTTPConnection("127.0.0.1", b.port, timeout=15)
    conn.request("GET", "/v1/events/stream", headers={"Authorization": f"Bearer {u['token']}",
                                                       "Accept": "text/event-stream"})
    resp = conn.getresponse()
    assert resp.status == 200
    got = []

    def read_until_release():
        for raw in resp:
            line = raw.decode(errors="replace")
            got.append(line)
            if line.startswith("data:") and made.json["id"] in line and '"releas' in line:
                return
    reader = threading.Thread(target=read_until_release, daemon=True)
    reader.start()
    time.sleep(0.5)
    t0 = time.time()
    assert a.request("POST", f"/v1/instances/{made.json['id']}/release", {},
                     token=u["token"]).status == 200
    reader.join(10)
    took = time.time() - t0
    conn.close()
    assert not reader.is_alive(), "B's stream never told of A's release: " + "".join(got)[-2000:]
    assert took < 3, took
    # the agent takes it down: absent
    wait_for(lambda: a.request("GET", f"/v1/instances/{made.json['id']}",
                               token=u["token"]).json["state"] in ("releasing", "released"),
             timeout=10)


def test_forced_overlap_no_double_charge(replicas, renters):
    """leader.always=true: both replicas settle every second, and manual
    passes hit both at once; the money checks pass."""
    a, b, front = replicas["a"], replicas["b"], replicas["front"]
    checker = Checker(front, renters, 0, time.time())
    checker.check_all(-1, full=True)
    for s in (a, b):
        s.stop()
        s.settings.update({"leader.always": "true", "billing.settle_interval": "1"})
        s.start()
    try:
        runs = {s.port: metric(s, "suanli_background_runs_total") for s in (a, b)}
        t_start = time.time()
        # manual passes on both at once, besides their loops
        for _ in range(5):
            ths = [threading.Thread(target=s.request,
                                    args=("POST", "/v1/admin/billing/run", {}, s.admin_token))
                   for s in (a, b) for _ in range(2)]
            for t in ths:
                t.start()
            for t in ths:
                t.join(30)
            time.sleep(0.3)
        wait_for(lambda: all(metric(s, "suanli_background_runs_total") > runs[s.port] + 5
                             for s in (a, b)), timeout=15, what="background runs in both")
        wait_for(lambda: settled_at_least(front, renters, t_start + 2), timeout=20,
                 interval=0.5, what="meters settled on by the overlapping replicas")
        checker.check_all(0)
    finally:
        for s in (a, b):
            s.stop()
            s.settings.pop("leader.always")
            s.settings["billing.settle_interval"] = str(SETTLE)
            s.start()
    checker.check_all(1)


def test_kill9_leader_while_settling(replicas, renters):
    """Three rounds: kill -9 of the leader at a random moment of its settle
    interval, a manual pass in flight on it; the other leads within two
    settle intervals and settles on; the money checks pass each time."""
    import random
    a, b, front = replicas["a"], replicas["b"], replicas["front"]
    rng = random.Random()
    checker = Checker(front, renters, 0, time.time())
    checker.check_all(-1, full=True)
    for cycle in range(3):
        wait_for(lambda: len(leaders([a, b])) == 1, timeout=10, what="one leader")
        lead = leaders([a, b])[0]
        other = b if lead is a else a
        time.sleep(rng.uniform(0, SETTLE))  # the random moment is the test
        token = lead.admin_token
        flight = threading.Thread(target=lambda: _quiet(lead.request, "POST",
                                                        "/v1/admin/billing/run", {}, token,
                                                        timeout=10))
        flight.start()
        time.sleep(rng.uniform(0, 0.05))
        lead.kill9()
        t_kill = time.time()
        flight.join(15)
        wait_for(lambda: (h := health(other)) and h.json["leader"], timeout=2 * SETTLE,
                 interval=0.05, what="the other replica to lead within two settle intervals")
        took = time.time() - t_kill
        print(f"\nt800: round {cycle}: took over {took:.2f}s after the kill", flush=True)
        assert took <= 2 * SETTLE
        runs = metric(other, "suanli_background_runs_total")
        wait_for(lambda: settled_at_least(front, renters, t_kill + SETTLE), timeout=6 * SETTLE,
                 interval=0.5, what="meters settled on by the new leader")
        assert metric(other, "suanli_background_runs_total") > runs
        checker.check_all(cycle)
        # the killed one comes back as a follower
        lead.start()
        assert health(lead).json["leader"] is False
        assert health(other).json["leader"] is True
    checker.check_all(3)


def _quiet(fn, *args, **kw):
    try:
        fn(*args, **kw)
    except NET_ERRORS:
        pass


def test_healthz_503_without_the_database(replicas):
    a, b, pg = replicas["a"], replicas["b"], replicas["pg"]
    for r in (a, b):
        assert health(r).status == 200
    pg.stop()
    try:
        for r in (a, b):
            h = wait_for(lambda r=r: (h := health(r)) and h.status == 503 and h, timeout=10,
                         interval=0.1, what=f"{r.url}/healthz to say 503")
            assert h.json["error"]["code"] == "store_unavailable", h
            assert "cannot reach its database" in h.json["error"]["message"], h
        assert leaders([a, b]) == []
    finally:
        pg.start()
    for r in (a, b):
        wait_for(lambda r=r: (h := health(r)) and h.status == 200, timeout=15, interval=0.1,
                 what=f"{r.url}/healthz 200 again")
    wait_for(lambda: len(leaders([a, b])) == 1, timeout=10, what="a leader again")
    # the API works again through the balancer
    front = replicas["front"]
    assert front.request("GET", "/v1/regions", token=front.admin_token).status == 200
    for _ in range(4):
        assert front.request("GET", "/v1/me", token=front.admin_token).status == 200
