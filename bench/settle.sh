#!/bin/bash
# Benchmarks one settlement pass of the billing loop (server/billing.h) over
# many running instances on SQLite: time per pass, settlements (charges rows)
# and ledger entries written per second, and the median pass over passes
# 1..PASSES (the figure README.md quotes; pass 0 is a first settlement),
# beside its floor: the same rows written by the store alone.
#   bench/settle.sh
# PERF=FILE records a perf profile of suanlid during the last pass.
# Environment: INSTANCES (100000), RENTERS (1000), NODES (12500: 8 instances
# each), PASSES measured (7), GAP seconds between passes (3), RATE micros per
# hour of each instance (2500000), STORAGE renters (0, at most RENTERS) who
# also have a file storage meter (renter-wide: no host, settled to their
# directory's last sample, docs/design/billing.md "Storage meters"; the
# pass without them is the floor), SUANLI_BUILD (build). Writes the table to
# bench/results/settle.md. STORE=postgres: the same on PostgreSQL, under
# scripts/pg-test.sh (SUANLI_PG_DURABLE=1 scripts/pg-test.sh bench/settle.sh,
# durable like SQLite's synchronous=FULL): the population is made in SQLite
# as below, copied with `suanlid migrate`, and suanlid runs on
# SUANLI_TEST_PG; the table goes to bench/results/settle-pg.md.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${SUANLI_BUILD:-$root/build}
instances=${INSTANCES:-100000}
renters=${RENTERS:-1000}
nodes=${NODES:-12500}
passes=${PASSES:-7}
gap=${GAP:-3}
rate=${RATE:-2500000}
storage=${STORAGE:-0}
results=$root/bench/results/settle.md
store=${STORE:-sqlite}
pg=
use_pg= # set once the population is in PostgreSQL
if [ "$store" = postgres ]; then
    pg=${SUANLI_TEST_PG:?STORE=postgres runs under scripts/pg-test.sh}
    results=$root/bench/results/settle-pg.md
fi

for tool in sqlite3 curl jq; do
    command -v "$tool" >/dev/null || {
        echo "settle.sh: $tool not found: run scripts/deps.sh bench" >&2
        exit 1
    }
done
[ -x "$build/suanlid" ] || make -C "$root" --no-print-directory BUILD="$build" all

tmp=$(mktemp -d "${TMPDIR:-/tmp}/suanli-settle-XXXXXX")
data=$tmp/data
db=$data/suanli.db
pid=
ok=0
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    if [ "$ok" != 1 ] && [ -f "$tmp/suanlid.log" ]; then
        echo "settle.sh: the end of suanlid's log:" >&2
        tail -n 20 "$tmp/suanlid.log" >&2
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

die() {
    echo "settle.sh: $*" >&2
    exit 1
}

# The billing loop must not run on its own: one pass a day (the longest
# billing.settle_interval allows); the passes measured are asked for.
start_server() {
    for _ in 1 2 3 4 5; do
        port=$((20000 + RANDOM % 40000))
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue
        url=http://127.0.0.1:$port
        "$build/suanlid" --data-dir "$data" --listen "127.0.0.1:$port" \
            --set "catalog_seed=$root/etc/catalog.sample.json" \
            --set billing.settle_interval=86400 ${use_pg:+--set "store=$pg"} \
            >>"$tmp/suanlid.out" 2>>"$tmp/suanlid.log" </dev/null &
        pid=$!
        for _ in $(seq 300); do
            curl -fsS "$url/healthz" >/dev/null 2>&1 && return 0
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$pid" 2>/dev/null && die "suanlid did not answer /healthz in 30 seconds"
        grep -q "unable to listen" "$tmp/suanlid.log" ||
            die "suanlid exited: $(tail -n 3 "$tmp/suanlid.log")"
        pid=
    done
    die "no free port found"
}

