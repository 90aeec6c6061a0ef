package api_test

import (
	"testing"

	"github.com/geolimit/geolimit/server"
	"github.com/geolimit/geolimit/server/internal/daemontest"
	"github.com/geolimit/geolimit/server/internal/servertest"
)

// The decision API, tested through the daemon (a real listener, the
// config's rules, its metrics).

const t0 = servertest.T0

type testApp struct {
	*servertest.Harness[*server.App]
}

func startApp(t *testing.T, yaml string) *testApp { return &testApp{daemontest.Start(t, yaml)} }
