"""Which card fits (docs/design/estimate.md): POST /v1/estimate gives the
GPU memory a model needs for a job, part by part with the formulas, and the
market's offers whose free GPUs hold it; `suanli estimate` prints it and
`suanli market --fits` filters the market by it. The hosts speak the node
API with chosen GPUs (no containers needed): 2 free RTX 4090s (24 GB) on one,
2 A100 80GB on the other."""
import json
import os
import uuid

import pytest
import yaml

from conftest import ApiHost, Cli, PASSWORD
from test_t101_openapi import SPEC_PATH, check


LLAMA2_7B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
             "intermediate_size": 11008, "max_position_embeddings": 4096,
             "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
             "num_key_value_heads": 32, "rms_norm_eps": 1e-05, "tie_word_embeddings": False,
             "torch_dtype": "float16", "vocab_size": 32000,
             "rope_scaling": None, "quantization_config": {"nested": {"deep": [1, 2, 3]}}}


class Host(ApiHost):
    """An ApiHost with GPUs of a chosen name and memory."""

    def __init__(self, server, gpus, name, vram_mib):
        self.gpu_name, self.vram_mib = name, vram_mib
        super().__init__(server, gpus=gpus)

    def inventory(self):
        inv = super().inventory()
        for g in inv["gpus"]:
            g["name"], g["vram_mib"] = self.gpu_name, self.vram_mib
        return inv


@pytest.fixture
def world(make_server, tmp_path):
    server = make_server()
    small = Host(server, 2, "NVIDIA GeForce RTX 4090", 24564)
    big = Host(server, 2, "NVIDIA A100 80GB PCIe", 81920)
    small.heartbeat()
    big.heartbeat()
    renter = server.register()
    cli = Cli(server, str(tmp_path))
    p = cli.run("login", "--email", renter["email"], "--password-stdin", input=PASSWORD + "\n")
    assert p.returncode == 0, p
    return server, small, big, renter, cli


def estimate(server, token, **body):
    return server.request("POST", "/v1/estimate", body, token=token)


def test_t700_estimate_parts_formulas_and_offers(world):
    server, small, big, renter, _ = world
    with open(SPEC_PATH) as f:
        spec = yaml.safe_load(f)
    r = estimate(server, renter["token"], model="7B", precision="bf16", job="inference")
    e = check(spec, r, "POST", "/v1/estimate", 200)
    parts = {p["name"]: p for p in e["parts"]}
    assert list(parts) == ["weights", "gradients", "optimizer", "activations", "kv_cache",
                           "overhead"]
    # 2 bytes per parameter (Hugging Face's guidance: a 7B model ~14 GB in fp16)
    assert parts["weights"]["bytes"] == 14_000_000_000
    assert "× 2" in parts["weights"]["formula"]
    # Llama-2-7B's shape: 0.5 MiB per token, 4096 tokens
    assert parts["kv_cache"]["bytes"] == 2 << 30
    assert "2 × 32 × 32 × 128 × 4096 × 1 × 2" in parts["kv_cache"]["formula"]
    assert parts["overhead"]["bytes"] == 1 << 30
    assert e["total_bytes"] == sum(p["bytes"] for p in e["parts"])
    assert "Llama-2-7B" in e["model"]["source"] and e["context"] == 4096
    # both hosts hold it on one GPU; the cheaper first, each with its price
    offers = [(o["node_id"], o["gpus_needed"]) for o in e["offers"]]
    assert offers == [(small.node_id, 1), (big.node_id, 1)], e["offers"]
    prices = {m["name"]: m["price_per_hour_micros"]
              for m in server.request("GET", "/v1/gpu-models",
                                      token=renter["token"]).json["items"]}
    assert e["offers"][0]["price_per_hour_micros"] == prices["RTX 4090"]
    assert {m["name"]: m["gpus_needed"] for m in e["gpu_models"]}["RTX 4090"] == 1

    # 30B: two 4090s are not enough (3 needed), one A100 is; price × GPUs
    e = estimate(server, renter["token"], model="30B", job="inference").json
    assert [(o["node_id"], o["gpus_needed"]) for o in e["offers"]] == [(big.node_id, 1)]
    assert {m["name"]: m["gpus_needed"] for m in e["gpu_models"]}["RTX 4090"] == 3
    e = estimate(server, renter["token"], model="70B", job="inference").json
    assert [(o["node_id"], o["gpus_needed"]) for o in e["offers"]] == [(big.node_id, 2)]
    assert e["offers"][0]["price_per_hour_micros"] == 2 * prices["A100 80GB"]
    # a full fine-tune of 70B (16 bytes per parameter) fits nothing of 8 GPUs
    e = estimate(server, renter["token"], model="70B", job="full").json
    assert e["offers"] == [] and all(m["gpus_needed"] is None for m in e["gpu_models"])
    parts = {p["name"]: p["bytes"] for p in e["parts"]}
    assert parts["weights"] + parts["gradients"] + parts["optimizer"] == 16 * 70_000_000_000
    # 13B: both 4090s of a host, or one A100
    e = estimate(server, renter["token"], model="13B", job="inference").json
    assert [(o["node_id"], o["gpus_needed"]) for o in e["offers"]] == [
        (small.node_id, 2), (big.node_id, 1)]


