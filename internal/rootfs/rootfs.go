package rootfs

import (
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// What a composed root holds. The native agent builds it itself; the gVisor
// driver builds the same on the host, as an OCI bundle.

// EtcAllowlist is all of the host's /etc a composed root sees: what TLS,
// the dynamic linker, time zones and name-service switch need, and
// matplotlib's defaults (Debian keeps them only in /etc/matplotlibrc, and
// matplotlib refuses to import without them).
var EtcAllowlist = []string{
	"alternatives", "ca-certificates", "ca-certificates.conf", "debian_version",
	"gai.conf", "host.conf", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
	"localtime", "matplotlibrc", "mime.types", "nsswitch.conf", "os-release", "protocols",
	"services", "ssl", "timezone",
}

// RootDirs are the directories at the top of a composed root.
var RootDirs = []string{"usr", "etc", "proc", "dev", "tmp", "workspace", "mnt", "root", "home", "var", "run", "opt", "srv"}

// UsrLinks are the top-level names a merged-/usr host has as symlinks into
// /usr; a split-/usr host has them as directories, which are bound instead.
var UsrLinks = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// HiddenUsr are the directories below the host's /usr that a composed root
// shows empty: airlock's own program and documentation, where its Debian
// package puts them, so that code in a sandbox cannot read or run the
// airlock that confines it (docs/decisions.md). /usr/bin/airlock, a link
// into /usr/lib/airlock, is left pointing at nothing.
var HiddenUsr = []string{"lib/airlock", "share/doc/airlock"}

// EtcFiles are the files of /etc a composed root gets generated, so that
// nothing of the host's users, hosts or resolvers shows through: name to
// content, for the workload's uid and gid and the sandbox's host name.
func EtcFiles(uid, gid int, hostname string) map[string]string {
	return map[string]string{
		"passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\n" +
			fmt.Sprintf("sandbox:x:%d:%d:sandbox:%s:/bin/sh\n", uid, gid, sandbox.Workspace) +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"group":       fmt.Sprintf("root:x:0:\nsandbox:x:%d:\nnogroup:x:65534:\n", gid),
		"hosts":       fmt.Sprintf("127.0.0.1\tlocalhost %s\n::1\tlocalhost ip6-localhost\n", hostname),
		"hostname":    hostname + "\n",
		"resolv.conf": "# no network: this sandbox has loopback only\n",
	}
}
