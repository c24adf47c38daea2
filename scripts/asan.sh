#!/usr/bin/env bash
# Runs the protobuf-c wrapper's tests under AddressSanitizer (LeakSanitizer included), in a build
# folder of its own so the normal build is not disturbed. Only the Swift Testing run is checked:
# XCTest's own runner leaks two objects at exit, which is not Herald's code.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
swift build --build-tests --sanitize=address --scratch-path .build-asan
swift test --skip-build --sanitize=address --scratch-path .build-asan --disable-xctest --filter HeraldProtoTests
