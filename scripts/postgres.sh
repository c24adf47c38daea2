#!/usr/bin/env bash
# A throw-away PostgreSQL cluster for tests and benchmarks: Unix socket only, in its own folder.
#   scripts/postgres.sh start DIR   initdb + start; prints the database URL Herald takes
#                                   (postgres://herald@/herald?host=DIR&port=PORT)
#   scripts/postgres.sh stop DIR    stops it and deletes DIR
# Durability is off (fsync, synchronous_commit): a test cluster trades crash safety for speed; the
# SQL and the locking are the same. initdb refuses root, so as root it runs as the postgres user.
set -euo pipefail
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[[ -n "$bin" ]] || { echo "postgres.sh: PostgreSQL is not installed (scripts/setup.sh --test installs it)" >&2; exit 1; }
cmd=${1:?start or stop}; dir=${2:?a folder}
as_owner=()
[[ $(id -u) -eq 0 ]] && as_owner=(runuser -u postgres --)
case "$cmd" in
  start)
    mkdir -p "$dir"
    [[ $(id -u) -eq 0 ]] && chown postgres: "$dir"
    chmod 0700 "$dir"
    port=$(( 20000 + RANDOM % 20000 ))
    "${as_owner[@]}" "$bin/initdb" -D "$dir/data" -A trust -U herald -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
    # The socket folder must be reachable by the tests' user (root, or the owner itself).
    chmod 0711 "$dir"
    "${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
      -o "-k $dir -p $port -c listen_addresses='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=400" \
      start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
    "$bin/psql" -h "$dir" -p "$port" -U herald -d postgres -qAt -c "CREATE DATABASE herald" >/dev/null
    echo "postgres://herald@/herald?host=$dir&port=$port"
    ;;
  stop)
    [[ -d "$dir/data" ]] && "${as_owner[@]}" "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$dir"
    ;;
  *) echo "postgres.sh: start or stop" >&2; exit 2 ;;
esac
