// Package fake runs a Go guest's reconciler and webhooks under `go test`, natively, against
// krec's own API server: NewCluster starts `krec cluster` on loopback for the test (about
// 0.2 s), and its Client is the guest's client.Client over it. Objects are stored, validated,
// defaulted, versioned and selected exactly as the host's cluster does them — there is no
// second, simpler copy of the API server to drift from it.
//
//	func TestLabelsTheReplicaSet(t *testing.T) {
//		cluster := fake.NewCluster(t)
//		cluster.Add(t, replicaSet("web"), pod("web-1"))
//		r := &PodCounter{Client: cluster.Client()}
//		if _, err := r.Reconcile(context.Background(), reconcile.Request{…}); err != nil { … }
//	}
//
// The cluster runs no built-in controllers (a Deployment makes no ReplicaSet, as in
// controller-runtime's fake client and envtest) and no permission checks (the manifest's
// permissions are checked by the host and by `krec dev`). It finds krec as $KREC or on PATH.
package fake

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"krec.dev/guest"
	"krec.dev/guest/client"
	"krec.dev/guest/internal/host"
)

// FieldManager is the field manager of the fake client's server-side applies.
const FieldManager = "krec-guest-test"

// Cluster is krec's API server, started for one test.
type Cluster struct {
	// Config reaches the API server (for client-go or controller-runtime clients of its own).
	Config  *rest.Config
	dynamic dynamic.Interface
	mapper  *restmapper.DeferredDiscoveryRESTMapper
	scheme  *runtime.Scheme

	mu     sync.Mutex
	writes []string
}

// NewCluster starts `krec cluster` for t, stopped when t ends. It fails t when krec cannot be
// found or does not start.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	krec := os.Getenv("KREC")
	if krec == "" {
		found, err := exec.LookPath("krec")
		if err != nil {
			t.Fatalf("fake.NewCluster: the fake cluster is krec's API server, and krec is not on PATH (nor in $KREC): %v", err)
		}
		krec = found
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig.yaml")
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, krec, "cluster", "--addr", "127.0.0.1:0",
		"--kubeconfig-out", kubeconfig, "--controllers", "none", "--nodes", "0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatalf("fake.NewCluster: %v", err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("fake.NewCluster: starting %s cluster: %v", krec, err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	// krec prints the kubeconfig's path once the API server serves.
	ready := make(chan error, 1)
	go func() {
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			if strings.HasPrefix(lines.Text(), "kubeconfig:") {
				ready <- nil
				break
			}
		}
		// Keep draining: krec must never block on a full pipe.
		for lines.Scan() {
		}
		ready <- errors.New("krec cluster ended before serving")
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("fake.NewCluster: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("fake.NewCluster: krec cluster did not serve within 30 s\n%s", stderr.String())
	}
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("fake.NewCluster: reading krec's kubeconfig: %v", err)
	}
	config.QPS, config.Burst = -1, 0 // no client-side throttling in tests
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		t.Fatalf("fake.NewCluster: %v", err)
	}
	disco, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		t.Fatalf("fake.NewCluster: %v", err)
	}
	return &Cluster{
		Config:  config,
		dynamic: dyn,
		mapper:  restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco)),
		scheme:  guest.Scheme,
	}
}

// WithScheme makes the cluster's clients know scheme's kinds (a CRD's Go types) beside the
// built-in ones, which they always know; the default is guest.Scheme, the guest's own.
func (c *Cluster) WithScheme(scheme *runtime.Scheme) *Cluster {
	c.scheme = scheme
	return c
}

// Client is the guest's client over this cluster: what guest.Client() is in the host.
func (c *Cluster) Client() client.Client { return client.NewWithCalls(c.scheme, calls{c, false}) }

// Reader is the webhooks' client over this cluster (guest.Reader()): writes are refused.
func (c *Cluster) Reader() client.Client { return client.NewWithCalls(c.scheme, calls{c, true}) }

