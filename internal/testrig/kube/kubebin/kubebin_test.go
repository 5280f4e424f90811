package kubebin

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestBinaryName(t *testing.T) {
	for _, tc := range []struct{ pkg, want string }{
		{"k8s.io/kubernetes/cmd/kubelet", "kubelet"},
		{"go.etcd.io/etcd/server/v3", "server"},
		{"github.com/containerd/containerd/v2/cmd/ctr", "ctr"},
		{"gvisor.dev/gvisor/shim", "shim"},
		{"example.com/v2x", "v2x"},
		{"airlock.invalid/pause", "pause"},
	} {
		if got := binaryName(tc.pkg); got != tc.want {
			t.Errorf("binaryName(%q) = %q, want %q", tc.pkg, got, tc.want)
		}
	}
}

func TestStagingModules(t *testing.T) {
	gomod := `module k8s.io/kubernetes

go 1.26.0

require (
	k8s.io/api v0.0.0
	github.com/x/y v1.0.0
)

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/client-go => ./staging/src/k8s.io/client-go
	github.com/x/y => github.com/x/y v1.0.1
)

replace k8s.io/kubelet => ./staging/src/k8s.io/kubelet
`
	got := stagingModules([]byte(gomod))
	want := []string{"k8s.io/api", "k8s.io/client-go", "k8s.io/kubelet"}
	if !slices.Equal(got, want) {
		t.Errorf("stagingModules = %v, want %v", got, want)
	}
}

// TestFindMissing: an empty cache names every group and says how to build.
func TestFindMissing(t *testing.T) {
	_, err := Find(t.TempDir())
	if !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("Find(empty) = %v, want ErrNotBuilt", err)
	}
	for _, s := range []string{"kubernetes " + KubernetesVersion, "etcd " + EtcdVersion, "containerd " + ContainerdVersion, "make kube-rig"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the error does not say %q: %v", s, err)
		}
	}
}

// TestFindChecksSizes: a program that does not match its manifest (a torn
// copy) makes its group count as missing.
func TestFindChecksSizes(t *testing.T) {
	cache := t.TempDir()
	for _, g := range groups() {
		dir := g.dir(cache)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		sizes := ""
		for name := range g.bins {
			if err := os.WriteFile(filepath.Join(dir, name), []byte("12345"), 0o755); err != nil {
				t.Fatal(err)
			}
			sizes += `"` + name + `": 5,`
		}
		m := `{"group": "` + g.name + `", "sizes": {` + strings.TrimSuffix(sizes, ",") + `}}`
		if err := os.WriteFile(filepath.Join(dir, manifestName), []byte(m), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set, err := Find(cache)
	if err != nil {
		t.Fatalf("Find: %v", err)
	}
	if got := set.Path(Kubelet); !strings.HasPrefix(got, cache) {
		t.Errorf("kubelet at %q, not in the cache", got)
	}
	if err := os.WriteFile(set.Path(Etcd), []byte("123"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Find(cache); err == nil || !strings.Contains(err.Error(), "etcd "+EtcdVersion) {
		t.Errorf("Find with a torn etcd = %v, want it to name etcd", err)
	}
}

// TestKeyChangesWithPin: a group's directory changes with its version, so
// that a new pin is rebuilt.
func TestKeyChangesWithPin(t *testing.T) {
	g := groups()[0]
	h := g
	h.version = "v9.9.9"
	if g.dir("/c") == h.dir("/c") {
		t.Errorf("the directory does not change with the version: %s", g.dir("/c"))
	}
}
