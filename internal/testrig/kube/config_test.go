package kube

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// TestEvictionAbsolute: the kubelet's disk thresholds are amounts, not
// shares of the disk, and small: a node on a machine with a few GB free
// does not evict the tests' Pods.
func TestEvictionAbsolute(t *testing.T) {
	got, ok := kubeletConfig{}.object()["evictionHard"].(map[string]string)
	if !ok {
		t.Fatalf("evictionHard is %T", kubeletConfig{}.object()["evictionHard"])
	}
	for _, signal := range []string{"nodefs.available", "imagefs.available", "nodefs.inodesFree", "imagefs.inodesFree"} {
		v, ok := got[signal]
		if !ok {
			t.Errorf("%s has no threshold: the kubelet's default is a share of the disk", signal)
			continue
		}
		if strings.HasSuffix(v, "%") {
			t.Errorf("%s: %s is a share of the disk", signal, v)
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			t.Errorf("%s: %v", signal, err)
			continue
		}
		limit := resource.MustParse("512Mi")
		if strings.HasSuffix(signal, "inodesFree") {
			limit = resource.MustParse("10000")
		}
		if q.Cmp(limit) > 0 {
			t.Errorf("%s: %s is more than the tests need (at most %s)", signal, v, limit.String())
		}
	}
}
