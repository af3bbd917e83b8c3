package main

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	samplev1alpha1 "k8s.io/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	ctrl "sigs.k8s.io/controller-runtime"

	"krec.dev/guest"
	krecctrl "krec.dev/guest/controllerruntime"
	"krec.dev/guest/fake"
)

func TestAFooShouldGetItsDeploymentAndFollowItsAvailability(t *testing.T) {
	ctx := context.Background()
	cluster := fake.NewCluster(t).WithScheme(guest.Scheme)
	cluster.AddFiles(t, "../foo-controller/crd/foo-crd.yaml", "examples/foo.yaml")
	c := krecctrl.NewClient(cluster.Client())
	events := record.NewFakeRecorder(10)
	r := &FooReconciler{Client: c, Scheme: guest.Scheme, Recorder: events}
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "foo-go", Name: "example-foo"}}

	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	deployment := &appsv1.Deployment{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "foo-go", Name: "example-foo"}, deployment); err != nil {
		t.Fatal(err)
	}
	foo := &samplev1alpha1.Foo{}
	if err := c.Get(ctx, req.NamespacedName, foo); err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(deployment, foo) || *deployment.Spec.Replicas != 1 {
		t.Fatalf("the Deployment: owners %v, replicas %d", deployment.OwnerReferences, *deployment.Spec.Replicas)
	}
	if got := <-events.Events; got != "Normal Synced Foo synced successfully" {
		t.Fatalf("event %q", got)
	}

	// The Deployment becomes available (no controllers run in the fake cluster: set by hand).
	deployment.Status.Replicas, deployment.Status.AvailableReplicas = 1, 1
	if err := c.Status().Update(ctx, deployment); err != nil {
		t.Fatal(err)
	}
	// Scaled by its Foo.
	two := int32(2)
	foo.Spec.Replicas = &two
	if err := c.Update(ctx, foo); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, req.NamespacedName, foo); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "foo-go", Name: "example-foo"}, deployment); err != nil {
		t.Fatal(err)
	}
	if foo.Status.AvailableReplicas != 1 || *deployment.Spec.Replicas != 2 {
		t.Fatalf("status.availableReplicas %d, deployment replicas %d", foo.Status.AvailableReplicas, *deployment.Spec.Replicas)
	}
}

func TestADeploymentNotTheFoosShouldBeLeftAlone(t *testing.T) {
	ctx := context.Background()
	cluster := fake.NewCluster(t).WithScheme(guest.Scheme)
	cluster.AddFiles(t, "../foo-controller/crd/foo-crd.yaml", "examples/foo.yaml")
	taken := newDeployment(&samplev1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "foo-go"},
		Spec: samplev1alpha1.FooSpec{DeploymentName: "example-foo"}})
	cluster.Add(t, taken)
	events := record.NewFakeRecorder(10)
	r := &FooReconciler{Client: krecctrl.NewClient(cluster.Client()), Scheme: guest.Scheme, Recorder: events}
	_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "foo-go", Name: "example-foo"}})
	if err == nil {
		t.Fatal("reconciled over a Deployment the Foo does not own")
	}
	if got := <-events.Events; got != `Warning ErrResourceExists Resource "example-foo" already exists and is not managed by Foo` {
		t.Fatalf("event %q", got)
	}
	if writes := cluster.Writes(); len(writes) != 0 {
		t.Fatalf("writes %q", writes)
	}
}
