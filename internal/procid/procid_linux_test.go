package procid

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

func TestStartTimeNamesOneProcess(t *testing.T) {
	st, err := StartTime(os.Getpid())
	if err != nil || st == 0 {
		t.Fatalf("StartTime(self) = %d, %v", st, err)
	}
	f, err := OpenPid(os.Getpid(), st)
	if err != nil {
		t.Fatalf("OpenPid(self, its start) = %v", err)
	}
	f.Close()
	if _, err := OpenPid(os.Getpid(), st+1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenPid(self, another start) = %v, want os.ErrNotExist", err)
	}
}

func TestWatchPidfdSeesExitAndKills(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	st, err := StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	f, err := OpenPid(cmd.Process.Pid, st)
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	w, err := WatchPidfd(f, func() { close(exited) })
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := w.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not see the process exit")
	}
	<-done
	if err := w.Kill(); err != nil {
		t.Errorf("Kill of a process gone already: %v", err)
	}
}

func TestPeerOfIsTheListener(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			defer c.Close()
			time.Sleep(time.Second)
		}
	}()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := PeerOf(c.(*net.UnixConn))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Pidfd.Close()
	if p.Pid != os.Getpid() || p.UID != os.Geteuid() {
		t.Errorf("PeerOf = pid %d uid %d, want %d %d", p.Pid, p.UID, os.Getpid(), os.Geteuid())
	}
}
