"""t150: the suanli CLI against a real suanlid: accounts, tokens, keys,
verification, money, the catalog, admin commands, JSON output and exit codes."""
import json
import os
import re
import stat
import subprocess

import pytest

from conftest import PASSWORD, Cli, free_port, unique_email


def config_path(cli):
    return os.path.join(cli.home, ".config", "suanli", "config")


def config_values(cli):
    values = {}
    with open(config_path(cli)) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                k, _, v = line.partition("=")
                values[k.strip()] = v.strip()
    return values


def id_number(body17):
    """A GB 11643 ID number: 17 digits and their check character."""
    weights = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2]
    return body17 + "10X98765432"[sum(int(d) * w for d, w in zip(body17, weights)) % 11]


def login(cli, email, password=PASSWORD):
    p = cli.run("login", "--email", email, "--password-stdin", input=password + "\n")
    assert p.returncode == 0, p
    return p


@pytest.fixture
def renter(server, cli):
    """A renter registered through the API and logged in through the CLI."""
    user = server.register()
    login(cli, user["email"])
    user["cli"] = cli
    user["api_token"] = config_values(cli)["token"]
    return user


@pytest.fixture
def admin(server, tmp_path_factory):
    a = Cli(server, str(tmp_path_factory.mktemp("admin-home")))
    login(a, "admin@localhost", server.admin_password)
    return a


def test_register_and_login_write_a_private_config_with_a_working_token(server, cli):
    email = unique_email()
    p = cli.run("register", "--email", email, "--name", "Ann", "--password-stdin",
                input=PASSWORD + "\n")
    assert p.returncode == 0, p
    assert email in p.stdout

    p = login(cli, email)
    assert f"logged in as {email}" in p.stdout

    path = config_path(cli)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    values = config_values(cli)
    assert values["server"] == server.url
    token = values["token"]
    assert token not in p.stdout + p.stderr, "login must not print the secret"

    r = server.request("GET", "/v1/me", token=token)
    assert r.status == 200 and r.json["email"] == email
    # a long-lived API token; the login session was ended
    r = server.request("GET", "/v1/tokens", token=token)
    kinds = [t["kind"] for t in r.json["items"]]
    assert kinds == ["api"], r
    assert r.json["items"][0]["name"].startswith("cli on ")


def test_password_from_environment_and_register_conflict(server, cli):
    email = unique_email()
    env = {"SUANLI_PASSWORD": PASSWORD}
    assert cli.run("register", "--email", email, env=env).returncode == 0
    p = cli.run("register", "--email", email, env=env)
    assert p.returncode == 1
    assert p.stderr.startswith("suanli: ")
    assert cli.run("login", "--email", email, env=env).returncode == 0
    assert "token" in config_values(cli)


def test_wrong_password_is_exit_3(server, cli):
    user = server.register()
    p = cli.run("login", "--email", user["email"], "--password-stdin", input="wrong password\n")
    assert p.returncode == 3
    assert "wrong email or password" in p.stderr
    assert not os.path.exists(config_path(cli))


def test_whoami_table_and_json(renter):
    cli = renter["cli"]
    p = cli.run("whoami", check=True)
    assert renter["email"] in p.stdout and renter["id"] in p.stdout
    p = cli.run("-o", "json", "whoami", check=True)
    me = json.loads(p.stdout)
    assert me["id"] == renter["id"] and me["email"] == renter["email"]


def test_logout_revokes_the_token(server, renter):
    cli = renter["cli"]
    token = renter["api_token"]
    p = cli.run("logout")
    assert p.returncode == 0, p
    assert "token" not in config_values(cli)
    assert server.request("GET", "/v1/me", token=token).status == 401
    p = cli.run("whoami")
    assert p.returncode == 3
    assert "not logged in" in p.stderr


def test_token_create_ls_rm(server, renter):
    cli = renter["cli"]
    p = cli.run("token", "create", "ci-job", "--expires-days", "7", check=True)
    secret = [w for w in p.stdout.split() if w.startswith("sl_")]
    assert len(secret) == 1, p.stdout
    secret = secret[0]
    assert server.request("GET", "/v1/me", token=secret).status == 200

    p = cli.run("token", "ls", check=True)
    assert "ci-job" in p.stdout
    assert secret not in p.stdout, "a listed token must not show its secret"
    listed = json.loads(cli.run("-o", "json", "token", "list", check=True).stdout)
    tok = [t for t in listed["items"] if t["name"] == "ci-job"]
    assert len(tok) == 1 and tok[0]["expires_at"]

    p = cli.run("token", "rm", tok[0]["id"])
    assert p.returncode == 0, p
    assert server.request("GET", "/v1/me", token=secret).status == 401
    assert "ci-job" not in cli.run("token", "ls", check=True).stdout


