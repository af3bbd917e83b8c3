//go:build wasip1

package host

import (
	"runtime/debug"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	witRuntime "go.bytecodealliance.org/pkg/wit/runtime"
	witTypes "go.bytecodealliance.org/pkg/wit/types"

	"krec.dev/guest/internal/wit/krec_reconciler_client"
	"krec.dev/guest/internal/wit/krec_reconciler_events"
	"krec.dev/guest/internal/wit/krec_reconciler_log"
	"krec.dev/guest/internal/wit/krec_reconciler_reader"
	wit "krec.dev/guest/internal/wit/krec_reconciler_types"
)

// Client is the host's client interface.
var Client Calls = hostClient{}

type hostClient struct{}

func gvkOf(gvk schema.GroupVersionKind) wit.Gvk {
	return wit.Gvk{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind}
}

func option(s string) witTypes.Option[string] {
	if s == "" {
		return witTypes.None[string]()
	}
	return witTypes.Some(s)
}

func listOptions(o ListOptions) wit.ListOptions {
	return wit.ListOptions{
		Namespace:     option(o.Namespace),
		LabelSelector: option(o.LabelSelector),
		FieldSelector: option(o.FieldSelector),
		Uncached:      o.Uncached,
	}
}

// The host lowers a call's answer (and an export's arguments) into the guest by calling its
// allocator, cabi_realloc, where the component model forbids calling out of the guest. Go's
// allocator may start or assist a garbage collection there, and the collector reads the clock
// — a WASI call: the instance traps ("cannot leave component instance"). So the collector runs
// only in the guest's own code: it is off between calls (when the host lowers an export's
// arguments) and during each host call (when it lowers the answer), on while an export runs.
// Turning it off waits for a collection under way to finish, so none is in progress then.

// gcPercent is the collector's GOGC while the guest's code runs.
const gcPercent = 100

var inExport bool

func init() { debug.SetGCPercent(-1) }

// EnterExport turns the collector on for an export's body.
func EnterExport() {
	inExport = true
	debug.SetGCPercent(gcPercent)
}

// LeaveExport turns it off as the export returns.
func LeaveExport() {
	inExport = false
	debug.SetGCPercent(-1)
}

// hostCall turns the collector off for a host call; the function it returns turns it back on
// (inside an export).
func hostCall() func() {
	debug.SetGCPercent(-1)
	return func() {
		if inExport {
			debug.SetGCPercent(gcPercent)
		}
	}
}

// released lets the buffers the host's answer was written into be collected once nothing
// refers to them: the bindings pin every buffer the host allocates until the next export call,
// so a reconcile of many reads would hold them all.
func released() { witRuntime.Unpin() }

func (hostClient) Get(gvk schema.GroupVersionKind, namespace, name string) (string, error) {
	defer released()
	defer hostCall()()
	return text(krec_reconciler_client.Get(gvkOf(gvk), option(namespace), name), gvk, name)
}

func (hostClient) List(gvk schema.GroupVersionKind, o ListOptions) ([]string, error) {
	defer released()
	defer hostCall()()
	return texts(krec_reconciler_client.List(gvkOf(gvk), listOptions(o)), gvk)
}

func (hostClient) Create(object string) (string, error) {
	defer released()
	defer hostCall()()
	return text(krec_reconciler_client.Create(object), schema.GroupVersionKind{}, "")
}

func (hostClient) Update(object string) (string, error) {
	defer released()
	defer hostCall()()
	return text(krec_reconciler_client.Update(object), schema.GroupVersionKind{}, "")
}

func (hostClient) UpdateStatus(object string) (string, error) {
	defer released()
	defer hostCall()()
	return text(krec_reconciler_client.UpdateStatus(object), schema.GroupVersionKind{}, "")
}

func (hostClient) Patch(gvk schema.GroupVersionKind, namespace, name string, patchType types.PatchType, body []byte, status bool) (string, error) {
	var how wit.PatchType
	switch patchType {
	case types.MergePatchType:
		how = wit.PatchTypeMerge
	case types.JSONPatchType:
		how = wit.PatchTypeJson
	case types.StrategicMergePatchType:
		how = wit.PatchTypeStrategic
	case types.ApplyPatchType:
		how = wit.PatchTypeApply
	default:
		return "", apierrors.NewBadRequest("unsupported patch type " + string(patchType))
	}
	if !utf8Valid(body) {
		return "", apierrors.NewBadRequest("a patch body must be JSON text (UTF-8)")
	}
	defer released()
	defer hostCall()()
	return text(krec_reconciler_client.Patch(gvkOf(gvk), option(namespace), name, how, string(body), status), gvk, name)
}

func (hostClient) Delete(gvk schema.GroupVersionKind, namespace, name string, pre *metav1.Preconditions) error {
	preconditions := witTypes.None[wit.Preconditions]()
	if pre != nil {
		var p wit.Preconditions
		if pre.UID != nil {
			p.Uid = witTypes.Some(string(*pre.UID))
		}
		if pre.ResourceVersion != nil {
			p.ResourceVersion = witTypes.Some(*pre.ResourceVersion)
		}
		preconditions = witTypes.Some(p)
	}
	defer released()
	defer hostCall()()
	result := krec_reconciler_client.Delete(gvkOf(gvk), option(namespace), name, preconditions)
	if result.IsErr() {
		return StatusError(result.Err(), gvk, name)
	}
	return nil
}

// Reader is the host's reader interface (webhooks): Get and List of the host's cache.
var Reader Calls = hostReader{}

func (hostReader) Get(gvk schema.GroupVersionKind, namespace, name string) (string, error) {
	defer released()
	defer hostCall()()
	return text(krec_reconciler_reader.Get(gvkOf(gvk), option(namespace), name), gvk, name)
}

func (hostReader) List(gvk schema.GroupVersionKind, o ListOptions) ([]string, error) {
	defer released()
	defer hostCall()()
	return texts(krec_reconciler_reader.List(gvkOf(gvk), listOptions(o)), gvk)
}

// Log writes one line into the host's log.
func Log(level Level, message string) { krec_reconciler_log.Log(level, Text(message)) }

// Event records an Event about the object of gvk, namespace, name and uid.
func Event(gvk schema.GroupVersionKind, namespace, name, uid string, warning bool, reason, message string) error {
	kind := krec_reconciler_events.EventTypeNormal
	if warning {
		kind = krec_reconciler_events.EventTypeWarning
	}
	regarding := krec_reconciler_events.ObjectReference{
		Kind:      gvkOf(gvk),
		Namespace: option(namespace),
		Name:      name,
		Uid:       option(uid),
	}
	defer hostCall()()
	result := krec_reconciler_events.Record(regarding, kind, Text(reason), Text(message))
	if result.IsErr() {
		return StatusError(result.Err(), gvk, name)
	}
	return nil
}
