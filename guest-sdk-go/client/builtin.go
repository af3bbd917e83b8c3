package client

import (
	"reflect"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// builtinGroupVersions is the group and version of each k8s.io/api package whose types
// client-go's scheme registers: the client knows a built-in kind by its Go type's package and
// name, without registering all of them (client-go's scheme links every API group's types and
// their registration into a guest, a third of a Go component and of its start-up). A test
// checks it against client-go's scheme.
var builtinGroupVersions = map[string]schema.GroupVersion{
	"k8s.io/api/admissionregistration/v1":       {Group: "admissionregistration.k8s.io", Version: "v1"},
	"k8s.io/api/admissionregistration/v1alpha1": {Group: "admissionregistration.k8s.io", Version: "v1alpha1"},
	"k8s.io/api/admissionregistration/v1beta1":  {Group: "admissionregistration.k8s.io", Version: "v1beta1"},
	"k8s.io/api/apiserverinternal/v1alpha1":     {Group: "internal.apiserver.k8s.io", Version: "v1alpha1"},
	"k8s.io/api/apps/v1":                        {Group: "apps", Version: "v1"},
	"k8s.io/api/apps/v1beta1":                   {Group: "apps", Version: "v1beta1"},
	"k8s.io/api/apps/v1beta2":                   {Group: "apps", Version: "v1beta2"},
	"k8s.io/api/authentication/v1":              {Group: "authentication.k8s.io", Version: "v1"},
	"k8s.io/api/authentication/v1alpha1":        {Group: "authentication.k8s.io", Version: "v1alpha1"},
	"k8s.io/api/authentication/v1beta1":         {Group: "authentication.k8s.io", Version: "v1beta1"},
	"k8s.io/api/authorization/v1":               {Group: "authorization.k8s.io", Version: "v1"},
	"k8s.io/api/authorization/v1beta1":          {Group: "authorization.k8s.io", Version: "v1beta1"},
	"k8s.io/api/autoscaling/v1":                 {Group: "autoscaling", Version: "v1"},
	"k8s.io/api/autoscaling/v2":                 {Group: "autoscaling", Version: "v2"},
	"k8s.io/api/batch/v1":                       {Group: "batch", Version: "v1"},
	"k8s.io/api/batch/v1beta1":                  {Group: "batch", Version: "v1beta1"},
	"k8s.io/api/certificates/v1":                {Group: "certificates.k8s.io", Version: "v1"},
	"k8s.io/api/certificates/v1alpha1":          {Group: "certificates.k8s.io", Version: "v1alpha1"},
	"k8s.io/api/certificates/v1beta1":           {Group: "certificates.k8s.io", Version: "v1beta1"},
	"k8s.io/api/coordination/v1":                {Group: "coordination.k8s.io", Version: "v1"},
	"k8s.io/api/coordination/v1alpha2":          {Group: "coordination.k8s.io", Version: "v1alpha2"},
	"k8s.io/api/coordination/v1beta1":           {Group: "coordination.k8s.io", Version: "v1beta1"},
	"k8s.io/api/core/v1":                        {Group: "", Version: "v1"},
	"k8s.io/api/discovery/v1":                   {Group: "discovery.k8s.io", Version: "v1"},
	"k8s.io/api/discovery/v1beta1":              {Group: "discovery.k8s.io", Version: "v1beta1"},
	"k8s.io/api/events/v1":                      {Group: "events.k8s.io", Version: "v1"},
	"k8s.io/api/events/v1beta1":                 {Group: "events.k8s.io", Version: "v1beta1"},
	"k8s.io/api/extensions/v1beta1":             {Group: "extensions", Version: "v1beta1"},
	"k8s.io/api/flowcontrol/v1":                 {Group: "flowcontrol.apiserver.k8s.io", Version: "v1"},
	"k8s.io/api/flowcontrol/v1beta1":            {Group: "flowcontrol.apiserver.k8s.io", Version: "v1beta1"},
	"k8s.io/api/flowcontrol/v1beta2":            {Group: "flowcontrol.apiserver.k8s.io", Version: "v1beta2"},
	"k8s.io/api/flowcontrol/v1beta3":            {Group: "flowcontrol.apiserver.k8s.io", Version: "v1beta3"},
	"k8s.io/api/networking/v1":                  {Group: "networking.k8s.io", Version: "v1"},
	"k8s.io/api/networking/v1beta1":             {Group: "networking.k8s.io", Version: "v1beta1"},
	"k8s.io/api/node/v1":                        {Group: "node.k8s.io", Version: "v1"},
	"k8s.io/api/node/v1alpha1":                  {Group: "node.k8s.io", Version: "v1alpha1"},
	"k8s.io/api/node/v1beta1":                   {Group: "node.k8s.io", Version: "v1beta1"},
	"k8s.io/api/policy/v1":                      {Group: "policy", Version: "v1"},
	"k8s.io/api/policy/v1beta1":                 {Group: "policy", Version: "v1beta1"},
	"k8s.io/api/rbac/v1":                        {Group: "rbac.authorization.k8s.io", Version: "v1"},
	"k8s.io/api/rbac/v1alpha1":                  {Group: "rbac.authorization.k8s.io", Version: "v1alpha1"},
	"k8s.io/api/rbac/v1beta1":                   {Group: "rbac.authorization.k8s.io", Version: "v1beta1"},
	"k8s.io/api/resource/v1":                    {Group: "resource.k8s.io", Version: "v1"},
	"k8s.io/api/resource/v1alpha3":              {Group: "resource.k8s.io", Version: "v1alpha3"},
	"k8s.io/api/resource/v1beta1":               {Group: "resource.k8s.io", Version: "v1beta1"},
	"k8s.io/api/resource/v1beta2":               {Group: "resource.k8s.io", Version: "v1beta2"},
	"k8s.io/api/scheduling/v1":                  {Group: "scheduling.k8s.io", Version: "v1"},
	"k8s.io/api/scheduling/v1alpha2":            {Group: "scheduling.k8s.io", Version: "v1alpha2"},
	"k8s.io/api/scheduling/v1beta1":             {Group: "scheduling.k8s.io", Version: "v1beta1"},
	"k8s.io/api/storage/v1":                     {Group: "storage.k8s.io", Version: "v1"},
	"k8s.io/api/storage/v1alpha1":               {Group: "storage.k8s.io", Version: "v1alpha1"},
	"k8s.io/api/storage/v1beta1":                {Group: "storage.k8s.io", Version: "v1beta1"},
	"k8s.io/api/storagemigration/v1beta1":       {Group: "storagemigration.k8s.io", Version: "v1beta1"},
}

// builtinKind is the kind of obj's type when it is one of k8s.io/api's: its package's group
// and version, its type's name.
func builtinKind(obj runtime.Object) (schema.GroupVersionKind, bool) {
	t := reflect.TypeOf(obj)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return schema.GroupVersionKind{}, false
	}
	t = t.Elem()
	gv, ok := builtinGroupVersions[t.PkgPath()]
	if !ok {
		return schema.GroupVersionKind{}, false
	}
	return gv.WithKind(t.Name()), true
}
