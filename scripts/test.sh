#!/usr/bin/env bash
# Runs every test, then lists the tests that skipped and why. With
# AIRLOCK_TEST_REQUIRE set (as CI sets it), a test of a named capability
# fails instead of skipping.
set -uo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
export AIRLOCK_AGENT=${AIRLOCK_AGENT:-$PWD/internal/agentbin/bin/airlock-agent}
# What tests keep (t.ArtifactDir: the console test's screenshots) goes to
# bin/test-output/_artifacts, or under $AIRLOCK_TEST_OUTPUT.
out=${AIRLOCK_TEST_OUTPUT:-$PWD/bin/test-output}
mkdir -p "$out"
go test -count=1 -p 1 -timeout 20m -v -artifacts -outputdir "$out" ./... 2>&1 | tee "$log" | grep -E '^(=== RUN|--- (PASS|FAIL|SKIP)|PASS|FAIL|ok|panic)' | grep -v '^=== RUN'
status=${PIPESTATUS[0]}
echo
# A skipped test's reason is the log line printed just before its
# "--- SKIP" line or, for a subtest whose output go test held back until
# its parent ended, just after it.
skips=$(awk '
  function flush() { if (pending != "") printf "  %s: (no reason given)\n", pending; pending = "" }
  /^=== (RUN|CONT|PAUSE|NAME)/ { flush(); why = ""; next }
  /^ *[A-Za-z0-9_]+\.go:[0-9]+: / {
    sub(/^ */, "")
    if (pending != "") { printf "  %s: %s\n", pending, $0; pending = ""; next }
    why = $0; next
  }
  /^ *--- SKIP: / {
    flush()
    if (why != "") { printf "  %s: %s\n", $3, why; why = "" } else pending = $3
    next
  }
  { flush() }
  END { flush() }
' "$log")
if [[ -n $skips ]]; then
  echo "Skipped tests and why (set AIRLOCK_TEST_REQUIRE to make them fail instead):"
  echo "$skips"
else
  echo "No test was skipped."
fi
if [[ $status != 0 ]]; then
  echo "What the failing tests said (the last lines before each failure):"
  grep -B40 -E '^\s*--- FAIL|^panic:' "$log" | grep -E '\.go:[0-9]+: |^panic:|FAIL' | grep -v 'level=' | tail -60
  echo
fi
passed=$(grep -cE '^\s*--- PASS' "$log")
failed=$(grep -cE '^\s*--- FAIL' "$log")
skipped=$(grep -cE '^\s*--- SKIP' "$log")
echo "$passed passed, $failed failed, $skipped skipped"
exit "$status"
