#!/usr/bin/env bash
# Fuzzes the parsers of untrusted input the daemon runs on every request —
# the API's request bodies (create, exec/process) and tar archives — each
# for FUZZTIME (default 60s), not only their seed corpora. A new input is
# minimized for at most 5 s, so that the time goes to fuzzing. A crash
# fails the run and leaves its input under internal/api/testdata/fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
export AIRLOCK_AGENT=${AIRLOCK_AGENT:-$PWD/internal/agentbin/bin/airlock-agent}
for target in FuzzCreateBody FuzzExecBody FuzzArchive; do
  echo "fuzzing internal/api $target for ${FUZZTIME:-60s}"
  go test -run '^$' -fuzz "^${target}\$" -fuzztime "${FUZZTIME:-60s}" -fuzzminimizetime 5s ./internal/api
done
