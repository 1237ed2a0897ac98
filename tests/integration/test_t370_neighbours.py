"""T370: neighbours on one host cannot impersonate each other (issue 10, item 3;
docs/design/node-runtime.md, "Network"). Root in an instance has CAP_NET_RAW
and sends hand-made frames from inside (python3, AF_PACKET): an ARP reply or
request claiming a neighbour's address changes nothing in the host's
neighbour table, and IPv4 with a neighbour's source address or another MAC,
IPv6 and VLAN-tagged frames never reach the bridge. IPv6 is off inside and
on the bridge: a host service listening on `::` is reached by no address of
the host. Other clouds' metadata addresses are reached neither through the
host's routes nor on the host itself, while suanli's own metadata endpoint
answers. The pinning is level-triggered: a deleted table comes back, an
agent restart adopts it, a release removes the instance's chain."""
import ipaddress
import json
import os
import random
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import TEST_BRIDGE, host_leftovers, wait_for, wait_heartbeats

TABLE = f"suanli-{TEST_BRIDGE}"

RAW = r'''
import os, random, socket, struct, sys, time

def mac(m):
    return bytes.fromhex(m.replace(":", ""))

def ip4(a):
    return socket.inet_aton(a)

def csum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xffff)
    return ~(s + (s >> 16)) & 0xffff

def eth(dst, src, etype, payload):
    return mac(dst) + mac(src) + struct.pack("!H", etype) + payload

def arp(op, sha, spa, tha, tpa):
    return struct.pack("!HHBBH", 1, 0x0800, 6, 4, op) + mac(sha) + ip4(spa) + mac(tha) + ip4(tpa)

def udp4(src, dst, data):
    udp = struct.pack("!HHHH", 40000, 9, 8 + len(data), 0) + data
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), random.randrange(65536), 0, 64,
                    17, 0, ip4(src), ip4(dst))
    return h[:10] + struct.pack("!H", csum(h)) + h[12:] + udp

def udp6(src, dst, data):
    udp = struct.pack("!HHHH", 40000, 9, 8 + len(data), 0) + data
    return struct.pack("!IHBB", 0x60000000, len(udp), 17, 64) + \
        socket.inet_pton(socket.AF_INET6, src) + socket.inet_pton(socket.AF_INET6, dst) + udp

s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
mode = sys.argv[1]
if mode == "arp":  # MYMAC VICTIM_IP GW_MAC GW_IP SECONDS
    me, victim, gw_mac, gw, seconds = sys.argv[2:7]
    bcast, zero = "ff:ff:ff:ff:ff:ff", "00:00:00:00:00:00"
    frames = [
        # "VICTIM_IP is at MYMAC", to the gateway
        eth(gw_mac, me, 0x0806, arp(2, me, victim, gw_mac, gw)),
        # gratuitous: a broadcast request and reply for VICTIM_IP
        eth(bcast, me, 0x0806, arp(1, me, victim, zero, victim)),
        eth(bcast, me, 0x0806, arp(2, me, victim, bcast, victim)),
        # asking the gateway, with VICTIM_IP as the sender
        eth(gw_mac, me, 0x0806, arp(1, me, victim, zero, gw)),
    ]
    end = time.time() + float(seconds)
    while time.time() < end:
        for f in frames:
            s.send(f)
        time.sleep(0.1)
    print("sent")
elif mode == "frames":  # MYMAC MYIP GW_MAC GW_IP VICTIM_MAC VICTIM_IP NONCE
    me, my_ip, gw_mac, gw, victim_mac, victim, nonce = sys.argv[2:9]
    other = "02:%02x:%02x:%02x:%02x:%02x" % tuple(random.randrange(256) for _ in range(5))
    own = udp4(my_ip, gw, b"OWN-" + nonce.encode())
    frames = {
        "OWN": eth(gw_mac, me, 0x0800, own),
        "SPOOFIP": eth(gw_mac, me, 0x0800, udp4(victim, gw, b"SPOOFIP-" + nonce.encode())),
        "SPOOFMAC": eth(gw_mac, victim_mac, 0x0800, udp4(my_ip, gw, b"SPOOFMAC-" + nonce.encode())),
        "OTHERMAC": eth(gw_mac, other, 0x0800, udp4(my_ip, gw, b"OTHERMAC-" + nonce.encode())),
        "IPV6": eth("33:33:00:00:00:01", me, 0x86dd,
                    udp6("fe80::1", "ff02::1", b"IPV6-" + nonce.encode())),
        "VLAN": eth(gw_mac, me, 0x8100, struct.pack("!HH", 7, 0x0800) +
                    udp4(my_ip, gw, b"VLAN-" + nonce.encode())),
    }
    for _ in range(3):
        for f in frames.values():
            s.send(f)
        time.sleep(0.05)
    # an allowed frame after all the others: once it is through, they had
    # their chance (one path, in order)
    s.send(eth(gw_mac, me, 0x0800, udp4(my_ip, gw, b"LAST-" + nonce.encode())))
    print("sent")
'''


