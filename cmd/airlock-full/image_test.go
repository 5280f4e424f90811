package main

import (
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-sandbox/airlock/internal/image"
	"github.com/airlock-sandbox/airlock/internal/supervisor"
)

// TestImagePullMetrics: the daemon's /metrics shows a pull in progress,
// the bytes it fetched and those of the layers it began, until it ends.
func TestImagePullMetrics(t *testing.T) {
	d := &daemonImages{log: slog.New(slog.DiscardHandler)}
	reg := prometheus.NewRegistry()
	reg.MustRegister(d.collectors()...)
	gauge := func(name string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	want := func(step string, pulls, bytes, layerBytes float64) {
		t.Helper()
		got := []float64{gauge("airlock_image_pulls"), gauge("airlock_image_pull_bytes"), gauge("airlock_image_pull_layer_bytes")}
		if got[0] != pulls || got[1] != bytes || got[2] != layerBytes {
			t.Errorf("%s: pulls, bytes, layer bytes %v, want %v", step, got, []float64{pulls, bytes, layerBytes})
		}
	}
	const ref = "registry.example/py:3"
	d.progress(image.Event{Phase: "resolve", Ref: ref})
	want("resolved", 1, 0, 0)
	d.progress(image.Event{Phase: "layer", Ref: ref, Layer: 1, Layers: 2, Done: 10, Total: 100})
	want("layer 1 begun", 1, 10, 100)
	d.progress(image.Event{Phase: "layer", Ref: ref, Layer: 1, Layers: 2, Done: 100, Total: 100})
	d.progress(image.Event{Phase: "layer", Ref: ref, Layer: 2, Layers: 2, Done: 5, Total: 50})
	want("layer 2 begun", 1, 105, 150)
	// The creates that wait for it show the same (the API's "pull").
	if p, ok := d.PullOf(ref); !ok || p != (supervisor.ImagePull{Image: ref, Layer: 2, Layers: 2, Bytes: 105}) {
		t.Errorf("PullOf while pulling: %+v %v", p, ok)
	}
	d.progress(image.Event{Phase: "done", Ref: ref})
	want("done", 0, 0, 0)
	if p, ok := d.PullOf(ref); ok {
		t.Errorf("PullOf once done: %+v", p)
	}
	if n := gauge("airlock_image_creates_waiting"); n != 0 {
		t.Errorf("%v creates waiting, want 0", n)
	}
}
