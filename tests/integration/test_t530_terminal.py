"""The terminal in the browser (issue 13, item 3; docs/design/access.md,
"Terminal").

Real parts only: suanlid hands out tickets (POST /v1/instances/{id}/terminal),
the node's nginx asks suanlid about the websocket as it asks about service
ports, and the agent's terminal server runs `runc exec -t` of tmux inside a
real instance. The websocket client is written here with sockets (RFC 6455:
masked client frames), as a browser would speak it to
ws://{instance}-terminal.localhost:PROXY/?ticket=T, with the console's Origin."""
import base64
import json
import os
import re
import socket
import struct
import time

import pytest

from conftest import chrooted, FrontDoor, free_port, wait_for

# The agent refuses terminals in a chroot (node/agent.c, setup_terminal):
# the runtime's exec lands on the mount namespace's root, which there is the
# host's, not the instance's. fresh-machine runs the suite in a chroot; a
# real host is never one.
pytestmark = pytest.mark.skipif(chrooted() is not None,
                                reason="terminals are off when the agent runs in a chroot")


class Refused(Exception):
    def __init__(self, status, text):
        super().__init__(f"{status}: {text}")
        self.status = status
        self.text = text


class WebSocket:
    """A websocket client: the handshake, masked frames, and reads that
    collect the terminal's output."""

    def __init__(self, port, host, path, origin=None, headers=None, unix=None):
        if unix:
            self.s = socket.socket(socket.AF_UNIX)
            self.s.settimeout(10)
            self.s.connect(unix)
        else:
            self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}", "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
        if origin:
            lines.append(f"Origin: {origin}")
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.s.recv(4096)
            if not chunk:
                break
            data += chunk
        head, _, self.buf = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0
        if status != 101:
            body = self.buf
            m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
            want = int(m.group(1)) if m else None
            try:
                while want is None or len(body) < want:
                    chunk = self.s.recv(4096)
                    if not chunk:
                        break
                    body += chunk
            except OSError:
                pass
            self.s.close()
            raise Refused(status, body.decode(errors="replace"))
        self.output = b""
        self.closed = False

    def send(self, opcode, payload):
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", n)
        self.s.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def type(self, text):
        self.send(0x2, text.encode())

    def resize(self, cols, rows):
        self.send(0x1, json.dumps({"type": "resize", "cols": cols, "rows": rows}).encode())

    def _frame(self):
        while True:
            if len(self.buf) >= 2:
                n, at = self.buf[1] & 0x7f, 2
                if n == 126 and len(self.buf) >= 4:
                    n, at = struct.unpack("!H", self.buf[2:4])[0], 4
                elif n == 127 and len(self.buf) >= 10:
                    n, at = struct.unpack("!Q", self.buf[2:10])[0], 10
                if n < 126 or at > 2:
                    assert not self.buf[1] & 0x80, "a server's frames are not masked"
                    if len(self.buf) >= at + n:
                        op, payload = self.buf[0] & 0x0f, self.buf[at:at + n]
                        self.buf = self.buf[at + n:]
                        return op, payload
            chunk = self.s.recv(65536)
            if not chunk:
                return None, b""
            self.buf += chunk

    def read_until(self, pattern, timeout=20):
        """Output until pattern (a regex of bytes) shows, else AssertionError."""
        deadline = time.time() + timeout
        while not re.search(pattern, self.output):
            if time.time() > deadline or self.closed:
                break
            self.s.settimeout(max(0.1, deadline - time.time()))
            try:
                op, payload = self._frame()
            except socket.timeout:
                break
            if op is None or op == 0x8:
                self.closed = True
            elif op == 0x9:
                self.send(0xa, payload)
            elif op == 0x2:
                self.output += payload
        assert re.search(pattern, self.output), \
            f"no {pattern!r} in the terminal's output: {self.output[-2000:]!r}"
        return self.output

    def close(self):
        try:
            self.send(0x8, struct.pack("!H", 1000))
        except OSError:
            pass
        self.s.close()

    def drop(self):
        """The network goes away: no close frame."""
        self.s.close()


def console_origin(cluster):
    return cluster.server.url.rstrip("/")


def ticket(cluster, user, iid, origin="console"):
    headers = {"Origin": console_origin(cluster)} if origin == "console" else \
        ({"Origin": origin} if origin else {})
    return cluster.server.request("POST", f"/v1/instances/{iid}/terminal", {},
                                  token=user["token"], headers=headers)


def target(url):
    """(host, path) of a ws:// URL."""
    rest = url.split("//", 1)[1]
    host, _, path = rest.partition("/")
    return host, "/" + path


def open_terminal(cluster, user, iid, origin=None, **kw):
    r = ticket(cluster, user, iid)
    assert r.status == 201, r
    host, path = target(r.json["url"])
    return WebSocket(cluster.node.proxy_port, host, path,
                     origin=origin or console_origin(cluster), **kw)


