#!/usr/bin/env bash
# swift-format over Herald's own Swift (the toolchain's `swift format`, settings in .swift-format).
# Generated code (*/Generated/) is left as its generator wrote it.
#   scripts/format.sh          rewrite files in place
#   scripts/format.sh --check  lint only; exit 1 on any finding (scripts/test.sh runs this)
# No trapping unwraps in what ships: .swift-format turns on NeverForceUnwrap, NeverUseForceTry and
# NeverUseImplicitlyUnwrappedOptionals (issue 47). Tests keep theirs (a failed `!` there is a failed
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
  echo "format.sh: ${#shipped[@]} files (no trapping unwraps) and ${#tests[@]} test files follow .swift-format"
else
  swift format format -i "${shipped[@]}"
  swift format format -i --configuration "$tests_config" "${tests[@]}"
fi
