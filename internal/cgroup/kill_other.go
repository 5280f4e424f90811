//go:build !linux

package cgroup

import (
	"errors"
	"os/exec"
	"time"
)

const syscallODirectory = 0

// Kill is not supported off Linux.
func (g *Group) Kill(timeout time.Duration, spare ...int) error {
	return errors.New("cgroups need Linux")
}

func rmdir(dir string) error { return errors.New("cgroups need Linux") }

// Start is not supported off Linux.
func (g *Group) Start(cmd *exec.Cmd) error { return errors.New("cgroups need Linux") }

// Freeze is not supported off Linux.
func (g *Group) Freeze(timeout time.Duration) error { return errors.New("cgroups need Linux") }

// Thaw does nothing off Linux.
func (g *Group) Thaw() {}
