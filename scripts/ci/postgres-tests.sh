#!/usr/bin/env bash
# Stage 4: StackTests, then ProcessTests (but the replica drills), with every store that has a
# PostgreSQL form on PostgreSQL: one after the other (docs/ci.md). The containers' image is made
# beside StackTests, at the lowest priority, from the base image made beside the build;
# .build/ci/image.made says it was, for the container stage.
source "$(dirname "$0")/lib.sh"
rm -f .build/ci/image.made
stack=$(mark)
base_status=0
joined base-image || base_status=$?
if (( base_status == 0 )); then
  beside image nice -n 19 scripts/image.sh
else
  echo "test.sh: making the base image beside the build failed (exit $base_status); compose-test.sh tries again" >&2
fi
log=.build/stack-tests-postgres.log
HERALD_TEST_STACK_DATABASE=postgres SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=$unit_width \
  "$tests" --testing-library swift-testing --filter StackTests --skip ProcessTests 2>&1 \
  | tee "$log" || { failure_digest "$log"; echo "test.sh: StackTests on PostgreSQL failed" >&2; exit 1; }
stalls "$log"
if (( base_status == 0 )); then
  if joined image; then touch .build/ci/image.made; else echo "test.sh: scripts/image.sh failed; compose-test.sh tries again" >&2; fi
fi
took "StackTests on PostgreSQL, with the containers' image made beside them," "$stack"
process=$(mark)
log=.build/process-tests-postgres.log
HERALD_TEST_STACK_DATABASE=postgres SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=$process_width \
  "$tests" --testing-library swift-testing --filter ProcessTests --skip ReplicaDrillTests 2>&1 \
  | tee "$log" || { failure_digest "$log"; echo "test.sh: ProcessTests on PostgreSQL failed" >&2; exit 1; }
stalls "$log"
took "ProcessTests on PostgreSQL" "$process"
