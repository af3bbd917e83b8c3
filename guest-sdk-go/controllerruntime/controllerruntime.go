// Package controllerruntime runs controller-runtime code in a krec guest unchanged: Client is
// sigs.k8s.io/controller-runtime/pkg/client.Client over the host's calls, Register registers a
// controller-runtime reconcile.Reconciler, and NewManager is a manager.Manager for the
// builder (`ctrl.NewControllerManagedBy(mgr).For(…).Owns(…).Complete(r)`), so a reconciler's
// SetupWithManager runs as it is.
//
// A reconciler written for controller-runtime compiles against this package with no change to
// its code; only its wiring moves from main into an init function, because the host, not the
// guest, runs the informers, the workqueue and leader election — and what is watched is the
// manifest's `for`, `owns` and `watches`, not the builder's:
//
//	func init() {
//		krecctrl.Register(&ReplicaSetReconciler{Client: krecctrl.Client()})
//	}
//
//	func main() {}
//
// What the host's calls carry and what they do not: reads come from the host's cache (Get,
// List with namespace, label and field selectors — Limit and Continue are ignored: a List
// answers every object); writes go to the API server as the guest's field manager (FieldOwner
// is not carried); DryRun is refused rather than written for real; a Delete's preconditions
// are kept, its propagation policy and grace period are the API server's defaults;
// subresources other than status are refused.
package controllerruntime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"krec.dev/guest"
	"krec.dev/guest/client"
)

// controller-runtime code expects its manager's scheme to hold every built-in kind (kubebuilder's
// main adds client-go's scheme): guest.Scheme is client-go's here, which controller-runtime's
// client package links anyway (the SDK alone knows built-in kinds by their Go package).
func init() { guest.Scheme = clientgoscheme.Scheme }

// Client is controller-runtime's client over the host's calls, knowing guest.Scheme's kinds.
func Client() crclient.Client { return NewClient(client.New(guest.Scheme)) }

// NewClient is controller-runtime's client over c (krec's client: the host's, or a test's
// from krec.dev/guest/fake).
func NewClient(c client.Client) crclient.Client { return &adapter{c: c} }

type adapter struct {
	c client.Client
}

var _ crclient.Client = &adapter{}

func (a *adapter) Scheme() *runtime.Scheme { return a.c.Scheme() }

// RESTMapper is empty: a guest's kinds are its scheme's, their resources the host's business.
func (a *adapter) RESTMapper() meta.RESTMapper { return meta.MultiRESTMapper{} }

func (a *adapter) GroupVersionKindFor(obj runtime.Object) (schema.GroupVersionKind, error) {
	return apiutil.GVKForObject(obj, a.c.Scheme())
}

// clusterScoped are the built-in kinds without a namespace.
var clusterScoped = map[schema.GroupKind]bool{
	{Kind: "Namespace"}: true, {Kind: "Node"}: true, {Kind: "PersistentVolume"}: true,
	{Kind: "ComponentStatus"}:                                                         true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:                         true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}:                  true,
	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}:                 true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}:   true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}:     true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"}:        true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"}: true,
	{Group: "storage.k8s.io", Kind: "StorageClass"}:                                   true,
	{Group: "storage.k8s.io", Kind: "CSIDriver"}:                                      true,
	{Group: "storage.k8s.io", Kind: "CSINode"}:                                        true,
	{Group: "storage.k8s.io", Kind: "VolumeAttachment"}:                               true,
	{Group: "scheduling.k8s.io", Kind: "PriorityClass"}:                               true,
	{Group: "node.k8s.io", Kind: "RuntimeClass"}:                                      true,
	{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"}:                 true,
	{Group: "networking.k8s.io", Kind: "IngressClass"}:                                true,
	{Group: "apiregistration.k8s.io", Kind: "APIService"}:                             true,
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "FlowSchema"}:                       true,
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "PriorityLevelConfiguration"}:       true,
}