def socket_path(cluster):
    return f"/run/suanli-node/terminal-{cluster.node.node_id}.sock"


@pytest.fixture(scope="module")
def owned(cluster):
    owner = cluster.renter()
    inst = cluster.create(owner)
    yield owner, inst
    cluster.verb(owner, inst["id"], "release")


def test_ticket_shape(cluster, owned):
    owner, inst = owned
    r = ticket(cluster, owner, inst["id"])
    assert r.status == 201, r
    p = cluster.node.proxy_port
    assert r.json["url"].startswith(f"ws://{inst['id']}-terminal.localhost:{p}/?ticket=")
    assert re.fullmatch(r"[0-9a-f]{64}", r.json["ticket"])
    assert r.json["url"].endswith(r.json["ticket"])
    assert r.json["origin"] == console_origin(cluster)
    # a script without an Origin gets the API's own address as the origin
    r = ticket(cluster, owner, inst["id"], origin=None)
    assert r.status == 201 and r.json["origin"] == console_origin(cluster), r
    # a page of another site cannot have one made for it
    r = ticket(cluster, owner, inst["id"], origin="http://evil.example")
    assert r.status == 403 and r.code == "origin_not_allowed", r


def test_hostname_then_reattach(cluster, owned):
    owner, inst = owned
    started = time.monotonic()
    ws = open_terminal(cluster, owner, inst["id"])
    ws.resize(100, 30)
    ws.read_until(rb"\[console\]")
    print(f"\nticket -> tmux's first screen: {time.monotonic() - started:.3f} s")
    ws.type("hostname; echo MARK-$((6*7))\r")
    ws.read_until(rb"MARK-42")
    assert inst["id"].encode() in ws.output
    # the size reached the shell inside (tmux keeps a row for its status line)
    ws.type("stty size\r")
    ws.read_until(rb"29 100")
    # the network drops: no close frame
    ws.drop()
    # the same tmux session comes back with its screen: the earlier output
    # shows without typing anything
    ws2 = open_terminal(cluster, owner, inst["id"])
    ws2.resize(100, 30)
    ws2.read_until(rb"MARK-42")
    assert inst["id"].encode() in ws2.output
    # closed properly (a close frame: the console's Close button) and
    # opened again at once: the same
    ws2.close()
    ws3 = open_terminal(cluster, owner, inst["id"])
    ws3.resize(100, 30)
    ws3.read_until(rb"MARK-42")
    ws3.close()
    p = cluster.ssh(owner, inst, "tmux ls")
    assert p.stdout.startswith("console:"), p.stdout


def test_reattach_keeps_a_full_screen(cluster, owned):
    """A screen filled to its last rows comes back whole: the shell starts
    at the first real size the client sends (a 2x1 of a box not laid out
    yet is ignored), so tmux never shrinks its window to a passing size,
    which pushed the top rows into its history for good."""
    owner, inst = owned
    ws = open_terminal(cluster, owner, inst["id"])
    ws.resize(100, 30)
    ws.type("clear; printf 'ROW%02d\\n' $(seq 1 26)\r")
    ws.read_until(rb"ROW26")
    ws.close()
    ws = open_terminal(cluster, owner, inst["id"])
    # what a page measures before its box is laid out (xterm's minimum)
    ws.resize(2, 1)
    ws.resize(100, 30)
    ws.read_until(rb"ROW01[\s\S]*ROW26")
    ws.close()


def test_confined_like_ssh(cluster, owned):
    """The runtime's exec, not nsenter: the shell has the container's
    seccomp filter, no_new_privs, capabilities, cgroup and namespaces, as
    an SSH session has."""
    owner, inst = owned
    probe = ("echo BEGIN; grep -E '^(Seccomp|NoNewPrivs|CapEff|CapBnd):' /proc/self/status; "
             "cat /proc/self/cgroup; readlink /proc/self/ns/pid /proc/self/ns/mnt "
             "/proc/self/ns/net; echo END")
    via_ssh = cluster.ssh(owner, inst, probe).stdout
    ws = open_terminal(cluster, owner, inst["id"])
    ws.resize(200, 50)
    ws.type("clear; " + probe.replace("echo BEGIN", "echo BEG''IN").replace(
        "echo END", "echo E''ND") + "\r")
    out = ws.read_until(rb"BEGIN[\s\S]*END").decode(errors="replace")
    ws.close()
    # tmux redraws with cursor moves: compare without them and without blanks
    seen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]|\s+", "",
                  out.split("BEGIN", 1)[1].split("END")[0])
    want = via_ssh.split("BEGIN", 1)[1].split("END")[0]
    assert re.search(r"Seccomp:\s+2\n", want) and re.search(r"NoNewPrivs:\s+1\n", want), want
    assert seen == re.sub(r"\s+", "", want), (seen, want)


