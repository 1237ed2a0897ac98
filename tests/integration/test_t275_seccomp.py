"""The seccomp profile (issue 4, item 3; node/seccomp.c): an allow-list with
Docker's default semantics. Inside a real instance, syscalls outside the list
fail with EPERM (clone3 with ENOSYS), the conditional rules hold (personality,
clone flags, socket families), and what renters do keeps working: apt's _apt
sandbox, pip in a venv, Python threads and multiprocessing, git, tar, rsync,
sshd key logins and SFTP.

Many probes pass arguments the kernel itself would answer with something
other than EPERM (EBADF, EINVAL, EFAULT, ENOSYS) or would let succeed without
seccomp (add_key, keyctl, unshare(CLONE_NEWUSER), clone(CLONE_NEWUSER),
personality(ADDR_NO_RANDOMIZE), userfaultfd(UFFD_USER_MODE_ONLY),
socket(AF_VSOCK)): EPERM from them can only come from the filter, not from
the capability set. The kernel's own answers are listed in WITHOUT_SECCOMP."""
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

import pytest

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64",
                                reason="raw syscall numbers below are x86_64's")

PROBE = r"""
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {"kexec_load": 246, "kexec_file_load": 320, "open_by_handle_at": 304, "bpf": 321,
      "perf_event_open": 298, "add_key": 248, "keyctl": 250, "request_key": 249,
      "mount": 165, "umount2": 166, "unshare": 272, "setns": 308, "init_module": 175,
      "finit_module": 313, "delete_module": 176, "acct": 163, "swapon": 167, "swapoff": 168,
      "reboot": 169, "settimeofday": 164, "clock_settime": 227, "personality": 135,
      "userfaultfd": 323, "iopl": 172, "ioperm": 173, "lookup_dcookie": 212, "syslog": 103,
      "clone3": 435, "clone": 56, "quotactl": 179, "sethostname": 170, "fsopen": 430,
      "open_tree": 428, "move_mount": 429, "pivot_root": 155, "socket": 41, "chroot": 161,
      "vhangup": 153, "kcmp": 312, "pidfd_getfd": 438, "mbind": 237, "fanotify_init": 300,
      "getpid": 39}
S = ctypes.c_char_p
L = ctypes.c_long

def call(name, *args):
    ctypes.set_errno(0)
    r = libc.syscall(L(NR[name]), *args)
    if r == 0 and name == "clone":  # the child of a clone that got through
        os._exit(0)
    if r >= 0:
        if name == "clone":
            os.waitpid(r, 0)
        return "ok"
    return errno.errorcode.get(ctypes.get_errno(), "?")

CLONE_NEWUSER, CLONE_NEWNS, SIGCHLD = 0x10000000, 0x20000, 17
probes = {
    "kexec_load": ("kexec_load", L(0), L(0), L(0), L(0xffff0000)),  # bad flags
    "kexec_file_load": ("kexec_file_load", L(-1), L(-1), L(0), S(b""), L(0)),
    "open_by_handle_at": ("open_by_handle_at", L(-1), L(0), L(0)),
    "bpf": ("bpf", L(999), L(0), L(0)),
    "perf_event_open": ("perf_event_open", L(0), L(0), L(-1), L(-1), L(0)),
    "add_key": ("add_key", S(b"user"), S(b"suanli"), S(b"x"), L(1), L(-2)),
    "keyctl": ("keyctl", L(0), L(-2), L(1)),
    "request_key": ("request_key", S(b"user"), S(b"suanli"), L(0), L(-2)),
    "mount": ("mount", S(b"none"), S(b"/nonexistent-suanli"), S(b"tmpfs"), L(0), L(0)),
    "umount2": ("umount2", S(b"/"), L(0x100)),
    "setns": ("setns", L(-1), L(0)),
    "init_module": ("init_module", L(0), L(0), S(b"")),
    "finit_module": ("finit_module", L(-1), S(b""), L(0)),
    "delete_module": ("delete_module", S(b"suanli_nonexistent"), L(0)),
    "acct": ("acct", L(0)),
    "swapon": ("swapon", S(b"/nonexistent"), L(0)),
    "swapoff": ("swapoff", S(b"/nonexistent")),
    "reboot": ("reboot", L(0), L(0), L(0), L(0)),  # bad magic: never reboots
    "settimeofday": ("settimeofday", L(0), L(0)),
    "clock_settime": ("clock_settime", L(99), L(0)),
    "personality_bad": ("personality", L(0x0040000)),  # ADDR_NO_RANDOMIZE
    "personality_bsd": ("personality", L(0x0006)),  # PER_BSD
    "userfaultfd": ("userfaultfd", L(1)),  # UFFD_USER_MODE_ONLY
    "iopl": ("iopl", L(99)),
    "ioperm": ("ioperm", L(0), L(0), L(1)),
    "lookup_dcookie": ("lookup_dcookie", L(0), L(0), L(0)),
    "syslog": ("syslog", L(10), L(0), L(0)),
    "quotactl": ("quotactl", L(0), L(0), L(0), L(0)),
    "sethostname": ("sethostname", S(b"x"), L(9999)),  # too long: never set
    "fsopen": ("fsopen", S(b"tmpfs"), L(0)),
    "open_tree": ("open_tree", L(-1), S(b"/"), L(0)),
    "move_mount": ("move_mount", L(-1), S(b""), L(-1), S(b""), L(0)),
    "pivot_root": ("pivot_root", S(b"/"), S(b"/")),
    "socket_vsock": ("socket", L(40), L(1), L(0)),
    "vhangup": ("vhangup",),
    "kcmp": ("kcmp", L(1), L(1), L(0), L(0), L(0)),
    "pidfd_getfd": ("pidfd_getfd", L(-1), L(0), L(0)),
    "mbind": ("mbind", L(0), L(0), L(0), L(0), L(0), L(0)),
    "fanotify_init": ("fanotify_init", L(0), L(0)),
    "clone3": ("clone3", L(0), L(0)),
    # allowed, some by their conditional rules
    "personality_query": ("personality", L(0xffffffff)),
    "personality_linux": ("personality", L(0)),
    "clone_plain": ("clone", L(SIGCHLD), L(0), L(0), L(0), L(0)),
    "socket_inet": ("socket", L(2), L(1), L(0)),
    "socket_unix": ("socket", L(1), L(1), L(0)),
    "chroot": ("chroot", S(b"/")),
    "getpid": ("getpid",),
    # last: were one let through, the probes after it would run in a new namespace
    "clone_newuser": ("clone", L(CLONE_NEWUSER | SIGCHLD), L(0), L(0), L(0), L(0)),
    "unshare_mount": ("unshare", L(CLONE_NEWNS)),
    "unshare_user": ("unshare", L(CLONE_NEWUSER)),
}
for key, (name, *args) in probes.items():
    if key == "vhangup" and "host" in sys.argv:
        continue
    print(key, call(name, *args))
"""