def test_t700_estimate_from_config_and_lora(world):
    server, _, big, renter, _ = world
    r = estimate(server, renter["token"], config=LLAMA2_7B, precision="int4", job="lora",
                 lora_rank=64, context=512, checkpointing=True)
    assert r.status == 200, r
    e = r.json
    assert e["model"]["parameters"] == 6738415616
    assert "= 6738415616" in e["model"]["parameter_formula"]
    # LoRA r=64 on all seven linear layers of LLaMA-7B (QLoRA's setting)
    assert e["trainable_parameters"] == 159907840
    assert e["model"]["shape"]["num_key_value_heads"] == 32
    # max_position_embeddings bounds the context
    r = estimate(server, renter["token"], config=LLAMA2_7B, context=8192)
    assert r.status == 400 and "max_position_embeddings" in r.json["error"]["message"], r


BAD = [
    ({}, "model must be a size like 7B"),
    ({"model": "7GB"}, "model must be a size like 7B"),
    ({"model": "-7B"}, "model must be a size like 7B"),
    ({"model": "1e999B"}, "model must be a size like 7B"),
    ({"model": "999T"}, "model must be a size like 7B"),
    ({"model": 7}, "model"),
    ({"model": "7B", "config": LLAMA2_7B}, "one of them"),
    ({"config": "config.json"}, "config"),
    ({"config": {}}, "config.json needs hidden_size"),
    ({"config": {**LLAMA2_7B, "hidden_size": -4096}}, "hidden_size"),
    ({"config": {**LLAMA2_7B, "hidden_size": 10 ** 30}}, ""),
    ({"config": {**LLAMA2_7B, "num_hidden_layers": 1e300}}, "num_hidden_layers"),
    ({"config": {**LLAMA2_7B, "vocab_size": "32000"}}, "vocab_size"),
    ({"config": {**LLAMA2_7B, "num_key_value_heads": 5}}, "multiple"),
    ({"model": "7B", "precision": "fp8"}, "precision must be fp32, bf16, fp16, int8 or int4"),
    ({"model": "7B", "job": "pretrain"}, "job must be inference, full"),
    ({"model": "7B", "precision": "int4", "job": "full"}, "use job lora"),
    ({"model": "7B", "context": 0}, "context"),
    ({"model": "7B", "context": 10 ** 12}, "context"),
    ({"model": "7B", "batch": -1}, "batch"),
    ({"model": "7B", "lora_rank": 0, "job": "lora"}, "lora_rank"),
    ({"model": "7B", "gpus": 8}, "gpus"),
    ({"model": "7B", "region": "nowhere"}, "no region"),
]


