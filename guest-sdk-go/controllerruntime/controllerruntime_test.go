package controllerruntime_test

import (
	"context"
	"errors"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	krecctrl "krec.dev/guest/controllerruntime"
	"krec.dev/guest/fake"
	"krec.dev/guest/reconcile"
)

func pod(name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
	}
}

func TestControllerRuntimesClientShouldReachTheCluster(t *testing.T) {
	cluster := fake.NewCluster(t)
	cluster.Add(t, pod("web-1", map[string]string{"app": "web"}), pod("web-2", map[string]string{"app": "web"}), pod("db-1", map[string]string{"app": "db"}))
	c := krecctrl.NewClient(cluster.Client())
	ctx := context.Background()

	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, crclient.InNamespace("shop"), crclient.MatchingLabels{"app": "web"}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 2 {
		t.Fatalf("listed %d pods of app=web, want 2", len(pods.Items))
	}
	p := &corev1.Pod{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "shop", Name: "web-1"}, p); err != nil {
		t.Fatal(err)
	}
	before := p.DeepCopy()
	controllerutil.AddFinalizer(p, "example.com/keep")
	if err := c.Patch(ctx, p, crclient.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	if !controllerutil.ContainsFinalizer(p, "example.com/keep") {
		t.Fatalf("the patched answer lost the finalizer: %v", p.Finalizers)
	}
	// CreateOrUpdate, controller-runtime's own helper, over the adapter.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "shop"}}
	for _, want := range []controllerutil.OperationResult{controllerutil.OperationResultCreated, controllerutil.OperationResultNone} {
		result, err := controllerutil.CreateOrUpdate(ctx, c, cm, func() error {
			cm.Data = map[string]string{"greeting": "hello"}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if result != want {
			t.Fatalf("CreateOrUpdate: %s, want %s", result, want)
		}
	}
	if err := c.DeleteAllOf(ctx, &corev1.Pod{}, crclient.InNamespace("shop"), crclient.MatchingLabels{"app": "db"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "shop", Name: "db-1"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Fatalf("db-1 after DeleteAllOf: %v", err)
	}
	if err := c.Create(ctx, pod("dry", nil), crclient.DryRunAll); err == nil {
		t.Fatal("a dry-run create was written")
	}
	if ok, err := c.IsObjectNamespaced(&appsv1.Deployment{}); !ok || err != nil {
		t.Fatalf("a Deployment namespaced: %v %v", ok, err)
	}
	if ok, _ := c.IsObjectNamespaced(&corev1.Namespace{}); ok {
		t.Fatal("a Namespace namespaced")
	}
}

type failing struct{ err error }

func (f failing) Reconcile(context.Context, crreconcile.Request) (crreconcile.Result, error) {
	return crreconcile.Result{}, f.err
}

func TestATerminalErrorShouldStayTerminal(t *testing.T) {
	r := krecctrl.Reconciler(failing{crreconcile.TerminalError(errors.New("bad spec"))})
	_, err := r.Reconcile(context.Background(), reconcile.Request{})
	if !reconcile.IsTerminal(err) {
		t.Fatalf("%v is not terminal", err)
	}
	r = krecctrl.Reconciler(failing{errors.New("try again")})
	if _, err := r.Reconcile(context.Background(), reconcile.Request{}); err == nil || reconcile.IsTerminal(err) {
		t.Fatalf("%v", err)
	}
}
