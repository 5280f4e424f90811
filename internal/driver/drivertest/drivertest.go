// Package drivertest is what the tests of the drivers whose sandboxes run
// on this host (native, gvisor, and the microVM driver to come) share:
// finding what a closed sandbox left on the host.
package drivertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/hostcap"
	"github.com/airlock-sandbox/airlock/internal/mountinfo"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Leaks fails t when find, called right after sandbox id was closed, finds
// anything of it on the host. It looks again 2 s later and reports both, so
// that a slow teardown reads differently from a leak.
func Leaks(t testing.TB, id string, find func() []string) {
	t.Helper()
	found := find()
	if len(found) == 0 {
		return
	}
	time.Sleep(2 * time.Second)
	later := find()
	t.Errorf("sandbox %s left this on the host right after Close:\n  %s\n2 s later, %d of them remain:\n  %s",
		id, strings.Join(found, "\n  "), len(later), strings.Join(later, "\n  "))
}

// HostLeaks lists what any driver's sandbox id can leave on this host: a
// process in its cgroups, its cgroup directory in any hierarchy (below the
// group airlock), its lock file below the state directory /run/airlock.
func HostLeaks(id string) []string {
	var found []string
	for _, p := range Procs() {
		if line := p.SandboxCgroup(id); line != "" {
			found = append(found, fmt.Sprintf("process %d (%s, state %s) is in the sandbox's cgroups: %s", p.PID, p.Name, p.State, line))
		}
	}
	for _, dir := range CgroupDirs(id) {
		found = append(found, "cgroup directory "+dir)
	}
	if lock := filepath.Join("/run/airlock/sandboxes", id+".lock"); exists(lock) {
		found = append(found, "lock file "+lock)
	}
	for _, ext := range []string{".sock", ".log"} {
		if p := filepath.Join("/run/airlock/sessions", id+ext); exists(p) {
			found = append(found, "session file "+p)
		}
	}
	return found
}

// CgroupDirs lists the directories of sandbox id's cgroup (airlock/<id>)
// that exist in any cgroup hierarchy of the host.
func CgroupDirs(id string) []string {
	mounts, _ := mountinfo.Read()
	var out []string
	for _, m := range mounts {
		if m.FSType != "cgroup" && m.FSType != "cgroup2" {
			continue
		}
		if dir := filepath.Join(m.Point, "airlock", id); exists(dir) {
			out = append(out, dir)
		}
	}
	return out
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// Proc is a process of the host.
type Proc struct {
	PID         int
	Name, State string
	UIDs        []int    // real, effective, saved, file system
	Cgroup      string   // /proc/<pid>/cgroup
	Cmdline     []string // its arguments
}

// Procs lists the host's processes; one that ends meanwhile is left out.
func Procs() []Proc {
	ents, _ := os.ReadDir("/proc")
	var ps []Proc
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "status"))
		if err != nil {
			continue // gone meanwhile
		}
		cg, _ := os.ReadFile(filepath.Join("/proc", ent.Name(), "cgroup"))
		cmdline, _ := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		p := Proc{PID: pid, Cgroup: string(cg), Cmdline: strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")}
		for _, line := range strings.Split(string(status), "\n") {
			k, v, _ := strings.Cut(line, ":")
			v = strings.TrimSpace(v)
			switch k {
			case "Name":
				p.Name = v
			case "State":
				p.State = v
			case "Uid":
				for _, f := range strings.Fields(v) {
					if u, err := strconv.Atoi(f); err == nil {
						p.UIDs = append(p.UIDs, u)
					}
				}
			}
		}
		ps = append(ps, p)
	}
	return ps
}

// SandboxCgroup returns the first line of p's cgroups that names sandbox
// id's group (airlock/<id>, or a group below it), or "".
func (p Proc) SandboxCgroup(id string) string {
	for _, line := range strings.Split(p.Cgroup, "\n") {
		if strings.Contains(line, "/airlock/"+id+"/") || strings.HasSuffix(line, "/airlock/"+id) {
			return line
		}
	}
	return ""
}

// Cgroups names the testcap capability of the cgroups the drivers use on
// this host: "cgroupv1" wherever all their v1 controllers are mounted, as on
// hybrid hosts, and "cgroupv2" on a unified host.
func Cgroups() string {
	if hostcap.CgroupMode() == "v2" {
		return "cgroupv2"
	}
	return "cgroupv1"
}

// Sandbox makes a sandbox with d that is closed when the test ends, and
// then checked with leaks.
func Sandbox(t *testing.T, d sandbox.Driver, spec sandbox.Spec, leaks func(t *testing.T, id string)) sandbox.Instance {
	t.Helper()
	in, err := d.Create(t.Context(), spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		if err := in.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
		leaks(t, in.ID())
	})
	return in
}

// Run runs argv in in and returns its standard output, its standard error
// and how it ended; an error fails t.
func Run(t testing.TB, in sandbox.Instance, argv ...string) (stdout, stderr string, res sandbox.Result) {
	t.Helper()
	var out, errb strings.Builder
	res, err := sandbox.Run(t.Context(), in, sandbox.ExecRequest{Argv: argv, Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("exec %q: %v", argv, err)
	}
	return out.String(), errb.String(), res
}
