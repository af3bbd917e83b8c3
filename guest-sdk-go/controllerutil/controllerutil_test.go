package controllerutil_test

import (
	"context"
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"krec.dev/guest/controllerutil"
	"krec.dev/guest/fake"
)

func TestCreateOrUpdateShouldCreateThenUpdateThenDoNothing(t *testing.T) {
	cluster := fake.NewCluster(t)
	c := cluster.Client()
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "default"}}
	greeting := "hello"
	set := func() error {
		cm.Data = map[string]string{"greeting": greeting}
		return nil
	}
	for _, step := range []struct {
		greeting string
		want     controllerutil.OperationResult
		patch    bool
	}{
		{"hello", controllerutil.OperationResultCreated, false},
		{"hello", controllerutil.OperationResultNone, false},
		{"bonjour", controllerutil.OperationResultUpdated, false},
		{"hallo", controllerutil.OperationResultUpdated, true},
		{"hallo", controllerutil.OperationResultNone, true},
	} {
		greeting = step.greeting
		op := controllerutil.CreateOrUpdate
		if step.patch {
			op = controllerutil.CreateOrPatch
		}
		got, err := op(ctx, c, cm, set)
		if err != nil || got != step.want {
			t.Fatalf("%s: %s, %v; want %s", step.greeting, got, err, step.want)
		}
	}
	if want := []string{"create v1 ConfigMap default/settings", "update v1 ConfigMap default/settings", "patch v1 ConfigMap default/settings"}; !reflect.DeepEqual(cluster.Writes(), want) {
		t.Fatalf("writes %q, want %q", cluster.Writes(), want)
	}
}

func TestReferencesAndFinalizersShouldBeControllerRuntimes(t *testing.T) {
	scheme := clientgoscheme.Scheme
	owner := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u1"}}
	other := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "default", UID: "u2"}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "default"}}
	if err := controllerutil.SetControllerReference(owner, rs, scheme); err != nil {
		t.Fatal(err)
	}
	ref := metav1.GetControllerOf(rs)
	if ref == nil || ref.Kind != "Deployment" || ref.APIVersion != "apps/v1" || ref.UID != "u1" || !*ref.BlockOwnerDeletion {
		t.Fatalf("controller reference %+v", ref)
	}
	if err := controllerutil.SetControllerReference(other, rs, scheme); err == nil {
		t.Fatal("a second controller was accepted")
	}
	elsewhere := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "other"}}
	if err := controllerutil.SetOwnerReference(elsewhere, rs, scheme); err == nil {
		t.Fatal("a cross-namespace owner was accepted")
	}
	if !controllerutil.AddFinalizer(rs, "example.com/keep") || controllerutil.AddFinalizer(rs, "example.com/keep") {
		t.Fatal("AddFinalizer")
	}
	if !controllerutil.RemoveFinalizer(rs, "example.com/keep") || controllerutil.ContainsFinalizer(rs, "example.com/keep") {
		t.Fatal("RemoveFinalizer")
	}
}
