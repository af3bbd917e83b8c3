// Package reconcile has controller-runtime's reconcile types — the same names and shapes as
// sigs.k8s.io/controller-runtime/pkg/reconcile — for krec guests written in Go.
//
// The host calls a guest's Reconciler once per request taken from its workqueue: a Request
// names an object (it may be gone); the Result says whether to reconcile it again, and an
// error makes the host retry it with backoff.
package reconcile

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Request names the object to reconcile.
type Request struct {
	// NamespacedName is the object's namespace (empty for a cluster-scoped kind) and name.
	types.NamespacedName
}

// Result says what the host does with the request after a reconcile without error.
type Result struct {
	// Requeue asks for the request again, through the host's rate limiter.
	//
	// Deprecated: as in controller-runtime, use RequeueAfter, or return an error.
	Requeue bool
	// RequeueAfter asks for the request again after this long (more than zero).
	RequeueAfter time.Duration
}

// IsZero reports whether the result asks for nothing.
func (r *Result) IsZero() bool {
	if r == nil {
		return true
	}
	return *r == Result{}
}

// Reconciler brings the cluster state for a request towards its desired state.
type Reconciler interface {
	Reconcile(context.Context, Request) (Result, error)
}

// Func is a Reconciler of a function.
type Func func(context.Context, Request) (Result, error)

// Reconcile calls f.
func (f Func) Reconcile(ctx context.Context, req Request) (Result, error) { return f(ctx, req) }

// ObjectReconciler reconciles an object of a kind, fetched for it: controller-runtime's
// AsReconciler shape.
type ObjectReconciler[T any] interface {
	Reconcile(context.Context, T) (Result, error)
}

type terminalError struct{ err error }

func (te *terminalError) Error() string {
	if te.err == nil {
		return "nil terminal error"
	}
	return "terminal error: " + te.err.Error()
}

func (te *terminalError) Unwrap() error { return te.err }

func (te *terminalError) Is(target error) bool {
	_, ok := target.(*terminalError)
	return ok
}

// TerminalError wraps an error that retrying cannot fix: it is logged at error level and the
// request is not requeued (controller-runtime's TerminalError); the host counts the reconcile
// as done, not as an error (its WIT has no terminal outcome).
func TerminalError(wrapped error) error { return &terminalError{err: wrapped} }

// IsTerminal reports whether err is (or wraps) a TerminalError.
func IsTerminal(err error) bool { return errors.Is(err, &terminalError{}) }
