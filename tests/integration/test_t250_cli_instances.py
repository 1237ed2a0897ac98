"""t250: the suanli CLI's instance, image, node and join-token commands,
against the real suanlid and the real suanli-node agent of the session's
cluster (8 simulated RTX 4090s, real runc containers)."""
import json
import os
import re
import signal

import pytest

from conftest import IMAGE, Cli, wait_for

MODEL = "RTX 4090"


@pytest.fixture(scope="module")
def cloud(cluster, tmp_path_factory):
    admin = Cli(cluster.server, str(tmp_path_factory.mktemp("admin-home")))
    admin.run = _with_token(admin.run, cluster.server.admin_token)
    user = cluster.renter()
    home = str(tmp_path_factory.mktemp("renter-home"))
    renter = Cli(cluster.server, home)
    renter.run = _with_token(renter.run, user["token"])
    return {"server": cluster.server, "node": cluster.node, "admin": admin, "renter": renter,
            "user": user, "cluster": cluster}


def _with_token(run, token):
    def wrapped(*args, env=None, **kw):
        return run(*args, env={"SUANLI_TOKEN": token, **(env or {})}, **kw)
    return wrapped


def create(cloud, *args):
    p = cloud["renter"].run("-o", "json", "create", "--gpu-model", MODEL, "--data-disk", "5",
                            *args)
    assert p.returncode == 0, p
    return json.loads(p.stdout)


def release(cloud, iid):
    cloud["renter"].run("release", "--yes", iid, check=True)


def test_join_token_create_prints_the_token_once_and_the_agent_command(cloud):
    admin = cloud["admin"]
    p = admin.run("admin", "join-token", "create", "--region", "sample-1", "--hours", "2")
    assert p.returncode == 0, p
    token = p.stdout.splitlines()[1]
    assert token.startswith("sl_")
    # the token goes into a file only root reads, never on a command line
    # (the process list shows it): the printed command names the file
    assert (f"suanli-node --server {cloud['server'].url} --join /root/suanli-join-token "
            "--data-dir /var/lib/suanli-node") in p.stdout
    assert p.stdout.count(token) == 1, p.stdout
    assert "not shown again" in p.stderr
    tid = re.search(r"join token (\S+)", p.stdout).group(1)
    ls = admin.run("admin", "join-tokens")
    assert tid in ls.stdout and token not in ls.stdout
    assert admin.run("admin", "join-token", "rm", tid).returncode == 0
    assert tid not in admin.run("admin", "join-token", "ls").stdout
    assert admin.run("admin", "join-token", "rm", tid).returncode == 4
    assert admin.run("admin", "join-token", "create").returncode == 2
    assert cloud["renter"].run("admin", "join-token", "ls").returncode == 4


def test_node_ls_and_show_mark_simulated_gpus(cloud):
    admin, node = cloud["admin"], cloud["node"]
    p = admin.run("admin", "nodes", check=True)
    header, row = p.stdout.splitlines()[0], [l for l in p.stdout.splitlines()
                                             if l.startswith(node.node_id)][0]
    for col in ("ID", "HOSTNAME", "REGION", "STATE", "GPUS", "CPU", "MEM", "DISK", "DRIVER",
                "CUDA"):
        assert col in header
    assert "online" in row and "RTX 4090 (simulated)" in row
    assert re.search(r"\d/8 RTX 4090", row) and "simulated" in row
    p = admin.run("admin", "node", "show", node.node_id, check=True)
    assert "GPU-SIMULATED-07" in p.stdout and "simulated" in p.stdout
    j = json.loads(admin.run("-o", "json", "admin", "node", "show", node.node_id).stdout)
    assert j["gpus_total"] == 8
    assert admin.run("admin", "node", "show", "n-nope").returncode == 4


def test_market_shows_free_total_hosts_and_simulated(cloud):
    p = cloud["renter"].run("market", check=True)
    lines = p.stdout.splitlines()
    # the offers per host first (issue 12), then the models with their hosts
    assert "HOST" in lines[0].split() and "DRIVER" in lines[0], lines[0]
    models = lines[[i for i, l in enumerate(lines) if "HOSTS" in l][0]:]
    row = [l for l in models if MODEL in l][0]
    assert re.search(r"\d/8 \(simulated\)\s+1$", row), row


def test_image_ls_and_build(cloud):
    p = cloud["renter"].run("images", check=True)
    row = [l for l in p.stdout.splitlines() if l.startswith("debian-12")][0]
    assert "ready" in row and "MiB" in row
    j = json.loads(cloud["renter"].run("-o", "json", "image", "ls").stdout)
    assert any(i["name"] == "debian-12" for i in j["items"])
    assert cloud["renter"].run("admin", "image", "build", "x").returncode == 4
    assert IMAGE in cloud["admin"].run("image", "ls", check=True).stdout


