#!/bin/sh
# Runs COMMAND beside a PostgreSQL server of its own, then stops the server
# and removes its directory, whatever COMMAND did:
#   scripts/pg-test.sh COMMAND [ARG...]
# The server is Debian's postgresql-15 (scripts/deps.sh test), in a new
# directory under ${TMPDIR:-/tmp}, listening on a Unix socket there only (no
# TCP port to collide with), run as the user postgres when root runs this
# (initdb refuses root), with trust authentication for local connections. COMMAND finds it in
# SUANLI_TEST_PG, a libpq URI of its database "suanli" (tests/unit/harness.c
# makes a schema per test in it; tests/integration/conftest.py a database
# per suanlid). Durability is off (fsync, full pages, synchronous commit): a
# test server's data dies with it anyway; SUANLI_PG_DURABLE=1 keeps
# PostgreSQL's defaults (bench/store.sh compares it with SQLite's
# synchronous=FULL). SUANLI_PG_OPTS adds server options ("-c name=value
# ..."), such as pg_stat_statements to see where a benchmark's time goes.
set -u
[ $# -ge 1 ] || {
    echo "usage: scripts/pg-test.sh COMMAND [ARG...]" >&2
    exit 2
}
bin=${SUANLI_PG_BIN:-/usr/lib/postgresql/15/bin}
[ -x "$bin/pg_ctl" ] || {
    echo "pg-test.sh: no PostgreSQL server in $bin: run scripts/deps.sh test" >&2
    exit 1
}
# as root, the server runs as postgres; otherwise as the caller
user=postgres
[ "$(id -u)" != 0 ] || id "$user" >/dev/null 2>&1 || {
    echo "pg-test.sh: no user '$user' (the postgresql package makes it)" >&2
    exit 1
}
dir=$(mktemp -d "${TMPDIR:-/tmp}/suanli-pg-XXXXXX") || exit 1
chmod 755 "$dir"
[ "$(id -u)" = 0 ] && chown "$user" "$dir"
as_pg() {
    if [ "$(id -u)" = 0 ]; then
        setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups -- "$@"
    else
        "$@"
    fi
}
stop() {
    as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1
    rm -rf "$dir"
}
trap stop EXIT
trap 'exit 130' INT TERM
if ! as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
    >"$dir/initdb.log" 2>&1; then
    cat "$dir/initdb.log" >&2
    echo "pg-test.sh: initdb failed" >&2
    exit 1
fi
fast="-c fsync=off -c full_page_writes=off -c synchronous_commit=off"
[ "${SUANLI_PG_DURABLE:-0}" = 1 ] && fast=""
if ! as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses='' -c unix_socket_directories='$dir' $fast \
-c max_connections=300 -c shared_buffers=128MB ${SUANLI_PG_OPTS:-}" start >/dev/null; then
    cat "$dir/server.log" >&2
    echo "pg-test.sh: the PostgreSQL server did not start" >&2
    exit 1
fi
if ! as_pg "$bin/createdb" -h "$dir" -U postgres suanli; then
    echo "pg-test.sh: createdb failed" >&2
    exit 1
fi
SUANLI_TEST_PG="postgresql:///suanli?host=$dir&user=postgres"
export SUANLI_TEST_PG
"$@"