def test_key_add_ls_rm_with_a_real_key(server, renter, tmp_path):
    cli = renter["cli"]
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "me@laptop",
                    "-f", str(key)], check=True)
    fingerprint = subprocess.run(["ssh-keygen", "-l", "-f", str(key) + ".pub"], check=True,
                                 capture_output=True, text=True).stdout.split()[1]

    p = cli.run("key", "add", str(key) + ".pub", "--name", "laptop")
    assert p.returncode == 0, p
    p = cli.run("key", "ls", check=True)
    assert fingerprint in p.stdout and "laptop" in p.stdout
    keys = json.loads(cli.run("-o", "json", "key", "list", check=True).stdout)["items"]
    assert [k["fingerprint"] for k in keys] == [fingerprint]

    # the same key from stdin is refused by the server as a duplicate
    with open(str(key) + ".pub") as f:
        p = cli.run("key", "add", "-", input=f.read())
    assert p.returncode == 1 and "already registered" in p.stderr

    p = cli.run("key", "rm", keys[0]["id"])
    assert p.returncode == 0, p
    r = server.request("GET", "/v1/ssh-keys", token=renter["token"])
    assert r.json["items"] == []


def test_bad_key_is_refused_with_exit_1(renter, tmp_path):
    cli = renter["cli"]
    bad = tmp_path / "bad.pub"
    bad.write_text("ssh-ed25519 this-is-not-base64!! me@laptop\n")
    p = cli.run("key", "add", str(bad))
    assert p.returncode == 1
    assert p.stderr.startswith("suanli: ") and p.stdout == ""
    # a private key is caught before it leaves the machine
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                    str(tmp_path / "k")], check=True)
    p = cli.run("key", "add", str(tmp_path / "k"))
    assert p.returncode == 1 and "private key" in p.stderr


def test_verify_then_admin_approves_or_rejects(server, renter, admin, make_server):
    cli = renter["cli"]
    p = cli.run("verify", "--name", "Zhang San", "--id-number", id_number("11010519491231002"))
    assert p.returncode == 0, p
    assert "pending" in cli.run("verify", "--status", check=True).stdout

    p = admin.run("-o", "json", "admin", "verification", "ls", check=True)
    pending = [v for v in json.loads(p.stdout)["items"] if v["email"] == renter["email"]]
    assert len(pending) == 1 and pending[0]["state"] == "pending"
    assert renter["email"] in admin.run("admin", "verification", "ls", check=True).stdout

    p = admin.run("admin", "verification", "approve", renter["email"])
    assert p.returncode == 0, p
    status = json.loads(cli.run("-o", "json", "verify", "--status", check=True).stdout)
    assert status["state"] == "approved"
    assert json.loads(cli.run("-o", "json", "whoami", check=True).stdout)[
        "verification"] == "approved"

    other = server.register()
    r = server.request("POST", "/v1/me/verification",
                       {"real_name": "Li Si", "id_number": id_number("11010519800101001")},
                       token=other["token"])
    assert r.status == 201, r
    assert admin.run("admin", "verification", "reject", other["id"]).returncode == 2
    p = admin.run("admin", "verification", "reject", other["id"], "--reason", "blurred photo")
    assert p.returncode == 0, p
    r = server.request("GET", "/v1/me/verification", token=other["token"])
    assert r.json["state"] == "rejected" and r.json["reason"] == "blurred photo"


def test_admin_credit_by_email_shows_exactly_in_balance_and_ledger(renter, admin):
    cli = renter["cli"]
    p = admin.run("admin", "credit", renter["email"], "12.5", "--memo", "welcome bonus")
    assert p.returncode == 0, p
    p = admin.run("-o", "json", "admin", "credit", renter["id"], "0.000001")
    assert p.returncode == 0, p
    assert json.loads(p.stdout)["amount_micros"] == 1

    p = cli.run("balance", check=True)
    assert "¥12.500001" in p.stdout and "CNY" in p.stdout
    b = json.loads(cli.run("-o", "json", "balance", check=True).stdout)
    assert b["balance_micros"] == 12500001

    p = cli.run("ledger", check=True)
    assert "+12.50" in p.stdout and "welcome bonus" in p.stdout
    entries = json.loads(cli.run("-o", "json", "ledger", "--all", check=True).stdout)["items"]
    assert sorted(e["amount_micros"] for e in entries) == [1, 12500000]

    users = json.loads(admin.run("-o", "json", "admin", "user", "ls", "--email",
                                 renter["email"], check=True).stdout)["items"]
    assert users[0]["balance_micros"] == 12500001
    assert admin.run("admin", "ledger-check").returncode == 0

    # not an amount, not a user, not an admin
    assert admin.run("admin", "credit", renter["email"], "12.5.0").returncode == 2
    assert admin.run("admin", "credit", "nobody@example.com", "1").returncode == 4
    assert cli.run("admin", "credit", renter["id"], "1").returncode == 4


