//go:build !wasip1

package host

import (
	"fmt"
	"os"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Outside krec (a `go test` on this machine's architecture) there is no host: the client and
// the reader answer every call with an error saying so — a test gives its reconciler the
// client of krec.dev/guest/fake's cluster instead — and the log and events go to stderr.

// Client is the host's client interface.
var Client Calls = outside{}

// Reader is the host's reader interface (webhooks): Get and List of the host's cache.
var Reader Calls = outside{}

type outside struct{}

func notInKrec() error {
	return apierrors.NewServiceUnavailable("not running in krec: in a go test, give the reconciler the client of krec.dev/guest/fake's NewCluster")
}

func (outside) Get(schema.GroupVersionKind, string, string) (string, error) { return "", notInKrec() }
func (outside) List(schema.GroupVersionKind, ListOptions) ([]string, error) { return nil, notInKrec() }
func (outside) Create(string) (string, error)                               { return "", notInKrec() }
func (outside) Update(string) (string, error)                               { return "", notInKrec() }
func (outside) UpdateStatus(string) (string, error)                         { return "", notInKrec() }
func (outside) Patch(schema.GroupVersionKind, string, string, types.PatchType, []byte, bool) (string, error) {
	return "", notInKrec()
}
func (outside) Delete(schema.GroupVersionKind, string, string, *metav1.Preconditions) error {
	return notInKrec()
}

var levels = map[Level]string{Trace: "TRACE", Debug: "DEBUG", Info: "INFO", Warn: "WARN", Error: "ERROR"}

// Log writes one line to stderr.
func Log(level Level, message string) { fmt.Fprintf(os.Stderr, "%s %s\n", levels[level], message) }

// Event writes the Event to stderr.
func Event(gvk schema.GroupVersionKind, namespace, name, _ string, warning bool, reason, message string) error {
	kind := "Normal"
	if warning {
		kind = "Warning"
	}
	Log(Info, fmt.Sprintf("event %s %s about %s %s/%s: %s", kind, reason, gvk.Kind, namespace, name, message))
	return nil
}

// EnterExport and LeaveExport manage the collector around a guest's exports in krec; natively
// there is nothing to do.
func EnterExport() {}

// LeaveExport: see EnterExport.
func LeaveExport() {}
