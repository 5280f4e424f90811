#!/usr/bin/env bash
# timed.sh NAME COMMAND...: runs COMMAND and then prints how long it took
# and the load average, as make test's steps do (docs/tests.md).
name=$1
shift
start=$(date +%s)
"$@"
status=$?
echo "== $name: $(($(date +%s) - start)) s, exit $status, load $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$status"