// IsObjectNamespaced answers from the built-in kinds, and for others from the object itself
// (a namespace set): the guest has no discovery.
func (a *adapter) IsObjectNamespaced(obj runtime.Object) (bool, error) {
	gvk, err := a.GroupVersionKindFor(obj)
	if err != nil {
		return false, err
	}
	if clusterScoped[gvk.GroupKind()] {
		return false, nil
	}
	if o, ok := obj.(metav1.Object); ok && o.GetNamespace() != "" {
		return true, nil
	}
	// Every other built-in kind is namespaced; a custom kind without a namespace is taken as
	// cluster-scoped.
	builtIn := gvk.Group == "" || !strings.Contains(gvk.Group, ".") || strings.HasSuffix(gvk.Group, ".k8s.io")
	return builtIn, nil
}

func (a *adapter) Get(ctx context.Context, key crclient.ObjectKey, obj crclient.Object, opts ...crclient.GetOption) error {
	return a.c.Get(ctx, key, obj)
}

func (a *adapter) List(ctx context.Context, list crclient.ObjectList, opts ...crclient.ListOption) error {
	o := (&crclient.ListOptions{}).ApplyOptions(opts)
	var options []client.ListOption
	if o.Namespace != "" {
		options = append(options, client.InNamespace(o.Namespace))
	}
	if o.LabelSelector != nil {
		options = append(options, client.MatchingLabelsSelector{Selector: o.LabelSelector})
	}
	if o.FieldSelector != nil {
		options = append(options, client.MatchingFieldsSelector{Selector: o.FieldSelector})
	}
	return a.c.List(ctx, list, options...)
}

func dryRun(d []string) error {
	if len(d) > 0 {
		return errors.New("dry-run writes are not available to krec guests")
	}
	return nil
}

func (a *adapter) Create(ctx context.Context, obj crclient.Object, opts ...crclient.CreateOption) error {
	if err := dryRun((&crclient.CreateOptions{}).ApplyOptions(opts).DryRun); err != nil {
		return err
	}
	return a.c.Create(ctx, obj)
}

func (a *adapter) Update(ctx context.Context, obj crclient.Object, opts ...crclient.UpdateOption) error {
	if err := dryRun((&crclient.UpdateOptions{}).ApplyOptions(opts).DryRun); err != nil {
		return err
	}
	return a.c.Update(ctx, obj)
}

// patch is controller-runtime's patch as krec's.
type patch struct{ p crclient.Patch }

func (p patch) Type() types.PatchType                  { return p.p.Type() }
func (p patch) Data(obj client.Object) ([]byte, error) { return p.p.Data(obj) }

func patchOptions(opts []crclient.PatchOption) ([]client.PatchOption, error) {
	o := (&crclient.PatchOptions{}).ApplyOptions(opts)
	if err := dryRun(o.DryRun); err != nil {
		return nil, err
	}
	if o.Force != nil && *o.Force {
		return []client.PatchOption{client.ForceOwnership}, nil
	}
	return nil, nil
}

func (a *adapter) Patch(ctx context.Context, obj crclient.Object, p crclient.Patch, opts ...crclient.PatchOption) error {
	options, err := patchOptions(opts)
	if err != nil {
		return err
	}
	return a.c.Patch(ctx, obj, patch{p}, options...)
}

func (a *adapter) Delete(ctx context.Context, obj crclient.Object, opts ...crclient.DeleteOption) error {
	o := (&crclient.DeleteOptions{}).ApplyOptions(opts)
	if err := dryRun(o.DryRun); err != nil {
		return err
	}
	var options []client.DeleteOption
	if o.Preconditions != nil {
		options = append(options, client.Preconditions(*o.Preconditions))
	}
	return a.c.Delete(ctx, obj, options...)
}

