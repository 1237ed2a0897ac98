"""T320: kill -9 of suanlid at random moments, at least 200 times, while
instances run and the billing loop settles every second (DESIGN.md section 4:
"a crash at any point neither loses nor duplicates a micro").

Its own suanlid (billing.settle_interval=1, nodes.heartbeat_interval=1) and
suanli-node with simulated GPUs run four renters' instances: GPU mode, no-GPU
mode, stopped ones whose data disks are larger than the free size (storage
meters), one that a churn thread stops and starts, and short-lived ones it
creates and releases. Some kills land while a POST /v1/admin/billing/run or a
start/stop is in flight. After each restart, from the API only:

* GET /v1/admin/billing/check and /v1/admin/ledger/check say ok;
* every meter's charged_micros is floor(amount * (settled_until - started_at)
  / period_seconds), recomputed here, and the charges inside its interval add
  up to it; meters of one kind of one instance never overlap;
* an instance's charged_micros equals the sum of its charges
  (GET /v1/bills/charges?instance=ID, every page), the sum of its meters, and
  minus the sum of its user's ledger entries of kind charge/refund for it
  (the same transactions, one for one);
* each renter's balance is their credits minus their charges, to the micro,
  and the sum of their ledger;
* nothing is charged past an instance's release;
* settled_until never moves back and charged_micros never decreases, for
  every meter and instance, across all restarts; what was read once (charges,
  ledger entries) never changes or disappears.

Reads of one renter are retried until the newest entry of their ledger is the
same before and after (the billing loop keeps settling while we read): every
change of money writes one, so such a read is one state of the store.

SUANLI_CRASH_SEED replays a run (the seed is printed first);
SUANLI_CRASH_KILLS changes the number of kills (200)."""
import calendar
import http.client
import ipaddress
import json
import os
import random
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error

import pytest

from conftest import (IMAGE, TEST_BRIDGE, TEST_PORTS, TEST_SUBNET, Cluster, Node, Server,
                      cleanup_host, sample_catalog, wait_for, wait_heartbeats)

KILLS = int(os.environ.get("SUANLI_CRASH_KILLS", "200"))
FREE_GIB = sample_catalog()["prices"]["data_disk_free_gib"]
CREDIT = 100_000_000  # 100 units per renter, given once at the start
NET_ERRORS = (OSError, urllib.error.URLError, http.client.HTTPException)


# A node of its own beside the session's cluster (as t280's): its own bridge,
# the second /24 from the top of the tests' subnet (t280 has the top one) and
# ports 100-199 below the top of the tests' range; the session's image copied.
BRIDGE = TEST_BRIDGE[:12] + "bc"
_net = ipaddress.ip_network(TEST_SUBNET)
SUBNET = str(list(_net.subnets(new_prefix=max(_net.prefixlen + 1, 24)))[-2])
PREFIX = SUBNET.rsplit(".", 1)[0] + "."
PORT_MAX = int(TEST_PORTS[1]) - 100
PORT_MIN = PORT_MAX - 99


def copy_image(src, dst):
    os.makedirs(os.path.join(dst, "images"))
    os.makedirs(os.path.join(dst, "layers", "sha256"))
    with open(os.path.join(src, "images", IMAGE + ".json")) as f:
        layers = json.load(f)["layers"]
    for layer in layers:
        subprocess.run(["cp", "-a", os.path.join(src, "layers", "sha256", layer),
                        os.path.join(dst, "layers", "sha256", layer)], check=True)
    shutil.copy(os.path.join(src, "images", IMAGE + ".json"), os.path.join(dst, "images"))


def epoch(t):
    return None if t is None else calendar.timegm(time.strptime(t, "%Y-%m-%dT%H:%M:%SZ"))


def month_of(t):
    return time.strftime("%Y-%m", time.gmtime(t))


