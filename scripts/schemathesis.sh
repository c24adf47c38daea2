#!/usr/bin/env bash
# Drives a live stack with schemathesis (PyPI), generating requests from the edge's own
# /openapi.json: every operation, in both auth modes. The NH operations are signed with a real
# hub's Listen and Full keys (Tests/python/schemathesis_sas_hooks.py), the console's with a signed-in session
# and its CSRF token, the others sent with Basic. Fails on any 5xx, any status, header,
# content type or body the document does not declare, and any service restart in the stack's log.
#
#   scripts/schemathesis.sh                 CI's bounded run (SCHEMATHESIS_MAX_EXAMPLES=30 per operation:
#                                           the examples and coverage phases whole, a short fuzzing phase;
#                                           at 100 the two modes took 248 s of CI's run)
#   SCHEMATHESIS_MAX_EXAMPLES=500 scripts/schemathesis.sh    a longer run (scripts/fuzz.sh does this)
#   scripts/schemathesis.sh --install       only make its virtualenv (scripts/test.sh does it beside
#                                           the build: downloads, not the cores' work)
#
# Needs a debug build (scripts/test.sh makes it); HERALD_BIN overrides where the binaries are.
# schemathesis lives in its own virtualenv under .build/ so its pins never meet the system's.
# One worker: with two, CPython 3.11's ast.parse (hypothesis describes lambdas with it) can fail in
# threads ("AST constructor recursion depth mismatch"), an error of the tool, not of Herald. The two
# auth modes run at once instead, as two processes against two stacks.
set -euo pipefail
cd "$(dirname "$0")/.."
version="4.32.5"
venv=.build/schemathesis-venv
if ! "$venv/bin/schemathesis" --version 2>/dev/null | grep -q "$version"; then
  echo "schemathesis.sh: installing schemathesis $version into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$version"
fi
[[ "${1:-}" == "--install" ]] && exit 0
bin="${HERALD_BIN:-$(swift build --show-bin-path)}"
examples="${SCHEMATHESIS_MAX_EXAMPLES:-30}"
checks=not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance
status=0

