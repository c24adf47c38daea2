#!/usr/bin/env bash
# swift-format over Herald's own Swift (the toolchain's `swift format`, settings in .swift-format).
# Generated code (*/Generated/) is left as its generator wrote it.
#   scripts/format.sh          rewrite files in place
#   scripts/format.sh --check  lint only; exit 1 on any finding (scripts/test.sh runs this)
set -euo pipefail
cd "$(dirname "$0")/.."
swift format --version >/dev/null 2>&1 || { echo "swift format is missing: it ships with Swift 6 toolchains" >&2; exit 2; }
mapfile -t files < <(git ls-files --cached --others --exclude-standard 'Package.swift' 'Sources/*.swift' 'Tests/*.swift' 'Examples/*.swift' | grep -v '/Generated/')
if [[ "${1:-}" == "--check" ]]; then
  swift format lint --strict "${files[@]}"
  echo "format.sh: ${#files[@]} files follow .swift-format"
else
  swift format format -i "${files[@]}"
fi
