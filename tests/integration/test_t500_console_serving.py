"""suanlid serves the web console (docs/design/control-plane.md, "The
console"): hashed assets cached for a year, index.html for the console's own
routes, gzip when the client takes it, the security headers on every page,
and nothing outside console.dir however the path is spelt. The console here
is a small directory the test writes (test data; the real build is driven in
Chromium by the browser tests)."""
import gzip
import http.client
import re
import os
import shutil

import pytest

from conftest import BUILD, wait_for

INDEX = b"<!doctype html><html><head><title>console</title></head><body>app</body></html>\n"
APP_JS = b"export const hello = 'world';\n" * 50
SECRET = b"the operator's secret, outside the console directory\n"

CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data:; connect-src 'self' ws: wss:; frame-ancestors 'none'; "
       "base-uri 'none'; form-action 'self'")


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    """A console directory with an attacker's furniture around it: a secret
    beside it, symbolic links out of it, a dotfile, a FIFO, a directory."""
    root = tmp_path_factory.mktemp("console-site")
    (root / "secret.txt").write_bytes(SECRET)
    d = root / "console"
    a = d / "assets"
    a.mkdir(parents=True)
    (d / "index.html").write_bytes(INDEX)
    (d / "index.html.gz").write_bytes(gzip.compress(INDEX))
    (a / "app-3F4A5B6C.js").write_bytes(APP_JS)
    (a / "app-3F4A5B6C.js.gz").write_bytes(gzip.compress(APP_JS))
    (a / "style-77AA.css").write_bytes(b"body { color: red }\n")
    (a / "logo-1.svg").write_bytes(b"<svg xmlns='http://www.w3.org/2000/svg'/>")
    (a / "data-1.bin").write_bytes(b"\x00\x01\x02")
    (a / ".secret").write_bytes(SECRET)
    os.symlink(root / "secret.txt", a / "escape.js")
    os.symlink("/etc", a / "etc")
    os.symlink(root, a / "up")
    os.mkfifo(a / "fifo.js")
    (a / "dir").mkdir()
    (a / "dir" / "inner-1.js").write_bytes(b"export {};\n")
    return d


@pytest.fixture(scope="module")
def server(console):
    import tempfile
    from conftest import Server
    s = Server(tempfile.mkdtemp(prefix="suanli-test-"), {"console.dir": str(console)}).start()
    yield s
    s.stop()
    shutil.rmtree(s.data_dir, ignore_errors=True)


def raw(server, method, path, headers=None):
    """One request with the path sent exactly as written (no client-side
    normalisation of '..' or escapes): (status, headers, body)."""
    c = http.client.HTTPConnection(server.host, server.port, timeout=10)
    try:
        c.putrequest(method, path, skip_accept_encoding=True)
        for k, v in (headers or {}).items():
            c.putheader(k, v)
        c.endheaders()
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def assert_security_headers(h):
    # connect-src names the files hosts of the services domain too (the File
    # storage page: server/files.h), and nothing else more
    csp = re.sub(r" http://\*\.localhost(:\d+)?(?=;)", "", h.get("content-security-policy", ""))
    assert csp == CSP and csp != h["content-security-policy"], h
    assert h.get("x-content-type-options") == "nosniff", h
    assert h.get("referrer-policy") == "same-origin", h
    assert h.get("x-frame-options") == "DENY", h


@pytest.mark.parametrize("path", ["/", "/instances", "/instances/i-abc123", "/admin/hosts",
                                  "/login?next=/billing", "/v1x", "/healthz/more",
                                  "/index.html"])
def test_console_routes_get_index_html(server, path):
    status, h, body = raw(server, "GET", path)
    assert status == 200, (path, status, body[:200])
    assert body == INDEX
    assert h["content-type"] == "text/html; charset=utf-8"
    assert h["cache-control"] == "no-cache"
    assert h["vary"] == "Accept-Encoding"
    assert h["etag"].startswith('"')
    assert_security_headers(h)


def test_index_revalidates_with_etag(server):
    status, h, _ = raw(server, "GET", "/")
    status, h2, body = raw(server, "GET", "/somewhere", {"If-None-Match": h["etag"]})
    assert (status, body) == (304, b""), status
    assert h2["etag"] == h["etag"]
    assert_security_headers(h2)
    status, _, body = raw(server, "GET", "/", {"If-None-Match": '"other"'})
    assert (status, body) == (200, INDEX)


