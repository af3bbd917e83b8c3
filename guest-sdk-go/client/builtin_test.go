package client

import (
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// The table of built-in packages is client-go's scheme's, package by package: a k8s.io/api
// version that adds a group or version fails here until the table has it.
func TestBuiltinGroupVersionsAreClientGosSchemes(t *testing.T) {
	want := map[string]schema.GroupVersion{}
	for gvk, typ := range clientgoscheme.Scheme.AllKnownTypes() {
		if strings.HasPrefix(typ.PkgPath(), "k8s.io/api/") {
			want[typ.PkgPath()] = gvk.GroupVersion()
		}
	}
	for pkg, gv := range want {
		if got, ok := builtinGroupVersions[pkg]; !ok || got != gv {
			t.Errorf("%s: the table has %v (known: %v), client-go's scheme %v", pkg, got, ok, gv)
		}
	}
	for pkg := range builtinGroupVersions {
		if _, ok := want[pkg]; !ok {
			t.Errorf("%s is in the table, not in client-go's scheme", pkg)
		}
	}
	// Every kind client-go's scheme knows of k8s.io/api is named alike without it.
	for gvk, typ := range clientgoscheme.Scheme.AllKnownTypes() {
		if !strings.HasPrefix(typ.PkgPath(), "k8s.io/api/") {
			continue
		}
		obj, ok := runtimeNew(typ)
		if !ok {
			continue
		}
		got, err := GVKForObject(obj, runtime.NewScheme())
		if err != nil || got != gvk {
			t.Errorf("%s: %v, %v", typ, got, err)
		}
	}
}

func TestGVKForObjectWithoutAScheme(t *testing.T) {
	for obj, want := range map[runtime.Object]schema.GroupVersionKind{
		&appsv1.ReplicaSet{}:      appsv1.SchemeGroupVersion.WithKind("ReplicaSet"),
		&rbacv1.ClusterRoleList{}: rbacv1.SchemeGroupVersion.WithKind("ClusterRoleList"),
	} {
		if got, err := GVKForObject(obj, nil); err != nil || got != want {
			t.Errorf("%T: %v, %v; want %v", obj, got, err, want)
		}
	}
	// A type of no scheme and not built in is named in the error.
	_, err := GVKForObject(&notAKind{}, runtime.NewScheme())
	if err == nil || !strings.Contains(err.Error(), "client.notAKind") || !strings.Contains(err.Error(), "AddToScheme") {
		t.Errorf("want an error naming the type and AddToScheme, got %v", err)
	}
}

type notAKind struct{ appsv1.ReplicaSet }

// runtimeNew is a new object of typ.
func runtimeNew(typ reflect.Type) (runtime.Object, bool) {
	obj, ok := reflect.New(typ).Interface().(runtime.Object)
	return obj, ok
}
