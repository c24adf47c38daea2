#!/usr/bin/env bash
# Runs docker-compose.yml for real, with containers, and checks what a platform team relies on.
#
#   scripts/compose-test.sh            after a debug build (scripts/test.sh calls it)
#   scripts/compose-test.sh --release  packages the release build instead
#   scripts/compose-test.sh --install  only makes Examples/integration-test's virtualenv
#
# No Docker engine or registry is needed: podman runs the containers (runc; a containers.conf of
# our own, via CONTAINERS_CONF), Debian's docker-compose (v1) drives podman's API socket, and the
# image is services/Dockerfile's `runtime-prebuilt` target over the host's binaries (scripts/image.sh;
# no Swift is compiled in a container). Podman runs health checks from systemd timers, which these
# machines lack, so a loop here runs `podman healthcheck run` for every container of the stack each
# second: `depends_on: service_healthy` then works as under Docker.
#
# Against the containers of docker-compose.yml (its own file, unchanged):
#   1. the edge publishes on a free port; every container runs as UID 10001 with a read-only root,
#      unprivileged; the sockets are 0660 and owned by that user;
#   2. `herald users add` and `herald inbox` through `docker-compose exec`, without flags;
#   3. the tutorial's secure-push flow and the rich-push flow over HTTP;
#   4. `docker-compose restart payload`: traffic recovers by itself;
#   5. a wrong setting (an APNs key file that is not mounted): dispatch exits, and
#      `docker-compose logs dispatch` names the setting;
#   6. `down` + `up`: every account, registration, payload and recorded push is still there;
#   7. `down -v`: no container, network or volume of the project is left.
# Then docker-compose.postgres.yml over it (8): PostgreSQL for every service, a second registration,
# dispatch and edge; a device registered through one edge gets its push sent through the other, and
# registering goes on when a registration replica is killed; `down -v` leaves nothing.
# Then Examples/integration-test (pytest) starts Herald itself with docker-compose.test.yml, once
# through docker-compose v1 and once through podman-compose (another Compose-spec implementation).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
# Examples/integration-test's pytest, in a virtualenv of its own.
venv=.build/integration-test-venv
install_venv() {
  if ! "$venv/bin/python" -c 'import pytest, requests' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r Examples/integration-test/requirements.txt
  fi
}
configuration=--debug
case "${1:-}" in
  --release) configuration=--release ;;
  # Only the virtualenv (scripts/test.sh makes it beside the build: downloads, not the cores' work).
  --install) install_venv; exit 0 ;;
esac

step() { echo "compose-test: $* ($(( $(date +%s) - start ))s)"; }
fail() { echo "compose-test: FAILED: $*" >&2; exit 1; }

scripts/setup.sh --compose

work="$(mktemp -d /tmp/herald-compose-XXXXXX)"
# podman's settings (CONTAINERS_CONF) and the HTTP checks, shared with kube-test.sh.
source scripts/podman-lib.sh

project="herald-ct-$$"
compose=(docker-compose --project-name "$project" -f docker-compose.yml)
pids=()
cleanup() {
  status=$?
  if (( status != 0 )) && [[ -S "$work/podman.sock" ]]; then
    "${compose[@]}" logs --no-color --tail 40 >&2 2>&1 || true
  fi
  [[ -S "$work/podman.sock" ]] && "${compose[@]}" down -v --timeout 5 >/dev/null 2>&1 || true
  # Whatever a failed run left (compose renames a container it failed to recreate).
  podman rm -f $(podman ps -aq --filter "label=com.docker.compose.project=$project") \
    $(podman ps -aq --filter "label=com.docker.compose.project=herald-it-$$") >/dev/null 2>&1 || true
  podman volume rm $(podman volume ls -q | grep "^${project}_") >/dev/null 2>&1 || true
  podman network rm "${project}_default" "herald-it-$$_default" "herald-it-pc-$$_default" >/dev/null 2>&1 || true
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
  exit $status
}
trap cleanup EXIT

