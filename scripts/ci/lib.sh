# What every stage of scripts/test.sh shares (sourced, not run): timing, work beside a stage, the
# build's flags and binaries, how many tests run at once, and a failed run's digest.
# docs/ci.md says why the stages run in this order and what runs beside what.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export HERALD_BENCH=1
mkdir -p .build/ci
# `mark` before a step, `took WHAT "$mark"` after it: its seconds, and how busy the cores were.
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
# Work beside the stages: `beside NAME COMMAND...` runs it in a session of its own, its output in
# .build/NAME.log and its exit status, when it ends, in .build/ci/NAME.status; `joined NAME`
# (from any stage) waits for that, prints the log and returns the status; `stop_beside` (the
# EXIT trap's) stops every session not finished yet, with all it started.
beside() {
  local name=$1
  shift
  rm -f ".build/ci/$name.status"
  setsid bash -c '"$@" >".build/$0.log" 2>&1; echo $? >".build/ci/$0.status"' "$name" "$@" &
  echo $! >".build/ci/$name.pid"
}
joined() {
  local name=$1
  while [[ ! -s ".build/ci/$name.status" ]]; do
    kill -0 "$(cat ".build/ci/$name.pid")" 2>/dev/null || break
    sleep 1
  done
  cat ".build/$name.log"
  rm -f ".build/ci/$name.pid"
  return "$(cat ".build/ci/$name.status" 2>/dev/null || echo 1)"
}
stop_beside() {
  local pid
  for pid in .build/ci/*.pid; do
    if [[ -e "$pid" ]]; then
      kill -- -"$(cat "$pid")" 2>/dev/null || true
      rm -f "$pid"
    fi
  done
  return 0
}
# One set of flags for every build of the run (the example's too; docs/ci.md says why these).
build_flags=(-debug-info-format none -Xswiftc -wmo -Xswiftc -num-threads -Xswiftc 2)
# The debug build's products, as an absolute path (the tests find the executables beside themselves).
bin=$(readlink -f .build/debug 2>/dev/null || true)
tests="$bin/heraldPackageTests.xctest"
# The example's binary, for ExternalClientTests, once the build stage has made it.
if [[ -s .build/ci/example-bin ]]; then export HERALD_EXAMPLE_SEND_PUSH="$(cat .build/ci/example-bin)/send-push"; fi
# Tests at once per process: bounded per core (docs/ci.md).
cores=$(nproc)
unit_width=$((4 * cores))
process_width=$((2 * cores))
# A failed run's own lines, last: CI keeps the head and the tail of a long log.
failure_digest() {
  echo "test.sh: what failed, from $*:" >&2
  sed 's/\x1b\[[0-9;]*m//g' "$@" | grep -E '✘|recorded an issue|Caught error' | cut -c1-400 | head -n 60 >&2 || true
}
# Each test process ends with its stall watch's report; `stalls LOG...` repeats its summary and
# worst stall.
stalls() {
  local log
  for log in "$@"; do
    echo "test.sh: stalls in $(basename "$log" .log): $(grep -m1 '^stall watch (pid' "$log" | cut -d: -f2- | cut -c1-200)"
    echo "test.sh:   the worst: $(grep -A1 -m1 '^stall watch: the worst' "$log" | tail -n1 | sed 's/^stall watch: *//' | cut -c1-400)"
  done
}
