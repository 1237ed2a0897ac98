"""Any image (issue 4): an admin uploads a `docker save` tarball with
`suanli admin image import`; every node of the region fetches it, checks its
digest, imports it (whiteouts honoured) and a renter's instance boots it.
Broken archives are refused (by suanlid at upload what the archive itself
tells, by the node what only it finds) and say why; only admins upload.
A compression bomb uploaded the same way (issue 10) is refused by the node
within its images.* limits, says which limit, and leaves nothing behind; the
import command, which waits for the hosts (issue 14), exits with that reason."""
import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile

from conftest import IMAGE, Cli, wait_for


def image_state(server, name):
    items = server.request("GET", "/v1/images", token=server.admin_token).json["items"]
    found = [i for i in items if i["name"] == name]
    return found[0] if found else None


def add_bytes(tar, name, data, mode=0o644):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    tar.addfile(info, io.BytesIO(data))


def docker_save(cluster, workdir):
    """The cluster's own Debian layer plus an upper layer that adds a file and
    deletes one (a whiteout), packed as `docker save` does."""
    node_dir = cluster.node.data_dir
    with open(os.path.join(node_dir, "images", IMAGE + ".json")) as f:
        base = json.load(f)["layers"][0]
    rootfs = os.path.join(node_dir, "layers", "sha256", base, "rootfs")
    layer1 = os.path.join(workdir, "layer1.tar")
    subprocess.run(["tar", "-C", rootfs, "--numeric-owner", "-cf", layer1, "."], check=True)
    layer2 = os.path.join(workdir, "layer2.tar")
    with tarfile.open(layer2, "w") as t:
        info = tarfile.TarInfo("opt")
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        t.addfile(info)
        add_bytes(t, "opt/marker", b"from the upper layer\n")
        add_bytes(t, "etc/.wh.motd", b"")
    diff_ids = []
    for p in (layer1, layer2):
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        diff_ids.append("sha256:" + h.hexdigest())
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                                            "/usr/bin:/sbin:/bin", "CUDA_VERSION=12.4.1"]},
                         "rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
    manifest = json.dumps([{"Config": "config.json", "RepoTags": ["mine:1"],
                            "Layers": ["l1/layer.tar", "l2/layer.tar"]}]).encode()
    out = os.path.join(workdir, "image.tar")
    with tarfile.open(out, "w") as t:
        t.add(layer1, "l1/layer.tar")
        t.add(layer2, "l2/layer.tar")
        add_bytes(t, "config.json", config)
        add_bytes(t, "manifest.json", manifest)
    os.unlink(layer1)
    os.unlink(layer2)
    return out


def test_docker_save_upload_boots_on_the_node(cluster, tmp_path):
    server = cluster.server
    archive = docker_save(cluster, str(tmp_path))
    admin = Cli(server, str(tmp_path / "admin"))
    p = admin.run("-o", "json", "admin", "image", "import", archive, "--name", "mine-1",
                  "--kind", "framework", env={"SUANLI_TOKEN": server.admin_token}, timeout=300)
    assert p.returncode == 0, p
    up = json.loads(p.stdout)
    h = hashlib.sha256()
    with open(archive, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    assert up["sha256"] == h.hexdigest() and up["format"] == "docker"
    # the command waited for the host: ready when it returned
    assert up["state"] == "ready" and [x["state"] for x in up["hosts"]] == ["ready"], up
    img = image_state(server, "mine-1")
    assert img["kind"] == "framework" and img["os"].startswith("Debian")
    assert img["python"].startswith("3.") and img["cuda"] == "12.4.1"
    user = cluster.renter()
    inst = cluster.create(user, image="mine-1", data_disk_gib=5)
    try:
        out = cluster.ssh(user, inst, "cat /opt/marker; test -e /etc/motd && echo motd-present;"
                          " hostname").stdout.split("\n")
        assert out[0] == "from the upper layer"
        assert "motd-present" not in out, "the whiteout did not hide /etc/motd"
        assert out[1] == inst["id"]
    finally:
        cluster.verb(user, inst["id"], "release")
        cluster.wait_state(user, inst["id"], "released")


def test_broken_archive_is_refused_and_says_why(cluster, tmp_path):
    server = cluster.server
    bad = tmp_path / "broken.tar.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00" + os.urandom(4096))
    r = server.request("PUT", "/v1/admin/images/broken-0/archive", raw=bad.read_bytes(),
                       token=server.admin_token, headers={"Content-Type":
                                                          "application/octet-stream"})
    assert r.status == 400 and r.json["error"]["code"] == "bad_archive", r
    assert image_state(server, "broken-0") is None
    # a tar suanlid reads through whose layer is not what its config says:
    # the node finds it
    payload = os.urandom(65536)
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.USTAR_FORMAT) as t:
        add_bytes(t, "payload.bin", payload)
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": [
        "sha256:" + hashlib.sha256(b"another layer").hexdigest()]}}).encode()
    manifest = json.dumps([{"Config": "config.json", "Layers": ["l1/layer.tar"]}]).encode()
    bad = tmp_path / "broken.tar"
    with tarfile.open(bad, "w", format=tarfile.USTAR_FORMAT) as t:
        add_bytes(t, "l1/layer.tar", layer.getvalue())
        add_bytes(t, "config.json", config)
        add_bytes(t, "manifest.json", manifest)
    r = server.request("PUT", "/v1/admin/images/broken-1/archive", raw=bad.read_bytes(),
                       token=server.admin_token, headers={"Content-Type":
                                                          "application/octet-stream"})
    assert r.status == 201, r
    img = wait_for(lambda: (lambda i: i if i and i["state"] == "failed" else None)(
        image_state(server, "broken-1")), timeout=60, interval=0.5, what="the refusal")
    assert img["nodes"] == 0 and img["message"], img
    layers_tmp = os.path.join(cluster.node.data_dir, "layers", "tmp")
    assert not os.path.exists(layers_tmp) or os.listdir(layers_tmp) == []
    assert not os.path.exists(os.path.join(cluster.node.data_dir, "images", "broken-1.json"))


