// Package doctor reports what this host can run: which isolation layers
// work, which drivers they enable, and for each thing missing, why and how
// to fix it. It backs `airlock doctor [--json]`:
//
//	r := doctor.Run(ctx)
//	if jsonOut {
//		return json.NewEncoder(stdout).Encode(r)
//	}
//	return r.WriteText(stdout)
package doctor

import (
	"context"
	"runtime"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/hostcap"
)

// Report is what doctor found. Its JSON form uses snake_case keys.
type Report struct {
	Host    HostInfo         `json:"host"`
	Layers  []hostcap.Result `json:"layers"`
	Drivers []DriverStatus   `json:"drivers"`
}

// HostInfo describes the machine.
type HostInfo struct {
	Kernel      string `json:"kernel"`       // kernel release, "6.18.44"
	OS          string `json:"os"`           // distribution, "Debian GNU/Linux 12 (bookworm)"
	Arch        string `json:"arch"`         // GOARCH, "amd64"
	Cores       int    `json:"cores"`        // logical CPUs
	MemoryBytes uint64 `json:"memory_bytes"` // total RAM; 0 when unknown
	GoVersion   string `json:"go_version"`   // Go that built airlock
	CgroupMode  string `json:"cgroup_mode"`  // "v1", "v2", "hybrid", or "" for none
}

// DriverStatus says whether a driver can run sandboxes here.
type DriverStatus struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Note qualifies a working driver ("software emulation (TCG): slow").
	Note string `json:"note,omitempty"`
	// Why says, when not OK, which needed layers are missing and why.
	Why string `json:"why,omitempty"`
	// Fix lists, when not OK, what provides the missing layers.
	Fix string `json:"fix,omitempty"`
	// Needs names the layers (hostcap.Names) the driver needs; "a|b" means
	// either will do.
	Needs []string `json:"needs"`
}

// Run probes the host and derives the drivers' status.
func Run(ctx context.Context) Report {
	layers := hostcap.All(ctx)
	h := hostInfo()
	h.Arch = runtime.GOARCH
	h.Cores = runtime.NumCPU()
	h.GoVersion = runtime.Version()
	h.CgroupMode = hostcap.CgroupMode()
	return Report{Host: h, Layers: layers, Drivers: markUnbuilt(drivers(layers))}
}

// markUnbuilt reports the drivers this version of airlock does not have as
// missing, keeping what the host would need for them.
func markUnbuilt(ds []DriverStatus) []DriverStatus {
	for i, s := range ds {
		built := false
		for _, d := range driverNeeds {
			if d.name == s.Name {
				built = d.built
			}
		}
		if built {
			continue
		}
		if s.OK {
			s.Note = "the host has what it needs"
		}
		s.Why = strings.TrimSuffix(notBuilt+"; "+s.Why, "; ")
		s.OK = false
		if s.Fix == "" {
			s.Fix = "use --driver native"
		}
		ds[i] = s
	}
	return ds
}

// driverNeeds lists, per driver, the groups of layers it needs: one layer
// of each group must work.
// built says whether this version of airlock has the driver at all; a
// driver it does not have is never reported as usable, whatever the host has.
var driverNeeds = []struct {
	name  string
	built bool
	needs [][]string
}{
	{"native", true, [][]string{{"root"}, {"userns"}, {"cgroupv1", "cgroupv2"}, {"seccomp"}, {"landlock"}}},
	// runsc runs rootful here: it makes the sandbox's namespaces and
	// cgroups (the driver's own cgroup holds gVisor and the workload).
	{"gvisor", true, [][]string{{"root"}, {"cgroupv1", "cgroupv2"}, {"runsc"}}},
	// QEMU is the VMM; KVM only speeds it up (see microvmNote).
	{"microvm", false, [][]string{{"qemu"}}},
	{"docker", false, [][]string{{"docker"}}},
	{"wasm", false, nil},
}

// notBuilt is the Why of a driver this version of airlock does not have.
const notBuilt = "this version of airlock does not have this driver yet"

// drivers derives each driver's status from the layer results.
func drivers(layers []hostcap.Result) []DriverStatus {
	byName := map[string]hostcap.Result{}
	for _, l := range layers {
		byName[l.Name] = l
	}
	layer := func(name string) hostcap.Result {
		if r, ok := byName[name]; ok {
			return r
		}
		return hostcap.Result{Name: name, Why: "not probed"}
	}
	var out []DriverStatus
	for _, d := range driverNeeds {
		s := DriverStatus{Name: d.name, OK: true, Needs: []string{}}
		var whys, fixes []string
		for _, group := range d.needs {
			s.Needs = append(s.Needs, strings.Join(group, "|"))
			if slices.ContainsFunc(group, func(n string) bool { return layer(n).OK }) {
				continue
			}
			s.OK = false
			for _, n := range group {
				r := layer(n)
				whys = append(whys, n+": "+r.Why)
				if r.Fix != "" && !slices.Contains(fixes, r.Fix) {
					fixes = append(fixes, r.Fix)
				}
			}
		}
		if !s.OK {
			s.Why = strings.Join(whys, "; ")
			s.Fix = strings.Join(fixes, "; ")
		}

		switch d.name {
		case "gvisor":
			// Which runsc, which platform: the probe says
			// ("runsc v0.0.0-…, platform systrap, built by make runsc").
			if r := layer("runsc"); r.OK {
				s.Note = r.Detail
			}
		case "microvm":
			if s.OK {
				s.Note = microvmNote(layer("kvm"))
			}
		case "wasm":
			s.Note = "in-process (WebAssembly), needs nothing from the host"
		}
		out = append(out, s)
	}
	return out
}

// microvmNote says how fast microVMs run, given the kvm layer.
func microvmNote(kvm hostcap.Result) string {
	if kvm.OK {
		return "hardware virtualization (KVM)"
	}
	return "software emulation (TCG): slow; kvm: " + kvm.Why
}
