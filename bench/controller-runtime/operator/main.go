// The pod-reader as a controller-runtime operator: its own process, manager and informer cache
// (controller-runtime's defaults: one worker, the cache-backed client), reconciling every Pod of
// the cluster in $KUBECONFIG. It writes its count of reconciles to $POD_READER_COUNT every
// 100 ms, which the benchmark reads.
package main

import (
	"context"
	"os"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"krec.dev/bench/controller-runtime/podreader"
)

func main() {
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		panic(err)
	}
	reader := &podreader.PodReader{Client: mgr.GetClient()}
	if err := ctrl.NewControllerManagedBy(mgr).For(&corev1.Pod{}).Complete(reader); err != nil {
		panic(err)
	}
	ctx := ctrl.SetupSignalHandler()
	if path := os.Getenv("POD_READER_COUNT"); path != "" {
		go report(ctx, path, reader)
	}
	if err := mgr.Start(ctx); err != nil {
		panic(err)
	}
}

func report(ctx context.Context, path string, reader *podreader.PodReader) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			_ = os.WriteFile(path, []byte(strconv.FormatInt(reader.Reconciles.Load(), 10)), 0o644)
		}
	}
}
