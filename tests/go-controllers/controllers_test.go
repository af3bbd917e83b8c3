// Package gocontrollers runs existing Go controllers, built from the Go module proxy and left
// as they are, against `krec cluster` ($KREC, else krec on PATH): k8s.io/sample-controller
// with its CRD and example Foo, and seed 000's controller-runtime builder example with leader
// election on.
package gocontrollers

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// cluster is a running `krec cluster`: its kubeconfig's path and a config for it.
type cluster struct {
	kubeconfig string
	config     *rest.Config
}

// startCluster starts `krec cluster` (built-in controllers and simulated nodes on, so
// Deployments get ReplicaSets and ready Pods) for the test.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	krec := os.Getenv("KREC")
	if krec == "" {
		krec = "krec"
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	var logs bytes.Buffer
	cmd := exec.Command(krec, "cluster", "--addr", "127.0.0.1:0", "--kubeconfig-out", kubeconfig, "--pod-start-delay", "100ms")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s cluster: %v", krec, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("krec cluster's output:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if config, err := clientcmd.BuildConfigFromFlags("", kubeconfig); err == nil {
			return &cluster{kubeconfig: kubeconfig, config: config}
		}
		if time.Now().After(deadline) {
			t.Fatalf("krec cluster wrote no kubeconfig in 30 s:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// run starts the program at path with the cluster's kubeconfig, stopped (SIGTERM) at cleanup.
func (c *cluster) run(t *testing.T, path string, args ...string) {
	t.Helper()
	var logs bytes.Buffer
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.kubeconfig)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s's output:\n%s", filepath.Base(path), logs.String())
		}
	})
}

// build builds Go package pkg into the test's folder.
func build(t *testing.T, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	if text, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, text)
	}
	return out
}

// apply creates the objects of YAML file path (with their resources named by plural).
func (c *cluster) apply(t *testing.T, path string, plural map[string]string) {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	client := dynamic.NewForConfigOrDie(c.config)
	for _, doc := range strings.Split(string(text), "\n---") {
		object := map[string]any{}
		if err := yaml.Unmarshal([]byte(doc), &object); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(object) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: object}
		gvk := u.GroupVersionKind()
		resource := schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: plural[gvk.Kind]}
		namespace := u.GetNamespace()
		if namespace == "" && gvk.Kind != "CustomResourceDefinition" {
			namespace = "default"
		}
		var err error
		if namespace == "" {
			_, err = client.Resource(resource).Create(context.Background(), u, metav1.CreateOptions{})
		} else {
			_, err = client.Resource(resource).Namespace(namespace).Create(context.Background(), u, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatalf("creating %s %s: %v", gvk.Kind, u.GetName(), err)
		}
	}
}

// eventually polls check every 50 ms for up to 60 s, failing with its last complaint.
func eventually(t *testing.T, what string, check func() string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		complaint := check()
		if complaint == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, complaint)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// k8s.io/sample-controller as it is released, with its own CRD and example Foo: the Foo's
// Deployment is made (owned by the Foo), and the Foo's status.availableReplicas follows the
// Deployment's — as on a real cluster.
func TestSampleControllerShouldReconcileItsFoo(t *testing.T) {
	c := startCluster(t)
	controller := build(t, "k8s.io/sample-controller")
	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/sample-controller").Output()
	if err != nil {
		t.Fatal(err)
	}
	examples := filepath.Join(strings.TrimSpace(string(dir)), "artifacts", "examples")
	// The CRD with the status subresource: sample-controller writes status with UpdateStatus,
	// which crd.yaml's Foos do not serve (a 404, on kube-apiserver as on krec).
	c.apply(t, filepath.Join(examples, "crd-status-subresource.yaml"), map[string]string{"CustomResourceDefinition": "customresourcedefinitions"})
	c.run(t, controller, "-kubeconfig", c.kubeconfig)
	c.apply(t, filepath.Join(examples, "example-foo.yaml"), map[string]string{"Foo": "foos"})

	foos := dynamic.NewForConfigOrDie(c.config).Resource(schema.GroupVersionResource{
		Group: "samplecontroller.k8s.io", Version: "v1alpha1", Resource: "foos"}).Namespace("default")
	kube := kubernetes.NewForConfigOrDie(c.config)
	ctx := context.Background()
	eventually(t, "the Foo's Deployment", func() string {
		deployment, err := kube.AppsV1().Deployments("default").Get(ctx, "example-foo", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		owner := metav1.GetControllerOf(deployment)
		if owner == nil || owner.Kind != "Foo" || owner.Name != "example-foo" {
			return "not controlled by the Foo"
		}
		return ""
	})
	availableReplicas := func(want int64) func() string {
		return func() string {
			foo, err := foos.Get(ctx, "example-foo", metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			got, _, _ := unstructured.NestedInt64(foo.Object, "status", "availableReplicas")
			if got != want {
				return fmt.Sprintf("status.availableReplicas is %d", got)
			}
			return ""
		}
	}
	eventually(t, "the Foo's status.availableReplicas", availableReplicas(1))

	// Scaled, the Foo's Deployment follows, and its status after it.
	foo, err := foos.Get(ctx, "example-foo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(foo.Object, int64(3), "spec", "replicas"); err != nil {
		t.Fatal(err)
	}
	if _, err := foos.Update(ctx, foo, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the scaled Foo's status.availableReplicas", availableReplicas(3))
}

// Seed 000's builder example (For ReplicaSet, Owns Pod) in a controller-runtime manager with
// leader election: it holds the Lease and labels each ReplicaSet with its pod count as the
// Deployment scales.
func TestSeed000ManagerShouldLabelReplicaSetsWithLeaderElection(t *testing.T) {
	c := startCluster(t)
	manager := build(t, "./cmd/replicaset-manager")
	kube := kubernetes.NewForConfigOrDie(c.config)
	ctx := context.Background()
	replicas := func(n int32) *int32 { return &n }
	labels := map[string]string{"app": "web"}
	deployment := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: replicas(3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27"}}},
			},
		},
	}
	if _, err := kube.AppsV1().Deployments("default").Create(ctx, deployment, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.run(t, manager)

	podCount := func(want string) func() string {
		return func() string {
			list, err := kube.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			if err != nil {
				return err.Error()
			}
			if len(list.Items) != 1 {
				return "no single ReplicaSet yet"
			}
			if got := list.Items[0].Labels["pod-count"]; got != want {
				return "pod-count is " + got
			}
			return ""
		}
	}
	eventually(t, "the ReplicaSet's pod-count", podCount("3"))
	var lease *coordinationv1.Lease
	eventually(t, "the manager's Lease", func() string {
		var err error
		lease, err = kube.CoordinationV1().Leases("default").Get(ctx, "replicaset-pod-count", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return "no holder"
		}
		return ""
	})

	scaled, err := kube.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scaled.Spec.Replicas = replicas(5)
	if _, err := kube.AppsV1().Deployments("default").Update(ctx, scaled, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the scaled ReplicaSet's pod-count", podCount("5"))
}