def test_limits_per_instance(cluster, owned):
    owner, inst = owned
    open_ = []
    try:
        def opened():
            try:
                open_.append(open_terminal(cluster, owner, inst["id"]))
            except Refused as e:
                # the previous test's terminals may still be closing
                assert e.status == 429, e
                return False
            return len(open_) == 4
        wait_for(opened, timeout=30, interval=0.5, what="four terminals")
        with pytest.raises(Refused) as e:
            open_terminal(cluster, owner, inst["id"])
        assert e.value.status == 429
    finally:
        for ws in open_:
            ws.close()
    # closed ones free their places
    ws = wait_for(lambda: _try_open(cluster, owner, inst["id"]), timeout=20, interval=0.3,
                  what="a terminal after closing the others")
    ws.close()


def _try_open(cluster, owner, iid):
    try:
        return open_terminal(cluster, owner, iid)
    except Refused as e:
        assert e.status == 429, e
        return None


def test_attacker_is_refused(cluster, owned):
    owner, inst = owned
    port = cluster.node.proxy_port
    origin = console_origin(cluster)
    attacker = cluster.renter()
    host = f"{inst['id']}-terminal.localhost:{port}"

    # another renter cannot have a ticket for the owner's instance
    r = ticket(cluster, attacker, inst["id"])
    assert r.status == 404, r
    # no ticket at all
    with pytest.raises(Refused) as e:
        WebSocket(port, host, "/", origin=origin)
    assert e.value.status == 401
    # the owner's console session and the port's access token are not tickets
    token = [s for s in inst["services"] if s["port"] == 6006][0]["access_url"].split("=", 1)[1]
    for headers, path in (({"Cookie": f"suanli_session={owner['token']}"}, "/"),
                          ({"Cookie": f"suanli_port_token={token}"}, "/"),
                          ({}, f"/?suanli_token={token}"),
                          ({"Authorization": f"Bearer {owner['token']}"}, "/")):
        with pytest.raises(Refused) as e:
            WebSocket(port, host, path, origin=origin, headers=headers)
        assert e.value.status == 401, (headers, path)
    # a ticket works once
    r = ticket(cluster, owner, inst["id"])
    _, path = target(r.json["url"])
    WebSocket(port, host, path, origin=origin).close()
    with pytest.raises(Refused) as e:
        WebSocket(port, host, path, origin=origin)
    assert e.value.status == 401
    # a ticket for another instance (the attacker's own) does not open this one
    mine = cluster.create(attacker)
    try:
        r = ticket(cluster, attacker, mine["id"])
        _, path = target(r.json["url"])
        with pytest.raises(Refused) as e:
            WebSocket(port, host, path, origin=origin)
        assert e.value.status == 403
        # and it was spent on the try
        with pytest.raises(Refused) as e:
            WebSocket(port, f"{mine['id']}-terminal.localhost:{port}", path, origin=origin)
        assert e.value.status == 401
        # from inside an instance: the agent's socket is not there, and the
        # proxy's port is not reachable from the bridge
        sock = socket_path(cluster)
        assert os.path.exists(sock)
        p = cluster.ssh(attacker, mine,
                        f"ls -la {sock} /run/suanli-node 2>&1; "
                        f"python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); "
                        f"s.connect('{sock}')\" 2>&1; echo rc=$?", check=False)
        assert "No such file" in p.stdout and "rc=1" in p.stdout, p.stdout
    finally:
        cluster.verb(attacker, mine["id"], "release")
    # a page of another origin (cross-site websocket hijacking), or none
    for bad in ("http://evil.example", None, origin.replace("127.0.0.1", "localhost")):
        r = ticket(cluster, owner, inst["id"])
        _, path = target(r.json["url"])
        with pytest.raises(Refused) as e:
            WebSocket(port, host, path, origin=bad)
        assert e.value.status == 403, bad
    # a ticket on the wrong domain
    r = ticket(cluster, owner, inst["id"])
    _, path = target(r.json["url"])
    with pytest.raises(Refused) as e:
        WebSocket(port, f"{inst['id']}-terminal.evil.example:{port}", path, origin=origin)
    assert e.value.status == 403
    # the agent's socket, from this host, without nginx's key: refused
    r = ticket(cluster, owner, inst["id"])
    _, path = target(r.json["url"])
    for headers in ({"X-Suanli-Terminal": inst["id"]},
                    {"X-Suanli-Terminal": inst["id"], "X-Suanli-Terminal-Key": "0" * 64}):
        with pytest.raises(Refused) as e:
            WebSocket(0, "terminal", path, origin=origin, headers=headers,
                      unix=socket_path(cluster))
        assert e.value.status == 403
    mode = os.stat(socket_path(cluster)).st_mode & 0o777
    assert mode == 0o660, oct(mode)
    # the owner still gets in
    ws = open_terminal(cluster, owner, inst["id"])
    ws.type("echo still-$((1+1))\r")
    ws.read_until(rb"still-2")
    ws.close()


