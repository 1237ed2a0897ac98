"""The proxy boundary (issue 10, items 1 and 2; docs/design/access.md,
"Service ports"): through a node's nginx, no renter reaches another's private
service port, and suanli's own credentials never reach an instance.

Two renters on the real agent and its nginx: the victim publishes a private
port 6006, the attacker a public port 6008. Both run an app that echoes what
it received (request line, Cookie, Authorization, Referer) and says whose it
is. Every request goes to 127.0.0.1:PROXY as a browser, curl or a raw socket
would send it; a victim's page is recognised by its marker."""
import http.client
import json
import os
import re
import socket
import sqlite3
import subprocess

import pytest

from conftest import wait_for

ECHO_APP = r'''
import http.server, json, sys
WHO = sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def reply(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        out = json.dumps({
            "who": WHO, "line": self.requestline,
            "cookie": self.headers.get_all("Cookie") or [],
            "authorization": self.headers.get_all("Authorization") or [],
            "referer": self.headers.get_all("Referer") or [],
            "headers": [[k, v] for k, v in self.headers.items()],
            "body": body.decode("latin-1")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        if self.path.startswith("/toss"):
            self.send_header("Set-Cookie", "tossed=1; Domain=localhost; Path=/")
            self.send_header("Set-Cookie", "suanli_session=planted; domain=.LOCALHOST; Path=/")
            self.send_header("Set-Cookie", "own=1; Path=/")
        if self.path.startswith("/accel"):
            self.send_header("X-Accel-Redirect", "/_suanli/auth")
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = do_PUT = reply
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), H).serve_forever()
'''


def start_echo(cluster, user, inst, port, who):
    cluster.ssh(user, inst, "cat > /tmp/echo.py <<'EOF'\n" + ECHO_APP + "\nEOF\n"
                f"setsid nohup python3 /tmp/echo.py {port} {who} >/dev/null 2>&1 </dev/null &")


def service(inst, port):
    return [s for s in inst["services"] if s["port"] == port][0]


def split_url(url):
    """(host with port, path) of an http:// URL."""
    rest = url.split("//", 1)[1]
    host, _, path = rest.partition("/")
    return host, "/" + path


def request(cluster, host, path="/", headers=None, method="GET", body=None):
    """(status, headers, body text) of one request to the node's nginx."""
    c = http.client.HTTPConnection("127.0.0.1", cluster.node.proxy_port, timeout=15)
    c.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    c.putheader("Host", host)
    for k, v in (headers or {}).items():
        for one in (v if isinstance(v, list) else [v]):
            c.putheader(k, one)
    if body is not None:
        c.putheader("Content-Length", str(len(body)))
    c.endheaders(body)
    r = c.getresponse()
    out = (r.status, r.getheaders(), r.read().decode("utf-8", "replace"))
    c.close()
    return out


def raw(cluster, data):
    """What nginx answers to these bytes (the whole exchange, connection
    closed by either side): the status of each response, and the text."""
    s = socket.create_connection(("127.0.0.1", cluster.node.proxy_port), timeout=10)
    s.sendall(data)
    out = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    except socket.timeout:
        pass
    s.close()
    text = out.decode("latin-1")
    # a response follows the previous body directly, not on a line of its own
    return [int(code) for code in re.findall(r"HTTP/1\.1 (\d{3}) ", text)], text


def echoed(body):
    try:
        return json.loads(body)
    except ValueError:
        return None


