#!/usr/bin/env bash
# clean-cache.sh: removes what the test rigs and assets cached under
# $AIRLOCK_CACHE (default /var/cache/airlock), unless a process is using it.
# make clean-cache runs it; docs/tests.md lists what each directory holds.
set -euo pipefail
cache=${AIRLOCK_CACHE:-/var/cache/airlock}
dirs=(kube s3 rootimage dockerd microvm wasm tools)
# A running rig (the test dockerd, a kube node, versitygw, a microVM) has
# its cache directory on its command line.
for cmdline in /proc/[0-9]*/cmdline; do
  if { tr '\0' ' ' <"$cmdline"; } 2>/dev/null | grep -qF "$cache/"; then
    pid=${cmdline#/proc/}
    pid=${pid%/cmdline}
    echo "clean-cache: process $pid uses $cache: $({ tr '\0' ' ' <"$cmdline"; } 2>/dev/null | cut -c1-120)" >&2
    echo "clean-cache: stop it (or let its test end) and run make clean-cache again; nothing removed" >&2
    exit 1
  fi
done
before=$(df -Pm "$cache" 2>/dev/null | awk 'NR == 2 { print $4 }')
for d in "${dirs[@]}"; do
  if [[ -e $cache/$d ]]; then
    echo "removing $cache/$d ($(du -sh "$cache/$d" 2>/dev/null | cut -f1))"
    # The dockerd data root may hold overlay mounts of a crashed run.
    findmnt -rn -o TARGET | grep -F "$cache/$d/" | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
    rm -rf "${cache:?}/$d"
  fi
done
after=$(df -Pm "$cache" 2>/dev/null | awk 'NR == 2 { print $4 }')
if [[ -n $before && -n $after ]]; then
  echo "freed $((after - before)) MB; the Go build cache ($(go env GOCACHE), $(du -sh "$(go env GOCACHE)" 2>/dev/null | cut -f1)) is go clean -cache"
fi
