package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// childEnv makes the test binary run the daemon instead of the tests, so a
// test can kill a real edge process with SIGKILL.
const childEnv = "GEOLIMIT_EDGE_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "edge:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child is an edge daemon in its own process.
type child struct {
	cmd *exec.Cmd
	out *syncBuffer
}

func startChild(t *testing.T, path string) *child {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	c := &child{cmd: exec.Command(exe, "-config", path, "-watch-interval", "0"), out: &syncBuffer{}}
	c.cmd.Env = append(os.Environ(), childEnv+"=1")
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	require.NoError(t, c.cmd.Start())
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("child %s output:\n%s", path, c.out.String())
		}
	})
	return c
}

// kill ends the process with SIGKILL: no shutdown hook runs.
func (c *child) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Kill())
	_ = c.cmd.Wait()
}

func status(url string) int {
	res, err := http.Get(url)
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

// restartRegionYAML is a one-node PoP hosting its region's embedded
// nats-server, linked by a gateway to the other region (the README's
// multi-region layout).
func restartRegionYAML(p examplePorts, t *testing.T, region, pop, other, otherPoP string) string {
	return fmt.Sprintf(`
node: {id: %[2]s-1, region: %[1]s, pop: %[2]s}
listen: {api: %[5]q}
nats:
  embedded:
    listen: %[6]q
    gateway:
      name: %[1]s
      listen: %[7]q
      gateways: [{name: %[3]s, urls: ["nats://%[8]s"]}]
rules:
  - {name: login, limit: 10, window: 1h, scope: global}
replication:
  flush_interval: 20ms
  peer_timeout: 1s
  expected_pops: [%[3]s/%[4]s]
  # A burst on one node spends the whole limit at once (no split of the
  # headroom with the other region): what is admitted depends on the counts
  # alone.
  near_limit_allowance: false
`, region, pop, other, otherPoP, p.addr(t, pop+"-api"), p.addr(t, region+"-nats"), p.addr(t, region+"-gw"), p.addr(t, other+"-gw"))
}

// TestKilledNATSHostReadmitsNothing kills (SIGKILL) the one node of a PoP
// that runs its region's nats-server, mid-window, and starts it again: once
// it reports ready it must not admit again what it admitted before, though
// its counts live only in the other region, which relays them back over the
// re-formed gateway.
func TestKilledNATSHostReadmitsNothing(t *testing.T) {
	ports := examplePorts{}
	ams := startDaemon(t, writeFile(t, restartRegionYAML(ports, t, "eu", "ams", "ap", "sin")))
	defer ams.stop(t)
	sinPath := writeFile(t, restartRegionYAML(ports, t, "ap", "sin", "eu", "ams"))
	sinAPI := "http://" + ports.addr(t, "sin-api")
	sin := startChild(t, sinPath)
	slow := func(what string, cond func() bool) {
		t.Helper()
		require.Eventually(t, cond, 30*time.Second, 10*time.Millisecond, "waiting for %s", what)
	}
	slow("sin ready", func() bool { return status(sinAPI+"/readyz") == http.StatusOK })
	slow("ams ready", func() bool { return status(ams.api+"/readyz") == http.StatusOK })
	heard := func(api string) bool {
		var st struct {
			Partitions []string `json:"partitions"`
			RemotePoPs []any    `json:"remote_pops"`
		}
		getJSON(t, api+"/v1/status", &st)
		return len(st.RemotePoPs) == 1 && len(st.Partitions) == 0
	}
	slow("the regions hear each other", func() bool { return heard(sinAPI) && heard(ams.api) })
	spend := func(api string) (admitted int) {
		for range 10 {
			code, body := post(t, api+"/v1/check", `{"rule":"login","key":"mallory"}`)
			require.Contains(t, []int{http.StatusOK, http.StatusTooManyRequests}, code, body)
			if code == http.StatusOK {
				admitted++
			}
		}
		return admitted
	}
	require.Equal(t, 10, spend(sinAPI))
	slow("ams holds sin's counts", func() bool { return keyTotal(t, ams.api, "login", "mallory") == 10 })

	sin.kill(t)
	startChild(t, sinPath)
	slow("the restarted sin ready", func() bool { return status(sinAPI+"/readyz") == http.StatusOK })
	assert.Zero(t, spend(sinAPI), "admitted again after a restart: the limit is 10 per hour")
	var st struct {
		Synced  bool `json:"synced"`
		Startup struct {
			TimedOut bool  `json:"timed_out"`
			TookMS   int64 `json:"took_ms"`
		} `json:"startup_sync"`
	}
	getJSON(t, sinAPI+"/v1/status", &st)
	assert.True(t, st.Synced)
	if !assert.False(t, st.Startup.TimedOut, "ams's relay and marker arrive before replication.startup_sync") {
		for _, api := range []string{sinAPI, ams.api} {
			var raw map[string]any
			getJSON(t, api+"/v1/status", &raw)
			t.Logf("%s: protocol %v startup %v remote %v", api, raw["protocol"], raw["startup_sync"], raw["remote_pops"])
		}
	}
	t.Logf("restarted sin synced after %dms", st.Startup.TookMS)
}
