#!/usr/bin/env bash
# Runs every test, then lists the tests that skipped and why. With
# AIRLOCK_TEST_REQUIRE set (as CI sets it), a test of a named capability
# fails instead of skipping.
#
#   scripts/test.sh          every package (make test)
#   scripts/test.sh quick    all but those scripts/test-quick-skip.txt names
#                            (make test-quick: no rigs, a few minutes)
#
# The packages that measure time (scripts/test-serial.txt, and those whose
# tests run the conformance suite) run one at a time, after the others,
# which run AIRLOCK_TEST_JOBS (default: the number of CPUs) at a time.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-full}
case $mode in
full | quick) ;;
*) echo "usage: scripts/test.sh [quick]" >&2; exit 2 ;;
esac
log=$(mktemp)
trap 'rm -f "$log" "$log.phases" "$log.fuzz"' EXIT
export AIRLOCK_AGENT=${AIRLOCK_AGENT:-$PWD/internal/agentbin/bin/airlock-agent}
# What tests keep (t.ArtifactDir: the console test's screenshots) goes to
# bin/test-output/_artifacts, or under $AIRLOCK_TEST_OUTPUT.
out=${AIRLOCK_TEST_OUTPUT:-$PWD/bin/test-output}
mkdir -p "$out"
jobs=${AIRLOCK_TEST_JOBS:-$(nproc)}

# The package lists: a file's lines without comments, as import paths.
module=$(go list -m)
listed() { sed -e 's/#.*//' -e '/^[[:space:]]*$/d' -e 's/[[:space:]]*$//' -e "s|^|$module/|" "$1"; }
serial=$( (listed scripts/test-serial.txt
  go list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... |
    awk '/ [^ ]*\/internal\/sandbox\/sandboxtest( |$)/ { print $1 }') | sort -u)
skip=
[[ $mode == quick ]] && skip=$(listed scripts/test-quick-skip.txt)
par=() ser=()
for p in $(go list ./...); do
  if grep -qxF "$p" <<<"$skip"; then continue; fi
  if grep -qxF "$p" <<<"$serial"; then ser+=("$p"); else par+=("$p"); fi
done

# With AIRLOCK_TEST_FUZZ set to a time (CI: .ci/run sets 30s), the fuzz
# targets (scripts/fuzz.sh, that long each) run beside the phase-2 package
# fuzz_beside names, whose cases mostly wait on Pods (the kubelet's and the
# API server's work: a third of a CPU over its run), at nice 19, so that
# they take the CPU it leaves and yield it when its cases want it
# (docs/tests.md measures what each does to the other). Their output is
# printed after the package's; without that package in the run, they run
# after phase 2.
fuzz_beside=$module/internal/driver/kubernetes
fuzz_pid=
fuzz_start() {
  FUZZTIME=$AIRLOCK_TEST_FUZZ nice -n 19 scripts/timed.sh "fuzz (8 targets, ${AIRLOCK_TEST_FUZZ} each, nice 19, beside test ${1#"$module"/})" \
    scripts/fuzz.sh >"$log.fuzz" 2>&1 &
  fuzz_pid=$!
}
# fuzz_print prints the fuzz output, of each target's progress lines the
# last (how many inputs it ran).
fuzz_print() {
  awk '/^fuzz: elapsed/ { last = $0; next } { if (last != "") print last; last = ""; print } END { if (last != "") print last }' "$log.fuzz"
}
fuzz_wait() {
  local status=0
  wait "$fuzz_pid" || status=1
  fuzz_print
  return $status
}
# go test prints a package's output when it ends (-p above 1), so that
# what follows reads each package's lines together. Each phase-2 package
# is a step of its own, timed as .ci/run's steps are (scripts/timed.sh:
# "== test PACKAGE: N s, exit N, load …"), so that docs/tests.md's table
# can list what each costs.
phases=()
run() {
  local status=0 start p
  start=$SECONDS
  if ((${#par[@]})); then
    scripts/timed.sh "test phase 1 (${#par[@]} packages, $jobs at a time)" \
      go test -count=1 -p "$jobs" -timeout 20m -v -artifacts -outputdir "$out" "${par[@]}" || status=1
  fi
  echo "phase: ${#par[@]} packages, $jobs at a time, $((SECONDS - start)) s" >>"$log.phases"
  start=$SECONDS
  local fuzzed=
  for p in "${ser[@]}"; do
    [[ -n ${AIRLOCK_TEST_FUZZ:-} && $p == "$fuzz_beside" ]] && fuzz_start "$p"
    scripts/timed.sh "test ${p#"$module"/}" \
      go test -count=1 -timeout 20m -v -artifacts -outputdir "$out" "$p" || status=1
    if [[ -n $fuzz_pid ]]; then
      fuzz_wait || status=1
      fuzz_pid= fuzzed=1
    fi
  done
  if [[ -n ${AIRLOCK_TEST_FUZZ:-} && -z $fuzzed ]]; then
    FUZZTIME=$AIRLOCK_TEST_FUZZ scripts/timed.sh "fuzz (8 targets, ${AIRLOCK_TEST_FUZZ} each)" scripts/fuzz.sh >"$log.fuzz" 2>&1 || status=1
    fuzz_print
  fi
  echo "phase: ${#ser[@]} packages one at a time, $((SECONDS - start)) s" >>"$log.phases"
  return $status
}
run 2>&1 | tee "$log" | grep -E '^(=== RUN|== |--- (PASS|FAIL|SKIP)|PASS|FAIL|ok|panic|fuzzing |fuzz: elapsed)' | grep -v '^=== RUN'
status=${PIPESTATUS[0]}
echo
# A skipped test's reason is the last log line printed under its name
# (after its "=== RUN", "=== CONT" or "=== NAME" line: the conformance
# suite's cases run side by side, so their "--- SKIP" lines come long after)
# or, for a subtest whose output go test held back until its parent ended,
# the line just after its "--- SKIP".
skips=$(awk '
  function flush() { if (pending != "") printf "  %s: (no reason given)\n", pending; pending = "" }
  /^=== (RUN|CONT|PAUSE|NAME)/ { flush(); cur = $3; next }
  /^ *[A-Za-z0-9_]+\.go:[0-9]+: / {
    sub(/^ */, "")
    if (pending != "") { printf "  %s: %s\n", pending, $0; pending = ""; next }
    if (cur != "") why[cur] = $0
    next
  }
  /^ *--- SKIP: / {
    flush()
    if ($3 in why) printf "  %s: %s\n", $3, why[$3]; else pending = $3
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
sed 's/^phase: /Ran /' "$log.phases" 2>/dev/null
# The steps, longest first.
grep -E '^== (test|fuzz) ' "$log" | sort -t: -k2 -rn | sed 's/^== /  /'
passed=$(grep -cE '^\s*--- PASS' "$log")
failed=$(grep -cE '^\s*--- FAIL' "$log")
skipped=$(grep -cE '^\s*--- SKIP' "$log")
echo "$passed passed, $failed failed, $skipped skipped"
exit "$status"
