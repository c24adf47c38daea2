#!/usr/bin/env bash
# Stage 2: the build, whole-module without debug information, and Examples/send-push (another
# team's view: a package of its own adding the HeraldClient product; PublishedClientTests runs it).
# Beside it, for later stages: the containers' base image, and the Python tools' virtualenvs at
# the lowest priority (docs/ci.md).
source "$(dirname "$0")/lib.sh"
beside base-image bash -c 'scripts/setup.sh --compose && scripts/base-image.sh'
beside venvs nice -n 19 bash -c 's=0
  for script in schemathesis console-test compose-test; do scripts/$script.sh --install || s=1; done
  exit $s'
build=$(mark)
swift build --build-tests "${build_flags[@]}"
took "the build" "$build"
example=$(mark)
# In the same scratch folder: the dependencies' objects are reused, the herald-* binaries kept.
swift build --package-path Examples/send-push --scratch-path .build "${build_flags[@]}"
swift build --package-path Examples/send-push --scratch-path .build "${build_flags[@]}" --show-bin-path \
  >.build/ci/example-bin
took "building Examples/send-push" "$example"
