"""`suanlid migrate --from sqlite:PATH --to postgres://...` (issue 16 item 4,
docs/operations.md "Moving to PostgreSQL"): a suanlid on SQLite with renters,
credits, an instance that ran and was billed, and tokens is stopped, copied
into an empty PostgreSQL database, and started on it: every table's row
count is equal, the ledger check passes, and through the API the balance,
the bills, the instance, a login with the old password and the old tokens
all work. A target that already holds a schema, a missing source file and a
copy that fails half-way are refused with nothing left in the target.

Needs a PostgreSQL server: run under scripts/pg-test.sh (SUANLI_TEST_PG)."""
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
import time

import pytest

from conftest import PASSWORD, SUANLID, ApiHost, Cluster, Server, wait_for

PG = os.environ.get("SUANLI_TEST_PG")
pytestmark = pytest.mark.skipif(
    not PG, reason="needs a PostgreSQL server: run under scripts/pg-test.sh (SUANLI_TEST_PG)")


def new_database(name):
    """An empty database on the test server; its URI."""
    subprocess.run(["psql", "-qAt", PG, "-c", f"DROP DATABASE IF EXISTS {name}"], check=True,
                   capture_output=True)
    subprocess.run(["psql", "-qAt", PG, "-c", f"CREATE DATABASE {name}"], check=True,
                   capture_output=True)
    head, sep, query = PG.partition("?")
    return re.sub(r"/[^/]*$", "/" + name, head) + sep + query


def psql(uri, sql):
    run = subprocess.run(["psql", "-X", "-qAt", "-v", "ON_ERROR_STOP=1", uri, "-c", sql],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


def pg_counts(uri):
    tables = psql(uri, "SELECT table_name FROM information_schema.tables WHERE table_schema ="
                       " current_schema() AND table_type = 'BASE TABLE'").split()
    return {t: int(psql(uri, f'SELECT COUNT(*) FROM "{t}"')) for t in tables}


def sqlite_counts(path):
    db = sqlite3.connect(path)
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"
                                           " AND name NOT LIKE 'sqlite%'")]
        return {t: db.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in tables}
    finally:
        db.close()


