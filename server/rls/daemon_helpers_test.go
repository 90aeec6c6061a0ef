package rls_test

import (
	"testing"

	"github.com/geolimit/geolimit/server"
	"github.com/geolimit/geolimit/server/internal/servertest"
)

// The daemon's rate limit service, tested through the daemon (a real gRPC
// listener, the config's rls section, its metrics).

const (
	wait = servertest.Wait
	poll = servertest.Poll
)

type testApp struct {
	*servertest.Harness[*server.App]
}

// startApp starts a daemon on yaml (appended to servertest.BaseYAML).
func startApp(t *testing.T, yaml string) *testApp {
	t.Helper()
	return &testApp{servertest.Start(t, yaml, func(s servertest.Setup) (*server.App, error) {
		return server.New(server.Options{Config: s.Config, ConfigPath: s.Path, Self: s.Self, Clock: s.Clock,
			Version: "test", WatchInterval: -1, Logger: s.Logger})
	})}
}
