"""t350: SSH for tools (issue 6, item 3). `suanli ssh-config` prints, and
with --write merges into ~/.ssh/config, a Host block per instance, so plain
ssh, sftp and rsync (as VS Code Remote-SSH and PyCharm do) connect by the
instance's id or name; `suanli cp` copies both ways with rsync over that SSH,
resumes an interrupted copy and shows progress. Real suanlid, real agent, real
containers, real OpenSSH and rsync."""
import hashlib
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import Cli, wait_for

MODEL = "RTX 4090"


@pytest.fixture(scope="module")
def env(cluster, tmp_path_factory):
    user = cluster.renter()
    home = str(tmp_path_factory.mktemp("tools-home"))
    cli = Cli(cluster.server, home)
    run = cli.run
    cli.run = lambda *a, env=None, **kw: run(*a, env={"SUANLI_TOKEN": user["token"],
                                                      **(env or {})}, **kw)
    p = cli.run("-o", "json", "create", "--gpu-model", MODEL, "--data-disk", "5",
                "--name", "train-box")
    assert p.returncode == 0, p
    inst = json.loads(p.stdout)
    yield {"cluster": cluster, "user": user, "cli": cli, "inst": inst, "home": home}
    cli.run("release", "--yes", inst["id"])


def ssh_config(env):
    return os.path.join(env["home"], ".ssh", "config")


def test_ssh_config_prints_a_host_block_per_running_instance(env):
    inst = env["inst"]
    p = env["cli"].run("ssh-config", "--identity", env["user"]["key"])
    assert p.returncode == 0, p
    lines = [line.strip() for line in p.stdout.splitlines()]
    assert f"Host {inst['id']} train-box" in lines
    assert f"HostName {inst['ssh']['host']}" in lines
    assert f"Port {inst['ssh']['port']}" in lines
    assert "User root" in lines
    assert f"IdentityFile {env['user']['key']}" in lines
    assert f"HostKeyAlias {inst['id']}" in lines
    p = env["cli"].run("ssh-config", "--identity", "/nonexistent/key")
    assert p.returncode == 2 and "--identity" in p.stderr, p
    p = env["cli"].run("ssh-config", "extra")
    assert p.returncode == 2, p


