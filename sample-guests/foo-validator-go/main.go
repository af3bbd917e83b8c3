// foo-validator in Go: a validating webhook for sample-controller's Foo, with
// controller-runtime's CustomValidator shape — the same verdicts and messages as the Rust
// foo-validator. A Foo is denied when its spec.deploymentName is not a valid Deployment name (a
// DNS-1123 subdomain) or is already used by another Foo in its namespace (listed from the host's
// cache), so two Foos never fight over one Deployment.
package main

import (
	"context"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	samplev1alpha1 "k8s.io/sample-controller/pkg/apis/samplecontroller/v1alpha1"

	"krec.dev/guest"
	"krec.dev/guest/client"
	"krec.dev/guest/webhook/admission"
)

// FooValidator judges Foos.
type FooValidator struct {
	// Reader reads other Foos from the host's cache.
	Reader client.Client
}

var deploymentName = field.NewPath("spec", "deploymentName")

// ValidateCreate judges a new Foo.
func (v *FooValidator) ValidateCreate(ctx context.Context, obj runtime.Object) (admission.Warnings, error) {
	return nil, v.validate(ctx, obj)
}

// ValidateUpdate judges a changed Foo.
func (v *FooValidator) ValidateUpdate(ctx context.Context, _, newObj runtime.Object) (admission.Warnings, error) {
	return nil, v.validate(ctx, newObj)
}

// ValidateDelete lets every Foo go.
func (v *FooValidator) ValidateDelete(context.Context, runtime.Object) (admission.Warnings, error) {
	return nil, nil
}

func (v *FooValidator) validate(ctx context.Context, obj runtime.Object) error {
	foo, ok := obj.(*samplev1alpha1.Foo)
	if !ok {
		return fmt.Errorf("expected a Foo, got %T", obj)
	}
	wanted := foo.Spec.DeploymentName
	if problem := dnsSubdomainProblem(wanted); problem != "" {
		return invalid(field.Invalid(deploymentName, wanted, problem))
	}
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return err
	}
	me := foo.Name
	if me == "" {
		me = req.Name
	}
	others := &samplev1alpha1.FooList{}
	if err := v.Reader.List(ctx, others, client.InNamespace(req.Namespace)); err != nil {
		// Cannot check: panic, so the API server's failurePolicy decides (as the Rust one traps).
		panic(fmt.Sprintf("listing Foos: %v", err))
	}
	for _, other := range others.Items {
		if other.Spec.DeploymentName == wanted && other.Name != me {
			return invalid(&field.Error{Type: field.ErrorTypeDuplicate, Field: deploymentName.String(), BadValue: wanted,
				Detail: fmt.Sprintf("already used by Foo %q in namespace %q", other.Name, req.Namespace)})
		}
	}
	return nil
}

// invalid is a 422 Invalid denial whose message is the field error itself (kubectl prints it
// after `denied the request: `).
func invalid(problem *field.Error) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusUnprocessableEntity,
		Reason:  metav1.StatusReasonInvalid,
		Message: problem.Error(),
	}}
}

// dnsSubdomainProblem says why name is not a DNS-1123 subdomain (what a Deployment's name must
// be), or "" when it is one.
func dnsSubdomainProblem(name string) string {
	switch {
	case name == "":
		return "must not be empty"
	case len(name) > validation.DNS1123SubdomainMaxLength:
		return validation.MaxLenError(validation.DNS1123SubdomainMaxLength)
	case len(validation.IsDNS1123Subdomain(name)) > 0:
		return "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
	}
	return ""
}

func init() {
	if err := samplev1alpha1.AddToScheme(guest.Scheme); err != nil {
		panic(err)
	}
	guest.Validator(&samplev1alpha1.Foo{}, &FooValidator{Reader: guest.Reader()})
}

func main() {}
