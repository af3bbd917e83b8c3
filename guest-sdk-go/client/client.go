// Package client is controller-runtime's client — the same names and option shapes as
// sigs.k8s.io/controller-runtime/pkg/client — over the krec host's calls: reads from the
// host's shared cache (unless asked otherwise), writes to the API server, every call checked
// against the guest's manifest. Errors are `*apierrors.StatusError`s, so `apierrors.IsNotFound`,
// `IsConflict` and `client.IgnoreNotFound` work as with client-go.
//
// Typed objects are those of k8s.io/api (and any type added to the Scheme); unstructured
// objects (`*unstructured.Unstructured`, `*metav1.PartialObjectMetadata`) carry their kind.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"krec.dev/guest/internal/host"
)

// Object is a Kubernetes object: metadata and a kind.
type Object interface {
	metav1.Object
	runtime.Object
}

// ObjectList is a list of Kubernetes objects.
type ObjectList interface {
	metav1.ListInterface
	runtime.Object
}

// ObjectKey names an object: its namespace (empty for a cluster-scoped kind) and name.
type ObjectKey = types.NamespacedName

// ObjectKeyFromObject is obj's key.
func ObjectKeyFromObject(obj Object) ObjectKey {
	return ObjectKey{Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

// Reader reads objects.
type Reader interface {
	Get(ctx context.Context, key ObjectKey, obj Object, opts ...GetOption) error
	List(ctx context.Context, list ObjectList, opts ...ListOption) error
}

// Writer writes objects.
type Writer interface {
	Create(ctx context.Context, obj Object, opts ...CreateOption) error
	Delete(ctx context.Context, obj Object, opts ...DeleteOption) error
	Update(ctx context.Context, obj Object, opts ...UpdateOption) error
	Patch(ctx context.Context, obj Object, patch Patch, opts ...PatchOption) error
}

// SubResourceWriter writes an object's status.
type SubResourceWriter interface {
	Update(ctx context.Context, obj Object, opts ...SubResourceUpdateOption) error
	Patch(ctx context.Context, obj Object, patch Patch, opts ...SubResourcePatchOption) error
}

// StatusClient writes objects' status subresource.
type StatusClient interface {
	Status() SubResourceWriter
}

// Client reads and writes objects.
type Client interface {
	Reader
	Writer
	StatusClient
	// Scheme is the scheme typed objects' kinds come from.
	Scheme() *runtime.Scheme
}

// New is a client of the host's calls, knowing every built-in kind (k8s.io/api's types) and
// the kinds of scheme (a CRD's Go types; nil: none).
func New(scheme *runtime.Scheme) Client {
	return NewWithCalls(scheme, host.Client)
}

// NewReader is a client for admission webhooks: Get and List from the host's cache; writes
// are refused.
func NewReader(scheme *runtime.Scheme) Client {
	return NewWithCalls(scheme, host.Reader)
}

// NewWithCalls is a client over calls (the host's, or a fake's).
func NewWithCalls(scheme *runtime.Scheme, calls host.Calls) Client {
	if scheme == nil {
		scheme = runtime.NewScheme()
	}
	return &hostClient{scheme: scheme, calls: calls}
}

type hostClient struct {
	scheme *runtime.Scheme
	calls  host.Calls
}

func (c *hostClient) Scheme() *runtime.Scheme { return c.scheme }

// GVKForObject is obj's group, version and kind: what it says (unstructured objects, partial
// metadata), what the scheme knows of its type, or, for a type of k8s.io/api, its package's
// group and version and its name.
func GVKForObject(obj runtime.Object, scheme *runtime.Scheme) (schema.GroupVersionKind, error) {
	switch obj.(type) {
	case *unstructured.Unstructured, *unstructured.UnstructuredList,
		*metav1.PartialObjectMetadata, *metav1.PartialObjectMetadataList:
		gvk := obj.GetObjectKind().GroupVersionKind()
		if gvk.Kind == "" {
			return gvk, fmt.Errorf("%T has no kind: set it with SetGroupVersionKind", obj)
		}
		return gvk, nil
	}
	if scheme != nil {
		if kinds, _, err := scheme.ObjectKinds(obj); err == nil {
			return kinds[0], nil
		}
	}
	if gvk, ok := builtinKind(obj); ok {
		return gvk, nil
	}
	return schema.GroupVersionKind{}, fmt.Errorf("no kind is known for the type %T: add a custom resource's Go types to the scheme with their AddToScheme", obj)
}

func (c *hostClient) gvk(obj runtime.Object) (schema.GroupVersionKind, error) {
	return GVKForObject(obj, c.scheme)
}

// isMetadata reports whether obj is a metadata-only object or list.
func isMetadata(obj runtime.Object) bool {
	switch obj.(type) {
	case *metav1.PartialObjectMetadata, *metav1.PartialObjectMetadataList:
		return true
	}
	return false
}

// checkKind refuses text of a metadata-only object for a typed or unstructured obj: the host
// serves a kind the manifest watches with `metadataOnly` as PartialObjectMetadata, and decoding
// it into the full type would give an object without its contents (one that, written back,
// would lose them).
func checkKind(text []byte, obj runtime.Object, gvk schema.GroupVersionKind) error {
	if isMetadata(obj) {
		return nil
	}
	var meta metav1.TypeMeta
	if err := json.Unmarshal(text, &meta); err != nil {
		return err
	}
	if meta.Kind == "PartialObjectMetadata" {
		return fmt.Errorf("%s is watched metadataOnly by this guest's manifest: read it as *metav1.PartialObjectMetadata (with its kind set), or watch it whole", gvk.Kind)
	}
	return nil
}

// decode sets obj to the object of text (obj's previous contents dropped).
func decode(text []byte, obj runtime.Object) error {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		u.Object = nil
		return u.UnmarshalJSON(text)
	}
	value := reflect.ValueOf(obj)
	if value.Kind() == reflect.Pointer && !value.IsNil() {
		value.Elem().Set(reflect.Zero(value.Elem().Type()))
	}
	return json.Unmarshal(text, obj)
}

// encode is obj's JSON with its apiVersion and kind.
func (c *hostClient) encode(obj Object) ([]byte, schema.GroupVersionKind, error) {
	gvk, err := c.gvk(obj)
	if err != nil {
		return nil, gvk, err
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	text, err := json.Marshal(obj)
	return text, gvk, err
}

func (c *hostClient) Get(_ context.Context, key ObjectKey, obj Object, opts ...GetOption) error {
	gvk, err := c.gvk(obj)
	if err != nil {
		return err
	}
	text, err := c.calls.Get(gvk, key.Namespace, key.Name)
	if err != nil {
		return err
	}
	if err := checkKind([]byte(text), obj, gvk); err != nil {
		return err
	}
	if err := decode([]byte(text), obj); err != nil {
		return fmt.Errorf("decoding %s %s: %w", gvk.Kind, key, err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return nil
}

func (c *hostClient) List(_ context.Context, list ObjectList, opts ...ListOption) error {
	listGVK, err := c.gvk(list)
	if err != nil {
		return err
	}
	gvk := listGVK
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	var o ListOptions
	o.ApplyOptions(opts)
	// A selector that selects nothing (labels.Nothing(), what LabelSelectorAsSelector makes of
	// a nil selector) is written as "", which would select everything: nothing it is.
	nothing := (o.LabelSelector != nil && !o.LabelSelector.Empty() && o.LabelSelector.String() == "") ||
		(o.FieldSelector != nil && !o.FieldSelector.Empty() && o.FieldSelector.String() == "")
	options := host.ListOptions{Namespace: o.Namespace, Uncached: o.Uncached}
	if o.LabelSelector != nil {
		options.LabelSelector = o.LabelSelector.String()
	}
	if o.FieldSelector != nil {
		options.FieldSelector = o.FieldSelector.String()
	}
	var items []string
	if !nothing {
		items, err = c.calls.List(gvk, options)
		if err != nil {
			return err
		}
	}
	if len(items) > 0 {
		if err := checkKind([]byte(items[0]), list, gvk); err != nil {
			return err
		}
	}
	var text strings.Builder
	text.WriteString(`{"apiVersion":"`)
	text.WriteString(listGVK.GroupVersion().String())
	text.WriteString(`","kind":"`)
	text.WriteString(listGVK.Kind)
	text.WriteString(`","metadata":{},"items":[`)
	for i, item := range items {
		if i > 0 {
			text.WriteByte(',')
		}
		text.WriteString(item)
	}
	text.WriteString("]}")
	if u, ok := list.(*unstructured.UnstructuredList); ok {
		u.Items = nil
		u.Object = nil
		if err := u.UnmarshalJSON([]byte(text.String())); err != nil {
			return err
		}
	} else if err := decode([]byte(text.String()), list); err != nil {
		return fmt.Errorf("decoding a %s: %w", listGVK.Kind, err)
	}
	list.GetObjectKind().SetGroupVersionKind(listGVK)
	// Each metadata-only item names the kind listed (as controller-runtime's cache sets it),
	// so that it can be patched, deleted or reported on as it is.
	if partial, ok := list.(*metav1.PartialObjectMetadataList); ok {
		for i := range partial.Items {
			partial.Items[i].SetGroupVersionKind(gvk)
		}
	}
	return nil
}

func (c *hostClient) Create(_ context.Context, obj Object, opts ...CreateOption) error {
	if isMetadata(obj) {
		return fmt.Errorf("cannot create using only metadata")
	}
	var o CreateOptions
	o.ApplyOptions(opts)
	if len(o.DryRun) > 0 {
		return apierrors.NewBadRequest("dry-run writes are not available to krec guests")
	}
	text, gvk, err := c.encode(obj)
	if err != nil {
		return err
	}
	return c.written(c.calls.Create(string(text)))(obj, gvk)
}

func (c *hostClient) Update(_ context.Context, obj Object, opts ...UpdateOption) error {
	if isMetadata(obj) {
		return fmt.Errorf("cannot update using only metadata -- did you mean to patch?")
	}
	text, gvk, err := c.encode(obj)
	if err != nil {
		return err
	}
	return c.written(c.calls.Update(string(text)))(obj, gvk)
}

func (c *hostClient) Patch(_ context.Context, obj Object, patch Patch, opts ...PatchOption) error {
	return c.patch(obj, patch, false)
}

func (c *hostClient) patch(obj Object, patch Patch, status bool) error {
	gvk, err := c.gvk(obj)
	if err != nil {
		return err
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	body, err := patch.Data(obj)
	if err != nil {
		return err
	}
	return c.written(c.calls.Patch(gvk, obj.GetNamespace(), obj.GetName(), patch.Type(), body, status))(obj, gvk)
}

func (c *hostClient) Delete(_ context.Context, obj Object, opts ...DeleteOption) error {
	gvk, err := c.gvk(obj)
	if err != nil {
		return err
	}
	var o DeleteOptions
	o.ApplyOptions(opts)
	return c.calls.Delete(gvk, obj.GetNamespace(), obj.GetName(), o.Preconditions)
}

// written decodes a write's answer into the object written.
func (c *hostClient) written(text string, err error) func(Object, schema.GroupVersionKind) error {
	return func(obj Object, gvk schema.GroupVersionKind) error {
		if err != nil {
			// Named as client-go names it: the kind and the object.
			var status *apierrors.StatusError
			if errors.As(err, &status) && status.ErrStatus.Details != nil && status.ErrStatus.Details.Kind == "" {
				status.ErrStatus.Details.Group = gvk.Group
				status.ErrStatus.Details.Kind = gvk.Kind
				status.ErrStatus.Details.Name = obj.GetName()
			}
			return err
		}
		if err := decode([]byte(text), obj); err != nil {
			return fmt.Errorf("decoding the written %s: %w", gvk.Kind, err)
		}
		obj.GetObjectKind().SetGroupVersionKind(gvk)
		return nil
	}
}

func (c *hostClient) Status() SubResourceWriter { return statusWriter{c} }

type statusWriter struct{ c *hostClient }

func (s statusWriter) Update(_ context.Context, obj Object, opts ...SubResourceUpdateOption) error {
	if isMetadata(obj) {
		return fmt.Errorf("cannot update using only metadata -- did you mean to patch?")
	}
	text, gvk, err := s.c.encode(obj)
	if err != nil {
		return err
	}
	return s.c.written(s.c.calls.UpdateStatus(string(text)))(obj, gvk)
}

func (s statusWriter) Patch(_ context.Context, obj Object, patch Patch, opts ...SubResourcePatchOption) error {
	return s.c.patch(obj, patch, true)
}

// IgnoreNotFound is nil for a NotFound error, err otherwise.
func IgnoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// IgnoreAlreadyExists is nil for an AlreadyExists error, err otherwise.
func IgnoreAlreadyExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
