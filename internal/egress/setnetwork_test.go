package egress

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TestSetNetwork checks that a sandbox's rules change while it runs: what
// the new rules refuse is refused from then on, what they allow is allowed,
// and a tunnel the old rules admitted is closed at the change.
func TestSetNetwork(t *testing.T) {
	f := newFixture(t, Limits{RequestsPerSecond: 1000, Burst: 1000}, nil, nil)
	u := fmt.Sprintf("http://allowed.test:%d/", f.a.addr.Port())
	if st, _ := f.get(t, u); st != http.StatusOK {
		t.Fatalf("before the change: %d", st)
	}
	resp, _, tunnel, _ := f.connect(t, fmt.Sprintf("allowed.test:%d", f.a.addr.Port()))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT before the change: %s", resp.Status)
	}
	if err := f.sb.SetNetwork(sandbox.Network{Mode: sandbox.NetworkEgress}); err != nil {
		t.Fatal(err)
	}
	if st, body := f.get(t, u); st != http.StatusForbidden {
		t.Errorf("after a change to allow nothing: %d %q, want 403", st, body)
	}
	_ = tunnel.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := tunnel.Read(make([]byte, 1)); err == nil {
		t.Error("a tunnel the old rules admitted is still open after the change")
	}
	if err := f.sb.SetNetwork(sandbox.Network{Mode: sandbox.NetworkEgress, AllowHosts: []string{fmt.Sprintf("allowed.test:%d", f.a.addr.Port())}, AllowAddresses: []string{f.a.addr.String()}}); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.get(t, u); st != http.StatusOK {
		t.Errorf("after a change allowing it again: %d", st)
	}
	if err := f.sb.SetNetwork(sandbox.Network{Mode: sandbox.NetworkNone}); err == nil {
		t.Error("SetNetwork to mode none: no error")
	}
}