// DeleteAllOf lists the objects of obj's kind the options select and deletes each.
func (a *adapter) DeleteAllOf(ctx context.Context, obj crclient.Object, opts ...crclient.DeleteAllOfOption) error {
	o := (&crclient.DeleteAllOfOptions{}).ApplyOptions(opts)
	gvk, err := a.GroupVersionKindFor(obj)
	if err != nil {
		return err
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := a.List(ctx, list, &o.ListOptions); err != nil {
		return err
	}
	for i := range list.Items {
		item := &list.Items[i]
		item.SetGroupVersionKind(gvk)
		if err := a.Delete(ctx, item, &o.DeleteOptions); crclient.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

// Apply is a server-side apply of the configuration (forced when asked), the API server's
// answer decoded back into it.
func (a *adapter) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...crclient.ApplyOption) error {
	o := (&crclient.ApplyOptions{}).ApplyOptions(opts)
	var force []crclient.PatchOption
	if o.Force != nil && *o.Force {
		force = append(force, crclient.ForceOwnership)
	}
	return a.apply(ctx, obj, o.DryRun, force, func(u *unstructured.Unstructured, p crclient.Patch, po []crclient.PatchOption) error {
		return a.Patch(ctx, u, p, po...)
	})
}

func (a *adapter) apply(_ context.Context, obj runtime.ApplyConfiguration, dry []string, opts []crclient.PatchOption,
	do func(*unstructured.Unstructured, crclient.Patch, []crclient.PatchOption) error) error {
	if err := dryRun(dry); err != nil {
		return err
	}
	body, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("encoding the apply configuration: %w", err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(body); err != nil {
		return fmt.Errorf("the apply configuration: %w", err)
	}
	if err := do(u, crclient.RawPatch(types.ApplyPatchType, body), opts); err != nil {
		return err
	}
	answer, err := u.MarshalJSON()
	if err != nil {
		return err
	}
	return json.Unmarshal(answer, obj)
}

// Status writes objects' status subresource.
func (a *adapter) Status() crclient.SubResourceWriter { return status{a} }

// SubResource is the status subresource; others are refused.
func (a *adapter) SubResource(name string) crclient.SubResourceClient {
	if name == "status" {
		return status{a}
	}
	return refusedSubResource(name)
}

type status struct{ a *adapter }

func (s status) Get(ctx context.Context, obj, sub crclient.Object, _ ...crclient.SubResourceGetOption) error {
	// The status is part of the object the cache holds.
	return s.a.c.Get(ctx, crclient.ObjectKeyFromObject(obj), sub)
}

func (s status) Create(context.Context, crclient.Object, crclient.Object, ...crclient.SubResourceCreateOption) error {
	return errors.New("creating a status subresource is not available to krec guests")
}

func (s status) Update(ctx context.Context, obj crclient.Object, opts ...crclient.SubResourceUpdateOption) error {
	if err := dryRun((&crclient.SubResourceUpdateOptions{}).ApplyOptions(opts).DryRun); err != nil {
		return err
	}
	return s.a.c.Status().Update(ctx, obj)
}

func (s status) Patch(ctx context.Context, obj crclient.Object, p crclient.Patch, opts ...crclient.SubResourcePatchOption) error {
	o := (&crclient.SubResourcePatchOptions{}).ApplyOptions(opts)
	if err := dryRun(o.DryRun); err != nil {
		return err
	}
	return s.a.c.Status().Patch(ctx, obj, patch{p})
}

func (s status) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...crclient.SubResourceApplyOption) error {
	o := (&crclient.SubResourceApplyOptions{}).ApplyOpts(opts)
	return s.a.apply(ctx, obj, o.DryRun, nil, func(u *unstructured.Unstructured, p crclient.Patch, _ []crclient.PatchOption) error {
		return s.a.c.Status().Patch(ctx, u, patch{p})
	})
}

type refusedSubResource string

func (r refusedSubResource) err() error {
	return fmt.Errorf("the %s subresource is not available to krec guests (only status)", string(r))
}

func (r refusedSubResource) Get(context.Context, crclient.Object, crclient.Object, ...crclient.SubResourceGetOption) error {
	return r.err()
}
func (r refusedSubResource) Create(context.Context, crclient.Object, crclient.Object, ...crclient.SubResourceCreateOption) error {
	return r.err()
}
func (r refusedSubResource) Update(context.Context, crclient.Object, ...crclient.SubResourceUpdateOption) error {
	return r.err()
}
func (r refusedSubResource) Patch(context.Context, crclient.Object, crclient.Patch, ...crclient.SubResourcePatchOption) error {
	return r.err()
}
func (r refusedSubResource) Apply(context.Context, runtime.ApplyConfiguration, ...crclient.SubResourceApplyOption) error {
	return r.err()
}
