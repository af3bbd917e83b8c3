package client

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// GetOption modifies a Get (none are needed by the host; kept for controller-runtime's shape).
type GetOption interface{ ApplyToGet(*GetOptions) }

// GetOptions are a Get's options.
type GetOptions struct{}

// ListOption modifies a List.
type ListOption interface{ ApplyToList(*ListOptions) }

// ListOptions select what a List returns.
type ListOptions struct {
	// LabelSelector selects by label.
	LabelSelector labels.Selector
	// FieldSelector selects by field (metadata.name and metadata.namespace).
	FieldSelector fields.Selector
	// Namespace lists one namespace only.
	Namespace string
	// Uncached reads from the API server instead of the host's cache.
	Uncached bool
}

// ApplyOptions applies opts in order.
func (o *ListOptions) ApplyOptions(opts []ListOption) *ListOptions {
	for _, opt := range opts {
		opt.ApplyToList(o)
	}
	return o
}

// ApplyToList copies o's settings into a List's options.
func (o *ListOptions) ApplyToList(to *ListOptions) {
	if o.LabelSelector != nil {
		to.LabelSelector = o.LabelSelector
	}
	if o.FieldSelector != nil {
		to.FieldSelector = o.FieldSelector
	}
	if o.Namespace != "" {
		to.Namespace = o.Namespace
	}
	if o.Uncached {
		to.Uncached = true
	}
}

// InNamespace lists (or deletes, with DeleteAllOf) in one namespace.
type InNamespace string

// ApplyToList sets the namespace.
func (n InNamespace) ApplyToList(o *ListOptions) { o.Namespace = string(n) }

// MatchingLabels selects objects with all these labels.
type MatchingLabels map[string]string

// ApplyToList sets the label selector.
func (m MatchingLabels) ApplyToList(o *ListOptions) {
	o.LabelSelector = labels.SelectorFromValidatedSet(map[string]string(m))
}

// HasLabels selects objects that have all these labels, whatever their values.
type HasLabels []string

// ApplyToList sets the label selector.
func (h HasLabels) ApplyToList(o *ListOptions) {
	selector := labels.NewSelector()
	for _, key := range h {
		if r, err := labels.NewRequirement(key, "exists", nil); err == nil {
			selector = selector.Add(*r)
		}
	}
	o.LabelSelector = selector
}

// MatchingLabelsSelector selects by a label selector.
type MatchingLabelsSelector struct{ labels.Selector }

// ApplyToList sets the label selector.
func (m MatchingLabelsSelector) ApplyToList(o *ListOptions) { o.LabelSelector = m.Selector }

// MatchingFields selects by field values (the host knows metadata.name and metadata.namespace).
type MatchingFields fields.Set

// ApplyToList sets the field selector.
func (m MatchingFields) ApplyToList(o *ListOptions) {
	o.FieldSelector = fields.SelectorFromSet(fields.Set(m))
}

// MatchingFieldsSelector selects by a field selector.
type MatchingFieldsSelector struct{ fields.Selector }

// ApplyToList sets the field selector.
func (m MatchingFieldsSelector) ApplyToList(o *ListOptions) { o.FieldSelector = m.Selector }

// Uncached reads from the API server rather than the host's cache (krec's; controller-runtime
// reads uncached through its APIReader).
var Uncached = uncached{}

type uncached struct{}

func (uncached) ApplyToList(o *ListOptions) { o.Uncached = true }

// CreateOption modifies a Create.
type CreateOption interface{ ApplyToCreate(*CreateOptions) }

// CreateOptions are a Create's options.
type CreateOptions struct {
	DryRun       []string
	FieldManager string
}

// ApplyOptions applies opts in order.
func (o *CreateOptions) ApplyOptions(opts []CreateOption) *CreateOptions {
	for _, opt := range opts {
		opt.ApplyToCreate(o)
	}
	return o
}

// UpdateOption modifies an Update.
type UpdateOption interface{ ApplyToUpdate(*UpdateOptions) }

// UpdateOptions are an Update's options.
type UpdateOptions struct {
	DryRun       []string
	FieldManager string
}

// PatchOption modifies a Patch.
type PatchOption interface{ ApplyToPatch(*PatchOptions) }

// PatchOptions are a Patch's options.
type PatchOptions struct {
	DryRun       []string
	Force        *bool
	FieldManager string
}

// DeleteOption modifies a Delete.
type DeleteOption interface{ ApplyToDelete(*DeleteOptions) }

// DeleteOptions are a Delete's options.
type DeleteOptions struct {
	GracePeriodSeconds *int64
	Preconditions      *metav1.Preconditions
	PropagationPolicy  *metav1.DeletionPropagation
	DryRun             []string
}

// ApplyOptions applies opts in order.
func (o *DeleteOptions) ApplyOptions(opts []DeleteOption) *DeleteOptions {
	for _, opt := range opts {
		opt.ApplyToDelete(o)
	}
	return o
}

// Preconditions must hold for a Delete.
type Preconditions metav1.Preconditions

// ApplyToDelete sets the preconditions.
func (p Preconditions) ApplyToDelete(o *DeleteOptions) {
	pre := metav1.Preconditions(p)
	o.Preconditions = &pre
}

// SubResourceUpdateOption modifies a status Update.
type SubResourceUpdateOption interface {
	ApplyToSubResourceUpdate(*SubResourceUpdateOptions)
}

// SubResourceUpdateOptions are a status Update's options.
type SubResourceUpdateOptions struct{ UpdateOptions }

// SubResourcePatchOption modifies a status Patch.
type SubResourcePatchOption interface {
	ApplyToSubResourcePatch(*SubResourcePatchOptions)
}

// SubResourcePatchOptions are a status Patch's options.
type SubResourcePatchOptions struct{ PatchOptions }

// FieldOwner names the field manager of a write (the host writes as the guest's own,
// `krec-<guest>`; kept for controller-runtime's shape).
type FieldOwner string

// ApplyToPatch is a no-op: the host names the field manager.
func (f FieldOwner) ApplyToPatch(o *PatchOptions) { o.FieldManager = string(f) }

// ApplyToCreate is a no-op: the host names the field manager.
func (f FieldOwner) ApplyToCreate(o *CreateOptions) { o.FieldManager = string(f) }

// ApplyToUpdate is a no-op: the host names the field manager.
func (f FieldOwner) ApplyToUpdate(o *UpdateOptions) { o.FieldManager = string(f) }

// ForceOwnership takes the fields of a server-side apply from other managers.
var ForceOwnership = forceOwnership{}

type forceOwnership struct{}

func (forceOwnership) ApplyToPatch(o *PatchOptions) {
	force := true
	o.Force = &force
}

// Patch is a patch of an object.
type Patch interface {
	// Type is the patch's content type.
	Type() types.PatchType
	// Data is the patch's body for obj.
	Data(obj Object) ([]byte, error)
}
