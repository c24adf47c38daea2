#!/usr/bin/env bash
# Fails on history written into the code: comments and docs say what and why; which issue asked
# for a change, or which commit or CI run showed a problem, is git's (the commit message) to hold.
#
# Looks in every tracked Swift, shell, Python and proto file under Sources/, Tests/, scripts/,
# proto/ and Package.swift (generated code comes from proto/, so it is checked there) for
#   - an issue reference: "issue 47", "issues 47 and 49", "Issue #47"
#   - a commit named as one: "CI of 2f62eda", "commit 2f62eda", "(2f62eda)", "before 2f62eda"
# Usage: scripts/history-check.sh    prints each hit as file:line:text; exit 1 if there is any
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files --cached --others --exclude-standard \
  'Sources/*.swift' 'Tests/*.swift' 'Tests/*.py' 'scripts/*' 'proto/*.proto' Package.swift \
  | grep -v '/Generated/' | grep -v '^scripts/history-check.sh$')
hash='(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b'
pattern="\\b[Ii]ssues? #?[0-9]+|\\b(?:[Cc]ommit|CI of|CI run of|clone of|run of|before|after|since)\\s+$hash|\\($hash\\)"
if grep -nP "$pattern" "${files[@]}"; then
  echo "history-check.sh: the lines above name an issue or a commit; say what and why instead (git keeps the history)" >&2
  exit 1
fi
