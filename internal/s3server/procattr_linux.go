package s3server

import "syscall"

// procAttr puts the server in a process group of its own (Stop kills the
// group) that dies with the process that started it.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
