package supervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/driver/fake"
	"github.com/airlock-sandbox/airlock/internal/hosttasks"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// TestAdmissionCountsHostTasks: near kernel.pid_max admission refuses a
// sandbox, naming the limit and how to raise it, instead of letting forks
// fail and agents die for want of a thread; with room it admits.
func TestAdmissionCountsHostTasks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	defer func(c hosttasks.Counter) { hostTasks = c }(hostTasks)
	hostTasks = hosttasks.Counter{
		PidMax:     write("pid_max", "32768\n"),
		ThreadsMax: write("threads-max", "192729\n"),
		LoadAvg:    write("loadavg", "1.00 1.00 1.00 3/31800 12345\n"),
	}
	st, err := store.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sup, err := New(Options{Store: st, Drivers: map[string]sandbox.Driver{"native": &fake.Driver{}},
		MemAvailable: func() (int64, error) { return 64 << 30, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close(context.Background())
	ctx := context.Background()
	_, err = sup.Create(ctx, alice, CreateRequest{})
	if !errors.Is(err, ErrCapacity) || !strings.Contains(err.Error(), "kernel.pid_max") || !strings.Contains(err.Error(), "sysctl -w kernel.pid_max=") {
		t.Fatalf("31,800 of 32,768 tasks in use: %v", err)
	}
	write("loadavg", "1.00 1.00 1.00 3/2000 12345\n")
	if _, err := sup.Create(ctx, alice, CreateRequest{}); err != nil {
		t.Fatalf("2,000 of 32,768 tasks in use: %v", err)
	}
}
