//go:build !linux

package cgroup

import (
	"errors"
	"time"
)

const syscallODirectory = 0

// Kill is not supported off Linux.
func (g *Group) Kill(timeout time.Duration, spare ...int) error {
	return errors.New("cgroups need Linux")
}

func rmdir(dir string) error { return errors.New("cgroups need Linux") }
