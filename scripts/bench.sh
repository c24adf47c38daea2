#!/usr/bin/env bash
# Benchmarks (figures, never pass/fail): builds release binaries and runs herald-bench.
#   scripts/bench.sh                 unary RPC: raw socket floor, lean protocol, gRPC
#   scripts/bench.sh --seconds 10    longer phases; --json FILE also writes the figures as JSON
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
swift build -c release --product herald-bench
exec "$(swift build -c release --show-bin-path)/herald-bench" rpc "$@"
