// Package guest makes a Go program a krec guest: a reconciler with controller-runtime's shapes
// (krec.dev/guest/reconcile, krec.dev/guest/client), compiled to a WebAssembly component with
// `krec build`, registered in the cluster by a manifest.
//
// A guest registers what it implements from an init function; its main does nothing:
//
//	type PodCounter struct{ client.Client }
//
//	func (r *PodCounter) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) { … }
//
//	func init() { guest.Reconcile(&PodCounter{Client: guest.Client()}) }
//
//	func main() {}
//
// The host instantiates the component (running the init functions), calls Configure's hook
// with `spec.config`, then Reconcile for each request of its workqueue, one at a time per
// instance.
package guest

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"krec.dev/guest/client"
	"krec.dev/guest/internal/host"
	"krec.dev/guest/internal/registry"
	_ "krec.dev/guest/internal/wit/wit_exports" // the component's exports
	"krec.dev/guest/reconcile"
)

// Scheme is the kinds the guest's client knows typed objects of: every built-in kind; add a
// CRD's Go types with their AddToScheme.
var Scheme = clientgoscheme.Scheme

// Reconcile registers the guest's reconciler.
func Reconcile(r reconcile.Reconciler) { registry.Reconciler = r }

// Configure registers what receives the manifest's `spec.config` (JSON text; `null` when the
// manifest has none), once per instance before anything else; an error refuses the
// configuration, and the host does not run the guest.
func Configure(hook func(config []byte) error) { registry.Configure = hook }

// Map registers the guest's map function (controller-runtime's EnqueueRequestsFromMapFunc),
// for the manifest's watches with `mapByGuest: true`: `object` is the JSON of the object of
// kind gvk that changed.
func Map(fn func(ctx context.Context, gvk schema.GroupVersionKind, object []byte) ([]reconcile.Request, error)) {
	registry.Map = fn
}

// Client is a client of the host (reads from its cache, writes to the API server), knowing
// Scheme's kinds.
func Client() client.Client { return client.New(Scheme) }

// EventRecorder records Events about objects (client-go's record.EventRecorder methods).
type EventRecorder interface {
	Event(object runtime.Object, eventtype, reason, message string)
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
	AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any)
}

// Recorder records the guest's Events (best effort: a failure is logged, as client-go's
// recorder drops it).
func Recorder() EventRecorder { return recorder{} }

type recorder struct{}

func (recorder) Event(object runtime.Object, eventtype, reason, message string) {
	obj, ok := object.(client.Object)
	if !ok {
		host.Log(host.Warn, fmt.Sprintf("an Event about a %T, which has no metadata, is not recorded", object))
		return
	}
	gvk, err := client.GVKForObject(obj, Scheme)
	if err != nil {
		host.Log(host.Warn, fmt.Sprintf("an Event about %s is not recorded: %v", obj.GetName(), err))
		return
	}
	if err := host.Event(gvk, obj.GetNamespace(), obj.GetName(), string(obj.GetUID()), eventtype == "Warning", reason, message); err != nil {
		host.Log(host.Warn, fmt.Sprintf("recording an Event about %s %s: %v", gvk.Kind, obj.GetName(), err))
	}
}

func (r recorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.Event(object, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (r recorder) AnnotatedEventf(object runtime.Object, _ map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.Event(object, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}
