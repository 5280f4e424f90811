package main

import (
	"os/exec"
	"sync"
)

// The test process's own children (the daemons and airlock commands a test
// starts and waits for) are told apart from the orphans it adopts as a
// subreaper, so that reapOrphans, which may run in one test while another
// runs beside it (TestServeRestart's drivers), never reaps a child whose
// exec.Cmd still has to wait for it.
var children struct {
	sync.Mutex
	pids map[int]bool
}

// startChild starts cmd as a child reapOrphans leaves alone; forgetChild
// after its Wait.
func startChild(cmd *exec.Cmd) error {
	children.Lock()
	defer children.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	if children.pids == nil {
		children.pids = map[int]bool{}
	}
	children.pids[cmd.Process.Pid] = true
	return nil
}

// forgetChild drops cmd, which has been waited for, from startChild's set.
func forgetChild(cmd *exec.Cmd) {
	children.Lock()
	defer children.Unlock()
	delete(children.pids, cmd.Process.Pid)
}
