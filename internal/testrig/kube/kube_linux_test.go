package kube

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-sandbox/airlock/internal/testrig"
)

// baseline is the host as the test binary found it, before any cluster.
var baseline hostState

func TestMain(m *testing.M) {
	baseline = snapshotHost(DefaultDir)
	os.Exit(Main(m))
}

// podTimeout bounds a Pod's run, from creation to its final phase.
const podTimeout = 2 * time.Minute

// runPod creates a Pod that runs command in the rig's image, with the
// given RuntimeClass ("" for the default, runc), and waits until it
// reaches phase (Succeeded, or Running for one that does not end).
func runPod(t *testing.T, c *Cluster, ns, name, runtimeClass string, phase corev1.PodPhase, command ...string) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), podTimeout)
	defer cancel()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "main", Image: c.Image, ImagePullPolicy: corev1.PullNever, Command: command,
			}},
		},
	}
	if runtimeClass != "" {
		pod.Spec.RuntimeClassName = &runtimeClass
	}
	pods := c.Client.CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Pod %s: %v", name, err)
	}
	for {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == phase {
			return p
		}
		if err == nil && (p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded) {
			t.Fatalf("Pod %s (runtime class %q) ended %s, not %s: %s", name, runtimeClass, p.Status.Phase, phase, describePod(p))
		}
		if ctx.Err() != nil {
			if err == nil {
				err = fmt.Errorf("still %s: %s", p.Status.Phase, describePod(p))
			}
			t.Fatalf("Pod %s (runtime class %q) did not reach %s within %v: %v", name, runtimeClass, phase, podTimeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// describePod says what a Pod's conditions and containers report.
func describePod(p *corev1.Pod) string {
	var parts []string
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			parts = append(parts, fmt.Sprintf("%s: %s", c.Type, c.Message))
		}
	}
	for _, s := range p.Status.ContainerStatuses {
		switch {
		case s.State.Waiting != nil:
			parts = append(parts, fmt.Sprintf("container %s waiting: %s: %s", s.Name, s.State.Waiting.Reason, s.State.Waiting.Message))
		case s.State.Terminated != nil:
			parts = append(parts, fmt.Sprintf("container %s terminated: exit %d, %s: %s", s.Name,
				s.State.Terminated.ExitCode, s.State.Terminated.Reason, s.State.Terminated.Message))
		}
	}
	if len(parts) == 0 {
		return "no condition or container status yet"
	}
	return strings.Join(parts, "; ")
}

// podLog reads a Pod's log through the API server, which fetches it from
// the kubelet.
func podLog(t *testing.T, c *Cluster, ns, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := c.Client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("read the log of Pod %s: %v", name, err)
	}
	return strings.TrimSpace(string(b))
}

// TestNode is the rig's definition of done: the node is Ready, and a Pod
// runs `true` from the rig's image to Succeeded with runc and with the
// RuntimeClass gvisor; and gVisor really runs the second (its kernel is not
// the host's).
func TestNode(t *testing.T) {
	c := Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node %s: %v", NodeName, err)
	}
	if err := nodeReady(ctx, c.Client); err != nil {
		t.Fatal(err)
	}
	info := node.Status.NodeInfo
	t.Logf("node %s: kubelet %s, %s, kernel %s", node.Name, info.KubeletVersion, info.ContainerRuntimeVersion, info.KernelVersion)
	if !strings.HasPrefix(info.ContainerRuntimeVersion, "containerd://2.") {
		t.Errorf("the node's runtime is %q, want containerd 2", info.ContainerRuntimeVersion)
	}
	if _, err := c.Client.NodeV1().RuntimeClasses().Get(ctx, RuntimeClassGvisor, metav1.GetOptions{}); err != nil {
		t.Errorf("RuntimeClass %s: %v", RuntimeClassGvisor, err)
	}

	ns := c.Namespace(t)
	for _, tc := range []struct{ name, runtimeClass string }{
		{"runc", ""},
		{"gvisor", RuntimeClassGvisor},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			runPod(t, c, ns, tc.name+"-true", tc.runtimeClass, corev1.PodSucceeded, "true")
			t.Logf("Pod running true with %s: Succeeded %.1fs after creation", tc.name, time.Since(start).Seconds())
		})
	}

	var uname syscall.Utsname
	if err := syscall.Uname(&uname); err != nil {
		t.Fatal(err)
	}
	host := utsString(uname.Release[:])
	runPod(t, c, ns, "runc-uname", "", corev1.PodSucceeded, "uname", "-r")
	runPod(t, c, ns, "gvisor-uname", RuntimeClassGvisor, corev1.PodSucceeded, "uname", "-r")
	if got := podLog(t, c, ns, "runc-uname"); got != host {
		t.Errorf("a runc Pod's kernel is %q, want the host's %q", got, host)
	}
	if got := podLog(t, c, ns, "gvisor-uname"); got == host || got == "" {
		t.Errorf("a gvisor Pod's kernel is %q, the host's (%q): the Pod did not run in gVisor", got, host)
	}

	var total int64
	for _, u := range c.RSS() {
		t.Logf("RSS %-24s %4d MiB", u.Component, u.RSS>>20)
		total += u.RSS
	}
	t.Logf("RSS of the rig's components: %d MiB; started in %.1fs", total>>20, c.Started.Seconds())
}

