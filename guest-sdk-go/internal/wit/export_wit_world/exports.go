// Package export_wit_world implements the world's exports (the generated entry points call
// these) by the handlers the guest registered (krec.dev/guest/internal/registry). Written by
// hand: the bindings generator keeps this folder.
package export_wit_world

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	witTypes "go.bytecodealliance.org/pkg/wit/types"

	"krec.dev/guest/internal/host"
	"krec.dev/guest/internal/registry"
	admission "krec.dev/guest/internal/wit/krec_reconciler_admission_types"
	wit "krec.dev/guest/internal/wit/krec_reconciler_types"
	"krec.dev/guest/reconcile"
)

// recovered turns a panic into an error, as controller-runtime recovers a reconciler's panic:
// the instance lives on and the request is retried with backoff.
func recovered(what string, err *error) {
	if p := recover(); p != nil {
		host.Log(host.Error, fmt.Sprintf("%s panicked: %v\n%s", what, p, debug.Stack()))
		*err = fmt.Errorf("panic: %v [recovered]", p)
	}
}

func reconcileSafely(request reconcile.Request) (result reconcile.Result, err error) {
	defer recovered("reconcile of "+request.String(), &err)
	return registry.Reconciler.Reconcile(context.Background(), request)
}

func mapSafely(gvk schema.GroupVersionKind, object []byte) (requests []reconcile.Request, err error) {
	defer recovered("the map function", &err)
	return registry.Map(context.Background(), gvk, object)
}

// Reconcile runs the guest's reconciler for one request.
func Reconcile(req wit.Request) witTypes.Result[wit.Action, wit.Error] {
	host.EnterExport()
	defer host.LeaveExport()
	if registry.Reconciler == nil {
		return witTypes.Err[wit.Action](wit.MakeErrorOther("this guest registers no reconciler (guest.Reconcile(…) in an init function)"))
	}
	request := reconcile.Request{NamespacedName: types.NamespacedName{
		Namespace: req.Namespace.SomeOr(""),
		Name:      req.Name,
	}}
	result, err := reconcileSafely(request)
	if err != nil {
		if reconcile.IsTerminal(err) {
			// Not retried (controller-runtime's TerminalError): said in the log and answered as
			// done — the host's error counts do not include it (its WIT has no terminal error).
			host.Log(host.Error, fmt.Sprintf("%s: %v (terminal: not retried)", request, err))
			return witTypes.Ok[wit.Action, wit.Error](wit.MakeActionDone())
		}
		return witTypes.Err[wit.Action](host.WitError(err))
	}
	switch {
	case result.RequeueAfter > 0:
		ms := uint64(result.RequeueAfter / time.Millisecond)
		return witTypes.Ok[wit.Action, wit.Error](wit.MakeActionRequeueAfter(ms))
	case result.Requeue:
		return witTypes.Ok[wit.Action, wit.Error](wit.MakeActionRequeue())
	default:
		return witTypes.Ok[wit.Action, wit.Error](wit.MakeActionDone())
	}
}

// Init hands the guest its configuration, once per instance, before anything else.
func Init(config string) witTypes.Result[witTypes.Unit, string] {
	host.EnterExport()
	defer host.LeaveExport()
	if registry.Configure == nil {
		return witTypes.Ok[witTypes.Unit, string](witTypes.Unit{})
	}
	if err := registry.Configure([]byte(config)); err != nil {
		return witTypes.Err[witTypes.Unit](host.Text(err.Error()))
	}
	return witTypes.Ok[witTypes.Unit, string](witTypes.Unit{})
}

// Map maps an object of a watched kind to requests.
func Map(kind wit.Gvk, object string) witTypes.Result[[]wit.Request, wit.Error] {
	host.EnterExport()
	defer host.LeaveExport()
	if registry.Map == nil {
		return witTypes.Err[[]wit.Request](wit.MakeErrorOther("this guest registers no map function (guest.Map(…))"))
	}
	gvk := schema.GroupVersionKind{Group: kind.Group, Version: kind.Version, Kind: kind.Kind}
	requests, err := mapSafely(gvk, []byte(object))
	if err != nil {
		return witTypes.Err[[]wit.Request](host.WitError(err))
	}
	out := make([]wit.Request, 0, len(requests))
	for _, r := range requests {
		ns := witTypes.None[string]()
		if r.Namespace != "" {
			ns = witTypes.Some(r.Namespace)
		}
		out = append(out, wit.Request{Namespace: ns, Name: r.Name})
	}
	return witTypes.Ok[[]wit.Request, wit.Error](out)
}

