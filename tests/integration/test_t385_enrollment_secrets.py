"""Hosts are enrolled on purpose, and a host receives only what it needs
(issue 10, item 6; docs/design/instances.md).

* A join token enrolls one host (`max_uses`, `--uses N` for N), its uses
  are listed, a used one is refused, and two hosts racing with a
  single-use token make one node.
* The agent takes the token from a file or stdin: never from its command
  line, which every local user reads in /proc.
* The desired state a node reads holds a crypt(3) hash of the root
  password, never the password; the store holds it sealed (with the
  Idempotency-Key responses that carry it); rows written before are sealed
  at start-up; and the password the owner sees logs in over ssh."""
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor

from conftest import (SUANLI, SUANLI_NODE, ApiHost, Cluster, Node, cleanup_host,
                      side_network)

NET = side_network(3, "nd")

INVENTORY = {"cpu_cores": 8, "memory_mib": 65536, "disk_free_gib": 500,
             "gpus": [{"index": 0, "uuid": "GPU-t385", "name": "NVIDIA GeForce RTX 4090",
                       "vram_mib": 24564}]}


def new_join_token(server, **extra):
    r = server.request("POST", "/v1/admin/join-tokens", {"region": "sample-1", **extra},
                       token=server.admin_token)
    assert r.status == 201, r
    return r.json


def enroll(server, token, hostname="t385"):
    return server.request("POST", "/v1/nodes/enroll", {
        "join_token": token, "hostname": hostname, "address": "192.0.2.9",
        "inventory": INVENTORY})


def listed(server, token_id):
    items = server.request("GET", "/v1/admin/join-tokens?limit=500",
                           token=server.admin_token).json["items"]
    return next(t for t in items if t["id"] == token_id)


def node_count(server):
    return len(server.request("GET", "/v1/admin/nodes?limit=500",
                              token=server.admin_token).json["items"])


def test_a_join_token_enrolls_one_host(server):
    tok = new_join_token(server)
    assert (tok["uses"], tok["max_uses"]) == (0, 1)
    assert enroll(server, tok["token"]).status == 201
    r = enroll(server, tok["token"], "second")
    assert r.status == 401 and r.code == "join_token_used", r
    msg = r.json["error"]["message"]
    assert "1 of 1" in msg and "suanli admin join-token create" in msg and "--uses" in msg, msg
    t = listed(server, tok["id"])
    assert (t["uses"], t["max_uses"]) == (1, 1) and "token" not in t


def test_uses_2_enrolls_exactly_two(server):
    tok = new_join_token(server, max_uses=2)
    assert [enroll(server, tok["token"], f"h{i}").status for i in range(3)] == [201, 201, 401]
    assert (listed(server, tok["id"])["uses"], listed(server, tok["id"])["max_uses"]) == (2, 2)
    r = server.request("POST", "/v1/admin/join-tokens", {"region": "sample-1", "max_uses": 0},
                       token=server.admin_token)
    assert r.status == 400 and r.code == "invalid_field", r


def test_racing_enrollments_with_a_single_use_token_make_one_node(server):
    tok = new_join_token(server)
    before = node_count(server)
    with ThreadPoolExecutor(max_workers=24) as pool:
        results = list(pool.map(lambda i: enroll(server, tok["token"], f"race-{i}"), range(24)))
    assert sorted(r.status for r in results) == [201] + [401] * 23, results[:3]
    assert all(r.code == "join_token_used" for r in results if r.status == 401)
    assert node_count(server) == before + 1
    assert listed(server, tok["id"])["uses"] == 1


def test_the_cli_makes_tokens_with_uses_and_lists_them(server, tmp_path):
    env = {"SUANLI_TOKEN": server.admin_token}
    run = lambda *a: subprocess.run([SUANLI, *a], capture_output=True, text=True, timeout=30,
                                    env={"HOME": str(tmp_path), "PATH": os.environ["PATH"],
                                         "SUANLI_URL": server.url, **env})
    p = run("admin", "join-token", "create", "--region", "sample-1", "--uses", "2")
    assert p.returncode == 0, p
    assert "(2 hosts)" in p.stdout and "--join /root/suanli-join-token" in p.stdout, p.stdout
    token = next(line for line in p.stdout.splitlines() if line.startswith("sl_"))
    # the instructions never put the token on a command line
    assert sum(token in line for line in p.stdout.splitlines()) == 1, p.stdout
    tid = p.stdout.split()[3]
    assert enroll(server, token).status == 201
    p = run("admin", "join-token", "ls")
    assert p.returncode == 0 and any(tid in line and " 1/2 " in line
                                     for line in p.stdout.splitlines()), p.stdout
    p = run("admin", "join-token", "create", "--region", "sample-1", "--uses", "0")
    assert p.returncode == 2 and "--uses" in p.stderr, p