def test_only_admins_upload_and_nothing_is_kept_otherwise(cluster, tmp_path):
    server = cluster.server
    uploads = os.path.join(server.data_dir, "uploads")
    before = set(os.listdir(uploads)) if os.path.isdir(uploads) else set()
    renter = server.register()
    body = b"x" * 100000
    for token, status in ((None, 401), ("sl_forged", 401), (renter["token"], 404)):
        r = server.request("PUT", "/v1/admin/images/sneaky/archive", raw=body, token=token)
        assert r.status == status, (token, r)
    after = set(os.listdir(uploads)) if os.path.isdir(uploads) else set()
    assert after == before
    assert image_state(server, "sneaky") is None
    # a node fetches uploads with its own token only
    assert server.request("GET", f"/v1/nodes/{cluster.node.node_id}/uploads/" + "0" * 64,
                          token=renter["token"]).status == 401


class Zeros(io.RawIOBase):
    """`size` zero bytes, never held in memory at once."""

    def __init__(self, size):
        self.left = size

    def readable(self):
        return True

    def readinto(self, b):
        n = min(len(b), self.left)
        b[:n] = bytes(n)
        self.left -= n
        return n


def store_state(data_dir):
    """What the node's image store holds: layers, image files, temporary and
    downloaded files."""
    def ls(*parts):
        p = os.path.join(data_dir, *parts)
        return sorted(os.listdir(p)) if os.path.isdir(p) else []
    return {"layers": ls("layers", "sha256"), "images": ls("images"), "tmp": ls("layers", "tmp"),
            "downloads": ls("downloads")}


def test_uploaded_bomb_is_refused_and_leaves_nothing(cluster, tmp_path):
    server, node = cluster.server, cluster.node
    limit = 32 << 20
    # 512 MiB of zeros in a gzip'd tar of well under 1 MiB
    bomb = tmp_path / "bomb.tar.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as g, tarfile.open(fileobj=g, mode="w") as t:
        info = tarfile.TarInfo("zero")
        info.size = 512 << 20
        t.addfile(info, io.BufferedReader(Zeros(info.size), 1 << 20))
    assert bomb.stat().st_size < (1 << 20)

    # the node with a low limit, as an operator would set it
    extra = list(node.extra)
    node.stop()
    node.extra = extra + ["--set", f"images.max_bytes={limit}"]
    try:
        node.start()
        before = store_state(node.data_dir)
        admin = Cli(server, str(tmp_path / "admin"))
        p = admin.run("admin", "image", "import", str(bomb), "--name", "bomb-1",
                      env={"SUANLI_TOKEN": server.admin_token}, timeout=180)
        assert p.returncode == 1, p
        assert "failed on host" in p.stderr and "images.max_bytes" in p.stderr, p
        img = wait_for(lambda: (lambda i: i if i and i["state"] in ("failed", "ready") else None)(
            image_state(server, "bomb-1")), timeout=120, interval=0.5, what="the bomb's end")
        assert img["state"] == "failed", img
        assert img["nodes"] == 0
        msg = img["message"]
        assert "images.max_bytes" in msg and "32.0 MiB" in msg and "raise" in msg, msg
        assert "images.max_bytes" in node.log_text()
        # nothing of it on the node: no layer, no image file, no temporary
        # directory, no downloaded archive
        after = store_state(node.data_dir)
        assert after == before, (before, after)
        assert after["tmp"] == [] and after["downloads"] == []
        assert "bomb-1.json" not in after["images"]
    finally:
        node.stop()
        node.extra = extra
        node.start()