def victim_and_attacker(cluster):
    """Two renters with an instance each, answering through the node's nginx:
    the victim's echo app on a private 6006 (VICTIM-SECRET), the attacker's
    on a public 6008. Shared with t390."""
    victim, attacker = cluster.renter(), cluster.renter()
    vi, ai = cluster.create(victim), cluster.create(attacker)
    start_echo(cluster, victim, vi, 6006, "VICTIM-SECRET")
    start_echo(cluster, attacker, ai, 6008, "attacker-page")
    r = cluster.server.request("POST", f"/v1/instances/{ai['id']}/ports",
                               {"port": 6008, "public": True}, token=attacker["token"])
    assert r.status == 200, r
    w = {"victim": victim, "attacker": attacker, "vi": vi, "ai": ai,
         "p": cluster.node.proxy_port}
    w["vhost"], w["vlink"] = split_url(service(vi, 6006)["access_url"])
    w["ahost"] = split_url(service(ai, 6008)["url"])[0]
    wait_for(lambda: request(cluster, w["vhost"], w["vlink"])[0] == 200, timeout=30,
             what="the victim's app behind nginx (with its link)")
    wait_for(lambda: request(cluster, w["ahost"])[0] == 200, timeout=30,
             what="the attacker's public app")
    return w


def release_both(cluster, w):
    for user, inst in ((w["victim"], w["vi"]), (w["attacker"], w["ai"])):
        cluster.verb(user, inst["id"], "release")
    for user, inst in ((w["victim"], w["vi"]), (w["attacker"], w["ai"])):
        cluster.wait_state(user, inst["id"], "released")


@pytest.fixture(scope="module")
def world(cluster):
    """victim: a private 6006 with its echo app; attacker: a public 6008."""
    w = victim_and_attacker(cluster)
    yield w
    release_both(cluster, w)


def no_victim(status, body):
    assert "VICTIM-SECRET" not in body, (status, body[:300])


def test_issue_10_curl_proxy_with_another_host_header(cluster, world):
    """The hole as filed: curl --proxy sends the victim's host on the request
    line and the attacker's public port in Host."""
    p = world["p"]
    vname = world["vhost"].split(":")[0]
    for host_header in (world["ahost"], world["ahost"].split(":")[0],
                        world["ahost"].upper()):
        out = subprocess.run(
            ["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "--max-time", "10",
             "--proxy", f"http://127.0.0.1:{p}", "-H", f"Host: {host_header}",
             f"http://{vname}:{p}/"], capture_output=True, text=True)
        body, _, code = out.stdout.rpartition("\n")
        no_victim(code, body)
        assert code == "400" and "different hosts" in body, (host_header, code, body)
    # the same without a lie in Host: the victim's port asks for credentials
    out = subprocess.run(["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "--max-time", "10",
                          "--proxy", f"http://127.0.0.1:{p}", f"http://{vname}:{p}/"],
                         capture_output=True, text=True)
    body, _, code = out.stdout.rpartition("\n")
    no_victim(code, body)
    assert code == "401", (code, body)
    # and absolute-form to the attacker's own public port still works
    aname = world["ahost"].split(":")[0]
    out = subprocess.run(["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "--max-time", "10",
                          "--proxy", f"http://127.0.0.1:{p}", f"http://{aname}:{p}/"],
                         capture_output=True, text=True)
    body, _, code = out.stdout.rpartition("\n")
    assert code == "200" and "attacker-page" in body, (code, body)


