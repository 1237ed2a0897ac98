"""Saved images through the API alone (issue 14, item 1), with hosts the
test reports for: what the instance's host is told to capture and what
every host of the region is told to fetch, the host's failure reaching the
renter (and `suanli image save` exiting non-zero with it), the instance
held while it saves, the layer accepted only from that host, a deleted
image's layer withdrawn, and its name held while a host still has it."""
import hashlib
import os
import subprocess
import time

from conftest import SUANLI, Cli, wait_for
from test_t440_clone import CopyHost, api_renter, api_stopped


def save(server, user, iid, name, **body):
    return server.request("POST", f"/v1/instances/{iid}/image", {"name": name, **body},
                          token=user["token"])


def put_layer(server, host, name, data, token=None):
    return server.request("PUT", f"/v1/nodes/{host.node_id}/saves/{name}/layer",
                          token=token or host.token, raw=data,
                          headers={"Content-Type": "application/octet-stream"})


class SaveHost(CopyHost):
    """A CopyHost that also reports saved images it holds."""
    held = ()

    def heartbeat(self, instances=()):
        r = self.server.request("POST", f"/v1/nodes/{self.node_id}/heartbeat", {
            "inventory": self.inventory(), "instances": list(instances),
            "images": [{"name": self.image, "state": "ready"}]
            + [{"name": n, "state": "ready"} for n in self.held]}, token=self.token)
        assert r.status == 200, r


def test_api_save_failure_layer_and_delete(server, tmp_path):
    a, b = SaveHost(server, gpus=2), SaveHost(server, gpus=2)
    user, stranger = api_renter(server), api_renter(server)
    src = api_stopped(server, user, a)
    name = f"api-env-{int(time.time() * 1000) % 10**8}"

    # a failure the host reports reaches the CLI, which exits 1 with it
    cli = Cli(server, str(tmp_path / "home"))
    env = {"HOME": cli.home, "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "SUANLI_URL": server.url, "SUANLI_TOKEN": user["token"]}
    p = subprocess.Popen([SUANLI, "image", "save", src, name + "-bad"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def asked():
            return [s for s in a.desired().get("saves", []) if s["image"] == name + "-bad"]
        got = wait_for(asked, timeout=30, what="the save in the host's desired state")
        assert got == [{"image": name + "-bad", "instance": src, "parent": a.image}], got
        assert not b.desired()["saves"]
        # the instance is held while its disk is read
        for verb in ("start", "release"):
            r = server.request("POST", f"/v1/instances/{src}/{verb}", {}, token=user["token"])
            assert r.status == 409 and r.code == "being_saved", r
        r = server.request("POST", f"/v1/nodes/{a.node_id}/saves/{name}-bad/failure",
                           {"message": "the system disk is damaged"}, token=a.token)
        assert r.status == 204, r
        out, errout = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 1, (out, errout)
    assert "the system disk is damaged" in errout, errout
    assert not a.desired()["saves"]

    # a saved layer: only from the instance's host, then fetched by every host
    r = save(server, user, src, name, description="env")
    assert r.status == 202 and r.json["state"] == "saving", r
    layer = os.urandom(2048).hex().encode()  # 4096 bytes that survive a text answer
    sha = hashlib.sha256(layer).hexdigest()
    r = put_layer(server, b, name, layer)
    assert r.status == 404 and r.code == "no_such_save", r
    r = put_layer(server, a, name, layer, token=user["token"])
    assert r.status in (401, 404), r
    r = put_layer(server, a, name, layer)
    assert r.status == 200 and r.json == {"image": name, "sha256": sha}, r
    for h in (a, b):
        want = [i for i in h.desired()["images"] if i["name"] == name]
        assert want == [{"name": name, "recipe": "layer", "sha256": sha, "parent": a.image}], want
    r = server.request("GET", f"/v1/nodes/{b.node_id}/uploads/{sha}", token=b.token)
    assert r.status == 200 and r.body == layer.decode()
    # a download cut short asks for the rest
    r = server.request("GET", f"/v1/nodes/{b.node_id}/uploads/{sha}", token=b.token,
                       headers={"Range": "bytes=1000-"})
    assert r.status == 206 and r.body == layer[1000:].decode(), r
    assert r.headers["Content-Range"] == "bytes 1000-4095/4096", r.headers
    got = server.request("GET", f"/v1/images/{name}", token=user["token"]).json
    assert got["state"] == "pending" and got["layer_bytes"] == 4096, got
    a.held = (name,)
    a.heartbeat()
    got = server.request("GET", f"/v1/images/{name}", token=user["token"]).json
    assert got["state"] == "ready" and got["parent"] == a.image and got["owned"], got
    assert server.request("GET", f"/v1/images/{name}", token=stranger["token"]).status == 404
    names = [i["name"] for i in server.request("GET", "/v1/images",
                                               token=stranger["token"]).json["items"]]
    assert name not in names
    # an instance made from it holds it; one saved from that instance is
    # saved over it, which holds it too
    r = server.request("POST", "/v1/instances", {"gpu_model": "RTX 4090", "gpus": 1,
                                                 "image": name, "data_disk_gib": 5,
                                                 "host": a.node_id}, token=user["token"])
    assert r.status == 201, r
    inst = r.json["id"]
    r = server.request("DELETE", f"/v1/images/{name}", token=user["token"])
    assert r.status == 409 and r.code == "image_in_use", r
    a.heartbeat([{"id": inst, "state": "running", "generation": 1}])
    r = save(server, user, inst, name + "-child")
    assert r.status == 202 and r.json["parent"] == name, r
    assert put_layer(server, a, name + "-child", os.urandom(256).hex().encode()).status == 200
    assert server.request("POST", f"/v1/instances/{inst}/release", {},
                          token=user["token"]).status == 200
    a.heartbeat([{"id": inst, "state": "absent"}])
    r = server.request("DELETE", f"/v1/images/{name}", token=user["token"])
    assert r.status == 409 and r.code == "image_in_use" and name + "-child" in r.body, r
    assert server.request("DELETE", f"/v1/images/{name}-child",
                          token=user["token"]).status == 204

    # deleted: withdrawn from every host, the archive gone, the name held
    # while a host still reports the old files
    r = server.request("DELETE", f"/v1/images/{name}", token=user["token"])
    assert r.status == 204, r
    for h in (a, b):
        assert not [i for i in h.desired()["images"] if i["name"] == name]
    r = server.request("GET", f"/v1/nodes/{b.node_id}/uploads/{sha}", token=b.token)
    assert r.status == 404, r
    a.heartbeat()
    r = save(server, user, src, name)
    assert r.status == 409 and r.code == "image_name_held", r
    a.held = ()
    a.heartbeat()
    r = save(server, user, src, name)
    assert r.status == 202, r
