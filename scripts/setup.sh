#!/usr/bin/env bash
# Installs what Herald needs on a Debian machine with Swift, skipping what is already there.
#   scripts/setup.sh          build and run: libprotobuf-c-dev, libsqlite3-dev
#   scripts/setup.sh --test   also protoc-c (generated-code check), docker-compose (compose check),
#                             python3 + grpcio/grpcio-tools (the independent gRPC client in the tests),
#                             wrk (the benchmark's quick run), kubernetes-validate (the k8s manifests),
#                             PyJWT, py-vapid, http-ece (independent checks of the push senders' output),
#                             openssl (the tests' CA), postgresql (the throw-away cluster the tests
#                             run every store against: scripts/postgres.sh), chromium and a font
#                             (the console's browser test, scripts/console-test.sh), prometheus (its
#                             promtool checks and unit-tests services/prometheus' rules),
#                             opentelemetry-proto (the OTLP receiver TracingTests collects spans with)
#   scripts/setup.sh --bench  also wrk (the edge scenario's load generator), h2load from nghttp2-client
#                             (the APNs double's capacity), nghttpd from nghttp2-server (an HTTP/2
#                             server no one here wrote, for the APNs fan-out), openssl (the double's certificate) and
#                             valgrind (instruction counts), postgresql (the replicas scenario's
#                             throw-away cluster), python3-venv (`herald-bench peers`' Python side);
#                             --test installs them too
#   scripts/setup.sh --compose  only what scripts/compose-test.sh and kube-test.sh need: podman, runc
#                             (crun fails here), catatonit (the pause process of `podman kube play`'s
#                             pods), docker-compose (v1) and podman-compose, debootstrap (the base
#                             image), python3-venv (the pytest example), python3-yaml, curl
set -euo pipefail

packages=(libprotobuf-c-dev libsqlite3-dev pkg-config)
if [[ "${1:-}" == "--compose" ]]; then
  packages=(podman runc catatonit docker-compose podman-compose debootstrap python3-venv curl)
  python3 -c 'import yaml' 2>/dev/null || packages+=(python3-yaml)
fi
if [[ "${1:-}" == "--test" ]]; then
  packages+=(protobuf-c-compiler docker-compose openssl curl python3-venv postgresql chromium fonts-dejavu-core prometheus)
  # python3 may come from elsewhere (pyenv): ask apt only for what PATH lacks.
  command -v python3 >/dev/null 2>&1 || packages+=(python3)
  python3 -m pip --version >/dev/null 2>&1 || packages+=(python3-pip)
fi
if [[ "${1:-}" == "--test" || "${1:-}" == "--bench" ]]; then
  packages+=(wrk nghttp2-client nghttp2-server openssl valgrind postgresql python3-venv)
  command -v python3 >/dev/null 2>&1 || packages+=(python3)
fi

missing=()
for p in "${packages[@]}"; do
  # "install ok installed" only: a removed package keeps a dpkg entry (config-files) that dpkg -s accepts.
  [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" == "install ok installed" ]] || missing+=("$p")
done

if (( ${#missing[@]} )); then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [[ "${1:-}" == "--test" ]] && ! { python3 -c 'import grpc, grpc_tools, kubernetes_validate, jwt, py_vapid, http_ece, yaml, azure_notification_hub, notificationhubs_rest_python, opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc' 2>/dev/null && command -v kubernetes-validate >/dev/null; }; then
  echo "setup: installing grpcio, grpcio-tools, kubernetes-validate, PyJWT, py-vapid, http-ece, PyYAML, azure-notification-hub-unofficial, notificationhubs-rest-python and opentelemetry-proto from PyPI"
  pip_args=(install --quiet --disable-pip-version-check "grpcio==1.85.1" "grpcio-tools==1.85.1" "kubernetes-validate==1.37.0"
    "PyJWT[crypto]==2.15.1" "py-vapid==1.9.6" "http-ece==1.2.1" "PyYAML==6.0.3"
    "azure-notification-hub-unofficial==0.1.0" "httpx==0.28.1" "notificationhubs-rest-python==1.0.3"
    "opentelemetry-proto==1.45.2")
  # Debian's own python refuses global installs (PEP 668) unless told otherwise.
  python3 -m pip "${pip_args[@]}" 2>/dev/null || python3 -m pip "${pip_args[@]}" --break-system-packages
fi
