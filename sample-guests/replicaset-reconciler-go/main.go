// replicaset-reconciler-go: seed 000's controller-runtime example as a krec guest. The
// post's main builds the controller with a manager and starts it; a guest's wiring is the same
// builder call, in an init function, on krec's manager (the host runs the informers, the
// workqueue and leader election, and watches what manifest.yaml names).
package main

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"

	krecctrl "krec.dev/guest/controllerruntime"
)

func init() {
	mgr := krecctrl.NewManager()
	err := builder.
		ControllerManagedBy(mgr).
		For(&appsv1.ReplicaSet{}).
		Owns(&corev1.Pod{}).
		Complete(&ReplicaSetReconciler{})
	if err != nil {
		panic(err)
	}
}

func main() {}
