#!/usr/bin/env bash
# Command 2: everything CI checks, from a clean clone, as seven stages (scripts/ci/, each prints
# its seconds and how busy the cores were; docs/ci.md says why they run in this order and what
# runs beside what):
#   1. checks.sh          packages; generated code, format, trapping calls, history in comments, alert rules
#   2. build.sh           the build and Examples/send-push (the base image and virtualenvs beside it)
#   3. sqlite-tests.sh    the unit tests and StackTests beside ProcessTests, on SQLite
#   4. postgres-tests.sh  StackTests (the containers' image made beside them), then ProcessTests, on PostgreSQL
#   5. drills.sh          the replica drills on PostgreSQL, the console in chromium beside them
#   6. containers.sh      schemathesis; docker-compose.yml and podman kube play, the instruction counts
#                         and a soak beside them
#   7. benchmarks.sh      the benchmark's other scenarios, quick (numbers, no thresholds)
# Stages 3-7 share a throw-away PostgreSQL cluster (scripts/postgres.sh) started here. Fuzzing
# itself is scripts/fuzz.sh (the targets' seeds run in stage 3, FuzzCorpusTests).
#
#   scripts/test.sh --fast   for development: build, then the unit tests and the whole stack
#                            in-process (StackTests); no ProcessTests, PostgreSQL, containers or fuzzing
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
if [[ "${1:-}" == "--fast" ]]; then
  scripts/setup.sh
  swift build --build-tests
  # As many tests at once as the full run's unit process.
  SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=$((4 * $(nproc))) swift test --skip-build --skip ProcessTests
  echo "test.sh --fast: passed in $(( $(date +%s) - start ))s"
  exit 0
fi
source scripts/ci/lib.sh
trap stop_beside EXIT
scripts/ci/checks.sh
scripts/ci/build.sh
pg_dir=$(mktemp -d /tmp/herald-pg-XXXXXX)
trap 'stop_beside; scripts/postgres.sh stop "$pg_dir"' EXIT
pg=$(mark)
HERALD_TEST_POSTGRES_URL=$(scripts/postgres.sh start "$pg_dir")
export HERALD_TEST_POSTGRES_URL
took "starting the PostgreSQL test cluster (at $HERALD_TEST_POSTGRES_URL)" "$pg"
for stage in sqlite-tests postgres-tests drills containers benchmarks; do scripts/ci/$stage.sh; done
echo "test.sh: all checks passed in $(( $(date +%s) - start ))s"
