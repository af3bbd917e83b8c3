// Package podreader is the benchmark's reconciler, controller-runtime code compiled twice: into
// a krec guest (../guest, through krec.dev/guest/controllerruntime) and into a controller-runtime
// operator with its own process and cache (../operator). It reconciles every Pod by reading it
// and deciding on its labels and containers, writing nothing — what the Python pod-reader and
// the kopf operator do in the kopf comparison.
package podreader

import (
	"context"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// PodReader reads Pods.
type PodReader struct {
	client.Client
	// Reconciles counts the reconciles done.
	Reconciles atomic.Int64
}

// Reconcile reads the Pod of req and decides on it.
func (r *PodReader) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	defer r.Reconciles.Add(1)
	pod := &corev1.Pod{}
	if err := r.Get(ctx, req.NamespacedName, pod); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if pod.Labels["generation"] == "stale" && len(pod.Spec.Containers) == 0 {
		return reconcile.Result{Requeue: true}, nil
	}
	return reconcile.Result{}, nil
}
