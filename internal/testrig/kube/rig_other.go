//go:build !linux

package kube

import (
	"context"
	"errors"
)

// errLinux says the rig runs on Linux only.
var errLinux = errors.New("the kube test rig runs on Linux only")

// rig is the machinery behind a Cluster; Linux only.
type rig struct{ dir string }

func newRig(Options) (*rig, error)                                         { return nil, errLinux }
func (r *rig) start(context.Context) (*Cluster, error)                     { return nil, errLinux }
func (r *rig) stop(context.Context) error                                  { return nil }
func (r *rig) logs() map[string]string                                     { return nil }
func (r *rig) rss() []Usage                                                { return nil }
func (r *rig) tail(string, int) string                                     { return "" }
func (r *rig) importLayer(context.Context, string, []byte, []string) error { return errLinux }
