#!/usr/bin/env bash
# Command 2: everything CI checks, from a clean clone.
#   1. install missing packages   2. generated code matches proto/   3. build   4. every test
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/setup.sh --test
scripts/generate-proto.sh --check
swift build --build-tests
echo "test.sh: build finished after $(( $(date +%s) - start ))s"
swift test --skip-build
echo "test.sh: all checks passed in $(( $(date +%s) - start ))s"