def test_create_waits_until_running_and_prints_ssh_and_password(cloud):
    r = cloud["renter"]
    p = r.run("create", "--gpu-model", MODEL, "--name", "box", "--data-disk", "60")
    assert p.returncode == 0, p
    iid = re.search(r"^id:\s+(i-\S+)", p.stdout, re.M).group(1)
    inst = json.loads(r.run("-o", "json", "show", iid).stdout)
    assert inst["state"] == "running" and inst["data_disk_gib"] == 60
    assert inst["ssh"]["command"] in p.stdout and inst["ssh"]["password"] in p.stdout
    ls = r.run("ls", check=True).stdout
    row = [l for l in ls.splitlines() if l.startswith(iid)][0]
    assert "box" in row and "running" in row and "1×RTX 4090 (sim)" in row and "gpu" in row
    show = r.run("show", iid, check=True).stdout
    assert re.search(r"gpus:\s+1×RTX 4090 \(sim\) \(indices \d\)", show), show
    assert "60 GiB" in show and inst["ssh"]["password"] in show
    ev = r.run("events", iid, check=True).stdout
    assert "create" in ev and "running" in ev
    release(cloud, iid)


def test_no_wait_returns_creating_and_bad_input_has_exit_codes(cloud):
    r = cloud["renter"]
    p = r.run("-o", "json", "create", "--gpu-model", MODEL, "--no-wait")
    assert p.returncode == 0, p
    assert json.loads(p.stdout)["state"] == "creating"
    release(cloud, json.loads(p.stdout)["id"])
    assert r.run("create").returncode == 2
    assert r.run("create", "--gpu-model", MODEL, "--gpus", "9").returncode == 2
    assert r.run("create", "--gpu-model", "No Such GPU").returncode in (1, 4)
    assert r.run("show", "i-nope").returncode == 4
    assert r.run("stop").returncode == 2
    assert r.run("stop", "i-nope", "--yes").returncode == 2
    assert Cli(cloud["server"], r.home + "-nobody").run("ls").returncode == 3


def test_stop_start_nogpu_restart_and_gpus_unavailable(cloud):
    r = cloud["renter"]
    iid = create(cloud, "--name", "cycle")["id"]
    p = r.run("stop", iid)
    assert p.returncode == 0 and "stopped" in p.stdout, p
    big = create(cloud, "--gpus", "8")["id"]  # takes every GPU of the host
    p = r.run("start", iid)
    assert p.returncode == 1, p
    assert "--no-gpu" in p.stderr
    p = r.run("-o", "json", "start", iid, "--no-gpu")
    assert p.returncode == 0, p
    j = json.loads(p.stdout)
    assert j["state"] == "running" and j["mode"] == "nogpu"
    row = [l for l in r.run("ls").stdout.splitlines() if l.startswith(iid)][0]
    assert "nogpu" in row
    p = r.run("restart", iid)
    assert p.returncode == 0 and "restarted" in p.stdout, p
    release(cloud, big)
    release(cloud, iid)


def test_release_needs_yes_without_a_terminal_and_hides_the_instance(cloud):
    r = cloud["renter"]
    iid = create(cloud)["id"]
    p = r.run("release", iid)
    assert p.returncode == 2 and "--yes" in p.stderr, p
    assert json.loads(r.run("-o", "json", "show", iid).stdout)["state"] == "running"
    p = r.run("release", "--yes", iid)
    assert p.returncode == 0 and "released" in p.stdout, p
    assert iid not in r.run("ls").stdout
    assert iid in r.run("ls", "--all").stdout
    assert iid in r.run("instance", "ls", "--state", "released").stdout


def test_wait_timeout_exits_5_and_failure_exits_1_with_the_message(cloud):
    r, node = cloud["renter"], cloud["node"]
    iid = create(cloud)["id"]
    # a hung agent: the stop is asked for but never reached
    os.kill(node.proc.pid, signal.SIGSTOP)
    try:
        p = r.run("stop", iid, "--timeout", "1")
        assert p.returncode == 5 and "still" in p.stderr, p
    finally:
        os.kill(node.proc.pid, signal.SIGCONT)
    r.run("stop", iid, check=True)
    # the host lost the image (an operator's mistake): the start fails and says why
    img = os.path.join(node.data_dir, "images", IMAGE + ".json")
    os.rename(img, img + ".away")
    try:
        p = r.run("start", iid, "--timeout", "30")
        assert p.returncode == 1, p
        assert "failed" in p.stderr and IMAGE in p.stderr, p.stderr
    finally:
        os.rename(img + ".away", img)
    p = r.run("start", iid, "--timeout", "60")
    assert p.returncode == 0, p
    release(cloud, iid)
    # the host reports the image again at its next heartbeat
    server = cloud["server"]
    wait_for(lambda: [i for i in server.request("GET", "/v1/images", token=server.admin_token)
                      .json["items"] if i["name"] == IMAGE and i["state"] == "ready"],
             timeout=30, what="the image reported ready again")


