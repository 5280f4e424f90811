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

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

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
			s.flushActivity()
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
		l.expireProcs(now)
		l.mu.Lock()
		rec, ready := l.rec, l.inst != nil && !l.ending
		l.mu.Unlock()
		if rec.State == store.StatePaused && !l.ending && rec.Paused != nil && now.After(rec.Paused.Until) {
			vs = append(vs, victim{l, "paused_ttl", "it stayed paused past its paused TTL"})
			continue
		}
		if !ready || rec.State != store.StateRunning {
			continue
		}
		idleFor := now.Sub(time.Unix(0, l.lastActive.Load()))
		switch {
		case !rec.ExpiresAt.IsZero() && now.After(rec.ExpiresAt):
			if s.pauseAtTTL(l, rec) {
				continue
			}
			vs = append(vs, victim{l, "ttl", "its time to live ran out"})
		case rec.IdleTimeout > 0 && l.mismatch == "" && l.busy.Load() == 0 && idleFor > rec.IdleTimeout:
			// (A sandbox of another agent protocol cannot be used, so it
			// is never idle on purpose: it runs until its TTL.)
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
