#!/usr/bin/env bash
# libFuzzer over the code that parses what clients send and builds what providers get
# (Sources/herald-fuzz: proto, lean, json, subscription, payloads, template, and the NH surfaces:
# sas, installation, nhheaders, batch, tagexpr, nhregistration), the edge's whole router (router),
# and the libraries Herald hands outside bytes to, at its own entry points (http1, http2,
# credentials; docs/security.md lists them), under AddressSanitizer. A target with a dictionary of
# its format's tokens in Tests/FuzzDictionaries/<target>.dict is given it.
#
#   scripts/fuzz.sh                         every target for FUZZ_SECONDS (20) each
#   FUZZ_SECONDS=600 scripts/fuzz.sh json   one target for ten minutes
#   FUZZ_JOBS=1 scripts/fuzz.sh             one target at a time (default: one per core)
#   scripts/fuzz.sh --long                  every target, then schemathesis with 500 examples per operation
#   HERALD_FUZZ_MAX_MS=100 scripts/fuzz.sh  also fail on any input that takes over 100 ms of CPU
#                                           (each run prints its slowest input either way)
#
# Fails on the first crash, leak or broken property; the input that caused it is kept in
# .build/fuzz-artifacts/ (replay: HERALD_FUZZ_TARGET=T .build-fuzz/debug/herald-fuzz FILE). Each corpus
# grows in .build/fuzz-corpus/<target>, seeded from Tests/FuzzCorpus/<target> (scripts/make_fuzz_seeds.py).
#
# HERALD_FUZZ=1 compiles Herald's own modules with coverage and ASan, in a build folder of its own
# (.build-fuzz): in the normal one, its objects and the test build's (-wmo) replace each other, so
# each build after the other compiled every dependency again, and a link could see both kinds.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-20}"
long=0
targets=()
for argument in "$@"; do
  case "$argument" in
    --long) long=1 ;;
    *) targets+=("$argument") ;;
  esac
done
(( ${#targets[@]} )) || targets=(proto lean json subscription payloads template sas installation nhheaders batch tagexpr nhregistration router http1 http2 credentials)

scripts/setup.sh
build_start=$SECONDS
# HERALD_DEBUG_INFO: dwarf by default; none builds faster. As the build before it, or every
# dependency is compiled again (`swift build`'s default is dwarf).
debug_info="${HERALD_DEBUG_INFO:-dwarf}"
scratch=(--scratch-path .build-fuzz)
HERALD_FUZZ=1 swift build "${scratch[@]}" --product herald-fuzz -debug-info-format "$debug_info"
echo "fuzz.sh: instrumented build took $((SECONDS - build_start)) s"
fuzzer="$(HERALD_FUZZ=1 swift build "${scratch[@]}" -debug-info-format "$debug_info" --show-bin-path)/herald-fuzz"
mkdir -p .build/fuzz-artifacts

# One target: its run, then a summary line; the whole log when it fails.
fuzz_target() {
  local target="$1"
  local corpus=".build/fuzz-corpus/$target"
  mkdir -p "$corpus"
  local log=".build/fuzz-artifacts/$target.log"
  local extra=()
  # tagexpr hands each expression to a Task for SQLite's audience and waits on a semaphore; the
  # Task's context is freed on another thread just after, so LeakSanitizer's check after each
  # input now and then (once in a million inputs) sees it in flight. Replayed alone, that input
  # leaks nothing: the leak check stays on for every other target.
  [[ "$target" == tagexpr ]] && extra=(-detect_leaks=0)
  [[ -f "Tests/FuzzDictionaries/$target.dict" ]] && extra+=(-dict="Tests/FuzzDictionaries/$target.dict")
  # -rss_limit_mb: well above the ~0.6 GB a target settles at; a real leak still trips it.
  if ! LSAN_OPTIONS="suppressions=$PWD/scripts/lsan-suppressions.txt" HERALD_FUZZ_TARGET="$target" "$fuzzer" "$corpus" "Tests/FuzzCorpus/$target" \
      -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=3072 -timeout=10 \
      -artifact_prefix=".build/fuzz-artifacts/$target-" "${extra[@]}" >"$log" 2>&1; then
    echo "fuzz.sh: $target FAILED; the end of its log ($log):"
    tail -n 40 "$log"
    return 1
  fi
  local runs rate files bytes slowest
  runs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
  rate=$(grep 'DONE' "$log" | tail -1 | sed -E 's/.*exec\/s: ([0-9]+).*/\1/')
  files=$(find "$corpus" -type f | wc -l)
  bytes=$(du -sb "$corpus" | awk '{print $1}')
  slowest=$(grep 'slowest input so far' "$log" | tail -1 | sed -E 's/.*so far: //')
  echo "fuzz.sh: $target: 0 crashes, $runs runs, $rate exec/s, corpus $files files ($bytes bytes), slowest input ${slowest:-n/a}"
}

# FUZZ_JOBS targets at once (default: one per core). Each target is one libFuzzer process on one
# thread, so on 2 cores the smoke run takes half the time; the slowest-input figures are thread
# CPU time, which a neighbour does not inflate.
jobs="${FUZZ_JOBS:-$(nproc)}"
running=0
failed=0
for target in "${targets[@]}"; do
  echo "fuzz.sh: $target for $seconds s"
  fuzz_target "$target" &
  running=$((running + 1))
  if (( running >= jobs )); then
    wait -n || failed=1
    running=$((running - 1))
    (( failed )) && break
  fi
done
while (( running > 0 && !failed )); do
  wait -n || failed=1
  running=$((running - 1))
done
if (( failed )); then
  # The first failure is the answer; the targets still running are stopped.
  for pid in $(jobs -p); do
    pkill -P "$pid" 2>/dev/null || true
    kill "$pid" 2>/dev/null || true
  done
  wait || true
  exit 1
fi

if (( long )); then
  SCHEMATHESIS_MAX_EXAMPLES=500 scripts/schemathesis.sh
fi
