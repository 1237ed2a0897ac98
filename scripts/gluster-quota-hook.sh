#!/bin/sh
# The operator's quota hook for suanli's glusterfs file storage backend
# (docs/operations.md, "File storage on GlusterFS"; docs/design/
# node-runtime.md, "File storage"). Run it as root on a server of the
# Gluster volume, where the gluster CLI reaches glusterd's local socket:
# Gluster serves quota commands only there (`gluster --remote-host` is
# read-only), so no suanli host can set or raise a quota.
#
# It turns the volume's quota on (with hard/soft timeouts of 0, so a write
# past a limit fails at once, and quota-deem-statfs, so statvfs of a
# directory reads its limit and use: what the hosts check and report), then
# gives every renter's directory at the volume's top (a name of digits) a
# limit of QUOTA_GIB, and puts back any other limit found there (one a host
# raised through a client that claims the quota daemon's pid). suanli's
# hosts bind a new directory only once its limit is the region's quota.
#
# usage: gluster-quota-hook.sh [-s SERVER] [-g GLUSTERD_SOCKET] [-e SECONDS] VOLUME QUOTA_GIB
#   -s  the address the volume is mounted from here (default: localhost)
#   -g  glusterd's CLI socket, when not the default one
#   -e  run a pass every SECONDS until stopped (default: one pass)
# QUOTA_GIB is the region's per-renter quota (`suanli admin storage ls`):
# after `suanli admin storage set REGION --quota-gib N`, run it with N.
set -eu

server=localhost sock="" every=0
while getopts s:g:e: opt; do
    case $opt in
    s) server=$OPTARG ;;
    g) sock=$OPTARG ;;
    e) every=$OPTARG ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
if [ $# -ne 2 ]; then
    echo "usage: $0 [-s SERVER] [-g GLUSTERD_SOCKET] [-e SECONDS] VOLUME QUOTA_GIB" >&2
    exit 2
fi
volume=$1 gib=$2
case $gib in '' | *[!0-9]*)
    echo "$0: QUOTA_GIB must be a whole number of GiB, such as 200" >&2
    exit 2
    ;;
esac
case $every in *[!0-9]*)
    echo "$0: -e takes whole seconds" >&2
    exit 2
    ;;
esac

gluster() {
    command gluster --mode=script ${sock:+--glusterd-sock="$sock"} "$@"
}

# the volume's quota, on for good (each step is a no-op when done)
if ! gluster volume get "$volume" features.quota | grep -q 'features.quota *on'; then
    gluster volume quota "$volume" enable >/dev/null
fi
gluster volume set "$volume" features.hard-timeout 0 >/dev/null
gluster volume set "$volume" features.soft-timeout 0 >/dev/null
gluster volume set "$volume" features.quota-deem-statfs on >/dev/null

mnt=$(mktemp -d /run/suanli-gluster-quota.XXXXXX)
cleanup() {
    umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
    rmdir "$mnt" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 0' INT TERM
glusterfs --volfile-server="$server" --volfile-id="$volume" --log-file=/dev/null "$mnt"

want=$((gib * 1024 * 1024 * 1024))
while :; do
    for dir in "$mnt"/*; do
        name=${dir##*/}
        case $name in '' | *[!0-9]*) continue ;; esac
        if [ ! -d "$dir" ] || [ -L "$dir" ]; then continue; fi
        blocks=$(stat -f -c '%b %S' "$dir" 2>/dev/null) || continue
        # shellcheck disable=SC2086 # two numbers
        size=$(set -- $blocks && echo $(($1 * $2)))
        [ "$size" = "$want" ] && continue
        if gluster volume quota "$volume" limit-usage "/$name" "${gib}GB" >/dev/null; then
            echo "gluster-quota-hook: /$name: limit ${gib} GiB (was $size bytes)"
        else
            echo "gluster-quota-hook: /$name: unable to set its limit" >&2
        fi
    done
    [ "$every" -gt 0 ] || break
    sleep "$every"
done
