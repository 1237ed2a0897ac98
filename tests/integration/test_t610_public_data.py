"""Public data (issue 14, item 5; docs/design/node-runtime.md, "Public data"):
datasets an operator publishes with `suanli admin dataset add NAME PATH|TAR`,
read-only at /root/public/NAME in every instance of the region, listed for
renters with their size and description. On the shared cluster: the real
suanlid, agent, runc containers and SSH.

The attacker is a renter with root inside an instance: the dataset tree must
not be writable, remountable, or a way to the host's files; a tar whose links
leave the dataset is refused, not unpacked."""
import io
import json
import os
import tarfile

from conftest import Cli, wait_for

# mount(2) and umount2(2) called directly (the default image has no mount
# binary): prints the error, exits 0 only when the call succeeded
MOUNT_CALL = ("python3 -c 'import ctypes, os, sys; l = ctypes.CDLL(None, use_errno=True); "
              "r = l.umount2(sys.argv[2].encode(), 0) if sys.argv[1] == \"umount\" else "
              "l.mount(None, sys.argv[2].encode(), None, ctypes.c_ulong(int(sys.argv[1])), None); "
              "print(os.strerror(ctypes.get_errno()) if r else \"done\"); sys.exit(1 if r else 0)'")
MS_REMOUNT_BIND = str(32 | 4096)  # remount, bind, without MS_RDONLY: read-write


def add_bytes(tar, name, data, mode=0o644):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    tar.addfile(info, io.BytesIO(data))


def add_link(tar, name, target):
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    tar.addfile(info)


def admin_cli(cluster, tmp_path):
    return Cli(cluster.server, str(tmp_path / "admin"))


def run_admin(cluster, tmp_path, *args):
    return admin_cli(cluster, tmp_path).run(
        *args, env={"SUANLI_TOKEN": cluster.server.admin_token})


def admin_dataset(cluster, name):
    r = cluster.server.request("GET", "/v1/admin/datasets", token=cluster.server.admin_token)
    assert r.status == 200, r
    return next((d for d in r.json["items"] if d["name"] == name), None)


def wait_dataset(cluster, name, state, timeout=120):
    def reached():
        d = admin_dataset(cluster, name)
        if d and d["state"] == "failed" and state != "failed":
            raise AssertionError(f"dataset {name} failed: {d['message']}")
        return d if d and d["state"] == state else None
    return wait_for(reached, timeout, interval=0.3, what=f"dataset {name} {state}")


def remove_dataset(cluster, name):
    """Removes it and waits until the host holds it no more."""
    cluster.server.request("DELETE", f"/v1/admin/datasets/{name}",
                           token=cluster.server.admin_token)
    path = os.path.join(cluster.node.data_dir, "public", name)
    wait_for(lambda: not os.path.lexists(path), timeout=60, what=f"{path} to go")


def release(cluster, user, inst):
    cluster.verb(user, inst["id"], "release")
    cluster.wait_state(user, inst["id"], "released")


