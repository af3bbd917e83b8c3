// misbehave, in Go: a hostile guest for the containment tests. The request's name says what it
// does: `ok` returns, `loop` spins forever, `oom` allocates until it is stopped, `panic`
// panics, `forbidden` reads what its manifest does not permit, `random` fails with a message
// made of Go's map iteration order and math/rand (what `krec replay` must fix), `churn` lists
// the Pods of namespace churn many times while making garbage (the host writes each answer
// into the guest through its allocator, where Go's collector must not run).
package main

import (
	"context"
	"fmt"
	"math/rand"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"krec.dev/guest"
	"krec.dev/guest/client"
	"krec.dev/guest/reconcile"
)

// Misbehave misbehaves as asked.
type Misbehave struct{ client.Client }

var hoard [][]byte

// Reconcile does what the request's name says.
func (m *Misbehave) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	switch req.Name {
	case "loop":
		for i := 0; ; i++ {
			_ = i
		}
	case "oom":
		for {
			chunk := make([]byte, 1<<20)
			for i := 0; i < len(chunk); i += 4096 {
				chunk[i] = 1 // every page touched: resident, not a lazily zeroed page
			}
			hoard = append(hoard, chunk)
		}
	case "panic":
		panic("misbehave was asked to panic")
	case "random":
		set := map[int]bool{}
		for i := 0; i < 16; i++ {
			set[i] = true
		}
		var order []string
		for k := range set {
			order = append(order, strconv.Itoa(k))
		}
		return reconcile.Result{}, fmt.Errorf("map order %s, rand %d", strings.Join(order, ","), rand.Int())
	case "churn":
		var kept [][]byte
		for i := 0; i < 200; i++ {
			pods := &corev1.PodList{}
			if err := m.List(ctx, pods, client.InNamespace("churn")); err != nil {
				return reconcile.Result{}, err
			}
			kept = append(kept, make([]byte, 256<<10))
			if len(kept) > 8 {
				kept = kept[1:]
			}
		}
		return reconcile.Result{}, nil
	case "forbidden":
		secret := &corev1.Secret{}
		return reconcile.Result{}, m.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: "anything"}, secret)
	}
	return reconcile.Result{}, nil
}

func init() { guest.Reconcile(&Misbehave{Client: guest.Client()}) }

func main() {}