@pytest.mark.parametrize("name,ctype", [
    ("app-3F4A5B6C.js", "text/javascript; charset=utf-8"),
    ("style-77AA.css", "text/css; charset=utf-8"),
    ("logo-1.svg", "image/svg+xml"),
    ("data-1.bin", "application/octet-stream"),
    ("dir/inner-1.js", "text/javascript; charset=utf-8"),
])
def test_assets_types_and_long_caching(server, console, name, ctype):
    status, h, body = raw(server, "GET", "/assets/" + name)
    assert status == 200, (name, status, body[:200])
    assert body == (console / "assets" / name).read_bytes()
    assert h["content-type"] == ctype
    assert h["cache-control"] == "public, max-age=31536000, immutable"
    assert "content-encoding" not in h
    assert_security_headers(h)
    status, _, body = raw(server, "GET", "/assets/" + name, {"If-None-Match": h["etag"]})
    assert (status, body) == (304, b"")


def test_gzip_when_the_client_takes_it(server):
    path = "/assets/app-3F4A5B6C.js"
    for accept in ("gzip", "br, gzip, deflate", "gzip;q=0.5", "*", "x-gzip"):
        status, h, body = raw(server, "GET", path, {"Accept-Encoding": accept})
        assert status == 200
        assert h.get("content-encoding") == "gzip", accept
        assert gzip.decompress(body) == APP_JS
        assert h["vary"] == "Accept-Encoding"
        assert h["content-type"] == "text/javascript; charset=utf-8"
        assert int(h["content-length"]) == len(body) < len(APP_JS)
    for accept in (None, "identity", "gzip;q=0", "br", "*;q=0", "gzipx"):
        status, h, body = raw(server, "GET", path, {"Accept-Encoding": accept} if accept else {})
        assert status == 200
        assert "content-encoding" not in h, accept
        assert body == APP_JS
        assert h["vary"] == "Accept-Encoding"
    # the two bodies are different representations: different validators
    _, plain, _ = raw(server, "GET", path)
    _, zipped, _ = raw(server, "GET", path, {"Accept-Encoding": "gzip"})
    assert plain["etag"] != zipped["etag"]
    # index.html too; a file without a .gz beside it goes as it is
    status, h, body = raw(server, "GET", "/x/y", {"Accept-Encoding": "gzip"})
    assert h.get("content-encoding") == "gzip" and gzip.decompress(body) == INDEX
    status, h, body = raw(server, "GET", "/assets/style-77AA.css", {"Accept-Encoding": "gzip"})
    assert status == 200 and "content-encoding" not in h and body.startswith(b"body")


def test_head_and_other_methods(server):
    status, h, body = raw(server, "HEAD", "/assets/app-3F4A5B6C.js")
    assert (status, body) == (200, b"")
    assert int(h["content-length"]) == len(APP_JS)
    assert_security_headers(h)
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
        for path in ("/", "/assets/app-3F4A5B6C.js", "/instances"):
            status, h, body = raw(server, method, path)
            assert status == 405, (method, path, status)
            assert h["allow"] == "GET, HEAD"
            assert_security_headers(h)
            assert b"/v1/" in body


def test_missing_assets_are_404_not_the_page(server):
    for path in ("/assets/nope-1.js", "/assets/app-3F4A5B6C.js.map", "/assets/dir/none.js"):
        status, h, body = raw(server, "GET", path)
        assert status == 404, (path, status)
        assert body != INDEX
        assert h["cache-control"] == "no-store"
        assert_security_headers(h)


TRAVERSALS = [
    "/assets/../secret.txt", "/assets/../../secret.txt", "/assets/%2e%2e/secret.txt",
    "/assets/%2E%2E/%2e%2e/secret.txt", "/assets/..%2fsecret.txt", "/assets/..%2F..%2Fsecret.txt",
    "/assets/%2e%2e%2f%2e%2e%2fetc%2fpasswd", "/assets/../../../../../../etc/passwd",
    "/assets/..\\secret.txt", "/assets/%5c..%5csecret.txt", "/assets/./app-3F4A5B6C.js",
    "/assets//etc/passwd", "/assets/%2fetc%2fpasswd", "/assets/escape.js", "/assets/etc/passwd",
    "/assets/up/secret.txt", "/assets/.secret", "/assets/%2esecret", "/assets/dir",
    "/assets/dir/", "/assets/", "/assets", "/assets/fifo.js", "/assets/app-3F4A5B6C.js%00",
    "/assets/secret.txt%00.js", "/assets/%00", "/assets/%c0%ae%c0%ae/secret.txt",
    "/assets/%252e%252e/secret.txt", "/assets/app-3F4A5B6C.js/", "/assets/dir/../../secret.txt",
]


@pytest.mark.parametrize("path", TRAVERSALS)
def test_nothing_outside_the_directory(server, path):
    """The attacker's spellings of "elsewhere": each is refused (404) or,
    for the page's routes, answered with index.html; never a byte of a file
    outside the console directory, a dotfile, a FIFO or a listing."""
    status, h, body = raw(server, "GET", path)
    assert SECRET not in body and b"root:" not in body, (path, status)
    # an encoded NUL is not the end of the path: "app.js%00" is no file
    assert status == 404, (path, status)
    assert body != INDEX
    assert_security_headers(h)


