#!/bin/bash
# Benchmarks suanlid's API with wrk: an authenticated read (GET /v1/me) and a
# ledger write (POST /v1/admin/users/{id}/credit with an Idempotency-Key),
# against a private server on a loopback port and a temporary data directory.
#   bench/api.sh
# Environment: DURATION seconds per route (10), CONNECTIONS (16), THREADS (2),
# SUANLI_BUILD (build), SUANLID_ARGS (extra suanlid options, e.g.
# "--set http.threads=8"), REPLICAS (1): with 2 or more, as many suanlid
# processes on one PostgreSQL store (SUANLID_ARGS has --set store=...)
# behind an nginx on a loopback port that spreads the connections over them
# (round robin); wrk then talks to nginx, and a third row is the floor of
# that path, nginx answering itself. Writes the table to
# bench/results/api.md.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${SUANLI_BUILD:-$root/build}
duration=${DURATION:-10}
connections=${CONNECTIONS:-16}
threads=${THREADS:-2}
replicas=${REPLICAS:-1}
results=$root/bench/results/api.md

for tool in wrk curl; do
    command -v "$tool" >/dev/null || {
        echo "api.sh: $tool not found: run scripts/deps.sh bench" >&2
        exit 1
    }
done
[ -x "$build/suanlid" ] || make -C "$root" --no-print-directory BUILD="$build" all

