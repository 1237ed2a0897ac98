"""Saved images (issue 14, item 1): a renter saves an instance as an image
(its system disk's changes as one content-addressed layer over its image),
starts it on another host of the region (which fetches the layer once,
checked by its digest), shares it, and deletes it (refused while in use;
hosts drop its files). A stranger cannot see, start from, save over, share
or delete it, nor save someone else's instance; nothing the saver planted
(their authorized_keys, set-id bits, the instance's host keys) reaches
whoever starts the image."""
import json
import os
import uuid

from conftest import IMAGE, Cli, wait_for


def save(fleet, user, iid, name, **body):
    return fleet.server.request("POST", f"/v1/instances/{iid}/image", {"name": name, **body},
                                token=user["token"])


def image(fleet, user, name):
    return fleet.server.request("GET", f"/v1/images/{name}", token=user["token"])


def listed(fleet, user):
    items = fleet.server.request("GET", "/v1/images", token=user["token"]).json["items"]
    return {i["name"]: i for i in items}


def release(fleet, user, *iids):
    for iid in iids:
        fleet.verb(user, iid, "release")
    for iid in iids:
        fleet.wait_state(user, iid, "released", timeout=120)


PLANTED = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPlantedPlantedPlantedPlantedPlantedPlant saver"


def test_save_start_elsewhere_share_and_delete(fleet, tmp_path):
    a, b, c = fleet.nodes[0], fleet.nodes[1], fleet.nodes[2]
    user, stranger, third = fleet.renter(), fleet.renter(), fleet.renter()
    name = "my-env-" + uuid.uuid4().hex[:8]
    made = {}  # iid -> owner
    src = fleet.create(user, gpus=1, data_disk_gib=5, host=a.node_id)
    made[src["id"]] = user
    try:
        fleet.ssh(user, src, "echo saved-by-me > /root/mine.txt && rm -f /etc/motd &&"
                  " mkdir -p /opt/env /root/.ssh && echo ok > /opt/env/x &&"
                  " cp /bin/ls /root/suid-ls && chmod 4755 /root/suid-ls &&"
                  f" echo '{PLANTED}' >> /root/.ssh/authorized_keys && sync")
        key = fleet.ssh(user, src, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.strip()
        # the stranger cannot save someone else's instance: it is not there
        r = save(fleet, stranger, src["id"], "stolen-env")
        assert r.status == 404 and r.code == "no_such_instance", r
        # a public image's name is refused with the reason; a bad name too
        r = save(fleet, user, src["id"], IMAGE)
        assert r.status == 409 and r.code == "image_exists", r
        assert "public image" in r.json["error"]["message"], r
        r = save(fleet, user, src["id"], "Bad Name")
        assert r.status == 400, r
        assert fleet.verb(user, src["id"], "stop").status == 200
        fleet.wait_state(user, src["id"], "stopped")

        # the CLI waits for the host's verdict
        cli = Cli(fleet.server, str(tmp_path / "home"))
        p = cli.run("image", "save", src["id"], name, "--description", "my project env",
                    env={"SUANLI_TOKEN": user["token"]}, timeout=600)
        assert p.returncode == 0, p.stdout + p.stderr + a.log_text()[-3000:]
        assert f"saved instance {src['id']} as image {name}" in p.stdout, p.stdout
        img = image(fleet, user, name).json
        assert img["state"] == "ready" and img["parent"] == IMAGE, img
        assert img["kind"] == "private" and img["owned"] is True, img
        assert 0 < img["layer_bytes"] < img["size_bytes"], img
        assert img["description"] == "my project env"
        ls = cli.run("image", "ls", env={"SUANLI_TOKEN": user["token"]}, check=True).stdout
        assert name in ls and "PARENT" in ls, ls
        # the same name again is the renter's own: refused, saying so
        r = save(fleet, user, src["id"], name)
        assert r.status == 409 and "already" in r.json["error"]["message"], r

        # a stranger sees nothing of it, and cannot start from, delete or share it
        assert image(fleet, stranger, name).status == 404
        assert name not in listed(fleet, stranger)
        r = fleet.create(stranger, gpus=1, image=name, wait=False)
        assert r.status == 404 and r.code == "no_such_image", r
        r = fleet.server.request("DELETE", f"/v1/images/{name}", token=stranger["token"])
        assert r.status == 404, r
        r = fleet.server.request("POST", f"/v1/images/{name}/share", {"community": True},
                                 token=stranger["token"])
        assert r.status == 404, r
        # nor save over it, from a running instance of theirs; which they may
        # save under a name of their own (a running instance is synced first)
        theirs = fleet.create(stranger, gpus=1, data_disk_gib=5, host=c.node_id)
        made[theirs["id"]] = stranger
        fleet.ssh(stranger, theirs, "echo running-save > /root/r.txt")
        r = save(fleet, stranger, theirs["id"], name)
        assert r.status == 409 and r.code == "image_exists", r
        assert "taken" in r.json["error"]["message"], r
        own = name + "-s"
        r = save(fleet, stranger, theirs["id"], own)
        assert r.status == 202 and r.json["state"] == "saving", r
        wait_for(lambda: image(fleet, stranger, own).json["state"] in ("ready", "failed"),
                 timeout=300, interval=0.5, what="the running instance's save")
        assert image(fleet, stranger, own).json["state"] == "ready", image(fleet, stranger, own)

        # it starts on another host, which fetches the layer, once
        def on_every_host():
            hosts = fleet.server.request("GET", f"/v1/admin/images/{name}/hosts",
                                         token=fleet.server.admin_token).json["items"]
            assert not [h for h in hosts if h["state"] == "failed"], hosts
            return all(h["state"] == "ready" for h in hosts) and len(hosts) == 3
        wait_for(on_every_host, timeout=300, interval=0.5, what="the image on every host")
        new = fleet.create(user, gpus=1, image=name, data_disk_gib=5, host=b.node_id)
        made[new["id"]] = user
        assert new["node_id"] == b.node_id
        out = fleet.ssh(user, new, "cat /root/mine.txt /opt/env/x; test ! -e /etc/motd && echo"
                        " no-motd; stat -c %a /root/suid-ls;"
                        " cat /root/.ssh/authorized_keys 2>/dev/null | grep -c Planted || true"
                        ).stdout.split()
        assert out == ["saved-by-me", "ok", "no-motd", "755", "0"], out
        new_key = fleet.ssh(user, new, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.strip()
        assert new_key and new_key != key
        assert b.log_text().count(f"fetching image {name} ") == 1, b.log_text()[-3000:]
        assert a.log_text().count(f"fetching image {name} ") == 0  # it made it

        # shared with one renter: they see it and start from it, never delete or share it
        r = fleet.server.request("POST", f"/v1/images/{name}/share",
                                 {"email": stranger["email"]}, token=user["token"])
        assert r.status == 200, r
        got = image(fleet, stranger, name).json
        assert got["state"] == "ready" and got["owned"] is False, got
        r = fleet.create(stranger, gpus=1, image=name, data_disk_gib=5, host=c.node_id)
        made[r["id"]] = stranger
        assert fleet.ssh(stranger, r, "cat /root/mine.txt").stdout.strip() == "saved-by-me"
        release(fleet, stranger, r["id"])
        del made[r["id"]]
        r = fleet.server.request("DELETE", f"/v1/images/{name}", token=stranger["token"])
        assert r.status == 403 and r.code == "not_owner", r
        r = fleet.server.request("POST", f"/v1/images/{name}/share", {"community": True},
                                 token=stranger["token"])
        assert r.status == 403, r
        # with every renter, then taken back
        assert name not in listed(fleet, third)
        p = cli.run("image", "share", name, "--community", env={"SUANLI_TOKEN": user["token"]})
        assert p.returncode == 0, p.stderr
        assert listed(fleet, third)[name]["kind"] == "community"
        p = cli.run("image", "unshare", name, "--community", env={"SUANLI_TOKEN": user["token"]})
        assert p.returncode == 0, p.stderr
        assert image(fleet, third, name).status == 404
        p = cli.run("image", "unshare", name, "--user", stranger["email"],
                    env={"SUANLI_TOKEN": user["token"]})
        assert p.returncode == 0, p.stderr
        assert image(fleet, stranger, name).status == 404

        # deleting: refused while an instance uses it, then its files go from every host
        p = cli.run("image", "rm", name, env={"SUANLI_TOKEN": user["token"]})
        assert p.returncode == 1 and "in use" in p.stderr, p.stderr
        release(fleet, user, new["id"])
        del made[new["id"]]
        with open(os.path.join(b.data_dir, "images", name + ".json")) as f:
            layer = json.load(f)["layers"][0]
        p = cli.run("image", "rm", name, env={"SUANLI_TOKEN": user["token"]})
        assert p.returncode == 0, p.stderr
        assert image(fleet, user, name).status == 404

        def dropped():
            return not any(os.path.exists(os.path.join(n.data_dir, "images", name + ".json"))
                           or os.path.exists(os.path.join(n.data_dir, "layers", "sha256", layer))
                           for n in fleet.nodes)
        wait_for(dropped, timeout=120, interval=0.5, what="the hosts to drop the image")
        # the parent's layers stay
        assert fleet.server.request("GET", "/v1/images", token=user["token"]).status == 200
        assert listed(fleet, user)[IMAGE]["state"] == "ready"
        r = fleet.server.request("DELETE", f"/v1/images/{own}", token=stranger["token"])
        assert r.status == 204, r
    finally:
        for iid, owner in made.items():
            fleet.verb(owner, iid, "release")
        for iid, owner in made.items():
            fleet.wait_state(owner, iid, "released", timeout=120)
