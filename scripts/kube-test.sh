#!/usr/bin/env bash
# Runs services/k8s/herald.yaml for real with `podman kube play`, checks it, and `podman kube down`.
#
#   scripts/kube-test.sh   after scripts/compose-test.sh (scripts/test.sh calls it), whose image
#                          herald:latest it reuses (built by scripts/image.sh when missing)
#
# podman 4.3 (Debian 12) runs Pods, Deployments, PersistentVolumeClaims and ConfigMaps. What it
# cannot run is turned into what it can, and nothing else is changed:
#   - a StatefulSet becomes a Deployment of the same pod template (podman has no StatefulSet); its
#     volumeClaimTemplates become PersistentVolumeClaims (podman named volumes);
#   - Services are left out: podman has no cluster networking; the edge is reached at the pod's IP;
#   - a Secret volume marked optional is left out when no such Secret exists (podman ignores
#     `optional` and refuses to start the pod).
# The probes are not run: podman runs them from systemd timers, absent here, and podman 4.3 turns
# the edge's httpGet probes on the named port `http` into `curl http://localhost:0/healthz` (it does
# not resolve named ports), a liveness check that always fails and restarts the edge. The services'
# exec probes (`--check-health`) are what compose-test.sh's health-check loop runs.
# herald-multi-host.yaml and herald-postgres.yaml are validated (kubernetes-validate in the tests)
# but not run here: their pods find each other through Services' DNS names and a TLS Secret,
# which podman kube play does not provide.
#
# Checks, against the pod: every container runs as UID 10001 with a read-only root; `herald users
# add` through `podman exec`; the tutorial's secure push (register, send, the push reaches
# `herald inbox` carrying only the id, alice fetches it, bob gets 404); `podman kube down` and the
# claims' volumes removed leave no pod, container or volume of the run.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
step() { echo "kube-test: $* ($(( $(date +%s) - start ))s)"; }
fail() { echo "kube-test: FAILED: $*" >&2; exit 1; }

scripts/setup.sh --compose
work="$(mktemp -d /tmp/herald-kube-XXXXXX)"
# As compose-test.sh: runc (crun fails here) and ulimits within the sandbox's hard limits.
cat >"$work/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1000:1000"]

[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF="$work/containers.conf"
prefix="herald-kube-$$"
cleanup() {
  status=$?
  if (( status != 0 )); then
    for c in $(podman ps -aq --filter "pod=$prefix-pod-0" 2>/dev/null); do
      echo "----- $(podman inspect -f '{{.Name}}' "$c")" >&2
      podman logs --tail 20 "$c" >&2 2>&1 || true
    done
  fi
  [[ -f "$work/play.yaml" ]] && podman kube down "$work/play.yaml" >/dev/null 2>&1 || true
  podman volume rm -f $(podman volume ls -q | grep "^$prefix-") >/dev/null 2>&1 || true
  rm -rf "$work"
  exit $status
}
trap cleanup EXIT

podman image exists herald:latest || scripts/image.sh --debug

python3 - "$prefix" services/k8s/herald.yaml "$work/play.yaml" <<'EOF'
import copy, subprocess, sys, yaml
prefix, source, target = sys.argv[1:]
out = []
for doc in yaml.safe_load_all(open(source)):
    kind = doc["kind"]
    if kind == "Service":
        continue
    if kind == "StatefulSet":
        spec = doc["spec"]
        template = copy.deepcopy(spec["template"])
        pod = template["spec"]
        for claim in spec.get("volumeClaimTemplates", []):
            name = f"{prefix}-{claim['metadata']['name']}"
            out.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": claim["spec"]})
            pod.setdefault("volumes", []).append({"name": claim["metadata"]["name"], "persistentVolumeClaim": {"claimName": name}})
        missing = {
            v["name"] for v in pod.get("volumes", [])
            if v.get("secret", {}).get("optional")
            and subprocess.run(["podman", "secret", "inspect", v["secret"]["secretName"]], capture_output=True).returncode != 0
        }
        pod["volumes"] = [v for v in pod["volumes"] if v["name"] not in missing]
        for container in pod["containers"]:
            container["volumeMounts"] = [m for m in container.get("volumeMounts", []) if m["name"] not in missing]
        metadata = dict(doc["metadata"], name=prefix)
        doc = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
               "spec": {"replicas": 1, "selector": spec["selector"], "template": template}}
    out.append(doc)
