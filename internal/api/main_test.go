package api

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/airlock-sandbox/airlock/internal/agentbin/agenttest"
)

// TestMain runs the API's tests, then fails them if they left goroutines
// or file descriptors behind: every request, stream, transfer and sandbox
// of the suite must be gone once it has ended.
func TestMain(m *testing.M) { agenttest.Main(leakChecked{m}) }

type leakChecked struct{ m *testing.M }

// forker is the native driver's one thread that forks agents, which lives
// as long as the process.
const forker = "github.com/airlock-sandbox/airlock/internal/driver/native.runForker"

func (l leakChecked) Run() int {
	before := openFDs()
	code := l.m.Run()
	if code != 0 {
		return code
	}
	if err := goleak.Find(goleak.IgnoreAnyFunction(forker)); err != nil {
		fmt.Fprintf(os.Stderr, "the API tests leaked goroutines:\n%v\n", err)
		return 1
	}
	// Descriptors close a little after their goroutines end.
	var after map[string]string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		after = openFDs()
		if len(after) <= len(before) || time.Now().After(deadline) {
			break
		}
	}
	var left []string
	for fd, target := range after {
		if _, ok := before[fd]; !ok {
			left = append(left, fd+" -> "+target)
		}
	}
	if len(after) > len(before) {
		fmt.Fprintf(os.Stderr, "the API tests leaked %d file descriptors (%d open before, %d after):\n%s\n", len(after)-len(before), len(before), len(after), strings.Join(left, "\n"))
		return 1
	}
	return 0
}

// openFDs maps this process's open descriptors to what they point at.
func openFDs() map[string]string {
	ents, _ := os.ReadDir("/proc/self/fd")
	out := map[string]string{}
	for _, e := range ents {
		// The one ReadDir itself read is closed by now: skip it.
		if t, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil {
			out[e.Name()] = t
		}
	}
	return out
}
