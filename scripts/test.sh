#!/usr/bin/env bash
# Command 2: everything CI checks, from a clean clone.
#   1. install missing packages   2. generated code matches proto/ and docs/openapi.yaml, and the
#      Swift follows .swift-format (scripts/format.sh --check: no force unwrap or try! in Sources/),
#      every trapping call left in Sources/ says why it cannot fire (scripts/trap-check.sh); promtool checks and unit-tests
#      services/prometheus' alert rules   3. build (the containers' base image and the Python tools'
#      virtualenvs are made beside it), and build Examples/send-push (a separate package using the
#      HeraldClient product)
#   4. every test (one of them runs the example against a live stack), with a throw-away PostgreSQL
#      cluster (scripts/postgres.sh) for the tests that run each store on both backends: the unit
#      tests and the whole stack in-process (StackTests) in one process, beside ProcessTests (what
#      needs the executables) in another; then StackTests (the containers' image made beside
#      them) and ProcessTests again with every store that has a PostgreSQL form on PostgreSQL, and
#      the dispatch replica drills after it, with the web console in Debian's chromium driven by
#      playwright beside them (scripts/console-test.sh; screenshots in .build/console-screenshots/)
#   5. schemathesis against a live stack (scripts/schemathesis.sh), then docker-compose.yml run
#      for real with podman (scripts/compose-test.sh), and beside it
#      services/k8s/herald.yaml with podman kube play (scripts/kube-test.sh)
#   6. the benchmark's instruction counts (callgrind) and a 30-second soak (herald-bench soak: RSS
#      per service under steady traffic, no failed request), in the background while the compose
#      and kube tests wait on containers. (The fuzz targets' seeds run in step 4, FuzzCorpusTests;
#      fuzzing itself, libFuzzer under AddressSanitizer, is scripts/fuzz.sh: its instrumented
#      build alone took six minutes of CI's two cores.)
#   7. the benchmark's other scenarios, quick (every scenario runs and yields numbers; no time
#      thresholds; the replicas scenario on the test cluster)
#   Each step prints its seconds and how busy the cores were (`took`); the build is whole-module
#   with no debug information (-wmo, -debug-info-format none), a crash still names its functions.
#
#   scripts/test.sh --fast   for development: build, then the unit tests and the whole stack
#                            in-process (StackTests); no ProcessTests, PostgreSQL, containers or fuzzing
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
# Where CI's time goes: each step's seconds, and how busy the two cores were meanwhile (what a
# step run beside it could still use). `mark` before a step, `took WHAT "$mark"` after it.
mark() {
  local busy total
  read -r busy total < <(awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat)
  echo "$(date +%s) $busy $total"
}
took() {
  local t0 b0 a0 t1 b1 a1
  read -r t0 b0 a0 <<<"$2"
  read -r t1 b1 a1 <<<"$(mark)"
  echo "test.sh: $1 took $((t1 - t0))s (CPU $(( (b1 - b0) * 100 / (a1 - a0 > 0 ? a1 - a0 : 1) ))% busy)"
}
# Work run beside a step. `beside NAME COMMAND...` starts it in a process group of its own (setsid),
# its output in .build/NAME.log; `joined NAME` waits for it, prints that log and returns its exit
# status; `stop_beside` (the EXIT trap's) stops every group not joined yet, with all it started.
declare -A beside_pids=()
beside() {
  local name=$1
  shift
  setsid "$@" >".build/$name.log" 2>&1 &
  beside_pids[$name]=$!
}
joined() {
  local name=$1 status=0
  wait "${beside_pids[$name]}" || status=$?
  unset "beside_pids[$name]"
  cat ".build/$name.log"
  return "$status"
}
stop_beside() {
  local pid
  for pid in "${beside_pids[@]}"; do kill -- -"$pid" 2>/dev/null || true; done
}
if [[ "${1:-}" == "--fast" ]]; then
  scripts/setup.sh
  swift build --build-tests
  # As many tests at once as the full run's unit process (see below).
  SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=$((4 * $(nproc))) swift test --skip-build --skip ProcessTests
  echo "test.sh --fast: passed in $(( $(date +%s) - start ))s"
  exit 0
