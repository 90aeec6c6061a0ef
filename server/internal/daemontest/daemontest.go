// Package daemontest starts the edge daemon (server.App) for the tests of
// its front ends (server/rls, server/proxy, ...), through servertest:
//
//	ta := daemontest.Start(t, servertest.ProxyYAML(up.URL, "", rules))
//	r := ta.Proxy("GET", "/api")
//
// Package server's own tests build their daemon in their helpers, as they
// cannot import a package that imports server.
package daemontest

import (
	"testing"

	"github.com/geolimit/geolimit/server"
	"github.com/geolimit/geolimit/server/internal/servertest"
)

// Start writes yaml (appended to servertest.BaseYAML) to a file and starts
// a daemon on it with a manual clock at servertest.T0, its options changed
// by opts; it shuts down when the test ends.
func Start(t *testing.T, yaml string, opts ...func(*server.Options)) *servertest.Harness[*server.App] {
	t.Helper()
	return servertest.Start(t, yaml, func(s servertest.Setup) (*server.App, error) {
		o := server.Options{Config: s.Config, ConfigPath: s.Path, Self: s.Self, Clock: s.Clock, Version: "test",
			WatchInterval: -1, Logger: s.Logger}
		for _, f := range opts {
			f(&o)
		}
		return server.New(o)
	})
}
