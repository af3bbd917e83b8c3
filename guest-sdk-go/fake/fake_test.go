package fake_test

import (
	"context"
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"krec.dev/guest/client"
	"krec.dev/guest/fake"
)

func replicaSet(name string) *appsv1.ReplicaSet {
	labels := map[string]string{"app": name}
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"},
		Spec: appsv1.ReplicaSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
			},
		},
	}
}

func pod(name, app string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
	}
}

func TestTheClientShouldReadAndWriteAsTheAPIServerDoes(t *testing.T) {
	cluster := fake.NewCluster(t)
	cluster.Add(t, replicaSet("web"), pod("web-1", "web"), pod("web-2", "web"), pod("db-1", "db"))
	c := cluster.Client()
	ctx := context.Background()

	rs := &appsv1.ReplicaSet{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "shop", Name: "web"}, rs); err != nil {
		t.Fatal(err)
	}
	// Defaulted by the API server, as in the host's cluster.
	if rs.Spec.Replicas == nil || *rs.Spec.Replicas != 1 {
		t.Fatalf("spec.replicas was not defaulted to 1: %v", rs.Spec.Replicas)
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace("shop"), client.MatchingLabels{"app": "web"}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 2 {
		t.Fatalf("listed %d pods of app=web, want 2", len(pods.Items))
	}

	stale := rs.DeepCopy()
	rs.Labels = map[string]string{"pod-count": "2"}
	if err := c.Update(ctx, rs); err != nil {
		t.Fatal(err)
	}
	stale.Labels = map[string]string{"pod-count": "9"}
	if err := c.Update(ctx, stale); !apierrors.IsConflict(err) {
		t.Fatalf("an update from a stale resourceVersion: %v, want a conflict", err)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "shop", Name: "gone"}, &appsv1.ReplicaSet{}); !apierrors.IsNotFound(err) {
		t.Fatalf("getting a missing object: %v, want not found", err)
	}
	// Validation is the API server's: a Pod without containers is refused as invalid.
	if err := c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "empty", Namespace: "shop"}}); !apierrors.IsInvalid(err) {
		t.Fatalf("creating a Pod without containers: %v, want invalid", err)
	}
	if err := c.Delete(ctx, pod("db-1", "db")); err != nil {
		t.Fatal(err)
	}
	want := []string{"update apps/v1 ReplicaSet shop/web", "delete v1 Pod shop/db-1"}
	if got := cluster.Writes(); !reflect.DeepEqual(got, want) {
		t.Fatalf("writes %q, want %q", got, want)
	}

	if err := cluster.Reader().Delete(ctx, pod("web-1", "web")); !apierrors.IsForbidden(err) {
		t.Fatalf("a reader's delete: %v, want forbidden", err)
	}
}

func TestACustomResourceShouldBeServedOnceItsDefinitionIsAdded(t *testing.T) {
	cluster := fake.NewCluster(t)
	cluster.AddFiles(t, "../../sample-guests/foo-controller/crd/foo-crd.yaml", "../../sample-guests/foo-controller/crd/example-foo.yaml")
	foo := &unstructured.Unstructured{}
	foo.SetAPIVersion("samplecontroller.k8s.io/v1alpha1")
	foo.SetKind("Foo")
	if err := cluster.Client().Get(context.Background(), types.NamespacedName{Namespace: "default", Name: "example-foo"}, foo); err != nil {
		t.Fatal(err)
	}
	if name, _, _ := unstructured.NestedString(foo.Object, "spec", "deploymentName"); name != "example-foo" {
		t.Fatalf("spec.deploymentName %q", name)
	}
}
