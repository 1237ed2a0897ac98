#!/bin/sh
# `make run`: starts the platform on this machine: suanlid and, as root, one
# suanli-node next to it (with simulated GPUs when the machine has no NVIDIA
# GPU), then asks the node to build the default image. Ctrl-C stops both
# daemons; instances keep running (the agent adopts them when it restarts).
#   SUANLI_DATA    control-plane data (default: run/data in the checkout)
#   SUANLI_NODE    node data (default: run/node)
#   SUANLI_LISTEN  API address (default: 127.0.0.1:7070)
#   SUANLI_GPUS    simulated GPUs, COUNT:MODEL (default: 8:RTX 4090 without NVML)
#   SUANLI_DISK_OVERCOMMIT  percent of instance disk space a host may promise
#                  beyond what it can hold (default 1000: a laptop's free space
#                  holds few 80 GiB sparse disks; 0 on a real host)
set -eu
cd "$(dirname "$0")/.."
data=${SUANLI_DATA:-run/data}
node_data=${SUANLI_NODE:-run/node}
listen=${SUANLI_LISTEN:-127.0.0.1:7070}
url=http://$listen
mkdir -p "$data" run
first=yes
[ -f "$data/suanli.db" ] && first=no

overcommit=${SUANLI_DISK_OVERCOMMIT:-1000}
build/suanlid --data-dir "$data" --listen "$listen" \
    --set catalog_seed="$PWD/etc/catalog.sample.json" \
    --set nodes.disk_overcommit_percent="$overcommit" &
suanlid=$!
node=
stop() {
    [ -n "$node" ] && kill "$node" 2>/dev/null
    kill "$suanlid" 2>/dev/null
    wait 2>/dev/null
    exit 0
}
trap stop INT TERM
i=0
until curl -fsS "$url/healthz" >/dev/null 2>&1; do
    i=$((i + 1))
    [ $i -gt 100 ] && { echo "run: suanlid did not start" >&2; stop; }
    sleep 0.1
done
[ "$first" = no ] && echo "run: the admin password is in $data/admin-password"
[ "$overcommit" != 0 ] &&
    echo "run: hosts may promise instance disks $overcommit% beyond the space they hold" \
        "(a test setting; SUANLI_DISK_OVERCOMMIT=0 for none)"

api() { # METHOD PATH [BODY] with the admin's session
    if [ $# -gt 2 ]; then
        curl -fsS -X "$1" "$url$2" -H "Authorization: Bearer $admin" \
            -H 'Content-Type: application/json' -d "$3"
    else
        curl -fsS -X "$1" "$url$2" -H "Authorization: Bearer $admin"
    fi
}

if [ "$(id -u)" != 0 ]; then
    echo "run: not root: only the control plane runs (a node needs root for runc and disks)" >&2
else
    pw=$(cat "$data/admin-password" 2>/dev/null || true)
    admin=$(curl -fsS -X POST "$url/v1/sessions" -H 'Content-Type: application/json' \
        -d "{\"email\":\"admin@localhost\",\"password\":\"$pw\"}" | jq -r .token) || admin=
    set -- --data-dir "$node_data" --server "$url"
    if [ ! -f "$node_data/node.json" ]; then
        if [ -z "$admin" ]; then
            echo "run: cannot log in as admin@localhost to enroll a node" >&2
            stop
        fi
        # by file, never on the command line (the process list shows it)
        (umask 077 && mkdir -p "$node_data" &&
            api POST /v1/admin/join-tokens '{"region":"sample-1"}' | jq -r .token \
                >"$node_data/join-token")
        set -- "$@" --join "$node_data/join-token"
    fi
    if ! ldconfig -p 2>/dev/null | grep -q libnvidia-ml.so.1; then
        set -- "$@" --simulate-gpus "${SUANLI_GPUS:-8:RTX 4090}"
        echo "run: no NVIDIA driver here: the node declares SIMULATED GPUs (${SUANLI_GPUS:-8:RTX 4090})"
    fi
    build/suanli-node "$@" &
    node=$!
    if [ -n "$admin" ] && ! api GET /v1/images | jq -e '.items[] | select(.name=="debian-12")' \
        >/dev/null; then
        api POST /v1/admin/images '{"name":"debian-12"}' >/dev/null &&
            echo "run: the node builds image debian-12 with mmdebstrap (about a minute)"
    fi
    if [ -n "$admin" ] && ! api GET /v1/images | jq -e '.items[] | select(.name=="jupyter")' \
        >/dev/null; then
        api POST /v1/admin/images '{"name":"jupyter","recipe":"jupyter"}' >/dev/null &&
            echo "run: then image jupyter (debian-12 plus Jupyter Notebook, a few minutes)"
    fi
fi

cat <<MSG

suanli is up: API $url, data in $data${node:+, node in $node_data}.
The web console: $url/ (admin@localhost, the password in $data/admin-password).
In another terminal:
    export SUANLI_URL=$url PATH=\$PWD/build:\$PATH
    suanli login --email admin@localhost     # password: $data/admin-password
    suanli market; suanli image ls; suanli admin node ls
    suanli create --gpu-model "RTX 4090"     # once the image is ready
    suanli show ID                           # links of its service ports (6006, 6008: nginx on :8080)
Ctrl-C stops the daemons; instances keep running.
MSG
wait "$suanlid"
