package proxy_test

import (
	"testing"

	"github.com/geolimit/geolimit/server"
	"github.com/geolimit/geolimit/server/internal/daemontest"
	"github.com/geolimit/geolimit/server/internal/servertest"
)

// The reverse proxy and the forward-auth endpoint, tested through the
// daemon (real listeners, a real upstream, the config's proxy section, its
// metrics).

type testApp struct {
	*servertest.Harness[*server.App]
}

func startApp(t *testing.T, yaml string, opts ...func(*server.Options)) *testApp {
	return &testApp{daemontest.Start(t, yaml, opts...)}
}
