#!/usr/bin/env bash
# Stage 7: the benchmark's other scenarios, quick: each runs and yields numbers (no time
# thresholds); the replicas' fan-out with 1-3 dispatch replicas on the test cluster.
source "$(dirname "$0")/lib.sh"
bench=$(mark)
"$bin/herald-bench" all --quick --skip instructions --json .build/bench-quick.json
# Its edge on SQLite is the same as `all`'s, just run: only PostgreSQL's.
"$bin/herald-bench" replicas --quick --database "$HERALD_TEST_POSTGRES_URL" --edge postgres
took "the benchmark's quick run" "$bench"
