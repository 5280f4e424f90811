#!/usr/bin/env bash
# test-space.sh: make test's first step. Fails at once, saying how much is
# needed and where, when the disk cannot hold what make test will write:
# the tests' own files and, on a cold machine, the caches still to build
# (sizes measured on this project's machine: docs/tests.md). A test that
# runs out of space halfway fails somewhere unrelated; this fails first.
# AIRLOCK_TEST_SPACE_MB overrides the estimate (0 turns the check off).
set -uo pipefail
cache=${AIRLOCK_CACHE:-/var/cache/airlock}
runsc=${RUNSC:-}
gocache=$(go env GOCACHE)
gomodcache=$(go env GOMODCACHE)

# What a warm run writes: test binaries (to TMPDIR, up to two at a time,
# the largest 150 MB), the Debian package's test root (debootstrap, 400 MB),
# the kube node's containerd and Pods, the test dockerd's images, microVM
# overlays, sandboxes' files; with a margin.
need=3072
why=("the tests' own files: 3072 MB")
missing() { need=$((need + $2)); why+=("$1 is not built yet: $2 MB"); }
# Each cache to build: what it adds to the rig cache, the Go module cache
# and the Go build cache together.
[[ -n $(compgen -G "$cache/kube/kubernetes-*/manifest.json") ]] || missing "the kube rig" 7500
[[ -n $(compgen -G "$cache/s3/versitygw-*/versitygw") ]] || missing "the S3 test server" 1500
[[ -z $runsc || -x $runsc ]] || missing "runsc" 1500
[[ -d $cache/microvm/snapshot ]] || missing "the microvm assets" 700
[[ -d $gocache && -n $(compgen -G "$gocache/[0-9a-f][0-9a-f]") ]] || missing "the Go build cache" 3000
need=${AIRLOCK_TEST_SPACE_MB:-$need}
[[ $need == 0 ]] && exit 0

# The fullest of the file systems these live on.
paths=("$cache" "$gocache" "$gomodcache" "${TMPDIR:-/tmp}" /var/lib)
least= where=
for p in "${paths[@]}"; do
  while [[ ! -e $p ]]; do p=$(dirname "$p"); done
  avail=$(df -Pm "$p" | awk 'NR == 2 { print $4 }')
  if [[ -z $least || $avail -lt $least ]]; then least=$avail where=$p; fi
done
if ((least < need)); then
  {
    echo "make test: $least MB free on the file system of $where, and it needs about $need MB:"
    printf '  %s\n' "${why[@]}"
    echo "Free some space (make clean-cache removes the rigs' caches, go clean -cache the Go build cache),"
    echo "or set AIRLOCK_CACHE, GOCACHE or TMPDIR to a larger file system. AIRLOCK_TEST_SPACE_MB=0 skips this check."
  } >&2
  exit 1
fi
