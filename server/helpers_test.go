package server

import (
	"testing"

	"github.com/geolimit/geolimit/server/internal/servertest"
)

// t0 is the tests' start time (servertest.T0).
const t0 = servertest.T0

var testSelf = servertest.Self

// wait and poll bound the tests' waits for a condition (require.Eventually).
const (
	wait = servertest.Wait
	poll = servertest.Poll
)

// testApp is a started App (servertest.Harness) that this package's tests add
// their own helpers to.
type testApp struct {
	*servertest.Harness[*App]
}

type resp = servertest.Resp

type testOpt func(*Options)

// startApp writes yaml (appended to servertest.BaseYAML) to a file and
// starts an App on it with a manual clock at t0.
func startApp(t *testing.T, yaml string, opts ...testOpt) *testApp {
	t.Helper()
	return &testApp{servertest.Start(t, yaml, func(s servertest.Setup) (*App, error) {
		o := Options{Config: s.Config, ConfigPath: s.Path, Self: s.Self, Clock: s.Clock, Version: "test",
			WatchInterval: -1, Logger: s.Logger}
		for _, f := range opts {
			f(&o)
		}
		return New(o)
	})}
}