def test_ledger_all_follows_the_cursor(server, renter):
    for i in range(5):
        server.credit(renter["id"], 1000000 + i, memo=f"credit {i}")
    cli = renter["cli"]
    page = json.loads(cli.run("-o", "json", "ledger", "--limit", "2", check=True).stdout)
    assert len(page["items"]) == 2 and page["next_cursor"]
    everything = json.loads(cli.run("-o", "json", "ledger", "--all", check=True).stdout)
    assert len(everything["items"]) == 5
    assert everything["next_cursor"] is None
    assert len(cli.run("ledger", "--all", check=True).stdout.strip().splitlines()) == 6


def test_catalog_lists_the_sample(renter):
    cli = renter["cli"]
    names = {"RTX 4090", "RTX 3090", "A100 80GB", "H800"}
    p = cli.run("market", check=True)
    for n in names:
        assert n in p.stdout
    assert "¥1.98/h" in p.stdout
    market = json.loads(cli.run("-o", "json", "market", "--region", "sample-1",
                                check=True).stdout)
    assert {m["name"] for m in market["items"][0]["gpu_models"]} == names
    assert cli.run("market", "--region", "nowhere-9").returncode == 4

    p = cli.run("regions", check=True)
    assert "sample-1" in p.stdout
    regions = json.loads(cli.run("-o", "json", "regions", check=True).stdout)
    assert [r["id"] for r in regions["items"]] == ["sample-1"]

    p = cli.run("gpu-models", check=True)
    assert "RTX 4090" in p.stdout and "1.98" in p.stdout
    models = json.loads(cli.run("-o", "json", "gpu-models", check=True).stdout)["items"]
    assert {m["name"] for m in models} == names


def test_admin_catalog_commands(admin, renter):
    region = "t150-" + os.urandom(3).hex()
    assert admin.run("admin", "region", "add", region, "Test region").returncode == 0
    assert region in admin.run("admin", "region", "ls", check=True).stdout
    p = admin.run("-o", "json", "admin", "gpu-model", "add", "--name", "L40S " + region,
                  "--vram-mib", "49152", "--cpu", "8", "--memory-mib", "65536",
                  "--price", "3.5")
    assert p.returncode == 0, p
    model = json.loads(p.stdout)
    assert model["price_per_hour_micros"] == 3500000
    p = admin.run("-o", "json", "admin", "gpu-model", "price", model["id"], "4.25",
                  "--region", region)
    assert p.returncode == 0, p
    assert json.loads(p.stdout)["price_per_hour_micros"] == 4250000
    p = admin.run("admin", "price", "set", "data_disk", "0.01", "--free-gib", "60",
                  "--region", region)
    assert p.returncode == 0, p
    prices = json.loads(admin.run("-o", "json", "admin", "price", "ls", check=True).stdout)
    assert any(x["item"] == "data_disk" and x["region"] == region and
               x["amount_micros"] == 10000 and x["free_gib"] == 60 for x in prices["items"])
    market = json.loads(renter["cli"].run("-o", "json", "market", "--region", region,
                                          check=True).stdout)
    prices = {m["name"]: m["price_per_hour_micros"] for m in market["items"][0]["gpu_models"]}
    assert prices["L40S " + region] == 4250000