@pytest.fixture(scope="module")
def crash_cluster(cluster):
    d = tempfile.mkdtemp(prefix="suanli-t320-", dir="/var/tmp")
    server = Server(os.path.join(d, "suanlid"), {
        "nodes.ssh_port_min": PORT_MIN, "nodes.ssh_port_max": PORT_MAX,
        "billing.settle_interval": "1", "nodes.heartbeat_interval": "1"})
    os.makedirs(server.data_dir)
    node = None
    made = []  # (user, instance id): all released at the end
    try:
        server.start()
        r = server.request("POST", "/v1/admin/join-tokens", {"region": "sample-1"},
                           token=server.admin_token)
        assert r.status == 201, r
        copy_image(cluster.node.data_dir, os.path.join(d, "node"))
        node = Node(server, os.path.join(d, "node"), r.json["token"], extra=[
            "--set", f"network.bridge={BRIDGE}", "--set", f"network.subnet={SUBNET}"])
        # the image before the node: a node that reported its copy first
        # would hold the name for an image this server never had (409
        # image_name_held, seen in CI)
        r = server.request("POST", "/v1/admin/images", {"name": IMAGE, "recipe": "base"},
                           token=server.admin_token)
        assert r.status == 201, r
        node.start()

        def image_ready():
            items = server.request("GET", "/v1/images", token=server.admin_token).json["items"]
            img = [i for i in items if i["name"] == IMAGE][0]
            return img if img["state"] == "ready" else None
        wait_for(image_ready, timeout=60, interval=0.2, what="the copied image to be ready")
        c = Cluster(server, node)
        c.made = made
        yield c
    finally:
        release_everything(server, made)
        if node:
            node.stop()
        server.stop()
        if node:
            cleanup_host(node.data_dir, bridge=BRIDGE, prefix=PREFIX)
        shutil.rmtree(d, ignore_errors=True)


def release_everything(server, made):
    """Best effort, also after a failure: suanlid up, every instance released,
    waited for so the node takes its containers and disks down."""
    try:
        if server.proc is None or server.proc.poll() is not None:
            server.proc = None
            server.start()
    except Exception as e:  # noqa: BLE001 (cleanup must go on)
        print(f"t320 cleanup: suanlid did not start again: {e}")
        return
    users = {u["id"]: u for u, _ in made}
    ids = []
    for u in users.values():
        try:
            r = server.request("GET", "/v1/instances?state=all&limit=500", token=u["token"])
            for inst in r.json["items"]:
                if inst["state"] != "released":
                    server.request("POST", f"/v1/instances/{inst['id']}/release", {},
                                   token=u["token"])
                    ids.append((u, inst["id"]))
        except Exception as e:  # noqa: BLE001
            print(f"t320 cleanup: {e}")
    for u, iid in ids:
        try:
            wait_for(lambda: server.request("GET", f"/v1/instances/{iid}",
                                            token=u["token"]).json["state"] == "released",
                     timeout=60, interval=0.2, what=f"{iid} released")
        except Exception as e:  # noqa: BLE001
            print(f"t320 cleanup: {e}")