def test_ssh_logs_in_with_the_renters_key(cloud):
    r = cloud["renter"]
    inst = create(cloud)
    key = cloud["user"]["key"]
    p = r.run("ssh", inst["id"], "--identity", key, "--", "hostname")
    assert p.returncode == 0, p
    assert p.stdout.strip() == inst["id"]
    # the host key is kept per instance in the CLI's own known_hosts
    known = os.path.join(r.home, ".config", "suanli", "known_hosts")
    assert inst["id"] in open(known).read()
    # a later instance on the same port is no "host key changed" alarm
    release(cloud, inst["id"])
    again = create(cloud)
    assert again["ssh"]["port"] == inst["ssh"]["port"]
    p = r.run("ssh", again["id"], "--identity", key, "--", "hostname")
    assert p.returncode == 0 and p.stdout.strip() == again["id"], p
    inst = again
    r.run("stop", inst["id"], check=True)
    p = r.run("ssh", inst["id"])
    assert p.returncode == 1 and "not running" in p.stderr, p
    release(cloud, inst["id"])


def test_names_work_wherever_an_id_does(cloud):
    """Issue 11, item 4: every command that takes an instance takes its name
    too (resolved with GET /v1/instances?name=), and an id always wins."""
    r, server = cloud["renter"], cloud["server"]
    nb = create(cloud, "--name", "nb")
    iid = nb["id"]
    # a second instance whose name is the first one's id: the id wins
    twin = create(cloud, "--name", iid)
    try:
        def shown(ref):
            p = r.run("-o", "json", "show", ref)
            assert p.returncode == 0, p
            return json.loads(p.stdout)["id"]
        assert shown("nb") == iid
        assert shown(iid) == iid
        assert shown(twin["id"]) == twin["id"]
        show = r.run("show", "nb", check=True).stdout
        assert re.search(rf"^id:\s+{iid}$", show, re.M), show

        ev = r.run("events", "nb", check=True).stdout
        assert "create" in ev and iid in ev
        p = r.run("bill", "charges", "--instance", "nb")
        assert p.returncode == 0, p
        assert twin["id"] not in p.stdout

        # the port commands say which instance they acted on
        p = r.run("port", "add", "nb", "7860")
        assert p.returncode == 0, p
        assert p.stdout.startswith(f"published port 7860 of {iid} is owner only"), p.stdout
        p = r.run("port", "public", "nb", "7860")
        assert p.returncode == 0 and p.stdout.startswith(f"port 7860 of {iid} is public"), p
        p = r.run("port", "ls", "nb")
        assert p.returncode == 0 and "7860" in p.stdout, p
        p = r.run("port", "rm", "nb", "7860")
        assert p.returncode == 0 and p.stdout == f"removed port 7860 of {iid}\n", p
        ports = server.request("GET", f"/v1/instances/{iid}/ports",
                               token=cloud["user"]["token"]).json
        assert all(x["port"] != 7860 for x in ports["items"]), ports

        p = r.run("idle-stop", "nb", "--after", "30m")
        assert p.returncode == 0 and p.stdout.startswith(f"{iid}: idle stop after 30m"), p
        p = r.run("stop", "nb", "--in", "3h")
        assert p.returncode == 0 and p.stdout.startswith(f"{iid} stops at "), p
        p = r.run("stop", "nb", "--cancel")
        assert p.returncode == 0 and p.stdout == f"{iid}: no scheduled stop\n", p
        p = r.run("plan", "nb", "payg")
        assert p.returncode == 0 and p.stdout == f"{iid}: already pay-as-you-go\n", p

        p = r.run("stop", "nb")
        assert p.returncode == 0 and p.stdout == f"stopped {iid}\n", p
        assert cloud["cluster"].get(cloud["user"], iid)["state"] == "stopped"
        assert cloud["cluster"].get(cloud["user"], twin["id"])["state"] == "running"
        p = r.run("start", "nb")
        assert p.returncode == 0 and p.stdout.startswith(f"started {iid}: "), p
        p = r.run("restart", "nb", "--no-wait")
        assert p.returncode == 0 and p.stdout.startswith(f"restart {iid}: "), p
        cloud["cluster"].wait_state(cloud["user"], iid, "running")

        # names are the renter's own: another renter's name or id is not found
        other = Cli(server, r.home + "-other")
        os.makedirs(other.home, exist_ok=True)
        stranger = cloud["cluster"].renter(credit_micros=0)
        for ref in ("nb", iid):
            p = other.run("show", ref, env={"SUANLI_TOKEN": stranger["token"]})
            assert p.returncode == 4, p
            assert p.stderr == f"suanli: no instance '{ref}': list yours with suanli ls\n", p
        for args in (("show", "no-such-box"), ("ssh", "no-such-box"),
                     ("port", "ls", "no-such-box"), ("stop", "i-nosuchthing"),
                     ("release", "--yes", "no-such-box")):
            p = r.run(*args)
            assert p.returncode == 4 and "list yours with suanli ls" in p.stderr, (args, p)

        p = r.run("release", "--yes", "nb")
        assert p.returncode == 0 and p.stdout == f"released {iid}\n", p
        # a released instance's name is free: it names nothing now
        assert r.run("show", "nb").returncode == 4
        assert shown(iid) == iid  # its id still shows it
    finally:
        r.run("release", "--yes", iid)
        r.run("release", "--yes", twin["id"])
