"""T120: real-name verification: a PRC resident ID with its GB 11643 check
digit, masked everywhere, never stored raw; admin approval and rejection;
what it means for starting instances."""
import os
import random

import pytest

WEIGHTS = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2]
CHECK = "10X98765432"


def id_number(first17=None):
    """A valid 18-character resident ID (GB 11643-1999 check digit)."""
    if first17 is None:
        first17 = "110105" + f"{random.randint(1960, 2004)}0{random.randint(1, 9)}" \
                  f"{random.randint(10, 28)}{random.randint(100, 999)}"
    assert len(first17) == 17 and first17.isdigit()
    return first17 + CHECK[sum(int(c) * w for c, w in zip(first17, WEIGHTS)) % 11]


def id_number_ending_x():
    while True:
        n = id_number()
        if n.endswith("X"):
            return n


def wrong_check(n):
    good = n[17]
    bad = next(c for c in "0123456789X" if c != good)
    return n[:17] + bad


def assert_error(r, status, code):
    assert r.status == status, r
    assert r.code == code, r
    assert r.json["error"]["message"], r


def assert_hidden(resp, number):
    assert number not in resp.body, resp
    assert number[:17] not in resp.body, resp
    assert number[3:14] not in resp.body, resp


def test_check_digit_computation():
    # a widely published sample number: 11010519491231002X
    assert id_number("11010519491231002") == "11010519491231002X"


def test_submit_approve_flow(server):
    u = server.register()
    admin = server.admin_token
    me = server.request("GET", "/v1/me", token=u["token"]).json
    assert me["verification"] == "none"
    assert me["can_start_instances"] is False
    assert server.request("GET", "/v1/me/verification", token=u["token"]).status == 404

    number = id_number_ending_x()
    r = server.request("POST", "/v1/me/verification",
                       {"real_name": "张三", "id_number": number}, token=u["token"])
    assert r.status == 201, r
    assert r.json["state"] == "pending"
    masked = r.json["id_number_masked"]
    assert masked == number[:3] + "*" * 11 + number[-4:], masked
    assert masked.endswith("X")
    assert r.json["real_name"] == "张三"
    assert_hidden(r, number)

    for path in ("/v1/me", "/v1/me/verification"):
        resp = server.request("GET", path, token=u["token"])
        assert resp.status == 200
        assert_hidden(resp, number)
    assert server.request("GET", "/v1/me", token=u["token"]).json["verification"] == "pending"

    # resubmitting while pending is a conflict
    r = server.request("POST", "/v1/me/verification",
                       {"real_name": "张三", "id_number": id_number()}, token=u["token"])
    assert_error(r, 409, "verification_exists")

    # the admin sees it in the pending list, masked
    lst = server.request("GET", "/v1/admin/verifications", token=admin)
    assert lst.status == 200
    assert_hidden(lst, number)
    mine = [v for v in lst.json["items"] if v["user_id"] == u["id"]]
    assert len(mine) == 1
    assert mine[0]["id_number_masked"] == masked
    assert mine[0]["email"] == u["email"]
    assert mine[0]["state"] == "pending"

    # a renter may not list or decide
    assert server.request("GET", "/v1/admin/verifications", token=u["token"]).status == 404
    assert server.request("POST", f"/v1/admin/users/{u['id']}/verification", {"approve": True},
                          token=u["token"]).status == 404
    assert server.request("GET", "/v1/me", token=u["token"]).json["verification"] == "pending"

    r = server.request("POST", f"/v1/admin/users/{u['id']}/verification", {"approve": True},
                       token=admin)
    assert r.status == 200, r
    assert r.json["state"] == "approved"
    assert r.json["decided_at"]
    assert_hidden(r, number)
    me = server.request("GET", "/v1/me", token=u["token"]).json
    assert me["verification"] == "approved"
    assert me["can_start_instances"] is True
    # no longer pending
    lst = server.request("GET", "/v1/admin/verifications", token=admin).json["items"]
    assert u["id"] not in [v["user_id"] for v in lst]
    lst = server.request("GET", "/v1/admin/verifications?state=approved", token=admin)
    assert u["id"] in [v["user_id"] for v in lst.json["items"]]
    assert_hidden(lst, number)
    # deciding again: nothing pending
    r = server.request("POST", f"/v1/admin/users/{u['id']}/verification", {"approve": False,
                       "reason": "x"}, token=admin)
    assert_error(r, 409, "no_pending_verification")
    # approved: another submission is refused
    r = server.request("POST", "/v1/me/verification",
                       {"real_name": "张三", "id_number": id_number()}, token=u["token"])
    assert_error(r, 409, "verification_exists")

    # the admin user list shows the state too, without the number
    users = server.request("GET", "/v1/admin/users?limit=500", token=admin)
    assert_hidden(users, number)
    assert [x for x in users.json["items"] if x["id"] == u["id"]][0]["verification"] == "approved"


