"""The seeds' paths (issue 14, item 7; docs/design/instances.md, "AutoDL
paths"): renters arrive with AutoDL habits, and instances.autodl_paths (on by
default) links /root/autodl-tmp -> /root/data, /root/autodl-pub ->
/root/public and /root/autodl-fs -> /root/storage (file storage) in every
instance, so the seeds' commands run verbatim:

    scp -r 本地路径 root@你的地址:/root/autodl-tmp/
    cd /root/autodl-tmp
    tar czf result.tar.gz weight/ logs/
    scp -P 端口 root@地址:/root/autodl-tmp/result.tar.gz .

A renter's own file or directory of those names is never replaced. On the shared cluster: the real suanlid, agent, runc and sshd."""
import io
import os
import subprocess
import tarfile

from conftest import wait_for

SSH_OPTS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]


def scp(user, inst, *args, cwd):
    """scp as the seed types it, with the key and port the console gives."""
    p = subprocess.run(["scp", "-i", user["key"], *SSH_OPTS, "-P", str(inst["ssh"]["port"]),
                        *args], capture_output=True, text=True, timeout=60, cwd=cwd)
    assert p.returncode == 0, f"scp {args}: {p.stderr}"


def links(cluster, user, inst):
    out = cluster.ssh(user, inst, "for l in autodl-tmp autodl-pub autodl-fs; do"
                      " if [ -L /root/$l ]; then echo $l=$(readlink /root/$l);"
                      " elif [ -e /root/$l ]; then echo $l=own; else echo $l=none; fi; done")
    return dict(line.split("=", 1) for line in out.stdout.split())


def release(cluster, user, inst):
    cluster.verb(user, inst["id"], "release")
    cluster.wait_state(user, inst["id"], "released")


def test_the_seeds_commands_run_verbatim(cluster, tmp_path):
    server = cluster.server
    user = cluster.renter()
    # a public dataset, read from /root/autodl-pub as AutoDL renters do
    tar_path = tmp_path / "voc.tar"
    with tarfile.open(tar_path, "w") as t:
        info = tarfile.TarInfo("VOC2007/ImageSets/train.txt")
        data = b"000005\n000007\n"
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    r = server.request("PUT", "/v1/admin/datasets/voc/archive?description=VOC",
                       raw=tar_path.read_bytes(), token=server.admin_token,
                       headers={"Content-Type": "application/octet-stream"})
    assert r.status == 201, r
    inst = cluster.create(user, data_disk_gib=5)
    try:
        assert links(cluster, user, inst) == {"autodl-tmp": "/root/data",
                                              "autodl-pub": "/root/public",
                                              "autodl-fs": "/root/storage"}
        # scp -r 本地路径 root@你的地址:/root/autodl-tmp/
        local = tmp_path / "data"
        (local / "images").mkdir(parents=True)
        (local / "images" / "1.jpg").write_bytes(os.urandom(4096))
        (local / "train.py").write_text("print('train')\n")
        host = inst["ssh"]["host"]
        scp(user, inst, "-r", "data", f"root@{host}:/root/autodl-tmp/", cwd=str(tmp_path))
        # it landed on the data disk, not the system disk
        assert cluster.ssh(user, inst, "cat /root/data/data/train.py").stdout == \
            "print('train')\n"
        assert cluster.ssh(user, inst, "df --output=target /root/autodl-tmp/data/images/1.jpg"
                           " | tail -n 1").stdout.strip() == "/root/data"

        # logs under /root/autodl-tmp, then the seed's packing step
        cluster.ssh(user, inst, "mkdir -p /root/autodl-tmp/logs /root/autodl-tmp/weight && "
                    "cd /root/autodl-tmp && python3 data/train.py > logs/train.log && "
                    "head -c 1000 /dev/urandom > weight/best.pt")
        cluster.ssh(user, inst, "cd /root/autodl-tmp\ntar czf result.tar.gz weight/ logs/")
        # scp -P 端口 root@地址:/root/autodl-tmp/result.tar.gz .
        down = tmp_path / "down"
        down.mkdir()
        scp(user, inst, f"root@{host}:/root/autodl-tmp/result.tar.gz", ".", cwd=str(down))
        with tarfile.open(down / "result.tar.gz") as t:
            names = t.getnames()
            assert "logs/train.log" in names and "weight/best.pt" in names, names
            assert t.extractfile("logs/train.log").read() == b"train\n"

        # results kept in file storage, through its AutoDL path
        cluster.ssh(user, inst, "cp -r /root/autodl-tmp/weight /root/autodl-fs/")
        assert cluster.ssh(user, inst, "df --output=target /root/storage/weight/best.pt"
                           " | tail -n 1").stdout.strip() == "/root/storage"

        # a dataset read from /root/autodl-pub
        wait_for(lambda: cluster.ssh(user, inst, "cat /root/autodl-pub/voc/VOC2007/ImageSets/"
                                     "train.txt", check=False).stdout == "000005\n000007\n",
                 timeout=60, what="the dataset at /root/autodl-pub")

        # the links survive a restart, and a renter's own directory of that
        # name is never replaced
        cluster.ssh(user, inst, "rm /root/autodl-tmp && mkdir /root/autodl-tmp && "
                    "echo mine > /root/autodl-tmp/note")
        assert cluster.verb(user, inst["id"], "restart").status == 200
        inst = cluster.wait_state(user, inst["id"], "running", timeout=90)
        assert links(cluster, user, inst) == {"autodl-tmp": "own",
                                              "autodl-pub": "/root/public",
                                              "autodl-fs": "/root/storage"}
        assert cluster.ssh(user, inst, "cat /root/autodl-tmp/note").stdout == "mine\n"
    finally:
        release(cluster, user, inst)
        server.request("DELETE", "/v1/admin/datasets/voc", token=server.admin_token)
        wait_for(lambda: not os.path.lexists(os.path.join(cluster.node.data_dir, "public",
                                                          "voc")),
                 timeout=60, what="the dataset to go")


def test_an_operator_turns_them_off(cluster):
    """instances.autodl_paths=false: no links at the next start, and the
    links made before go; a renter's own file of such a name stays."""
    server = cluster.server
    user = cluster.renter()
    inst = cluster.create(user, data_disk_gib=5)
    try:
        assert links(cluster, user, inst)["autodl-tmp"] == "/root/data"
        cluster.ssh(user, inst, "rm /root/autodl-fs && echo mine > /root/autodl-fs")
        cluster.verb(user, inst["id"], "stop")
        cluster.wait_state(user, inst["id"], "stopped")
        server.settings["instances.autodl_paths"] = "false"
        server.restart()
        cluster.verb(user, inst["id"], "start")
        inst = cluster.wait_state(user, inst["id"], "running", timeout=90)
        assert links(cluster, user, inst) == {"autodl-tmp": "none", "autodl-pub": "none",
                                              "autodl-fs": "own"}
        assert cluster.ssh(user, inst, "cat /root/autodl-fs").stdout == "mine\n"
    finally:
        if server.settings.pop("instances.autodl_paths", None) is not None:
            server.restart()
        release(cluster, user, inst)
