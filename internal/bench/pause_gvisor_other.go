//go:build !linux

package bench

import "context"

// pauseRows: gVisor runs on Linux only.
func pauseRows(context.Context, Options, func(string, ...any)) []Row {
	return []Row{{Section: "pause", ID: "pause/gvisor-256m", What: "gVisor pause and resume", Status: StatusMissing, Detail: "gVisor runs on Linux only"}}
}