fi
scripts/setup.sh --test
# The full run ends with the benchmark's quick run and a soak: herald-bench is built with the rest
# (Package.swift leaves it out unless asked, so `--fast` and a plain `swift build` skip it).
export HERALD_BENCH=1
scripts/generate-proto.sh --check
scripts/format.sh --check
scripts/trap-check.sh >/dev/null
scripts/history-check.sh
# The alert rules: valid, and each alert fires (and stays quiet) as its unit tests say.
# MonitoringTests checks every metric name they and the dashboard use against a live stack.
promtool check rules services/prometheus/herald.rules.yml
promtool test rules services/prometheus/herald.rules.test.yml
# The containers' base image (scripts/base-image.sh: a debootstrap, mostly downloads and dpkg, 47-56 s
# on CI and the first thing compose-test.sh waits for) is made beside the build, which reads nothing
# of it. (The PostgreSQL one, 111 s, slowed the build by as much as it saved: compose-test.sh makes
# it beside its first checks, as before.)
mkdir -p .build
trap stop_beside EXIT
beside base-image bash -c 'scripts/setup.sh --compose && scripts/base-image.sh'
# So are the virtualenvs of schemathesis, the console's playwright and Examples/integration-test
# (PyPI downloads and unpacking: 16 s when each script made its own on the way, with pip's cache
# warm), at the lowest priority: beside the build at the same priority they slowed it by more than
# that (296 s against 259-269), so they take what the build and the first tests leave. A failure is
# only logged: each script makes its own when it finds none.
beside venvs nice -n 19 bash -c 's=0
  for script in schemathesis console-test compose-test; do scripts/$script.sh --install || s=1; done
  exit $s'
