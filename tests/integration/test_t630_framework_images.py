"""Framework images (issue 14, item 2): what the seeds pick, from Debian's
packages. `pytorch` is Debian's python3-torch and python3-torchvision (for
the CPU: on GPU hosts an operator imports NVIDIA's images,
docs/operations.md); `venv` is a project environment at /root/venv the way
the seeds make one with conda (`conda create -n project`, never the base
one). Each is built by the cluster's real agent with mmdebstrap, started as
an instance and used over SSH.

SLOW: each image is built from Debian's mirror (minutes, as test_jupyter);
SUANLI_SKIP_JUPYTER=1 skips them too."""
import os
import tempfile

import pytest

from conftest import Cli, wait_for

pytestmark = pytest.mark.skipif(os.environ.get("SUANLI_SKIP_JUPYTER") == "1",
                                reason="SUANLI_SKIP_JUPYTER=1: recipe images take minutes to build")


def build(cluster, name, recipe):
    s = cluster.server
    r = s.request("POST", "/v1/admin/images", {"name": name, "recipe": recipe},
                  token=s.admin_token)
    # made once per session (conftest.py's prebuild, or a rerun, made it)
    assert (r.status, r.code) in ((201, None), (409, "image_exists")), r

    def ready():
        items = s.request("GET", "/v1/images", token=s.admin_token).json["items"]
        img = [i for i in items if i["name"] == name][0]
        assert img["state"] != "failed", img
        return img if img["state"] == "ready" else None
    return wait_for(ready, timeout=1500, interval=3, what=f"the {recipe} image to build")


def test_unknown_recipe_names_the_known_ones(cluster):
    s = cluster.server
    r = s.request("POST", "/v1/admin/images", {"name": "tf", "recipe": "tensorflow"},
                  token=s.admin_token)
    assert r.status == 400 and r.code == "invalid_field", r
    for known in ("base", "jupyter", "pytorch", "venv"):
        assert f"'{known}'" in r.json["error"]["message"], r


def test_pytorch(cluster):
    img = build(cluster, "pytorch-debian", "pytorch")
    # the listing says what it holds: the framework and Python found in it
    assert img["framework"].startswith("torch 1."), img
    assert img["python"].startswith("3.11"), img
    owner = cluster.renter()
    inst = cluster.create(owner, image="pytorch-debian")
    try:
        out = cluster.ssh(owner, inst, "python3 -c 'import torch, torchvision; "
                          "x = torch.ones(2, 3) @ torch.ones(3, 2); "
                          "print(torch.__version__, torchvision.__version__, int(x.sum()), "
                          "torch.cuda.is_available())'", timeout=120).stdout.split()
        assert out[0].startswith("1.") and out[2] == "12" and out[3] == "False", out
        # `suanli image ls` shows the framework to renters
        with tempfile.TemporaryDirectory() as home:
            ls = Cli(cluster.server, home).run("image", "ls", check=True,
                                               env={"SUANLI_TOKEN": owner["token"]}).stdout
        assert "pytorch-debian" in ls and "torch 1." in ls, ls
    finally:
        cluster.verb(owner, inst["id"], "release")


def test_venv_is_a_project_environment(cluster):
    build(cluster, "python-venv", "venv")
    owner = cluster.renter()
    inst = cluster.create(owner, image="python-venv")
    try:
        # an SSH command and a login shell both run in the project environment
        for command in ("command -v python pip",
                        "bash -lc 'command -v python pip'"):
            out = cluster.ssh(owner, inst, command).stdout.split()
            assert out == ["/root/venv/bin/python", "/root/venv/bin/pip"], (command, out)
        # a package installed with pip lands in it, not in Debian's Python
        # (a local one: no package index is reachable from the tests)
        cluster.ssh(owner, inst, "mkdir -p /tmp/hello/hello && "
                    "echo 'WORD = \"from-the-venv\"' > /tmp/hello/hello/__init__.py && "
                    "printf '%s\\n' 'from setuptools import setup' "
                    "'setup(name=\"hello\", version=\"1.0\", packages=[\"hello\"])' "
                    "> /tmp/hello/setup.py && "
                    "pip install --no-index --no-build-isolation -q /tmp/hello", timeout=120)
        out = cluster.ssh(owner, inst, "python -c 'import hello, sys; "
                          "print(hello.WORD, sys.prefix)'").stdout.split()
        assert out == ["from-the-venv", "/root/venv"], out
        r = cluster.ssh(owner, inst, "/usr/bin/python3 -c 'import hello'", check=False)
        assert r.returncode != 0 and "No module named" in r.stderr, r
        # what compiling an extension needs is there (pycocotools, mmcv)
        cluster.ssh(owner, inst, "command -v gcc make && "
                    "test -f /usr/include/python3.11/Python.h")
    finally:
        cluster.verb(owner, inst["id"], "release")
