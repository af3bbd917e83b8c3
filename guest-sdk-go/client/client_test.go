package client_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"krec.dev/guest/client"
	"krec.dev/guest/internal/host"
)

// calls records what the client asked the host and answers from objects.
type calls struct {
	objects map[string]string
	asked   []string
}

func (c *calls) Get(gvk schema.GroupVersionKind, namespace, name string) (string, error) {
	c.asked = append(c.asked, "get "+gvk.Kind+" "+namespace+"/"+name)
	if text, ok := c.objects[namespace+"/"+name]; ok {
		return text, nil
	}
	return "", apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: "x"}, name)
}

func (c *calls) List(gvk schema.GroupVersionKind, o host.ListOptions) ([]string, error) {
	c.asked = append(c.asked, "list "+gvk.GroupVersion().String()+" "+gvk.Kind+" ns="+o.Namespace+" labels="+o.LabelSelector)
	var out []string
	for _, text := range c.objects {
		out = append(out, text)
	}
	return out, nil
}

func (c *calls) Create(object string) (string, error) { return object, nil }
func (c *calls) Update(object string) (string, error) {
	c.asked = append(c.asked, "update "+object)
	return object, nil
}
func (c *calls) UpdateStatus(object string) (string, error) { return object, nil }
func (c *calls) Patch(gvk schema.GroupVersionKind, namespace, name string, pt types.PatchType, body []byte, status bool) (string, error) {
	c.asked = append(c.asked, "patch "+string(pt)+" "+string(body))
	return c.objects[namespace+"/"+name], nil
}
func (c *calls) Delete(gvk schema.GroupVersionKind, namespace, name string, pre *metav1.Preconditions) error {
	return nil
}

func TestTypedReadsWritesAndErrorsShouldBeControllerRuntimes(t *testing.T) {
	rs := `{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"web","namespace":"demo","labels":{"a":"1"}},"spec":{"replicas":3,"selector":{"matchLabels":{"app":"web"}}}}`
	host := &calls{objects: map[string]string{"demo/web": rs}}
	c := client.NewWithCalls(nil, host)
	ctx := context.Background()

	got := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"stale": "x"}}}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "web"}, got); err != nil {
		t.Fatal(err)
	}
	if *got.Spec.Replicas != 3 || got.Labels["a"] != "1" || got.Labels["stale"] != "" {
		t.Fatalf("decoded %+v", got)
	}
	err := c.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "gone"}, &appsv1.ReplicaSet{})
	if !apierrors.IsNotFound(err) || client.IgnoreNotFound(err) != nil {
		t.Fatalf("not found: %v", err)
	}

	// A merge patch from a copy carries only the change.
	before := got.DeepCopy()
	got.Labels["pod-count"] = "3"
	if err := c.Patch(ctx, got, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	if want := `patch application/merge-patch+json {"metadata":{"labels":{"pod-count":"3"}}}`; host.asked[len(host.asked)-1] != want {
		t.Fatalf("asked %q, want %q", host.asked[len(host.asked)-1], want)
	}

	// Metadata-only lists, in a namespace, by a selector.
	pods := &metav1.PartialObjectMetadataList{}
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := c.List(ctx, pods, client.InNamespace("demo"), client.MatchingLabels{"app": "web"}); err != nil {
		t.Fatal(err)
	}
	if want := "list v1 Pod ns=demo labels=app=web"; host.asked[len(host.asked)-1] != want {
		t.Fatalf("asked %q, want %q", host.asked[len(host.asked)-1], want)
	}
	if len(pods.Items) != 1 || pods.Items[0].Name != "web" {
		t.Fatalf("listed %+v", pods.Items)
	}

	// Writes carry the apiVersion and kind the host needs.
	if err := c.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	var sent map[string]any
	last := host.asked[len(host.asked)-1]
	if err := json.Unmarshal([]byte(last[len("update "):]), &sent); err != nil {
		t.Fatal(err)
	}
	if sent["apiVersion"] != "apps/v1" || sent["kind"] != "ReplicaSet" {
		t.Fatalf("sent %v", sent)
	}
}

func TestMetadataOnlyKindsShouldNeverBeReadAsWholeObjects(t *testing.T) {
	partial := `{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata","metadata":{"name":"db","namespace":"demo","labels":{"app":"db"}}}`
	host := &calls{objects: map[string]string{"demo/db": partial}}
	c := client.NewWithCalls(nil, host)
	ctx := context.Background()

	// Read whole, the contents would be missing (and an update would wipe them): refused.
	err := c.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "db"}, &corev1.Secret{})
	if err == nil || !strings.Contains(err.Error(), "metadataOnly") {
		t.Fatalf("a metadata-only Secret read whole: %v", err)
	}
	if err := c.List(ctx, &corev1.SecretList{}); err == nil {
		t.Fatal("a metadata-only Secret listed whole")
	}

	// Read as metadata, each item names the kind listed, and cannot be updated whole.
	secrets := &metav1.PartialObjectMetadataList{}
	secrets.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
	if err := c.List(ctx, secrets); err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 1 || secrets.Items[0].Kind != "Secret" || secrets.Items[0].APIVersion != "v1" {
		t.Fatalf("listed %+v", secrets.Items)
	}
	if err := c.Update(ctx, &secrets.Items[0]); err == nil {
		t.Fatal("a metadata-only object updated")
	}
}

func TestASelectorOfNothingShouldListNothing(t *testing.T) {
	host := &calls{objects: map[string]string{"demo/a": `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"demo"}}`}}
	c := client.NewWithCalls(nil, host)
	nothing, err := metav1.LabelSelectorAsSelector(nil)
	if err != nil {
		t.Fatal(err)
	}
	pods := &corev1.PodList{}
	if err := c.List(context.Background(), pods, client.MatchingLabelsSelector{Selector: nothing}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 || len(host.asked) != 0 {
		t.Fatalf("labels.Nothing() listed %d pods (asked %v)", len(pods.Items), host.asked)
	}
}
