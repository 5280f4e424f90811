#!/usr/bin/env bash
# Runs every test, then lists the tests that skipped and why. With
# AIRLOCK_TEST_REQUIRE set (as CI sets it), a test of a named capability
# fails instead of skipping.
set -uo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
export AIRLOCK_AGENT=${AIRLOCK_AGENT:-$PWD/internal/agentbin/bin/airlock-agent}
go test -count=1 -p 1 -timeout 20m -v ./... 2>&1 | tee "$log" | grep -E '^(=== RUN|--- (PASS|FAIL|SKIP)|PASS|FAIL|ok|panic)' | grep -v '^=== RUN'
status=${PIPESTATUS[0]}
echo
skips=$(grep -A2 -E '^\s*--- SKIP' "$log" | grep -vE '^\s*--- SKIP|^--$' | sed 's/^ *//' | sort | uniq -c | sort -rn)
if [[ -n $skips ]]; then
  echo "Skipped tests, by reason (set AIRLOCK_TEST_REQUIRE to make them fail instead):"
  echo "$skips"
else
  echo "No test was skipped."
fi
passed=$(grep -cE '^\s*--- PASS' "$log")
failed=$(grep -cE '^\s*--- FAIL' "$log")
skipped=$(grep -cE '^\s*--- SKIP' "$log")
echo "$passed passed, $failed failed, $skipped skipped"
exit "$status"