func utsString(b []int8) string {
	var s []byte
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

// abandon kills the components and releases the lock without cleaning up,
// as a crash of the test binary would.
func (r *rig) abandon() {
	r.mu.Lock()
	r.stopped = true
	comps := r.comps
	r.mu.Unlock()
	for _, c := range comps {
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.exited
	}
	r.lock.Unlock()
}

// hostPaths are places a node's components write to by default; the rig
// must leave them as it found them.
var hostPaths = []string{
	"/run/containerd", "/var/lib/containerd", "/opt/containerd", "/etc/containerd",
	"/var/lib/kubelet", "/var/log/containers", "/etc/kubernetes", "/var/log/pods", "/usr/libexec/kubernetes",
	"/var/run/nri", "/opt/nri", "/etc/cni", "/var/lib/cni", "/opt/cni", "/run/netns", "/run/runc",
}

// hostState is what the test compares before and after the rig.
type hostState struct {
	// leftovers says a crashed run's remains were there: the paths the
	// rig cleans up then need not match.
	leftovers bool
	paths     map[string]bool
	tunables  map[string]string
	logLinks  int
	links     []string
	processes int
}

func snapshotHost(dir string) hostState {
	s := hostState{paths: map[string]bool{}, tunables: readTunables(), processes: len(rigProcesses(filepath.Join(dir, "run")))}
	for _, p := range hostPaths {
		_, err := os.Stat(p)
		s.paths[p] = !errors.Is(err, fs.ErrNotExist)
	}
	entries, _ := os.ReadDir(containerLogLinks)
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join(containerLogLinks, e.Name())); err == nil && strings.HasPrefix(target, dir) {
			s.logLinks++
		}
	}
	for _, l := range []string{nodeLink, podLink} {
		if linkExists(l) {
			s.links = append(s.links, l)
		}
	}
	_, err := os.Stat(filepath.Join(dir, "run"))
	s.leftovers = len(s.links) > 0 || s.processes > 0 || err == nil
	return s
}

// othersShims says whether a live socket of some other containerd's shim is
// in the shim socket directory.
func othersShims() bool {
	live := liveUnixSockets()
	entries, _ := os.ReadDir(shimSocketDir)
	for _, e := range entries {
		if live[filepath.Join(shimSocketDir, e.Name())] {
			return true
		}
	}
	return false
}

