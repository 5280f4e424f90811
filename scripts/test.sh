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
#
# In full mode the rigs that take minutes to build cold (the kube rig,
# versitygw, the Debian image: scripts/test-rigs.txt) are built in the
# background at nice 19 while the packages that need none run; a package
# that needs one waits for it, and phase 2 runs those packages last. A rig
# that fails to build fails the run, with its log. Warm, each rig's build
# only finds it cached.
#
# AIRLOCK_TEST_DRY=1 prints what would run (the phases, the order, each
# rig's wait) without running go test or the fuzzing; the rigs are built
# as ever, with AIRLOCK_TEST_RIG_MAKE (default "make --no-print-directory")
# and the rig's make target as the command, so that a fake rig can stand in.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-full}
case $mode in
full | quick) ;;
*) echo "usage: scripts/test.sh [quick]" >&2; exit 2 ;;
esac
log=$(mktemp)
rigdir=$(mktemp -d)
# rigs_stop stops the rig builds still running, when the run is cut short:
# first the loops that start them one after another, then each build (a
# session of its own: the build's whole tree).
# shellcheck disable=SC2317 # (called by the trap)
rigs_stop() {
  local f
  for f in "$rigdir"/*.loop; do
    [[ -e $f ]] && kill -TERM "$(<"$f")" 2>/dev/null
  done
  for f in "$rigdir"/*.pid; do
    [[ -e $f && ! -e ${f%.pid}.status ]] && kill -TERM -- "-$(<"$f")" 2>/dev/null
  done
}
trap 'rigs_stop; rm -rf "$log" "$log.phases" "$log.fuzz" "$log".beside.* "$rigdir"' EXIT
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
# The rigs built in the background, in the order they are ready in (the
# image beside the compiles; versitygw, then the kube rig), and which the
# packages need (full mode only: make test-quick needs none).
# A RIG:TestName entry is a rig only that test needs: when the rig is not
# built yet as the package's turn comes, the package runs without that test
# (-skip), and the test runs on its own once the rig is (at the end).
declare -A rig_rank=([root-image]=1 [s3-rig]=2 [kube-rig]=3) needs=() test_needs=()
if [[ $mode == full ]]; then
  while read -r p rigs; do
    for r in $rigs; do
      [[ -n ${rig_rank[${r%%:*}]:-} ]] || { echo "scripts/test-rigs.txt: $p: unknown rig ${r%%:*}" >&2; exit 2; }
      if [[ $r == *:* ]]; then
        test_needs[$module/$p]+="$r "
      else
        needs[$module/$p]+="$r "
      fi
    done
  done < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' scripts/test-rigs.txt)
fi
par=() ser=()
for p in $(go list ./...); do
  if grep -qxF "$p" <<<"$skip"; then continue; fi
  if grep -qxF "$p" <<<"$serial" || [[ -n ${needs[$p]:-}${test_needs[$p]:-} ]]; then ser+=("$p"); else par+=("$p"); fi
done
# Phase 2: the packages that need no background rig first, then those
# that do, by the last-ready rig they need (each group in go list's order).
rank() {
  local k=0 r
  for r in ${needs[$1]:-}; do ((rig_rank[$r] > k)) && k=${rig_rank[$r]}; done
  echo "$k"
}
mapfile -t ser < <(for p in "${ser[@]}"; do echo "$(rank "$p") $p"; done | sort -s -n -k1,1 | cut -d' ' -f2)

dry=${AIRLOCK_TEST_DRY:-}
gotest=(go test)
[[ -n $dry ]] && gotest=(echo "(dry run) go test")
read -ra rig_make <<<"${AIRLOCK_TEST_RIG_MAKE:-make --no-print-directory}"
# rig_build RIG...: builds each rig in turn at nice 19 (make RIG, as a
# session of its own so that rigs_stop can stop its whole tree), its
# output into $rigdir/RIG.log, then its exit status into RIG.status.
rig_build() {
  local r pid status
  for r; do
    setsid --wait nice -n 19 scripts/timed.sh "$r (background, nice 19)" "${rig_make[@]}" "$r" >"$rigdir/$r.log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$rigdir/$r.pid"
    wait "$pid"
    status=$?
    echo "$status" >"$rigdir/$r.status.tmp" && mv "$rigdir/$r.status.tmp" "$rigdir/$r.status"
  done
}
rigs_start() {
  rig_build root-image &
  echo $! >"$rigdir/1.loop"
  rig_build s3-rig kube-rig &
  echo $! >"$rigdir/2.loop"
}
# rig_wait RIG WHAT: waits for RIG's build; the first wait prints its log
# (its lines marked [RIG]) and how long WHAT waited. Fails if the build did.
declare -A rig_shown=()
rig_wait() {
  local r=$1 what=$2 start=$SECONDS
  while [[ ! -e $rigdir/$r.status ]]; do
    [[ -d $rigdir ]] || return 1 # the run was cut short
    sleep 1
  done
  if [[ -z ${rig_shown[$r]:-} ]]; then
    rig_shown[$r]=1
    sed -e "/^== /!s/^/[$r] /" "$rigdir/$r.log"
    echo "== wait for $r (before $what): $((SECONDS - start)) s, exit $(<"$rigdir/$r.status"), load $(cut -d' ' -f1-3 /proc/loadavg)"
  fi
  return "$(<"$rigdir/$r.status")"
}

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
# The packages that run beside fuzz_beside's too, at nice 19, when it is in
# the run: the Debian package's test (a minute, most of it one core's
# dpkg-deb and systemd, its deadlines 10 s and more for steps of a second or
# two) takes what the Pods' waits and the fuzzing leave, instead of a minute
# of its own with a core idle. Their output is printed after the package's.
pkgs_beside=("$module/packaging")
beside_pids=()
beside_start() {
  local q
  for q in "${beside[@]}"; do
    if [[ -n $dry ]]; then
      echo "(dry run) nice -n 19 go test ${q#"$module"/} beside ${1#"$module"/}" >"$log.beside.${q//\//_}"
      continue
    fi
    nice -n 19 scripts/timed.sh "test ${q#"$module"/} (nice 19, beside test ${1#"$module"/})" \
      "${gotest[@]}" -count=1 -timeout 20m -v -artifacts -outputdir "$out" "$q" >"$log.beside.${q//\//_}" 2>&1 &
    beside_pids+=($!)
  done
}
beside_wait() {
  local status=0 pid q
  for pid in "${beside_pids[@]}"; do
    wait "$pid" || status=1
  done
  for q in "${beside[@]}"; do
    cat "$log.beside.${q//\//_}"
  done
  beside_pids=() beside=()
  return $status
}
# The packages run beside fuzz_beside's when both are in the run,
# leave phase 2's sequence.
beside=()
if printf '%s\n' "${ser[@]}" | grep -qxF "$fuzz_beside"; then
  for q in "${pkgs_beside[@]}"; do
    if printf '%s\n' "${ser[@]}" | grep -qxF "$q"; then
      beside+=("$q")
      mapfile -t ser < <(printf '%s\n' "${ser[@]}" | grep -vxF "$q")
    fi
  done
fi
fuzz_start() {
  if [[ -n $dry ]]; then
    echo "(dry run) FUZZTIME=$AIRLOCK_TEST_FUZZ nice -n 19 scripts/fuzz.sh beside ${1#"$module"/}" >"$log.fuzz"
    true &
    fuzz_pid=$!
    return
  fi
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
  ((${#needs[@]} + ${#test_needs[@]})) && rigs_start
  if ((${#par[@]})); then
    scripts/timed.sh "test phase 1 (${#par[@]} packages, $jobs at a time)" \
      "${gotest[@]}" -count=1 -p "$jobs" -timeout 20m -v -artifacts -outputdir "$out" "${par[@]}" || status=1
  fi
  echo "phase: ${#par[@]} packages, $jobs at a time, $((SECONDS - start)) s" >>"$log.phases"
  start=$SECONDS
  local fuzzed=
  local r t skip args name later=()
  for p in "${ser[@]}"; do
    for r in ${needs[$p]:-}; do
      rig_wait "$r" "test ${p#"$module"/}" || status=1
    done
    skip=()
    for t in ${test_needs[$p]:-}; do
      if [[ ! -e $rigdir/${t%%:*}.status ]]; then
        skip+=("${t#*:}")
        later+=("$t $p")
      fi
    done
    args=() name="test ${p#"$module"/}"
    if ((${#skip[@]})); then
      args=(-skip "^($(IFS='|'; echo "${skip[*]}"))\$")
      name+=" (but ${skip[*]}: its rig is building)"
    fi
    [[ -n ${AIRLOCK_TEST_FUZZ:-} && $p == "$fuzz_beside" ]] && fuzz_start "$p"
    [[ $p == "$fuzz_beside" ]] && beside_start "$p"
    scripts/timed.sh "$name" \
      "${gotest[@]}" -count=1 -timeout 20m -v -artifacts -outputdir "$out" "${args[@]}" "$p" || status=1
    if [[ $p == "$fuzz_beside" ]]; then
      beside_wait || status=1
    fi
    if [[ -n $fuzz_pid ]]; then
      fuzz_wait || status=1
      fuzz_pid= fuzzed=1
    fi
  done
  # The tests left out above for a rig still building, each once it is.
  for t in "${later[@]}"; do
    p=${t#* } t=${t%% *}
    rig_wait "${t%%:*}" "test ${p#"$module"/} ${t#*:}" || status=1
    scripts/timed.sh "test ${p#"$module"/} ${t#*:}" \
      "${gotest[@]}" -count=1 -timeout 20m -v -artifacts -outputdir "$out" -run "^${t#*:}\$" "$p" || status=1
  done
  if [[ -n ${AIRLOCK_TEST_FUZZ:-} && -z $fuzzed ]]; then
    if [[ -n $dry ]]; then
      echo "(dry run) FUZZTIME=$AIRLOCK_TEST_FUZZ scripts/fuzz.sh"
    else
      FUZZTIME=$AIRLOCK_TEST_FUZZ scripts/timed.sh "fuzz (8 targets, ${AIRLOCK_TEST_FUZZ} each)" scripts/fuzz.sh >"$log.fuzz" 2>&1 || status=1
      fuzz_print
    fi
  fi
  echo "phase: ${#ser[@]} packages one at a time, $((SECONDS - start)) s" >>"$log.phases"
  # Every rig started is waited for, needed or not: a failed build fails
  # the run.
  if ((${#needs[@]} + ${#test_needs[@]})); then
    for r in root-image s3-rig kube-rig; do
      rig_wait "$r" "the end" || status=1
    done
  fi
  return $status
}
run 2>&1 | tee "$log" | grep -E '^(=== RUN|== |--- (PASS|FAIL|SKIP)|PASS|FAIL|ok|panic|fuzzing |fuzz: elapsed|\[[a-z0-9-]+\] |\(dry run\) )' | grep -v '^=== RUN'
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
  echo "What the failing tests said (each failing test's messages, and panics):"
  # A failing test's messages, wherever they are in the log: cases run
  # side by side print under "=== NAME" lines, long before their "--- FAIL".
  awk '
    FNR == NR { if (sub(/^[[:space:]]*--- FAIL: /, "")) { sub(/ .*/, ""); failed[$0] = 1 }; next }
    /^=== (RUN|NAME|CONT|PAUSE) / { cur = $3; next }
    /^[[:space:]]*--- (PASS|FAIL|SKIP): / { if ($0 ~ /FAIL/) print; next }
    /^panic:/ { print; next }
    (cur in failed) && /\.go:[0-9]+: / && !/level=/ { print cur ":" $0 }
  ' "$log" "$log" | tail -80
  mkdir -p "$out" && cp "$log" "$out/test.log" && echo "(the whole log: $out/test.log)"
  echo
  for f in "$rigdir"/*.status; do
    [[ -e $f && $(<"$f") != 0 ]] || continue
    r=$(basename "$f" .status)
    echo "The rig $r did not build (${rig_make[*]} $r, exit $(<"$f")); the end of its log:"
    grep -v '^== ' "$rigdir/$r.log" | tail -20 | sed 's/^/  /'
    echo
  done
fi
sed 's/^phase: /Ran /' "$log.phases" 2>/dev/null
# The steps, longest first.
grep -E '^== (test|fuzz|wait for) ' "$log" | sort -t: -k2 -rn | sed 's/^== /  /'
passed=$(grep -cE '^\s*--- PASS' "$log")
failed=$(grep -cE '^\s*--- FAIL' "$log")
skipped=$(grep -cE '^\s*--- SKIP' "$log")
echo "$passed passed, $failed failed, $skipped skipped"
exit "$status"