def test_raw_request_lines(cluster, world):
    vname, aname = world["vhost"].split(":")[0], world["ahost"].split(":")[0]
    p = world["p"]
    refused = [
        # absolute-form naming the victim, Host naming the attacker's public port
        f"GET http://{vname}/ HTTP/1.1\r\nHost: {aname}:{p}\r\n",
        f"GET http://{vname}:{p}/ HTTP/1.1\r\nHost: {aname}\r\n",
        f"GET http://{vname.upper()}/ HTTP/1.1\r\nHost: {aname.upper()}\r\n",
        f"GET http://{vname}./ HTTP/1.1\r\nHost: {aname}.\r\n",
        # ... and the other way round
        f"GET http://{aname}/ HTTP/1.1\r\nHost: {vname}:{p}\r\n",
        # a host that merely starts like the other
        f"GET http://{vname}/ HTTP/1.1\r\nHost: {vname}.{aname}\r\n",
        # HTTP/1.0 without Host, absolute-form
        f"GET http://{vname}/ HTTP/1.0\r\n",
    ]
    for head in refused:
        statuses, text = raw(cluster, (head + "Connection: close\r\n\r\n").encode())
        no_victim(statuses, text)
        assert statuses == [400], (head, text[:400])
    # two Host headers: nginx itself refuses
    statuses, text = raw(cluster, f"GET / HTTP/1.1\r\nHost: {aname}\r\nHost: {vname}\r\n"
                         "Connection: close\r\n\r\n".encode())
    no_victim(statuses, text)
    assert statuses == [400], text[:400]
    # agreeing hosts in any case, port or final dot: the victim's port is
    # judged as the victim's (401 without credentials, never the page)
    for head in (f"GET http://{vname}/ HTTP/1.1\r\nHost: {vname.upper()}:{p}\r\n",
                 f"GET http://{vname.upper()}./ HTTP/1.1\r\nHost: {vname}\r\n",
                 f"GET / HTTP/1.1\r\nHost: {vname}.:{p}\r\n"):
        statuses, text = raw(cluster, (head + "Connection: close\r\n\r\n").encode())
        no_victim(statuses, text)
        assert statuses == [401], (head, text[:400])
    # keep-alive: the attacker's own request, then one for the victim on the
    # same connection; each is judged on its own host
    statuses, text = raw(cluster, (f"GET / HTTP/1.1\r\nHost: {aname}:{p}\r\n\r\n"
                                   f"GET / HTTP/1.1\r\nHost: {vname}:{p}\r\n"
                                   "Connection: close\r\n\r\n").encode())
    no_victim(statuses, text)
    assert statuses == [200, 401], text[:600]


def test_forwarded_host_headers_are_not_trusted(cluster, world):
    vname, ahost = world["vhost"].split(":")[0], world["ahost"]
    lies = {"X-Original-Host": ahost, "X-Forwarded-Host": ahost, "X-Host": ahost,
            "X-Original-URI": "/", "X-Forwarded-Server": ahost, "Forwarded": f"host={ahost}",
            "X-Suanli-URI": "/", "X-Real-IP": "127.0.0.1"}
    status, _, body = request(cluster, world["vhost"], "/", headers=lies)
    no_victim(status, body)
    assert status == 401, (status, body)
    # the other way: the attacker's host with headers naming the victim gets
    # the attacker's page, never the victim's
    status, _, body = request(cluster, ahost, "/", headers={
        "X-Original-Host": world["vhost"], "X-Forwarded-Host": world["vhost"]})
    no_victim(status, body)
    assert status == 200 and "attacker-page" in body
    # nginx also overrides them towards the app
    seen = echoed(body)
    names = {k.lower(): v for k, v in seen["headers"]}
    assert "x-original-host" in names  # the app's business: passed as sent
    assert names["x-forwarded-host"] == ahost
    status, _, body = request(cluster, vname + f":{world['p']}", world["vlink"],
                              headers={"X-Forwarded-For": "6.6.6.6"})
    assert status == 200
    names = {k.lower(): v for k, v in echoed(body)["headers"]}
    assert names["x-forwarded-for"] == "127.0.0.1"


def test_owner_passes_in_any_case_and_with_final_dot(cluster, world):
    vhost, link = world["vhost"], world["vlink"]
    name, port = vhost.split(":")
    for host in (vhost, vhost.upper(), f"{name}.:{port}", f"{name.upper()}.:{port}"):
        status, headers, body = request(cluster, host, link)
        assert status == 200 and "VICTIM-SECRET" in body, (host, status, body)
        cookie = dict(headers).get("Set-Cookie", "")
        assert cookie.startswith("suanli_port_token="), headers
        value = cookie.split(";")[0].split("=", 1)[1]
        status, _, body = request(cluster, host, "/",
                                  headers={"Cookie": f"suanli_port_token={value}"})
        assert status == 200 and "VICTIM-SECRET" in body, (host, status)
    # curl --proxy, the owner's link: absolute-form is fine when hosts agree
    out = subprocess.run(["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "--max-time", "10",
                          "--proxy", f"http://127.0.0.1:{port}", f"http://{vhost}{link}"],
                         capture_output=True, text=True)
    body, _, code = out.stdout.rpartition("\n")
    assert code == "200" and "VICTIM-SECRET" in body, (code, body)


