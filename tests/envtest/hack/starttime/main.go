// Command starttime measures envtest's control plane: Environment.Start() until it is ready
// (the project's CRDs installed), and Stop(), over rounds, against whatever KUBEBUILDER_ASSETS
// holds. bench/envtest.py runs it beside the suites' timings.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

func main() {
	rounds := flag.Int("rounds", 5, "starts to measure")
	flag.Parse()
	var starts, stops []time.Duration
	for i := 0; i < *rounds; i++ {
		env := &envtest.Environment{
			CRDDirectoryPaths:     []string{filepath.Join("config", "crd", "bases")},
			ErrorIfCRDPathMissing: true,
		}
		began := time.Now()
		if _, err := env.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "starting:", err)
			os.Exit(1)
		}
		starts = append(starts, time.Since(began))
		began = time.Now()
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping:", err)
			os.Exit(1)
		}
		stops = append(stops, time.Since(began))
	}
	report := func(name string, d []time.Duration) {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		fmt.Printf("%s_ms median %.0f min %.0f max %.0f\n", name,
			ms(d[len(d)/2]), ms(d[0]), ms(d[len(d)-1]))
	}
	report("start", starts)
	report("stop", stops)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