# Step 8's PostgreSQL image is made meanwhile: its debootstrap waits mostly on downloads and dpkg,
# and steps 1-7 mostly on containers (this took 51 s of CI's run when it came first in step 8).
scripts/image.sh --postgres >"$work/image-postgres.log" 2>&1 &
postgres_image=$!
pids+=("$postgres_image")
# HERALD_IMAGE_MADE=1: scripts/test.sh made herald:latest from this build a moment ago.
if [[ "${HERALD_IMAGE_MADE:-}" == 1 && "$configuration" == --debug ]] && podman image exists herald:latest; then
  step "image herald:latest as scripts/test.sh made it"
else
  scripts/image.sh "$configuration"
  step "image herald:latest ready"
fi

# Podman's Docker-compatible API, for docker-compose.
podman system service --time=0 "unix://$work/podman.sock" >"$work/podman-service.log" 2>&1 &
pids+=($!)
export DOCKER_HOST="unix://$work/podman.sock"
for _ in $(seq 100); do curl -fsS --unix-socket "$work/podman.sock" http://podman/_ping >/dev/null 2>&1 && break; sleep 0.1; done
curl -fsS --unix-socket "$work/podman.sock" http://podman/_ping >/dev/null || fail "podman's API socket did not come up"

# The health-check driver: what Docker's engine (or systemd, for podman) would do.
(
  while true; do
    for c in $(podman ps -q --filter "label=com.docker.compose.project=$project" --filter status=running 2>/dev/null); do
      podman healthcheck run "$c" >/dev/null 2>&1 || true
    done
    sleep 1
  done
) &
pids+=($!)

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
export HERALD_EDGE_PORT="127.0.0.1:$port"
url="http://127.0.0.1:$port"

# A running container of the project's SERVICE, and commands in it, straight through podman:
# docker-compose v1 starts a Python process per command (0.5 s each alone, 2 s beside CI's
# instruction counts), and what these check is the container, not compose. Step 2 runs the CLI
# through `docker-compose exec`, as a platform team would.
cid() {
  podman ps -q --filter "label=com.docker.compose.project=$project" \
    --filter "label=com.docker.compose.service=$1" --filter status=running | head -n 1
}
in_container() { local service=$1; shift; podman exec "$(cid "$service")" "$@"; }
# `herald inbox --json` inside the dispatch container, for inbox_field (polled).
inbox_json() { in_container dispatch herald inbox --json --limit 1000; }

up_start=$(date +%s)
"${compose[@]}" up -d >"$work/up.log" 2>&1 || { cat "$work/up.log" >&2; fail "docker-compose up"; }
wait_for 60 "/readyz after up" ready
step "up: five containers healthy in start order, edge ready in $(( $(date +%s) - up_start ))s"

# 1. The containers as the file says.
for service in auth registration payload dispatch edge; do
  id="$(cid "$service")"
  [[ -n "$id" ]] || fail "no container for $service"
  read -r privileged readonly user < <(podman inspect -f '{{.HostConfig.Privileged}} {{.HostConfig.ReadonlyRootfs}} {{.Config.User}}' "$id")
  [[ "$privileged $readonly" == "false true" ]] || fail "$service: privileged=$privileged read-only=$readonly"
  # One exec per container: its UID, whether the root is writable, whether /tmp and the data volume are.
  seen="$(in_container "$service" sh -c \
    'id -u; touch /usr/local/bin/x 2>/dev/null && echo root-writable; test -w /tmp && echo tmp; test -w /var/lib/herald && echo data; true' \
    | tr '\n' ' ')"
  want="10001 tmp data "
  [[ "$service" == edge ]] && want="10001 tmp "   # the edge owns no data: its /var/lib/herald is the image's, read-only
  [[ "$seen" == "$want" ]] || fail "$service: saw '$seen', expected '$want' (UID, read-only root, writable /tmp and data)"
done
modes="$(in_container auth sh -c 'stat -c "%a %u %n" /run/herald/*.sock' | sort)"
[[ "$(grep -c '^660 10001 ' <<<"$modes")" == 8 ]] || fail "sockets are not 0660 and owned by 10001: $modes"
step "1. non-root (10001), read-only roots, unprivileged, sockets 0660"