stop_server() {
    kill -TERM "$pid"
    wait "$pid" || true
    pid=
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

sql() {
    sqlite3 -bail -cmd ".timeout 30000" "$db" "$@"
}
# store SQL: on the store suanlid runs on
store_sql() {
    if [ -n "$pg" ]; then
        psql -X -qAt -v ON_ERROR_STOP=1 "$pg" -c "$1"
    else
        sql "$1"
    fi
}

# 1. suanlid creates and migrates the store, seeds the sample catalog
mkdir -p "$data"
start_server
stop_server

# 2. the population, written straight into the store as suanlid would have:
# renters with a credit each (a balanced ledger transaction, so the ledger
# check holds), hosts, running instances, one open GPU meter each that
# started a minute ago and was never settled
echo "settle.sh: inserting $renters renters, $nodes hosts, $instances running instances" >&2
now=$(date +%s)
credit=100000000000 # 100,000 units each
t0=$(date +%s.%N)
sql <<SQL
PRAGMA journal_mode=WAL;
BEGIN;
CREATE TEMP TABLE n(i INTEGER PRIMARY KEY);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < max($instances, $nodes, $renters))
INSERT INTO n SELECT i FROM c;
INSERT INTO users (id, email, name, password_hash, role, verification, created_at)
  SELECT printf('u-bench%06d', i), printf('bench%06d@example.com', i), 'Bench', 'x', 'renter',
         'approved', $now - 86400 FROM n WHERE i <= $renters;
INSERT INTO accounts (id, user_id, balance_micros, created_at)
  SELECT printf('user:u-bench%06d', i), printf('u-bench%06d', i), $credit, $now - 86400
  FROM n WHERE i <= $renters;
INSERT INTO accounts (id, user_id, balance_micros, created_at)
  VALUES ('system:credits', NULL, -$credit * $renters, $now - 86400);
INSERT INTO ledger_txns (id, kind, memo, idempotency_key, actor, created_at)
  SELECT printf('txn-bench%06d', i), 'credit', 'bench', printf('credit:bench%06d', i), NULL,
         $now - 86400 FROM n WHERE i <= $renters;
INSERT INTO ledger_entries (txn_id, account_id, amount_micros, balance_after_micros, created_at)
  SELECT printf('txn-bench%06d', i / 2),
         CASE i % 2 WHEN 0 THEN printf('user:u-bench%06d', i / 2) ELSE 'system:credits' END,
         CASE i % 2 WHEN 0 THEN $credit ELSE -$credit END,
         CASE i % 2 WHEN 0 THEN $credit ELSE -$credit * (i / 2) END, $now - 86400
  FROM n WHERE i >= 2 AND i <= 2 * $renters + 1 ORDER BY i;
INSERT INTO nodes (id, hostname, address, region_id, token_hash, cpu_cores, memory_mib,
                   disk_total_gib, disk_free_gib, ssh_port_min, ssh_port_max, last_heartbeat,
                   created_at)
  SELECT printf('n-bench%06d', i), printf('host%06d', i), '127.0.0.1', 'sample-1',
         printf('hash%06d', i), 128, 1048576, 8000, 4000, 30000, 30999, $now, $now - 86400
  FROM n WHERE i <= $nodes;
INSERT INTO instances (id, user_id, name, region_id, node_id, gpu_model_id, gpus, image,
                       system_disk_gib, data_disk_gib, ssh_port, root_password,
                       root_password_crypt, state, desired, mode, created_at, updated_at)
  SELECT printf('i-bench%07d', i), printf('u-bench%06d', (i - 1) % $renters + 1),
         printf('bench-%d', i), 'sample-1', printf('n-bench%06d', (i - 1) % $nodes + 1),
         (SELECT id FROM gpu_models WHERE name = 'RTX 4090'), 1, 'debian-12', 30, 50,
         30000 + (i - 1) / $nodes, 's1:bench', 'bench', 'running', 'running', 'gpu',
         $now - 60, $now - 60
  FROM n WHERE i <= $instances;
INSERT INTO meters (instance_id, user_id, node_id, item, quantity, unit_price_micros,
                    amount_micros, period_s, started_at, settled_until, billed_until)
  SELECT id, user_id, node_id, 'gpu', 1, $rate, $rate, 3600, $now - 60, $now - 60, $now - 60
  FROM instances WHERE id LIKE 'i-bench%' ORDER BY seq;
INSERT INTO storage_dirs (user_id, region_id, used_bytes, size_bytes, used_at, created_at)
  SELECT printf('u-bench%06d', i), 'sample-1', 30 * 1073741824, 200 * 1073741824, $now - 60,
         $now - 86400 FROM n WHERE i <= min($storage, $renters);
INSERT INTO meters (user_id, region_id, item, quantity, unit_price_micros, amount_micros,
                    period_s, started_at, settled_until, billed_until)
  SELECT user_id, region_id, 'file_storage', 10 * 1024, 5000, 10 * 1024 * 5000,
         1024 * 86400, $now - 60, $now - 60, $now - 60 FROM storage_dirs WHERE user_id LIKE 'u-bench%';
