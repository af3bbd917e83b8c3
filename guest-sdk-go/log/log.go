// Package log gives Go guests a logr.Logger writing into the host's log (tagged with the
// guest and the request), as controller-runtime's `log.FromContext(ctx)` does; klog's output
// (client-go and apimachinery log through it) goes there too.
package log

import (
	"context"
	"fmt"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"krec.dev/guest/internal/host"
)

// Log is the guest's logger.
var Log = logr.New(&sink{})

func init() { klog.SetLogger(Log) }

// FromContext is the logger in ctx, or Log.
func FromContext(ctx context.Context, keysAndValues ...any) logr.Logger {
	logger, err := logr.FromContext(ctx)
	if err != nil {
		logger = Log
	}
	return logger.WithValues(keysAndValues...)
}

// IntoContext is ctx with logger.
func IntoContext(ctx context.Context, logger logr.Logger) context.Context {
	return logr.NewContext(ctx, logger)
}

type sink struct {
	name   string
	values []any
}

func (s *sink) Init(logr.RuntimeInfo) {}

// Enabled: V(0) is info, V(1) debug, V(2) and more trace; the host filters by its level.
func (s *sink) Enabled(int) bool { return true }

func (s *sink) Info(level int, msg string, keysAndValues ...any) {
	hostLevel := host.Info
	switch {
	case level >= 2:
		hostLevel = host.Trace
	case level == 1:
		hostLevel = host.Debug
	}
	host.Log(hostLevel, s.line(msg, keysAndValues))
}

func (s *sink) Error(err error, msg string, keysAndValues ...any) {
	host.Log(host.Error, s.line(msg, append([]any{"error", err}, keysAndValues...)))
}

func (s *sink) WithValues(keysAndValues ...any) logr.LogSink {
	return &sink{name: s.name, values: append(append([]any{}, s.values...), keysAndValues...)}
}

func (s *sink) WithName(name string) logr.LogSink {
	if s.name != "" {
		name = s.name + "." + name
	}
	return &sink{name: name, values: s.values}
}

func (s *sink) line(msg string, keysAndValues []any) string {
	var b strings.Builder
	if s.name != "" {
		b.WriteString(s.name)
		b.WriteString(": ")
	}
	b.WriteString(msg)
	all := append(append([]any{}, s.values...), keysAndValues...)
	for i := 0; i+1 < len(all); i += 2 {
		fmt.Fprintf(&b, " %v=%v", all[i], all[i+1])
	}
	if len(all)%2 == 1 {
		fmt.Fprintf(&b, " %v", all[len(all)-1])
	}
	return b.String()
}
