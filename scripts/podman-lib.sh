# Sourced by compose-test.sh and kube-test.sh: podman's settings for these machines and the HTTP
# checks both run against a containerised stack. The caller defines `fail` and `$work` first, sets
# `$url` (the edge) before the checks, and defines `inbox_json` (prints `herald inbox --json` run
# inside the stack's dispatch container).

# crun fails here (cgroup hybrid mode) and podman's default ulimits exceed the sandbox's hard limits.
cat >"$work/containers.conf" <<'CONF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1000:1000"]

[engine]
runtime = "runc"
CONF
export CONTAINERS_CONF="$work/containers.conf"

# Polls until a command succeeds or the deadline (seconds) passes.
wait_for() {
  local seconds="$1" what="$2"
  shift 2
  local deadline=$(( $(date +%s) + seconds ))
  until "$@" >/dev/null 2>&1; do
    (( $(date +%s) < deadline )) || fail "$what: not within ${seconds}s"
    sleep 0.2
  done
}
ready() { [[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/readyz")" == 200 ]]; }
# HTTP status of a request, body in $work/body.
http() { curl -s -o "$work/body" -D "$work/headers" -w '%{http_code}' "$@"; }
expect_status() {
  local want="$1" what="$2"
  shift 2
  local got
  got="$(http "$@")"
  [[ "$got" == "$want" ]] || fail "$what: HTTP $got, expected $want: $(head -c 300 "$work/body")"
}
# expect_status for a request that may need a password hash (a user's first login at an edge):
# herald-auth answers 429 with Retry-After when the hash is still running past its answer deadline
# ("login still being checked"), or when logins queue; a client tries again after Retry-After and
# is then answered from the verdict the hash left. Up to 10 tries (a loaded machine, the fuzzers
# beside these tests, scrypt at its production cost).
expect_login_status() {
  local want="$1" what="$2"
  shift 2
  local got tries=0 after
  while true; do
    got="$(http "$@")"
    [[ "$got" == 429 && $tries -lt 10 ]] || break
    tries=$((tries + 1))
    after="$(tr -d '\r' <"$work/headers" | awk 'tolower($1) == "retry-after:" { print $2 }')"
    sleep "${after:-1}"
  done
  [[ "$got" == "$want" ]] || fail "$what: HTTP $got, expected $want (after $tries tries on 429): $(head -c 300 "$work/body")"
}
json() { python3 -c "import json,sys; d=json.load(open('$work/body')); print($1)"; }
# The number in field $2 of the newest inbox entry for handle $1 (the inbox also in $work/inbox.json).
inbox_field() {
  inbox_json >"$work/inbox.json" || return 1
  python3 - "$1" "$2" "$work/inbox.json" <<'PY'
import json, re, sys
handle, field, path = sys.argv[1], sys.argv[2], sys.argv[3]
entries = [e for e in json.load(open(path)) if e["handle"] == handle]
match = entries and re.search(r'"%s":"?([0-9]+)' % field, entries[-1]["payload"])
if not match:
    sys.exit(1)
print(match.group(1))
PY
}

# The tutorial's secure push for users alice (alice-Pa55word) and bob (bob-Pa55word), who exist:
# alice registers handle $1 with tags $2 (a JSON array), sends, the push carries only the id, she
# fetches the payload, bob gets 404. Leaves the registration id in $reg and the payload id in $secure.
secure_push_flow() {
  local handle="$1" tags="$2"
  local alice=(-u alice:alice-Pa55word)
  expect_login_status 200 "POST api/register" "${alice[@]}" -X POST "$url/api/register?handle=$handle"
  reg="$(json 'd')"
  expect_status 200 "PUT api/register" "${alice[@]}" -X PUT "$url/api/register/$reg" -H 'Content-Type: application/json' \
    -d "{\"Platform\":\"apns\",\"Handle\":\"$handle\",\"Tags\":$tags}"
  expect_status 200 "POST api/notifications" "${alice[@]}" -X POST "$url/api/notifications"
  wait_for 15 "the secure push in herald inbox" inbox_field "$handle" secureId
  secure="$(inbox_field "$handle" secureId)"
  grep -q "Secure confirmation" "$work/inbox.json" && fail "the secure payload crossed the push service"
  expect_status 200 "GET api/notifications/$secure" "${alice[@]}" "$url/api/notifications/$secure"
  [[ "$(json 'd["Payload"]')" == "Secure confirmation." ]] || fail "secure payload: $(cat "$work/body")"
  expect_login_status 404 "bob reads alice's secure payload" -u bob:bob-Pa55word "$url/api/notifications/$secure"
}
