// Command pause is the sandbox ("pause") container of the kube test rig's
// Pods, in place of registry.k8s.io/pause, which the rig cannot pull: it
// holds the Pod's namespaces, reaps the orphans it inherits as PID 1, and
// exits on SIGINT or SIGTERM.
//
// The rig builds it from this file (embedded in package kubebin) in a
// throwaway module, so its build does not depend on this repository.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
