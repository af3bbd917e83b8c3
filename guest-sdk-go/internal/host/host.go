// Package host wraps the host's calls (krec:reconciler's client, reader, events and log) in Go
// types: Kubernetes group/version/kinds, options and `*apierrors.StatusError`s.
package host

import (
	"errors"
	"strings"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	witTypes "go.bytecodealliance.org/pkg/wit/types"

	"krec.dev/guest/internal/wit/krec_reconciler_log"
	wit "krec.dev/guest/internal/wit/krec_reconciler_types"
)

// ListOptions select the objects of a List.
type ListOptions struct {
	Namespace     string
	LabelSelector string
	FieldSelector string
	Uncached      bool
}

// Calls are the host's client calls: the guest's world (a reconciler) or, for webhooks, the
// reader's (Get and List only).
type Calls interface {
	Get(gvk schema.GroupVersionKind, namespace, name string) (string, error)
	List(gvk schema.GroupVersionKind, options ListOptions) ([]string, error)
	Create(object string) (string, error)
	Update(object string) (string, error)
	UpdateStatus(object string) (string, error)
	Patch(gvk schema.GroupVersionKind, namespace, name string, patchType types.PatchType, body []byte, status bool) (string, error)
	Delete(gvk schema.GroupVersionKind, namespace, name string, preconditions *metav1.Preconditions) error
}

// hostReader is the reader of the host's cache: its reads are the host's calls (host_wasm.go).
type hostReader struct{}

// refused is the answer to a write through the reader: a webhook reads, it never writes.
func refused() error {
	return apierrors.NewForbidden(schema.GroupResource{}, "", errors.New("an admission webhook reads the host's cache and writes nothing"))
}

func (hostReader) Create(string) (string, error)       { return "", refused() }
func (hostReader) Update(string) (string, error)       { return "", refused() }
func (hostReader) UpdateStatus(string) (string, error) { return "", refused() }
func (hostReader) Patch(schema.GroupVersionKind, string, string, types.PatchType, []byte, bool) (string, error) {
	return "", refused()
}
func (hostReader) Delete(schema.GroupVersionKind, string, string, *metav1.Preconditions) error {
	return refused()
}

func texts(result witTypes.Result[[]string, wit.Error], gvk schema.GroupVersionKind) ([]string, error) {
	if result.IsErr() {
		return nil, StatusError(result.Err(), gvk, "")
	}
	return result.Ok(), nil
}

func text(result witTypes.Result[string, wit.Error], gvk schema.GroupVersionKind, name string) (string, error) {
	if result.IsErr() {
		return "", StatusError(result.Err(), gvk, name)
	}
	return result.Ok(), nil
}

// StatusError is the host's error as the API server's: `apierrors.IsNotFound` and the others
// answer for it as for client-go's.
func StatusError(err wit.Error, gvk schema.GroupVersionKind, name string) error {
	var (
		message string
		reason  metav1.StatusReason
		code    int32
	)
	switch err.Tag() {
	case wit.ErrorNotFound:
		message, reason, code = err.NotFound(), metav1.StatusReasonNotFound, 404
	case wit.ErrorAlreadyExists:
		message, reason, code = err.AlreadyExists(), metav1.StatusReasonAlreadyExists, 409
	case wit.ErrorConflict:
		message, reason, code = err.Conflict(), metav1.StatusReasonConflict, 409
	case wit.ErrorForbidden:
		message, reason, code = err.Forbidden(), metav1.StatusReasonForbidden, 403
	case wit.ErrorInvalid:
		message, reason, code = err.Invalid(), metav1.StatusReasonInvalid, 422
	case wit.ErrorTimeout:
		message, reason, code = err.Timeout(), metav1.StatusReasonTimeout, 504
	case wit.ErrorUnavailable:
		message, reason, code = err.Unavailable(), metav1.StatusReasonServiceUnavailable, 503
	default:
		message, reason, code = err.Other(), metav1.StatusReasonInternalError, 500
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Message: message,
		Reason:  reason,
		Code:    code,
		Details: &metav1.StatusDetails{Name: name, Group: gvk.Group, Kind: gvk.Kind},
	}}
}

// WitError is `err` as the host's error variant (for a reconcile's or map's result).
func WitError(err error) wit.Error {
	message := Text(err.Error())
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return wit.MakeErrorOther(message)
	}
	switch status.Status().Reason {
	case metav1.StatusReasonNotFound:
		return wit.MakeErrorNotFound(message)
	case metav1.StatusReasonAlreadyExists:
		return wit.MakeErrorAlreadyExists(message)
	case metav1.StatusReasonConflict:
		return wit.MakeErrorConflict(message)
	case metav1.StatusReasonForbidden:
		return wit.MakeErrorForbidden(message)
	case metav1.StatusReasonInvalid, metav1.StatusReasonBadRequest:
		return wit.MakeErrorInvalid(message)
	case metav1.StatusReasonTimeout:
		return wit.MakeErrorTimeout(message)
	case metav1.StatusReasonServiceUnavailable:
		return wit.MakeErrorUnavailable(message)
	default:
		return wit.MakeErrorOther(message)
	}
}

// Level is a log line's severity.
type Level = krec_reconciler_log.Level

// The levels.
const (
	Trace = krec_reconciler_log.LevelTrace
	Debug = krec_reconciler_log.LevelDebug
	Info  = krec_reconciler_log.LevelInfo
	Warn  = krec_reconciler_log.LevelWarn
	Error = krec_reconciler_log.LevelError
)

// Text is s as the host takes text: invalid UTF-8 (a Go string may hold any bytes) replaced.
func Text(s string) string {
	if utf8Valid([]byte(s)) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

func utf8Valid(b []byte) bool { return utf8.Valid(b) }
