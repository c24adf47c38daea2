#!/usr/bin/env bash
# Stage 1: what needs no build. Packages installed; generated code matches proto/ and
# docs/openapi.yaml; the Swift follows .swift-format (no force unwrap or try! in Sources/); every
# trapping call left in Sources/ says why it cannot fire; no comment names an issue or a commit;
# the alert rules are valid and fire (and stay quiet) as their unit tests say (MonitoringTests
# checks every metric name they and the dashboard use against a live stack).
source "$(dirname "$0")/lib.sh"
checks=$(mark)
scripts/setup.sh --test
scripts/generate-proto.sh --check
scripts/format.sh --check
scripts/trap-check.sh >/dev/null
scripts/history-check.sh
promtool check rules services/prometheus/herald.rules.yml
promtool test rules services/prometheus/herald.rules.test.yml
took "the checks" "$checks"
