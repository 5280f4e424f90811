package supervisor

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the supervisor's Prometheus collectors.
type Metrics struct {
	// Live counts live sandboxes (pooled ones included) by driver.
	Live *prometheus.GaugeVec
	// Creates counts creates by template and result (ok, error, refused);
	// claims from a pool count as PoolHits instead.
	Creates *prometheus.CounterVec
	// CreateSeconds is the latency of cold creates.
	CreateSeconds prometheus.Histogram
	// ExecSeconds is the wall time of foreground execs.
	ExecSeconds prometheus.Histogram
	// Kills counts destroyed sandboxes by reason (deleted, ttl, idle,
	// ended, lost, shutdown, error).
	Kills *prometheus.CounterVec
	// PoolHits and PoolMisses count creates of pooled templates that found
	// a ready sandbox and that did not.
	PoolHits, PoolMisses *prometheus.CounterVec
	// ClaimSeconds is the latency of claims from a pool.
	ClaimSeconds prometheus.Histogram
	// SnapshotSeconds and RestoreSeconds are the latencies of snapshots
	// and restores.
	SnapshotSeconds, RestoreSeconds prometheus.Histogram
}

// NewMetrics makes the collectors and registers them with reg (nil: none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	fast := []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	m := &Metrics{
		Live: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "airlock_sandboxes_live", Help: "Live sandboxes (pooled ones included) by driver.",
		}, []string{"driver"}),
		Creates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_sandbox_creates_total", Help: "Sandbox creates by template and result (ok, error, refused).",
		}, []string{"template", "result"}),
		CreateSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "airlock_sandbox_create_seconds", Help: "Latency of cold sandbox creates.", Buckets: fast,
		}),
		ExecSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "airlock_exec_duration_seconds", Help: "Wall time of foreground execs.", Buckets: fast,
		}),
		Kills: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_sandbox_kills_total", Help: "Destroyed sandboxes by reason.",
		}, []string{"reason"}),
		PoolHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_pool_hits_total", Help: "Creates served by a warm pool, by template.",
		}, []string{"template"}),
		PoolMisses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_pool_misses_total", Help: "Creates of a pooled template that found no ready sandbox, by template.",
		}, []string{"template"}),
		ClaimSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "airlock_pool_claim_seconds", Help: "Latency of claims from a warm pool.", Buckets: fast,
		}),
		SnapshotSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "airlock_snapshot_seconds", Help: "Latency of snapshots of sandboxes' files.", Buckets: fast,
		}),
		RestoreSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "airlock_restore_seconds", Help: "Latency of restores of sandboxes' files.", Buckets: fast,
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Live, m.Creates, m.CreateSeconds, m.ExecSeconds, m.Kills, m.PoolHits, m.PoolMisses, m.ClaimSeconds, m.SnapshotSeconds, m.RestoreSeconds)
	}
	return m
}