def test_traversal_outside_assets_is_the_page(server):
    for path in ("/../secret.txt", "/%2e%2e/%2e%2e/etc/passwd", "/..%2f..%2fetc%2fpasswd",
                 "/index.html/../../secret.txt"):
        status, _, body = raw(server, "GET", path)
        assert (status, body) == (200, INDEX), path


def test_huge_paths(server):
    for path in ("/" + "a" * 3000, "/assets/" + "a" * 3000 + ".js",
                 "/assets/" + "/".join(["d"] * 1100)):
        status, h, body = raw(server, "GET", path)
        assert status == 414, (len(path), status)
        assert_security_headers(h)
    # a name over 255 bytes, in a path under the limit
    status, _, _ = raw(server, "GET", "/assets/" + "a" * 300 + ".js")
    assert status == 404
    # past what the HTTP library buffers: refused there, the server lives on
    try:
        status, _, _ = raw(server, "GET", "/" + "b" * 200_000)
        assert status >= 400
    except (ConnectionError, http.client.HTTPException):
        pass
    assert raw(server, "GET", "/healthz")[0] == 200


def test_api_keeps_its_json(server):
    """/v1, /healthz and /metrics are never the console's: an unknown API
    path is a JSON 404, not index.html."""
    for path in ("/v1", "/v1/", "/v1/nope", "/v1/instances/x/nope", "/v1/assets/app.js",
                 "/v1/../v1/nope"):
        status, h, body = raw(server, "GET", path)
        assert status == 404, (path, status)
        assert h["content-type"] == "application/json", path
        assert b'"not_found"' in body and body != INDEX
    status, h, body = raw(server, "GET", "/v1/me")
    assert status == 401 and h["content-type"] == "application/json"
    status, h, _ = raw(server, "POST", "/v1/nope")
    assert status == 404 and h["content-type"] == "application/json"
    status, h, _ = raw(server, "GET", "/healthz")
    assert status == 200 and h["content-type"] == "application/json"
    status, h, _ = raw(server, "GET", "/metrics")
    assert status == 200 and h["content-type"].startswith("text/plain")


def test_keep_alive_across_console_and_api(server):
    """Page, assets and API on one connection (the browser's usual)."""
    c = http.client.HTTPConnection(server.host, server.port, timeout=10)
    try:
        for path in ("/", "/assets/app-3F4A5B6C.js", "/v1/me", "/instances", "/assets/nope.js"):
            c.request("GET", path)
            r = c.getresponse()
            r.read()
            assert r.getheader("Connection", "").lower() != "close", path
    finally:
        c.close()


def test_a_console_not_built(make_server, tmp_path):
    """No directory, or one without index.html: a page that says how to build
    it (503), and the API as ever."""
    empty = tmp_path / "empty"
    (empty / "assets").mkdir(parents=True)
    for where in (str(tmp_path / "missing"), str(empty)):
        s = make_server({"console.dir": where})
        status, h, body = raw(s, "GET", "/")
        assert status == 503, where
        assert b"make console" in body and b"console.dir" in body
        assert h["content-type"] == "text/html; charset=utf-8"
        assert h["cache-control"] == "no-store"
        assert_security_headers(h)
        assert raw(s, "GET", "/assets/app.js")[0] == 404
        assert raw(s, "GET", "/v1/me")[0] == 401
        s.stop()
    # built later, without a restart: served
    (empty / "index.html").write_bytes(INDEX)
    s = make_server({"console.dir": str(empty)})
    assert raw(s, "GET", "/instances")[:3:2] == (200, INDEX)


def test_default_directory_beside_the_binary(make_server):
    """Without console.dir: console/ beside suanlid, as `make` builds it."""
    s = make_server()
    status, _, body = raw(s, "GET", "/")
    index = os.path.join(BUILD, "console", "index.html")
    if os.path.exists(index):
        with open(index, "rb") as f:
            assert (status, body) == (200, f.read())
    else:
        assert status == 503 and b"make console" in body


def test_console_requests_do_not_stall_the_api(server):
    """Many asset requests in flight do not keep /v1/me waiting."""
    import threading
    import time
    stop = threading.Event()

    def hammer():
        while not stop.is_set():
            raw(server, "GET", "/assets/app-3F4A5B6C.js", {"Accept-Encoding": "gzip"})
    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        worst = 0.0
        for _ in range(20):
            t0 = time.monotonic()
            assert raw(server, "GET", "/v1/me")[0] == 401
            worst = max(worst, time.monotonic() - t0)
        assert worst < 1.0, worst
    finally:
        stop.set()
        for t in threads:
            t.join()
    wait_for(lambda: raw(server, "GET", "/healthz")[0] == 200, timeout=5)
