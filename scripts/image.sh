#!/usr/bin/env bash
# Builds Herald's image without a registry or a Swift compiler in a container: services/Dockerfile's
# `runtime-prebuilt` target over the binaries already built on this machine.
#   scripts/image.sh [--debug|--release] [--tag NAME]     (default: --debug, herald:latest)
#   scripts/image.sh --postgres      herald-postgres:latest, docker-compose.postgres.yml's database
#                                    (services/Dockerfile's `postgres` target; no Herald binaries)
# The build must exist (`swift build` / `swift build -c release`). The executables are stripped
# copies (a debug build's are ~140 MB each, mostly debug info); the Swift runtime libraries they
# link are copied beside them (ldd), so the image needs no Swift toolchain. The base image comes
# from scripts/base-image.sh (made once, cached). Needs podman (scripts/compose-test.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."

configuration=debug
tag=herald:latest
while (( $# )); do
  case "$1" in
    --debug) configuration=debug ;;
    --release) configuration=release ;;
    --tag) tag="$2"; shift ;;
    --postgres)
      start=$(date +%s)
      base="$(scripts/base-image.sh --postgres)"
      context="$(mktemp -d)"
      podman build --quiet --file services/Dockerfile --target postgres --build-arg POSTGRES_BASE="$base" \
        --tag herald-postgres:latest "$context" >/dev/null
      rmdir "$context"
      echo "image.sh: herald-postgres:latest in $(( $(date +%s) - start ))s"
      exit 0
      ;;
    *) echo "image.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

start=$(date +%s)
bin="$(swift build -c "$configuration" --show-bin-path)"
executables=(herald herald-auth herald-registration herald-payload herald-dispatch herald-edge)
for exe in "${executables[@]}"; do
  [[ -x "$bin/$exe" ]] || { echo "image.sh: $bin/$exe is missing: run swift build -c $configuration first" >&2; exit 1; }
done

staging=".build/image-staging"
rm -rf "$staging"
mkdir -p "$staging/bin" "$staging/swift"
for exe in "${executables[@]}"; do
  strip --strip-debug -o "$staging/bin/$exe" "$bin/$exe" &
done
wait
# Every shared library the executables load that is not in Debian's base: the Swift runtime.
for exe in "${executables[@]}"; do ldd "$bin/$exe"; done \
  | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u \
  | while read -r lib; do
      case "$lib" in
        /lib/*|/usr/lib/*) ;;
        *) cp -L "$lib" "$staging/swift/" ;;
      esac
    done

base="$(scripts/base-image.sh)"
podman build --quiet --file services/Dockerfile --target runtime-prebuilt \
  --build-arg PREBUILT_BASE="$base" --tag "$tag" "$staging" >/dev/null
echo "image.sh: $tag from the $configuration build ($(du -sh "$staging" | cut -f1) staged) in $(( $(date +%s) - start ))s"