def test_write_merges_into_ssh_config_and_tools_connect_by_name(env):
    os.makedirs(os.path.join(env["home"], ".ssh"), exist_ok=True)
    mine = "Host example\n    HostName example.org\n    User me\n"
    with open(ssh_config(env), "w") as f:
        f.write(mine)
    for _ in range(2):  # twice: the block is replaced, not repeated
        p = env["cli"].run("ssh-config", "--write", "--identity", env["user"]["key"])
        assert p.returncode == 0 and "wrote 1 host" in p.stdout, p
    text = open(ssh_config(env)).read()
    assert text.startswith(mine)  # the renter's own lines are kept
    assert text.count("Host " + env["inst"]["id"]) == 1
    assert oct(os.stat(ssh_config(env)).st_mode & 0o777) == "0o600"

    base = ["-F", ssh_config(env), "-o", "BatchMode=yes"]
    for name in (env["inst"]["id"], "train-box"):
        p = subprocess.run(["ssh", *base, name, "hostname"], capture_output=True, text=True,
                           timeout=30)
        assert p.returncode == 0 and p.stdout.strip() == env["inst"]["id"], p
    # SFTP, as VS Code Remote-SSH and PyCharm's interpreter use it
    local = os.path.join(env["home"], "up.txt")
    with open(local, "w") as f:
        f.write("via sftp\n")
    p = subprocess.run(["sftp", *base, "-b", "-", "train-box"],
                       input=f"put {local} /root/data/up.txt\nget /root/data/up.txt "
                             f"{local}.back\n",
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p
    assert open(local + ".back").read() == "via sftp\n"


def digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def test_cp_both_ways_resumes_and_shows_progress(env):
    cli, iid = env["cli"], env["inst"]["id"]
    key = ["--identity", env["user"]["key"]]
    big = os.path.join(env["home"], "big.bin")
    with open(big, "wb") as f:
        f.write(os.urandom(64 << 20))
    # interrupted part way: what arrived is kept (--partial) ...
    e = {"HOME": env["home"], "PATH": os.environ["PATH"], "SUANLI_URL": env["cluster"].server.url,
         "SUANLI_TOKEN": env["user"]["token"]}
    from conftest import SUANLI
    proc = subprocess.Popen([SUANLI, "cp", *key, "--bwlimit", "16384", big,
                             f"{iid}:/root/data/big.bin"], env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def arrived():
        p = env["cluster"].ssh(env["user"], env["inst"],
                               "stat -c %s /root/data/.big.bin.* /root/data/big.bin 2>/dev/null"
                               " | head -1", check=False)
        return p.stdout.strip().isdigit() and int(p.stdout.strip()) > (4 << 20)
    try:
        wait_for(arrived, timeout=60, interval=0.05, what="part of the copy")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
    # ... and the next run completes it
    p = cli.run("cp", *key, big, f"{iid}:/root/data/big.bin", timeout=300)
    assert p.returncode == 0, p
    assert "%" in p.stdout  # progress
    remote = env["cluster"].ssh(env["user"], env["inst"], "sha256sum /root/data/big.bin")
    assert remote.stdout.split()[0] == digest(big)
    back = os.path.join(env["home"], "back.bin")
    p = cli.run("cp", *key, f"{iid}:/root/data/big.bin", back, timeout=300)
    assert p.returncode == 0, p
    assert digest(back) == digest(big)
    # a directory, recursively
    d = os.path.join(env["home"], "dataset")
    os.makedirs(os.path.join(d, "sub"))
    with open(os.path.join(d, "sub", "a.txt"), "w") as f:
        f.write("a\n")
    p = cli.run("cp", *key, d, f"{iid}:/root/data/", timeout=60)
    assert p.returncode == 0, p
    got = env["cluster"].ssh(env["user"], env["inst"], "cat /root/data/dataset/sub/a.txt")
    assert got.stdout == "a\n"


def test_ssh_and_cp_take_the_name(env):
    """Issue 11, item 4: NAME works where ID does, NAME:/path where ID:/path;
    the host key is still kept under the id."""
    cli, iid = env["cli"], env["inst"]["id"]
    key = ["--identity", env["user"]["key"]]
    p = cli.run("ssh", "train-box", *key, "--", "hostname")
    assert p.returncode == 0 and p.stdout.strip() == iid, p
    known = open(os.path.join(env["home"], ".config", "suanli", "known_hosts")).read()
    assert iid in known and "train-box" not in known
    src = os.path.join(env["home"], "by-name.txt")
    with open(src, "w") as f:
        f.write("by name\n")
    p = cli.run("cp", *key, src, "train-box:/root/data/by-name.txt", timeout=60)
    assert p.returncode == 0, p
    got = env["cluster"].ssh(env["user"], env["inst"], "cat /root/data/by-name.txt")
    assert got.stdout == "by name\n"
    for ref in ("train-box", iid):
        back = os.path.join(env["home"], f"back-{ref}.txt")
        p = cli.run("cp", *key, f"{ref}:/root/data/by-name.txt", back, timeout=60)
        assert p.returncode == 0, p
        assert open(back).read() == "by name\n"
    p = cli.run("cp", "/etc/hostname", "no-such-box:/root/")
    assert p.returncode == 4, p
    assert p.stderr == "suanli: no instance 'no-such-box': list yours with suanli ls\n", p


def test_cp_bad_input(env):
    cli = env["cli"]
    for args in (["a", "b"], [f"{env['inst']['id']}:/x", f"{env['inst']['id']}:/y"], ["only"],
                 ["--bwlimit", "fast", "a", f"{env['inst']['id']}:/y"]):
        p = cli.run("cp", *args)
        assert p.returncode == 2, (args, p)
    p = cli.run("cp", "/etc/hostname", "i-nosuchthing:/root/")
    assert p.returncode == 4, p


def password_login(inst, password, tmp_path, command="id -u"):
    """ssh as root with a password only, as a renter who copied it from
    `suanli show` types it (OpenSSH reads it from SSH_ASKPASS)."""
    askpass = tmp_path / "askpass"
    askpass.write_text(f"#!/bin/sh\necho '{password}'\n")
    askpass.chmod(0o700)
    return subprocess.run(
        ["ssh", "-p", str(inst["ssh"]["port"]), "-o", "StrictHostKeyChecking=no",
         "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
         "-o", "PubkeyAuthentication=no", "-o", "PreferredAuthentications=password",
         "-o", "NumberOfPasswordPrompts=1", "-o", "ConnectTimeout=10",
         f"root@{inst['ssh']['host']}", command],
        capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
        env={"PATH": os.environ["PATH"], "SSH_ASKPASS": str(askpass),
             "SSH_ASKPASS_REQUIRE": "force", "DISPLAY": ":0"})


def test_the_root_password_logs_in_and_no_other(env, tmp_path):
    inst = env["cluster"].get(env["user"], env["inst"]["id"])
    p = password_login(inst, inst["ssh"]["password"], tmp_path)
    assert (p.returncode, p.stdout.strip()) == (0, "0"), p.stderr
    p = password_login(inst, inst["ssh"]["password"][::-1], tmp_path)
    assert p.returncode != 0 and p.stdout == ""
    # the first boot wrote the hash into /etc/shadow itself (node/boot.c):
    # the file keeps the image's owner and mode, every other account's line,
    # and nothing is left beside it
    p = password_login(inst, inst["ssh"]["password"], tmp_path,
                       "stat -c '%a %U %G' /etc/shadow; ls /etc/shadow.suanli 2>&1;"
                       " cut -d: -f1 /etc/shadow | sort | tr '\\n' ' '; echo;"
                       " cut -d: -f1 /etc/passwd | sort | tr '\\n' ' '")
    lines = p.stdout.splitlines()
    assert p.returncode == 0 and lines[0] == "640 root shadow", p
    assert "No such file" in lines[1], p
    assert lines[2] == lines[3] and " root " in f" {lines[2]}", p