class Tap:
    """Collects the payloads of frames seen on a host interface (AF_PACKET,
    every protocol) that carry a marker."""

    def __init__(self, ifname, nonce):
        self.nonce = nonce.encode()
        self.seen = set()
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
        self.sock.bind((ifname, 0))
        self.sock.settimeout(0.2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            try:
                frame = self.sock.recv(65536)
            except OSError:
                continue
            for m in re.finditer(rb"([A-Z0-9]+)-" + re.escape(self.nonce), frame):
                self.seen.add(m.group(1).decode())

    def close(self):
        self.stop.set()
        self.thread.join()
        self.sock.close()


def port_of(data_dir, iid):
    """(host veth, MAC inside, IPv4) from the instance's cached CNI result."""
    with open(os.path.join(data_dir, "net", "results", f"{iid}.json")) as f:
        result = json.load(f)
    ifaces = result["interfaces"]
    inside = [i for i, x in enumerate(ifaces) if x.get("sandbox")][0]
    veth = [x["name"] for x in ifaces if not x.get("sandbox") and x["name"] != TEST_BRIDGE][0]
    ip = [x["address"].split("/")[0] for x in result["ips"] if x.get("interface") == inside][0]
    return veth, ifaces[inside]["mac"], ip


def bridge_mac():
    with open(f"/sys/class/net/{TEST_BRIDGE}/address") as f:
        return f.read().strip()


def gateway_ip(data_dir, iid):
    with open(os.path.join(data_dir, "net", "results", f"{iid}.json")) as f:
        return json.load(f)["ips"][0]["gateway"]


def neigh(ip):
    """The host's neighbour entry for ip on the bridge: (lladdr, state) or None."""
    out = subprocess.run(["ip", "-j", "neigh", "show", ip, "dev", TEST_BRIDGE],
                         capture_output=True, text=True).stdout
    entries = json.loads(out or "[]")
    return (entries[0].get("lladdr"), entries[0].get("state")) if entries else None


def nft_table(handles=False):
    p = subprocess.run(["nft", *(["-a"] if handles else []), "list", "table", "bridge", TABLE],
                       capture_output=True, text=True)
    return p.stdout if p.returncode == 0 else None


def release(c, user, inst):
    assert c.verb(user, inst["id"], "release").status == 200
    c.wait_state(user, inst["id"], "released")


@pytest.fixture(scope="module")
def pair(cluster):
    """Two renters with one instance each: a (the attacker) and b."""
    alice, bob = cluster.renter(), cluster.renter()
    a = cluster.create(alice)
    b = cluster.create(bob)
    cluster.ssh(alice, a, f"cat > /tmp/raw.py <<'EOF'\n{RAW}\nEOF")
    yield cluster, alice, a, bob, b
    for user, inst in ((alice, a), (bob, b)):
        if cluster.get(user, inst["id"])["state"] != "released":
            release(cluster, user, inst)


def test_arp_claiming_a_neighbours_address_changes_nothing_on_the_host(pair):
    cluster, alice, a, bob, b = pair
    data = cluster.node.data_dir
    _, a_mac, _ = port_of(data, a["id"])
    _, b_mac, b_ip = port_of(data, b["id"])
    gw = gateway_ip(data, a["id"])
    # the host talks to b, so it holds a fresh entry for b's address (what
    # portmap's DNAT to b's SSH and nginx's proxying then use)
    with socket.create_connection((b_ip, 22), timeout=5) as s:
        assert s.recv(4) == b"SSH-"
    assert neigh(b_ip)[0] == b_mac
    time.sleep(1.2)  # past the neighbour table's locktime: an override would be taken
    out = cluster.ssh(alice, a, f"python3 /tmp/raw.py arp {a_mac} {b_ip} {bridge_mac()} {gw} 3",
                      timeout=30).stdout
    assert out.strip() == "sent"
    entry = neigh(b_ip)
    assert entry is None or entry[0] == b_mac, (entry, a_mac)
    # b's published SSH port still reaches b, not a
    assert cluster.ssh(bob, b, "hostname").stdout.strip() == b["id"]
    with socket.create_connection((b_ip, 22), timeout=5) as s:
        assert s.recv(4) == b"SSH-"
    assert neigh(b_ip)[0] == b_mac
    # the attempts were dropped at a's port (nft's counters say so)
    chain = subprocess.run(["nft", "list", "chain", "bridge", TABLE, f"port-{a['id']}"],
                           capture_output=True, text=True).stdout
    assert sum(int(n) for n in re.findall(r"counter packets (\d+)", chain)) > 0, chain


def test_frames_with_another_source_ipv6_and_vlan_never_reach_the_bridge(pair):
    cluster, alice, a, bob, b = pair
    data = cluster.node.data_dir
    a_veth, a_mac, a_ip = port_of(data, a["id"])
    _, b_mac, b_ip = port_of(data, b["id"])
    gw = gateway_ip(data, a["id"])
    nonce = f"{random.randrange(1 << 48):012x}"
    sent_tap = Tap(a_veth, nonce)  # what left a (before the bridge)
    bridge_tap = Tap(TEST_BRIDGE, nonce)  # what the bridge let through to the host
    try:
        out = cluster.ssh(alice, a, f"python3 /tmp/raw.py frames {a_mac} {a_ip} {bridge_mac()}"
                          f" {gw} {b_mac} {b_ip} {nonce}", timeout=30).stdout
        assert out.strip() == "sent"
        every = {"OWN", "SPOOFIP", "SPOOFMAC", "OTHERMAC", "IPV6", "VLAN"}
        wait_for(lambda: sent_tap.seen >= every, timeout=10, what="a's frames on its veth")
        wait_for(lambda: "LAST" in bridge_tap.seen, timeout=10, what="the last control frame")
    finally:
        sent_tap.close()
        bridge_tap.close()
    assert bridge_tap.seen == {"OWN", "LAST"}, bridge_tap.seen
    # nor did the bridge learn b's MAC on a's port (the host's frames for b
    # would go to a)
    fdb = subprocess.run(["bridge", "fdb", "show", "br", TEST_BRIDGE], capture_output=True,
                         text=True).stdout
    assert not [x for x in fdb.splitlines() if x.startswith(b_mac) and f"dev {a_veth} " in x], fdb


def host_addresses():
    """Every address of the host (v4 and v6, loopback aside), the bridge's
    IPv6 link-local address included even while it is off."""
    v4, v6 = [], []
    for line in subprocess.run(["ip", "-o", "addr"], capture_output=True,
                               text=True).stdout.splitlines():
        f = line.split()
        addr = ipaddress.ip_interface(f[3]).ip
        if addr.is_loopback:
            continue
        (v4 if addr.version == 4 else v6).append(str(addr))
    m = bytes.fromhex(bridge_mac().replace(":", ""))
    eui = bytes([m[0] ^ 2]) + m[1:3] + b"\xff\xfe" + m[3:]
    v6.append(str(ipaddress.IPv6Address(b"\xfe\x80" + bytes(6) + eui)))
    return sorted(set(v4)), sorted(set(v6))


PROBE = r'''
import socket, sys, threading
res = {}
def one(t):
    host, port = t.rsplit(":", 1)
    host = host.strip("[]")
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam)
    s.settimeout(3)
    try:
        addr = (host, int(port), 0, socket.if_nametoindex("eth0")) if fam == socket.AF_INET6 \
            else (host, int(port))
        s.connect(addr)
        res[t] = "open " + s.recv(16)[:7].decode(errors="replace")
    except OSError as e:
        res[t] = "closed " + type(e).__name__
    s.close()
ts = [threading.Thread(target=one, args=(t,)) for t in sys.argv[1:]]
[t.start() for t in ts]
[t.join() for t in ts]
for t in sys.argv[1:]:
    print(t, res[t])
'''


def probe(c, user, inst, targets):
    c.ssh(user, inst, f"cat > /tmp/probe6.py <<'EOF'\n{PROBE}\nEOF")
    out = c.ssh(user, inst, "python3 /tmp/probe6.py " + " ".join(targets), timeout=60).stdout
    return {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip()}


class Listener:
    """A TCP service of the host's: answers HOSTSVC to every connection."""

    def __init__(self, family=socket.AF_INET6, addr="::"):
        self.sock = socket.socket(family)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        self.sock.bind((addr, 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
                conn.sendall(b"HOSTSVC\n")
                conn.close()
            except OSError:
                pass

    def close(self):
        self.stop.set()
        self.sock.close()


def add_dummy(name):
    """An interface that only holds addresses: a dummy, or an ifb on a
    kernel without dummies (this one)."""
    for kind in ("dummy", "ifb"):
        if subprocess.run(["ip", "link", "add", name, "type", kind],
                          capture_output=True).returncode == 0:
            return
    raise AssertionError("this kernel makes neither dummy nor ifb interfaces")


def test_no_ipv6_inside_and_no_host_service_on_any_address(pair):
    cluster, alice, a, _, _ = pair
    dummy = f"sl6d{os.getpid() % 100000}"
    add_dummy(dummy)
    listener = None
    try:
        subprocess.run(["ip", "link", "set", dummy, "up"], check=True)
        # AWS's IPv6 metadata address, as if it were the host's own
        subprocess.run(["ip", "addr", "add", "fd00:ec2::254/128", "dev", dummy, "nodad"],
                       check=True)
        listener = Listener()
        with socket.create_connection(("::1", listener.port), timeout=2) as s:  # the control
            assert s.recv(8) == b"HOSTSVC\n"
        with socket.create_connection(("fd00:ec2::254", listener.port), timeout=2) as s:
            assert s.recv(8) == b"HOSTSVC\n"
        v4, v6 = host_addresses()
        assert "fd00:ec2::254" in v6
        targets = [f"{x}:{listener.port}" for x in v4] + [f"[{x}]:{listener.port}" for x in v6]
        seen = probe(cluster, alice, a, targets)
        opened = {t: v for t, v in seen.items() if v[0] != "closed"}
        assert not opened and len(seen) == len(targets), (opened, seen)
    finally:
        if listener:
            listener.close()
        subprocess.run(["ip", "link", "del", dummy], capture_output=True)
    # off inside (and /proc/sys is read-only there), off on the bridge
    inside = cluster.ssh(alice, a, "cat /proc/sys/net/ipv6/conf/all/disable_ipv6"
                         " /proc/sys/net/ipv6/conf/eth0/disable_ipv6; ip -6 addr;"
                         " echo 0 > /proc/sys/net/ipv6/conf/all/disable_ipv6 2>/dev/null;"
                         " echo rc=$?", check=False).stdout.split()
    assert inside == ["1", "1", "rc=1"], inside
    with open(f"/proc/sys/net/ipv6/conf/{TEST_BRIDGE}/disable_ipv6") as f:
        assert f.read().strip() == "1"


# other providers' metadata services (suanli's own is 169.254.169.254:80)
METADATA = ["100.100.100.200", "169.254.0.23", "169.254.170.2", "169.254.169.254",
            "168.63.129.16", "192.0.0.192"]
ALLOWED = "198.51.100.82"  # routed the same way, and not metadata: reachable
LINK = ("198.18.82.1", "198.18.82.2")  # host and service ends of the test's veth


SERVE = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(64)
while True:
    c, _ = s.accept()
    c.sendall(b"METADATA\\n")
    c.close()
"""


def test_other_clouds_metadata_is_reached_neither_routed_nor_on_the_host(pair):
    cluster, alice, a, _, _ = pair
    tag = f"{os.getpid() % 100000}"
    host_end, ns_end, dummy = f"slmh{tag}", f"slmn{tag}", f"slmd{tag}"
    port = 18000 + os.getpid() % 1000
    routes = []
    # a metadata service behind the host's routes, as a cloud has it: a
    # process in a network namespace of its own (unshare, not `ip netns`,
    # which would bind /run/netns over itself on a host where it is not a
    # mount point yet), its addresses on its loopback, a veth to the host
    server = subprocess.Popen(["unshare", "--net", "python3", "-c", SERVE, str(port)],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    pid = str(server.pid)

    def ns_run(*cmd):
        subprocess.run(["nsenter", "-t", pid, "-n", *cmd], check=True)
    try:
        wait_for(lambda: os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net"),
                 timeout=10, what="the service's namespace")
        subprocess.run(["ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end,
                        "netns", pid], check=True)
        subprocess.run(["ip", "addr", "add", f"{LINK[0]}/30", "dev", host_end], check=True)
        subprocess.run(["ip", "link", "set", host_end, "up"], check=True)
        ns_run("ip", "addr", "add", f"{LINK[1]}/30", "dev", ns_end)
        ns_run("ip", "link", "set", ns_end, "up")
        ns_run("ip", "link", "set", "lo", "up")
        for addr in METADATA + [ALLOWED]:
            ns_run("ip", "addr", "add", f"{addr}/32", "dev", "lo")
            subprocess.run(["ip", "route", "add", f"{addr}/32", "via", LINK[1]], check=True)
            routes.append(addr)
        # nothing of this test may leave the machine: every route is ours
        for addr in routes:
            got = subprocess.run(["ip", "route", "get", addr], capture_output=True,
                                 text=True).stdout
            assert f"dev {host_end}" in got, got

        def up():
            try:
                with socket.create_connection((ALLOWED, port), timeout=1) as s:
                    return s.recv(9) == b"METADATA\n"
            except OSError:
                return False
        wait_for(up, timeout=10, what="the test's metadata service")
        for addr in METADATA:  # the host itself reaches each
            with socket.create_connection((addr, port), timeout=2) as s:
                assert s.recv(9) == b"METADATA\n"
        seen = probe(cluster, alice, a, [f"{x}:{port}" for x in METADATA + [ALLOWED]])
        assert seen[f"{ALLOWED}:{port}"][0] == "open", seen  # the control
        opened = {t: v for t, v in seen.items() if v[0] != "closed" and ALLOWED not in t}
        assert not opened, seen
        # suanli's own endpoint still answers, with the instance's token
        code = cluster.ssh(alice, a, "curl -s --max-time 10 -o /dev/null -w '%{http_code}' -H"
                           " \"Authorization: Bearer $(cat /.suanli/metadata-token)\""
                           " http://169.254.169.254/").stdout.strip()
        assert code == "200", code
    finally:
        for addr in routes:
            subprocess.run(["ip", "route", "del", f"{addr}/32"], capture_output=True)
        server.kill()  # its namespace, and the veth pair with it, go
        server.wait()
        subprocess.run(["ip", "link", "del", host_end], capture_output=True)

    # the same addresses as the host's own, on a dummy interface
    add_dummy(dummy)
    listener = None
    try:
        subprocess.run(["ip", "link", "set", dummy, "up"], check=True)
        for addr in METADATA:
            subprocess.run(["ip", "addr", "add", f"{addr}/32", "dev", dummy], check=True)
        listener = Listener(socket.AF_INET, "0.0.0.0")
        for addr in METADATA:
            with socket.create_connection((addr, listener.port), timeout=2) as s:
                assert s.recv(8) == b"HOSTSVC\n"
        seen = probe(cluster, alice, a, [f"{x}:{listener.port}" for x in METADATA])
        assert all(v[0] == "closed" for v in seen.values()), seen
    finally:
        if listener:
            listener.close()
        subprocess.run(["ip", "link", "del", dummy], capture_output=True)


def test_pinning_comes_back_is_adopted_and_goes_with_the_release(pair):
    cluster, alice, a, bob, b = pair
    node, data = cluster.node, cluster.node.data_dir
    a_veth, a_mac, a_ip = port_of(data, a["id"])
    table = nft_table()
    assert f'"{a_veth}" : jump port-{a["id"]}' in table, table
    assert f"ether saddr != {a_mac}" in table and f"ip saddr {a_ip} accept" in table, table

    # gone behind the agent's back (a flushed ruleset, a reboot): made again,
    # and the iptables isolation rules that went with it too
    ports = table.count("jump port-")
    to_host = ["-i", TEST_BRIDGE, "-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED",
               "-j", "DROP"]
    subprocess.run(["iptables", "-w", "-D", "SUANLI-INPUT", *to_host], check=True)
    subprocess.run(["nft", "delete", "table", "bridge", TABLE], check=True)
    wait_for(lambda: (nft_table() or "").count("jump port-") == ports, timeout=10,
             what="the agent to pin the ports again")
    wait_for(lambda: subprocess.run(["iptables", "-w", "-C", "SUANLI-INPUT", *to_host],
                                    capture_output=True).returncode == 0,
             timeout=10, what="the isolation rule back")

    # an agent killed and restarted finds it as it should be: not rebuilt
    before = nft_table(handles=True)
    node.stop(signal.SIGKILL)
    offset = len(node.log_text())
    node.start()
    wait_for(lambda: f"adopted {a['id']}" in node.log_text()[offset:], timeout=30,
             what="the agent to adopt a")
    # the heartbeat that ends the adopting pass (the agent reports after each
    # pass that acted): the firewall was synced by then
    wait_heartbeats(cluster.server, node.node_id)
    assert nft_table(handles=True) == before

    # released: its chain goes, the neighbour's stays
    release(cluster, alice, a)
    table = nft_table()
    assert a["id"] not in table and f"port-{b['id']}" in table, table
    assert host_leftovers(data, a["id"], a["ssh"]["port"]) == []
    release(cluster, bob, b)
    assert b["id"] not in (nft_table() or "")  # no instance left: no table
    assert host_leftovers(data, b["id"], b["ssh"]["port"]) == []
