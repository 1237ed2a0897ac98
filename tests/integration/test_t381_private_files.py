"""T381: suanlid's and suanli-node's files are theirs alone (issue 10, item 7).

Both set umask 077 at start, make their data directory 0700 whether or not it
existed, and narrow what an older version (or an operator's cp) left open to
group or others, with a log line. No file or directory in either data
directory is then open to other users, except what is not the daemon's own
(docs/design/control-plane.md, "Private files"):

- an image's files (DATA/layers/sha256/*/rootfs, and DATA/layers/tmp while
  one is unpacked): they keep the modes the image gives them, which the
  instance's own users need (/etc/passwd 0644, /tmp 1777);
- an instance's disks and overlay (DATA/instances/*/{sys,data,rootfs}): the
  renter's file systems, mounted there;
- an instance's boot directory (DATA/instances/*/boot), which the instance
  sees read-only at /.suanli: its modes are the instance's view.
- the public datasets (DATA/public), which every instance sees read-only at
  /root/public: their modes are the renters' view (issue 14, item 5).

The data directory's own 0700 keeps every other host user out of all of it,
those included. The instance still works as before: its / is 0755, its
processes' umask 022, and a user other than root reads /etc/resolv.conf."""
import fnmatch
import io
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile

from conftest import SUANLI_NODE, Node, Server, cleanup_host, side_network

NET = side_network(3, "nd")

NOT_THE_AGENTS = ("layers/sha256/*/rootfs", "layers/tmp", "instances/*/boot",
                  "instances/*/sys", "instances/*/data", "instances/*/rootfs", "public")


def open_to_others(root, skip=()):
    """Paths below root (root too) whose mode lets group or others in: not
    following symlinks, not entering other file systems or skipped subtrees
    (patterns relative to root)."""
    found = []
    dev = os.lstat(root).st_dev
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        st = os.lstat(dirpath)
        if st.st_mode & 0o077:
            found.append((dirpath, oct(stat.S_IMODE(st.st_mode))))
        keep = []
        for d in dirnames:
            rel = d if rel_dir == "." else f"{rel_dir}/{d}"
            full = os.path.join(dirpath, d)
            if any(fnmatch.fnmatchcase(rel, p) and rel.count("/") == p.count("/")
                   for p in skip):
                continue
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode) or st.st_dev != dev:
                continue
            keep.append(d)
        dirnames[:] = keep
        for f in filenames:
            st = os.lstat(os.path.join(dirpath, f))
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o077:
                found.append((os.path.join(dirpath, f), oct(stat.S_IMODE(st.st_mode))))
    return found


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def plant(path, perm, data=b"x"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, perm)


def test_suanlid_makes_an_existing_data_dir_private():
    d = tempfile.mkdtemp(prefix="suanli-t381-")
    os.chmod(d, 0o755)
    plant(os.path.join(d, "backup", "suanli.db.1"), 0o644)
    os.chmod(os.path.join(d, "backup"), 0o755)
    plant(os.path.join(d, "notes"), 0o666)
    s = Server(d)
    try:
        s.start()
        assert mode(d) == 0o700
        assert mode(os.path.join(d, "backup")) == 0o700
        assert mode(os.path.join(d, "backup", "suanli.db.1")) == 0o600
        assert mode(os.path.join(d, "notes")) == 0o600
        log = open(s.log_path, errors="replace").read()
        assert f"'{d}' was open to other users (mode 0755): now 0700" in log, log[-2000:]
        assert "suanli.db.1' was open to other users (mode 0644): now 0600" in log
        # what suanlid makes itself: the store and its journal, keys, uploads
        u = s.register()
        r = s.request("POST", "/v1/tokens", {"name": "t381"}, token=u["token"])
        assert r.status == 201, r
        for name in ("suanli.db", "suanli.db-wal", "secret.key", "admin-password"):
            assert mode(os.path.join(d, name)) == 0o600, name
        assert open_to_others(d) == []
    finally:
        s.stop()
        shutil.rmtree(d, ignore_errors=True)


def tiny_rootfs(path):
    """A rootfs tarball with the modes an image has: world-readable files,
    a sticky /tmp."""
    with tarfile.open(path, "w") as tar:
        def add(name, kind, perm, data=b""):
            info = tarfile.TarInfo(name)
            info.type, info.mode = kind, perm
            if kind == tarfile.REGTYPE:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
        for dname in ("bin", "etc", "root"):
            add(dname, tarfile.DIRTYPE, 0o755)
        add("tmp", tarfile.DIRTYPE, 0o1777)
        add("etc/passwd", tarfile.REGTYPE, 0o644, b"root:x:0:0:root:/root:/bin/sh\n")
        add("bin/tool", tarfile.REGTYPE, 0o755, b"#!/bin/sh\n")


