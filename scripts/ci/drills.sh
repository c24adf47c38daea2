#!/usr/bin/env bash
# Stage 5: the replica drills on PostgreSQL on their own (three dispatch processes pushing 10,000
# deliveries, killed, frozen and throttled), with the console's browser test beside them: one
# stack and a browser, a light load next to the drills' (docs/ci.md).
source "$(dirname "$0")/lib.sh"
drills=$(mark)
venvs_status=0
joined venvs || venvs_status=$?
(( venvs_status == 0 )) || echo "test.sh: making the virtualenvs failed (exit $venvs_status); each script tries again" >&2
beside console-test scripts/console-test.sh
log=.build/replica-drills.log
drills_status=0
HERALD_TEST_STACK_DATABASE=postgres SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=$process_width \
  "$tests" --testing-library swift-testing --filter ReplicaDrillTests 2>&1 | tee "$log" || drills_status=$?
console_status=0
joined console-test || console_status=$?
stalls "$log"
(( drills_status == 0 )) || { failure_digest "$log"; echo "test.sh: replica drills failed" >&2; exit 1; }
(( console_status == 0 )) || { echo "test.sh: the console browser test failed (exit $console_status)" >&2; exit 1; }
took "the replica drills on PostgreSQL, with the console browser test beside them," "$drills"