# 2. The CLI inside a container, without --runtime-dir: HERALD_RUNTIME_DIR comes from the image.
printf 'alice-Pa55word\n' | "${compose[@]}" exec -T auth herald users add alice | grep -q "user alice created" || fail "herald users add alice"
printf 'bob-Pa55word\n' | "${compose[@]}" exec -T auth herald users add bob >/dev/null || fail "herald users add bob"
"${compose[@]}" exec -T edge herald users list | grep -q '^alice' || fail "herald users list"
A=(-u alice:alice-Pa55word)
step "2. herald users add / list through docker-compose exec"

# 3a. The tutorial's secure push: register, send, the device fetches by id; only alice may read it.
handle="$(printf 'ab%.0s' $(seq 32))"
secure_push_flow "$handle" '["news"]'
step "3a. secure push: registered, pushed (id only), fetched by alice, 404 for bob"

# 3b. Rich push: upload an image for alice; the push carries its id; the device fetches the bytes.
expect_status 202 "POST /v1/notifications?kind=rich" "${A[@]}" -X POST \
  "$url/v1/notifications?kind=rich&to_user=alice&message=Look" -H 'Content-Type: image/png' --data-binary @services/edge/herald.png
wait_for 15 "the rich push in herald inbox" inbox_field "$handle" richId
rich="$(inbox_field "$handle" richId)"
expect_status 200 "GET api/notifications/$rich" "${A[@]}" "$url/api/notifications/$rich"
cmp -s "$work/body" services/edge/herald.png || fail "the rich content differs from what was uploaded"
step "3b. rich push: uploaded, pushed (id only), fetched byte for byte"

# 4. Restart one service under traffic: the edge reconnects by itself.
payload_cid="$(cid payload)"
started="$(podman inspect -f '{{.State.StartedAt}}' "$payload_cid")"
"${compose[@]}" restart payload >/dev/null 2>&1
[[ "$(podman inspect -f '{{.State.StartedAt}}' "$payload_cid")" != "$started" ]] || fail "payload was not restarted"
fetch_secure() { [[ "$(http "${A[@]}" "$url/api/notifications/$secure")" == 200 ]]; }
wait_for 30 "GET api/notifications after restarting payload" fetch_secure
wait_for 30 "/readyz after restarting payload" ready
step "4. docker-compose restart payload: traffic recovered by itself"

# 5. A wrong setting: dispatch told to use an APNs key file that is not there.
cat >"$work/broken.yml" <<'EOF'
version: "3.8"
services:
  dispatch:
    environment:
      HERALD_APNS_KEY_FILE: /run/secrets/apns.p8
      HERALD_APNS_KEY_ID: ABC123DEFG
      HERALD_APNS_TEAM_ID: TEAM123456
      HERALD_APNS_TOPIC: com.example.app
EOF
"${compose[@]}" -f "$work/broken.yml" up -d --no-deps dispatch >"$work/up.log" 2>&1 || { cat "$work/up.log" >&2; fail "up dispatch with a wrong setting"; }
names_setting() { "${compose[@]}" logs --no-color dispatch 2>&1 | grep -q "apns-key-file: cannot read /run/secrets/apns.p8"; }
wait_for 30 "docker-compose logs dispatch naming apns-key-file" names_setting
dispatch_cid="$("${compose[@]}" ps -q dispatch)"
# Between its restarts (restart: unless-stopped), the container's last exit status: 2, a configuration error.
exited_2() { [[ "$(podman inspect -f '{{.State.ExitCode}}' "$dispatch_cid")" == 2 ]]; }
wait_for 30 "dispatch exiting with status 2" exited_2
"${compose[@]}" logs --no-color dispatch 2>&1 | grep "apns-key-file" | tail -1
# Removed by podman first: compose's stop-then-remove races podman restarting the crash-looping
# container (restart: unless-stopped), and podman refuses to remove a running one.
podman rm -f $(podman ps -aq --filter "label=com.docker.compose.project=$project" --filter "label=com.docker.compose.service=dispatch") >/dev/null 2>&1
"${compose[@]}" up -d --no-deps dispatch >"$work/up.log" 2>&1 || { cat "$work/up.log" >&2; fail "up dispatch with its settings fixed"; }
wait_for 60 "/readyz after fixing dispatch" ready
step "5. a missing APNs key file: dispatch exits 2 and its log names apns-key-file; fixed, it is back"

