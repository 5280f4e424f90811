//go:build !linux

package hostcap

import (
	"context"
	"errors"
)

// probes maps each of Names to a probe that says Linux is needed.
var probes = func() map[string]probe {
	m := make(map[string]probe, len(Names))
	for _, n := range Names {
		m[n] = probe{run: func(context.Context) Result {
			return Result{Why: "needs Linux", Fix: "run airlock on Linux"}
		}}
	}
	return m
}()

// CgroupMode says how this host mounts cgroups; "" off Linux.
func CgroupMode() string { return "" }

// CgroupControllers says Linux is needed.
func CgroupControllers() ([]string, string, error) { return nil, "", errors.New("cgroups need Linux") }
