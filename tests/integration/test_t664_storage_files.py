"""Files of the renter's storage through the API and the console (issue 14,
item 4; docs/design/node-runtime.md, "File storage"): a one-use ticket
(POST /v1/storage/{region}/files {op, path}) presented at
http://{instance}-files.{domain}:{proxy}/?ticket=T, where the node's nginx
asks suanlid about it and the agent serves one list, download or upload on
the renter's directory, every path resolved beneath it with openat2 and
nothing followed.

Real parts only: suanlid, the agent, nginx, runc containers, SSH, curl.
The attacker is a renter with root inside an instance of theirs (who plants
links), another renter with a ticket of their own, and a page of another
site."""
import hashlib
import http.client
import os
import re
import subprocess
import time

import pytest

from conftest import chrooted, wait_for

# served on the terminal's socket: off in a chroot, as the terminal is
pytestmark = pytest.mark.skipif(chrooted() is not None,
                                reason="terminals are off when the agent runs in a chroot")

REGION = "sample-1"
MIB = 1024 * 1024


def origin_of(cluster):
    return cluster.server.url.rstrip("/")


def ticket(cluster, user, op, path="", origin="console", **extra):
    headers = {"Origin": origin_of(cluster)} if origin == "console" else \
        ({"Origin": origin} if origin else {})
    return cluster.server.request("POST", f"/v1/storage/{REGION}/files",
                                  {"op": op, "path": path, **extra}, token=user["token"],
                                  headers=headers)


def split(url):
    """(host, path) of an http:// URL."""
    rest = url.split("//", 1)[1]
    host, _, path = rest.partition("/")
    return host, "/" + path


def call(cluster, method, url, body=None, origin="console", host=None, headers=None):
    """(status, headers, body) of one request to the node's proxy."""
    h, path = split(url)
    hdrs = {"Host": host or h, **(headers or {})}
    if origin == "console":
        hdrs["Origin"] = origin_of(cluster)
    elif origin:
        hdrs["Origin"] = origin
    c = http.client.HTTPConnection("127.0.0.1", cluster.node.proxy_port, timeout=120)
    try:
        c.request(method, path, body=body, headers=hdrs)
        r = c.getresponse()
        return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read()
    finally:
        c.close()


def do(cluster, user, op, path="", body=None, **kw):
    r = ticket(cluster, user, op, path)
    assert r.status == 201, r
    return call(cluster, r.json["method"], r.json["url"], body=body, **kw)


def names(cluster, user, path=""):
    status, _, body = do(cluster, user, "list", path)
    assert status == 200, body
    import json
    return {x["name"]: x for x in json.loads(body)["items"]}


