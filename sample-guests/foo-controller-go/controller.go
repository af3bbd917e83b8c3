// foo-controller in Go: the Kubernetes sample-controller's Foo reconciler (seed 002) written as
// controller-runtime code — a FooReconciler with SetupWithManager, as kubebuilder lays it out —
// compiled against the real sigs.k8s.io/controller-runtime and run by krec through
// krec.dev/guest/controllerruntime. It does what the Rust foo-controller does: each Foo owns a
// Deployment of spec.deploymentName with spec.replicas, and its status follows the
// Deployment's available replicas.
package main

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	samplev1alpha1 "k8s.io/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

const (
	// SuccessSynced is the Event reason when a Foo is synced.
	SuccessSynced = "Synced"
	// ErrResourceExists is the Event reason when the Deployment exists but is not the Foo's.
	ErrResourceExists = "ErrResourceExists"
	// MessageResourceExists is that Event's message.
	MessageResourceExists = "Resource %q already exists and is not managed by Foo"
	// MessageResourceSynced is the message of a successful sync's Event.
	MessageResourceSynced = "Foo synced successfully"
)

// FooReconciler reconciles Foos.
type FooReconciler struct {
	client.Client
	Scheme   *runtime.Scheme
	Recorder record.EventRecorder
}

// Reconcile makes the Foo's Deployment as the Foo asks, and its status follow the Deployment.
func (r *FooReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := logf.FromContext(ctx)

	foo := &samplev1alpha1.Foo{}
	if err := r.Get(ctx, req.NamespacedName, foo); err != nil {
		// Gone: its Deployment is garbage-collected.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	deploymentName := foo.Spec.DeploymentName
	if deploymentName == "" {
		// Retrying cannot help until the Foo itself changes.
		logger.Error(nil, "spec.deploymentName must be set")
		return ctrl.Result{}, nil
	}

	deployment := &appsv1.Deployment{}
	err := r.Get(ctx, types.NamespacedName{Namespace: foo.Namespace, Name: deploymentName}, deployment)
	if apierrors.IsNotFound(err) {
		logger.Info("creating Deployment", "deployment", deploymentName)
		deployment = newDeployment(foo)
		if err := ctrl.SetControllerReference(foo, deployment, r.Scheme); err != nil {
			return ctrl.Result{}, err
		}
		err = r.Create(ctx, deployment)
	}
	if err != nil {
		return ctrl.Result{}, err
	}

	if !metav1.IsControlledBy(deployment, foo) {
		msg := fmt.Sprintf(MessageResourceExists, deployment.Name)
		r.Recorder.Event(foo, corev1.EventTypeWarning, ErrResourceExists, msg)
		return ctrl.Result{}, fmt.Errorf("%s", msg)
	}

	if foo.Spec.Replicas != nil && (deployment.Spec.Replicas == nil || *foo.Spec.Replicas != *deployment.Spec.Replicas) {
		logger.Info("scaling Deployment", "deployment", deploymentName, "replicas", *foo.Spec.Replicas)
		deployment.Spec.Replicas = foo.Spec.Replicas
		if err := r.Update(ctx, deployment); err != nil {
			return ctrl.Result{}, err
		}
	}

	if foo.Status.AvailableReplicas != deployment.Status.AvailableReplicas {
		foo.Status.AvailableReplicas = deployment.Status.AvailableReplicas
		if err := r.Status().Update(ctx, foo); err != nil {
			return ctrl.Result{}, err
		}
	}

	r.Recorder.Event(foo, corev1.EventTypeNormal, SuccessSynced, MessageResourceSynced)
	return ctrl.Result{}, nil
}

// SetupWithManager registers the reconciler: Foos, and the Deployments they own.
func (r *FooReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&samplev1alpha1.Foo{}).
		Owns(&appsv1.Deployment{}).
		Complete(r)
}

// newDeployment is the Deployment a Foo asks for: nginx pods labelled with the Foo's name.
func newDeployment(foo *samplev1alpha1.Foo) *appsv1.Deployment {
	labels := map[string]string{"app": "nginx", "controller": foo.Name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: foo.Spec.DeploymentName, Namespace: foo.Namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: foo.Spec.Replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx:latest"}}},
			},
		},
	}
}