def test_t700_bad_input_says_what_to_write(world):
    server, _, _, renter, _ = world
    for body, words in BAD:
        r = server.request("POST", "/v1/estimate", body, token=renter["token"])
        assert r.status in (400, 404), (body, r)
        assert words in r.json["error"]["message"], (body, r.json)
    # the largest shapes it accepts: a refusal, never a wrapped number
    huge = {"hidden_size": 1 << 17, "num_hidden_layers": 1024, "num_attention_heads": 4096,
            "head_dim": 4096, "intermediate_size": 1 << 20, "vocab_size": 1 << 23}
    r = estimate(server, renter["token"], config=huge, job="full", precision="fp32")
    assert r.status == 400 and "more than the 100T" in r.json["error"]["message"], r
    long = {"hidden_size": 1, "num_hidden_layers": 8, "num_attention_heads": 4096,
            "head_dim": 4096, "intermediate_size": 1, "vocab_size": 1}
    r = estimate(server, renter["token"], config=long, context=1 << 20, batch=4096,
                 precision="fp32")
    assert r.status == 400 and "2^60" in r.json["error"]["message"], r
    r = estimate(server, renter["token"], model="100T", job="full", context=1 << 20,
                 batch=4096, precision="fp32")
    assert r.status == 200, r
    assert all(p["bytes"] > 0 for p in r.json["parts"] if p["name"] != "kv_cache")
    assert r.json["total_bytes"] == sum(p["bytes"] for p in r.json["parts"]) > 10 ** 17
    assert r.json["offers"] == []
    # JSON nested deeper than the parser takes, raw garbage: 400, and the
    # server goes on answering
    deep = '{"config": ' + "[" * 100000 + "]" * 100000 + "}"
    r = server.request("POST", "/v1/estimate", raw=deep.encode(), token=renter["token"],
                       headers={"Content-Type": "application/json"})
    assert r.status == 400 and r.code == "invalid_json", r
    r = server.request("POST", "/v1/estimate", raw=b'{"model": "7B"', token=renter["token"],
                       headers={"Content-Type": "application/json"})
    assert r.status == 400, r
    # renters only: no token, no estimate
    with open(SPEC_PATH) as f:
        spec = yaml.safe_load(f)
    check(spec, server.request("POST", "/v1/estimate", {"model": "7B"}), "POST", "/v1/estimate",
          401)
    check(spec, estimate(server, renter["token"], model="7GB"), "POST", "/v1/estimate", 400)
    check(spec, estimate(server, renter["token"], model="7B", region="nowhere"), "POST",
          "/v1/estimate", 404)
    assert estimate(server, renter["token"], model="7B").status == 200


def test_t700_cli_estimate_and_market_fits(world, tmp_path):
    server, small, big, renter, cli = world
    p = cli.run("estimate", "7B", "--precision", "bf16", "--job", "lora")
    assert p.returncode == 0, p
    out = p.stdout
    for words in ("weights", "gradients", "optimizer", "activations", "kv_cache", "overhead",
                  "total", "frozen base P × 2 B (bf16)", "Korthikanti", "RTX 4090",
                  small.node_id, big.node_id, "rank 16"):
        assert words in out, (words, out)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA2_7B))
    p = cli.run("estimate", "--config", str(config), "-o", "json")
    assert p.returncode == 0, p
    assert json.loads(p.stdout)["model"]["parameters"] == 6738415616
    p = cli.run("estimate", "30B", "--context", "2048", "--batch", "2", "-o", "json")
    e = json.loads(p.stdout)
    assert (e["context"], e["batch"]) == (2048, 2)
    assert [o["node_id"] for o in e["offers"]] == [big.node_id]

    # market --fits keeps the hosts that hold it
    p = cli.run("market", "--fits", "30B bf16 inference")
    assert p.returncode == 0, p
    assert big.node_id in p.stdout and small.node_id not in p.stdout, p.stdout
    assert "NEED" in p.stdout and "30B bf16 inference needs" in p.stdout
    p = cli.run("market", "--fits", "7B", "-o", "json")
    hosts = [h for r in json.loads(p.stdout)["items"] for h in r["hosts"]]
    assert sorted(h["node_id"] for h in hosts) == sorted([small.node_id, big.node_id])
    assert all(h["gpus_needed"] == 1 for h in hosts)
    p = cli.run("market", "--fits", "70B bf16 full")
    assert p.returncode == 0 and "no host has the free GPUs" in p.stdout, p
    p = cli.run("market")
    assert small.node_id in p.stdout and "NEED" not in p.stdout

    # bad input: what to write, and the exit status for it
    p = cli.run("estimate", "7GB")
    assert p.returncode == 1 and "model must be a size like 7B" in p.stderr, p
    p = cli.run("estimate")
    assert p.returncode == 2 and "give a model size" in p.stderr, p
    p = cli.run("estimate", "7B", "--config", str(config))
    assert p.returncode == 2, p
    p = cli.run("estimate", "--config", str(tmp_path / "missing.json"))
    assert p.returncode == 2 and "cannot open" in p.stderr, p
    garbage = tmp_path / "garbage.json"
    garbage.write_text("not json {")
    p = cli.run("estimate", "--config", str(garbage))
    assert p.returncode == 2 and "not JSON" in p.stderr, p
    p = cli.run("estimate", "7B", "--precision", "fp8")
    assert p.returncode == 1 and "precision must be" in p.stderr, p
    p = cli.run("market", "--fits", "7B bf16 lora extra")
    assert p.returncode == 2 and "MODEL [PRECISION [JOB]]" in p.stderr, p
    p = cli.run("market", "--fits", "banana")
    assert p.returncode == 1 and "model must be a size like 7B" in p.stderr, p