def test_expired_ticket(cluster, owned):
    owner, inst = owned
    r = ticket(cluster, owner, inst["id"])
    import sqlite3
    db = sqlite3.connect(os.path.join(cluster.server.data_dir, "suanli.db"))
    with db:
        db.execute("UPDATE terminal_tickets SET expires_at = expires_at - 61")
    db.close()
    host, path = target(r.json["url"])
    with pytest.raises(Refused) as e:
        WebSocket(cluster.node.proxy_port, host, path, origin=console_origin(cluster))
    assert e.value.status == 401


def test_through_the_front_door(cluster, owned, tmp_path):
    """A front door (suanlid front-config's nginx) before the host's proxy:
    the terminal host is routed to its instance's host like a service."""
    owner, inst = owned
    with open(os.path.join(cluster.server.data_dir, "front-token")) as f:
        front_token = f.read().strip()
    r = cluster.server.request("GET", "/v1/front/route", token=front_token,
                               headers={"X-Original-Host": "i-aaaaaaaaaaaa-terminal.localhost"})
    assert r.status == 403, r
    front = FrontDoor(cluster.server, str(tmp_path / "front"), f"127.0.0.1:{free_port()}")
    try:
        r = ticket(cluster, owner, inst["id"])
        host, path = target(r.json["url"])
        ws = WebSocket(front.port, host, path, origin=console_origin(cluster))
        ws.type("echo FRONT-$((3*3))\r")
        ws.read_until(rb"FRONT-9")
        ws.close()
        # the front judges nothing: a spent ticket is the host's 401
        with pytest.raises(Refused) as e:
            WebSocket(front.port, host, path, origin=console_origin(cluster))
        assert e.value.status == 401
    finally:
        front.stop()


def test_stopped_then_no_gpu(cluster, owned):
    owner, inst = owned
    iid = inst["id"]
    early = ticket(cluster, owner, iid)
    assert early.status == 201
    assert cluster.verb(owner, iid, "stop").status == 200
    cluster.wait_state(owner, iid, "stopped")
    r = ticket(cluster, owner, iid)
    assert r.status == 409 and r.code == "instance_not_running", r
    assert "start" in r.json["error"]["message"]
    # a ticket made while it ran does not open the stopped one
    host, path = target(early.json["url"])
    with pytest.raises(Refused) as e:
        WebSocket(cluster.node.proxy_port, host, path, origin=console_origin(cluster))
    assert e.value.status == 403
    # no-GPU mode has its terminal too
    assert cluster.verb(owner, iid, "start", {"mode": "nogpu"}).status == 200
    started = cluster.wait_state(owner, iid, "running")
    assert started["mode"] == "nogpu"
    ws = open_terminal(cluster, owner, iid)
    ws.type("hostname; nproc; echo NOGPU-$((2*3))\r")
    ws.read_until(rb"NOGPU-6")
    assert iid.encode() in ws.output
    ws.close()


def test_without_tmux(cluster, owned):
    """An image without tmux gets a login shell and a line saying so."""
    owner, inst = owned
    inst = cluster.get(owner, inst["id"])
    cluster.ssh(owner, inst, "mv $(command -v tmux) /root/tmux.away")
    try:
        ws = open_terminal(cluster, owner, inst["id"])
        ws.read_until(rb"this image has no tmux")
        ws.type("echo NOTMUX-$((4*4)); hostname\r")
        ws.read_until(rb"NOTMUX-16\r?\n" + inst["id"].encode())
        ws.close()
    finally:
        cluster.ssh(owner, inst, "mv /root/tmux.away /usr/bin/tmux")


def test_open_terminal_keeps_idle_stop_away(cluster, owned):
    """An open terminal is a session, as an SSH one is: the idle stop waits
    while it is open and fires after it closed."""
    owner, inst = owned
    iid = inst["id"]
    ws = open_terminal(cluster, owner, iid)
    ws.read_until(rb"# ")
    r = cluster.server.request("POST", f"/v1/instances/{iid}/idle-stop", {"after_seconds": 10},
                               token=owner["token"])
    assert r.status == 200, r
    # longer than the period: heartbeats (every 3 s) report the session
    deadline = time.time() + 20
    while time.time() < deadline:
        assert cluster.get(owner, iid)["state"] == "running"
        time.sleep(1)
    ws.close()
    started = time.time()
    cluster.wait_state(owner, iid, "stopped", timeout=60)
    assert time.time() - started >= 5
    kinds = [e["kind"] for e in cluster.server.request(
        "GET", f"/v1/instances/{iid}/events", token=owner["token"]).json["items"]]
    assert "idle_stop" in kinds, kinds
