package controllerruntime

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/conversion"

	"krec.dev/guest"
	"krec.dev/guest/log"
)

// NewManager is a manager.Manager for controller-runtime's builder, in an init function:
//
//	func init() {
//		mgr := krecctrl.NewManager()
//		if err := (&FooReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
//			panic(err)
//		}
//	}
//
// The controller the builder completes is registered as the guest's reconciler (with
// controller-runtime's panic recovery and logger); the builder's For, Owns and Watches are not
// consulted — the host watches what the manifest names. There is no cache, webhook server,
// metrics or health endpoint here: the host has those. Start is not needed and returns at once.
func NewManager() manager.Manager {
	return &krecManager{client: Client(), logger: log.Log.WithName("manager")}
}

type krecManager struct {
	client     crclient.Client
	logger     logr.Logger
	registered bool
}

var _ manager.Manager = &krecManager{}

// Add registers a controller (a runnable that reconciles) as the guest's reconciler; other
// runnables are refused: the host runs the guest only to reconcile.
func (m *krecManager) Add(runnable manager.Runnable) error {
	r, ok := runnable.(crreconcile.Reconciler)
	if !ok {
		return fmt.Errorf("a krec guest runs no %T: the host calls the guest's reconciler and webhooks only", runnable)
	}
	if m.registered {
		return errors.New("a krec guest has one reconciler: register one controller per guest (one manifest each)")
	}
	m.registered = true
	injectClient(runnable, m.client)
	Register(r)
	return nil
}

// injectClient gives the controller's reconciler the manager's client when it asks for one
// with InjectClient (controller-runtime's injection before v0.15, which older reconcilers —
// seed 000's among them — still rely on).
func injectClient(controller manager.Runnable, c crclient.Client) {
	v := reflect.ValueOf(controller)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return
	}
	do := v.Elem().FieldByName("Do")
	if !do.IsValid() || !do.CanInterface() {
		return
	}
	if injector, ok := do.Interface().(interface{ InjectClient(crclient.Client) error }); ok {
		if err := injector.InjectClient(c); err != nil {
			panic(fmt.Sprintf("krec guest: injecting the client into %T: %v", do.Interface(), err))
		}
	}
}

func (m *krecManager) Elected() <-chan struct{} {
	elected := make(chan struct{})
	close(elected) // the host runs the guest only where it leads
	return elected
}

func (m *krecManager) AddMetricsServerExtraHandler(string, http.Handler) error {
	return errors.New("a krec guest serves no metrics: the host's /metrics counts its reconciles")
}

// AddHealthzCheck and AddReadyzCheck accept and ignore the check: the host's health is the
// guest's.
func (m *krecManager) AddHealthzCheck(string, healthz.Checker) error { return nil }
func (m *krecManager) AddReadyzCheck(string, healthz.Checker) error  { return nil }

// Start returns at once: the host runs the guest.
func (m *krecManager) Start(context.Context) error { return nil }

func (m *krecManager) GetWebhookServer() webhook.Server { return nil }
func (m *krecManager) GetLogger() logr.Logger           { return m.logger }
func (m *krecManager) GetControllerOptions() config.Controller {
	// The host's workqueue serves the guest; this controller's own never starts.
	return config.Controller{}
}
func (m *krecManager) GetConverterRegistry() conversion.Registry { return nil }

func (m *krecManager) GetHTTPClient() *http.Client            { return nil }
func (m *krecManager) GetConfig() *rest.Config                { return &rest.Config{} }
func (m *krecManager) GetCache() cache.Cache                  { return nil }
func (m *krecManager) GetScheme() *runtime.Scheme             { return guest.Scheme }
func (m *krecManager) GetClient() crclient.Client             { return m.client }
func (m *krecManager) GetFieldIndexer() crclient.FieldIndexer { return indexer{} }
func (m *krecManager) GetRESTMapper() meta.RESTMapper         { return m.client.RESTMapper() }
func (m *krecManager) GetAPIReader() crclient.Reader          { return m.client }

// GetEventRecorderFor records the guest's Events through the host (guest.Recorder).
func (m *krecManager) GetEventRecorderFor(string) record.EventRecorder { return guest.Recorder() }

// GetEventRecorder records the guest's Events through the host (events.k8s.io's shape).
func (m *krecManager) GetEventRecorder(string) events.EventRecorder { return eventsRecorder{} }

type eventsRecorder struct{}

func (eventsRecorder) Eventf(regarding, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	guest.Recorder().Eventf(regarding, eventtype, reason, note, args...)
}

// indexer accepts field indexes: the host's cache answers field selectors itself.
type indexer struct{}

func (indexer) IndexField(context.Context, crclient.Object, string, crclient.IndexerFunc) error {
	return nil
}