def test_exit_codes(server, renter, tmp_path):
    cli = Cli(server, str(tmp_path / "logged-out"))
    os.mkdir(cli.home)
    # 2: usage errors print the usage
    assert cli.run().returncode == 2
    assert cli.run("frobnicate").returncode == 2
    p = renter["cli"].run("token", "rm")
    assert p.returncode == 2 and "usage: suanli token rm ID" in p.stderr
    assert renter["cli"].run("ledger", "--limit", "lots").returncode == 2
    assert renter["cli"].run("-o", "yaml", "whoami").returncode == 2
    assert renter["cli"].run("whoami", "--bogus").returncode == 2
    # 3: no token, or one the server rejects
    p = cli.run("whoami")
    assert p.returncode == 3 and p.stderr.startswith("suanli: ")
    assert cli.run("--token", "sl_not_a_real_token", "whoami").returncode == 3
    # 4: not found
    p = renter["cli"].run("token", "rm", "tok-doesnotexist")
    assert p.returncode == 4 and "no token" in p.stderr
    # 5: unreachable, naming the URL
    dead = f"http://127.0.0.1:{free_port()}"
    p = cli.run("--server", dead, "--token", "sl_x", "whoami")
    assert p.returncode == 5
    assert dead in p.stderr and "SUANLI_URL" in p.stderr
    p = cli.run("--token", "sl_x", "regions", env={"SUANLI_URL": dead})
    assert p.returncode == 5


def test_flags_beat_environment_beats_config(server, renter):
    cli = renter["cli"]
    dead = f"http://127.0.0.1:{free_port()}"
    # the config names the real server; the environment overrides it
    assert cli.run("whoami", env={"SUANLI_URL": dead}).returncode == 5
    # and a flag overrides the environment
    assert cli.run("--server", server.url, "whoami", env={"SUANLI_URL": dead}).returncode == 0
    # SUANLI_TOKEN overrides the saved token
    assert cli.run("whoami", env={"SUANLI_TOKEN": "sl_bogus"}).returncode == 3
    other = server.register()
    p = cli.run("-o", "json", "whoami", env={"SUANLI_TOKEN": other["token"]}, check=True)
    assert json.loads(p.stdout)["email"] == other["email"]


def test_help_is_generated_from_the_table(cli):
    p = cli.run("--help")
    assert p.returncode == 0
    for cmd in ["register", "login", "logout", "whoami", "token create", "token ls",
                "key add", "verify", "balance", "ledger", "market", "regions", "gpu-models",
                "admin credit", "admin verification approve", "admin ledger-check"]:
        assert f"\n  {cmd}" in p.stdout, cmd
    p = cli.run("help", "token", "create")
    assert p.returncode == 0 and "usage: suanli token create NAME" in p.stdout
    p = cli.run("help", "token", "ls")
    assert "token list" in p.stdout
    assert cli.run("help", "nonsense").returncode == 2


def test_options_are_declared_once_for_parsing_usage_and_help(cli):
    """Issue 11, item 5: a command's option table gives its usage line, its
    help (a line per option) and what parsing accepts."""
    p = cli.run("help", "create")
    assert p.returncode == 0, p
    assert p.stdout.startswith("usage: suanli create --gpu-model MODEL [--gpus N] "), p.stdout
    assert re.search(r"^  --gpu-model MODEL +the GPU model, as suanli market lists them$",
                     p.stdout, re.M), p.stdout
    assert re.search(r"^  --timeout SECONDS +wait at most", p.stdout, re.M), p.stdout
    assert re.search(r"^  -o FORMAT +table \(default\) or json$", p.stdout, re.M), p.stdout
    assert cli.run("create", "--help").stdout == p.stdout
    p = cli.run("help", "bill")
    assert re.search(r"^  -o FORMAT +table \(default\), json or csv$", p.stdout, re.M), p.stdout
    p = cli.run("help", "stop")
    assert ("usage: suanli stop ID|NAME [--no-wait] [--timeout SECONDS] "
            "[--at HH:MM|RFC3339 | --in DURATION | --cancel]\n") in p.stdout, p.stdout
    # what the help lists, parsing takes; what it does not, parsing refuses
    p = cli.run("token", "create")
    assert p.returncode == 2, p
    assert p.stderr == ("suanli: missing argument NAME\n"
                        "usage: suanli token create NAME [--expires-days N]\n"), p.stderr
    p = cli.run("token", "create", "ci", "--expires-days", "0")
    assert p.returncode == 2 and "--expires-days must be a whole number from 1 to 3650, not '0'" \
        in p.stderr, p
    p = cli.run("ledger", "--all=yes")
    assert p.returncode == 2 and "option '--all' takes no value" in p.stderr, p
    p = cli.run("stop", "i-x", "--at", "02:00", "--cancel")
    assert p.returncode == 2 and "give only one of --at HH:MM|RFC3339, --in DURATION or --cancel" \
        in p.stderr, p
    p = cli.run("admin", "verification", "reject", "someone@example.com")
    assert p.returncode == 2 and "give --reason REASON" in p.stderr, p
