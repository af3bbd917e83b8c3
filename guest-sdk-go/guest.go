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
	"encoding/json"
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"krec.dev/guest/client"
	"krec.dev/guest/internal/host"
	"krec.dev/guest/internal/registry"
	_ "krec.dev/guest/internal/wit/wit_exports" // the component's exports
	"krec.dev/guest/reconcile"
	"krec.dev/guest/webhook/admission"
)

// Scheme is the kinds the guest's client knows typed objects of beyond the built-in ones (the
// client knows k8s.io/api's types by their package): add a CRD's Go types with their
// AddToScheme.
var Scheme = runtime.NewScheme()

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

// Validator registers v as the validating webhook for obj's kind (controller-runtime's
// WebhookManagedBy(mgr).For(obj).WithValidator(v)); the manifest's `webhooks` say which
// requests reach it. Register one per kind.
func Validator(obj client.Object, v admission.CustomValidator) {
	register(validators, obj, admission.ValidatorHandler(obj, v))
	registry.Validate = dispatch(validators, "validating")
}

// Defaulter registers d as the mutating webhook for obj's kind (controller-runtime's
// WebhookManagedBy(mgr).For(obj).WithDefaulter(d)).
func Defaulter(obj client.Object, d admission.CustomDefaulter) {
	register(defaulters, obj, admission.DefaulterHandler(obj, d))
	registry.Mutate = dispatch(defaulters, "mutating")
}

// Converter registers the guest's CRD conversion: objects (JSON) to desiredAPIVersion, in
// order, for a manifest's `conversion` webhook.
func Converter(convert func(objects []json.RawMessage, desiredAPIVersion string) ([]json.RawMessage, error)) {
	registry.Convert = convert
}

var validators, defaulters = map[schema.GroupKind]registry.Handler{}, map[schema.GroupKind]registry.Handler{}

func register(handlers map[schema.GroupKind]registry.Handler, obj client.Object, handler registry.Handler) {
	gvk, err := client.GVKForObject(obj, Scheme)
	if err != nil {
		panic(fmt.Sprintf("krec guest: registering a webhook for %T: %v (add its type to guest.Scheme)", obj, err))
	}
	handlers[gvk.GroupKind()] = handler
}

// dispatch picks the handler registered for the request's kind (any of its versions: the
// request carries the version the webhook's rules matched).
func dispatch(handlers map[schema.GroupKind]registry.Handler, what string) registry.Handler {
	return func(ctx context.Context, review *registry.Review) registry.Verdict {
		handler, ok := handlers[review.Kind.GroupKind()]
		if !ok {
			return registry.Verdict{Allowed: false, Code: http.StatusInternalServerError,
				Message: fmt.Sprintf("this guest has no %s webhook for %s", what, review.Kind.GroupKind())}
		}
		return handler(ctx, review)
	}
}

// Reader is a client for webhooks: Get and List from the host's cache (the manifest's
// permissions allowing); writes are refused.
func Reader() client.Client { return client.NewReader(Scheme) }

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