class Checker:
    """What the API said before, to check that it only moves forward, and the
    invariants of one state."""

    def __init__(self, s, users, seed, start_time):
        self.s = s
        self.users = users
        self.seed = seed
        self.months = sorted({month_of(start_time), month_of(time.time())})
        self.meters = {}      # meter seq -> (settled_until, charged_micros)
        self.meter_ids = {}   # instance id -> its meters' seqs
        self.charged = {}     # instance id -> charged_micros
        self.charges = {}     # (instance id, month) -> {"cursor": seq, "items": {seq: item}}
        self.ledger = {}      # user id -> {seq: entry}
        self.release_at = {}  # instance id -> time of its release event
        self.transient = []   # billing checks that failed once and passed on a retry
        self.retries = 0

    def fail(self, cycle, what):
        raise AssertionError(f"seed {self.seed}, after kill {cycle}: {what}")

    def get(self, path, token):
        r = self.s.request("GET", path, token=token, timeout=30)
        assert r.status == 200, (path, r)
        return r.json

    # -- reads ---------------------------------------------------------------
    def ledger_top(self, u):
        items = self.get("/v1/ledger?limit=1", u["token"])["items"]
        return items[0]["seq"] if items else 0

    def read_ledger(self, u, full):
        known = self.ledger.setdefault(u["id"], {})
        newest = max(known) if known and not full else 0
        fresh, cursor = {}, None
        while True:
            page = self.get("/v1/ledger?limit=500" + (f"&cursor={cursor}" if cursor else ""),
                            u["token"])
            stop = False
            for e in page["items"]:
                if e["seq"] <= newest:
                    stop = True
                    break
                fresh[e["seq"]] = e
            cursor = page["next_cursor"]
            if stop or cursor is None:
                break
        if full:
            for seq, e in known.items():
                assert fresh.get(seq) == e, ("ledger entry changed or vanished", e,
                                             fresh.get(seq))
        known.update(fresh)
        return known

    def read_charges(self, u, iid, full):
        """The instance's charges: its rows (read once, they never change)
        and its open pieces (what is billed past them, read each time)."""
        items = {}
        for month in self.months:
            c = self.charges.setdefault((iid, month), {"cursor": 0, "items": {}})
            cursor = 0 if full else c["cursor"]
            fresh = {}
            while True:
                page = self.get(f"/v1/bills/charges?instance={iid}&month={month}&limit=500"
                                f"&cursor={cursor}", u["token"])
                for ch in page["items"]:
                    if ch["open"]:
                        items[("open", month, len(items))] = ch
                    else:
                        fresh[ch["seq"]] = ch
                if page["next_cursor"] is None:
                    break
                cursor = int(page["next_cursor"])
            if full:
                for seq, ch in c["items"].items():
                    assert fresh.get(seq) == ch, ("charge changed or vanished", ch,
                                                  fresh.get(seq))
            c["items"].update(fresh)
            if c["items"]:
                c["cursor"] = max(c["items"])
            items.update(c["items"])
        return items

    def snapshot(self, u, full):
        """One state of everything the renter's money is made of."""
        for _ in range(20):
            top = self.ledger_top(u)
            insts = self.get("/v1/instances?state=all&limit=500", u["token"])["items"]
            meters = {i["id"]: self.get(f"/v1/instances/{i['id']}/meters?limit=500",
                                        u["token"])["items"] for i in insts}
            charges = {i["id"]: self.read_charges(u, i["id"], full) for i in insts}
            ledger = self.read_ledger(u, full)
            balance = self.get("/v1/balance", u["token"])["balance_micros"]
            # a meter's last row may be written with no money moving (a
            # stop billed nothing more, its rows close what the passes
            # billed): the meters too must be as they were
            again = {i["id"]: self.get(f"/v1/instances/{i['id']}/meters?limit=500",
                                       u["token"])["items"] for i in insts}
            if self.ledger_top(u) == top and (not ledger or max(ledger) == top) \
                    and again == meters:
                return insts, meters, charges, ledger, balance
            self.retries += 1
            full = False  # what a full read had to check is checked
        raise AssertionError(f"seed {self.seed}: no quiet moment to read {u['id']}'s money")

    # -- invariants ----------------------------------------------------------
    def check_store(self, cycle):
        admin = self.s.admin_token
        for attempt in range(5):
            bc = self.get("/v1/admin/billing/check", admin)
            if bc["ok"]:
                break
            # charges_total and ledger_charges are two statements outside a
            # read transaction: a settlement between them shows as a mismatch
            # once; anything that stays is real
            self.transient.append((cycle, bc))
            time.sleep(0.05)
        else:
            self.fail(cycle, f"billing check: {bc}")
        lc = self.get("/v1/admin/ledger/check", admin)
        if not lc["ok"]:
            self.fail(cycle, f"ledger check: {lc}")

    def check_renter(self, cycle, u, full=False):
        insts, meters, charges, ledger, balance = self.snapshot(u, full)
        entries = sorted(ledger.values(), key=lambda e: e["seq"])
        total_charges = usage = 0
        by_txn = {}  # the renter's plans and refunds per ledger transaction
        for inst in insts:
            iid = inst["id"]
            ms, chs = meters[iid], charges[iid]
            charged = inst["charged_micros"]
            where = f"instance {iid} ({inst['state']})"
            sum_charges = sum(c["amount_micros"] for c in chs.values())
            if charged != sum_charges:
                self.fail(cycle, f"{where}: charged {charged} != its charges {sum_charges}")
            if charged != sum(m["charged_micros"] for m in ms):
                self.fail(cycle, f"{where}: charged {charged} != its meters {ms}")
            if charged < self.charged.get(iid, 0):
                self.fail(cycle, f"{where}: charged went down from {self.charged[iid]} "
                                 f"to {charged}")
            self.charged[iid] = charged
            total_charges += charged
            for c in chs.values():
                if c["meter_seq"] is None:  # a plan or a refund names its transaction
                    by_txn[c["txn_id"]] = by_txn.get(c["txn_id"], 0) + c["amount_micros"]
                else:  # a meter's day or open piece: paid by the usage transactions
                    usage += c["amount_micros"]
            for c in chs.values():
                if not epoch(c["period_from"]) < epoch(c["period_to"]) or \
                        epoch(c["period_from"]) // 86400 != (epoch(c["period_to"]) - 1) // 86400:
                    self.fail(cycle, f"{where}: charge {c} is empty or crosses midnight")
            self.check_meters(cycle, where, ms, chs)
            if inst["state"] in ("releasing", "released"):
                self.check_released(cycle, u, iid, where, ms, chs)
        # each plan or refund in the ledger moves exactly the charges under it;
        # the usage transactions (one per renter and pass) all the meters' days
        # and open pieces
        moved = {e["txn_id"]: -e["amount_micros"] for e in entries
                 if e["kind"] in ("charge", "refund") and not e["memo"].startswith("usage:")}
        if moved != by_txn:
            self.fail(cycle, f"{u['id']}: ledger transactions {moved} != their charges {by_txn}")
        paid = -sum(e["amount_micros"] for e in entries if e["memo"].startswith("usage:"))
        if paid != usage:
            self.fail(cycle, f"{u['id']}: usage transactions moved {paid}, the meters' days and"
                             f" open pieces are {usage}")
        credits = sum(e["amount_micros"] for e in entries if e["kind"] == "credit")
        if credits != CREDIT:
            self.fail(cycle, f"{u['id']}: credits in the ledger {credits} != {CREDIT}")
        if balance != CREDIT - total_charges:
            self.fail(cycle, f"{u['id']}: balance {balance} != credits {CREDIT} - charges "
                             f"{total_charges} = {CREDIT - total_charges}")
        if balance != sum(e["amount_micros"] for e in entries) or \
                (entries and entries[-1]["balance_after_micros"] != balance):
            self.fail(cycle, f"{u['id']}: balance {balance} is not what the ledger says")

    def check_meters(self, cycle, where, ms, chs):
        spans = {}
        for m in ms:
            seq, amount, period = m["seq"], m["amount_micros"], m["period_seconds"]
            started, settled, ended = (epoch(m["started_at"]), epoch(m["settled_until"]),
                                       epoch(m["ended_at"]))
            what = f"{where} meter {seq} ({m['kind']})"
            want = amount * (settled - started) // period
            if m["charged_micros"] != want:
                self.fail(cycle, f"{what}: charged {m['charged_micros']} != floor({amount} * "
                                 f"({settled} - {started}) / {period}) = {want}")
            if settled < started or (ended is not None and (settled > ended or ended < started)):
                self.fail(cycle, f"{what}: settled {settled} outside [{started}, {ended}]")
            inside = [c for c in chs.values() if c["kind"] == m["kind"]
                      and started <= epoch(c["period_from"])
                      and epoch(c["period_to"]) <= settled]
            if sum(c["amount_micros"] for c in inside) != m["charged_micros"]:
                self.fail(cycle, f"{what}: its charges {inside} do not add up to "
                                 f"{m['charged_micros']}")
            rows = [c for c in inside if not c["open"]]
            if m["settlements"] < len(rows):
                self.fail(cycle, f"{what}: {len(rows)} charges, {m['settlements']} "
                                 f"settlements")
            prev = self.meters.get(seq)
            if prev and (settled < prev[0] or m["charged_micros"] < prev[1]):
                self.fail(cycle, f"{what}: went back from {prev} to "
                                 f"{(settled, m['charged_micros'])}")
            self.meters[seq] = (settled, m["charged_micros"])
            cls = "storage" if m["kind"] == "data_disk" else "compute"
            spans.setdefault(cls, []).append((started, ended if ended is not None else settled,
                                              seq))
        for cls, s in spans.items():
            s.sort()
            for a, b in zip(s, s[1:]):
                if b[0] < a[1]:
                    self.fail(cycle, f"{where}: {cls} meters {a[2]} and {b[2]} overlap")
        had = self.meter_ids.setdefault(where.split()[1], set())
        if not had <= {m["seq"] for m in ms}:
            self.fail(cycle, f"{where}: meters {had - {m['seq'] for m in ms}} vanished")
        had.update(m["seq"] for m in ms)

    def check_released(self, cycle, u, iid, where, ms, chs):
        if iid not in self.release_at:
            events = self.get(f"/v1/instances/{iid}/events?limit=500", u["token"])["items"]
            rel = [epoch(e["created_at"]) for e in events if e["kind"] == "release"]
            if not rel:
                self.fail(cycle, f"{where}: no release event")
            self.release_at[iid] = rel[0]
        at = self.release_at[iid]
        for m in ms:
            if m["ended_at"] is None or epoch(m["ended_at"]) > at:
                self.fail(cycle, f"{where}: meter {m['seq']} runs past the release at {at}: {m}")
        for c in chs.values():
            if epoch(c["period_to"]) > at:
                self.fail(cycle, f"{where}: charge {c} is past the release at {at}")

    def check_all(self, cycle, full=False):
        self.check_store(cycle)
        for u in self.users:
            self.check_renter(cycle, u, full)


