#!/bin/sh
# `make run`: starts the platform on this machine in the foreground.
#   SUANLI_DATA    data directory (default: run/data in the checkout)
#   SUANLI_LISTEN  API address (default: 127.0.0.1:7070)
set -eu
cd "$(dirname "$0")/.."
data=${SUANLI_DATA:-run/data}
listen=${SUANLI_LISTEN:-127.0.0.1:7070}
mkdir -p "$data"
first=yes
[ -f "$data/suanli.db" ] && first=no
cat <<MSG
suanli: starting suanlid on http://$listen with data in $data
suanli: try, in another terminal:
    export SUANLI_URL=http://$listen PATH=\$PWD/build:\$PATH
    suanli login --email admin@localhost     # password: $data/admin-password
    suanli market
MSG
[ "$first" = no ] && echo "suanli: the admin password is in $data/admin-password"
exec build/suanlid --data-dir "$data" --listen "$listen" \
    --set catalog_seed="$PWD/etc/catalog.sample.json"
