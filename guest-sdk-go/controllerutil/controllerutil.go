// Package controllerutil has controller-runtime's controllerutil helpers — the same names and
// behaviour as sigs.k8s.io/controller-runtime/pkg/controller/controllerutil — over krec's
// client: CreateOrUpdate, CreateOrPatch, owner and controller references, and finalizers.
package controllerutil

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"krec.dev/guest/client"
)

// OperationResult is what CreateOrUpdate and CreateOrPatch did.
type OperationResult string

// The results.
const (
	OperationResultNone    OperationResult = "unchanged"
	OperationResultCreated OperationResult = "created"
	OperationResultUpdated OperationResult = "updated"
)

// MutateFn sets the object's desired state.
type MutateFn func() error

// CreateOrUpdate gets obj by its key, sets its desired state with f and creates or updates it
// — nothing when f changed nothing. obj holds the object as the API server answered.
func CreateOrUpdate(ctx context.Context, c client.Client, obj client.Object, f MutateFn) (OperationResult, error) {
	return createOr(ctx, c, obj, f, func(client.Object) error { return c.Update(ctx, obj) })
}

// CreateOrPatch is CreateOrUpdate with a merge patch of what f changed instead of an update
// (no conflict on a stale resourceVersion).
func CreateOrPatch(ctx context.Context, c client.Client, obj client.Object, f MutateFn) (OperationResult, error) {
	return createOr(ctx, c, obj, f, func(existing client.Object) error {
		return c.Patch(ctx, obj, client.MergeFrom(existing))
	})
}

// createOr gets obj, sets its desired state with f, and creates it, or writes it with write
// (given the object as it was) when f changed it.
func createOr(ctx context.Context, c client.Client, obj client.Object, f MutateFn, write func(existing client.Object) error) (OperationResult, error) {
	key := client.ObjectKeyFromObject(obj)
	if err := c.Get(ctx, key, obj); err != nil {
		if !apierrors.IsNotFound(err) {
			return OperationResultNone, err
		}
		if err := mutate(f, key, obj); err != nil {
			return OperationResultNone, err
		}
		if err := c.Create(ctx, obj); err != nil {
			return OperationResultNone, err
		}
		return OperationResultCreated, nil
	}
	existing, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return OperationResultNone, fmt.Errorf("%T is not a client.Object", obj)
	}
	if err := mutate(f, key, obj); err != nil {
		return OperationResultNone, err
	}
	if equality.Semantic.DeepEqual(existing, obj) {
		return OperationResultNone, nil
	}
	if err := write(existing); err != nil {
		return OperationResultNone, err
	}
	return OperationResultUpdated, nil
}

// mutate runs f and refuses a change of the object's name or namespace.
func mutate(f MutateFn, key client.ObjectKey, obj client.Object) error {
	if err := f(); err != nil {
		return err
	}
	if client.ObjectKeyFromObject(obj) != key {
		return fmt.Errorf("MutateFn cannot mutate object name and/or object namespace")
	}
	return nil
}

// AlreadyOwnedError says an object already has another controller.
type AlreadyOwnedError struct {
	Object metav1.Object
	Owner  metav1.OwnerReference
}

func (e *AlreadyOwnedError) Error() string {
	return fmt.Sprintf("Object %s/%s is already owned by another %s controller %s", e.Object.GetNamespace(), e.Object.GetName(), e.Owner.Kind, e.Owner.Name)
}

// SetControllerReference makes owner the controller of object (a controller owner reference
// that blocks the owner's deletion), refusing when another controller owns it, or when a
// namespaced object would be owned across namespaces.
func SetControllerReference(owner, object metav1.Object, scheme *runtime.Scheme) error {
	ref, err := reference(owner, object, scheme)
	if err != nil {
		return err
	}
	if existing := metav1.GetControllerOf(object); existing != nil && !sameOwner(*existing, ref) {
		return &AlreadyOwnedError{Object: object, Owner: *existing}
	}
	yes := true
	ref.Controller, ref.BlockOwnerDeletion = &yes, &yes
	upsert(object, ref)
	return nil
}

// SetOwnerReference adds owner to object's owner references (not as its controller).
func SetOwnerReference(owner, object metav1.Object, scheme *runtime.Scheme) error {
	ref, err := reference(owner, object, scheme)
	if err != nil {
		return err
	}
	upsert(object, ref)
	return nil
}

func reference(owner, object metav1.Object, scheme *runtime.Scheme) (metav1.OwnerReference, error) {
	ro, ok := owner.(runtime.Object)
	if !ok {
		return metav1.OwnerReference{}, fmt.Errorf("%T is not a runtime.Object, cannot call SetOwnerReference", owner)
	}
	if ns := owner.GetNamespace(); ns != "" && ns != object.GetNamespace() {
		return metav1.OwnerReference{}, fmt.Errorf("cross-namespace owner references are disallowed, owner's namespace %s, obj's namespace %s", ns, object.GetNamespace())
	}
	gvk, err := client.GVKForObject(ro, scheme)
	if err != nil {
		return metav1.OwnerReference{}, err
	}
	return metav1.OwnerReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: owner.GetName(), UID: owner.GetUID()}, nil
}

func sameOwner(a, b metav1.OwnerReference) bool {
	ga, errA := schema.ParseGroupVersion(a.APIVersion)
	gb, errB := schema.ParseGroupVersion(b.APIVersion)
	return errA == nil && errB == nil && ga.Group == gb.Group && a.Kind == b.Kind && a.Name == b.Name
}

func upsert(object metav1.Object, ref metav1.OwnerReference) {
	refs := object.GetOwnerReferences()
	for i := range refs {
		if sameOwner(refs[i], ref) {
			refs[i] = ref
			object.SetOwnerReferences(refs)
			return
		}
	}
	object.SetOwnerReferences(append(refs, ref))
}

// ContainsFinalizer reports whether object has finalizer.
func ContainsFinalizer(object metav1.Object, finalizer string) bool {
	for _, f := range object.GetFinalizers() {
		if f == finalizer {
			return true
		}
	}
	return false
}

// AddFinalizer adds finalizer, reporting whether it was missing.
func AddFinalizer(object metav1.Object, finalizer string) bool {
	if ContainsFinalizer(object, finalizer) {
		return false
	}
	object.SetFinalizers(append(object.GetFinalizers(), finalizer))
	return true
}

// RemoveFinalizer removes finalizer, reporting whether it was there.
func RemoveFinalizer(object metav1.Object, finalizer string) bool {
	kept := make([]string, 0, len(object.GetFinalizers()))
	for _, f := range object.GetFinalizers() {
		if f != finalizer {
			kept = append(kept, f)
		}
	}
	removed := len(kept) != len(object.GetFinalizers())
	object.SetFinalizers(kept)
	return removed
}