DENIED_EPERM = [
    "kexec_load", "kexec_file_load", "open_by_handle_at", "bpf", "perf_event_open", "add_key",
    "keyctl", "request_key", "mount", "umount2", "unshare_user", "unshare_mount",
    "clone_newuser", "setns", "init_module", "finit_module", "delete_module", "acct", "swapon",
    "swapoff", "reboot", "settimeofday", "clock_settime", "personality_bad", "personality_bsd",
    "userfaultfd", "iopl", "ioperm", "lookup_dcookie", "syslog", "quotactl", "sethostname",
    "fsopen", "open_tree", "move_mount", "pivot_root", "socket_vsock", "vhangup", "kcmp",
    "pidfd_getfd", "mbind", "fanotify_init",
]
ALLOWED = ["personality_query", "personality_linux", "clone_plain", "socket_inet",
           "socket_unix", "chroot", "getpid"]

# Probes the kernel answers with something other than EPERM without the
# filter, for a root process with the instance's capabilities (measured on
# the host at test time; these must be among them on any kernel).
MUST_DISCRIMINATE = {"add_key", "keyctl", "umount2", "setns", "clock_settime", "personality_bad",
                     "personality_bsd", "clone_newuser", "unshare_user", "perf_event_open",
                     "clone3"}
CAPS = ("chown,dac_override,fowner,fsetid,kill,setgid,setuid,setpcap,net_bind_service,net_raw,"
        "sys_chroot,mknod,audit_write,setfcap")


def release(c, user, inst):
    assert c.verb(user, inst["id"], "release").status == 200
    c.wait_state(user, inst["id"], "released")


