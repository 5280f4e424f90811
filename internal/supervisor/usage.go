package supervisor

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// This file holds what the daemon can say about what sandboxes and keys
// use now: a sandbox's memory and CPU (from its driver), its exec count,
// and each key's live sandboxes.

// Usage is what a live sandbox uses now.
type Usage struct {
	sandbox.SandboxUsage
	// CPUCores is the CPU time the sandbox used per second over Window:
	// 1.0 is one core busy all along.
	CPUCores float64
	// Window is the time CPUCores covers: since the previous reading that
	// was at least minCPUWindow earlier, or since the sandbox started.
	Window time.Duration
}

// minCPUWindow is the shortest time a CPU rate is measured over; readings
// closer together share their reference.
const minCPUWindow = time.Second

// cpuSample is a reading of a sandbox's CPU time, the reference of the
// next rate.
type cpuSample struct {
	ms int64
	at time.Time
}

// Usage reads what the live sandbox id uses now. An error wrapping
// sandbox.ErrUnsupported says its driver cannot tell.
func (s *Supervisor) Usage(ctx context.Context, c Caller, id string) (Usage, error) {
	l, err := s.lookupAsIs(c, id)
	if err != nil {
		return Usage{}, err
	}
	return s.usage(ctx, l)
}

func (s *Supervisor) usage(ctx context.Context, l *live) (Usage, error) {
	l.mu.Lock()
	inst, id, created := l.inst, l.rec.ID, l.rec.Created
	l.mu.Unlock()
	ur, ok := inst.(sandbox.UsageReader)
	if !ok {
		return Usage{}, fmt.Errorf("sandbox %s: its driver cannot read what it uses: %w", id, sandbox.ErrUnsupported)
	}
	su, err := ur.Usage(ctx)
	if err != nil {
		return Usage{}, fmt.Errorf("usage of sandbox %s: %w", id, err)
	}
	if su.At.IsZero() {
		su.At = s.opts.Now()
	}
	u := Usage{SandboxUsage: su}
	l.mu.Lock()
	defer l.mu.Unlock()
	ref := l.cpuRef
	if ref.at.IsZero() {
		ref = cpuSample{at: created}
	}
	if u.Window = su.At.Sub(ref.at); u.Window > 0 && su.CPUMS >= ref.ms {
		u.CPUCores = float64(su.CPUMS-ref.ms) / 1000 / u.Window.Seconds()
	}
	if l.cpuRef.at.IsZero() || su.At.Sub(l.cpuRef.at) >= minCPUWindow {
		l.cpuRef = cpuSample{ms: su.CPUMS, at: su.At}
	}
	return u, nil
}

// countExec counts an exec that the policy let run in sandbox id.
func (s *Supervisor) countExec(id string) {
	s.mu.Lock()
	l := s.live[id]
	s.mu.Unlock()
	if l != nil {
		l.execs.Add(1)
	}
}

// KeyUsage is what one key holds now.
type KeyUsage struct {
	// Sandboxes counts its live sandboxes; MemoryBytes is the RAM they can
	// hold together, as its quota counts it.
	Sandboxes   int
	MemoryBytes int64
}

// KeyUsage says what each key holds now, by key id; keys that hold
// nothing are absent.
func (s *Supervisor) KeyUsage() map[string]KeyUsage {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]KeyUsage{}
	for _, l := range s.live {
		if l.owner == "" {
			continue
		}
		u := out[l.owner]
		u.Sandboxes++
		u.MemoryBytes += l.mem
		out[l.owner] = u
	}
	return out
}

// Drivers lists the names of the drivers this daemon offers.
func (s *Supervisor) Drivers() []string {
	out := make([]string, 0, len(s.opts.Drivers))
	for n := range s.opts.Drivers {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
