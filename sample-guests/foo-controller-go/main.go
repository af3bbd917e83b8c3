package main

import (
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	samplev1alpha1 "k8s.io/sample-controller/pkg/apis/samplecontroller/v1alpha1"

	"krec.dev/guest"
	krecctrl "krec.dev/guest/controllerruntime"
)

// The wiring a controller-runtime main does, in an init function on krec's manager: the host
// runs the informers, the workqueue and leader election, and watches what manifest.yaml names.
func init() {
	utilruntime.Must(samplev1alpha1.AddToScheme(guest.Scheme))
	mgr := krecctrl.NewManager()
	reconciler := &FooReconciler{
		Client:   mgr.GetClient(),
		Scheme:   mgr.GetScheme(),
		Recorder: mgr.GetEventRecorderFor("foo-controller-go"),
	}
	utilruntime.Must(reconciler.SetupWithManager(mgr))
}

func main() {}
