package kube

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-sandbox/airlock/internal/testcap"
)

// Capabilities are the host capabilities (testcap.Names) a cluster needs.
var Capabilities = []string{"root", "runsc", "kubernetes"}

// Require skips the test unless this host can run the rig (or fails it,
// when AIRLOCK_TEST_REQUIRE names the missing capability).
func Require(t testing.TB) {
	t.Helper()
	testcap.Require(t, Capabilities...)
}

// Start starts a cluster for this test alone and stops it when the test
// ends; when the test failed, the components' last log lines are logged.
// Prefer Shared: a start takes seconds and the machine runs one cluster at
// a time.
func Start(t testing.TB) *Cluster {
	t.Helper()
	Require(t)
	c, err := New(context.Background(), Options{Log: testWriter{t}})
	if err != nil {
		t.Fatalf("start the kube test rig: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.LogTails(t)
		}
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("stop the kube test rig: %v", err)
		}
	})
	return c
}

// shared is the test binary's cluster.
var shared struct {
	mu      sync.Mutex
	inMain  bool
	started bool
	c       *Cluster
	err     error
}

// Shared returns the test binary's cluster, starting it on first use.
// The test binary's TestMain must call Main, which stops it.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	Require(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.inMain {
		t.Fatalf("kube.Shared needs the test binary's TestMain to run os.Exit(kube.Main(m)), which stops the cluster")
	}
	if !shared.started {
		shared.started = true
		shared.c, shared.err = New(context.Background(), Options{Log: os.Stderr})
	}
	if shared.err != nil {
		t.Fatalf("start the kube test rig: %v", shared.err)
	}
	c := shared.c
	t.Cleanup(func() {
		if t.Failed() {
			c.LogTails(t)
		}
	})
	return c
}

// Main runs the tests, then stops the shared cluster if a test started it.
// Use it as TestMain's body: os.Exit(kube.Main(m)).
func Main(m *testing.M) int {
	shared.mu.Lock()
	shared.inMain = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.c != nil {
		if err := shared.c.Stop(context.Background()); err != nil {
			fmt.Fprintf(os.Stderr, "stop the kube test rig: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
		shared.c = nil
	}
	return code
}

// LogTails logs the last lines of every component's log, for a failed
// test.
func (c *Cluster) LogTails(t testing.TB) {
	t.Helper()
	logs := c.Logs()
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range logs {
			if !yield(n) {
				return
			}
		}
	}) {
		t.Logf("the last lines of %s's log (kept in %s after the cluster stops):\n%s", name, c.LogDir(), c.Tail(name, 10))
	}
}

// Namespace creates a namespace for the test, named after it, and deletes
// it (with its Pods) when the test ends.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := c.NewNamespace(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		zero := int64(0)
		if err := c.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Errorf("delete namespace %s: %v", ns, err)
		}
	})
	return ns
}

// NewNamespace creates a namespace whose name starts with prefix (made
// fit for a name), and waits for its default service account, which Pods
// need and the controller manager makes.
func (c *Cluster) NewNamespace(ctx context.Context, prefix string) (string, error) {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(prefix))
	if len(name) > 40 {
		name = name[:40]
	}
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: strings.Trim(name, "-") + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create a namespace: %w", err)
	}
	for {
		_, err := c.Client.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return ns.Name, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("namespace %s has no default service account (made by kube-controller-manager, whose log is %s): %w",
				ns.Name, c.Logs()["kube-controller-manager"], err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// testWriter sends progress lines to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