def test_agent_makes_an_existing_data_dir_private(server):
    """An agent started on a data directory an older version left open:
    its own files are narrowed, an image's are not."""
    d = tempfile.mkdtemp(prefix="suanli-t381-node-", dir="/var/tmp")
    node = None
    try:
        tar = os.path.join(d, "rootfs.tar")
        tiny_rootfs(tar)
        p = subprocess.run([SUANLI_NODE, "image", "import", tar, "t381-tiny", "--data-dir", d],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p
        os.unlink(tar)
        layers = os.path.join(d, "layers", "sha256")
        (digest,) = os.listdir(layers)
        layer = os.path.join(layers, digest)
        rootfs = os.path.join(layer, "rootfs")
        assert mode(rootfs) == 0o755 and mode(os.path.join(rootfs, "etc", "passwd")) == 0o644
        assert mode(os.path.join(rootfs, "tmp")) == 0o1777
        assert mode(d) == 0o700 and open_to_others(d, NOT_THE_AGENTS) == []
        # as an older agent left them
        os.chmod(d, 0o755)
        os.chmod(layer, 0o555)
        os.chmod(os.path.join(layer, "layer.json"), 0o644)
        os.chmod(os.path.join(d, "images", "t381-tiny.json"), 0o644)
        os.chmod(os.path.join(d, "images"), 0o755)
        plant(os.path.join(d, "net", "ipam", "suanli", "10.83.0.99"), 0o644)
        for sub in ("net/ipam/suanli", "net/ipam", "net"):
            os.chmod(os.path.join(d, sub), 0o755)
        r = server.request("POST", "/v1/admin/join-tokens", {"region": "sample-1"},
                           token=server.admin_token)
        assert r.status == 201, r
        node = Node(server, d, r.json["token"], gpus="1:RTX 4090", network=NET,
                    extra=["--set", "proxy.nginx=off", "--set", "metadata.port=0"])
        node.start()
        assert mode(d) == 0o700
        assert mode(layer) == 0o500
        assert mode(os.path.join(layer, "layer.json")) == 0o600
        assert mode(os.path.join(d, "images", "t381-tiny.json")) == 0o600
        assert mode(os.path.join(d, "net", "ipam", "suanli", "10.83.0.99")) == 0o600
        # the image's files keep the image's modes
        assert mode(rootfs) == 0o755
        assert mode(os.path.join(rootfs, "etc", "passwd")) == 0o644
        assert mode(os.path.join(rootfs, "bin", "tool")) == 0o755
        assert mode(os.path.join(rootfs, "tmp")) == 0o1777
        assert open_to_others(d, NOT_THE_AGENTS) == []
        log = node.log_text()
        # (the path as given: conftest passes a relative --data-dir)
        assert f"{os.path.basename(d)}' was open to other users (mode 0755): now 0700" in log, \
            log[-3000:]
        assert "layer.json' was open to other users (mode 0644): now 0600" in log
        assert "/rootfs' was open" not in log
    finally:
        if node:
            node.stop()
        cleanup_host(d, bridge=NET[0], prefix=NET[2])
        shutil.rmtree(d, ignore_errors=True)


def test_no_file_of_either_daemon_is_open_to_others(cluster):
    """The shared cluster, with a running instance: suanlid's and the agent's
    data directories hold nothing another host user could read; and the
    instance is as usable as before the umask."""
    user = cluster.renter()
    inst = cluster.create(user)
    try:
        server_dir, node_dir = cluster.server.data_dir, cluster.node.data_dir
        assert mode(server_dir) == 0o700 and mode(node_dir) == 0o700
        assert open_to_others(server_dir) == []
        assert open_to_others(node_dir, NOT_THE_AGENTS) == []
        # the harness made the node's directory 0755 and its log 0644 first
        assert f"{os.path.basename(node_dir)}' was open to other users" in \
            cluster.node.log_text()
        # inside: the image's modes, the usual umask, a user who is not root
        # reads what every program needs
        out = cluster.ssh(user, inst, "stat -c '%n %a' / /etc /etc/passwd /etc/resolv.conf "
                          "/etc/hosts /tmp /root/data; umask; "
                          "python3 -c \"import os; os.setgid(65534); os.setuid(65534); "
                          "open('/etc/resolv.conf').read(); open('/etc/hosts').read(); "
                          "open('/etc/passwd').read(); os.listdir('/usr/bin'); print('nobody ok')\"",
                          ).stdout
        modes = dict(line.split() for line in out.splitlines()[:7])
        assert modes == {"/": "755", "/etc": "755", "/etc/passwd": "644",
                         "/etc/resolv.conf": "644", "/etc/hosts": "644", "/tmp": "1777",
                         "/root/data": "755"}, out
        assert out.splitlines()[7] == "0022", out
        assert "nobody ok" in out, out
    finally:
        cluster.verb(user, inst["id"], "release")