// Writes are the writes the clients made, in order ("update apps/v1 ReplicaSet default/web").
// Objects added with Add are not counted.
func (c *Cluster) Writes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.writes...)
}

// Add creates objects (typed, unstructured, or YAML/JSON text with `---` between documents) as
// they are, creating their namespaces when missing, and waits for a CustomResourceDefinition
// to be served before going on. It fails t on any error.
func (c *Cluster) Add(t testing.TB, objects ...any) {
	t.Helper()
	for _, object := range objects {
		docs, err := documents(object, c.scheme)
		if err != nil {
			t.Fatalf("fake: adding %T: %v", object, err)
		}
		for _, doc := range docs {
			if err := c.add(doc); err != nil {
				t.Fatalf("fake: adding %s %s: %v", doc.GetKind(), doc.GetName(), err)
			}
		}
	}
}

// AddFiles adds the objects of YAML files (CRDs, examples), as Add.
func (c *Cluster) AddFiles(t testing.TB, paths ...string) {
	t.Helper()
	for _, path := range paths {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("fake: %v", err)
		}
		c.Add(t, string(text))
	}
}

func (c *Cluster) add(obj *unstructured.Unstructured) error {
	ctx := context.Background()
	mapping, err := c.mapping(obj.GroupVersionKind())
	if err != nil {
		return err
	}
	resource := c.dynamic.Resource(mapping.Resource)
	if ns := obj.GetNamespace(); ns != "" && mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		namespace := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}
		_, err := c.dynamic.Resource(corev1.SchemeGroupVersion.WithResource("namespaces")).
			Create(ctx, namespace, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		_, err = resource.Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			return err
		}
	} else if _, err := resource.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return err
	}
	if obj.GetKind() == "CustomResourceDefinition" {
		return c.served(obj)
	}
	return nil
}

// served waits until the CRD's kind is in discovery.
func (c *Cluster) served(crd *unstructured.Unstructured) error {
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.mapper.Reset()
		if _, err := c.mapper.RESTMapping(schema.GroupKind{Group: group, Kind: kind}); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the CRD's kind %s.%s was not served within 30 s", kind, group)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// documents turns what Add was given into objects.
func documents(object any, scheme *runtime.Scheme) ([]*unstructured.Unstructured, error) {
	switch o := object.(type) {
	case string:
		var out []*unstructured.Unstructured
		for _, doc := range strings.Split("\n"+o, "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			fields := map[string]any{}
			if err := yaml.Unmarshal([]byte(doc), &fields); err != nil {
				return nil, err
			}
			if len(fields) == 0 {
				continue // only comments
			}
			out = append(out, &unstructured.Unstructured{Object: fields})
		}
		return out, nil
	case *unstructured.Unstructured:
		return []*unstructured.Unstructured{o.DeepCopy()}, nil
	case client.Object:
		gvk, err := client.GVKForObject(o, scheme)
		if err != nil {
			return nil, err
		}
		fields, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{Object: fields}
		u.SetGroupVersionKind(gvk)
		return []*unstructured.Unstructured{u}, nil
	default:
		return nil, fmt.Errorf("not an object: give a client.Object, an *unstructured.Unstructured or YAML text")
	}
}

func (c *Cluster) mapping(gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	mapping, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		// A CRD created since discovery was read.
		c.mapper.Reset()
		mapping, err = c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		// As the host says it to a guest.
		return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    404,
			Reason:  metav1.StatusReasonNotFound,
			Message: fmt.Sprintf("the API server does not serve %s %s", gvk.GroupVersion(), gvk.Kind),
		}}
	}
	return mapping, nil
}

func (c *Cluster) resource(gvk schema.GroupVersionKind, namespace string) (dynamic.ResourceInterface, error) {
	mapping, err := c.mapping(gvk)
	if err != nil {
		return nil, err
	}
	r := c.dynamic.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		return r.Namespace(namespace), nil
	}
	return r, nil
}