COMMIT;
SQL
t1=$(date +%s.%N)
echo "settle.sh: inserted in $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}') s" >&2
if [ -n "$pg" ]; then
    echo "settle.sh: copying it into PostgreSQL (suanlid migrate)" >&2
    "$build/suanlid" migrate --from "sqlite:$db" --to "$pg" >"$tmp/migrate.out" ||
        die "suanlid migrate failed"
    psql -X -q "$pg" -c "VACUUM ANALYZE" || die "VACUUM ANALYZE failed"
    use_pg=1
fi

start_server
admin_password=$(cat "$data/admin-password")
admin_token=$(api POST /v1/sessions "" \
    "{\"email\":\"admin@localhost\",\"password\":\"$admin_password\"}" | jq -r .token)
[ -n "$admin_token" ] || die "unable to log in as admin@localhost"

# 3. the passes. A pass charges each meter up to its host's last heartbeat:
# every host reports (last_heartbeat = now, the UPDATE a heartbeat makes,
# written here with the sqlite3 CLI beside the running suanlid: SQLite locks
# across processes), then one pass is asked for.
entries() { store_sql "SELECT COUNT(*) FROM ledger_entries"; }
charges() { store_sql "SELECT COUNT(*) FROM charges"; }
rows=()
for p in $(seq 0 "$passes") day; do
    [ "$p" = 0 ] || sleep "$gap"
    if [ "$p" = day ]; then
        # the first pass after a midnight: every meter, and its host's
        # mark, moved a day back (its amounts the same: the formula counts
        # from its start), so that the pass bills a day more and writes
        # the days' rows it may (DAYS_PER_PASS, server/billing-settle.c)
        store_sql "UPDATE meters SET started_at = started_at - 86400,
                     settled_until = settled_until - 86400, billed_until = billed_until - 86400;
                   UPDATE billing_marks SET billed_until = billed_until - 86400" >/dev/null
        # as autovacuum would have left them by then: not 100,000 rows just
        # rewritten, which PostgreSQL's next read pays for
        [ -z "$pg" ] || psql -X -q "$pg" -c "VACUUM ANALYZE meters, billing_marks" ||
            die "VACUUM ANALYZE failed"
        rows_before=$(charges)
    fi
    beat=$(date +%s)
    store_sql "UPDATE nodes SET last_heartbeat = $beat; UPDATE storage_dirs SET used_at = $beat"
    before=$(entries)
    perf_pid=
    if [ -n "${PERF:-}" ] && [ "$p" = "$passes" ]; then
        perf record -g -o "$PERF" -p "$pid" 2>"$tmp/perf.log" &
        perf_pid=$!
        sleep 1
    fi
    t0=$(date +%s%N)
    out=$(api POST /v1/admin/billing/run "$admin_token" '{}')
    t1=$(date +%s%N)
    if [ -n "$perf_pid" ]; then
        kill -INT "$perf_pid"
        wait "$perf_pid" || true
    fi
    after=$(entries)
    [ "$p" = day ] && day_rows=$(($(charges) - rows_before))
    rows+=("$p $((t1 - t0)) $(echo "$out" | jq -r '[.elapsed_us, .meters, .settlements] | @tsv') \
$((after - before))")
    echo "settle.sh: pass $p: $out" >&2
done

# 4. the floor: what a pass reads and writes, done by the store itself in
# two statements: every open meter read with its host and its host's mark
# (summed in the store: nothing sent, nothing computed per meter), every
# host's mark moved; rolled back. What a pass cannot go below here.
floor_sql="BEGIN;
SELECT COUNT(*), SUM(m.billed_until + m.amount_micros + COALESCE(n.last_heartbeat, 0)
                     + COALESCE(k.billed_until, 0))
  FROM meters m LEFT JOIN nodes n ON n.id = m.node_id
  LEFT JOIN billing_marks k ON k.node_id = m.node_id WHERE m.ended_at IS NULL;
UPDATE billing_marks SET billed_until = billed_until + 1;
ROLLBACK;"
t0=$(date +%s%N)
store_sql "$floor_sql" >/dev/null
t1=$(date +%s%N)
floor_ns=$((t1 - t0))

