#!/bin/sh
# Installs the Debian packages a purpose needs, only those missing.
#   scripts/deps.sh build   compilers and libraries
#   scripts/deps.sh test    build + node + test tools (pytest, clang for libFuzzer, crun for
#                           tests/unit/test-runtime.c); the tests require, never skip for,
#                           what these install (ssh-keygen, setpriv, runc, nft, ...)
#   scripts/deps.sh run     build + what a node needs (runc, CNI plugins, mmdebstrap, nginx, ...)
#   scripts/deps.sh bench   build + node + wrk, jq, pytest (bench/*.py import the integration
#                           tests' conftest.py, which imports pytest; settle.sh uses sqlite3)
# build, run and test also install nodejs and npm (the web console, console/, is built with
# npm); test adds chromium for the browser tests (tests/browser/). build has libpq-dev (suanlid
# links libpq for its PostgreSQL store); test and bench add the PostgreSQL 15 server that
# scripts/pg-test.sh starts (make unit-pg, integration-pg; bench/store.py), which run never needs.
# node has Gluster's FUSE client (the glusterfs file storage backend); test and bench add
# glusterfs-server, whose glusterd t663 and bench/storage.py start on their own addresses.
set -eu
purpose=${1:-build}
build="build-essential pkg-config libmicrohttpd-dev libjansson-dev libcurl4-openssl-dev
libsqlite3-dev libpq-dev libsodium-dev libyaml-dev libarchive-dev liblzma-dev libcrypt-dev sqlite3 curl ca-certificates"
node="runc containernetworking-plugins mmdebstrap iptables e2fsprogs iproute2 util-linux
openssh-client rsync nginx nftables lxcfs glusterfs-client"
test="$build $node python3 python3-pytest python3-yaml clang libclang-rt-14-dev clang-format
jq procps crun chromium python3-aiosmtpd postgresql-15 glusterfs-server attr"
run="$build $node jq"
bench="$build $node wrk python3 python3-pytest jq postgresql-15 glusterfs-server"
case "$purpose" in
build) want=$build ;;
run) want=$run ;;
test) want=$test ;;
bench) want=$bench ;;
*) echo "deps.sh: unknown purpose '$purpose' (build, run, test or bench)" >&2; exit 2 ;;
esac
# the console's tools: nodejs, and npm unless one is on PATH already (NodeSource's nodejs
# bundles its own npm and conflicts with Debian's npm package)
[ "$purpose" = bench ] || want="$want nodejs"
if [ "$purpose" != bench ] && ! command -v npm >/dev/null 2>&1; then
    want="$want npm"
fi
missing=""
for p in $want; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "deps.sh: missing packages:$missing; run as root or install them with apt-get" >&2
    exit 1
fi
echo "deps.sh: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
# an old or empty package list finds nothing: refresh it first
apt-get update -qq >/dev/null || apt-get update
apt-get install -y -qq --no-install-recommends $missing >/dev/null
