package rls_test

import (
	"testing"

	"github.com/geolimit/geolimit/server"
	"github.com/geolimit/geolimit/server/internal/daemontest"
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

func startApp(t *testing.T, yaml string) *testApp { return &testApp{daemontest.Start(t, yaml)} }
