#!/usr/bin/python3
"""Which card fits (issue 15, item 5): the latency of POST /v1/estimate on a
market of HOSTS (200) hosts enrolled through the node API (no containers:
a host here is its enrollment and a heartbeat of simulated GPUs, half RTX
4090, half A100 80GB), beside its floors measured in the same run on the
same keep-alive connection: GET /v1/market (the same offers it reads) and
GET /healthz (the HTTP round trip).

Prints a markdown table and writes bench/results/estimate.md.
"""
import http.client
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.parse
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import conftest  # noqa: E402  the integration harness: Server

HOSTS = int(os.environ.get("HOSTS", "200"))
ROUNDS = int(os.environ.get("ROUNDS", "200"))


def call(conn, method, path, token, body=None):
    headers = {"Authorization": "Bearer " + token}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    conn.request(method, path, body=data, headers=headers)
    r = conn.getresponse()
    out = r.read()
    assert r.status == 200, (method, path, r.status, out[:300])
    return json.loads(out)


def enroll(server, admin, i):
    r = server.request("POST", "/v1/admin/join-tokens", {"region": "sample-1"}, token=admin)
    assert r.status == 201, r
    name, vram = (("NVIDIA GeForce RTX 4090", 24564) if i % 2 else
                  ("NVIDIA A100 80GB PCIe", 81920))
    gpus = [{"index": g, "uuid": f"GPU-bench-{uuid.uuid4().hex[:8]}-{g}", "name": name,
             "vram_mib": vram, "simulated": True} for g in range(8)]
    inv = {"cpu_cores": 64, "memory_mib": 512 * 1024, "disk_total_gib": 4096,
           "disk_free_gib": 1000, "disk_free_bytes": 1000 << 30, "instance_disks_bytes": 0,
           "gpus": gpus}
    r = server.request("POST", "/v1/nodes/enroll", {
        "join_token": r.json["token"], "hostname": f"bench-{i}", "address": "192.0.2.1",
        "inventory": inv})
    assert r.status == 201, r
    node, token = r.json["node_id"], r.json["node_token"]
    r = server.request("POST", f"/v1/nodes/{node}/heartbeat",
                       {"inventory": inv, "instances": [], "images": []}, token=token)
    assert r.status == 200, r


def timed(conn, method, path, token, body=None):
    lat = []
    for _ in range(ROUNDS):
        t = time.perf_counter()
        out = call(conn, method, path, token, body)
        lat.append((time.perf_counter() - t) * 1000)
    lat.sort()
    return lat[len(lat) // 2], lat[int(len(lat) * 0.99) - 1], out


def main():
    d = tempfile.mkdtemp(prefix="suanli-bench-estimate-")
    server = conftest.Server(d).start()
    try:
        admin = server.admin_token
        for i in range(HOSTS):
            enroll(server, admin, i)
        token = server.register()["token"]
        u = urllib.parse.urlparse(server.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        rows = []
        for what, method, path, body in (
                ("POST /v1/estimate 7B bf16 lora", "POST", "/v1/estimate",
                 {"model": "7B", "precision": "bf16", "job": "lora"}),
                ("POST /v1/estimate 70B bf16 inference", "POST", "/v1/estimate",
                 {"model": "70B", "job": "inference"}),
                ("floor: GET /v1/market", "GET", "/v1/market", None),
                ("floor: GET /healthz", "GET", "/healthz", None)):
            p50, p99, out = timed(conn, method, path, token, body)
            fits = len(out["offers"]) if "offers" in out else "-"
            rows.append(f"| {what} | {p50:.2f} | {p99:.2f} | {fits} |")
        table = "\n".join([
            f"Which card fits: {HOSTS} hosts of 8 simulated GPUs, {ROUNDS} requests each, "
            "one keep-alive connection",
            "", "| request | p50 ms | p99 ms | offers that fit |", "|---|---|---|---|", *rows])
        print(table)
        os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
        with open(os.path.join(HERE, "results", "estimate.md"), "w") as f:
            f.write(table + "\n")
    finally:
        server.stop()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
