#!/usr/bin/env bash
# swift-format over Herald's own Swift (the toolchain's `swift format`, settings in .swift-format).
# Generated code (*/Generated/) is left as its generator wrote it.
#   scripts/format.sh          rewrite files in place
#   scripts/format.sh --check  lint only; exit 1 on any finding (scripts/test.sh runs this)
# No trapping unwraps in what ships: .swift-format turns on NeverForceUnwrap, NeverUseForceTry and
# NeverUseImplicitlyUnwrappedOptionals. Tests keep theirs (a failed `!` there is a failed
# test): they are linted with the same settings and those three rules off.
set -euo pipefail
cd "$(dirname "$0")/.."
swift format --version >/dev/null 2>&1 || { echo "swift format is missing: it ships with Swift 6 toolchains" >&2; exit 2; }
mapfile -t shipped < <(git ls-files --cached --others --exclude-standard 'Package.swift' 'Sources/*.swift' 'Examples/*.swift' | grep -v '/Generated/')
mapfile -t tests < <(git ls-files --cached --others --exclude-standard 'Tests/*.swift' | grep -v '/Generated/')
tests_config=$(mktemp)
trap 'rm -f "$tests_config"' EXIT
sed -E 's/"(NeverForceUnwrap|NeverUseForceTry|NeverUseImplicitlyUnwrappedOptionals)": true/"\1": false/' .swift-format >"$tests_config"
if [[ "${1:-}" == "--check" ]]; then
  swift format lint --strict "${shipped[@]}"
  swift format lint --strict --configuration "$tests_config" "${tests[@]}"
  # Every top-level suite runs under the stall watch (Tests/HeraldTestSupport/StallWatch.swift):
  # a test during which an event loop or the cooperative pool stalled fails and names itself.
  unwatched=$(awk 'FNR == 1 { inside = 0 }
    /^@Suite/ { inside = 1; seen = 0; start = FNR }
    inside && /\.watchedForStalls/ { seen = 1 }
    inside && /^(struct|final class|class|enum|actor) / { if (!seen) print FILENAME ":" start; inside = 0 }' "${tests[@]}")
  if [[ -n "$unwatched" ]]; then
    echo "format.sh: these suites lack the .watchedForStalls trait:" >&2
    echo "$unwatched" >&2
    exit 1
  fi
  echo "format.sh: ${#shipped[@]} files (no trapping unwraps) and ${#tests[@]} test files follow .swift-format"
else
  swift format format -i "${shipped[@]}"
  swift format format -i --configuration "$tests_config" "${tests[@]}"
fi