@pytest.fixture(scope="module")
def instance(cluster):
    user = cluster.renter()
    inst = cluster.create(user, data_disk_gib=5)
    yield user, inst
    release(cluster, user, inst)


def test_config_is_an_allow_list(cluster, instance):
    user, inst = instance
    path = os.path.join(cluster.node.data_dir, "instances", inst["id"], "bundle", "config.json")
    with open(path) as f:
        sc = json.load(f)["linux"]["seccomp"]
    assert sc["defaultAction"] == "SCMP_ACT_ERRNO" and sc["defaultErrnoRet"] == 1
    assert sc["architectures"] == ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]
    assert all(r["action"] in ("SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO") for r in sc["syscalls"])
    allowed = {n for r in sc["syscalls"] if r["action"] == "SCMP_ACT_ALLOW" for n in r["names"]}
    assert {"read", "execve", "chroot", "setresuid", "seccomp", "arch_prctl"} <= allowed
    assert not allowed & {"mount", "unshare", "setns", "bpf", "add_key", "keyctl", "reboot",
                          "kexec_load", "init_module", "syslog", "iopl", "acct"}
    # the instance's process runs under it (mode 2: filter)
    status = cluster.ssh(user, inst, "grep ^Seccomp: /proc/1/status /proc/self/status").stdout
    assert status.split().count("2") == 2, status


def test_syscalls_outside_the_allow_list_fail_with_eperm(cluster, instance):
    user, inst = instance
    cluster.ssh(user, inst, f"cat > /tmp/sc.py <<'EOF'\n{PROBE}\nEOF")
    p = cluster.ssh(user, inst, "python3 /tmp/sc.py", check=False)
    assert p.returncode == 0, p.stderr
    out = dict(line.split() for line in p.stdout.splitlines() if line.strip())
    wrong = {k: out.get(k) for k in DENIED_EPERM if out.get(k) != "EPERM"}
    assert not wrong, (wrong, out)
    assert out["clone3"] == "ENOSYS", out
    wrong = {k: out.get(k) for k in ALLOWED if out.get(k) != "ok"}
    assert not wrong, (wrong, out)
    # the control: the same probes on the host, with the same capabilities
    # and no filter, answer otherwise for many of them (so EPERM inside came
    # from seccomp, not from the capability set)
    # setpriv (util-linux) is installed by scripts/deps.sh: required, not a skip
    assert shutil.which("setpriv"), "setpriv is missing: run scripts/deps.sh test"
    with tempfile.NamedTemporaryFile("w", suffix=".py") as f:
        f.write(PROBE)
        f.flush()
        host = subprocess.run(["setpriv", "--inh-caps=-all", "--bounding-set=-all," +
                               ",".join("+" + c for c in CAPS.split(",")), sys.executable,
                               f.name, "host"], capture_output=True, text=True, timeout=60)
    assert host.returncode == 0, host.stderr
    bare = dict(line.split() for line in host.stdout.splitlines() if line.strip())
    differs = {k for k in DENIED_EPERM + ["clone3"] if k in bare and bare[k] != out[k]}
    assert MUST_DISCRIMINATE - {"unshare_user", "clone_newuser"} <= differs, (bare, out)
    if bare["unshare_user"] == "ok":  # user namespaces enabled on this host
        assert {"unshare_user", "clone_newuser"} <= differs, (bare, out)
    print(f"{len(differs)} of {len(DENIED_EPERM) + 1} probes answer differently without"
          f" the filter: {sorted(differs)}")