def test_an_uploaded_tar_reaches_a_running_instance_read_only(cluster, tmp_path):
    server = cluster.server
    user = cluster.renter()
    inst = cluster.create(user, data_disk_gib=5)
    tar_path = tmp_path / "mnist.tar.gz"
    files = {"train/labels.csv": b"0,5\n1,0\n", "README": b"handwritten digits\n",
             "tool.sh": b"#!/bin/sh\necho ran\n"}
    size = sum(len(b) for b in files.values())
    with tarfile.open(tar_path, "w:gz") as t:
        for name, data in files.items():
            add_bytes(t, name, data, mode=0o4755 if name == "tool.sh" else 0o644)
        add_link(t, "labels", "train/labels.csv")
    try:
        p = run_admin(cluster, tmp_path, "-o", "json", "admin", "dataset", "add", "mnist",
                      str(tar_path), "--description", "MNIST digits")
        assert p.returncode == 0, p
        assert json.loads(p.stdout)["source"] == "upload"
        d = wait_dataset(cluster, "mnist", "ready")
        assert d["nodes"] >= 1 and d["size_bytes"] == size, d

        # renters see it with its size and description, never the hosts' details
        r = server.request("GET", "/v1/datasets", token=user["token"])
        assert r.status == 200, r
        mine = [x for x in r.json["items"] if x["name"] == "mnist"]
        assert mine and mine[0]["description"] == "MNIST digits", r.json
        assert "sha256" not in mine[0] and "path" not in mine[0] and "message" not in mine[0]
        renter = Cli(server, str(tmp_path / "renter"))
        p = renter.run("dataset", "ls", env={"SUANLI_TOKEN": user["token"]})
        assert p.returncode == 0, p
        line = next(x for x in p.stdout.splitlines() if x.startswith("mnist"))
        assert "/root/public/mnist" in line and "MNIST digits" in line and f"{size} B" in line, line

        # the running instance sees it without a restart
        wait_for(lambda: cluster.ssh(user, inst, "cat /root/public/mnist/labels",
                                     check=False).stdout == "0,5\n1,0\n",
                 timeout=30, what="the dataset inside the running instance")

        # root inside cannot write it, remount it, unmount it or run from it
        attacks = {
            "touch /root/public/mnist/new": "Read-only file system",
            "touch /root/public/new": "Read-only file system",
            "echo x >> /root/public/mnist/README": "Read-only file system",
            "rm -f /root/public/mnist/README": "Read-only file system",
            f"{MOUNT_CALL} {MS_REMOUNT_BIND} /root/public": "Operation not permitted",
            f"{MOUNT_CALL} {MS_REMOUNT_BIND} /root/public/mnist": "Operation not permitted",
            f"{MOUNT_CALL} umount /root/public": "Operation not permitted",
            "/root/public/mnist/tool.sh": "Permission denied",
        }
        for cmd, says in attacks.items():
            out = cluster.ssh(user, inst, f"( {cmd} ) 2>&1", check=False)
            assert out.returncode != 0, f"{cmd!r} succeeded inside: {out.stdout}"
            assert says in out.stdout, (cmd, out.stdout)
        line = cluster.ssh(user, inst, "grep ' /root/public ' /proc/mounts").stdout.split()
        assert line and all(o in line[3].split(",") for o in ("ro", "nosuid", "nodev",
                                                              "noexec")), line
        # the set-uid bit was dropped at the unpack
        mode = cluster.ssh(user, inst, "stat -c %a /root/public/mnist/tool.sh").stdout.strip()
        assert mode == "755", mode
        assert cluster.ssh(user, inst, "cat /root/public/mnist/README").stdout == \
            "handwritten digits\n"

        # removed: it leaves the running instance too
        p = run_admin(cluster, tmp_path, "admin", "dataset", "rm", "mnist")
        assert p.returncode == 0, p
        wait_for(lambda: cluster.ssh(user, inst, "test -e /root/public/mnist",
                                     check=False).returncode == 1,
                 timeout=30, what="the dataset to leave the instance")
        r = server.request("GET", "/v1/datasets", token=user["token"])
        assert not [x for x in r.json["items"] if x["name"] == "mnist"]
    finally:
        remove_dataset(cluster, "mnist")
        release(cluster, user, inst)