# 6. down + up keeps every volume's data.
"${compose[@]}" down >/dev/null 2>&1
[[ -z "$(podman ps -aq --filter "label=com.docker.compose.project=$project")" ]] || fail "containers left after down"
"${compose[@]}" up -d >"$work/up.log" 2>&1 || { cat "$work/up.log" >&2; fail "docker-compose up again"; }
wait_for 60 "/readyz after down + up" ready
expect_login_status 200 "alice's registration after down + up" "${A[@]}" -X PUT "$url/api/register/$reg" -H 'Content-Type: application/json' \
  -d "{\"Platform\":\"apns\",\"Handle\":\"$handle\",\"Tags\":[\"news\"]}"
expect_status 200 "the secure payload after down + up" "${A[@]}" "$url/api/notifications/$secure"
expect_status 200 "the rich payload after down + up" "${A[@]}" "$url/api/notifications/$rich"
cmp -s "$work/body" services/edge/herald.png || fail "the rich content changed across down + up"
"${compose[@]}" exec -T dispatch herald inbox --json | python3 -c 'import json,sys; sys.exit(0 if len(json.load(sys.stdin)) >= 2 else 1)' \
  || fail "the inbox lost its entries across down + up"
expect_status 200 "POST api/notifications after down + up" "${A[@]}" -X POST "$url/api/notifications"
third() { [[ "$(inbox_field "$handle" secureId)" != "$secure" ]]; }
wait_for 15 "a push to the kept registration after down + up" third
step "6. down + up: accounts, registration, both payloads and the inbox kept; the device still gets pushes"

# 7. down -v leaves nothing behind.
"${compose[@]}" down -v >/dev/null 2>&1
[[ -z "$(podman ps -aq --filter "label=com.docker.compose.project=$project")" ]] || fail "containers left after down -v"
[[ -z "$(podman volume ls -q | grep "^${project}_" || true)" ]] || fail "volumes left after down -v: $(podman volume ls -q | grep "^${project}_")"
[[ -z "$(podman network ls --format '{{.Name}}' | grep "^${project}_" || true)" ]] || fail "networks left after down -v"
step "7. down -v: no container, volume or network left"

# 8. The PostgreSQL overlay: one database, replicas of registration, dispatch and the edge.
wait "$postgres_image" || { cat "$work/image-postgres.log" >&2; fail "scripts/image.sh --postgres"; }
cat "$work/image-postgres.log"
compose_pg=(docker-compose --project-name "$project" -f docker-compose.yml -f docker-compose.postgres.yml)
port2="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
export HERALD_EDGE2_PORT="127.0.0.1:$port2"
url2="http://127.0.0.1:$port2"
ready2() { [[ "$(curl -s -o /dev/null -w '%{http_code}' "$url2/readyz")" == 200 ]]; }
up_start=$(date +%s)
"${compose_pg[@]}" up -d >"$work/up.log" 2>&1 || { cat "$work/up.log" >&2; fail "docker-compose up with docker-compose.postgres.yml"; }
wait_for 120 "/readyz of the first edge on PostgreSQL" ready
wait_for 60 "/readyz of the second edge on PostgreSQL" ready2
running="$("${compose_pg[@]}" ps --services --filter status=running | sort | tr '\n' ' ')"
[[ "$running" == "auth dispatch dispatch-2 edge edge-2 payload postgres registration registration-2 " ]] || fail "running: $running"
printf 'carol-Pa55word\n' | "${compose_pg[@]}" exec -T auth herald users add carol | grep -q "user carol created" || fail "herald users add carol"
C=(-u carol:carol-Pa55word)
handle="$(printf 'cd%.0s' $(seq 32))"
expect_login_status 200 "POST api/register at the second edge" "${C[@]}" -X POST "$url2/api/register?handle=$handle"
reg="$(json 'd')"
expect_status 200 "PUT api/register at the second edge" "${C[@]}" -X PUT "$url2/api/register/$reg" -H 'Content-Type: application/json' \
  -d "{\"Platform\":\"apns\",\"Handle\":\"$handle\",\"Tags\":[]}"
