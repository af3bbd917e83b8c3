// Package admission has controller-runtime's admission shapes — the names of
// sigs.k8s.io/controller-runtime/pkg/webhook/admission — for krec guests written in Go:
// a CustomValidator and a CustomDefaulter over typed objects, registered with
// guest.Validator and guest.Defaulter for the manifest's webhooks.
//
// As in controller-runtime, an error a validator or defaulter returns denies the request: an
// *apierrors.StatusError (or any apierrors.APIStatus) with its own code, reason and message,
// any other error with 403 Forbidden and the error's text. Warnings reach the client (kubectl
// prints them) whether or not the request is allowed.
package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"krec.dev/guest/internal/registry"
)

// Warnings are messages returned to the client with the verdict.
type Warnings []string

// CustomValidator judges creates, updates and deletes of one kind (controller-runtime's
// interface of the same name). obj is a new object of the registered type, decoded from the
// request.
type CustomValidator interface {
	ValidateCreate(ctx context.Context, obj runtime.Object) (Warnings, error)
	ValidateUpdate(ctx context.Context, oldObj, newObj runtime.Object) (Warnings, error)
	ValidateDelete(ctx context.Context, obj runtime.Object) (Warnings, error)
}

// CustomDefaulter sets defaults on an object being created or updated (controller-runtime's
// interface of the same name); the host answers the API server with the JSON patch from the
// object as sent to the object as defaulted.
type CustomDefaulter interface {
	Default(ctx context.Context, obj runtime.Object) error
}

// Request is the admission request being judged (controller-runtime's admission.Request).
type Request struct {
	admissionv1.AdmissionRequest
}

type requestKey struct{}

// NewContextWithRequest returns a context carrying req (as controller-runtime's webhook server
// gives handlers).
func NewContextWithRequest(ctx context.Context, req Request) context.Context {
	return context.WithValue(ctx, requestKey{}, req)
}

// RequestFromContext returns the admission request a validator or defaulter is judging.
func RequestFromContext(ctx context.Context) (Request, error) {
	if req, ok := ctx.Value(requestKey{}).(Request); ok {
		return req, nil
	}
	return Request{}, errors.New("admission.Request not found in context")
}

// ValidatorHandler answers the host's validating reviews with v, decoding objects into new
// values of proto's type.
func ValidatorHandler(proto runtime.Object, v CustomValidator) registry.Handler {
	return func(ctx context.Context, review *registry.Review) registry.Verdict {
		ctx = NewContextWithRequest(ctx, request(review))
		var (
			warnings Warnings
			err      error
		)
		switch review.Operation {
		case "CREATE", "CONNECT":
			obj, decodeErr := decode(proto, review.Object, "object")
			if decodeErr != nil {
				return badRequest(decodeErr)
			}
			warnings, err = v.ValidateCreate(ctx, obj)
		case "UPDATE":
			obj, decodeErr := decode(proto, review.Object, "object")
			if decodeErr != nil {
				return badRequest(decodeErr)
			}
			old, decodeErr := decode(proto, review.OldObject, "oldObject")
			if decodeErr != nil {
				return badRequest(decodeErr)
			}
			warnings, err = v.ValidateUpdate(ctx, old, obj)
		case "DELETE":
			old, decodeErr := decode(proto, review.OldObject, "oldObject")
			if decodeErr != nil {
				return badRequest(decodeErr)
			}
			warnings, err = v.ValidateDelete(ctx, old)
		default:
			return badRequest(fmt.Errorf("unknown operation %q", review.Operation))
		}
		if err != nil {
			verdict := denied(err)
			verdict.Warnings = warnings
			return verdict
		}
		return registry.Verdict{Allowed: true, Warnings: warnings}
	}
}

// DefaulterHandler answers the host's mutating reviews with d, decoding objects into new
// values of proto's type. A DELETE is allowed unchanged, as in controller-runtime.
func DefaulterHandler(proto runtime.Object, d CustomDefaulter) registry.Handler {
	return func(ctx context.Context, review *registry.Review) registry.Verdict {
		if review.Operation == "DELETE" {
			return registry.Verdict{Allowed: true}
		}
		ctx = NewContextWithRequest(ctx, request(review))
		obj, err := decode(proto, review.Object, "object")
		if err != nil {
			return badRequest(err)
		}
		if err := d.Default(ctx, obj); err != nil {
			return denied(err)
		}
		patched, err := json.Marshal(obj)
		if err != nil {
			return registry.Verdict{Allowed: false, Code: http.StatusInternalServerError,
				Message: fmt.Sprintf("encoding the defaulted object: %v", err)}
		}
		return registry.Verdict{Allowed: true, Patched: patched}
	}
}

// denied is controller-runtime's verdict for a validator's or defaulter's error.
func denied(err error) registry.Verdict {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		s := status.Status()
		code := s.Code
		if code == 0 {
			code = http.StatusForbidden
		}
		return registry.Verdict{Allowed: false, Code: code, Reason: string(s.Reason), Message: s.Message}
	}
	return registry.Verdict{Allowed: false, Code: http.StatusForbidden,
		Reason: string(metav1.StatusReasonForbidden), Message: err.Error()}
}

func badRequest(err error) registry.Verdict {
	return registry.Verdict{Allowed: false, Code: http.StatusBadRequest,
		Reason: string(metav1.StatusReasonBadRequest), Message: err.Error()}
}

// decode makes a new value of proto's type from the request's JSON.
func decode(proto runtime.Object, raw []byte, field string) (runtime.Object, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("there is no %s in the request", field)
	}
	t := reflect.TypeOf(proto)
	if t.Kind() != reflect.Pointer {
		return nil, fmt.Errorf("the registered %T is not a pointer", proto)
	}
	obj, ok := reflect.New(t.Elem()).Interface().(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("the registered %T is not a runtime.Object", proto)
	}
	if err := json.Unmarshal(raw, obj); err != nil {
		return nil, fmt.Errorf("decoding the request's %s as %T: %w", field, proto, err)
	}
	return obj, nil
}

// request is the review as k8s.io/api's AdmissionRequest.
func request(review *registry.Review) Request {
	req := admissionv1.AdmissionRequest{
		UID:         types.UID(review.UID),
		Kind:        metav1.GroupVersionKind{Group: review.Kind.Group, Version: review.Kind.Version, Kind: review.Kind.Kind},
		Resource:    metav1.GroupVersionResource{Group: review.Kind.Group, Version: review.Kind.Version, Resource: review.Resource},
		SubResource: review.SubResource,
		Name:        review.Name,
		Namespace:   review.Namespace,
		Operation:   admissionv1.Operation(review.Operation),
		UserInfo:    authenticationv1.UserInfo{Username: review.Username, Groups: review.Groups},
		DryRun:      &review.DryRun,
	}
	req.Object.Raw = review.Object
	req.OldObject.Raw = review.OldObject
	return Request{AdmissionRequest: req}
}
