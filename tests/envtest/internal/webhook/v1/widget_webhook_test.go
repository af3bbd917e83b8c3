package v1

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	appsexamplev1 "krec.dev/tests/envtest/api/v1"
)

func size(n int32) *int32 { return &n }

var _ = Describe("Widget Webhook", func() {
	Context("When creating Widget under Defaulting Webhook", func() {
		It("Should fill in the default size", func() {
			widget := &appsexamplev1.Widget{
				ObjectMeta: metav1.ObjectMeta{Name: "defaulted", Namespace: "default"},
				Spec:       appsexamplev1.WidgetSpec{Image: "nginx:1.27"},
			}
			Expect(k8sClient.Create(ctx, widget)).To(Succeed())
			stored := &appsexamplev1.Widget{}
			Expect(k8sClient.Get(ctx, types.NamespacedName{Name: "defaulted", Namespace: "default"}, stored)).To(Succeed())
			Expect(stored.Spec.Size).NotTo(BeNil())
			Expect(*stored.Spec.Size).To(Equal(int32(1)))
			Expect(k8sClient.Delete(ctx, stored)).To(Succeed())
		})
	})

	Context("When creating or updating Widget under Validating Webhook", func() {
		It("Should deny creation if the size is too large", func() {
			widget := &appsexamplev1.Widget{
				ObjectMeta: metav1.ObjectMeta{Name: "too-large", Namespace: "default"},
				Spec:       appsexamplev1.WidgetSpec{Size: size(MaxSize + 1), Image: "nginx:1.27"},
			}
			err := k8sClient.Create(ctx, widget)
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring(`admission webhook "vwidget-v1.kb.io" denied the request`))
			Expect(err.Error()).To(ContainSubstring("spec.size: Invalid value: 11: must be at most 10"))
		})

		It("Should admit creation and updates within the size", func() {
			widget := &appsexamplev1.Widget{
				ObjectMeta: metav1.ObjectMeta{Name: "fits", Namespace: "default"},
				Spec:       appsexamplev1.WidgetSpec{Size: size(MaxSize), Image: "nginx:1.27"},
			}
			Expect(k8sClient.Create(ctx, widget)).To(Succeed())
			widget.Spec.Size = size(MaxSize + 5)
			err := k8sClient.Update(ctx, widget)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			Expect(k8sClient.Delete(ctx, widget)).To(Succeed())
		})
	})
})
