package controller

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	appsexamplev1 "krec.dev/tests/envtest/api/v1"
)

func size(n int32) *int32 { return &n }

var _ = Describe("Widget Controller", func() {
	Context("When reconciling a resource", func() {
		const resourceName = "test-resource"

		typeNamespacedName := types.NamespacedName{
			Name:      resourceName,
			Namespace: "default",
		}
		widget := &appsexamplev1.Widget{}

		BeforeEach(func() {
			By("creating the custom resource for the Kind Widget")
			err := k8sClient.Get(ctx, typeNamespacedName, widget)
			if err != nil && errors.IsNotFound(err) {
				resource := &appsexamplev1.Widget{
					ObjectMeta: metav1.ObjectMeta{
						Name:      resourceName,
						Namespace: "default",
					},
					Spec: appsexamplev1.WidgetSpec{Size: size(2), Image: "nginx:1.27"},
				}
				Expect(k8sClient.Create(ctx, resource)).To(Succeed())
			}
		})

		AfterEach(func() {
			resource := &appsexamplev1.Widget{}
			err := k8sClient.Get(ctx, typeNamespacedName, resource)
			Expect(err).NotTo(HaveOccurred())

			By("Cleanup the specific resource instance Widget")
			Expect(k8sClient.Delete(ctx, resource)).To(Succeed())
		})

		It("should successfully reconcile the resource", func() {
			By("Reconciling the created resource")
			controllerReconciler := &WidgetReconciler{
				Client: k8sClient,
				Scheme: k8sClient.Scheme(),
			}

			_, err := controllerReconciler.Reconcile(ctx, reconcile.Request{
				NamespacedName: typeNamespacedName,
			})
			Expect(err).NotTo(HaveOccurred())

			deployment := &appsv1.Deployment{}
			Expect(k8sClient.Get(ctx, typeNamespacedName, deployment)).To(Succeed())
			Expect(*deployment.Spec.Replicas).To(Equal(int32(2)))
			Expect(deployment.Spec.Template.Spec.Containers[0].Image).To(Equal("nginx:1.27"))
			owner := metav1.GetControllerOf(deployment)
			Expect(owner).NotTo(BeNil())
			Expect(owner.Kind).To(Equal("Widget"))
			Expect(owner.Name).To(Equal(resourceName))

			Expect(k8sClient.Get(ctx, typeNamespacedName, widget)).To(Succeed())
			Expect(widget.Status.Replicas).To(Equal(int32(2)))
			Expect(meta.IsStatusConditionTrue(widget.Status.Conditions, "Available")).To(BeTrue())
		})

		It("should refuse what the CRD's schema refuses", func() {
			bad := &appsexamplev1.Widget{
				ObjectMeta: metav1.ObjectMeta{Name: "negative", Namespace: "default"},
				Spec:       appsexamplev1.WidgetSpec{Size: size(-1), Image: "nginx:1.27"},
			}
			err := k8sClient.Create(ctx, bad)
			Expect(errors.IsInvalid(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring("spec.size"))
		})
	})

	Context("When a manager runs the controller", func() {
		It("should follow the Widget's size in its Deployment", func() {
			mgr, err := ctrl.NewManager(cfg, ctrl.Options{
				Scheme:  scheme.Scheme,
				Metrics: metricsserver.Options{BindAddress: "0"},
			})
			Expect(err).NotTo(HaveOccurred())
			Expect((&WidgetReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme()}).SetupWithManager(mgr)).To(Succeed())
			mgrCtx, stop := context.WithCancel(ctx)
			stopped := make(chan struct{})
			go func() {
				defer GinkgoRecover()
				defer close(stopped)
				Expect(mgr.Start(mgrCtx)).To(Succeed())
			}()
			// The manager ends with the spec.
			defer func() { stop(); <-stopped }()

			key := types.NamespacedName{Name: "managed", Namespace: "default"}
			managed := &appsexamplev1.Widget{
				ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace},
				Spec:       appsexamplev1.WidgetSpec{Size: size(1), Image: "nginx:1.27"},
			}
			Expect(k8sClient.Create(ctx, managed)).To(Succeed())
			deployment := &appsv1.Deployment{}
			Eventually(func(g Gomega) {
				g.Expect(k8sClient.Get(ctx, key, deployment)).To(Succeed())
				g.Expect(*deployment.Spec.Replicas).To(Equal(int32(1)))
			}, 10*time.Second, 50*time.Millisecond).Should(Succeed())

			// The controller writes the Widget's status meanwhile: retried on conflict, as a
			// client updating a reconciled object must be.
			Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
				if err := k8sClient.Get(ctx, key, managed); err != nil {
					return err
				}
				managed.Spec.Size = size(3)
				return k8sClient.Update(ctx, managed)
			})).To(Succeed())
			Eventually(func(g Gomega) {
				g.Expect(k8sClient.Get(ctx, key, deployment)).To(Succeed())
				g.Expect(*deployment.Spec.Replicas).To(Equal(int32(3)))
				g.Expect(k8sClient.Get(ctx, key, managed)).To(Succeed())
				g.Expect(managed.Status.Replicas).To(Equal(int32(3)))
			}, 10*time.Second, 50*time.Millisecond).Should(Succeed())

			// A Deployment changed behind the controller's back is put right (Owns).
			Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
				if err := k8sClient.Get(ctx, key, deployment); err != nil {
					return err
				}
				deployment.Spec.Replicas = size(7)
				return k8sClient.Update(ctx, deployment)
			})).To(Succeed())
			Eventually(func(g Gomega) {
				g.Expect(k8sClient.Get(ctx, key, deployment)).To(Succeed())
				g.Expect(*deployment.Spec.Replicas).To(Equal(int32(3)))
			}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
		})
	})

	Context("When a user is added to the control plane", func() {
		It("should be who its client certificate says, judged by RBAC", func() {
			user, err := testEnv.AddUser(envtest.User{Name: "jane", Groups: []string{"dev"}}, nil)
			Expect(err).NotTo(HaveOccurred())
			janeClient, err := client.New(user.Config(), client.Options{Scheme: scheme.Scheme})
			Expect(err).NotTo(HaveOccurred())

			err = janeClient.List(ctx, &appsexamplev1.WidgetList{}, client.InNamespace("default"))
			Expect(errors.IsForbidden(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring(`User "jane" cannot list resource "widgets"`))

			role := &rbacv1.Role{
				ObjectMeta: metav1.ObjectMeta{Name: "widget-reader", Namespace: "default"},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{"apps.example.krec.dev"},
					Resources: []string{"widgets"}, Verbs: []string{"get", "list", "watch"}}},
			}
			Expect(k8sClient.Create(ctx, role)).To(Succeed())
			binding := &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "dev-reads-widgets", Namespace: "default"},
				RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "widget-reader"},
				Subjects:   []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: "dev"}},
			}
			Expect(k8sClient.Create(ctx, binding)).To(Succeed())
			// kube-apiserver's RBAC authorizer sees a new binding once its informer has it.
			Eventually(func() error {
				return janeClient.List(ctx, &appsexamplev1.WidgetList{}, client.InNamespace("default"))
			}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
			err = janeClient.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "default"}})
			Expect(errors.IsForbidden(err)).To(BeTrue(), "%v", err)
		})
	})
})