build=$(mark)
# One set of flags for every build of the run (the example's too): one built with other flags
# would compile every dependency again.
# - No debug information: CI reads a failure from the test's own message and a crash's symbol
#   names, not from a debugger, and without DWARF every module compiles and every binary links
#   faster.
# - Whole-module (-wmo, code generated on two threads so each file keeps its own object, as
#   SwiftPM's link step expects): a clean clone compiles some 180 modules once, most of them
#   dependencies, and batch mode type-checks each module's files once per batch. On 2 cores the
#   clean build took 379 s whole-module against 506 s in batch mode (same machine, same commit).
#   An incremental run recompiles a changed module whole: seconds for Herald's own.
# (The index store SwiftPM writes in debug builds stays: its test discovery on Linux reads it,
# and --disable-index-store fails the build; it costs nothing measurable here.)
# fuzz.sh and `--fast` build with their own flags, so after this run their first build compiles
# every module again.
build_flags=(-debug-info-format none -Xswiftc -wmo -Xswiftc -num-threads -Xswiftc 2)
swift build --build-tests "${build_flags[@]}"
took "the build" "$build"
# Another team's view: Examples/send-push adds the HeraldClient product from its own Package.swift;
# PublishedClientTests runs it against a live stack.
# Built in the same scratch folder: the dependencies' objects are reused (seconds, not minutes), and
# herald-* binaries the tests run are left as they are.
example=$(mark)
swift build --package-path Examples/send-push --scratch-path .build "${build_flags[@]}"
export HERALD_EXAMPLE_SEND_PUSH="$(swift build --package-path Examples/send-push --scratch-path .build "${build_flags[@]}" --show-bin-path)/send-push"
took "building Examples/send-push" "$example"
pg_dir=$(mktemp -d /tmp/herald-pg-XXXXXX)
trap 'stop_beside; scripts/postgres.sh stop "$pg_dir"' EXIT
pg=$(mark)
export HERALD_TEST_POSTGRES_URL=$(scripts/postgres.sh start "$pg_dir")
took "starting the PostgreSQL test cluster (at $HERALD_TEST_POSTGRES_URL)" "$pg"
# The unit tests and StackTests run in a process of their own, beside ProcessTests. In one
# process they share NIO's singleton event loops and one cooperative thread pool (a thread per
# core) with ProcessTests' clients: an in-process gRPC stream of 100,000 records held a
# loop for a second at a time, and the kill -9 drill counted answers the edge had logged within
# 50 ms as hangs of 15 s. Each runs in a session of its own (`setsid -w`): with autogroups (on
# by default in Debian's kernels) Linux shares the cores fairly between sessions, and then between
# the threads of a session. In one session ProcessTests' dozens of service processes took nearly
# all of both cores from the unit process's few threads, whose event loops then ran seconds late
# (the stall watch's report): a loopback connect timed out, a delivery missed its 20 s.
# Run as the test binary itself: two `swift test` at once wait on each other's lock of .build.
bin="$(swift build --show-bin-path)"
tests="$bin/heraldPackageTests.xctest"
# A failed run's own lines, last: CI keeps the head and the tail of a long log, and the middle,
# where a failure usually scrolls past, is what it drops.
failure_digest() {
  echo "test.sh: what failed, from $*:" >&2
  sed 's/\x1b\[[0-9;]*m//g' "$@" | grep -E '✘|recorded an issue|Caught error' | cut -c1-400 | head -n 60 >&2 || true
}
# Each test process ends with its stall watch's report (Tests/HeraldTestSupport/StallWatch.swift):
# how late NIO's event loops and the cooperative pool ran, and the worst stalls with the tests
# they fell in. `stalls LOG...` repeats each process's summary and worst stall after a stage.
stalls() {
  local log
  for log in "$@"; do
    echo "test.sh: stalls in $(basename "$log" .log): $(grep -m1 '^stall watch (pid' "$log" | cut -d: -f2- | cut -c1-200)"
    echo "test.sh:   the worst: $(grep -A1 -m1 '^stall watch: the worst' "$log" | tail -n1 | sed 's/^stall watch: *//' | cut -c1-400)"
  done
}
# How many tests each process runs at once. Swift Testing starts every test of a process at once
# unless told otherwise: some 800 in the unit process, dozens of them whole stacks, each with its
# deadlines ticking while it got a sliver of two cores; its event loops and cooperative pool then
# ran seconds late (the stall watch) and a loopback connect or a delivery missed its deadline.
# Bounded per core, the same tests take less time in all (140 s against 160-190 s for this stage).
cores=$(nproc)
unit_width=$((4 * cores))
process_width=$((2 * cores))
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
# StackTests, then ProcessTests, on PostgreSQL: one after the other. In one process (or two at
# once) every in-process stack's connection pools and handlers share two event-loop threads with
# the other suite's clients, beside a dozen PostgreSQL backends on two cores, and the edge answered
# 503 after its deadline (in CI); each alone passes with room to spare.
# The containers' image (scripts/image.sh: strip and copy the binaries, podman build; 14 s alone,
# 34 s beside the instruction counts and the soak where compose-test.sh made it) is made beside
# them, from the base image made beside the build, at the lowest priority (at the same one it slowed
# them from 42 s to 53 s). Most of it is copying 700 MB.
pg_suite=$(mark)
base_status=0
joined base-image || base_status=$?
if (( base_status == 0 )); then
  beside image nice -n 19 scripts/image.sh
else
  echo "test.sh: making the base image beside the build failed (exit $base_status); compose-test.sh tries again" >&2
fi
pg_log=.build/stack-tests-postgres.log
HERALD_TEST_STACK_DATABASE=postgres SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=$unit_width \
  "$tests" --testing-library swift-testing --filter StackTests \
  --skip ProcessTests 2>&1 \
  | tee "$pg_log" || { failure_digest "$pg_log"; echo "test.sh: StackTests on PostgreSQL failed" >&2; exit 1; }
stalls "$pg_log"
# compose-test.sh makes the image itself unless it is told it was made here.
image_made=""
if (( base_status == 0 )); then
  if joined image; then image_made=1; else echo "test.sh: scripts/image.sh failed; compose-test.sh tries again" >&2; fi
fi
took "StackTests on PostgreSQL, with the containers' image made beside them," "$pg_suite"
pg_suite=$(mark)
pg_log=.build/process-tests-postgres.log
HERALD_TEST_STACK_DATABASE=postgres SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=$process_width \
  "$tests" --testing-library swift-testing --filter ProcessTests \
  --skip ReplicaDrillTests 2>&1 \
  | tee "$pg_log" || { failure_digest "$pg_log"; echo "test.sh: ProcessTests on PostgreSQL failed" >&2; exit 1; }
