//go:build !linux

package s3server

import "syscall"

// procAttr puts the server in a process group of its own (Stop kills the
// group).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