def test_links_out_of_a_dataset_are_refused(cluster, tmp_path):
    """A tar whose symlink points at the host's files (absolute, or climbing
    out with ..) fails on the host with the entry named; one with a '..' or
    absolute entry name is refused at upload; neither is ever unpacked."""
    server = cluster.server
    cases = {"evil-abs": ("etc", "/etc"), "evil-up": ("a/up", "../../../../etc/shadow")}
    try:
        for name, (link, target) in cases.items():
            tar_path = tmp_path / f"{name}.tar"
            with tarfile.open(tar_path, "w") as t:
                add_bytes(t, "ok.txt", b"fine\n")
                add_link(t, link, target)
            p = run_admin(cluster, tmp_path, "admin", "dataset", "add", name, str(tar_path))
            assert p.returncode == 0, p
            d = wait_dataset(cluster, name, "failed")
            assert link in d["message"] and ("absolute" in d["message"] or
                                              "leaves the dataset" in d["message"]), d
            assert not os.path.lexists(os.path.join(cluster.node.data_dir, "public", name))
            # renters never see it
            user_items = server.request("GET", "/v1/datasets", token=server.admin_token)
            assert not [x for x in user_items.json["items"] if x["name"] == name]

        tar_path = tmp_path / "dotdot.tar"
        with tarfile.open(tar_path, "w") as t:
            add_bytes(t, "../escaped", b"x")
        p = run_admin(cluster, tmp_path, "admin", "dataset", "add", "evil-dotdot", str(tar_path))
        assert p.returncode != 0 and "'..'" in p.stderr, p
        assert admin_dataset(cluster, "evil-dotdot") is None
        assert not os.path.exists(os.path.join(cluster.node.data_dir, "escaped"))
    finally:
        for name in cases:
            remove_dataset(cluster, name)


def test_a_host_directory_is_bound_read_only_at_the_next_start(cluster, tmp_path):
    """A directory each host has (no upload): bound read-only; an instance
    started after it reads it; the operator's files are never touched, and
    its removal unbinds it."""
    server = cluster.server
    src = tmp_path / "coco"
    (src / "images").mkdir(parents=True)
    (src / "images" / "1.jpg").write_bytes(b"\xff\xd8jpeg")
    (src / "annotations.json").write_text('{"images": 1}\n')
    os.chmod(tmp_path, 0o755)
    user = cluster.renter()
    inst = None
    try:
        p = run_admin(cluster, tmp_path, "admin", "dataset", "add", "coco", str(src),
                      "--description", "COCO sample")
        assert p.returncode == 0, p
        d = wait_dataset(cluster, "coco", "ready")
        assert d["source"] == "path" and d["path"] == str(src), d
        assert d["size_bytes"] == 6 + 14, d
        inst = cluster.create(user, data_disk_gib=5)
        assert cluster.ssh(user, inst, "cat /root/public/coco/annotations.json").stdout == \
            '{"images": 1}\n'
        for cmd in ("touch /root/public/coco/x", "rm /root/public/coco/annotations.json",
                    f"{MOUNT_CALL} {MS_REMOUNT_BIND} /root/public/coco",
                    "ln -s / /root/public/coco/root"):
            out = cluster.ssh(user, inst, cmd + " 2>&1", check=False)
            assert out.returncode != 0, f"{cmd!r} succeeded inside: {out.stdout}"
        # what is above the dataset on the host is not there: .. stays inside
        out = cluster.ssh(user, inst, "ls /root/public/coco/../..").stdout.split()
        assert "public" in out and os.path.basename(str(tmp_path)) not in out, out
        assert sorted(os.listdir(src)) == ["annotations.json", "images"]

        p = run_admin(cluster, tmp_path, "admin", "dataset", "ls")
        assert p.returncode == 0 and "coco" in p.stdout and "ready" in p.stdout, p
    finally:
        remove_dataset(cluster, "coco")
        if inst:
            release(cluster, user, inst)
    # unbound on the host; the operator's files stay
    with open("/proc/self/mountinfo") as f:
        assert str(src) not in f.read()
    assert (src / "annotations.json").read_text() == '{"images": 1}\n'


