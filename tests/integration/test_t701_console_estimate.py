"""t701: which card fits in the web console's market (issue 15, item 5), in
Debian's chromium driven by tests/browser/t701_estimate.mjs against the real
suanlid: the "Will it fit?" form asks POST /v1/estimate (the answer `suanli
estimate` prints) and keeps the hosts whose free GPUs hold the model, with
the GPUs needed there; a size that is not one shows the API's message and
all hosts again. Hosts are ApiHosts as in t700: 2 RTX 4090s, 2 A100 80GB."""
import os

from conftest import PASSWORD, ROOT
from test_t510_console_renter import browse
from test_t700_estimate import Host

SCRIPT = os.path.join(ROOT, "tests", "browser", "t701_estimate.mjs")


def test_t701_market_will_it_fit(make_server):
    server = make_server()
    small = Host(server, 2, "NVIDIA GeForce RTX 4090", 24564)
    big = Host(server, 2, "NVIDIA A100 80GB PCIe", 81920)
    user = server.register()
    out = browse(SCRIPT, {"SUANLI_URL": server.url, "SUANLI_EMAIL": user["email"],
                          "SUANLI_PASSWORD": PASSWORD})
    r = out["results"]
    both = sorted([small.node_id, big.node_id])
    assert sorted(h["node"] for h in r["hosts_before"]) == both
    assert all(h["need"] is None for h in r["hosts_before"])
    # 30B in bf16 (~58 GiB): one A100; two 4090s are not enough
    assert r["hosts_30b"] == [{"node": big.node_id, "need": "1"}], r
    assert "30B bf16 Inference needs" in r["summary"] and "GiB" in r["summary"], r
    assert r["parts"] == ["weights", "gradients", "optimizer", "activations", "kv_cache",
                          "overhead"]
    # 7B QLoRA: one GPU of either
    assert sorted((h["node"], h["need"]) for h in r["hosts_7b"]) == [(n, "1") for n in both]
    # a size that is not one: the API's message, and every host again
    assert "model must be a size like 7B" in r["error"], r
    assert sorted(h["node"] for h in r["hosts_after_error"]) == both
    assert "POST /v1/estimate 400 invalid_field" in r.get("api_errors", []), r