yaml.safe_dump_all(out, open(target, "w"))
EOF
step "services/k8s/herald.yaml converted for podman (StatefulSet as Deployment, claims as volumes)"

podman kube play "$work/play.yaml" >"$work/play.log" 2>&1 || { cat "$work/play.log" >&2; fail "podman kube play"; }
pod="$prefix-pod-0"
step "podman kube play: pod $pod started"

infra="$(podman pod inspect -f '{{.InfraContainerID}}' "$pod")"
ip="$(podman inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$infra")"
[[ -n "$ip" ]] || fail "the pod has no IP address"
url="http://$ip:8080"
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
wait_for 60 "/readyz of the pod's edge" ready
step "edge ready at $url"

for service in auth registration payload dispatch edge; do
  c="$pod-$service"
  read -r readonly user < <(podman inspect -f '{{.HostConfig.ReadonlyRootfs}} {{.Config.User}}' "$c")
  [[ "$readonly" == true ]] || fail "$service: root file system is writable"
  [[ "$(podman exec "$c" id -u)" == 10001 ]] || fail "$service: not UID 10001"
done
step "five containers, UID 10001, read-only roots"

http() { curl -s -o "$work/body" -w '%{http_code}' "$@"; }
expect_status() {
  local want="$1" what="$2"
  shift 2
  local got
  got="$(http "$@")"
  [[ "$got" == "$want" ]] || fail "$what: HTTP $got, expected $want: $(head -c 300 "$work/body")"
}
json() { python3 -c "import json,sys; d=json.load(open('$work/body')); print($1)"; }
inbox_secure_id() {
  podman exec "$pod-dispatch" herald inbox --json --limit 1000 >"$work/inbox.json" || return 1
  python3 - "$1" "$work/inbox.json" <<'EOF'
import json, re, sys
entries = [e for e in json.load(open(sys.argv[2])) if e["handle"] == sys.argv[1]]
match = entries and re.search(r'"secureId":"([0-9]+)"', entries[-1]["payload"])
if not match:
    sys.exit(1)
print(match.group(1))
EOF
}

printf 'alice-Pa55word\n' | podman exec -i "$pod-auth" herald users add alice | grep -q "user alice created" || fail "herald users add alice"
printf 'bob-Pa55word\n' | podman exec -i "$pod-auth" herald users add bob >/dev/null || fail "herald users add bob"
A=(-u alice:alice-Pa55word)
handle="$(printf 'cd%.0s' $(seq 32))"
expect_status 200 "POST api/register" "${A[@]}" -X POST "$url/api/register?handle=$handle"
reg="$(json 'd')"
expect_status 200 "PUT api/register" "${A[@]}" -X PUT "$url/api/register/$reg" -H 'Content-Type: application/json' \
  -d "{\"Platform\":\"apns\",\"Handle\":\"$handle\",\"Tags\":[]}"
expect_status 200 "POST api/notifications" "${A[@]}" -X POST "$url/api/notifications"
wait_for 15 "the secure push in herald inbox" inbox_secure_id "$handle"
secure="$(inbox_secure_id "$handle")"
grep -q "Secure confirmation" "$work/inbox.json" && fail "the secure payload crossed the push service"
expect_status 200 "GET api/notifications/$secure" "${A[@]}" "$url/api/notifications/$secure"
[[ "$(json 'd["Payload"]')" == "Secure confirmation." ]] || fail "secure payload: $(cat "$work/body")"
expect_status 404 "bob reads alice's secure payload" -u bob:bob-Pa55word "$url/api/notifications/$secure"
step "secure push: registered, the push reached the inbox with the id only, fetched by alice, 404 for bob"

podman kube down "$work/play.yaml" >/dev/null || fail "podman kube down"
podman volume rm $(podman volume ls -q | grep "^$prefix-") >/dev/null || fail "removing the claims' volumes"
left="$(podman ps -aq --filter "pod=$pod"; podman pod ls -q --filter "name=$prefix"; podman volume ls -q | grep "^$prefix-" || true)"
[[ -z "$left" ]] || fail "left after kube down: $left"
step "podman kube down: no pod, container or volume left"
echo "kube-test: passed in $(( $(date +%s) - start ))s"
