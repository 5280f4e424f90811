package testcap

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/hostcap"
	"github.com/airlock-sandbox/airlock/internal/testrig"
	"github.com/airlock-sandbox/airlock/internal/testrig/kube/kubebin"
	"github.com/airlock-sandbox/airlock/internal/testrig/rootimage"
)

// kubeFix builds what the kube test rig needs.
const kubeFix = "make kube-rig (builds the test node's programs and image into $AIRLOCK_CACHE, " +
	"default /var/cache/airlock: about 10 minutes the first time; needs root, debootstrap and the Go module proxy)"

// kubeControllers are the cgroup controllers a kubelet needs.
var kubeControllers = []string{"cpu", "cpuacct", "cpuset", "memory", "pids"}

// probeKubernetes checks that this host can run the kube test rig's
// one-node cluster (internal/testrig/kube): the programs and the image
// `make kube-rig` builds are in the cache and run, runc and the CNI
// plugins are installed, and the kernel has what a node needs: overlayfs
// for containerd's snapshots, bridges and veth pairs for the Pods'
// network, and the cgroup controllers the kubelet manages. The rig's own
// test then runs Pods on the node, with runc and with gVisor.
func probeKubernetes(ctx context.Context) Result {
	if !isRoot() {
		return fail("the test node needs root"+notRoot(), rootFix)
	}
	cache := testrig.CacheDir()
	bins, err := kubebin.Find(cache)
	if err != nil {
		return fail(err.Error(), kubeFix)
	}
	img, err := rootimage.Find(cache, rootimage.Spec{})
	if err != nil {
		return fail(err.Error(), kubeFix)
	}
	for _, name := range []string{kubebin.Kubelet, kubebin.KubeAPIServer, kubebin.Etcd, kubebin.Containerd} {
		if _, err := hostcap.RunTool(ctx, 15*time.Second, bins.Path(name), "--version"); err != nil {
			return fail(fmt.Sprintf("%s does not run: %v", name, err), kubeFix)
		}
	}
	if _, err := exec.LookPath("runc"); err != nil {
		return fail("runc is not installed (not found on PATH)", "apt-get install runc")
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join("/usr/lib/cni", plugin)); err != nil {
			return fail("the CNI plugin "+plugin+" is not installed in /usr/lib/cni", "apt-get install containernetworking-plugins")
		}
	}
	if err := tryOverlay(); err != nil {
		return fail("containerd's overlayfs snapshots cannot work: "+err.Error(), "use a kernel with CONFIG_OVERLAY_FS")
	}
	if _, err := hostcap.RunTool(ctx, 10*time.Second, "unshare", "--net", "sh", "-c",
		"ip link add probe0 type bridge && ip link add probe1 type veth peer name probe2"); err != nil {
		return fail("cannot make a bridge and a veth pair (the Pods' network): "+err.Error(),
			"use a kernel with CONFIG_BRIDGE and CONFIG_VETH; install iproute2 and util-linux")
	}
	have, mode, err := hostcap.CgroupControllers()
	if err != nil {
		return fail("read the cgroup mounts: "+err.Error(), "mount the cgroup file systems")
	}
	if mode == "v2" {
		// cgroup v2 has no cpuacct: cpu accounts.
		have = append(have, "cpuacct")
	}
	var lacking []string
	for _, c := range kubeControllers {
		if !slices.Contains(have, c) {
			lacking = append(lacking, c)
		}
	}
	if len(lacking) > 0 {
		return fail(fmt.Sprintf("the kubelet needs the cgroup controllers %s, not mounted here (cgroup mode %s)",
			strings.Join(lacking, ", "), mode), "mount the cgroup controllers (a systemd host mounts them all)")
	}
	return ok(fmt.Sprintf("%s; image %s from Debian %s (%d packages); cgroup %s",
		strings.Join(bins.Versions, ", "), img.Manifest.Suite, img.Manifest.ReleaseDate, len(img.Manifest.Packages), mode))
}

// tryOverlay mounts and unmounts an overlay file system in a scratch
// directory.
func tryOverlay() error {
	dir, err := os.MkdirTemp("", "airlock-overlay-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for _, d := range []string{"lower", "upper", "work", "merged"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s",
		filepath.Join(dir, "lower"), filepath.Join(dir, "upper"), filepath.Join(dir, "work"))
	merged := filepath.Join(dir, "merged")
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay: %w", err)
	}
	return unix.Unmount(merged, unix.MNT_DETACH)
}