def agent(server, data_dir, join, stdin=None, timeout=20):
    """suanli-node run to its first answer: the enrollment, or its refusal."""
    return subprocess.run(
        [SUANLI_NODE, "--data-dir", data_dir, "--server", server.url, "--join", join,
         "--simulate-gpus", "1:RTX 4090", "--address", "127.0.0.1",
         "--set", f"network.bridge={NET[0]}", "--set", f"network.subnet={NET[1]}",
         "--set", "proxy.nginx=off", "--set", "metadata.port=0"],
        input=stdin, capture_output=True, text=True, timeout=timeout)


def test_a_token_on_the_command_line_is_refused(server, tmp_path):
    tok = new_join_token(server)
    before = node_count(server)
    d = str(tmp_path / "node")
    p = agent(server, d, tok["token"])
    assert p.returncode == 2, p
    assert "not the token itself" in p.stderr and "process list" in p.stderr, p.stderr
    assert "--join -" in p.stderr or "- to read it from stdin" in p.stderr, p.stderr
    assert not os.path.exists(os.path.join(d, "node.json"))
    assert node_count(server) == before and listed(server, tok["id"])["uses"] == 0

    # neither a file nor stdin: said so when it comes to enrolling
    p = agent(server, d, str(tmp_path / "no-such-file"))
    assert p.returncode == 1 and "--join: unable to read" in p.stderr, p.stderr
    assert "or - to read it from stdin" in p.stderr, p.stderr
    junk = tmp_path / "junk"
    junk.write_text("this is not a token\n")
    p = agent(server, d, str(junk))
    assert p.returncode == 1 and "does not hold a join token" in p.stderr, p.stderr
    p = agent(server, d, "-", stdin="")
    assert p.returncode == 1 and "does not hold a join token" in p.stderr, p.stderr
    assert node_count(server) == before


def test_the_agent_enrolls_from_a_file_or_stdin_and_a_used_token_is_refused(server):
    base = tempfile.mkdtemp(prefix="suanli-t385-", dir="/var/tmp")
    tok = new_join_token(server)
    nodes = []
    try:
        # stdin: the token never touches the disk nor the command line
        a = Node(server, os.path.join(base, "a"), tok["token"], gpus="1:RTX 4090", network=NET,
                 extra=["--set", "metadata.port=0"], join_via="stdin")
        nodes.append(a)
        a.start()
        with open(f"/proc/{a.proc.pid}/cmdline", "rb") as f:
            assert tok["token"].encode() not in f.read()
        assert listed(server, tok["id"])["uses"] == 1

        # a second host with the same (used) token, from a file: refused
        b = Node(server, os.path.join(base, "b"), tok["token"], gpus="1:RTX 4090", network=NET,
                 extra=["--set", "metadata.port=0"])
        nodes.append(b)
        try:
            b.start(timeout=10)
            raise AssertionError("a second host enrolled with a used join token")
        except RuntimeError as e:
            assert "join token has been used (1 of 1 uses)" in str(e), e
        b.stop()

        # a fresh token in a file: enrolls, and is not on the command line
        b.join_token = new_join_token(server)["token"]
        b.start()
        with open(f"/proc/{b.proc.pid}/cmdline", "rb") as f:
            assert b.join_token.encode() not in f.read()
        assert b.node_id != a.node_id
    finally:
        for n in nodes:
            n.stop()
            cleanup_host(n.data_dir, bridge=NET[0], prefix=NET[2])
        shutil.rmtree(base, ignore_errors=True)


def openssl_crypt(password, hashed):
    """crypt(3) SHA-512 of password with hashed's salt and rounds. OpenSSL
    (another implementation) when the rounds are the default; `openssl
    passwd` takes no rounds, so Python's crypt module (libxcrypt, as
    chpasswd inside the instance uses) for the 1,000 suanlid sets (t350
    logs in with the password through sshd as well)."""
    parts = hashed.split("$")
    if not parts[2].startswith("rounds="):
        return subprocess.run(["openssl", "passwd", "-6", "-salt", parts[2], "-stdin"],
                              input=password, capture_output=True, text=True,
                              check=True).stdout.strip()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt
    return crypt.crypt(password, "$".join(parts[:4]) + "$")


def database_bytes(server):
    out = b""
    for suffix in ("", "-wal", "-shm"):
        path = os.path.join(server.data_dir, "suanli.db" + suffix)
        if os.path.exists(path):
            with open(path, "rb") as f:
                out += f.read()
    return out