class Churn(threading.Thread):
    """Keeps suanlid busy between kills: billing passes, stop and start in
    both modes, instances created and released. Connection errors are the
    kills; a 500 is a bug."""

    def __init__(self, cluster, toggler, toggle_id, creator, seed):
        super().__init__(daemon=True)
        self.c, self.s = cluster, cluster.server
        self.toggler, self.toggle_id, self.creator = toggler, toggle_id, creator
        self.rng = random.Random(seed)
        self.stop_now = threading.Event()
        self.errors = []
        self.done = {"run": 0, "stop": 0, "start": 0, "create": 0, "release": 0}
        self.live = None  # the creator's instance id
        self.created = 0

    def call(self, method, path, token, body=None):
        try:
            r = self.s.request(method, path, body, token=token, timeout=10)
        except NET_ERRORS:
            return None
        if r.status >= 500 and r.code != "store_busy":
            self.errors.append((method, path, r))
        return r

    def run(self):
        while not self.stop_now.is_set():
            p = self.rng.random()
            if p < 0.4:
                r = self.call("POST", "/v1/admin/billing/run", self.s.admin_token, {})
                self.done["run"] += bool(r and r.status == 200)
            elif p < 0.7:
                u, iid = self.toggler, self.toggle_id
                r = self.call("GET", f"/v1/instances/{iid}", u["token"])
                state = r.json.get("state") if r and r.status == 200 else None
                if state == "running":
                    r = self.call("POST", f"/v1/instances/{iid}/stop", u["token"], {})
                    self.done["stop"] += bool(r and r.status == 200)
                elif state == "stopped":
                    mode = self.rng.choice(["gpu", "nogpu"])
                    r = self.call("POST", f"/v1/instances/{iid}/start", u["token"],
                                  {"mode": mode})
                    self.done["start"] += bool(r and r.status == 200)
            elif p < 0.8:
                self.create_or_release()
            self.stop_now.wait(self.rng.uniform(0.05, 0.25))

    def create_or_release(self):
        u = self.creator
        if self.live is None:
            if self.created >= 6:
                return
            # a lost answer leaves an instance we do not know of: the checks
            # list every instance, and the cleanup releases them all
            r = self.call("POST", "/v1/instances", u["token"],
                          {"gpu_model": "RTX 4090", "gpus": 1, "image": IMAGE,
                           "data_disk_gib": self.rng.randint(FREE_GIB + 1, FREE_GIB + 12)})
            if r and r.status == 201:
                self.live, self.born = r.json["id"], time.time()
                self.created += 1
                self.done["create"] += 1
        elif time.time() - self.born > self.rng.uniform(3, 20):
            r = self.call("POST", f"/v1/instances/{self.live}/release", u["token"], {})
            if r and r.status == 200:
                self.done["release"] += 1
                self.live = None


