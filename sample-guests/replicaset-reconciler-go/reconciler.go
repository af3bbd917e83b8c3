// The ReplicaSet reconciler of seed 000 (controller-runtime's builder example), copied as the
// post has it — its type, its Reconcile and its InjectClient, not a line changed but the
// comments (translated) — and compiled against the real sigs.k8s.io/controller-runtime.
package main

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The Reconciler, the Controller's implementation: it has only a client, which reads k8s.
type ReplicaSetReconciler struct {
	client.Client
}

/*
The business logic:
read the ReplicaSet, list all its Pods, label the ReplicaSet with the number of Pods
*/
func (a *ReplicaSetReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	// Read the ReplicaSet
	rs := &appsv1.ReplicaSet{}
	err := a.Get(ctx, req.NamespacedName, rs)
	if err != nil {
		return reconcile.Result{}, err
	}

	// List all the Pods this ReplicaSet is responsible for, through the Controller
	pods := &corev1.PodList{}
	err = a.List(ctx, pods, client.InNamespace(req.Namespace), client.MatchingLabels(rs.Spec.Template.Labels))
	if err != nil {
		return reconcile.Result{}, err
	}

	// Set the label
	rs.Labels["pod-count"] = fmt.Sprintf("%v", len(pods.Items))
	err = a.Update(ctx, rs)
	if err != nil {
		return reconcile.Result{}, err
	}

	return reconcile.Result{}, nil
}

// The client needs injecting; the Manager's client could also initialise it directly
func (a *ReplicaSetReconciler) InjectClient(c client.Client) error {
	a.Client = c
	return nil
}
