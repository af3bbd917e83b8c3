package main

import (
	"context"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	samplev1alpha1 "k8s.io/sample-controller/pkg/apis/samplecontroller/v1alpha1"

	"krec.dev/guest"
	"krec.dev/guest/fake"
	"krec.dev/guest/webhook/admission"
)

func foo(name, deployment string) *samplev1alpha1.Foo {
	one := int32(1) // sample-controller's FooSpec sends `replicas: null` otherwise, which the CRD refuses
	return &samplev1alpha1.Foo{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       samplev1alpha1.FooSpec{DeploymentName: deployment, Replicas: &one},
	}
}

// creating is the context of a webhook judging the create of obj.
func creating(obj *samplev1alpha1.Foo) context.Context {
	return admission.NewContextWithRequest(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Name: obj.Name, Namespace: obj.Namespace,
	}})
}

func TestFoosShouldBeJudgedAsTheRustValidatorJudgesThem(t *testing.T) {
	cluster := fake.NewCluster(t).WithScheme(guest.Scheme)
	cluster.AddFiles(t, "../foo-controller/crd/foo-crd.yaml")
	cluster.Add(t, foo("first", "web"))
	v := &FooValidator{Reader: cluster.Reader()}

	cases := []struct {
		foo     *samplev1alpha1.Foo
		message string // "" when allowed
	}{
		{foo("ok", "api"), ""},
		{foo("bad", "Not_A_Name"), `spec.deploymentName: Invalid value: "Not_A_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character`},
		{foo("empty", ""), `spec.deploymentName: Invalid value: "": must not be empty`},
		{foo("second", "web"), `spec.deploymentName: Duplicate value: "web": already used by Foo "first" in namespace "default"`},
		{foo("first", "web"), ""}, // its own Deployment
	}
	for _, c := range cases {
		_, err := v.ValidateCreate(creating(c.foo), c.foo)
		switch {
		case c.message == "" && err != nil:
			t.Errorf("%s: denied: %v", c.foo.Name, err)
		case c.message != "" && (!apierrors.IsInvalid(err) || err.Error() != c.message):
			t.Errorf("%s: %v, want the 422 %q", c.foo.Name, err, c.message)
		}
	}
}