def ssh_with_password(inst, password, tmp):
    """Logs in with the password through SSH_ASKPASS (no sshpass needed)."""
    askpass = os.path.join(tmp, "askpass")
    with open(askpass, "w") as f:
        f.write(f"#!/bin/sh\necho '{password}'\n")
    os.chmod(askpass, 0o700)
    return subprocess.run(
        ["setsid", "-w", "ssh", "-p", str(inst["ssh"]["port"]),
         "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
         "-o", "PubkeyAuthentication=no", "-o", "PreferredAuthentications=password",
         "-o", "NumberOfPasswordPrompts=1", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10",
         f"root@{inst['ssh']['host']}", "echo pw-ok"],
        env={"SSH_ASKPASS": askpass, "SSH_ASKPASS_REQUIRE": "force", "DISPLAY": "none",
             "PATH": os.environ["PATH"]},
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)


def test_a_node_gets_a_hash_and_the_store_a_sealed_password(cluster, tmp_path):
    s = cluster.server
    user = cluster.renter()
    # created with an Idempotency-Key: the stored answer holds the password
    key = str(uuid.uuid4())
    body = {"gpu_model": "RTX 4090", "gpus": 1, "image": "debian-12", "data_disk_gib": 5}
    r = s.request("POST", "/v1/instances", body, token=user["token"],
                  headers={"Idempotency-Key": key})
    assert r.status == 201, r
    iid, password = r.json["id"], r.json["ssh"]["password"]
    try:
        assert len(password) >= 16
        inst = cluster.wait_state(user, iid, "running")
        assert inst["ssh"]["password"] == password
        replay = s.request("POST", "/v1/instances", body, token=user["token"],
                           headers={"Idempotency-Key": key})
        assert replay.headers.get("Idempotent-Replayed") == "true"
        assert replay.json["ssh"]["password"] == password

        # the desired state the node reads with its own token
        with open(os.path.join(cluster.node.data_dir, "node.json")) as f:
            ident = json.load(f)
        d = s.request("GET", f"/v1/nodes/{ident['node_id']}/desired",
                      token=ident["node_token"])
        assert d.status == 200, d
        assert password not in d.body
        mine = next(i for i in d.json["instances"] if i["id"] == iid)
        assert "root_password" not in mine
        hashed = mine["root_password_crypt"]
        assert hashed.startswith("$6$") and openssl_crypt(password, hashed) == hashed

        # nor does the node keep it: its boot directory holds the hash
        boot = os.path.join(cluster.node.data_dir, "instances", iid, "boot")
        seen = 0
        for top, _, names in os.walk(boot):  # host-keys/ is a directory of it
            for name in names:
                with open(os.path.join(top, name), "rb") as f:
                    assert password.encode() not in f.read(), name
                seen += 1
        assert seen >= 2, seen
        with open(os.path.join(boot, "root-password-crypt")) as f:
            assert f.read() == hashed

        # nor the store, in any of its files
        assert password.encode() not in database_bytes(s)

        # and the password logs in
        p = ssh_with_password(inst, password, str(tmp_path))
        assert p.returncode == 0 and "pw-ok" in p.stdout, p
        p = ssh_with_password(inst, password + "x", str(tmp_path))
        # ssh's own status for a failed login (its manual: 255 on an error)
        assert p.returncode == 255 and "Permission denied" in p.stderr, p
    finally:
        cluster.verb(user, iid, "release")
        cluster.wait_state(user, iid, "released", timeout=120)


def test_passwords_stored_before_are_sealed_at_start(make_server):
    server = make_server()
    host = ApiHost(server)
    user = Cluster(server, None).renter()
    made = []
    for _ in range(2):
        r = server.request("POST", "/v1/instances",
                           {"gpu_model": "RTX 4090", "image": host.image, "data_disk_gib": 5},
                           token=user["token"])
        assert r.status == 201, r
        made.append((r.json["id"], r.json["ssh"]["password"]))
    server.stop()
    # as a store written before secrets were sealed held them: in plaintext,
    # with no hash for the node
    db = sqlite3.connect(os.path.join(server.data_dir, "suanli.db"))
    for iid, password in made:
        db.execute("UPDATE instances SET root_password = ?, root_password_crypt = ''"
                   " WHERE id = ?", (password, iid))
    db.commit()
    db.close()
    assert made[0][1].encode() in database_bytes(server)

    server.start()
    assert all(password.encode() not in database_bytes(server) for _, password in made)
    desired = server.request("GET", f"/v1/nodes/{host.node_id}/desired", token=host.token).json
    for iid, password in made:
        inst = server.request("GET", f"/v1/instances/{iid}", token=user["token"]).json
        assert inst["ssh"]["password"] == password
        hashed = next(i for i in desired["instances"] if i["id"] == iid)["root_password_crypt"]
        assert openssl_crypt(password, hashed) == hashed
    with open(server.log_path) as f:
        assert "sealed 2 root passwords" in f.read()
