"""t720: metrics per instance (docs/design/metrics.md, issue 15 items 1 and 6).

A real instance of the shared cluster runs a CPU-bound loop and writes to
its data disk; its series, sampled by the agent from its cgroup, disks and
network namespace and sent with the heartbeats, rise in
GET /v1/instances/{id}/metrics. Its simulated GPU has no NVML: the GPU
series are absent and say why. Another renter gets the same 404 as on any
instance route; an admin may read. A rogue node cannot put samples into an
instance that is not on it. Prometheus: suanlid's /metrics shows the
instance's series to an admin's scrape and no renter's series to anyone
else; the agent's /metrics serves the host, and the instances cannot reach
it even though it listens on every address of the host."""
import ipaddress
import subprocess
import time
import urllib.request

from conftest import TEST_SUBNET, ApiHost, wait_for


def host_addresses():
    """The host's global IPv4 addresses outside the instances' subnet."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"],
                         capture_output=True, text=True, check=True).stdout
    net = ipaddress.ip_network(TEST_SUBNET)
    return [a for a in (line.split()[3].split("/")[0] for line in out.splitlines())
            if ipaddress.ip_address(a) not in net][:2]


def metrics(server, iid, token, **query):
    q = "&".join(f"{k}={v}" for k, v in query.items())
    return server.request("GET", f"/v1/instances/{iid}/metrics?{q}", token=token)


def latest(points):
    return points[-1][1] if points else None


def test_a_running_instance_s_series(cluster):
    s = cluster.server
    user = cluster.renter()
    inst = cluster.create(user, gpus=1)
    iid, tok = inst["id"], user["token"]
    try:
        # a CPU-bound loop inside
        cluster.ssh(user, inst, "nohup sh -c 'while :; do :; done' >/dev/null 2>&1 &")

        def busy():
            r = metrics(s, iid, tok, **{"from": int(time.time()) - 120, "step": "10s"})
            assert r.status == 200, r
            cpu = r.json["series"].get("cpu_cores", [])
            # a core when the machine is free; a loaded CI machine gives it less
            return r.json if cpu and max(p[1] for p in cpu[-3:]) > 0.25 else None
        m = wait_for(busy, timeout=120, interval=1, what="the instance's CPU series to rise")
        series, units = m["series"], m["units"]
        assert m["tier"] == "fine" and m["instance_id"] == iid
        assert units["cpu_cores"] == "cores" and units["memory_used_bytes"] == "bytes"
        # its share of the quota the placement gave it (cpu_cores of the view)
        share = latest(series["cpu_share"])
        assert 0 < share <= 1.2, series["cpu_share"]
        assert abs(share - latest(series["cpu_cores"]) / inst["cpu_cores"]) < 0.35
        assert latest(series["memory_used_bytes"]) > 1 << 20
        assert latest(series["memory_limit_bytes"]) == inst["memory_mib"] << 20
        assert latest(series["pids"]) >= 2
        assert latest(series["system_disk_used_bytes"]) > 0
        assert 25 << 30 < latest(series["system_disk_size_bytes"]) <= 30 << 30
        assert 45 << 30 < latest(series["data_disk_size_bytes"]) <= 50 << 30
        for name in ("disk_read_bytes_per_second", "disk_write_bytes_per_second",
                     "network_rx_bytes_per_second", "network_tx_bytes_per_second"):
            assert name in series and all(p[1] >= 0 for p in series[name]), name

        # 64 MiB written to the data disk, through an SSH session: once the
        # rates have a sample to start from, both show
        cluster.ssh(user, inst, "dd if=/dev/zero of=/root/data/f bs=1M count=64 conv=fsync "
                                "2>/dev/null")

        def moved():
            r = metrics(s, iid, tok, **{"from": int(time.time()) - 600, "step": "10s"})
            peak, now = r.json["max"], r.json["series"]
            return r.json if (latest(now["data_disk_used_bytes"]) >= 60 << 20 and
                              max(p[1] for p in peak["disk_write_bytes_per_second"]) > 1 << 20 and
                              max(p[1] for p in peak["network_rx_bytes_per_second"]) > 0) \
                else None
        wait_for(moved, timeout=60, interval=1, what="the disk's use, its writes, network bytes")

        # a simulated GPU: nothing invented, and the reason
        assert not any(k.startswith("gpu") for k in series), series.keys()
        for k in ("utilization_percent", "memory_used_bytes", "temperature_celsius",
                  "power_watts"):
            assert m["absent"][f"gpu0_{k}"] == "simulated GPU: no NVML", m["absent"]

        # another renter: the same 404 as any route of the instance
        other = cluster.renter(credit_micros=0)
        r, ref = metrics(s, iid, other["token"]), s.request("GET", f"/v1/instances/{iid}",
                                                            token=other["token"])
        assert (r.status, r.code) == (404, "no_such_instance") == (ref.status, ref.code), r
        assert r.json["error"]["message"] == ref.json["error"]["message"]
        assert s.request("GET", f"/v1/instances/{iid}/metrics").status == 401
        # an admin may read
        r = metrics(s, iid, s.admin_token, **{"from": int(time.time()) - 120})
        assert r.status == 200 and r.json["series"]["cpu_cores"], r
        # bad parameters say what to do
        r = metrics(s, iid, tok, step="often")
        assert (r.status, r.code) == (400, "invalid_parameter") and "10s" in r.json["error"]["message"]
        r = metrics(s, iid, tok, **{"from": 0, "step": "1s"})
        assert r.status == 400 and "at most 10000 points" in r.json["error"]["message"], r
        # a month, from the coarse tier
        r = metrics(s, iid, tok, **{"from": int(time.time()) - 30 * 86400, "step": "1h"})
        assert r.status == 200 and r.json["tier"] == "coarse" and r.json["series"]["cpu_cores"]

        # Prometheus: suanlid's /metrics, for the operator's scrape only
        r = s.request("GET", "/metrics")
        assert r.status == 200 and "suanli_instance_" not in r.body and iid not in r.body
        r = s.request("GET", "/metrics", token=tok)
        assert r.status == 200 and "suanli_instance_" not in r.body
        def scraped():
            body = s.request("GET", "/metrics", token=s.admin_token).body
            line = f'suanli_instance_cpu_cores{{instance_id="{iid}",renter="{user["id"]}"}} '
            return body if line in body else None
        body = wait_for(scraped, timeout=30, interval=1, what="the instance in /metrics")
        assert "# TYPE suanli_instance_memory_used_bytes gauge" in body
        assert f'suanli_instance_disk_size_bytes{{instance_id="{iid}",renter="{user["id"]}",' \
               f'disk="data"}}' in body
        assert "suanli_instance_gpu_" not in body  # simulated: no GPU series

        # the agent's /metrics, on the host
        port = cluster.node.metrics_port
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        body = body.decode()
        assert f'suanli_instance_cpu_cores{{instance_id="{iid}",renter="{user["id"]}"}}' in body
        assert "suanli_node_metrics_cpu_seconds_total" in body
        # it listens on every address of the host, the bridge's gateway
        # included; the host reaches it there, an instance does not
        gateway = str(next(ipaddress.ip_network(TEST_SUBNET).hosts()))
        urllib.request.urlopen(f"http://{gateway}:{port}/metrics", timeout=10).read()
        for addr in (gateway, *host_addresses()):
            p = cluster.ssh(user, inst, f"timeout 5 bash -c 'echo > /dev/tcp/{addr}/{port}' "
                                        f"&& echo reached || echo refused", check=False)
            assert p.stdout.strip().endswith("refused"), (addr, p.stdout, p.stderr)
    finally:
        cluster.ssh(user, inst, "pkill -f 'while :' || true", check=False)
        cluster.verb(user, iid, "release")


def test_a_rogue_node_cannot_report_for_anothers_instance(cluster):
    """A node speaks for the instances placed on it: another enrolled
    node's samples about this instance are skipped, and its heartbeat is
    not refused for them (an honest agent whose instance just moved away
    sends such)."""
    s = cluster.server
    user = cluster.renter()
    inst = cluster.create(user, gpus=1)
    iid, tok = inst["id"], user["token"]
    try:
        rogue = ApiHost(s)
        now = int(time.time())
        r = s.request("POST", f"/v1/nodes/{rogue.node_id}/heartbeat", {
            "inventory": rogue.inventory(), "metrics": [{
                "id": iid, "names": ["cpu_cores", "pids"],
                # ahead of the agent's own (within suanlid's allowance for
                # clocks), so that stored they would stand out and shut
                # the agent's out
                "samples": [[now + 60, 63.0, 4242], [now + 62, 63.0, 4242]],
                "absent": {"cpu_cores": "made up"}}]}, token=rogue.token)
        assert r.status == 200, r
        # the real agent's samples arrive, the rogue's never do
        def sampled():
            m = metrics(s, iid, tok, **{"from": now - 120, "to": now + 120, "step": "10s"}).json
            # (a rate such as cpu_cores needs a second sample)
            return m if m["series"].get("pids") and m["series"].get("cpu_cores") else None
        m = wait_for(sampled, timeout=60, interval=1, what="the agent's samples")
        assert all(p[1] < 60 for p in m["max"]["cpu_cores"]), m["max"]["cpu_cores"]
        assert all(p[1] != 4242 for p in m["max"]["pids"])
        assert m["absent"].get("cpu_cores") is None
        # nor in the operator's Prometheus series
        body = s.request("GET", "/metrics", token=s.admin_token).body
        # (the instance's own lines: a request counter may well read 63)
        mine = [x for x in body.splitlines() if f'instance_id="{iid}"' in x]
        assert mine, body[-2000:]
        assert not [x for x in mine if x.split()[-1] in ("4242", "63")], mine
    finally:
        cluster.verb(user, iid, "release")
