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
# podman's settings (CONTAINERS_CONF) and the HTTP checks, shared with compose-test.sh.
source scripts/podman-lib.sh
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
wait_for 60 "/readyz of the pod's edge" ready
step "edge ready at $url"

for service in auth registration payload dispatch edge; do
  c="$pod-$service"
  read -r readonly user < <(podman inspect -f '{{.HostConfig.ReadonlyRootfs}} {{.Config.User}}' "$c")
  [[ "$readonly" == true ]] || fail "$service: root file system is writable"
  [[ "$(podman exec "$c" id -u)" == 10001 ]] || fail "$service: not UID 10001"
done
step "five containers, UID 10001, read-only roots"

# `herald inbox --json` inside the pod's dispatch container, for inbox_field.
inbox_json() { podman exec "$pod-dispatch" herald inbox --json --limit 1000; }

printf 'alice-Pa55word\n' | podman exec -i "$pod-auth" herald users add alice | grep -q "user alice created" || fail "herald users add alice"
printf 'bob-Pa55word\n' | podman exec -i "$pod-auth" herald users add bob >/dev/null || fail "herald users add bob"
handle="$(printf 'cd%.0s' $(seq 32))"
secure_push_flow "$handle" '[]'
step "secure push: registered, the push reached the inbox with the id only, fetched by alice, 404 for bob"

podman kube down "$work/play.yaml" >/dev/null || fail "podman kube down"
podman volume rm $(podman volume ls -q | grep "^$prefix-") >/dev/null || fail "removing the claims' volumes"
left="$(podman ps -aq --filter "pod=$pod"; podman pod ls -q --filter "name=$prefix"; podman volume ls -q | grep "^$prefix-" || true)"
[[ -z "$left" ]] || fail "left after kube down: $left"
step "podman kube down: no pod, container or volume left"
echo "kube-test: passed in $(( $(date +%s) - start ))s"
