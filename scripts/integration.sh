#!/bin/sh
# Runs the integration tests with Debian's pytest against build/.
set -eu
cd "$(dirname "$0")/.."
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration "$@"