def node_token(cluster):
    with open(os.path.join(cluster.node.data_dir, "node.json")) as f:
        return json.load(f)["node_token"]


def test_auth_route_answers_only_the_node(cluster, world):
    """A client calling suanlid directly with forged headers gets nothing."""
    s = cluster.server
    node = cluster.node.node_id
    forged = {"X-Original-Host": world["vhost"], "X-Original-URI": "/"}
    # the old public route is gone
    assert s.request("GET", "/v1/proxy/auth", headers=forged).status == 404
    auth = f"/v1/nodes/{node}/proxy/auth"
    r = s.request("GET", auth, headers=forged)
    assert r.status == 401, r
    for token in (world["attacker"]["token"], world["victim"]["token"], "sl_forged"):
        r = s.request("GET", auth, headers=forged, token=token)
        assert r.status == 401, r
    # the session cookie is no node's token either
    r = s.request("GET", auth, headers={**forged,
                                        "Cookie": f"suanli_session={world['victim']['token']}"})
    assert r.status == 401, r
    # another node (enrolled as any host can be, with a join token) may not ask
    # about this node's instances: not by this node's id, nor by its own
    j = s.request("POST", "/v1/admin/join-tokens", {"region": "sample-1"},
                  token=s.admin_token).json
    inv = {"cpu_cores": 4, "memory_mib": 8192, "disk_total_gib": 100, "disk_free_gib": 90,
           "driver_version": "", "cuda_version": "", "agent_version": "t360", "gpus": []}
    r = s.request("POST", "/v1/nodes/enroll", {"join_token": j["token"], "hostname": "t360-rogue",
                                               "address": "203.0.113.9", "inventory": inv})
    assert r.status == 201, r
    rogue, rogue_token = r.json["node_id"], r.json["node_token"]
    r = s.request("GET", auth, headers=forged, token=rogue_token)
    assert r.status == 404, r
    for cookie in ("", f"suanli_session={world['victim']['token']}"):
        r = s.request("GET", f"/v1/nodes/{rogue}/proxy/auth",
                      headers={"X-Original-Host": world["vhost"], "X-Original-URI": world["vlink"],
                               **({"Cookie": cookie} if cookie else {})}, token=rogue_token)
        assert r.status == 403 and "X-Suanli-URI" not in r.headers, r
    # the real node asking with the owner's link passes, as nginx does
    r = s.request("GET", auth, headers={"X-Original-Host": world["vhost"],
                                        "X-Original-URI": world["vlink"]},
                  token=node_token(cluster))
    assert r.status == 204 and r.headers.get("X-Suanli-URI") == "/", r