def curl(cluster, url, *args):
    host = split(url)[0]
    return subprocess.run(["curl", "-sS", "--connect-to", f"{host}:127.0.0.1:"
                           f"{cluster.node.proxy_port}", "-H", f"Origin: {origin_of(cluster)}",
                           "-w", "%{http_code}", *args, url],
                          capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def renters(cluster):
    s = cluster.server
    # a small quota, for the upload past it (new directories take it)
    r = s.request("POST", "/v1/admin/storage", {"region": REGION, "kind": "local",
                                                "quota_gib": 1}, token=s.admin_token)
    assert r.status == 200, r
    alice, bob = cluster.renter(), cluster.renter()
    made = []
    try:
        a = cluster.create(alice, data_disk_gib=5)
        made.append((alice, a))
        b = cluster.create(bob, data_disk_gib=5)
        made.append((bob, b))
        yield alice, a, bob, b
    finally:
        for user, inst in made:
            cluster.verb(user, inst["id"], "release")
        s.request("POST", "/v1/admin/storage", {"region": REGION, "kind": "local",
                                                "quota_gib": 200}, token=s.admin_token)


def test_ticket_shape_and_refusals(cluster, renters):
    alice, a, bob, b = renters
    r = ticket(cluster, alice, "list")
    assert r.status == 201, r
    p = cluster.node.proxy_port
    assert r.json["url"] == f"http://{a['id']}-files.localhost:{p}/?ticket={r.json['ticket']}"
    assert re.fullmatch(r"[0-9a-f]{64}", r.json["ticket"])
    assert r.json["instance"] == a["id"] and r.json["method"] == "GET"
    assert r.json["origin"] == origin_of(cluster)
    assert ticket(cluster, alice, "put", "x.bin").json["method"] == "PUT"
    # paths that leave the storage, or are no path, are refused at once
    for bad in ("../etc/passwd", "/etc/passwd", "a/../../b", "a//b", ".", "a/.", "x/",
                "a\tb", "n" * 256, "d/" * 2100):
        r = ticket(cluster, alice, "get", bad)
        assert r.status == 400, (bad, r)
    assert ticket(cluster, alice, "get", "").status == 400
    assert ticket(cluster, alice, "delete", "x").status == 400
    # another site's page gets none
    r = ticket(cluster, alice, "list", origin="http://evil.example")
    assert r.status == 403 and r.code == "origin_not_allowed", r
    # bob cannot name alice's instance
    r = ticket(cluster, bob, "list", instance=a["id"])
    assert r.status == 409 and r.code == "no_running_instance", r
    # a renter with no storage in the region, and one with no running instance
    carol = cluster.server.register()
    r = ticket(cluster, carol, "list")
    assert r.status == 404 and r.code == "no_storage", r
    cluster.verb(bob, b["id"], "stop")
    cluster.wait_state(bob, b["id"], "stopped")
    r = ticket(cluster, bob, "list")
    assert r.status == 409 and f"start an instance in {REGION}" in r.json["error"]["message"], r
    cluster.verb(bob, b["id"], "start")
    renters[3].update(cluster.wait_state(bob, b["id"], "running"))


def test_round_trip(cluster, renters, tmp_path):
    alice, a, _, _ = renters
    data = os.urandom(20 * MIB)
    src = tmp_path / "big.bin"
    src.write_bytes(data)
    want = hashlib.sha256(data).hexdigest()
    cluster.ssh(alice, a, "mkdir -p '/root/storage/my dir'")
    r = ticket(cluster, alice, "put", "my dir/big é.bin")
    assert r.status == 201, r
    started = time.monotonic()
    p = curl(cluster, r.json["url"], "-T", str(src))
    took_up = time.monotonic() - started
    assert p.stdout.endswith(b"201"), p
    # visible inside, root's, 0644, whole
    out = cluster.ssh(alice, a, "cd '/root/storage/my dir' && stat -c '%u %g %a %s' 'big é.bin'"
                      " && sha256sum 'big é.bin' && ls -A").stdout
    assert out.startswith(f"0 0 644 {len(data)}\n{want} "), out
    assert ".suanli-upload" not in out, out
    items = names(cluster, alice, "my dir")
    assert items["big é.bin"]["type"] == "file" and items["big é.bin"]["size"] == len(data)
    # downloaded: the same bytes, as an attachment
    r = ticket(cluster, alice, "get", "my dir/big é.bin")
    dst = tmp_path / "back.bin"
    started = time.monotonic()
    p = curl(cluster, r.json["url"], "-o", str(dst), "-D", str(tmp_path / "h"))
    print(f"\n20 MiB through the files host: upload {took_up:.2f} s, "
          f"download {time.monotonic() - started:.2f} s")
    assert p.stdout.endswith(b"200"), p
    assert hashlib.sha256(dst.read_bytes()).hexdigest() == want
    head = (tmp_path / "h").read_text().lower()
    assert "content-disposition: attachment; filename=\"big___.bin\"; " \
           "filename*=utf-8''big%20%c3%a9.bin" in head, head
    assert f"access-control-allow-origin: {origin_of(cluster)}\n" in head, head
    # a file written inside downloads
    cluster.ssh(alice, a, "echo written-inside > /root/storage/inside.txt")
    status, hdrs, body = do(cluster, alice, "get", "inside.txt")
    assert status == 200 and body == b"written-inside\n", (status, body)
    items = names(cluster, alice)
    assert items["my dir"]["type"] == "dir" and "inside.txt" in items
    # a download is a navigation: no Origin is taken (any other is not)
    status, _, body = do(cluster, alice, "get", "inside.txt", origin=None)
    assert status == 200 and body == b"written-inside\n"
    # an upload over a file replaces it; onto a folder is refused
    status, _, _ = do(cluster, alice, "put", "inside.txt", body=b"new\n")
    assert status == 201
    assert cluster.ssh(alice, a, "cat /root/storage/inside.txt").stdout == "new\n"
    status, _, body = do(cluster, alice, "put", "my dir", body=b"x")
    assert status == 409, body
    # the preflight is answered without the ticket, which still works after
    r = ticket(cluster, alice, "put", "pre.txt")
    status, hdrs, _ = call(cluster, "OPTIONS", r.json["url"],
                           headers={"Access-Control-Request-Method": "PUT"})
    assert status == 204 and "PUT" in hdrs["access-control-allow-methods"], hdrs
    status, _, _ = call(cluster, "PUT", r.json["url"], body=b"pre\n")
    assert status == 201


def test_links_and_odd_files_are_not_followed(cluster, renters):
    alice, a, _, _ = renters
    cluster.ssh(alice, a, "cd /root/storage && ln -sf /etc/shadow shadow-link && "
                "ln -sfn / root-link && mkfifo fifo 2>/dev/null; mknod null-dev c 1 3 "
                "2>/dev/null; true")
    for path in ("shadow-link", "root-link/etc/shadow", "root-link/etc/passwd"):
        status, _, body = do(cluster, alice, "get", path)
        assert status == 403 and b"link" in body, (path, status, body)
    status, _, body = do(cluster, alice, "list", "root-link")
    assert status == 403, body
    # an upload through a planted link lands nowhere
    status, _, body = do(cluster, alice, "put", "root-link/tmp/planted", body=b"x")
    assert status == 403, body
    assert not os.path.exists("/tmp/planted")
    # a fifo (and a device, where mknod worked) is no file to download
    status, _, body = do(cluster, alice, "get", "fifo")
    assert status == 403, (status, body)
    items = names(cluster, alice)
    assert items["shadow-link"]["type"] == "link" and items["fifo"]["type"] == "other"


def test_tickets_are_bound(cluster, renters):
    alice, a, bob, b = renters
    # used once
    r = ticket(cluster, alice, "list")
    assert call(cluster, "GET", r.json["url"])[0] == 200
    assert call(cluster, "GET", r.json["url"])[0] == 401
    # alice's ticket at bob's instance's host (a neighbour on this host):
    # refused, and spent
    r = ticket(cluster, alice, "list")
    bob_host = f"{b['id']}-files.localhost:{cluster.node.proxy_port}"
    assert call(cluster, "GET", r.json["url"], host=bob_host)[0] == 403
    assert call(cluster, "GET", r.json["url"])[0] == 401
    # bob's ticket at alice's
    r = ticket(cluster, bob, "get", "inside.txt")
    alice_host = f"{a['id']}-files.localhost:{cluster.node.proxy_port}"
    assert call(cluster, "GET", r.json["url"], host=alice_host)[0] == 403
    # another Origin, or none for a listing, or an upload
    for op, method, origin in (("list", "GET", "http://evil.example"), ("list", "GET", None),
                               ("get", "GET", "http://evil.example"),
                               ("put", "PUT", None)):
        r = ticket(cluster, alice, op, "inside.txt" if op != "list" else "")
        status, hdrs, _ = call(cluster, method, r.json["url"], body=b"x" if method == "PUT" else
                               None, origin=origin)
        assert status == 403, (op, origin, status)
        assert "access-control-allow-origin" not in hdrs, hdrs
    # the wrong method for the ticket
    r = ticket(cluster, alice, "get", "inside.txt")
    assert call(cluster, "PUT", r.json["url"], body=b"x")[0] == 403
    assert cluster.ssh(alice, a, "cat /root/storage/inside.txt").stdout == "new\n"
    # no ticket, the console's session, a terminal's ticket
    url = f"http://{alice_host}/"
    assert call(cluster, "GET", url)[0] == 401
    assert call(cluster, "GET", url, headers={"Cookie": f"suanli_session={alice['token']}"})[0] \
        == 401
    t = cluster.server.request("POST", f"/v1/instances/{a['id']}/terminal", {},
                               token=alice["token"], headers={"Origin": origin_of(cluster)})
    assert t.status == 201, t
    assert call(cluster, "GET", f"http://{alice_host}/?ticket={t.json['ticket']}")[0] == 403
    # and a files ticket opens no terminal
    r = ticket(cluster, alice, "list")
    term = f"{a['id']}-terminal.localhost:{cluster.node.proxy_port}"
    status, _, _ = call(cluster, "GET", r.json["url"], host=term,
                        headers={"Upgrade": "websocket", "Connection": "Upgrade",
                                 "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                                 "Sec-WebSocket-Version": "13"})
    assert status == 403


def test_agent_refuses_paths_itself(cluster, renters):
    """Past nginx (with its key, read from nginx.conf as root here), the
    agent checks the path again: '..' and absolute paths, encoded or not."""
    alice, a, _, _ = renters
    conf = open(os.path.join(cluster.node.data_dir, "proxy", "nginx.conf")).read()
    key = re.search(r"X-Suanli-Terminal-Key (\w+);", conf).group(1)
    sock = f"/run/suanli-node/terminal-{cluster.node.node_id}.sock"
    import socket
    for path in ("/../../etc/shadow", "/%2e%2e/%2e%2e/etc/shadow", "//etc/shadow",
                 "/a%00b", "/x/../../etc"):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(10)
        s.connect(sock)
        s.sendall((f"GET /files HTTP/1.1\r\nHost: files\r\nX-Suanli-Terminal-Key: {key}\r\n"
                   f"X-Suanli-Files: {a['id']}\r\nX-Suanli-Files-Op: get\r\n"
                   f"X-Suanli-Files-Path: {path}\r\n\r\n").encode())
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
        s.close()
        assert re.match(rb"HTTP/1.1 40[03] ", answer), (path, answer[:200])
    # without the key: nothing
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    s.sendall((f"GET /files HTTP/1.1\r\nHost: files\r\nX-Suanli-Files: {a['id']}\r\n"
               "X-Suanli-Files-Op: list\r\nX-Suanli-Files-Path: /\r\n\r\n").encode())
    assert s.recv(100).startswith(b"HTTP/1.1 403 ")
    s.close()


def test_upload_past_the_quota(cluster, renters):
    alice, a, _, _ = renters
    free = int(cluster.ssh(alice, a, "python3 -c \"import os; v = os.statvfs('/root/storage');"
                           " print(v.f_bavail * v.f_frsize)\"").stdout)
    cluster.ssh(alice, a, f"fallocate -l {free - 24 * MIB} /root/storage/fill")
    status, _, body = do(cluster, alice, "put", "too-big.bin", body=b"\0" * (48 * MIB))
    assert status == 507 and b"full" in body, (status, body)
    out = cluster.ssh(alice, a, "ls -A /root/storage").stdout.split()
    assert "too-big.bin" not in out and not [x for x in out if "suanli-upload" in x], out
    # what fits still goes in
    status, _, _ = do(cluster, alice, "put", "small.bin", body=b"\1" * MIB)
    assert status == 201
    cluster.ssh(alice, a, "rm /root/storage/fill")


def test_console_uploads_and_downloads(cluster, renters, tmp_path):
    """The File storage page in Debian's chromium (tests/browser/t664_files.mjs):
    a file chosen in the page's file input is uploaded, listed, and its
    Download button saves the same bytes."""
    from conftest import PASSWORD
    from test_t510_console_renter import browse
    _, _, bob, b = renters
    upload = tmp_path / "from-the-page.bin"
    data = os.urandom(3 * MIB + 17)
    upload.write_bytes(data)
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    out = browse("tests/browser/t664_files.mjs",
                 {"SUANLI_URL": cluster.server.url, "SUANLI_EMAIL": bob["email"],
                  "SUANLI_PASSWORD": PASSWORD, "SUANLI_UPLOAD": str(upload),
                  "SUANLI_DOWNLOADS": str(downloads),
                  "SUANLI_FILES_ORIGIN": f"http://{b['id']}-files.localhost:"
                                         f"{cluster.node.proxy_port}"}, timeout=300)
    res = out["results"]
    assert res["heading"] == f"Files in {REGION}", res
    assert res["requests_before"] == 0, res  # nothing until Browse is pressed
    assert upload.name not in res["before"] and upload.name in res["after"], res
    assert res["note"] == f"{upload.name} uploaded", res
    got = downloads / upload.name
    assert got.exists(), res
    assert hashlib.sha256(got.read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()
    # the page's upload is the renter's file inside, root's, 0644
    out = cluster.ssh(bob, b, f"stat -c '%u %a %s' /root/storage/{upload.name}").stdout
    assert out == f"0 644 {len(data)}\n", out
