// Package v1 holds the Widget's webhooks, as kubebuilder scaffolds them.
package v1

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	appsexamplev1 "krec.dev/tests/envtest/api/v1"
)

// MaxSize is the largest spec.size the validator accepts.
const MaxSize = 10

// SetupWidgetWebhookWithManager registers the webhooks for Widget in the manager.
func SetupWidgetWebhookWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &appsexamplev1.Widget{}).
		WithValidator(&WidgetCustomValidator{}).
		WithDefaulter(&WidgetCustomDefaulter{}).
		Complete()
}

// +kubebuilder:webhook:path=/mutate-apps-example-krec-dev-v1-widget,mutating=true,failurePolicy=fail,sideEffects=None,groups=apps.example.krec.dev,resources=widgets,verbs=create;update,versions=v1,name=mwidget-v1.kb.io,admissionReviewVersions=v1

// WidgetCustomDefaulter sets a Widget's defaults.
type WidgetCustomDefaulter struct{}

// Default gives a Widget without spec.size one replica.
func (d *WidgetCustomDefaulter) Default(_ context.Context, widget *appsexamplev1.Widget) error {
	if widget.Spec.Size == nil {
		one := int32(1)
		widget.Spec.Size = &one
	}
	return nil
}

// +kubebuilder:webhook:path=/validate-apps-example-krec-dev-v1-widget,mutating=false,failurePolicy=fail,sideEffects=None,groups=apps.example.krec.dev,resources=widgets,verbs=create;update,versions=v1,name=vwidget-v1.kb.io,admissionReviewVersions=v1

// WidgetCustomValidator validates Widgets.
type WidgetCustomValidator struct{}

// ValidateCreate refuses a Widget larger than MaxSize.
func (v *WidgetCustomValidator) ValidateCreate(_ context.Context, widget *appsexamplev1.Widget) (admission.Warnings, error) {
	return validate(widget)
}

// ValidateUpdate refuses a Widget grown larger than MaxSize.
func (v *WidgetCustomValidator) ValidateUpdate(_ context.Context, _, widget *appsexamplev1.Widget) (admission.Warnings, error) {
	return validate(widget)
}

// ValidateDelete allows every delete.
func (v *WidgetCustomValidator) ValidateDelete(context.Context, *appsexamplev1.Widget) (admission.Warnings, error) {
	return nil, nil
}

func validate(widget *appsexamplev1.Widget) (admission.Warnings, error) {
	if widget.Spec.Size != nil && *widget.Spec.Size > MaxSize {
		return nil, apierrors.NewInvalid(
			appsexamplev1.GroupVersion.WithKind("Widget").GroupKind(), widget.Name,
			field.ErrorList{field.Invalid(field.NewPath("spec", "size"), *widget.Spec.Size, fmt.Sprintf("must be at most %d", MaxSize))})
	}
	if widget.Spec.Size != nil && *widget.Spec.Size == 0 {
		return admission.Warnings{"a Widget of size 0 runs nothing"}, nil
	}
	return nil, nil
}
