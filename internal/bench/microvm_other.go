//go:build !linux

package bench

import "context"

// bareBoot needs the microvm driver, which needs Linux.
func bareBoot(context.Context) ([]string, string) { return nil, "the microvm driver needs Linux" }

// microvmRows reports the microVM rows as failed off Linux.
func microvmRows(context.Context, Options, func(string, ...any)) ([]Row, error) {
	var rows []Row
	for _, id := range []string{"cold", "snapshot", "exec", "idle-pss", "pause-256m", "pause-image-256m", "resume-256m", "pause-1g", "pause-image-1g", "resume-1g"} {
		rows = append(rows, Row{Section: "microvm", ID: "microvm/" + id, What: "microvm " + id, Status: StatusFailed, Detail: "the microvm driver needs Linux"})
	}
	return rows, nil
}
