"""T100: registration, login sessions, the session cookie, logout, session
lifetime, the failed-login limit, the admin bootstrap and the admin's user
list."""
import calendar
import os
import stat
import time

import pytest

from conftest import PASSWORD, unique_email


def parse_time(s):
    """RFC 3339 UTC ('2026-01-02T03:04:05Z') to Unix seconds."""
    assert s.endswith("Z"), s
    return calendar.timegm(time.strptime(s[:19], "%Y-%m-%dT%H:%M:%S"))


def assert_error(r, status, code):
    assert r.status == status, r
    assert r.code == code, r
    assert r.json["error"]["message"], r


@pytest.fixture(scope="module")
def renter(server):
    return server.register()


def test_register_lowercases_email_and_refuses_duplicates(server):
    local = unique_email("MiXeD").split("@")[0]
    mixed = f"{local.upper()}@Example.COM"
    r = server.request("POST", "/v1/users",
                       {"email": mixed, "password": PASSWORD, "name": "Mixed Case"})
    assert r.status == 201, r
    assert r.json["email"] == mixed.lower()
    assert r.json["id"].startswith("u-")
    assert r.json["role"] == "renter"
    assert r.json["name"] == "Mixed Case"
    assert "password" not in r.body and "password_hash" not in r.body
    # logging in works with any case of the address
    assert server.login(mixed.lower())
    assert server.login(mixed)

    # the same address, whatever its case, is taken
    for again in (mixed, mixed.lower()):
        r = server.request("POST", "/v1/users",
                           {"email": again, "password": PASSWORD, "name": "x"})
        assert_error(r, 409, "email_taken")


def test_register_refuses_weak_password_and_bad_email(server):
    r = server.request("POST", "/v1/users",
                       {"email": unique_email(), "password": "short", "name": "x"})
    assert_error(r, 400, "weak_password")
    r = server.request("POST", "/v1/users",
                       {"email": "not-an-email", "password": PASSWORD, "name": "x"})
    assert_error(r, 400, "invalid_email")
    r = server.request("POST", "/v1/users", {"password": PASSWORD})
    assert_error(r, 400, "missing_field")


def test_login_gives_token_expiry_and_httponly_cookie(server, renter):
    before = time.time()
    r = server.request("POST", "/v1/sessions",
                       {"email": renter["email"], "password": PASSWORD})
    assert r.status == 201, r
    token = r.json["token"]
    assert token
    assert r.json["user"]["id"] == renter["id"]
    # default session lifetime is 7 days
    exp = parse_time(r.json["expires_at"])
    assert abs(exp - (before + 7 * 86400)) < 10
    cookie = r.headers.get("Set-Cookie")
    assert cookie, r.headers
    assert cookie.startswith(f"suanli_session={token};"), cookie
    assert "HttpOnly" in cookie
    assert "Path=/" in cookie
    me = server.request("GET", "/v1/me", token=token)
    assert me.status == 200 and me.json["id"] == renter["id"]


def test_wrong_password_and_unknown_email_are_401(server, renter):
    r = server.request("POST", "/v1/sessions",
                       {"email": renter["email"], "password": "wrong password!"})
    assert_error(r, 401, "invalid_credentials")
    assert "Set-Cookie" not in r.headers
    r = server.request("POST", "/v1/sessions",
                       {"email": unique_email("nobody"), "password": PASSWORD})
    assert_error(r, 401, "invalid_credentials")


def test_cookie_alone_authenticates(server, renter):
    token = server.login(renter["email"])
    r = server.request("GET", "/v1/me", headers={"Cookie": f"suanli_session={token}"})
    assert r.status == 200, r
    assert r.json["email"] == renter["email"]
    # a wrong cookie does not
    r = server.request("GET", "/v1/me", headers={"Cookie": "suanli_session=sl_nope"})
    assert r.status == 401, r
    # nor no credentials at all
    r = server.request("GET", "/v1/me")
    assert r.status == 401, r
    assert r.json["error"]["message"]


def test_logout_revokes_only_the_presented_token(server, renter):
    t1 = server.login(renter["email"])
    t2 = server.login(renter["email"])
    r = server.request("DELETE", "/v1/sessions/current", token=t1)
    assert r.status == 204, r
    cookie = r.headers.get("Set-Cookie", "")
    assert "suanli_session=" in cookie and "Max-Age=0" in cookie
    assert server.request("GET", "/v1/me", token=t1).status == 401
    assert server.request("GET", "/v1/me", headers={"Cookie": f"suanli_session={t1}"}).status == 401
    # another session of the same user is untouched
    assert server.request("GET", "/v1/me", token=t2).status == 200
    # logging out twice is a 401, not a crash
    assert server.request("DELETE", "/v1/sessions/current", token=t1).status == 401


def test_logout_with_cookie(server, renter):
    t = server.login(renter["email"])
    # as the console's page sends it: its own Origin and a JSON body type
    # (t380 shows what happens without them)
    r = server.request("DELETE", "/v1/sessions/current",
                       headers={"Cookie": f"suanli_session={t}", "Origin": server.url,
                                "Content-Type": "application/json"})
    assert r.status == 204, r
    assert server.request("GET", "/v1/me", token=t).status == 401