tmp=$(mktemp -d "${TMPDIR:-/tmp}/suanli-bench-XXXXXX")
pid=
pids=() # the replicas after the first, and nginx
ok=0
cleanup() {
    for p in "$pid" "${pids[@]}"; do
        if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then
            kill -TERM "$p" 2>/dev/null || true
            wait "$p" 2>/dev/null || true
        fi
    done
    if [ "$ok" != 1 ] && [ -f "$tmp/suanlid.log" ]; then
        echo "api.sh: the end of suanlid's log:" >&2
        tail -n 20 "$tmp/suanlid.log" >&2
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

die() {
    echo "api.sh: $*" >&2
    exit 1
}

# A free loopback port: bash's /dev/tcp connect fails on a closed one. Another
# process could take it before suanlid does: then try another.
# start_server [DATA]: suanlid on DATA ($tmp/data), its pid in $pid
start_server() {
    local data=${1:-$tmp/data}
    for _ in 1 2 3 4 5; do
        port=$((20000 + RANDOM % 40000))
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue
        url=http://127.0.0.1:$port
        # shellcheck disable=SC2086
        "$build/suanlid" --data-dir "$data" --listen "127.0.0.1:$port" \
            ${SUANLID_ARGS:-} >>"$tmp/suanlid.out" 2>>"$tmp/suanlid.log" </dev/null &
        pid=$!
        for _ in $(seq 100); do
            curl -fsS "$url/healthz" >/dev/null 2>&1 && return 0
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$pid" 2>/dev/null && die "suanlid did not answer /healthz in 10 seconds"
        grep -q listen_failed "$tmp/suanlid.log" 2>/dev/null || grep -q "unable to listen" \
            "$tmp/suanlid.log" || die "suanlid exited: $(tail -n 3 "$tmp/suanlid.log")"
        pid=
    done
    die "no free port found"
}

# api METHOD PATH TOKEN [BODY]: prints the body, fails on a status >= 400
api() {
    local args=(-sS -X "$1" "$url$2" -H 'Content-Type: application/json' -w '\n%{http_code}')
    [ -n "$3" ] && args+=(-H "Authorization: Bearer $3")
    [ $# -ge 4 ] && args+=(--data-binary "$4")
    local out status
    out=$(curl "${args[@]}")
    status=${out##*$'\n'}
    out=${out%$'\n'*}
    [ "$status" -lt 400 ] || die "$1 $2: $status $out"
    printf '%s\n' "$out"
}

# json_field NAME: the first string or number value of "NAME" on stdin
json_field() {
    sed -n "s/.*\"$1\":\"\\{0,1\\}\\([^\",}]*\\).*/\\1/p" | head -n 1
}

start_server
# more replicas: the first one's secrets (docs/operations.md, "Several
# replicas"), then nginx in front of them all
if [ "$replicas" -gt 1 ]; then
    command -v nginx >/dev/null || die "nginx not found: run scripts/deps.sh bench"
    first_pid=$pid
    upstream="    server 127.0.0.1:$port;"
    for r in $(seq 2 "$replicas"); do
        mkdir -m 700 "$tmp/data$r"
        cp -p "$tmp/data/secret.key" "$tmp/data/front-token" "$tmp/data$r/"
        start_server "$tmp/data$r"
        pids+=("$pid")
        upstream+=$'\n'"    server 127.0.0.1:$port;"
    done
    pid=$first_pid
    for _ in 1 2 3 4 5; do
        port=$((20000 + RANDOM % 40000))
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
    done
    mkdir -p "$tmp/nginx"
    cat >"$tmp/nginx/nginx.conf" <<NGINX
worker_processes 2;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/error.log;
user root;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $tmp/nginx/body;
  proxy_temp_path $tmp/nginx/proxy;
  fastcgi_temp_path $tmp/nginx/fastcgi;
  uwsgi_temp_path $tmp/nginx/uwsgi;
  scgi_temp_path $tmp/nginx/scgi;
  upstream suanlid {
$upstream
    keepalive 64;
  }
  server {
    listen 127.0.0.1:$port;
    location = /floor { return 200 "{}"; }
    location / {
      proxy_pass http://suanlid;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
NGINX
    nginx -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -g "daemon off;" 2>>"$tmp/suanlid.log" &
    pids+=("$!")
    url=http://127.0.0.1:$port
    for _ in $(seq 100); do
        curl -fsS "$url/healthz" >/dev/null 2>&1 && break
        sleep 0.1
    done
    curl -fsS "$url/healthz" >/dev/null || die "nginx in front of the replicas does not answer"
fi
admin_password=$(cat "$tmp/data/admin-password")
admin_token=$(api POST /v1/sessions "" \
    "{\"email\":\"admin@localhost\",\"password\":\"$admin_password\"}" | json_field token)
renter_id=$(api POST /v1/users "" \
    '{"email":"bench@example.com","password":"bench password 1","name":"Bench"}' | json_field id)
session=$(api POST /v1/sessions "" '{"email":"bench@example.com","password":"bench password 1"}' |
    json_field token)
renter_token=$(api POST /v1/tokens "$session" '{"name":"bench"}' | json_field token)
[ -n "$admin_token" ] && [ -n "$renter_id" ] && [ -n "$renter_token" ] ||
    die "unable to set up the accounts"

# run_wrk NAME [wrk arguments]: runs wrk, keeps its output in $tmp/NAME.wrk
run_wrk() {
    local name=$1
    shift
    echo "api.sh: $name for ${duration}s, $connections connections, $threads threads" >&2
    wrk -t"$threads" -c"$connections" -d"${duration}s" --latency "$@" >"$tmp/$name.wrk" 2>&1 ||
        die "wrk failed: $(cat "$tmp/$name.wrk")"
}

# row ROUTE NAME: a table row from wrk's output
row() {
    local f=$tmp/$2.wrk rps p50 p99 non2xx sock
    rps=$(awk '/^Requests\/sec:/ {print $2}' "$f")
    p50=$(awk '$1 == "50%" {print $2}' "$f")
    p99=$(awk '$1 == "99%" {print $2}' "$f")
    non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' "$f")
    sock=$(awk '/Socket errors:/ {gsub(",", ""); print $4 + $6 + $8 + $10}' "$f")
    printf '| %s | %s | %s | %s | %s |\n' "$1" "${rps:-?}" "${p50:-?}" "${p99:-?}" \
        "$((${non2xx:-0} + ${sock:-0}))"
}

run_wrk me -H "Authorization: Bearer $renter_token" "$url/v1/me"
[ "$replicas" -le 1 ] || run_wrk floor "$url/floor"
CREDIT_PATH=/v1/admin/users/$renter_id/credit CREDIT_TOKEN=$admin_token \
    CREDIT_COUNT=$tmp/credits run_wrk credit -s "$root/bench/credit.lua" "$url"

# The ledger must hold exactly the credits that were answered 201, plus at
# most one per connection still in flight when wrk stopped (the server
# commits those, but wrk no longer reads their answers).
read -r created refused <"$tmp/credits"
# wrk stops without waiting for the answers in flight, which the server
# still commits: check once the ledger has stopped growing
prev=-1
for _ in $(seq 50); do
    check=$(api GET /v1/admin/ledger/check "$admin_token")
    [ "$(printf '%s\n' "$check" | json_field transactions)" = "$prev" ] && break
    prev=$(printf '%s\n' "$check" | json_field transactions)
    sleep 0.2
done
case $check in
*'"ok":true'*) ;;
*) die "ledger check failed: $check" ;;
esac
txns=$(printf '%s\n' "$check" | json_field transactions)
balance=$(api GET "/v1/admin/users?email=bench@example.com" "$admin_token" |
    json_field balance_micros)
in_flight=$((txns - created))
[ "$balance" = "$txns" ] ||
    die "the renter's balance is $balance micros after $txns credits of 1 micro"
[ "$in_flight" -ge 0 ] && [ "$in_flight" -le "$connections" ] ||
    die "$txns credits in the ledger, but $created answered 201"

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
mem=$(awk '/^MemTotal:/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
{
    echo "# suanlid API benchmark"
    echo
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), suanlid $("$build/suanlid" --version | awk '{print $2}'),"
    echo "wrk ${duration}s per route, $connections connections, $threads threads;"
    echo "machine: $(nproc) CPUs ($cpu), $mem memory, load average $(cut -d' ' -f1-3 /proc/loadavg)."
    echo
    echo "| route | requests/s | p50 | p99 | errors |"
    echo "|---|---|---|---|---|"
    row "GET /v1/me" me
    row "POST /v1/admin/users/{id}/credit" credit
    [ "$replicas" -le 1 ] || row "floor: nginx answering itself, $replicas replicas behind it" floor
    echo
    echo "Ledger after the run: check ok, $txns credit transactions, $created answered 201,"
    echo "$refused answered otherwise, $in_flight in flight when wrk stopped."
} >"$tmp/api.md"
mkdir -p "$(dirname "$results")"
cp "$tmp/api.md" "$results"
cat "$results"
ok=1