def in_flight(s, method, path, token, body):
    """Sends a request from another thread; returns it and a list that holds
    its answer once there is one."""
    answer = []

    def send():
        try:
            answer.append(s.request(method, path, body, token=token, timeout=10).status)
        except NET_ERRORS as e:
            answer.append(e)
    t = threading.Thread(target=send, daemon=True)
    t.start()
    return t, answer


def test_kill9_while_billing_settles(crash_cluster):
    c, s = crash_cluster, crash_cluster.server
    seed = int(os.environ.get("SUANLI_CRASH_SEED") or random.randrange(2**32))
    print(f"\nt320: SUANLI_CRASH_SEED={seed}, {KILLS} kills", flush=True)
    rng = random.Random(seed)
    t_begin = time.time()

    users = [c.renter(credit_micros=CREDIT) for _ in range(4)]
    r1, r2, r3, r4 = users

    def create(u, gpus, disk):
        inst = c.create(u, gpus=gpus, data_disk_gib=disk)
        c.made.append((u, inst["id"]))
        return inst["id"]

    def stop(u, iid):
        assert c.verb(u, iid, "stop").status == 200
        c.wait_state(u, iid, "stopped")

    a = create(r1, 2, FREE_GIB + 10)       # GPU mode + storage
    h = create(r1, 1, 10)                  # stopped and started by in-flight kills
    nogpu = create(r2, 1, FREE_GIB + 20)   # no-GPU mode + storage
    parked = create(r2, 1, FREE_GIB + 14)  # stopped: storage only
    create(r3, 1, FREE_GIB)                # GPU mode, a free-sized disk
    toggled = create(r3, 1, FREE_GIB + 5)  # the churn thread stops and starts it
    gone = create(r4, 1, FREE_GIB + 8)     # released before the kills
    stop(r2, nogpu)
    assert c.verb(r2, nogpu, "start", {"mode": "nogpu"}).status == 200
    c.wait_state(r2, nogpu, "running")
    stop(r2, parked)

    def gone_charged():  # billed at least once before its release
        items = s.request("GET", f"/v1/instances/{gone}/meters", token=r4["token"]).json["items"]
        return any(m["charged_micros"] > 0 for m in items)
    wait_for(gone_charged, timeout=30, interval=0.2, what="a first charge of the instance")
    assert c.verb(r4, gone, "release").status == 200
    c.wait_state(r4, gone, "released")

    checker = Checker(s, users, seed, t_begin)
    checker.check_all(-1, full=True)
    first = dict(checker.meters)
    churn = Churn(c, r3, toggled, r4, rng.randrange(2**32))
    churn.start()
    kinds = {"quiet": 0, "run": 0, "verb": 0}
    caught = {"run": 0, "verb": 0}
    t_kills = time.time()
    try:
        for cycle in range(KILLS):
            kind = rng.choices(["quiet", "run", "verb"], [2, 2, 1])[0]
            kinds[kind] += 1
            pending = None
            # the random waits are the test: kills at any moment of a pass
            if kind == "quiet":
                time.sleep(rng.uniform(0.0, 0.9))
            else:
                time.sleep(rng.uniform(0.0, 0.5))
                if kind == "run":
                    pending = in_flight(s, "POST", "/v1/admin/billing/run", s.admin_token, {})
                else:
                    state = s.request("GET", f"/v1/instances/{h}", token=r1["token"]).json
                    verb = "stop" if state["state"] == "running" else "start"
                    pending = in_flight(s, "POST", f"/v1/instances/{h}/{verb}", r1["token"], {})
                # a loopback request is answered in a few milliseconds
                time.sleep(rng.choice([0, rng.uniform(0.0, 0.003)]))
            s.kill9()
            if pending:
                pending[0].join(15)
                if pending[1] and not isinstance(pending[1][0], int):
                    caught[kind] += 1  # the kill came before its answer
            s.start()
            checker.check_all(cycle, full=(cycle % 40 == 39))
        churn.stop_now.set()
        churn.join(30)
        # a last quiet pass: the loop settles, nothing is killed, after the
        # host has reported since the churn ended
        wait_heartbeats(s, c.node.node_id, count=2)
        r = s.request("POST", "/v1/admin/billing/run", {}, token=s.admin_token)
        assert r.status == 200, r
        checker.check_all(KILLS, full=True)
    finally:
        churn.stop_now.set()
        churn.join(30)

    elapsed = time.time() - t_kills
    moved = sum(checker.meters[q][0] - first[q][0] for q in first)
    print(f"t320: {KILLS} kills in {elapsed:.0f} s ({kinds}); kills before the answer of an "
          f"in-flight billing run: {caught['run']}, of a start/stop: {caught['verb']}; "
          f"churn {churn.done}; {len(checker.meters)} meters, {sum(checker.charged.values())} "
          f"micros charged, {sum(len(v['items']) for v in checker.charges.values())} charges; "
          f"{checker.retries} renter reads retried; billing checks that passed on a retry: "
          f"{len(checker.transient)} {checker.transient[:2]}", flush=True)
    assert not churn.errors, (seed, churn.errors[:5])
    assert kinds["run"] and kinds["verb"]
    assert caught["run"] + caught["verb"] >= max(1, KILLS // 20), \
        (seed, caught, "the kills hardly ever hit a request")
    # the meters that ran before the kills went on being settled through them
    assert moved > 0.5 * elapsed, (seed, moved, elapsed)
    with open(s.log_path, errors="replace") as f:
        log = f.read()
    assert "BUG" not in log and "internal error" not in log, \
        [line for line in log.splitlines() if "BUG" in line or "internal" in line][:5]
