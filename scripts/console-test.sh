#!/usr/bin/env bash
# The web console in a real browser: Debian's chromium driven by PyPI's playwright
# (Tests/python/console_check.py), against a live stack in accounts mode; every page is also checked
# by axe-core's accessibility rules (PyPI axe-playwright-python, which carries axe-core).
#
#   scripts/console-test.sh                 run it; screenshots go to .build/console-screenshots/
#   scripts/console-test.sh --update-docs   also copy the screenshots docs/api.md shows into docs/console/
#   scripts/console-test.sh --install       only make its virtualenv (scripts/test.sh does it beside the build)
#
# Needs a debug build (scripts/test.sh makes it) and chromium (scripts/setup.sh --test installs it);
# HERALD_BIN overrides where the binaries are. playwright lives in its own virtualenv under .build/
# and never downloads a browser: the check launches /usr/bin/chromium (CHROMIUM overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
version="1.65.2"
axe_version="0.1.8"
venv=.build/console-venv
if ! "$venv/bin/python" -c "import sys; from importlib.metadata import version; sys.exit(version('playwright') != '$version' or version('axe-playwright-python') != '$axe_version')" 2>/dev/null; then
  echo "console-test.sh: installing playwright $version and axe-playwright-python $axe_version into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "playwright==$version" "axe-playwright-python==$axe_version"
fi
[[ "${1:-}" == "--install" ]] && exit 0
command -v "${CHROMIUM:-/usr/bin/chromium}" >/dev/null || { echo "console-test.sh: chromium missing: scripts/setup.sh --test" >&2; exit 2; }
bin="${HERALD_BIN:-$(swift build --show-bin-path)}"
shots=.build/console-screenshots
rm -rf "$shots"
mkdir -p "$shots"

source scripts/stack.sh
dir=$(mktemp -d /tmp/herald-console-XXXXXX)
stack=""
trap 'if [[ -n "$stack" ]]; then kill -TERM "$stack" 2>/dev/null; wait "$stack" 2>/dev/null || true; fi' EXIT
herald_up "$dir" accounts "$bin" console-test.sh
export ADMIN_PASSWORD="admin-$RANDOM-$RANDOM" ALICE_PASSWORD="alice-$RANDOM-$RANDOM" HERALD="$bin/herald" HERALD_DIR="$dir"
printf '%s\n' "$ADMIN_PASSWORD" | "$bin/herald" users add admin --dir "$dir" >/dev/null
printf '%s\n' "$ALICE_PASSWORD" | "$bin/herald" users add alice --dir "$dir" >/dev/null
"$bin/herald" hubs grant default admin Manage --dir "$dir" >/dev/null

status=0
"$venv/bin/python" Tests/python/console_check.py "$url" "$shots" || status=$?
if grep -h '"level":"error"\|"level":"critical"' "$dir/logs/"*.log | head -5 | grep .; then
  echo "console-test.sh: error-level log lines during the run"
  status=1
fi
if (( status != 0 )); then
  echo "console-test.sh: FAILED; the stack's logs are in $dir/logs"
  exit $status
fi
if [[ "${1:-}" == "--update-docs" ]]; then
  mkdir -p docs/console
  for name in hubs-desktop devices-desktop send-preview-desktop outcome-desktop sends-desktop inbox-desktop hubs-phone sends-phone; do
    cp "$shots/$name.png" docs/console/
  done
  echo "console-test.sh: docs/console/ updated"
fi
rm -rf "$dir"
echo "console-test.sh: passed; $(ls "$shots" | wc -l) screenshots in $shots"
