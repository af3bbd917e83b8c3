// Package registry holds what a guest registered (its reconciler, configuration hook, map
// function and admission handlers) for the exports the host calls. The guest registers in its
// `init` functions, which run when the host instantiates the component.
package registry

import (
	"context"
	"encoding/json"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"krec.dev/guest/reconcile"
)

// MapFunc maps an object of a watched kind to the requests it should cause.
type MapFunc func(ctx context.Context, gvk schema.GroupVersionKind, object []byte) ([]reconcile.Request, error)

// Review is one admission request, as the host sends it.
type Review struct {
	UID         string
	Kind        schema.GroupVersionKind
	Resource    string
	SubResource string
	Name        string
	Namespace   string
	// Operation: CREATE, UPDATE, DELETE or CONNECT.
	Operation string
	Username  string
	Groups    []string
	Object    []byte
	OldObject []byte
	DryRun    bool
}

// Verdict is a webhook's answer.
type Verdict struct {
	Allowed          bool
	Code             int32
	Message          string
	Reason           string
	Warnings         []string
	AuditAnnotations map[string]string
	// Patched is the object as it should be admitted (mutate); nil: unchanged.
	Patched []byte
}

// Handler answers admission reviews.
type Handler func(ctx context.Context, review *Review) Verdict

// Converter converts objects to another version of their kind.
type Converter func(objects []json.RawMessage, desiredAPIVersion string) ([]json.RawMessage, error)

var (
	// Reconciler is the guest's reconciler.
	Reconciler reconcile.Reconciler
	// Configure receives spec.config (JSON; `null` when there is none).
	Configure func(config []byte) error
	// Map is the guest's map function.
	Map MapFunc
	// Validate and Mutate are the guest's webhooks.
	Validate, Mutate Handler
	// Convert is the guest's CRD conversion.
	Convert Converter
)
