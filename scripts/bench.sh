#!/usr/bin/env bash
# Benchmarks (figures, never pass/fail): builds release binaries and runs every scenario, each next
# to a baseline measured in the same run; prints tables and writes the figures as JSON.
#   scripts/bench.sh                     rpc, edge (wrk), fanout (100,000 registrations), memory
#   scripts/bench.sh --large             fan out to 1,000,000 registrations
#   scripts/bench.sh --quick             seconds, small sizes (what CI runs, on debug binaries)
#   scripts/bench.sh --seconds 10        longer phases;  --json FILE  (default bench-results.json)
#   scripts/bench.sh rpc|edge|fanout|instructions …   one scenario (fanout --provider apns|fcm: through the real sender)
#   scripts/bench.sh soak --minutes 30   tutorial traffic at a fixed rate; RSS per service every minute
#   scripts/bench.sh console             the web console's device search over 1,000,000 devices (ms per page)
#   scripts/bench.sh replicas [--database postgres://…]   fan-out with 1–3 dispatch replicas on PostgreSQL
#                                        next to SQLite's one, and the edge on both (a throw-away cluster
#                                        from scripts/postgres.sh when no --database is given)
#   scripts/bench.sh peers [--rounds 2]  Herald against django-push-notifications (registration upserts,
#                                        on SQLite and on a throw-away PostgreSQL cluster) and aioapns
#                                        (APNs sends to the same double); the Python side from PyPI
#                                        (scripts/peers/requirements.txt) in .build/peers-venv
set -euo pipefail
cd "$(dirname "$0")/.."
# herald-bench is in the package only on request (Package.swift's `benchmarks`).
export HERALD_BENCH=1
scripts/setup.sh --bench
swift build -c release
bin="$(swift build -c release --show-bin-path)"
case "${1:-}" in
  rpc|edge|fanout|soak|instructions|console|all) exec "$bin/herald-bench" "$@" ;;
  replicas|peers)
    if [[ " $* " == *" --database "* ]]; then exec "$bin/herald-bench" "$@"; fi
    pg_dir=$(mktemp -d /tmp/herald-bench-pg-XXXXXX)
    trap 'scripts/postgres.sh stop "$pg_dir"' EXIT
    "$bin/herald-bench" "$@" --database "$(scripts/postgres.sh start "$pg_dir")"
    ;;
  *) exec "$bin/herald-bench" all --json bench-results.json "$@" ;;
esac
