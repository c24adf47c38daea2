#!/usr/bin/env bash
# Makes the runtime base image of services/Dockerfile's `runtime-prebuilt` target without a registry:
# debootstrap a minimal Debian bookworm with only what Herald's binaries link (ldd: libsqlite3,
# libprotobuf-c, libstdc++, zlib) plus ca-certificates (TLS to the push services) and curl (the
# edge's health check), then `podman import` it.
#   scripts/base-image.sh            prints the image name; makes it only when podman lacks it
#   scripts/base-image.sh --force    makes it again
#   scripts/base-image.sh --postgres the same with PostgreSQL 15 added (docker-compose.postgres.yml's
#                                    database: services/Dockerfile's `postgres` target)
# The root filesystem is cached as a tarball in ${HERALD_CACHE_DIR:-~/.cache/herald}, keyed by the
# package list, so a machine whose podman storage was wiped imports it again in seconds.
# Needs root (debootstrap), podman and debootstrap (scripts/compose-test.sh installs them).
set -euo pipefail

force=false
postgres=false
for arg in "$@"; do
  case "$arg" in
    --force) force=true ;;
    --postgres) postgres=true ;;
    *) echo "base-image: unknown option $arg" >&2; exit 2 ;;
  esac
done
image="${HERALD_BASE_IMAGE:-localhost/herald-base:bookworm}"
packages="libsqlite3-0,libprotobuf-c1,ca-certificates,curl"
if $postgres; then
  image=localhost/herald-postgres-base:bookworm
  packages="$packages,postgresql-15"
fi
suite=bookworm
# The machine's own Debian mirror (deb822 or one-line sources), else deb.debian.org.
mirror="$(grep -hoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
  | head -1 | awk '{print $2}' || true)"
mirror="${mirror:-http://deb.debian.org/debian}"

if ! $force && podman image exists "$image"; then
  echo "$image"
  exit 0
fi

cache="${HERALD_CACHE_DIR:-$HOME/.cache/herald}"
key="$(printf '%s %s %s' "$suite" "$packages" "$(dpkg --print-architecture)" | sha256sum | cut -c1-16)"
tarball="$cache/base-$suite-$key.tar"
mkdir -p "$cache"
if $force || [[ ! -s "$tarball" ]]; then
  start=$(date +%s)
  root="$(mktemp -d "$cache/rootfs.XXXXXX")"
  trap 'rm -rf "$root"' EXIT
  echo "base-image: debootstrap $suite ($packages) from $mirror" >&2
  debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" >"$cache/debootstrap.log" 2>&1 || {
    tail -20 "$cache/debootstrap.log" >&2
    exit 1
  }
  # What a container never needs: package caches, docs, locales (the binaries use none).
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* \
    "$root"/usr/share/man/* "$root"/usr/share/locale/*
  tar -C "$root" -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  echo "base-image: root filesystem made in $(( $(date +%s) - start ))s ($(du -h "$tarball" | cut -f1))" >&2
fi
podman import --quiet "$tarball" "$image" >/dev/null
echo "$image"
