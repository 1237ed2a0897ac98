"""One front door for service ports (issue 12, item 5). With many hosts a
renter's links name the front door's port: its nginx (the configuration
`suanlid front-config` prints, run by Debian's nginx beside suanlid) asks
suanlid which host holds INSTANCE-PORT and passes the request, as the client
sent it, to that host's proxy, which judges it on the same single host
value as ever. So links work across hosts with no DNS per host, and the
front adds no way in: a stranger is refused by the host, a host name that
disagrees with the request line by the front, and only the front's token
learns where an instance lives."""
import http.client
import os
import subprocess

import pytest

from conftest import FLEET_SIZE, wait_for


def via_front(fleet, host, path="/", headers=None, request_line_host=None):
    c = http.client.HTTPConnection(fleet.link.gateway, fleet.front.port, timeout=15)
    target = f"http://{request_line_host}{path}" if request_line_host else path
    c.putrequest("GET", target, skip_host=True)
    c.putheader("Host", host)
    for k, v in (headers or {}).items():
        c.putheader(k, v)
    c.endheaders()
    r = c.getresponse()
    out = (r.status, dict(r.getheaders()), r.read().decode("utf-8", "replace"))
    c.close()
    return out


def link(inst, port):
    """(host with port, path with the access token) of the port's link."""
    access = [s for s in inst["services"] if s["port"] == port][0]["access_url"]
    rest = access.split("//", 1)[1]
    return rest.split("/", 1)[0], "/" + rest.split("/", 1)[1]


@pytest.fixture(scope="module")
def served(fleet):
    """An instance on each host, each serving its own id on 6006."""
    owner = fleet.renter()
    made = [fleet.create(owner, gpus=2, data_disk_gib=5, wait=False) for _ in range(FLEET_SIZE)]
    assert all(r.status == 201 for r in made), made
    insts = [fleet.wait_state(owner, r.json["id"], "running") for r in made]
    for inst in insts:
        fleet.ssh(owner, inst, f"mkdir -p /tmp/www && echo served-by-{inst['id']} >"
                  " /tmp/www/index.html; setsid nohup python3 -m http.server 6006 --directory"
                  " /tmp/www >/dev/null 2>&1 </dev/null &")
    yield owner, insts
    for inst in insts:
        fleet.verb(owner, inst["id"], "release")
    for inst in insts:
        fleet.wait_state(owner, inst["id"], "released")


def test_links_name_the_front_and_reach_every_host(fleet, served):
    owner, insts = served
    assert len({i["node_id"] for i in insts}) == FLEET_SIZE
    for inst in insts:
        host, path = link(inst, 6006)
        assert host.endswith(f":{fleet.front.port}"), host
        status, headers, body = wait_for(
            lambda: (lambda r: r if r[0] == 200 else None)(via_front(fleet, host, path)),
            timeout=30, what=f"{inst['id']}'s service through the front door")
        assert body.strip() == f"served-by-{inst['id']}"
        # the host's proxy set the port's cookie; with it, the bare URL works
        cookie = headers["Set-Cookie"].split(";", 1)[0]
        status, _, body = via_front(fleet, host, "/", {"Cookie": cookie})
        assert (status, body.strip()) == (200, f"served-by-{inst['id']}")


def test_the_front_lets_no_stranger_in(fleet, served):
    owner, insts = served
    inst = insts[-1]
    host, path = link(inst, 6006)
    # no credentials, and another renter's session: the host refuses
    assert via_front(fleet, host, "/")[0] == 401
    stranger = fleet.renter(credit_micros=0)
    status = via_front(fleet, host, "/", {"Cookie": f"suanli_session={stranger['token']}"})[0]
    assert status in (401, 403)
    # a token for another instance's port does not open this one
    other_host, other_path = link(insts[0], 6006)
    assert via_front(fleet, host, other_path)[0] == 401
    # the request line names the owner's service, the Host header another:
    # refused by the front, whichever it would have routed on
    assert via_front(fleet, other_host, path, request_line_host=host.split(":")[0])[0] == 400
    # no such instance, no such port, no such domain
    for bad in (f"i-{'0' * 16}-6006.localhost", host.replace("-6006.", "-7777."),
                host.replace("localhost", "example.com")):
        assert via_front(fleet, bad, path)[0] == 404, bad


def test_only_the_front_learns_where_an_instance_lives(fleet, served):
    owner, insts = served
    host = link(insts[0], 6006)[0].split(":")[0]
    s = fleet.server
    with open(os.path.join(s.data_dir, "front-token")) as f:
        front = f.read().strip()
    assert oct(os.stat(os.path.join(s.data_dir, "front-token")).st_mode & 0o777) == "0o600"
    r = s.request("GET", "/v1/front/route", headers={"X-Original-Host": host,
                                                      "Authorization": f"Bearer {front}"})
    node = fleet.node_of(insts[0])
    assert r.status == 204 and r.headers["X-Suanli-Upstream"] == \
        f"{node.address}:{node.proxy_port}", r
    node_token = __import__("json").load(open(os.path.join(node.data_dir, "node.json")))
    for token in (None, owner["token"], s.admin_token, node_token["node_token"], front + "0"):
        r = s.request("GET", "/v1/front/route", token=token,
                      headers={"X-Original-Host": host})
        assert r.status == 401 and "X-Suanli-Upstream" not in r.headers, (token, r)


def test_front_config_refuses_what_would_break_nginx(fleet, tmp_path):
    from conftest import SUANLID
    for args in (["--server", "http://x;}"], ["--listen", "80; include /etc/shadow"],
                 ["--server", "ftp://x"], ["stray"]):
        p = subprocess.run([SUANLID, "front-config", "--data-dir", str(tmp_path), *args],
                           capture_output=True, text=True)
        assert p.returncode == 2 and "front-config" in p.stderr, (args, p.stderr)
