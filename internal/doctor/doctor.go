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
	"errors"
	"runtime"

	"github.com/airlock-sandbox/airlock/internal/hostcap"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
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
	// Note says which backend a working driver uses ("runsc …, platform
	// systrap").
	Note string `json:"note,omitempty"`
	// Why says, when not OK, what the driver's own probe found missing.
	Why string `json:"why,omitempty"`
	// Fix says, when not OK, how to get it.
	Fix string `json:"fix,omitempty"`
	// Capabilities is what the driver's sandboxes can do.
	Capabilities sandbox.Capabilities `json:"capabilities"`
}

// Driver is one driver this build of airlock has, as its table made it.
type Driver struct {
	Name string
	// Driver is the driver; nil when making it failed (Err).
	Driver sandbox.Driver
	Err    error
}

// Run probes the host's layers and asks each driver whether it can run
// sandboxes here.
func Run(ctx context.Context, drivers []Driver) Report {
	layers := hostcap.All(ctx)
	h := hostInfo()
	h.Arch = runtime.GOARCH
	h.Cores = runtime.NumCPU()
	h.GoVersion = runtime.Version()
	h.CgroupMode = hostcap.CgroupMode()
	r := Report{Host: h, Layers: layers, Drivers: []DriverStatus{}}
	for _, d := range drivers {
		r.Drivers = append(r.Drivers, status(ctx, d))
	}
	return r
}

// status asks one driver's Probe.
func status(ctx context.Context, d Driver) DriverStatus {
	s := DriverStatus{Name: d.Name, Capabilities: sandbox.Capabilities{Languages: []string{}}}
	err := d.Err
	if d.Driver != nil {
		s.Capabilities = d.Driver.Capabilities()
		if s.Capabilities.Languages == nil {
			s.Capabilities.Languages = []string{}
		}
		err = d.Driver.Probe(ctx)
		if ds, ok := d.Driver.(sandbox.Describer); ok {
			s.Note = ds.Describe()
		}
	}
	if err == nil {
		s.OK = true
		return s
	}
	s.Why = err.Error()
	var le *sandbox.LayerError
	var ue *sandbox.UnsupportedError
	switch {
	case errors.As(err, &le):
		s.Why, s.Fix = string(le.Layer)+": "+le.Why, le.Fix
	case errors.As(err, &ue):
		s.Why, s.Fix = ue.Why, ue.Fix
	}
	return s
}
