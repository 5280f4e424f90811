#!/usr/bin/env bash
# Builds the Debian package of airlock with dpkg-deb (docs/decisions.md):
#
#   packaging/build-deb.sh BINDIR VERSION OUTDIR
#
# BINDIR holds a built airlock and airlock-full (make build): the front and
# the complete program, which the package installs side by side, so that
# the daemon that runs is a file dpkg knows. The .deb is written to OUTDIR
# and its path printed. Where each file goes is in the README ("Run as a
# service").
set -euo pipefail
bindir=$1 version=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
case $(go env GOARCH) in
386) arch=i386 ;;
arm) arch=armhf ;;
*) arch=$(go env GOARCH) ;;
esac
# Reproducible: every file dated by the commit.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$top" log -1 --format=%ct 2>/dev/null || date +%s)}

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
umask 022
install -D -m 0755 "$bindir/airlock" "$root/usr/lib/airlock/airlock"
install -D -m 0755 "$bindir/airlock-full" "$root/usr/lib/airlock/airlock-full"
mkdir -p "$root/usr/bin"
ln -s ../lib/airlock/airlock "$root/usr/bin/airlock"
install -D -m 0644 "$here/airlock.service" "$root/usr/lib/systemd/system/airlock.service"
# The config may hold egress secrets: root may write, group root read.
install -D -m 0640 "$here/config.toml" "$root/etc/airlock/config.toml"

doc=$root/usr/share/doc/airlock
install -D -m 0644 "$here/deb/copyright" "$doc/copyright"
install -m 0644 "$top/README.md" "$doc/README.md"
install -m 0644 "$top/docs/daemon.md" "$doc/daemon.md"
install -D -m 0644 "$here/config.toml" "$doc/examples/config.toml"
mkdir -p "$doc/examples/policies"
install -m 0644 "$top"/examples/policies/*.toml "$doc/examples/policies/"
commit=$(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown)
cat > "$doc/changelog" <<CHANGES
airlock ($version) unstable; urgency=medium

  * Built from commit $commit.

 -- airlock developers <dev@airlock.invalid>  $(date -R -u -d "@$SOURCE_DATE_EPOCH")
CHANGES
gzip -9n "$doc/README.md" "$doc/daemon.md" "$doc/changelog"

"$bindir/airlock-full" manpages "$root/usr/share/man/man1"
gzip -9n "$root"/usr/share/man/man1/*.1

mkdir -p "$root/DEBIAN"
install -m 0755 "$here/deb/postinst" "$here/deb/prerm" "$here/deb/postrm" "$root/DEBIAN/"
echo /etc/airlock/config.toml > "$root/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" "$here/deb/control.in" > "$root/DEBIAN/control"
(cd "$root" && find usr -type f -print0 | sort -z | xargs -0 md5sum > DEBIAN/md5sums)
find "$root" -newermt "@$SOURCE_DATE_EPOCH" -print0 | xargs -0r touch -h -d "@$SOURCE_DATE_EPOCH"

mkdir -p "$out"
deb=$out/airlock_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
