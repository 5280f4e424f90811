package kubernetes

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/airlock-sandbox/airlock/internal/hostlock"
)

// What the janitor (docs/decisions.md, 51) asks of this driver: a Pod whose
// agent ended the sandbox at its TTL while no daemon was attached stays,
// in phase Succeeded, for nothing in the cluster deletes an ended Pod.

// SweepEnded deletes the ended Pods (phase Succeeded or Failed) of this
// driver's Instance whose sandbox lock no live process holds, and says
// whether Pods of it still run.
func (d *Driver) SweepEnded(ctx context.Context) (running bool, err error) {
	k, err := d.client()
	if err != nil {
		return false, err
	}
	list, err := k.listPods(ctx, d.opts.Namespace, LabelDaemon+"="+DaemonLabel(d.opts.Instance))
	if err != nil {
		return false, fmt.Errorf("list airlock's Pods in namespace %s: %w", d.opts.Namespace, err)
	}
	ended := map[string][]corev1.Pod{}
	var ids []string
	for _, p := range list.Items {
		if p.Annotations[AnnotationDaemon] != d.opts.Instance || p.DeletionTimestamp != nil {
			continue
		}
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			running = true
			continue
		}
		id := p.Labels[LabelSandbox]
		ids = append(ids, id)
		ended[id] = append(ended[id], p)
	}
	return running, hostlock.SweepStale(d.rc.StateDir, ids, func(id string) error {
		var errs []error
		for _, p := range ended[id] {
			d.rc.Logger.Info("deleting the Pod of a sandbox that ended by itself", "sandbox_id", id, "pod", p.Name)
			errs = append(errs, d.deletePod(ctx, p.Name, p.UID))
		}
		ended[id] = nil
		return errors.Join(errs...)
	})
}
