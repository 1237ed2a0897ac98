#!/bin/sh
# GPU check for a host with a real NVIDIA GPU (not run in CI: CI machines have
# none). Builds suanli, starts suanlid and suanli-node WITHOUT
# --simulate-gpus on private ports and directories (the integration harness,
# tests/integration/conftest.py), creates an instance with 1 GPU and checks
# that `nvidia-smi -L` inside lists exactly that GPU, by UUID. Also prints
# whether the node used the CDI spec or the device-node fallback.
#
#   sudo bench/gpu-check.sh          # needs root, the driver, runc, CNI
#
# docs/operations.md "GPU hosts" says how to prepare the host.
set -eu
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "gpu-check: run as root" >&2; exit 2; }
command -v nvidia-smi >/dev/null || { echo "gpu-check: no nvidia-smi: no driver" >&2; exit 2; }
nvidia-smi -L
scripts/deps.sh run
make -s all
exec python3 - <<'PY'
import os, subprocess, sys, tempfile
sys.path.insert(0, "tests/integration")
import conftest

name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                      capture_output=True, text=True, check=True).stdout.strip()
model = name.replace("NVIDIA ", "", 1)
d = tempfile.mkdtemp(prefix="suanli-gpu-check-", dir="/var/tmp")
server = conftest.Server(os.path.join(d, "suanlid"))
os.makedirs(server.data_dir)
node = None
ok = False
try:
    server.start()
    admin = server.admin_token
    r = server.request("POST", "/v1/admin/gpu-models",
                       {"name": model, "vram_mib": 1024, "cpu_cores_per_gpu": 2,
                        "memory_mib_per_gpu": 8192, "price_per_hour_micros": 1000000}, token=admin)
    assert r.status in (201, 409), r
    r = server.request("POST", "/v1/admin/join-tokens", {"region": "sample-1"}, token=admin)
    node = conftest.Node(server, os.path.join(d, "node"), r.json["token"], gpus=None).start()
    server.request("POST", "/v1/admin/images", {"name": conftest.IMAGE}, token=admin)
    print("gpu-check: building the image on the node (mmdebstrap, about a minute)...")
    conftest.wait_for(lambda: [i for i in server.request("GET", "/v1/images", token=admin)
                               .json["items"] if i["state"] == "ready"],
                      timeout=900, interval=1, what="the image")
    cluster = conftest.Cluster(server, node)
    user = cluster.renter(credit_micros=10_000_000_000)
    r = server.request("POST", "/v1/instances", {"gpu_model": model, "gpus": 1,
                       "image": conftest.IMAGE, "data_disk_gib": 50}, token=user["token"])
    assert r.status == 201, r
    inst = cluster.wait_state(user, r.json["id"], "running", timeout=120)
    config = os.path.join(node.data_dir, "instances", inst["id"], "bundle", "config.json")
    with open(config) as f:
        text = f.read()
    print("gpu-check: injected by", "CDI (hooks present)" if '"hooks"' in text else
          "CDI or device nodes (no hooks)")
    env = [e for e in __import__("json").loads(text)["process"]["env"] if "VISIBLE" in e]
    print("gpu-check: env", env)
    out = subprocess.run(["runc", "--root", os.path.join(node.data_dir, "runc"), "exec",
                          inst["id"], "nvidia-smi", "-L"], capture_output=True, text=True)
    print("gpu-check: nvidia-smi -L inside:\n" + out.stdout + out.stderr)
    lines = [l for l in out.stdout.splitlines() if l.startswith("GPU ")]
    uuid = [e.split("=", 1)[1] for e in env if e.startswith("NVIDIA_VISIBLE_DEVICES=")][0]
    ok = out.returncode == 0 and len(lines) == 1 and uuid in lines[0]
    cluster.verb(user, inst["id"], "release")
    cluster.wait_state(user, inst["id"], "released", timeout=120)
finally:
    if node:
        node.stop()
    server.stop()
print("gpu-check:", "PASS: the instance sees exactly its GPU" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
