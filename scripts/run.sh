#!/usr/bin/env bash
# Command 1: build Herald and run the whole stack in the foreground (Ctrl-C stops it).
# Arguments go to `herald up`, e.g. scripts/run.sh --http-port 9090 --dir /tmp/herald.
# HERALD_CONFIGURATION=release builds optimised binaries (a longer first build).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
configuration="${HERALD_CONFIGURATION:-debug}"
swift build -c "$configuration"
exec "$(swift build -c "$configuration" --show-bin-path)/herald" up "$@"