func (c *Cluster) wrote(verb string, gvk schema.GroupVersionKind, namespace, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	c.writes = append(c.writes, fmt.Sprintf("%s %s %s %s", verb, gvk.GroupVersion(), gvk.Kind, key))
}

// calls are the host's calls, answered by the cluster.
type calls struct {
	c        *Cluster
	readOnly bool
}

var _ host.Calls = calls{}

func text(obj *unstructured.Unstructured, err error) (string, error) {
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(obj.Object)
	return string(b), err
}

func (k calls) Get(gvk schema.GroupVersionKind, namespace, name string) (string, error) {
	r, err := k.c.resource(gvk, namespace)
	if err != nil {
		return "", err
	}
	return text(r.Get(context.Background(), name, metav1.GetOptions{}))
}

func (k calls) List(gvk schema.GroupVersionKind, o host.ListOptions) ([]string, error) {
	r, err := k.c.resource(gvk, o.Namespace)
	if err != nil {
		return nil, err
	}
	list, err := r.List(context.Background(), metav1.ListOptions{LabelSelector: o.LabelSelector, FieldSelector: o.FieldSelector})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(list.Items))
	for i := range list.Items {
		b, err := json.Marshal(list.Items[i].Object)
		if err != nil {
			return nil, err
		}
		out = append(out, string(b))
	}
	return out, nil
}

func (k calls) refused() error {
	return apierrors.NewForbidden(schema.GroupResource{}, "", errors.New("a webhook's reader may not write"))
}

func (k calls) write(verb, object string, do func(dynamic.ResourceInterface, *unstructured.Unstructured) (*unstructured.Unstructured, error)) (string, error) {
	if k.readOnly {
		return "", k.refused()
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON([]byte(object)); err != nil {
		return "", apierrors.NewBadRequest(err.Error())
	}
	gvk := obj.GroupVersionKind()
	r, err := k.c.resource(gvk, obj.GetNamespace())
	if err != nil {
		return "", err
	}
	out, err := do(r, obj)
	if err == nil {
		k.c.wrote(verb, gvk, obj.GetNamespace(), out.GetName())
	}
	return text(out, err)
}

func (k calls) Create(object string) (string, error) {
	return k.write("create", object, func(r dynamic.ResourceInterface, o *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		return r.Create(context.Background(), o, metav1.CreateOptions{})
	})
}

func (k calls) Update(object string) (string, error) {
	return k.write("update", object, func(r dynamic.ResourceInterface, o *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		return r.Update(context.Background(), o, metav1.UpdateOptions{})
	})
}

func (k calls) UpdateStatus(object string) (string, error) {
	return k.write("update-status", object, func(r dynamic.ResourceInterface, o *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		return r.UpdateStatus(context.Background(), o, metav1.UpdateOptions{})
	})
}

func (k calls) Patch(gvk schema.GroupVersionKind, namespace, name string, patchType types.PatchType, body []byte, status bool) (string, error) {
	if k.readOnly {
		return "", k.refused()
	}
	r, err := k.c.resource(gvk, namespace)
	if err != nil {
		return "", err
	}
	var subresources []string
	if status {
		subresources = []string{"status"}
	}
	options := metav1.PatchOptions{}
	if patchType == types.ApplyPatchType {
		force := true
		options.FieldManager, options.Force = FieldManager, &force
	}
	out, err := r.Patch(context.Background(), name, patchType, body, options, subresources...)
	if err == nil {
		verb := "patch"
		if status {
			verb = "patch-status"
		}
		k.c.wrote(verb, gvk, namespace, name)
	}
	return text(out, err)
}

func (k calls) Delete(gvk schema.GroupVersionKind, namespace, name string, pre *metav1.Preconditions) error {
	if k.readOnly {
		return k.refused()
	}
	r, err := k.c.resource(gvk, namespace)
	if err != nil {
		return err
	}
	if err := r.Delete(context.Background(), name, metav1.DeleteOptions{Preconditions: pre}); err != nil {
		return err
	}
	k.c.wrote("delete", gvk, namespace, name)
	return nil
}
