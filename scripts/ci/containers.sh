#!/usr/bin/env bash
# Stage 6: schemathesis against a live stack; then docker-compose.yml run for real under podman
# (and Examples/integration-test), with beside it what only waits or counts: the Kubernetes
# manifest under podman kube play (when the image was made already), the benchmark's instruction
# counts (callgrind counts, which do not move with the load) and a 30-second soak (fails only on a
# non-2xx answer or a restarted service).
source "$(dirname "$0")/lib.sh"
st=$(mark)
scripts/schemathesis.sh
took "schemathesis" "$st"
image_made=""
[[ -e .build/ci/image.made ]] && image_made=1
containers=$(mark)
beside bench-instructions "$bin/herald-bench" instructions --quick --json .build/bench-instructions.json
beside soak "$bin/herald-bench" soak --quick --minutes 0.5
[[ -n "$image_made" ]] && beside kube scripts/kube-test.sh
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
took "the container tests, with the kube test, the instruction counts and a 30-second soak beside them," "$containers"