// checkClean fails the test for anything of the rig left on the host.
func checkClean(t *testing.T, dir string, before hostState) {
	t.Helper()
	after := snapshotHost(dir)
	for _, p := range hostPaths {
		if before.leftovers && slices.ContainsFunc(fixedHostPaths, func(f struct {
			dir   string
			files []string
		}) bool {
			return f.dir == p
		}) {
			continue
		}
		if after.paths[p] != before.paths[p] {
			if p == "/run/containerd" && othersShims() {
				// Another containerd's shims (a Docker engine's) use it
				// too; the rig leaves their sockets alone.
				t.Logf("%s appeared, in use by another containerd", p)
				continue
			}
			t.Errorf("%s: existed before the rig: %v, after: %v", p, before.paths[p], after.paths[p])
		}
	}
	for k, v := range before.tunables {
		if after.tunables[k] != v {
			t.Errorf("kernel tunable %s was %s before the rig, is %s after", k, v, after.tunables[k])
		}
	}
	if after.logLinks != 0 {
		t.Errorf("%d links to the rig's logs left in %s", after.logLinks, containerLogLinks)
	}
	if len(after.links) != 0 {
		t.Errorf("links left: %v", after.links)
	}
	if pids := rigProcesses(filepath.Join(dir, "run")); len(pids) != 0 {
		t.Errorf("processes of the rig left: %v", pids)
	}
	if m, err := testrig.MountsUnder(dir); err != nil || len(m) != 0 {
		t.Errorf("mounts left under %s: %v %v", dir, m, err)
	}
	points, err := cgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range points {
		if _, err := os.Stat(filepath.Join(p, cgroupName)); err == nil {
			t.Errorf("cgroup left: %s", filepath.Join(p, cgroupName))
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "run")); err == nil {
		t.Errorf("%s left", filepath.Join(dir, "run"))
	}
}

// TestCrashAndStop leaves a cluster with a runc and a gVisor Pod running
// as a crash would (components killed, nothing cleaned up), starts a new
// cluster, which must clean up and work, stops that one, and checks that
// nothing of the rig is left on the host.
func TestCrashAndStop(t *testing.T) {
	Require(t)
	if baseline.leftovers {
		t.Logf("a crashed run's remains were on the host before this test binary: links %v, %d processes", baseline.links, baseline.processes)
	}
	// The first cluster: the shared one, which this test then takes over.
	c := Shared(t)
	shared.mu.Lock()
	shared.c, shared.started = nil, false
	shared.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns, err := c.NewNamespace(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	runPod(t, c, ns, "runc-sleep", "", corev1.PodRunning, "sleep", "infinity")
	runPod(t, c, ns, "gvisor-sleep", RuntimeClassGvisor, corev1.PodRunning, "sleep", "infinity")
	left := rigProcesses(filepath.Join(DefaultDir, "run"))
	mounts, _ := testrig.MountsUnder(DefaultDir)
	c.rig.abandon()
	t.Logf("abandoned a cluster: %d processes and %d mounts left", len(rigProcesses(filepath.Join(DefaultDir, "run"))), len(mounts))
	if len(rigProcesses(filepath.Join(DefaultDir, "run"))) == 0 {
		t.Fatal("the abandoned cluster left no process: the test does not test cleanup")
	}

	c2, err := New(context.Background(), Options{Log: testWriter{t}})
	if err != nil {
		t.Fatalf("start a cluster after a crash: %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = c2.Stop(context.Background())
		}
	}()
	for _, pid := range left {
		if st := procState(fmt.Sprint(pid)); st != "gone" && st != "Z" {
			t.Errorf("process %d of the crashed run survived the next start: %s", pid, procDescribe(fmt.Sprint(pid)))
		}
	}
	ns2, err := c2.NewNamespace(ctx, "after-crash")
	if err != nil {
		t.Fatal(err)
	}
	runPod(t, c2, ns2, "gvisor-true", RuntimeClassGvisor, corev1.PodSucceeded, "true")
	// A Pod that still runs at Stop must go too.
	runPod(t, c2, ns2, "runc-sleep", "", corev1.PodRunning, "sleep", "infinity")
	start := time.Now()
	stopped = true
	if err := c2.Stop(context.Background()); err != nil {
		t.Fatalf("stop: %v", err)
	}
	t.Logf("stopped in %.1fs", time.Since(start).Seconds())
	checkClean(t, DefaultDir, baseline)
	if _, err := os.Stat(filepath.Join(DefaultDir, "last-logs", "kubelet.log")); err != nil {
		t.Errorf("the last run's logs are not kept: %v", err)
	}
}