// Validate judges an admission request.
func Validate(req admission.AdmissionRequest) admission.Verdict {
	host.EnterExport()
	defer host.LeaveExport()
	return review(registry.Validate, "validating", req)
}

// Mutate judges an admission request and says how its object should change.
func Mutate(req admission.AdmissionRequest) admission.Verdict {
	host.EnterExport()
	defer host.LeaveExport()
	return review(registry.Mutate, "mutating", req)
}

// Convert converts objects of a custom resource to another version.
func Convert(objects []string, desired string) witTypes.Result[[]string, string] {
	host.EnterExport()
	defer host.LeaveExport()
	if registry.Convert == nil {
		return witTypes.Err[[]string]("this guest registers no converter (guest.Converter(…))")
	}
	in := make([]json.RawMessage, len(objects))
	for i, o := range objects {
		in[i] = json.RawMessage(o)
	}
	out, err := registry.Convert(in, desired)
	if err != nil {
		return witTypes.Err[[]string](host.Text(err.Error()))
	}
	texts := make([]string, len(out))
	for i, o := range out {
		texts[i] = string(o)
	}
	return witTypes.Ok[[]string, string](texts)
}

var operations = map[admission.Operation]string{
	admission.OperationCreate:  "CREATE",
	admission.OperationUpdate:  "UPDATE",
	admission.OperationDelete:  "DELETE",
	admission.OperationConnect: "CONNECT",
}

func review(handler registry.Handler, what string, req admission.AdmissionRequest) (verdict admission.Verdict) {
	if handler == nil {
		return admission.Verdict{Allowed: false, Code: witTypes.Some[uint16](500),
			Message: witTypes.Some("this guest registers no " + what + " webhook")}
	}
	defer func() {
		// A panic in the webhook is a denial with its message, as controller-runtime's webhook
		// server recovers one — not a trap of the whole instance.
		if p := recover(); p != nil {
			host.Log(host.Error, fmt.Sprintf("%s webhook panicked: %v\n%s", what, p, debug.Stack()))
			verdict = admission.Verdict{Allowed: false, Code: witTypes.Some[uint16](500),
				Message: witTypes.Some(fmt.Sprintf("panic: %v [recovered]", p))}
		}
	}()
	r := &registry.Review{
		UID:         req.Uid,
		Kind:        schema.GroupVersionKind{Group: req.Kind.Group, Version: req.Kind.Version, Kind: req.Kind.Kind},
		Resource:    req.Resource,
		SubResource: req.SubResource.SomeOr(""),
		Name:        req.Name.SomeOr(""),
		Namespace:   req.Namespace.SomeOr(""),
		Operation:   operations[req.Operation],
		Username:    req.UserInfo.Username,
		Groups:      req.UserInfo.Groups,
		DryRun:      req.DryRun,
	}
	if req.Object.IsSome() {
		r.Object = []byte(req.Object.Some())
	}
	if req.OldObject.IsSome() {
		r.OldObject = []byte(req.OldObject.Some())
	}
	v := handler(context.Background(), r)
	out := admission.Verdict{Allowed: v.Allowed, Warnings: []string{}}
	for _, warning := range v.Warnings {
		out.Warnings = append(out.Warnings, host.Text(warning))
	}
	if v.Code != 0 {
		out.Code = witTypes.Some(uint16(v.Code))
	}
	if v.Message != "" {
		out.Message = witTypes.Some(host.Text(v.Message))
	}
	if v.Reason != "" {
		out.Reason = witTypes.Some(host.Text(v.Reason))
	}
	if v.Patched != nil {
		out.Patched = witTypes.Some(string(v.Patched))
	}
	keys := make([]string, 0, len(v.AuditAnnotations))
	for k := range v.AuditAnnotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out.AuditAnnotations = []witTypes.Tuple2[string, string]{}
	for _, k := range keys {
		out.AuditAnnotations = append(out.AuditAnnotations, witTypes.Tuple2[string, string]{F0: k, F1: v.AuditAnnotations[k]})
	}
	return out
}
