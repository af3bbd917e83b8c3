package controllerruntime

import (
	"context"
	"errors"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"krec.dev/guest"
	"krec.dev/guest/log"
	"krec.dev/guest/reconcile"
)

// controller-runtime's loggers (ctrl.Log, log.FromContext) write into the host's log.
func init() { ctrllog.SetLogger(log.Log) }

// Register registers r, a controller-runtime Reconciler, as the guest's reconciler: the host
// calls it for each request of its workqueue with a context carrying a logger (as
// controller-runtime's does), and a TerminalError is not retried.
func Register(r crreconcile.Reconciler) { guest.Reconcile(Reconciler(r)) }

// Reconciler is r as krec's reconciler.
func Reconciler(r crreconcile.Reconciler) reconcile.Reconciler { return adapted{r} }

type adapted struct{ r crreconcile.Reconciler }

func (a adapted) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	logger := log.FromContext(ctx, "namespace", req.Namespace, "name", req.Name)
	ctx = logr.NewContext(ctx, logger)
	result, err := a.r.Reconcile(ctx, crreconcile.Request{NamespacedName: req.NamespacedName})
	if err != nil {
		if errors.Is(err, crreconcile.TerminalError(nil)) {
			return reconcile.Result{}, reconcile.TerminalError(err)
		}
		return reconcile.Result{}, err
	}
	return reconcile.Result{Requeue: result.Requeue, RequeueAfter: result.RequeueAfter}, nil
}
