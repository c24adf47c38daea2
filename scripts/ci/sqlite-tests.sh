#!/usr/bin/env bash
# Stage 3: every test on SQLite (and the stores' own tests on both backends, with
# HERALD_TEST_POSTGRES_URL): the unit tests and StackTests in one process, beside ProcessTests in
# another, each in a session of its own so that the kernel shares the cores between the two, not
# between their threads (docs/ci.md). Run as the test binary: two `swift test` wait on each other.
source "$(dirname "$0")/lib.sh"
first=$(mark)
unit_log=.build/unit-tests.log
process_log=.build/process-tests.log
SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=$unit_width \
  setsid -w "$tests" --testing-library swift-testing --skip ProcessTests >"$unit_log" 2>&1 &
unit_pid=$!
process_status=0
SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=$process_width \
  setsid -w "$tests" --testing-library swift-testing --filter ProcessTests 2>&1 | tee "$process_log" || process_status=$?
unit_status=0
wait "$unit_pid" || unit_status=$?
cat "$unit_log"
stalls "$unit_log" "$process_log"
(( unit_status == 0 && process_status == 0 )) || failure_digest "$unit_log" "$process_log"
(( unit_status == 0 )) || { echo "test.sh: unit tests and StackTests failed (exit $unit_status)" >&2; exit 1; }
(( process_status == 0 )) || { echo "test.sh: ProcessTests failed (exit $process_status)" >&2; exit 1; }
took "unit, stack and process tests (SQLite)" "$first"