def test_session_ttl_sets_expiry(make_server):
    s = make_server({"auth.session_ttl": "120"})
    u = s.register()
    before = time.time()
    r = s.request("POST", "/v1/sessions", {"email": u["email"], "password": PASSWORD})
    assert r.status == 201, r
    exp = parse_time(r.json["expires_at"])
    assert before + 120 - 3 <= exp <= time.time() + 120 + 1, (before, exp)
    assert "Max-Age=120" in r.headers["Set-Cookie"]
    # the token lists with the same expiry
    toks = s.request("GET", "/v1/tokens", token=r.json["token"]).json["items"]
    cur = [t for t in toks if t["current"]]
    assert len(cur) == 1 and cur[0]["expires_at"] == r.json["expires_at"]


def test_expired_session_is_refused(make_server):
    """The shortest lifetime is 60 s: rather than wait, move one session's
    expiry into the past in the database while the server is stopped."""
    s = make_server({"auth.session_ttl": "60"})
    u = s.register()
    live = s.login(u["email"])
    tid = [t for t in s.request("GET", "/v1/tokens", token=u["token"]).json["items"]
           if t["current"]][0]["id"]
    s.stop()
    assert s.db_execute("UPDATE tokens SET expires_at = ?1 WHERE id = ?2",
                        (int(time.time()) - 1, tid))[1] == 1
    s.start()
    r = s.request("GET", "/v1/me", token=u["token"])
    assert_error(r, 401, "invalid_token")
    r = s.request("GET", "/v1/me", headers={"Cookie": f"suanli_session={u['token']}"})
    assert r.status == 401, r
    # the other session still works and no longer lists the expired one
    ids = [t["id"] for t in s.request("GET", "/v1/tokens", token=live).json["items"]]
    assert tid not in ids


def test_session_ttl_below_minimum_refused(make_server):
    s = make_server({"auth.session_ttl": "59"}, start=False)
    with pytest.raises(RuntimeError):
        s.start(timeout=5)


def test_failed_logins_are_rate_limited(make_server):
    s = make_server({"auth.login_max_failures": "3"})
    u = s.register()
    other = s.register()
    for _ in range(3):
        r = s.request("POST", "/v1/sessions", {"email": u["email"], "password": "bad password"})
        assert_error(r, 401, "invalid_credentials")
    # now even the right password is refused, with Retry-After
    for email in (u["email"], u["email"].upper()):
        r = s.request("POST", "/v1/sessions", {"email": email, "password": PASSWORD})
        assert_error(r, 429, "too_many_login_failures")
        ra = r.headers.get("Retry-After")
        assert ra is not None and ra.isdigit(), r.headers
        assert 1 <= int(ra) <= 15 * 60
    # existing sessions keep working; another account is not locked
    assert s.request("GET", "/v1/me", token=u["token"]).status == 200
    assert s.login(other["email"])


def test_successful_login_resets_failure_count(make_server):
    s = make_server({"auth.login_max_failures": "3"})
    u = s.register()
    for _ in range(2):
        r = s.request("POST", "/v1/sessions", {"email": u["email"], "password": "bad password"})
        assert r.status == 401
    assert s.login(u["email"])
    for _ in range(2):
        r = s.request("POST", "/v1/sessions", {"email": u["email"], "password": "bad password"})
        assert r.status == 401
    assert s.login(u["email"])


def test_admin_bootstrap(server):
    path = os.path.join(server.data_dir, "admin-password")
    st = os.stat(path)
    assert stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
    pw = server.admin_password
    assert len(pw) >= 16
    r = server.request("POST", "/v1/sessions", {"email": "admin@localhost", "password": pw})
    assert r.status == 201, r
    me = server.request("GET", "/v1/me", token=r.json["token"])
    assert me.status == 200
    assert me.json["email"] == "admin@localhost"
    assert me.json["role"] == "admin"
    assert me.json["can_start_instances"] is True


def test_admin_bootstrap_only_once(make_server):
    s = make_server()
    pw = s.admin_password
    s.restart()
    assert s.admin_password == pw
    assert s.login("admin@localhost", pw)


def test_admin_users_pagination(server, renter):
    made = [server.register()["id"] for _ in range(3)]
    seen = []
    cursor = None
    pages = 0
    while True:
        q = "/v1/admin/users?limit=2" + (f"&cursor={cursor}" if cursor else "")
        r = server.request("GET", q, token=server.admin_token)
        assert r.status == 200, r
        assert len(r.json["items"]) <= 2
        for u in r.json["items"]:
            assert set(u) >= {"id", "email", "role", "verification", "created_at",
                              "balance_micros"}
            assert "password_hash" not in u
        seen += [u["id"] for u in r.json["items"]]
        pages += 1
        cursor = r.json["next_cursor"]
        if cursor is None:
            break
        assert isinstance(cursor, str)
        assert pages < 100
    assert len(seen) == len(set(seen)), "a user listed twice"
    assert pages >= 3
    for uid in made + [renter["id"]]:
        assert uid in seen
    roles = {u["email"]: u["role"] for u in server.request(
        "GET", "/v1/admin/users?limit=500", token=server.admin_token).json["items"]}
    assert roles["admin@localhost"] == "admin"
    assert roles[renter["email"]] == "renter"

    # filter by email, case-insensitively
    r = server.request("GET", f"/v1/admin/users?email={renter['email'].upper()}",
                       token=server.admin_token)
    assert [u["id"] for u in r.json["items"]] == [renter["id"]]

    # bad paging parameters are 400
    for q in ("limit=0", "limit=abc", "limit=100000", "cursor=-1", "cursor=x"):
        r = server.request("GET", f"/v1/admin/users?{q}", token=server.admin_token)
        assert_error(r, 400, "invalid_parameter")

    # renters do not see the admin list at all
    r = server.request("GET", "/v1/admin/users", token=renter["token"])
    assert r.status == 404, r