stalls "$pg_log"
took "ProcessTests on PostgreSQL" "$pg_suite"
# The replica drills on their own: three dispatch processes pushing 10,000 deliveries, killed,
# frozen and throttled. Beside the rest of the pass (a dozen five-process stacks at once, a load of
# 14 on two cores) a debug build could not push them within the drill's 180 s, whatever dispatch
# did; what load does to a replica's leases is the throttled drill's and docs/scaling.md's.
# The console's browser test beside them: one stack and a browser clicking through it, a light load
# (58% of the cores alone) next to the drills' half, and the drills' deadline is 180 s for what
# takes them 26 s. (Beside schemathesis, which keeps both cores busy, it gained nothing: 119 s for
# both, against 77 and 35.)
drills=$(mark)
# The virtualenvs made at the lowest priority since the build: the console's is needed now.
venvs_status=0
joined venvs || venvs_status=$?
(( venvs_status == 0 )) || echo "test.sh: making the virtualenvs failed (exit $venvs_status); each script tries again" >&2
beside console-test scripts/console-test.sh
drills_log=.build/replica-drills.log
drills_status=0
HERALD_TEST_STACK_DATABASE=postgres SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=$process_width \
  "$tests" --testing-library swift-testing --filter ReplicaDrillTests 2>&1 \
  | tee "$drills_log" || drills_status=$?
console_status=0
joined console-test || console_status=$?
stalls "$drills_log"
(( drills_status == 0 )) || { failure_digest "$drills_log"; echo "test.sh: replica drills failed" >&2; exit 1; }
(( console_status == 0 )) || { echo "test.sh: the console browser test failed (exit $console_status)" >&2; exit 1; }
took "the replica drills on PostgreSQL, with the console browser test beside them," "$drills"
st=$(mark)
scripts/schemathesis.sh
took "schemathesis" "$st"
# Beside the container tests, which mostly wait on podman: the benchmark's instruction counts. They
# time nothing (callgrind counts instructions, which do not move with the machine's load), and
# nothing else checks a time while they run; they run copies of the executables, made before
# they start.
beside=$(mark)
beside bench-instructions "$bin/herald-bench" instructions --quick --json .build/bench-instructions.json
# The soak beside them too: it fails only on an answer other than 2xx or a restarted service (no
# time is checked), and its 200 requests/s take a third of a core.
beside soak "$bin/herald-bench" soak --quick --minutes 0.5
# The Kubernetes manifest run by podman kube play (a pod of its own, no host port), beside the
# compose test when the image is made already (12 s alone, a third of a core); else after it, from the
# image compose-test.sh makes.
[[ -n "$image_made" ]] && beside kube scripts/kube-test.sh
# The containers: services/Dockerfile's image from the binaries just built, docker-compose.yml run
# under podman with docker-compose, and Examples/integration-test with docker-compose.test.yml.
compose=$(mark)
HERALD_IMAGE_MADE=$image_made scripts/compose-test.sh
took "the compose test" "$compose"
if [[ -n "$image_made" ]]; then
  joined kube || { echo "test.sh: the podman kube play test failed" >&2; exit 1; }
else
  scripts/kube-test.sh
fi
joined bench-instructions || { echo "test.sh: herald-bench instructions failed" >&2; exit 1; }
joined soak || { echo "test.sh: the 30-second soak failed" >&2; exit 1; }
took "the container tests, with the kube test, the instruction counts and a 30-second soak beside them," "$beside"
bench=$(mark)
"$bin/herald-bench" all --quick --skip instructions --json .build/bench-quick.json
# The replicas' figures: fan-out with 1-3 dispatch replicas on the test cluster next to SQLite's one.
# (Its edge on SQLite is the same as `all`'s, just run: only PostgreSQL's.)
"$bin/herald-bench" replicas --quick --database "$HERALD_TEST_POSTGRES_URL" --edge postgres
took "the benchmark's quick run" "$bench"
echo "test.sh: all checks passed in $(( $(date +%s) - start ))s"