def test_credentials_stay_with_the_platform(cluster, world):
    victim = world["victim"]
    vhost, link = world["vhost"], world["vlink"]
    token = link.split("suanli_token=", 1)[1]
    status, headers, _ = request(cluster, vhost, link)
    port_cookie = dict(headers)["Set-Cookie"].split(";")[0]
    sent = {
        "Cookie": [f"app=1; suanli_session={victim['token']}; {port_cookie}; theme=dark",
                   "SUANLI_SESSION=sl_upper; second=2"],
        "Authorization": f"Bearer {victim['token']}",
        "Referer": f"http://{vhost}/tree?suanli_token={token}&page=2",
    }
    path = f"/echo?a=1&suanli_token={token}&b=2;suanli%5Ftoken={token}"
    status, _, body = request(cluster, vhost, path, headers=sent)
    assert status == 200, (status, body)
    seen = echoed(body)
    assert seen["who"] == "VICTIM-SECRET"
    assert seen["line"] == "GET /echo?a=1&b=2 HTTP/1.1", seen["line"]
    assert seen["cookie"] == ["app=1; theme=dark; second=2"], seen["cookie"]
    assert seen["authorization"] == [], seen["authorization"]
    assert seen["referer"] == [f"http://{vhost}/tree?page=2"], seen["referer"]
    everything = json.dumps(seen)
    for secret in (token, victim["token"], "sl_upper", port_cookie.split("=", 1)[1]):
        assert secret not in everything, secret
    # the app's own credentials pass untouched
    status, _, body = request(cluster, vhost, "/x?token=jupyter-own", headers={
        "Cookie": f"{port_cookie}; _xsrf=2|abc|def; session=\"quoted value\"",
        "Authorization": "Basic dXNlcjpwYXNz", "Referer": f"http://{vhost}/prev?q=1"})
    seen = echoed(body)
    assert status == 200 and seen["line"] == "GET /x?token=jupyter-own HTTP/1.1"
    assert seen["cookie"] == ["_xsrf=2|abc|def; session=\"quoted value\""]
    assert seen["authorization"] == ["Basic dXNlcjpwYXNz"]
    assert seen["referer"] == [f"http://{vhost}/prev?q=1"]
    # a large Cookie (as big a line as nginx takes from a client) passes whole
    big = "big=" + "x" * 7000
    status, _, body = request(cluster, vhost, "/big", headers={
        "Cookie": f"{port_cookie}; {big}", "Referer": f"http://{vhost}/?" + "r" * 900})
    assert status == 200 and echoed(body)["cookie"] == [big], (status, body[:300])
    # a request that passes on the owner's session alone: no cookie is left
    status, _, body = request(cluster, vhost, "/",
                              headers={"Cookie": f"suanli_session={victim['token']}"})
    seen = echoed(body)
    assert status == 200 and seen["cookie"] == [] and victim["token"] not in body
    # a POST body passes, with a length or chunked (nothing dropped)
    status, _, body = request(cluster, vhost, "/post", method="POST", body=b"payload-123",
                              headers={"Cookie": port_cookie})
    assert status == 200 and echoed(body)["body"] == "payload-123", (status, body)
    name = vhost.split(":")[0]
    statuses, text = raw(cluster, (f"POST /chunked HTTP/1.1\r\nHost: {vhost}\r\n"
                                   f"Cookie: {port_cookie}\r\nTransfer-Encoding: chunked\r\n"
                                   "Connection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n").encode())
    assert statuses == [200] and "VICTIM-SECRET" in text and name in text, text[:500]
    # and the attacker's public app sees none of a visitor's suanli cookies
    status, _, body = request(cluster, world["ahost"], f"/?suanli_token={token}", headers={
        "Cookie": f"suanli_session={victim['token']}; {port_cookie}",
        "Authorization": f"Bearer {victim['token']}",
        "Referer": f"http://{vhost}{link}"})
    assert status == 200 and "attacker-page" in body
    assert token not in body and victim["token"] not in body, body


def test_other_renters_credentials(cluster, world):
    vhost, link = world["vhost"], world["vlink"]
    attacker = world["attacker"]
    # the attacker's session on the victim's port: 403
    status, _, body = request(cluster, vhost, "/",
                              headers={"Cookie": f"suanli_session={attacker['token']}"})
    no_victim(status, body)
    assert status == 403
    # with the attacker's own port token for another port as well: 401
    _, headers, _ = request(cluster, world["ahost"], "/")
    a_link = split_url(service(world["ai"], 6008)["access_url"])[1]
    a_token = a_link.split("suanli_token=", 1)[1]
    for cookie in (f"suanli_session={attacker['token']}; suanli_port_token={a_token}",
                   f"suanli_port_token={a_token}"):
        status, _, body = request(cluster, vhost, "/", headers={"Cookie": cookie})
        no_victim(status, body)
        assert status == 401, (cookie, status)
    status, _, body = request(cluster, vhost, f"/?suanli_token={a_token}")
    no_victim(status, body)
    assert status == 401
    # cookies planted by a sibling (another suanli_port_token, a stranger's
    # session) do not lock the owner out
    _, headers, _ = request(cluster, vhost, link)
    mine = dict(headers)["Set-Cookie"].split(";")[0]
    status, _, body = request(cluster, vhost, "/", headers={
        "Cookie": f"suanli_port_token=planted; suanli_session={attacker['token']}; {mine}"})
    assert status == 200 and "VICTIM-SECRET" in body