expect_status 200 "POST api/notifications at the first edge" "${C[@]}" -X POST "$url/api/notifications"
wait_for 20 "the secure push in herald inbox (PostgreSQL)" inbox_field "$handle" secureId
secure="$(inbox_field "$handle" secureId)"
expect_status 200 "GET api/notifications/$secure at the second edge" "${C[@]}" "$url2/api/notifications/$secure"
[[ "$(json 'd["Payload"]')" == "Secure confirmation." ]] || fail "secure payload on PostgreSQL: $(cat "$work/body")"
step "8a. docker-compose.postgres.yml up in $(( $(date +%s) - up_start ))s: registered at one edge, pushed through the other, fetched"
podman kill "$(cid registration)" >/dev/null
for n in 1 2 3 4 5 6; do
  edge_url="$url"; (( n % 2 )) && edge_url="$url2"
  expect_login_status 200 "POST api/register ($n) with a registration replica killed" "${C[@]}" -X POST "$edge_url/api/register?handle=$handle"
  expect_status 200 "PUT api/register ($n) with a registration replica killed" "${C[@]}" -X PUT "$edge_url/api/register/$(json 'd')" \
    -H 'Content-Type: application/json' -d "{\"Platform\":\"apns\",\"Handle\":\"$handle\",\"Tags\":[\"n$n\"]}"
done
"${compose_pg[@]}" down -v >/dev/null 2>&1
[[ -z "$(podman ps -aq --filter "label=com.docker.compose.project=$project")" ]] || fail "containers left after down -v (PostgreSQL)"
[[ -z "$(podman volume ls -q | grep "^${project}_" || true)" ]] || fail "volumes left after down -v (PostgreSQL)"
unset HERALD_EDGE2_PORT
step "8b. a registration replica killed: both edges kept registering; down -v left nothing"

# Another team's tests: Examples/integration-test starts Herald with the test overlay itself.
install_venv
unset HERALD_EDGE_PORT
# Named, so the check below looks at this project only: another run's containers on the same
# podman (a run killed before its cleanup) are not this one's to judge.
project_it="herald-it-$$"
HERALD_COMPOSE=docker-compose HERALD_COMPOSE_PROJECT="$project_it" \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider Examples/integration-test
# docker-compose v1's `down` returns when podman has accepted each removal; poll briefly, and name
# what is left if anything is.
no_it_containers() { [[ -z "$(podman ps -aq --filter "label=com.docker.compose.project=$project_it")" ]]; }
if ! no_it_containers; then
  it_deadline=$(( $(date +%s) + 15 ))
  until no_it_containers || (( $(date +%s) >= it_deadline )); do sleep 0.5; done
  no_it_containers || {
    podman ps -a --filter "label=com.docker.compose.project=$project_it" \
      --format '{{.Names}} {{.Status}}' >&2
    fail "the pytest project left containers behind"
  }
fi
step "Examples/integration-test passed: docker-compose v1 with docker-compose.test.yml"
# The same project with a second implementation of the Compose spec, podman-compose (no API
# socket): the files use nothing only docker-compose v1 understands (services/README.md).
project_pc="herald-it-pc-$$"
HERALD_COMPOSE=podman-compose HERALD_COMPOSE_PROJECT="$project_pc" env -u DOCKER_HOST \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider Examples/integration-test
# podman-compose 1.0.3's down -v keeps the project's network; Docker's and docker-compose's do not.
podman network rm "${project_pc}_default" >/dev/null 2>&1 || true
[[ -z "$(podman ps -aq --filter "name=${project_pc}_")" ]] || fail "podman-compose left containers behind"
step "Examples/integration-test passed: podman-compose (Compose spec) with docker-compose.test.yml"
echo "compose-test: all checks passed in $(( $(date +%s) - start ))s"
