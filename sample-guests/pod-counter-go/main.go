// pod-counter in Go: labels every ReplicaSet with the number of its pods (`pod-count`) — seed
// 000's controller-runtime example (`For(ReplicaSet)`, `Owns(Pod)`), as the Rust and Python
// pod-counters do, with controller-runtime's reconcile and client shapes.
package main

import (
	"context"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"krec.dev/guest"
	"krec.dev/guest/client"
	"krec.dev/guest/log"
	"krec.dev/guest/reconcile"
)

// PodCountLabel is the label this reconciler maintains.
const PodCountLabel = "pod-count"

// PodCounter counts each ReplicaSet's pods.
type PodCounter struct {
	client.Client
}

// Reconcile labels the ReplicaSet of req with its pod count.
func (r *PodCounter) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	logger := log.FromContext(ctx)
	rs := &appsv1.ReplicaSet{}
	if err := r.Get(ctx, req.NamespacedName, rs); err != nil {
		if apierrors.IsNotFound(err) {
			logger.V(1).Info("ReplicaSet is gone", "replicaset", req)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	selector, err := metav1.LabelSelectorAsSelector(rs.Spec.Selector)
	if err != nil {
		logger.Info("not counting: bad spec.selector", "replicaset", req, "error", err)
		return reconcile.Result{}, nil
	}
	if selector.Empty() {
		// The API server refuses such ReplicaSets; an empty selector would match every pod.
		logger.Info("not counting: empty spec.selector", "replicaset", req)
		return reconcile.Result{}, nil
	}
	// Only the Pods' metadata is needed (the manifest watches them metadataOnly).
	pods := &metav1.PartialObjectMetadataList{}
	pods.SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind("PodList"))
	pods.APIVersion = "v1"
	if err := r.List(ctx, pods, client.InNamespace(req.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return reconcile.Result{}, err
	}
	count := strconv.Itoa(len(pods.Items))
	if rs.Labels[PodCountLabel] == count {
		return reconcile.Result{}, nil
	}
	logger.Info("labelling", "replicaset", req, PodCountLabel, count)
	if rs.Labels == nil {
		rs.Labels = map[string]string{}
	}
	rs.Labels[PodCountLabel] = count
	return reconcile.Result{}, r.Update(ctx, rs)
}

func init() { guest.Reconcile(&PodCounter{Client: guest.Client()}) }

func main() {}
