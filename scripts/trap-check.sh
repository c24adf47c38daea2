#!/usr/bin/env bash
# Lists the trapping calls left in what ships, and fails on any without a reason beside it.
#
# A trap reachable from a request kills the process and every request in flight, so
# each of these needs `// trap-ok: <why it cannot fire on outside input>` on its line or on one of
# the two lines above it:
#   everywhere in Sources/ (not Generated/, not the herald-bench and herald-fuzz tools):
#     fatalError, precondition, preconditionFailure, assert, assertionFailure, unsafelyUnwrapped,
#     Foundation setters that trap on bad characters (URLComponents' percentEncoded* setters), and
#     JSONSerialization's writer (`withJSONObject`, which traps on a top-level fragment: use
#     HeraldModel's jsonData, the one justified use)
#   where outside input is parsed (Edge, NotificationHubs, HeraldModel): conversions to a narrower
#     integer (Int32(x), UInt16(x), …) other than clamping:, exactly:, truncatingIfNeeded:,
#     bitPattern: and ascii: (a String parse is failable and fine: say so)
# Force unwraps, try! and implicitly unwrapped optionals are swift-format's (scripts/format.sh).
# Usage: scripts/trap-check.sh         list every use, justified or not; exit 1 on an unjustified one
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t everywhere < <(git ls-files --cached --others --exclude-standard 'Sources/*.swift' \
  | grep -v '/Generated/' | grep -v '^Sources/herald-bench/' | grep -v '^Sources/herald-fuzz/')
mapfile -t parsers < <(printf '%s\n' "${everywhere[@]}" | grep -E '^Sources/(Edge|NotificationHubs|HeraldModel)/')
traps='(^|[^A-Za-z0-9_.])(fatalError|precondition|preconditionFailure|assert|assertionFailure)\(|\.unsafelyUnwrapped|\.percentEncoded(Query|Path|Host|Fragment|User|Password|QueryItems)[[:space:]]*=|withJSONObject:'
narrowing='(^|[^A-Za-z0-9_])U?Int(8|16|32)\((?!(clamping|exactly|truncatingIfNeeded|bitPattern|ascii):)'
scan() {  # scan PCRE FILES...: one line per match, ok (justified) or FAIL
  local pattern=$1; shift
  [[ $# -gt 0 ]] || return 0
  grep -nP "$pattern" "$@" 2>/dev/null | while IFS=: read -r file line text; do
    # Comment lines are not calls.
    [[ "$text" =~ ^[[:space:]]*/// ]] && continue
    [[ "$text" =~ ^[[:space:]]*// ]] && continue
    from=$(( line > 2 ? line - 2 : 1 ))
    if sed -n "${from},${line}p" "$file" | grep -q 'trap-ok:'; then
      echo "ok   $file:$line:$(echo "$text" | sed 's/^[[:space:]]*//' | cut -c1-110)"
    else
      echo "FAIL $file:$line:$(echo "$text" | sed 's/^[[:space:]]*//' | cut -c1-110)"
    fi
  done
}
report=$( { scan "$traps" "${everywhere[@]}"; scan "$narrowing" "${parsers[@]}"; } | sort -u)
[[ -n "$report" ]] && echo "$report"
failed=$(grep -c '^FAIL' <<<"$report" || true)
total=$(grep -c . <<<"$report" || true)
if [[ "$failed" -gt 0 ]]; then
  echo "trap-check.sh: $failed of $total trapping calls have no \`// trap-ok: <why>\` beside them" >&2
  exit 1
fi
echo "trap-check.sh: $total trapping calls in Sources/, each with its reason"