def test_invalid_numbers_refused(server):
    u = server.register()
    good = id_number()
    for bad in (wrong_check(good), good[:17], good + "1", "11010519491231002A",
                "1101051949123100-X", "abcdefghijklmnopqr", ""):
        r = server.request("POST", "/v1/me/verification",
                           {"real_name": "李四", "id_number": bad}, token=u["token"])
        assert r.status == 400, (bad, r)
        # an empty field fails the field's own check; every other the number's
        assert r.code == ("invalid_field" if bad == "" else "invalid_id_number"), (bad, r)
        assert r.json["error"]["message"]
        assert_hidden(r, good)
    r = server.request("POST", "/v1/me/verification",
                       {"real_name": "李四", "id_number": wrong_check(good)}, token=u["token"])
    assert_error(r, 400, "invalid_id_number")
    for body in ({"id_number": good}, {"real_name": "李四"}, {"real_name": "", "id_number": good},
                 {"real_name": "李四", "id_number": int(good[:17])}):
        r = server.request("POST", "/v1/me/verification", body, token=u["token"])
        assert r.status == 400, (body, r)
    # nothing was recorded
    assert server.request("GET", "/v1/me", token=u["token"]).json["verification"] == "none"
    # lowercase x and spaces are normalised
    n = id_number_ending_x()
    spaced = f"{n[:6]} {n[6:14]} {n[14:-1]}x"
    r = server.request("POST", "/v1/me/verification",
                       {"real_name": "李四", "id_number": spaced}, token=u["token"])
    assert r.status == 201, r
    assert r.json["id_number_masked"] == n[:3] + "*" * 11 + n[-4:]


def test_reject_needs_reason_and_renter_may_resubmit(server):
    u = server.register()
    admin = server.admin_token
    number = id_number()
    r = server.request("POST", "/v1/me/verification",
                       {"real_name": "王五", "id_number": number}, token=u["token"])
    assert r.status == 201
    for body in ({"approve": False}, {"approve": False, "reason": ""}):
        r = server.request("POST", f"/v1/admin/users/{u['id']}/verification", body, token=admin)
        assert_error(r, 400, "missing_field")
    assert server.request("GET", "/v1/me", token=u["token"]).json["verification"] == "pending"
    for body in ({}, {"approve": "no"}, {"approve": 0}):
        r = server.request("POST", f"/v1/admin/users/{u['id']}/verification", body, token=admin)
        assert r.status == 400, (body, r)

    reason = "the name does not match the ID photo: submit again with the name on the card"
    r = server.request("POST", f"/v1/admin/users/{u['id']}/verification",
                       {"approve": False, "reason": reason}, token=admin)
    assert r.status == 200, r
    assert r.json["state"] == "rejected"
    v = server.request("GET", "/v1/me/verification", token=u["token"])
    assert v.json["state"] == "rejected" and v.json["reason"] == reason
    me = server.request("GET", "/v1/me", token=u["token"]).json
    assert me["verification"] == "rejected" and me["can_start_instances"] is False

    # may submit again (the same number too: it was rejected, not in use)
    r = server.request("POST", "/v1/me/verification",
                       {"real_name": "王五", "id_number": number}, token=u["token"])
    assert r.status == 201, r
    assert r.json["state"] == "pending"
    assert server.request("GET", "/v1/me", token=u["token"]).json["verification"] == "pending"


def test_decide_unknown_user(server):
    r = server.request("POST", "/v1/admin/users/u-nosuchuser/verification", {"approve": True},
                       token=server.admin_token)
    assert r.status == 404 and r.code == "no_such_user", r
    assert r.json["error"]["message"]


def test_same_id_number_on_second_account(server):
    a, b = server.register(), server.register()
    number = id_number()
    assert server.request("POST", "/v1/me/verification", {"real_name": "赵六", "id_number": number},
                          token=a["token"]).status == 201
    r = server.request("POST", "/v1/me/verification", {"real_name": "赵六", "id_number": number},
                       token=b["token"])
    assert_error(r, 409, "id_number_in_use")
    # normalised forms are the same number
    r = server.request("POST", "/v1/me/verification",
                       {"real_name": "赵六", "id_number": " " + number.lower() + " "},
                       token=b["token"])
    assert_error(r, 409, "id_number_in_use")
    # once approved for A it stays in use
    assert server.request("POST", f"/v1/admin/users/{a['id']}/verification", {"approve": True},
                          token=server.admin_token).status == 200
    r = server.request("POST", "/v1/me/verification", {"real_name": "赵六", "id_number": number},
                       token=b["token"])
    assert_error(r, 409, "id_number_in_use")


def test_require_verification_false(make_server):
    s = make_server({"auth.require_verification": "false"})
    u = s.register()
    me = s.request("GET", "/v1/me", token=u["token"]).json
    assert me["verification"] == "none"
    assert me["can_start_instances"] is True


def test_raw_number_not_in_database(make_server):
    s = make_server()
    u = s.register()
    number = id_number()
    assert s.request("POST", "/v1/me/verification", {"real_name": "孙七", "id_number": number},
                     token=u["token"]).status == 201
    assert s.request("POST", f"/v1/admin/users/{u['id']}/verification", {"approve": True},
                     token=s.admin_token).status == 200
    s.stop()  # checkpoints the WAL; read the -wal file too in case it did not
    blob = b""
    for suffix in ("", "-wal", "-shm", "-journal"):
        p = os.path.join(s.data_dir, "suanli.db" + suffix)
        if os.path.exists(p):
            with open(p, "rb") as f:
                blob += f.read()
    assert len(blob) > 0
    for form in (number, number[:17], number[6:14] + number[14:17]):
        assert form.encode() not in blob, form
        assert form.encode("utf-16-le") not in blob, form
    # the log says nothing of it either
    with open(s.log_path, "rb") as f:
        assert number.encode() not in f.read()
    # but the masked copy is there (so this scan reads the real data)
    assert (number[:3] + "*" * 11 + number[-4:]).encode() in blob
