#!/usr/bin/env bash
# Fuzzes the parsers of untrusted input the daemon runs on every request —
# the API's request bodies (create, exec/process), tar archives, image layers, the E2B
# create body and metadata queries, what a sandbox's interpreter bridge
# prints and the snapshot blobs its agent sends — each
# for FUZZTIME (default 60s), not only their seed corpora. A new input is
# minimized for at most 5 s, so that the time goes to fuzzing. A crash
# fails the run and leaves its input under the package's testdata/fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
export AIRLOCK_AGENT=${AIRLOCK_AGENT:-$PWD/internal/agentbin/bin/airlock-agent}
for target in internal/api:FuzzCreateBody internal/api:FuzzExecBody internal/api:FuzzArchive \
  internal/api/e2b:FuzzCreateBody internal/api/e2b:FuzzBridgeOutput internal/api/e2b:FuzzMetadataQuery \
  internal/agent:FuzzBlobCodec internal/image:FuzzUnpackLayer; do
  pkg=${target%%:*} target=${target#*:}
  echo "fuzzing $pkg $target for ${FUZZTIME:-60s}"
  go test -run '^$' -fuzz "^${target}\$" -fuzztime "${FUZZTIME:-60s}" -fuzzminimizetime 5s "./$pkg"
done
