"""Bad requests for instances get a 4xx that says what to do, and leave
nothing half-created: no instance row, no GPU held, no port taken. A renter
holds at most instances.max_per_user instances, even when racing."""
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import IMAGE, ApiHost, Cluster


def gpus_free(cluster):
    nodes = cluster.server.request("GET", "/v1/admin/nodes",
                                   token=cluster.server.admin_token).json["items"]
    return nodes[0]["gpus_free"]


BASE = {"gpu_model": "RTX 4090", "gpus": 1, "image": IMAGE, "data_disk_gib": 10}

CASES = [
    ({"image": "no-such-image"}, 404, "no_such_image", "suanli image ls"),
    ({"gpu_model": "GTX 9999"}, 404, "no_such_gpu_model", "suanli market"),
    ({"region": "nowhere-1"}, 404, "no_such_region", "suanli regions"),
    ({"gpus": 0}, 400, "invalid_field", "gpus"),
    ({"gpus": 9}, 400, "invalid_field", "gpus"),
    ({"gpus": 8, "gpu_model": "A100 80GB"}, 409, "no_capacity", "A100"),
    ({"data_disk_gib": 0}, 400, "invalid_field", "data_disk_gib"),
    ({"data_disk_gib": 10 ** 7}, 400, "invalid_field", "data_disk_gib"),
    ({"gpus": "one"}, 400, "invalid_field", "gpus"),
    ({"plan": "forever"}, 400, "invalid_field", "plan"),
    ({"color": "red"}, 400, "unknown_field", "color"),
]


@pytest.mark.parametrize("change,status,code,hint", CASES)
def test_bad_create_is_refused_and_leaves_nothing(cluster, change, status, code, hint):
    user = cluster.renter()
    before = gpus_free(cluster)
    r = cluster.server.request("POST", "/v1/instances", {**BASE, **change}, token=user["token"])
    assert r.status == status and r.code == code, r
    assert hint in r.json["error"]["message"], r
    assert cluster.server.request("GET", "/v1/instances?state=all",
                                  token=user["token"]).json["items"] == []
    assert gpus_free(cluster) == before


def test_unverified_renter_is_told_to_verify(cluster):
    user = cluster.server.register()
    cluster.server.credit(user["id"], 100_000_000)
    r = cluster.server.request("POST", "/v1/instances", BASE, token=user["token"])
    assert r.status == 403 and r.code == "verification_required", r
    assert "suanli verify" in r.json["error"]["message"]


def test_balance_under_one_hour_is_refused_with_the_amount_missing(cluster):
    user = cluster.renter(credit_micros=1_000_000)  # 1.00; an hour of a 4090 is 1.98
    r = cluster.server.request("POST", "/v1/instances", BASE, token=user["token"])
    assert r.status == 409 and r.code == "insufficient_balance", r
    msg = r.json["error"]["message"]
    assert "1.98" in msg and "0.98" in msg, msg
    assert cluster.server.request("GET", "/v1/instances?state=all",
                                  token=user["token"]).json["items"] == []


def test_a_renter_holds_at_most_max_per_user_instances_even_when_racing(make_server):
    """instances.max_per_user, counted inside the placement transaction:
    concurrent creates cannot pass it together. Stopped instances count
    (their disks are kept); a released one does not."""
    server = make_server({"instances.max_per_user": "3"})
    host = ApiHost(server)
    user, other = Cluster(server, None).renter(), Cluster(server, None).renter()
    body = {**BASE, "image": host.image}

    with ThreadPoolExecutor(max_workers=12) as pool:
        results = list(pool.map(lambda _: server.request("POST", "/v1/instances", body,
                                                         token=user["token"]), range(12)))
    made = [r.json["id"] for r in results if r.status == 201]
    refused = [r for r in results if r.status != 201]
    assert len(made) == 3, results[:3]
    for r in refused:
        assert r.status == 409 and r.code == "too_many_instances", r
        msg = r.json["error"]["message"]
        assert "3 instances" in msg and "suanli release" in msg, msg
    # the limit is the renter's own: another renter creates
    assert server.request("POST", "/v1/instances", body, token=other["token"]).status == 201

    # releasing frees a place once the host confirms it is gone
    iid = made[0]
    r = server.request("POST", f"/v1/instances/{iid}/release", {}, token=user["token"])
    assert r.status == 200, r
    r = server.request("POST", "/v1/instances", body, token=user["token"])
    assert r.status == 409 and r.code == "too_many_instances", r  # still releasing
    host.heartbeat([{"id": iid, "state": "absent"}])
    assert server.request("GET", f"/v1/instances/{iid}",
                          token=user["token"]).json["state"] == "released"
    assert server.request("POST", "/v1/instances", body, token=user["token"]).status == 201


def test_names_are_unique_per_renter_even_when_racing(make_server):
    """A name names one of a renter's instances not released: concurrent
    creates with one name give one instance and 409 name_taken for the rest;
    another renter may use it; a released instance's name is free again.
    GET /v1/instances?name= resolves it to the id (exactly, own only)."""
    server = make_server()
    host = ApiHost(server)
    user, other = Cluster(server, None).renter(), Cluster(server, None).renter()
    body = {**BASE, "image": host.image, "name": "nb"}

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda _: server.request("POST", "/v1/instances", body,
                                                         token=user["token"]), range(8)))
    made = [r.json["id"] for r in results if r.status == 201]
    assert len(made) == 1, results
    iid = made[0]
    for r in results:
        if r.status != 201:
            assert r.status == 409 and r.code == "name_taken", r
            msg = r.json["error"]["message"]
            assert f"'nb' ({iid})" in msg and "choose another name" in msg, msg
    assert server.request("POST", "/v1/instances", body, token=other["token"]).status == 201

    def named(token, name, query=""):
        r = server.request("GET", f"/v1/instances?name={name}{query}", token=token)
        assert r.status == 200, r
        return [i["id"] for i in r.json["items"]]

    assert named(user["token"], "nb") == [iid]
    assert named(user["token"], "NB") == [] and named(user["token"], "n%25") == []
    assert len(named(other["token"], "nb")) == 1 and named(other["token"], "nb") != [iid]
    r = server.request("GET", "/v1/instances?name=", token=user["token"])
    assert r.status == 400 and r.code == "invalid_parameter", r

    # released (once the host confirms it is gone), the name is free again
    assert server.request("POST", f"/v1/instances/{iid}/release", {},
                          token=user["token"]).status == 200
    r = server.request("POST", "/v1/instances", body, token=user["token"])
    assert r.status == 409 and r.code == "name_taken", r  # still releasing
    host.heartbeat([{"id": iid, "state": "absent"}])
    r = server.request("POST", "/v1/instances", body, token=user["token"])
    assert r.status == 201, r
    assert named(user["token"], "nb") == [r.json["id"]]
    assert named(user["token"], "nb", "&state=all") == [iid, r.json["id"]]