source scripts/stack.sh
# One auth mode against its own stack; returns non-zero when anything failed. The two modes run at
# once (each is one Python process sending one request at a time to a stack of its own): a mode
# alone takes about 70 s, mostly schemathesis' own CPU.
run_mode() {
  local mode=$1 status=0
  dir=$(mktemp -d /tmp/herald-st-XXXXXX)
  # A cheap hash (herald_up's): schemathesis logs in on every request (the credential cache still applies).
  herald_up "$dir" "$mode" "$bin" schemathesis.sh
  user=alice
  password=alice
  if [[ "$mode" == accounts ]]; then
    password="schemathesis-$RANDOM-$RANDOM"
    printf '%s\n' "$password" | "$bin/herald" users add "$user" --dir "$dir" >/dev/null
  fi
  # The console's pages need an operator: Manage on the hub default (Tests/python/schemathesis_sas_hooks.py signs in).
  "$bin/herald" hubs grant default "$user" Manage --dir "$dir" >/dev/null
  # Something to find: a registration and a secure payload of the user's own.
  curl -fsS -X POST -u "$user:$password" "$url/v1/notifications?kind=secure&to_user=$user" --data-binary 'seed' >/dev/null
  # A hub whose two default keys sign the NH operations' tokens (Tests/python/schemathesis_sas_hooks.py),
  # so that those requests reach the handlers, not only the 401.
  "$bin/herald" hubs add sthub --dir "$dir" >/dev/null
  keys=$("$bin/herald" hubs keys sthub --endpoint "sb://${url#http://}/" --dir "$dir")
  key_of() { grep -o "SharedAccessKeyName=$1;SharedAccessKey=[^;]*" <<<"$keys" | head -1 | sed -E 's/SharedAccessKeyName=([^;]*);SharedAccessKey=(.*)/\1;\2/'; }
  export HERALD_ST_URL="$url" HERALD_ST_HUB=sthub HERALD_ST_BASIC="$user:$password"
  HERALD_ST_LISTEN=$(key_of DefaultListenSharedAccessSignature)
  HERALD_ST_FULL=$(key_of DefaultFullSharedAccessSignature)
  export HERALD_ST_LISTEN HERALD_ST_FULL
  [[ -n "$HERALD_ST_LISTEN" && -n "$HERALD_ST_FULL" ]] || { echo "schemathesis.sh: no keys for sthub: $keys"; exit 1; }
  echo "schemathesis.sh: $mode mode against $url, $examples examples per operation"
  start=$SECONDS
  if ! SCHEMATHESIS_HOOKS=schemathesis_sas_hooks PYTHONPATH="$PWD/Tests/python" \
      "$venv/bin/schemathesis" run "$url/openapi.json" --url "$url" \
      --checks "$checks" --phases examples,coverage,fuzzing --max-examples "$examples" \
      --workers 1 --request-timeout 20 --suppress-health-check all --seed 1 --no-color \
      --report junit --report-dir "$dir/report" >"$dir/schemathesis.log" 2>&1; then
    echo "schemathesis.sh: FAILED in $mode mode; its output:"
    cat "$dir/schemathesis.log"
    status=1
  else
    tail -n 12 "$dir/schemathesis.log"
  fi
  echo "schemathesis.sh: $mode mode took $((SECONDS - start)) s"
  # Proof that the signed tokens got the NH operations past authentication: their answers by status.
  nh=$(grep -ho '\[Edge\] [A-Z]* /sthub/[^ ]* [0-9][0-9][0-9]' "$dir/logs/edge.log" | awk '{print $NF}' | sort | uniq -c | awk '{printf "%s x%s, ", $2, $1}')
  echo "schemathesis.sh: NH operations on sthub answered ${nh:-nothing}"
  if ! grep -qE '\[Edge\] [A-Z]* /sthub/[^ ]* 20[0-9]' "$dir/logs/edge.log"; then
    echo "schemathesis.sh: no NH operation got past authentication ($mode)"
    status=1
  fi
  # That Basic got the hub management operations past the Manage check, on their own hub.
  hubs=$(grep -ho '\[Edge\] [A-Z]* /v1/hubs[^ ]* [0-9][0-9][0-9]' "$dir/logs/edge.log" | awk '{print $NF}' | sort | uniq -c | awk '{printf "%s x%s, ", $2, $1}')
  echo "schemathesis.sh: hub management operations answered ${hubs:-nothing}"
  if ! grep -qE '\[Edge\] (PUT|PATCH) /v1/hubs/stmanaged/[^ ]* 20[0-9]' "$dir/logs/edge.log"; then
    echo "schemathesis.sh: no hub management change got past the Manage check ($mode)"
    status=1
  fi
  # And that the session got the console's operations past sign-in.
  console=$(grep -ho '\[Edge\] [A-Z]* /console/[^ ]* [0-9][0-9][0-9]' "$dir/logs/edge.log" | awk '{print $NF}' | sort | uniq -c | awk '{printf "%s x%s, ", $2, $1}')
  echo "schemathesis.sh: console operations answered ${console:-nothing}"
  if ! grep -qE '\[Edge\] GET /console/hubs/sthub[^ ]* 200' "$dir/logs/edge.log"; then
    echo "schemathesis.sh: no console page of sthub got past sign-in ($mode)"
    status=1
  fi
  kill -TERM "$stack"
  wait "$stack" || true
  if grep -E "exited with status|restarting in" "$dir/stack.log" "$dir/logs/"*.log; then
    echo "schemathesis.sh: a service restarted during the run ($mode)"
    status=1
  fi
  if grep -h '"level":"error"\|"level":"critical"' "$dir/logs/"*.log | head -5 | grep .; then
    echo "schemathesis.sh: error-level log lines during the run ($mode)"
    status=1
  fi
  (( status == 0 )) && rm -rf "$dir"
  return $status
}
logs=$(mktemp -d /tmp/herald-st-logs-XXXXXX)
pids=()
for mode in tutorial accounts; do
  run_mode "$mode" >"$logs/$mode.log" 2>&1 &
  pids+=($!)
done
for index in 0 1; do
  wait "${pids[$index]}" || status=1
done
cat "$logs/tutorial.log" "$logs/accounts.log"
rm -rf "$logs"
exit $status