WORK = r"""
set -e
# Python: threads (glibc's pthread_create tries clone3 first) and
# multiprocessing (fork, and POSIX semaphores in /dev/shm; spawn, too)
cat > /tmp/mp.py <<'EOF'
import concurrent.futures, multiprocessing, threading
def sq(x):
    return x * x
if __name__ == "__main__":
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        assert sum(ex.map(sq, range(100))) == 328350
    for method in ("fork", "spawn", "forkserver"):
        ctx = multiprocessing.get_context(method)
        with ctx.Pool(4) as pool:
            assert sum(pool.map(sq, range(100))) == 328350
        lock, q = ctx.Lock(), ctx.Queue()
        p = ctx.Process(target=q.put, args=(42,))
        p.start(); assert q.get(timeout=30) == 42; p.join()
    print("python ok")
EOF
python3 /tmp/mp.py
# pip into a venv, offline: a local project, no build isolation
rm -rf /root/venv /tmp/pkg && mkdir -p /tmp/pkg/hello
printf 'def hi():\n    return "hi"\n' > /tmp/pkg/hello/__init__.py
printf 'from setuptools import setup\nsetup(name="hello", version="1.0", packages=["hello"])\n' \
    > /tmp/pkg/setup.py
python3 -m venv /root/venv
/root/venv/bin/pip install -q --no-index --no-build-isolation /tmp/pkg 2>&1 | grep -v WARN || true
/root/venv/bin/python -c 'import hello; assert hello.hi() == "hi"; print("pip ok")'
# git: init, commit, clone (fork, hardlinks), log
rm -rf /tmp/g /tmp/g2 && git init -q /tmp/g && cd /tmp/g && echo a > a
git -c user.email=t@t -c user.name=t add a && git -c user.email=t@t -c user.name=t commit -qm one
git clone -q /tmp/g /tmp/g2 && git -C /tmp/g2 log --oneline | grep -q one && echo "git ok"
# tar with gzip (a child process), owners kept
rm -rf /tmp/t && mkdir -p /tmp/t/src && echo x > /tmp/t/src/f && chown nobody /tmp/t/src/f
tar -C /tmp/t -czf /tmp/t.tgz src && mkdir /tmp/t/out && tar -C /tmp/t/out -xzpf /tmp/t.tgz
[ "$(stat -c %U /tmp/t/out/src/f)" = nobody ] && echo "tar ok"
# rsync: sender, generator and receiver processes
rsync -a /tmp/t/src/ /root/data/rs/ && cmp /tmp/t/src/f /root/data/rs/f && echo "rsync ok"
# apt: a local flat repository fetched by apt's file and store methods, which
# drop to _apt (APT::Sandbox::Verify checks they did) under apt's own
# seccomp filter, stacked on the instance's
d=/tmp/apt && rm -rf $d && mkdir -p $d/repo $d/lists/partial $d/cache/archives/partial
printf 'Package: suanli-dummy\nVersion: 1.0\nArchitecture: all\nFilename: ./d.deb\nSize: 1\n'\
'Description: dummy\n\n' > $d/repo/Packages && chmod -R a+rX $d
echo "deb [trusted=yes] file:$d/repo ./" > $d/local.list
apt-get update -o Dir::Etc::SourceList=$d/local.list -o Dir::Etc::SourceParts=/nonexistent \
    -o Dir::State::Lists=$d/lists -o Dir::Cache=$d/cache -o APT::Sandbox::Verify=1 \
    -o APT::Sandbox::Seccomp=1 > $d/log 2>&1 || { cat $d/log; exit 1; }
if grep -qi 'unsandboxed\|seccomp\|died' $d/log; then cat $d/log; exit 1; fi
ls $d/lists | grep -q Packages || { cat $d/log; exit 1; }
echo "apt ok"
"""


def test_renters_work_keeps_working(cluster, instance):
    user, inst = instance
    cluster.ssh(user, inst, f"cat > /tmp/work.sh <<'EOS'\n{WORK}\nEOS")
    p = cluster.ssh(user, inst, "bash /tmp/work.sh", check=False, timeout=240)
    out = p.stdout.split("\n")
    assert p.returncode == 0, (p.stdout, p.stderr)
    for what in ("python", "pip", "git", "tar", "rsync", "apt"):
        assert f"{what} ok" in out, (what, p.stdout, p.stderr)


def test_sshd_key_and_sftp_logins(cluster, instance):
    user, inst = instance
    port = str(inst["ssh"]["port"])
    # a fresh key login each time: sshd's privilege separation (chroot,
    # setuid to sshd) and its own seccomp sandbox run under the profile
    for _ in range(3):
        assert cluster.ssh(user, inst, "echo in").stdout.strip() == "in"
    batch = subprocess.run(
        ["sftp", "-i", user["key"], "-P", port, "-o", "StrictHostKeyChecking=no",
         "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-b", "-",
         "root@127.0.0.1"], input="put /etc/hostname /root/data/up\nls /root/data\nget"
        " /root/data/up /dev/null\n", capture_output=True, text=True, timeout=30)
    assert batch.returncode == 0 and "up" in batch.stdout, batch.stderr
