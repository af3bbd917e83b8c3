// The pod-reader as a krec guest: podreader.PodReader registered through the controller-runtime
// adapter (the host counts its reconciles).
package main

import (
	"krec.dev/bench/controller-runtime/podreader"
	krecctrl "krec.dev/guest/controllerruntime"
)

func init() { krecctrl.Register(&podreader.PodReader{Client: krecctrl.Client()}) }

func main() {}