# 5. the checks: every meter against its formula and its charges, every
# ledger transaction against the charges under it, the ledger's invariants
db_mib=$(du -sm "$data" | cut -f1)
check=$(api GET /v1/admin/billing/check "$admin_token")
[ "$(echo "$check" | jq -r .ok)" = true ] || die "billing check failed: $check"
lcheck=$(api GET /v1/admin/ledger/check "$admin_token")
[ "$(echo "$lcheck" | jq -r .ok)" = true ] || die "ledger check failed: $lcheck"

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
mem=$(awk '/^MemTotal:/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
{
    echo "# Settlement pass benchmark"
    echo
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), suanlid $("$build/suanlid" --version | awk '{print $2}'),"
    if [ -n "$pg" ]; then
        echo "PostgreSQL 15 (scripts/pg-test.sh, a Unix socket; fsync $(psql -X -qAt "$pg" -c 'SHOW fsync'));"
    else
        echo "SQLite (WAL, synchronous=FULL);"
    fi
    echo "$instances running instances with one open GPU meter"
    echo "each ($rate micros/hour), $renters renters ($storage with a file storage meter),"
    echo "$nodes hosts; ${gap}s between passes;"
    echo "machine: $(nproc) CPUs ($cpu), $mem memory, load average $(cut -d' ' -f1-3 /proc/loadavg)."
    echo
    echo "| pass | elapsed (server) | wall (HTTP) | meters | usage transactions | ledger entries | meters/s | entries/s |"
    echo "|---|---|---|---|---|---|---|---|"
    for r in "${rows[@]}"; do
        read -r p wall_ns us meters settlements written <<<"$r"
        awk -v p="$p" -v w="$wall_ns" -v us="$us" -v m="$meters" -v s="$settlements" \
            -v e="$written" 'BEGIN {
                printf "| %s | %.3f s | %.3f s | %d | %d | %d | %.0f | %.0f |\n",
                    (p == 0 ? "0 (first)" : p == "day" ? "after midnight" : p), us / 1e6,
                    w / 1e9, m, s, e, (us > 0 ? m / (us / 1e6) : 0),
                    (us > 0 ? e / (us / 1e6) : 0) }'
    done
    echo
    # the figure README.md quotes: the median of the steady passes (pass 0
    # settles meters that were never settled and is left out)
    for r in "${rows[@]:1:$passes}"; do
        read -r p wall_ns us meters settlements written <<<"$r"
        echo "$us $meters"
    done | sort -n | awk -v n="$passes" '
        { us[NR] = $1; rate[NR] = $1 > 0 ? $2 / ($1 / 1e6) : 0 }
        END {
            if (NR == 0) exit
            m = NR % 2 ? us[(NR + 1) / 2] : (us[NR / 2] + us[NR / 2 + 1]) / 2
            lo = hi = rate[1]
            for (i = 2; i <= NR; i++) { if (rate[i] < lo) lo = rate[i]; if (rate[i] > hi) hi = rate[i] }
            printf "**Median pass: %.3f s** over passes 1 to %d (%.3f to %.3f s), ", m / 1e6, n,
                us[1] / 1e6, us[NR] / 1e6
            printf "%.0f to %.0f meters/s.\n\n", lo, hi
        }'
    awk -v ns="$floor_ns" -v n="$instances" -v h="$nodes" 'BEGIN {
        printf "Floor in the same run: the %d open meters read with their hosts and marks,\n", n
        printf "and the %d marks moved, by the store alone in two statements (rolled back):\n", h
        printf "%.3f s.\n\n", ns / 1e9 }'
    read -r _ _ day_us _ <<<"${rows[-1]}"
    awk -v us="$day_us" -v r="$day_rows" 'BEGIN {
        printf "The first pass after a midnight also writes the whole day'"'"'s rows of at most\n"
        printf "2,000 meters (DAYS_PER_PASS; the next passes write the rest): %.3f s, %d rows.\n\n",
            us / 1e6, r }'
    echo "After the passes: billing check ok ($(echo "$check" | jq -r .meters) meters,"
    echo "$(echo "$check" | jq -r .charges_total_micros) micros charged), ledger check ok"
    echo "($(echo "$lcheck" | jq -r .transactions) transactions); data directory ${db_mib} MiB."
} >"$tmp/settle.md"
mkdir -p "$(dirname "$results")"
cp "$tmp/settle.md" "$results"
cat "$results"
ok=1