def test_bad_input_and_who_may(cluster, tmp_path):
    server = cluster.server
    admin = server.admin_token
    user = cluster.renter(credit_micros=0)
    # renters may list, never publish or remove
    for method, path, body in (("POST", "/v1/admin/datasets", {"name": "x", "path": "/srv/x"}),
                               ("GET", "/v1/admin/datasets", None),
                               ("DELETE", "/v1/admin/datasets/x", None)):
        r = server.request(method, path, body, token=user["token"])
        assert r.status == 404, r
    r = server.request("PUT", "/v1/admin/datasets/x/archive", raw=b"x" * 10,
                       token=user["token"], headers={"Content-Type": "application/octet-stream"})
    assert r.status in (403, 404), r
    bad = [({"name": "Bad Name", "path": "/srv/x"}, "dataset name"),
           ({"name": ".hidden", "path": "/srv/x"}, "dataset name"),
           ({"name": "x", "path": "relative/dir"}, "absolute"),
           ({"name": "x", "path": "/"}, "absolute"),
           ({"name": "x", "path": "/srv/../etc"}, "'..'"),
           ({"name": "x", "path": "/srv/x", "region": "nowhere"}, "no region")]
    for body, says in bad:
        r = server.request("POST", "/v1/admin/datasets", body, token=admin)
        assert r.status in (400, 404) and says in r.json["error"]["message"], (body, r)
    r = server.request("DELETE", "/v1/admin/datasets/none-such", token=admin)
    assert r.status == 404 and "suanli admin dataset ls" in r.json["error"]["message"], r
    # the CLI: a relative path that is no file here
    p = run_admin(cluster, tmp_path, "admin", "dataset", "add", "x", "no-such-file.tar")
    assert p.returncode != 0 and "absolute path" in p.stderr, p
    # a damaged tar is refused at upload, with the reason
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"\x1f\x8b\x08\x00" + os.urandom(2048))
    p = run_admin(cluster, tmp_path, "admin", "dataset", "add", "broken", str(broken))
    assert p.returncode != 0, p
    assert admin_dataset(cluster, "broken") is None
    # one name once
    r = server.request("POST", "/v1/admin/datasets", {"name": "twice", "path": "/srv/none"},
                       token=admin)
    assert r.status == 201, r
    try:
        r = server.request("POST", "/v1/admin/datasets", {"name": "twice", "path": "/srv/none"},
                           token=admin)
        assert r.status == 409 and "suanli admin dataset rm twice" in \
            r.json["error"]["message"], r
        # a directory the host lacks: the host says so
        d = wait_dataset(cluster, "twice", "failed")
        assert "/srv/none" in d["message"], d
    finally:
        remove_dataset(cluster, "twice")


def test_every_host_of_a_fleet_holds_it(fleet, tmp_path):
    """On the multi-host harness (hosts in network namespaces of their own):
    each host fetches the tar from suanlid over its own link, checks it and
    unpacks it; removal empties every host."""
    server = fleet.server
    tar_path = tmp_path / "squad.tar.xz"
    with tarfile.open(tar_path, "w:xz") as t:
        add_bytes(t, "train-v2.0.json", b'{"data": []}\n')
    r = server.request("PUT", "/v1/admin/datasets/squad/archive?description=SQuAD",
                       raw=tar_path.read_bytes(), token=server.admin_token,
                       headers={"Content-Type": "application/octet-stream"})
    assert r.status == 201, r
    paths = [os.path.join(n.data_dir, "public", "squad", "train-v2.0.json") for n in fleet.nodes]
    try:
        def everywhere():
            r = server.request("GET", "/v1/admin/datasets", token=server.admin_token)
            d = [x for x in r.json["items"] if x["name"] == "squad"][0]
            return d if d["nodes"] == len(fleet.nodes) else None
        d = wait_for(everywhere, timeout=120, interval=0.5, what="every host to hold it")
        assert d["state"] == "ready" and d["size_bytes"] == 13, d
        for p in paths:
            with open(p) as f:
                assert f.read() == '{"data": []}\n'
    finally:
        server.request("DELETE", "/v1/admin/datasets/squad", token=server.admin_token)
        wait_for(lambda: not any(os.path.exists(p) for p in paths), timeout=60,
                 what="every host to remove it")
