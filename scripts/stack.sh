# Sourced, not run, by the scripts that test a live stack (schemathesis.sh, console-test.sh).
#
#   herald_up DIR MODE BIN NAME   starts `BIN/herald up` in DIR with auth-mode MODE (cheap password
#                                 hashes, logs in DIR/logs, output in DIR/stack.log) and waits for the
#                                 edge's /readyz; sets `stack` (its pid) and `url` (the edge's URL).
#                                 Fails after 60 s, or when the stack exits first, printing its output.
herald_up() {
  local dir=$1 mode=$2 bin=$3 name=$4
  HERALD_PASSWORD_HASH_LOG_N=10 "$bin/herald" up --dir "$dir" --http-port 0 --auth-mode "$mode" --log-files \
    >"$dir/stack.log" 2>&1 &
  stack=$!
  local deadline=$((SECONDS + 60))
  until [[ -s "$dir/run/edge.url" ]] && curl -fsS "$(cat "$dir/run/edge.url")/readyz" >/dev/null 2>&1; do
    if (( SECONDS > deadline )) || ! kill -0 "$stack" 2>/dev/null; then
      echo "$name: the stack did not start ($mode)"; cat "$dir/stack.log"; return 1
    fi
    sleep 0.2
  done
  url=$(cat "$dir/run/edge.url")
}
