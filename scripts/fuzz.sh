#!/bin/bash
# Builds the API fuzzer (tests/fuzz/fuzz-api.c) with clang's libFuzzer, ASan
# and UBSan in build-fuzz/, and runs it for SECONDS (default 60) on a scratch
# copy of the seed corpus (tests/fuzz/corpus/).
#   scripts/fuzz.sh [SECONDS]
# Environment: FUZZ_JOBS (parallel compiles, default 2), FUZZ_ARGS (extra
# libFuzzer flags), CC_FUZZ (default clang), FUZZ_BUILD (the build directory,
# default build-fuzz).
# Exits 1 on a crash, printing the path of the input that crashed: replay it
# with `build-fuzz/fuzz-api PATH`.
set -eu
seconds=${1:-60}
cd "$(dirname "$0")/.."
out=${FUZZ_BUILD:-build-fuzz}
bin=$out/fuzz-api
cc=${CC_FUZZ:-clang}
jobs=${FUZZ_JOBS:-2}
pkgs="libmicrohttpd jansson libcurl sqlite3 libpq libsodium libarchive liblzma"

command -v "$cc" >/dev/null || {
    echo "fuzz.sh: $cc not found: run scripts/deps.sh test" >&2
    exit 1
}
pkg_cflags=$(pkg-config --cflags $pkgs)
pkg_libs=$(pkg-config --libs $pkgs)
cflags="-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -g -O1 \
-fno-omit-frame-pointer -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter \
$pkg_cflags"
export cc cflags out

# make-like: an object is rebuilt when its source or a header it includes (the
# .d file clang writes) is newer; the binary when an object is newer.
stale() { # stale OBJECT SOURCE
    [ -f "$1" ] && [ -f "${1%.o}.d" ] || return 0
    deps=$(sed -e 's/^[^:]*://' -e 's/\\$//' "${1%.o}.d" | tr -s ' \n' '\n\n' | grep -v ':$' || true)
    for d in $2 $deps; do
        [ -e "$d" ] || return 0
        [ "$d" -nt "$1" ] && return 0
    done
    return 1
}

objects=""
todo=""
for src in lib/*.c server/*.c tests/fuzz/fuzz-api.c; do
    [ "$src" = server/main.c ] && continue
    obj=$out/obj/${src%.c}.o
    objects="$objects $obj"
    stale "$obj" "$src" && todo="$todo $src"
done
if [ -n "$todo" ]; then
    echo "fuzz.sh: compiling $(echo "$todo" | wc -w | tr -d ' ') files with $cc" >&2
    # shellcheck disable=SC2016
    printf '%s\n' $todo | xargs -P "$jobs" -I{} sh -c '
        src={}; obj=$out/obj/${src%.c}.o
        mkdir -p "$(dirname "$obj")"
        $cc $cflags -MMD -MP -c -o "$obj" "$src" || exit 255'
fi
relink=0
[ -f "$bin" ] || relink=1
for obj in $objects; do
    [ "$obj" -nt "$bin" ] && relink=1
done
if [ "$relink" = 1 ]; then
    echo "fuzz.sh: linking $bin" >&2
    # shellcheck disable=SC2086
    $cc $cflags -o "$bin" $objects $pkg_libs -lcrypt -lpthread
fi

# a dictionary of the API's words helps libFuzzer past string comparisons
dict=$out/api.dict
cat >"$dict" <<'EOF'
"\"email\""
"\"password\""
"\"name\""
"\"token\""
"\"expires_in_days\""
"\"public_key\""
"\"real_name\""
"\"id_number\""
"\"approve\""
"\"reason\""
"\"amount_micros\""
"\"memo\""
"\"transaction_id\""
"\"user_id\""
"\"currency\""
"\"CNY\""
"\"id\""
"\"vram_mib\""
"\"cpu_cores_per_gpu\""
"\"memory_mib_per_gpu\""
"\"price_per_hour_micros\""
"\"region\""
"\"item\""
"\"free_gib\""
"\"nogpu\""
"\"data_disk\""
"\"file_storage\""
"\"fz-1\""
"\"@R\""
"\"@A\""
"\"@G\""
"ssh-ed25519 "
"ssh-rsa "
"ecdsa-sha2-nistp256 "
"AAAA"
"true"
"false"
"null"
"9223372036854775807"
"-9223372036854775808"
"1e400"
"\"\\u0000\""
"\"\\ud800\""
"pending"
"approved"
"rejected"
"all"
"/v1/"
"%2F"
"suanli_token="
"suanli_session="
"suanli_port_token="
"SUANLI_SESSION"
"%5F"
"%5f"
"Bearer sl_"
".localhost"
"-6006.localhost"
"-6008.localhost:8080"
"@T"
"@S"
"@O"
"@I"
"; "
"&"
"?"
EOF

# the scratch directory holds the corpus copy and the harness's store (its
# TMPDIR), so even a crash leaves nothing behind
scratch=$(mktemp -d "${TMPDIR:-/tmp}/suanli-fuzz-run-XXXXXX")
log=$out/fuzz.log
artifacts=$out/crashes/
mkdir -p "$artifacts"
trap 'rm -rf "$scratch"' EXIT INT TERM
mkdir "$scratch/corpus" "$scratch/tmp"
cp tests/fuzz/corpus/* "$scratch/corpus/" 2>/dev/null || true
before=$(ls "$artifacts" | wc -l)

echo "fuzz.sh: running $bin for ${seconds}s (log: $log)" >&2
rc=0
# shellcheck disable=SC2086
TMPDIR=$scratch/tmp "$bin" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -dict="$dict" -artifact_prefix="$artifacts" -print_final_stats=1 ${FUZZ_ARGS:-} \
    "$scratch/corpus" >"$log" 2>&1 || rc=$?

runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
[ -n "$runs" ] || runs=$(sed -n 's/^#\([0-9]*\).*/\1/p' "$log" | tail -n 1)
secs=$(sed -n 's/^stat::\(average_exec_per_sec\): *//p' "$log" | tail -n 1)
corpus=$(ls "$scratch/corpus" | wc -l)
crash=$(ls -t "$artifacts" | head -n 1)
after=$(ls "$artifacts" | wc -l)
echo "fuzz: ${runs:-?} executions in ${seconds}s (${secs:-?}/s), corpus $corpus inputs, exit $rc"
if [ "$rc" != 0 ] || [ "$after" -gt "$before" ]; then
    grep -E -A40 'ERROR: |invariant broken|runtime error|deadly signal' "$log" | head -n 80 >&2 || tail -n 60 "$log" >&2
    [ "$after" -gt "$before" ] && echo "fuzz.sh: crashing input: $artifacts$crash" >&2
    echo "fuzz.sh: full log in $log; replay with: $bin $artifacts${crash:-CRASH}" >&2
    exit 1
fi
