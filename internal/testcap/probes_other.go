//go:build !linux

package testcap

import (
	"context"

	"github.com/airlock-sandbox/airlock/internal/hostcap"
)

// rigs maps each of rigNames to a probe that says Linux is needed.
var rigs = func() map[string]rigProbe {
	m := make(map[string]rigProbe, len(rigNames))
	for _, n := range rigNames {
		m[n] = rigProbe{run: func(context.Context) hostcap.Result {
			return hostcap.Result{Why: "needs Linux", Fix: "run the tests on Linux"}
		}}
	}
	return m
}()
