package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// RecoverReport says what Recover found.
type RecoverReport struct {
	// Lost lists the sandboxes that were live when the previous daemon
	// stopped; they are now recorded as lost.
	Lost []string
	// Reaped lists the drivers whose orphans were swept.
	Reaped []string
}

// lostReason is the end reason of sandboxes found live on start.
const lostReason = "lost"

// Recover runs before the daemon serves: every sandbox the registry holds
// as live belonged to a previous daemon. Its processes are already dead —
// the native driver's sandbox agents die with the process that made them —
// so each record is marked lost, and each driver then reaps the cgroups
// and locks those sandboxes left behind. No sandbox is reattached.
func (s *Supervisor) Recover(ctx context.Context) (RecoverReport, error) {
	var rep RecoverReport
	lost, err := s.store.MarkLost(s.opts.Now().UTC(), lostReason)
	if err != nil {
		return rep, fmt.Errorf("recover: %w", err)
	}
	for _, r := range lost {
		rep.Lost = append(rep.Lost, r.ID)
		s.m.Kills.WithLabelValues(lostReason).Inc()
		s.log.Warn("sandbox lost with the previous daemon", "sandbox_id", r.ID, "owner", r.Owner, "state_before", "live")
		// Every sandbox the daemon ends leaves an audit event, these too:
		// its execs and background processes ended with it.
		s.recordAfter(ctx, audit.Event{Kind: audit.KindDestroy, Key: r.Owner, Sandbox: r.ID, Template: r.Template,
			Reason: lostReason + ": the previous daemon died; the sandbox and every exec and process it ran ended with it"})
	}
	rep.Reaped = s.sweep(ctx)
	s.log.Info("recovered", "lost", len(rep.Lost), "reaped_drivers", rep.Reaped)
	return rep, nil
}

// sweep has every driver that can remove the leftovers of dead sandboxes
// do so, and returns their names.
func (s *Supervisor) sweep(ctx context.Context) []string {
	var names []string
	for name, d := range s.opts.Drivers {
		if sw, ok := d.(sandbox.Sweeper); ok {
			if err := sw.Sweep(ctx); err != nil {
				s.log.Warn("sweep the leftovers of dead sandboxes", "driver", name, "err", err)
			}
			names = append(names, name)
		}
	}
	return names
}

// Run enforces TTLs and idle timeouts, sweeps orphans, prunes old records
// and keeps the pools filled, until ctx is done or Close is called.
func (s *Supervisor) Run(ctx context.Context) {
	for _, p := range s.pools {
		s.wg.Add(1)
		go s.fill(p)
	}
	reap := time.NewTicker(time.Duration(s.cfg.ReapInterval))
	defer reap.Stop()
	sweep := time.NewTicker(time.Duration(s.cfg.SweepInterval))
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.stop:
			return
		case <-reap.C:
			s.ReapExpired()
		case <-sweep.C:
			s.sweep(ctx)
			if n, err := s.store.PruneEnded(s.opts.Now().Add(-time.Duration(s.cfg.Retention))); err != nil {
				s.log.Warn("prune ended sandboxes", "err", err)
			} else if n > 0 {
				s.log.Info("pruned records of ended sandboxes", "count", n)
			}
		}
	}
}

// ReapExpired destroys every owned sandbox past its TTL or idle for longer
// than its idle timeout, and returns how many it destroyed.
func (s *Supervisor) ReapExpired() int {
	now := s.opts.Now()
	type victim struct {
		l           *live
		reason, why string
	}
	var vs []victim
	s.mu.Lock()
	for _, l := range s.live {
		l.mu.Lock()
		rec, ready := l.rec, l.inst != nil && !l.ending
		l.mu.Unlock()
		if !ready || rec.State != store.StateRunning {
			continue
		}
		idleFor := now.Sub(time.Unix(0, l.lastActive.Load()))
		switch {
		case !rec.ExpiresAt.IsZero() && now.After(rec.ExpiresAt):
			vs = append(vs, victim{l, "ttl", "its time to live ran out"})
		case rec.IdleTimeout > 0 && l.busy.Load() == 0 && idleFor > rec.IdleTimeout:
			vs = append(vs, victim{l, "idle", fmt.Sprintf("unused for %s", idleFor.Round(time.Second))})
		}
	}
	s.mu.Unlock()
	for _, v := range vs {
		s.end(v.l, v.reason, v.why)
	}
	return len(vs)
}

// memAvailable reads MemAvailable from /proc/meminfo.
func memAvailable() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		if rest, ok := bytes.CutPrefix(line, []byte("MemAvailable:")); ok {
			f := bytes.Fields(rest)
			if len(f) == 0 {
				break
			}
			kb, err := strconv.ParseInt(string(f[0]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse MemAvailable: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no MemAvailable in /proc/meminfo")
}