def test_sibling_pages_cannot_use_a_visitors_cookies(cluster, world):
    """Every service is same-site with every other (one domain): a page of the
    attacker's public service can make a visitor's browser send requests to
    the victim's private one, cookies included (SameSite=Lax does not stop
    same-site requests). The browser says where a request comes from
    (Sec-Fetch-Site); cookies then count only for a GET navigation."""
    victim, vhost, link = world["victim"], world["vhost"], world["vlink"]
    _, headers, _ = request(cluster, vhost, link)
    cookies = [dict(headers)["Set-Cookie"].split(";")[0],
               f"suanli_session={victim['token']}"]
    for cookie in cookies:
        for method, site, mode in (("POST", "same-site", "navigate"),  # a form post
                                   ("GET", "same-site", "cors"),  # fetch(credentials)
                                   ("GET", "same-site", "no-cors"),  # <img>, <script>
                                   ("POST", "cross-site", "no-cors"),
                                   ("GET", "same-site", "websocket")):
            status, _, body = request(cluster, vhost, "/", method=method, body=b"" if
                                      method == "POST" else None, headers={
                                          "Cookie": cookie, "Sec-Fetch-Site": site,
                                          "Sec-Fetch-Mode": mode})
            no_victim(status, body)
            assert status == 401, (cookie, method, site, mode, status, body)
        # following a link from elsewhere, and the service's own requests, pass
        for method, site, mode in (("GET", "same-site", "navigate"),
                                   ("GET", "cross-site", "navigate"),
                                   ("POST", "same-origin", "cors"),
                                   ("GET", "none", "navigate")):
            status, _, body = request(cluster, vhost, "/", method=method, body=b"x" if
                                      method == "POST" else None, headers={
                                          "Cookie": cookie, "Sec-Fetch-Site": site,
                                          "Sec-Fetch-Mode": mode})
            assert status == 200 and "VICTIM-SECRET" in body, (cookie, method, site, mode)
    # the access link itself is a credential from anywhere
    status, _, body = request(cluster, vhost, link, headers={"Sec-Fetch-Site": "cross-site",
                                                             "Sec-Fetch-Mode": "cors"})
    assert status == 200


def test_app_cookies_stay_on_its_own_host(cluster, world):
    """An app cannot set cookies for its siblings' hosts (cookie tossing)."""
    status, headers, _ = request(cluster, world["ahost"], "/toss")
    assert status == 200
    cookies = [v for k, v in headers if k.lower() == "set-cookie"]
    aname = world["ahost"].split(":")[0]
    assert f"tossed=1; Domain={aname}; Path=/" in cookies, cookies
    assert f"suanli_session=planted; domain={aname}; Path=/" in cookies, cookies
    assert "own=1; Path=/" in cookies


def test_app_cannot_steer_nginx(cluster, world):
    """X-Accel-Redirect from an app is ignored: no internal redirect to the
    auth location (which carries the node's token)."""
    status, headers, body = request(cluster, world["ahost"], "/accel")
    assert status == 200 and "attacker-page" in body, (status, body)


def test_internal_locations_are_not_reachable(cluster, world):
    for host in (world["vhost"], world["ahost"]):
        for path in ("/_suanli/auth", "/%5Fsuanli/auth", "/a/../_suanli/auth", "/_suanli/401",
                     "//_suanli/auth", "/_suanli/auth?suanli_token=x"):
            status, _, body = request(cluster, host, path)
            no_victim(status, body)
            # nginx's internal locations answer a client as if absent
            assert status == 404, (host, path, status, body)
            assert "node" not in body.lower()


