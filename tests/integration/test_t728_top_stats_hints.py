"""What an instance is doing, in the terminal and as hints (issue 15, items 2
and 3; docs/design/metrics.md): `suanli top` and `suanli stats` read the
metrics the host sends (GET /v1/instances/ID/metrics), and suanlid tells the
renter when the system disk fills: a hint in `show`, the instance's JSON and
its events, gone when the disk is freed. On the shared cluster (simulated
GPUs: their series are absent, and top and stats say so). The real suanlid,
agent, runc container and SSH; the conditions are made for real inside the
instance (a CPU-bound loop, a file filling the system disk)."""
import re

from conftest import Cli, wait_for


def cli_for(cluster, user, tmp_path, name):
    return Cli(cluster.server, str(tmp_path / name)), {"SUANLI_TOKEN": user["token"]}


def newest(cluster, user, iid, name, window=120):
    """The newest value of a series over the last window seconds, or None."""
    import time
    now = int(time.time())
    r = cluster.server.request("GET", f"/v1/instances/{iid}/metrics?from={now - window}"
                               f"&to={now + 5}&step=10", token=user["token"])
    assert r.status == 200, r
    newest.last = r.json
    points = r.json["series"].get(name) or []
    return points[-1][1] if points else None


def test_top_and_stats_show_a_busy_instance(cluster, tmp_path):
    alice = cluster.renter()
    inst = cluster.create(alice, data_disk_gib=5)
    cli, env = cli_for(cluster, alice, tmp_path, "alice")
    try:
        # one core busy inside, for the test's length
        cluster.ssh(alice, inst, "nohup sh -c 'while :; do :; done' >/dev/null 2>&1 &")
        # a core on a free machine; a loaded CI machine gives it less, and
        # a host with few cores gives the instance a quota of a quarter
        # core (fresh-machine: 0.25 cores, its whole share)
        def busy():
            cores = newest(cluster, alice, inst["id"], "cpu_cores") or 0
            share = newest(cluster, alice, inst["id"], "cpu_share") or 0
            return cores > 0.2 or share > 0.5
        try:
            wait_for(busy, timeout=90, interval=1, what="the busy loop's CPU in the metrics")
        except AssertionError:
            raise AssertionError(f"metrics: {newest.last}\n{cluster.node.log_text()[-3000:]}")

        # top shows the newest sample of its last minute; on a loaded fresh
        # machine the minute once had memory and no CPU point (a dash): a
        # later sample has it
        def top_row():
            p = cli.run("top", "--once", env=env, check=True)
            row = next((line for line in p.stdout.splitlines() if inst["id"] in line), None)
            assert row, p.stdout
            cores = re.search(r"(\d+\.\d+) cores", row)
            return (p, row) if cores and float(cores.group(1)) > 0.1 else None
        p, row = wait_for(top_row, timeout=60, interval=2, what="the busy loop's CPU in top")
        assert "1 running" in p.stdout, p.stdout
        # a simulated GPU is not measured: a dash, and where to read why
        assert "not measured" in p.stdout and "simulated GPUs have no NVML" in p.stdout, p.stdout

        p = cli.run("stats", inst["id"], "--window", "10m", env=env, check=True)
        lines = {line.split()[0]: line for line in p.stdout.splitlines() if line.strip()}
        assert "cpu_cores" in lines, p.stdout
        assert re.search("[▁▂▃▄▅▆▇█]", lines["cpu_cores"]), lines["cpu_cores"]
        assert "memory_used_bytes" in lines and " of " in lines["memory_used_bytes"], p.stdout
        assert "system_disk_used_bytes" in lines, p.stdout
        assert "simulated GPU: no NVML" in p.stdout and "gpu0_utilization_percent" in p.stdout, \
            p.stdout
        # by name too, and the API's answer with -o json
        p = cli.run("stats", inst["name"], "-o", "json", env=env, check=True)
        assert '"series"' in p.stdout and '"absent"' in p.stdout, p.stdout[:500]
        # bad windows are refused with what to write
        p = cli.run("stats", inst["id"], "--window", "90d", env=env)
        assert p.returncode == 2 and "1m to 31d" in p.stderr, p
        p = cli.run("stats", inst["id"], "--window", "soon", env=env)
        assert p.returncode == 2 and "--window" in p.stderr, p

        # another renter sees neither the instance's stats nor it in top
        bob = cluster.renter(credit_micros=0)
        bcli, benv = cli_for(cluster, bob, tmp_path, "bob")
        p = bcli.run("stats", inst["id"], env=benv)
        assert p.returncode == 4 and "no instance" in p.stderr, p
        p = bcli.run("top", "--once", env=benv, check=True)
        assert inst["id"] not in p.stdout and "no running instance" in p.stdout, p.stdout
    finally:
        cluster.verb(alice, inst["id"], "release")
        cluster.wait_state(alice, inst["id"], "released")


def test_a_full_system_disk_gives_a_hint_that_ends_when_freed(cluster, tmp_path):
    alice = cluster.renter()
    inst = cluster.create(alice, data_disk_gib=5)
    iid = inst["id"]
    cli, env = cli_for(cluster, alice, tmp_path, "alice")

    def hints():
        return cluster.get(alice, iid)["hints"]

    try:
        assert hints() == []
        # fill the system disk past 90 % (fallocate: the host's sparse image
        # does not grow by it)
        size = int(cluster.ssh(alice, inst, "df -B1 --output=size / | tail -1").stdout)
        used = int(cluster.ssh(alice, inst, "df -B1 --output=used / | tail -1").stdout)
        fill = int(size * 0.95) - used
        cluster.ssh(alice, inst, f"fallocate -l {fill} /root/big.bin")

        got = wait_for(lambda: [h for h in hints() if h["kind"] == "system_disk"], timeout=90,
                       interval=1, what="the system disk hint")
        assert "move data to /root/data" in got[0]["message"], got
        p = cli.run("show", iid, env=env, check=True)
        assert "hint: the system disk is" in p.stdout, p.stdout
        # an event (which notifies: kind hint), once
        r = cluster.server.request("GET", f"/v1/instances/{iid}/events", token=alice["token"])
        found = [e for e in r.json["items"] if e["kind"] == "hint"]
        assert len(found) == 1 and found[0]["reason"] == "system_disk", found

        # another renter's view of the instance is a 404, hints and all
        bob = cluster.renter(credit_micros=0)
        r = cluster.server.request("GET", f"/v1/instances/{iid}", token=bob["token"])
        assert r.status == 404, r

        cluster.ssh(alice, inst, "rm /root/big.bin")
        wait_for(lambda: hints() == [], timeout=90, interval=1, what="the hint to end")
        r = cluster.server.request("GET", f"/v1/instances/{iid}/events", token=alice["token"])
        assert len([e for e in r.json["items"] if e["kind"] == "hint"]) == 1, r.json
    finally:
        cluster.verb(alice, iid, "release")
        cluster.wait_state(alice, iid, "released")