def migrate(src, dst):
    return subprocess.run([SUANLID, "migrate", "--from", src, "--to", dst],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def installation():
    """A stopped suanlid on SQLite with what an installation holds."""
    d = tempfile.mkdtemp(prefix="suanli-t810-")
    s = Server(d, {"store": f"sqlite:{d}/suanli.db"}).start()
    try:
        c = Cluster(s, None)
        host = ApiHost(s, gpus=4, image="t810-image")
        users = [c.renter(credit_micros=50_000_000) for _ in range(2)]
        r = c.create(users[0], gpus=1, image="t810-image", wait=False)
        assert r.status == 201, r
        iid = r.json["id"]
        desired = s.request("GET", f"/v1/nodes/{host.node_id}/desired", token=host.token).json
        gen = next(i["generation"] for i in desired["instances"] if i["id"] == iid)
        host.heartbeat([{"id": iid, "state": "running", "generation": gen}])
        wait_for(lambda: c.get(users[0], iid)["state"] == "running", what="running")

        def billed():  # a silent host's instances are not billed: it beats
            host.heartbeat([{"id": iid, "state": "running", "generation": gen}])
            r = s.request("POST", "/v1/admin/billing/run", {}, token=s.admin_token)
            assert r.status == 200, r
            return s.request("GET", "/v1/bills/charges", token=users[0]["token"]).json["items"]
        wait_for(billed, timeout=30, interval=0.5, what="a charge for the instance")
        # stopped and billed to its end: its meter's row is written (an open
        # meter's rows wait for its day to be whole)
        assert c.verb(users[0], iid, "stop").status == 200

        def closed():
            host.heartbeat([{"id": iid, "state": "stopped", "generation": gen}])
            r = s.request("POST", "/v1/admin/billing/run", {}, token=s.admin_token)
            assert r.status == 200, r
            items = s.request("GET", "/v1/bills/charges", token=users[0]["token"]).json["items"]
            return [x for x in items if x["kind"] == "gpu" and not x["open"]]
        wait_for(closed, timeout=30, interval=0.5, what="the stopped meter's row")
        r = s.request("POST", "/v1/tokens", {"name": "t810"}, token=users[0]["token"])
        assert r.status == 201, r
        api_token = r.json["token"]
        seen = {
            "me": s.request("GET", "/v1/me", token=users[0]["token"]).json,
            "bills": s.request("GET", "/v1/bills", token=users[0]["token"]).json,
            "charges": s.request("GET", "/v1/bills/charges", token=users[0]["token"]).json,
            "instance": c.get(users[0], iid),
            "other": s.request("GET", "/v1/me", token=users[1]["token"]).json,
        }
        assert seen["charges"]["items"], "the instance was billed"
        s.stop()
        yield {"dir": d, "server": s, "users": users, "iid": iid, "api_token": api_token,
               "seen": seen, "db": f"{d}/suanli.db"}
    finally:
        s.stop()
        shutil.rmtree(d, ignore_errors=True)


def test_migrate_sqlite_to_postgres(installation):
    inst = installation
    target = new_database("t810_target")
    # more rows than one INSERT batch takes (200), with a text column NULL
    # in some rows and not in others (empty accounts: the ledger holds)
    db = sqlite3.connect(inst["db"])
    with db:
        db.executemany("INSERT INTO accounts (id, user_id, balance_micros, created_at)"
                       " VALUES (?, ?, 0, 0)",
                       [(f"t810:{i}", None if i % 3 else inst["users"][1]["id"])
                        for i in range(450)])
    db.close()
    before = sqlite_counts(inst["db"])
    r = migrate(f"sqlite:{inst['db']}", target)
    assert r.returncode == 0, r.stderr
    assert "ledger check agree" in r.stdout, r.stdout
    after = pg_counts(target)
    assert after == before
    assert before["ledger_entries"] > 0 and before["charges"] > 0

    # the same data directory (its secrets) on the new store
    s = inst["server"]
    s.settings["store"] = target
    s.start()
    users, seen = inst["users"], inst["seen"]
    u = users[0]
    assert s.request("GET", "/v1/me", token=u["token"]).json == seen["me"]
    assert s.request("GET", "/v1/me", token=users[1]["token"]).json == seen["other"]
    assert s.request("GET", "/v1/bills", token=u["token"]).json == seen["bills"]
    assert s.request("GET", "/v1/bills/charges", token=u["token"]).json == seen["charges"]
    got = s.request("GET", f"/v1/instances/{inst['iid']}", token=u["token"]).json
    assert (got["id"], got["state"]) == (inst["iid"], "stopped")
    assert s.login(u["email"], PASSWORD)
    r = s.request("GET", "/v1/me", token=inst["api_token"])
    assert r.status == 200 and r.json["id"] == u["id"], r
    r = s.request("GET", "/v1/admin/ledger/check", token=s.admin_token)
    assert r.status == 200, r
    # identities continue past the copied values: new writes work
    s.credit(u["id"], 1_000_000)
    r = s.request("POST", "/v1/admin/billing/run", {}, token=s.admin_token)
    assert r.status == 200, r
    r = s.request("GET", "/v1/admin/ledger/check", token=s.admin_token)
    assert r.status == 200, r
    s.stop()

    # a target that holds a schema is refused, and left as it was
    r = migrate(f"sqlite:{inst['db']}", target)
    assert r.returncode != 0
    assert "already holds a suanli schema" in r.stderr, r.stderr
    assert pg_counts(target)["ledger_entries"] > after["ledger_entries"]


def test_migrate_refusals(installation):
    inst = installation
    target = new_database("t810_refusals")
    r = migrate(f"sqlite:{inst['dir']}/nothing.db", target)
    assert r.returncode != 0
    assert "no such database file" in r.stderr, r.stderr
    assert not os.path.exists(f"{inst['dir']}/nothing.db")
    r = migrate(f"sqlite:{inst['db']}", f"sqlite:{inst['dir']}/copy.db")
    assert r.returncode != 0 and "PostgreSQL" in r.stderr, r.stderr

    # a copy that fails half-way (a table in the way) leaves nothing
    psql(target, "CREATE TABLE users (x BIGINT)")
    r = migrate(f"sqlite:{inst['db']}", target)
    assert r.returncode != 0
    assert "nothing was written" in r.stderr, r.stderr
    assert psql(target, "SELECT to_regclass('schema_migrations') IS NULL") == "t"
    assert psql(target, "SELECT COUNT(*) FROM users") == "0"

    # a source older than the binary is refused with the way forward
    db = sqlite3.connect(inst["db"])
    with db:
        top = db.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0]
        db.execute("DELETE FROM schema_migrations WHERE version = ?", (top,))
    db.close()
    psql(target, "DROP TABLE users")
    r = migrate(f"sqlite:{inst['db']}", target)
    assert r.returncode != 0
    assert "start this suanlid on it once" in r.stderr, r.stderr
    assert psql(target, "SELECT to_regclass('schema_migrations') IS NULL") == "t"