def test_request_smuggling_is_refused(cluster, world):
    vname, aname, p = world["vhost"].split(":")[0], world["ahost"].split(":")[0], world["p"]
    smuggled = (f"GET / HTTP/1.1\r\nHost: {vname}:{p}\r\n\r\n").encode()
    # nginx: both lengths, or two, are 400 Bad Request; a transfer coding
    # it does not know is 501 Not Implemented
    for want, te in ((400, "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n"),
                     (400, "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n"),
                     (400, "Content-Length: 4\r\nContent-Length: 40\r\n"),
                     (501, "Transfer-Encoding: chunked, identity\r\n")):
        data = (f"POST / HTTP/1.1\r\nHost: {aname}:{p}\r\n{te}\r\n0\r\n\r\n").encode() + smuggled
        statuses, text = raw(cluster, data)
        no_victim(statuses, text)
        assert statuses and statuses[0] == want, (te, text[:400])
        assert 200 not in statuses[1:], (te, text[:600])


def read_db(cluster, sql, args=()):
    db = sqlite3.connect(f"file:{cluster.server.data_dir}/suanli.db?mode=ro", uri=True)
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def db_bytes(cluster):
    data = b""
    for suffix in ("", "-wal"):
        try:
            with open(f"{cluster.server.data_dir}/suanli.db{suffix}", "rb") as f:
                data += f.read()
        except FileNotFoundError:
            pass
    return data


def test_port_tokens_sealed_at_rest(cluster, world):
    vi, victim = world["vi"], world["victim"]
    rows = read_db(cluster, "SELECT port, token FROM instance_ports WHERE instance_id = ?",
                   (vi["id"],))
    assert rows and all(t.startswith("s1:") for _, t in rows), rows
    data = db_bytes(cluster)
    for s in cluster.get(victim, vi["id"])["services"]:
        token = s["access_url"].split("suanli_token=", 1)[1]
        assert token.encode() not in data, s["port"]
    # while the link works
    assert request(cluster, world["vhost"], world["vlink"])[0] == 200


def test_plaintext_tokens_sealed_at_start(cluster):
    """Rows written before tokens were sealed (plaintext) are sealed when
    suanlid starts; the old links keep working, Jupyter's token included."""
    owner = cluster.renter()
    inst = cluster.create(owner)
    start_echo(cluster, owner, inst, 6006, "sealed-later")
    old, app_old = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
    cluster.server.stop()
    try:
        db = sqlite3.connect(f"{cluster.server.data_dir}/suanli.db")
        with db:
            db.execute("UPDATE instance_ports SET token = ? WHERE instance_id = ? AND port = 6006",
                       (old, inst["id"]))
            db.execute("UPDATE instance_ports SET token = ?, app = 'jupyter', app_token = ?"
                       " WHERE instance_id = ? AND port = 6008", (old, app_old, inst["id"]))
        db.close()
    finally:
        cluster.server.start()
    assert "sealed the tokens of 2 service ports" in open(cluster.server.log_path).read()
    rows = dict(read_db(cluster, "SELECT port, token || ' ' || app_token FROM instance_ports"
                                 " WHERE instance_id = ?", (inst["id"],)))
    assert rows[6006].startswith("s1:") and rows[6008].split()[1].startswith("s1:"), rows
    fresh = cluster.get(owner, inst["id"])
    assert service(fresh, 6006)["access_url"].endswith(f"?suanli_token={old}")
    assert fresh["jupyter"]["url"].endswith(f"tree?token={app_old}&suanli_token={old}")
    host = split_url(service(fresh, 6006)["url"])[0]
    wait_for(lambda: request(cluster, host, f"/?suanli_token={old}")[0] == 200, timeout=30,
             what="the old link through nginx")
    # the node gets Jupyter's token opened: it starts Jupyter with it
    node = cluster.node.node_id
    r = cluster.server.request("GET", f"/v1/nodes/{node}/desired", token=node_token(cluster))
    assert r.status == 200, r
    mine = [i for i in r.json["instances"] if i["id"] == inst["id"]][0]
    assert {"port": 6008, "app": "jupyter", "app_token": app_old} in mine["ports"], mine["ports"]
    # what a stolen copy of the database gives: no plaintext left behind
    data = db_bytes(cluster)
    assert old.encode() not in data and app_old.encode() not in data
    cluster.verb(owner, inst["id"], "release")
